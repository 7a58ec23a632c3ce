"""`corral up | down | status | join | token | node`: start, stop, look at and grow the cluster.

`up`, `down` and `join` act on this user's own cluster ($CORRAL_HOME, else the system home
for root, ~/.corral for others); `status` on the cluster the Slurm commands talk to, which
for a user without a cluster of their own is the one root started (corral.paths).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

from corral import paths
from corral.cli import client

PROG = "corral"


def _ping() -> dict[str, Any] | None:
    try:
        return client.get("/v1/ping")  # type: ignore[no-any-return]
    except (client.NotRunning, client.ApiError, OSError):
        return None


def _read_pid(name: str, home: str) -> int | None:
    try:
        with open(paths.pid_file(name, home)) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return pid if _process_alive(pid) else None


def _process_alive(pid: int) -> bool:
    """Running, not a zombie: an orphan's exit may stay unreaped where init does not reap."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def default_config_text() -> str:
    """slurm.conf for this machine: one node with its detected hardware, one partition."""
    from corral.agent.hw import detect

    h = detect()
    node = os.uname().nodename.split(".")[0] or "localhost"
    mem = max(1, int(h.memory_mb * 0.95))  # leave the OS some room, as admins do
    gres = ""
    if h.gpus:
        gtype = h.gpu_type
        gres = f" Gres=gpu:{gtype}:{len(h.gpus)}" if gtype else f" Gres=gpu:{len(h.gpus)}"
    lines = [
        "# Corral cluster configuration (slurm.conf syntax), written by `corral up`.",
        "# Edit and run `corral down && corral up` to apply. Nodes may override hardware,",
        "# e.g. NodeName=node[1-4] CPUs=16 RealMemory=64000 Gres=gpu:4",
        "ClusterName=corral",
        "KillWait=30",
        "MinJobAge=300",
        f"NodeName={node} CPUs={h.cpus} Sockets={h.sockets} CoresPerSocket={h.cores_per_socket} "
        f"ThreadsPerCore={h.threads_per_core} RealMemory={mem}{gres}",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
    ]
    if h.gpu_note and not h.gpus:
        lines.insert(3, f"# GPUs: none found ({h.gpu_note})")
    return "\n".join(lines) + "\n"


def _spawn(args: list[str], log_path: str, foreground: bool) -> subprocess.Popen[bytes]:
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    return subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, start_new_session=not foreground,
                            close_fds=True)


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(what)


def cmd_up(args: argparse.Namespace) -> int:
    home = paths.corral_home()
    if not os.path.exists(paths.socket_path(home)) and _read_pid("agent", home) is not None \
            and os.path.exists(paths.agent_socket_path(home)):
        print(f"corral: {home} joined another machine's cluster (`corral down` leaves it)")
        return 1
    if args.listen:
        try:
            _split_listen(args.listen)
        except ValueError as e:
            print(f"corral: error: {e}", file=sys.stderr)
            return 1
    running = _ping() is not None
    if running and (_read_pid("agent", home) is not None or args.config):
        print(f"corral: the cluster of {home} is already running")
        return 0
    os.makedirs(home, mode=0o755, exist_ok=True)
    os.makedirs(paths.log_dir(home), exist_ok=True)
    cfg_path = paths.config_path(home)
    if running:
        pass  # the controller runs on; only the agent is missing (it died): start it again
    elif args.config:
        with open(args.config) as src:
            text = src.read()
        with open(cfg_path, "w") as dst:
            dst.write(text)
    elif not os.path.exists(cfg_path):
        print("corral: detecting this machine's CPUs, memory and GPUs …", flush=True)
        with open(cfg_path, "w") as f:
            f.write(default_config_text())
    from corral.model.config import ConfigError, parse_config

    try:
        with open(cfg_path) as f:
            cfg = parse_config(f.read())
    except ConfigError as e:
        print(f"corral: error: {cfg_path}: {e}", file=sys.stderr)
        return 1
    if not cfg.nodes:
        print(f"corral: error: {cfg_path} defines no nodes", file=sys.stderr)
        return 1
    from corral.model.hostlists import compress

    nodes = compress([n.name for n in cfg.nodes])
    # nodes whose NodeAddr is another machine's are served there, by `corral join`
    local = [n.name for n in cfg.nodes if _is_local_address(n.addr)]
    local_nodes = compress(local)
    ctl_log = os.path.join(paths.log_dir(home), "controller.log")
    agent_log = os.path.join(paths.log_dir(home), "agent.log")
    ctl: subprocess.Popen[bytes] | None = None
    if not running:
        print("corral: starting the controller …", flush=True)
        listen = ["--listen", args.listen] if args.listen else []
        ctl = _spawn(["corral.controller", "--home", home, *listen], ctl_log, args.foreground)
        with open(paths.pid_file("controller", home), "w") as f:
            f.write(str(ctl.pid))
        started = ctl
        try:
            _wait_for(lambda: started.poll() is not None or _ping() is not None, 30,
                      "controller start")
        except TimeoutError:
            print(f"corral: error: the controller did not answer; see {ctl_log}", file=sys.stderr)
            return 1
        if ctl.poll() is not None:
            print(f"corral: error: the controller exited; see {ctl_log}", file=sys.stderr)
            return 1
    agent_pid = _read_pid("agent", home)
    agent: subprocess.Popen[bytes] | None = None
    if not local:
        print("corral: no node of the configuration is on this machine; starting no agent",
              flush=True)
    elif agent_pid is not None and not args.foreground:
        # the agent outlived the controller: it reconnects by itself and re-syncs its jobs
        print(f"corral: the agent (pid {agent_pid}) is still running; it will reconnect", flush=True)
    else:
        print(f"corral: starting the agent for {local_nodes} …", flush=True)
        agent = _spawn(["corral.agent", "--home", home, "--nodes", local_nodes], agent_log,
                       args.foreground)
        with open(paths.pid_file("agent", home), "w") as f:
            f.write(str(agent.pid))

    def agent_exited() -> bool:
        return agent is not None and agent.poll() is not None

    def all_up() -> bool:
        try:
            data = client.get("/v1/nodes")
        except (client.NotRunning, client.ApiError, OSError):
            return False
        return all(n["responding"] for n in data["nodes"] if n["name"] in local)

    try:
        _wait_for(lambda: agent_exited() or all_up(), 30, "agent registration")
    except TimeoutError:
        print(f"corral: error: the agent did not register; see {agent_log}", file=sys.stderr)
        return 1
    if agent_exited():
        print(f"corral: error: the agent exited; see {agent_log}", file=sys.stderr)
        return 1
    print(f"corral: cluster {cfg.cluster_name} is up: {len(cfg.nodes)} node(s) {nodes}, "
          f"partitions {', '.join(p.name for p in cfg.partitions)}")
    print(f"  state:  {home}")
    print(f"  config: {cfg_path}")
    print(f"  socket: {paths.socket_path(home)}")
    print(f"  logs:   {paths.log_dir(home)}")
    print("  try:    sbatch --wrap 'hostname' && squeue")
    if args.listen:
        try:
            answer = client.post("/v1/tokens", {"scope": "node", "ttl": 3600, "uses": 1})
        except (client.NotRunning, client.ApiError) as e:
            print(f"corral: warning: no join token: {e}", file=sys.stderr)
        else:
            where = answer.get("listen") or {}
            print(f"  listen: {where.get('url')} (certificate {where.get('fingerprint')})")
            print("  a join token for one node, valid 1 h (more: corral token create):")
            for line in join_hint(where.get("url", ""), where.get("fingerprint", ""),
                                  answer["token"]):
                print(line)
    if args.foreground and ctl is not None:
        return _foreground(ctl, agent, home)
    return 0


def _is_local_address(addr: str) -> bool:
    """Whether a node's NodeAddr is this machine (no NodeAddr: yes, as on a one-machine
    test cluster). An address is ours when a socket can bind to it."""
    if not addr or addr == "localhost" or addr.split(".")[0] == os.uname().nodename.split(".")[0]:
        return True
    import socket

    try:
        infos = socket.getaddrinfo(addr, None, proto=socket.IPPROTO_UDP)
    except OSError:
        return False
    for family, _type, _proto, _name, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.bind((sockaddr[0], 0))
            return True
        except OSError:
            continue
    return False


def _split_listen(spec: str) -> tuple[str, int]:
    host, sep, port = spec.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen expects HOST:PORT, got {spec!r}")
    return host.strip("[]"), int(port)


def join_hint(url: str, fingerprint: str, token: str) -> list[str]:
    """How to join a machine with `token`: never on a command line (/proc shows it)."""
    return [
        f"    token: {token}",
        "  join a machine with (as root there; the token is read from standard input or a",
        "  root-only file, never from the command line, where every local user can read it):",
        f"    corral join {url} --fingerprint {fingerprint} --token-file FILE",
        f"    corral join {url} --fingerprint {fingerprint}      (then paste the token)",
    ]


def _print_token(answer: dict[str, Any]) -> None:
    what = "a login host" if answer["scope"] == "login" else (
        f"node {answer['node']}" if answer.get("node") else "a node")
    uses = answer["uses_left"]
    print(f"corral: join token {answer['id']} for {what}, {uses} use{'s' if uses != 1 else ''}, "
          f"expires {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(answer['expires']))}")
    listen = answer.get("listen") or {}
    for line in join_hint(listen.get("url", "https://HOST:PORT"),
                          listen.get("fingerprint", "SHA256:…"), answer["token"]):
        print(line)


def _fetch_fingerprint(url_host: str, port: int) -> str:
    """Trust on first use (only with --insecure-trust-first-use): whatever certificate the
    address shows now."""
    import ssl

    from corral.auth import fingerprint_of_pem

    return fingerprint_of_pem(ssl.get_server_certificate((url_host, port), timeout=10))


def _read_token(args: argparse.Namespace) -> str | None:
    """The join token from --token-file or standard input; None (with a message) if none."""
    if args.token_file:
        try:
            st = os.stat(args.token_file)
            with open(args.token_file) as f:
                token = f.read().strip()
        except OSError as e:
            print(f"corral: error: cannot read the token file: {e}", file=sys.stderr)
            return None
        if st.st_mode & 0o077:
            print(f"corral: warning: {args.token_file} is readable by other users; "
                  "revoke the token if they are not trusted", file=sys.stderr)
        return token or None
    if sys.stdin.isatty():
        import getpass

        token = getpass.getpass("join token (from `corral token create` on the controller): ")
    else:
        token = sys.stdin.readline()
    token = token.strip()
    if not token:
        print("corral: error: no join token: give --token-file FILE or the token on "
              "standard input", file=sys.stderr)
        return None
    return token


def cmd_join(args: argparse.Namespace) -> int:
    """Start an agent here that serves this machine as a node of a remote controller."""
    home = paths.corral_home()
    from corral.auth import (
        KIND_LOGIN,
        KIND_NODE,
        Credential,
        credential_path,
        parse_fingerprint,
        write_private,
    )

    if args.token is not None:
        print("corral: error: --token is refused: a command line is readable by every local "
              "user (/proc); give --token-file FILE (root-only) or the token on standard input",
              file=sys.stderr)
        return 2
    if os.path.exists(paths.socket_path(home)) or _read_pid("controller", home) is not None:
        print(f"corral: error: {home} holds a running controller; join from another "
              "CORRAL_HOME (or `corral down` first)", file=sys.stderr)
        return 1
    pid = _read_pid("agent", home)
    if pid is not None:
        print(f"corral: error: an agent (pid {pid}) already runs for {home}; "
              "`corral down` first", file=sys.stderr)
        return 1
    m = re.fullmatch(r"https://(\[[0-9a-fA-F:.]+\]|[^/:\[\]]+):(\d+)/?", args.url)
    if not m:
        print(f"corral: error: the controller address must be https://HOST:PORT, not {args.url}",
              file=sys.stderr)
        return 1
    host, port = m.group(1).strip("[]"), int(m.group(2))
    url = f"https://{m.group(1)}:{port}"
    fingerprint = args.fingerprint
    if not fingerprint and not args.insecure_trust_first_use:
        print("corral: error: --fingerprint is required: it proves that the controller is the "
              "one you mean (`corral up --listen` and `corral status` print it on the "
              "controller's machine); --insecure-trust-first-use trusts whatever answers",
              file=sys.stderr)
        return 2
    if not fingerprint:
        try:
            fingerprint = _fetch_fingerprint(host, port)
        except OSError as e:
            print(f"corral: error: cannot reach {args.url}: {e}", file=sys.stderr)
            return 1
        print(f"corral: warning: --insecure-trust-first-use: trusting the certificate "
              f"{fingerprint} that {url} shows now, unverified", file=sys.stderr)
    try:
        digest = parse_fingerprint(fingerprint)
    except ValueError as e:
        print(f"corral: error: {e}", file=sys.stderr)
        return 1
    role = KIND_LOGIN if args.login_only else KIND_NODE
    name = args.name or os.uname().nodename.split(".")[0]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name):
        print(f"corral: error: Invalid node name specified: {name}", file=sys.stderr)
        return 1
    os.makedirs(home, mode=0o755, exist_ok=True)
    os.makedirs(paths.log_dir(home), exist_ok=True)
    key_file = credential_path(home)
    stored: Credential | None = None
    if not args.token_file and os.path.exists(key_file):
        try:
            with open(key_file) as f:
                stored = Credential.loads(f.read())
        except (OSError, ValueError):
            stored = None
        if stored is not None and (stored.kind != role or (args.name and stored.name != name)):
            print(f"corral: error: this machine joined as {stored.kind} {stored.name}; give a "
                  "new token (--token-file) to join otherwise", file=sys.stderr)
            return 1
    if stored is None:
        token = _read_token(args)
        if token is None:
            return 1
        import asyncio

        from corral.agent.remote import JoinError, enroll

        try:
            cred = asyncio.run(enroll(url, digest, token, role, name))
        except JoinError as e:
            print(f"corral: error: cannot join: {e}", file=sys.stderr)
            return 1
        except OSError as e:
            print(f"corral: error: cannot reach {url}: {e}", file=sys.stderr)
            return 1
        except Exception as e:  # aiohttp's connection errors
            print(f"corral: error: cannot reach {url}: {e}", file=sys.stderr)
            return 1
        # the machine's key: root-only directory, root-only file, never on a command line
        write_private(key_file, (cred.dumps() + "\n").encode())
    else:
        cred = stored
        print(f"corral: rejoining with this machine's key ({cred.kind} {cred.name})")
    name = cred.name
    error_file = os.path.join(home, "join.error")
    if os.path.exists(error_file):
        os.unlink(error_file)
    role_args = ["--login-only"] if cred.kind == KIND_LOGIN else ["--nodes", name]
    agent_log = os.path.join(paths.log_dir(home), "agent.log")
    agent = _spawn(["corral.agent", "--home", home, "--controller-url", url,
                    "--fingerprint", fingerprint, "--token-file", key_file, *role_args],
                   agent_log, False)
    with open(paths.pid_file("agent", home), "w") as f:
        f.write(str(agent.pid))

    def ready() -> bool:
        try:
            if cred.kind == KIND_LOGIN:
                return client.get("/v1/ping") is not None
            nodes = client.get("/v1/nodes", names=name)["nodes"]
        except (client.NotRunning, client.ApiError, OSError):
            return False
        return any(n["name"] == name and n["responding"] for n in nodes)

    try:
        _wait_for(lambda: agent.poll() is not None or ready(), 45, "join")
    except TimeoutError:
        print(f"corral: error: the agent did not join within 45 s; see {agent_log}", file=sys.stderr)
        _stop_pid(agent.pid)
        return 1
    if agent.poll() is not None:
        try:
            with open(error_file) as f:
                why = f.read().strip()
        except OSError:
            why = f"the agent exited; see {agent_log}"
        print(f"corral: error: cannot join: {why}", file=sys.stderr)
        try:
            os.unlink(paths.pid_file("agent", home))
        except FileNotFoundError:
            pass
        return 1
    ping = client.get("/v1/ping")
    what = "as a login (submit) host" if cred.kind == KIND_LOGIN else f"as node {name}"
    print(f"corral: joined cluster {ping['cluster']} at {url} {what}")
    print(f"  state:  {home}")
    print(f"  key:    {key_file} (root only)")
    print(f"  socket: {paths.agent_socket_path(home)} (sbatch, squeue, srun… go through it)")
    print(f"  logs:   {paths.log_dir(home)}")
    print("  leave:  corral down")
    return 0


_TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_ttl(text: str) -> float:
    """`90`, `90s`, `30m`, `12h`, `7d`, `2w` → seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"invalid --ttl {text!r} (e.g. 30m, 12h, 7d)")
    return float(m.group(1)) * _TTL_UNITS[m.group(2) or "s"]


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else "-"


def cmd_token(args: argparse.Namespace) -> int:
    if args.action == "create":
        try:
            ttl = parse_ttl(args.ttl)
        except ValueError as e:
            print(f"corral: error: {e}", file=sys.stderr)
            return 2
        answer = client.post("/v1/tokens", {"scope": "login" if args.login else "node",
                                            "ttl": ttl, "uses": args.uses, "node": args.node})
        _print_token(answer)
        return 0
    if args.action == "list":
        data = client.get("/v1/tokens")
        print(f"{'ID':<9} {'SCOPE':<6} {'STATUS':<8} {'USES':>4} {'EXPIRES':<19} {'NODE':<12} USED_BY")
        for t in sorted(data["tokens"], key=lambda t: t["created"]):
            print(f"{t['id']:<9} {t['scope']:<6} {t['status']:<8} {t['uses_left']:>4} "
                  f"{_when(t['expires']):<19} {t['node'] or '-':<12} {','.join(t['used_by']) or '-'}")
        return 0
    if not args.id:
        print("corral: error: corral token revoke ID", file=sys.stderr)
        return 2
    client.request("DELETE", f"/v1/tokens/{client.quote(args.id, safe='')}")
    print(f"corral: join token {args.id} revoked")
    return 0


def cmd_node(args: argparse.Namespace) -> int:
    if args.action == "list":
        data = client.get("/v1/machines")
        print(f"{'NAME':<16} {'KIND':<6} {'KEY':<17} {'ISSUED':<19} {'REVOKED':<19} ADDRESS")
        for k in sorted(data["machines"], key=lambda k: k["issued"]):
            print(f"{k['name']:<16} {k['kind']:<6} {k['id']:<17} {_when(k['issued']):<19} "
                  f"{_when(k['revoked']):<19} {k['addr'] or '-'}")
        return 0
    if not args.name:
        print("corral: error: corral node revoke NAME", file=sys.stderr)
        return 2
    answer = client.request("DELETE", f"/v1/machines/{client.quote(args.name, safe='')}")
    print(f"corral: revoked the key of {args.name} ({', '.join(answer['revoked'])}); it can no "
          "longer act for the cluster, other machines are untouched")
    return 0


def _foreground(ctl: subprocess.Popen[bytes], agent: subprocess.Popen[bytes] | None,
                home: str) -> int:
    procs = [p for p in (agent, ctl) if p is not None]

    def stop(*_: Any) -> None:
        for p in procs:
            if p.poll() is None:
                p.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while all(p.poll() is None for p in procs):
        time.sleep(0.2)
    stop()
    for p in procs:
        p.wait(10)
    for name in ("controller", "agent"):
        try:
            os.unlink(paths.pid_file(name, home))
        except FileNotFoundError:
            pass
    return 0


def _stop_pid(pid: int, timeout: float = 10.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _process_alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill_jobs(home: str) -> int:
    """Cancel every job supervisor left in the spool; returns how many there were."""
    from corral.agent import stepd

    spool = paths.spool_dir(home)
    if not os.path.isdir(spool):
        return 0
    dirs = [os.path.join(spool, d) for d in os.listdir(spool) if d.startswith("job")]
    alive = [d for d in dirs if stepd.is_alive(d)]
    for d in alive:
        stepd.send_control(d, {"op": "cancel"})
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(stepd.is_alive(d) for d in alive):
        time.sleep(0.1)
    return len(alive)


def cmd_down(args: argparse.Namespace) -> int:
    home = paths.corral_home()
    agent = _read_pid("agent", home)
    ctl = _read_pid("controller", home)
    if agent is None and ctl is None and _ping() is None:
        print(f"corral: no cluster is running for {home}")
        return 0
    if agent is not None:
        _stop_pid(agent)
    if not args.keep_jobs:
        n = _kill_jobs(home)
        if n:
            print(f"corral: cancelled {n} running job(s)")
        if os.geteuid() == 0 and os.access("/sys/fs/cgroup", os.W_OK):
            from corral.agent.cgroup import cluster_group_name, remove_cluster_groups

            remove_cluster_groups("/sys/fs/cgroup", cluster_group_name(home))
    if ctl is not None:
        _stop_pid(ctl)
    for name in ("controller", "agent"):
        try:
            os.unlink(paths.pid_file(name, home))
        except FileNotFoundError:
            pass
    if ctl is None and agent is not None:
        print(f"corral: stopped the agent of {home}")
    else:
        print(f"corral: stopped the cluster of {home}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    home = paths.corral_home()
    ping = _ping()
    if ping is None:
        print(f"corral: no cluster is running for {home} (start one with `corral up`)")
        return 1
    nodes = client.get("/v1/nodes")
    diag = client.get("/v1/diag")
    cfg = client.get("/v1/config")
    jobs = client.get("/v1/jobs", fields="state,user")["jobs"]
    here = os.path.exists(paths.socket_path(home))
    up = sum(1 for n in nodes["nodes"] if n["responding"])
    print(f"cluster {ping['cluster']}: controller up since "
          f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(diag['started']))}"
          f"{'' if here else ' (on another machine)'}")
    print(f"  state:  {cfg.get('home') or home}" + ("" if here else f" there; this machine: {home}"))
    print(f"  config: {cfg.get('config_path')}")
    listen = cfg.get("listen")
    if listen:
        print(f"  listen: {listen['url']} (certificate {listen['fingerprint']})")
    print(f"  nodes:  {up}/{len(nodes['nodes'])} responding")
    width = max([4, *(len(n["name"]) for n in nodes["nodes"])])
    print(f"    {'NODE':<{width}}  {'STATE':<14} {'CPUS(A/T)':>9} {'GPUS(A/T)':>9}  REASON")
    for n in nodes["nodes"]:
        gpus = f"{len(n.get('alloc_gpus') or [])}/{n.get('gpus', 0)}"
        print(f"    {n['name']:<{width}}  {n['state'].lower():<14} "
              f"{n['alloc_cpus']:>4}/{n['cpus']:<4} {gpus:>9}  {n.get('reason') or ''}")
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j["state"]] = counts.get(j["state"], 0) + 1
    summary = ", ".join(f"{v} {k.lower()}" for k, v in sorted(counts.items())) or "none"
    print(f"  jobs:   {summary} (squeue lists them)")
    ctl_logs = os.path.join(cfg.get("home") or home, "log")
    if here:
        print(f"  logs:   {os.path.join(ctl_logs, 'controller.log')}, "
              f"{os.path.join(ctl_logs, 'agent.log')}")
    else:
        print(f"  logs:   {os.path.join(ctl_logs, 'controller.log')} on the controller's machine; "
              f"this machine's agent: {os.path.join(paths.log_dir(home), 'agent.log')}")
    print(f"  scheduler: {diag['sched_passes']} passes, last {diag['last_sched_seconds'] * 1000:.1f} ms")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description="Run a Corral cluster on this machine.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the controller and the local agent")
    up.add_argument("--config", help="slurm.conf-syntax file to use (copied into $CORRAL_HOME)")
    up.add_argument("--foreground", action="store_true", help="stay attached; Ctrl-C stops")
    up.add_argument("--listen", metavar="HOST:PORT",
                    help="also accept agents and remote CLIs over TCP+TLS here (see corral join)")
    up.set_defaults(fn=cmd_up)
    join = sub.add_parser("join", help="serve this machine as a node of a cluster elsewhere")
    join.add_argument("url", help="the controller, https://HOST:PORT (as `corral up --listen` printed)")
    join.add_argument("--token", help=argparse.SUPPRESS)  # refused with a message: see cmd_join
    join.add_argument("--token-file", metavar="FILE",
                      help="file holding the join token (default: read it from standard input)")
    join.add_argument("--fingerprint", help="the controller certificate's SHA256:… fingerprint "
                      "(required)")
    join.add_argument("--insecure-trust-first-use", action="store_true",
                      help="without --fingerprint: trust whatever certificate answers (unsafe)")
    join.add_argument("--name", help="node name (default: this machine's short host name)")
    join.add_argument("--login-only", action="store_true",
                      help="register no node: only let this machine's users submit and query "
                           "(needs a token made with `corral token create --login`)")
    join.set_defaults(fn=cmd_join)
    tok = sub.add_parser("token", help="join tokens: create, list, revoke (controller's machine, root)")
    tok.add_argument("action", choices=["create", "list", "revoke"])
    tok.add_argument("id", nargs="?", help="the token id to revoke")
    tok.add_argument("--login", action="store_true", help="for a login (submit-only) host")
    tok.add_argument("--ttl", default="1h", help="lifetime: 30m, 12h, 7d… (default 1h)")
    tok.add_argument("--uses", type=int, default=1, help="how many machines may join with it (1)")
    tok.add_argument("--node", help="only a node of this name may join with it")
    tok.set_defaults(fn=cmd_token)
    node = sub.add_parser("node", help="joined machines' keys: list, revoke (controller's machine, root)")
    node.add_argument("action", choices=["list", "revoke"])
    node.add_argument("name", nargs="?", help="the node or login host whose key to revoke")
    node.set_defaults(fn=cmd_node)
    down = sub.add_parser("down", help="stop what `corral up` started")
    down.add_argument("--keep-jobs", action="store_true", help="leave running jobs running")
    down.set_defaults(fn=cmd_down)
    st = sub.add_parser("status", help="the cluster's nodes, jobs, and where its logs are")
    st.set_defaults(fn=cmd_status)
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if args.cmd in ("up", "down", "join"):
        # these start and stop this user's own cluster, never the machine's (root's)
        os.environ["CORRAL_HOME"] = paths.own_home()
    try:
        return int(args.fn(args))
    except (client.NotRunning, client.ApiError) as e:
        print(f"corral: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
