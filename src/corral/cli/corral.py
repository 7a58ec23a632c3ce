"""`corral up | down | status`: start, stop and look at the cluster of $CORRAL_HOME."""

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
        print("  join another machine to this cluster with (run there, as root):")
        print(f"    {join_command(home, args.listen)}")
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


def join_command(home: str, listen: str) -> str:
    """What to run on another machine: address, token and certificate fingerprint."""
    from corral.auth import cert_path, fingerprint_of_pem, join_token_path

    host, port = _split_listen(listen)
    if host in ("", "0.0.0.0", "::"):
        host = os.uname().nodename  # listening everywhere: name the machine
    if ":" in host:
        host = f"[{host}]"
    with open(join_token_path(home)) as f:
        token = f.read().strip()
    with open(cert_path(home)) as f:
        fingerprint = fingerprint_of_pem(f.read())
    return f"corral join https://{host}:{port} --token {token} --fingerprint {fingerprint}"


def _fetch_fingerprint(url_host: str, port: int) -> str:
    """Trust on first use: the fingerprint of whatever certificate the address shows."""
    import ssl

    from corral.auth import fingerprint_of_pem

    return fingerprint_of_pem(ssl.get_server_certificate((url_host, port), timeout=10))


def cmd_join(args: argparse.Namespace) -> int:
    """Start an agent here that serves this machine as a node of a remote controller."""
    home = paths.corral_home()
    from corral.auth import join_token_path, parse_fingerprint

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
    fingerprint = args.fingerprint
    if not fingerprint:
        try:
            fingerprint = _fetch_fingerprint(host, port)
        except OSError as e:
            print(f"corral: error: cannot reach {args.url}: {e}", file=sys.stderr)
            return 1
        print(f"corral: warning: no --fingerprint given; trusting the certificate {fingerprint} "
              "that the controller shows now", file=sys.stderr)
    try:
        parse_fingerprint(fingerprint)
    except ValueError as e:
        print(f"corral: error: {e}", file=sys.stderr)
        return 1
    name = None if args.login_only else (args.name or os.uname().nodename.split(".")[0])
    if name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name):
        print(f"corral: error: Invalid node name specified: {name}", file=sys.stderr)
        return 1
    os.makedirs(home, mode=0o755, exist_ok=True)
    os.makedirs(paths.log_dir(home), exist_ok=True)
    token_file = join_token_path(home)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(args.token.strip() + "\n")
    os.chmod(token_file, 0o600)
    error_file = os.path.join(home, "join.error")
    if os.path.exists(error_file):
        os.unlink(error_file)
    role = ["--login-only"] if name is None else ["--nodes", name]
    agent_log = os.path.join(paths.log_dir(home), "agent.log")
    agent = _spawn(["corral.agent", "--home", home, "--controller-url", f"https://{m.group(1)}:{port}",
                    "--fingerprint", fingerprint, "--token-file", token_file, *role],
                   agent_log, False)
    with open(paths.pid_file("agent", home), "w") as f:
        f.write(str(agent.pid))

    def ready() -> bool:
        try:
            if name is None:
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
    what = "as a login (submit) host" if name is None else f"as node {name}"
    print(f"corral: joined cluster {ping['cluster']} at {args.url} {what}")
    print(f"  state:  {home}")
    print(f"  socket: {paths.agent_socket_path(home)} (sbatch, squeue, srun… go through it)")
    print(f"  logs:   {paths.log_dir(home)}")
    print("  leave:  corral down")
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
    up = sum(1 for n in nodes["nodes"] if n["responding"])
    print(f"cluster {ping['cluster']}: controller up since "
          f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(diag['started']))}")
    print(f"  state:  {home}")
    print(f"  nodes:  {up}/{len(nodes['nodes'])} responding")
    print(f"  jobs:   {diag['running']} running, {diag['pending']} pending")
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
    join.add_argument("--token", required=True, help="the cluster's join token")
    join.add_argument("--fingerprint", help="the controller certificate's SHA256:… fingerprint")
    join.add_argument("--name", help="node name (default: this machine's short host name)")
    join.add_argument("--login-only", action="store_true",
                      help="register no node: only let this machine's users submit and query")
    join.set_defaults(fn=cmd_join)
    down = sub.add_parser("down", help="stop what `corral up` started")
    down.add_argument("--keep-jobs", action="store_true", help="leave running jobs running")
    down.set_defaults(fn=cmd_down)
    st = sub.add_parser("status", help="is the cluster up, and how busy")
    st.set_defaults(fn=cmd_status)
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return int(args.fn(args))
    except (client.NotRunning, client.ApiError) as e:
        print(f"corral: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
