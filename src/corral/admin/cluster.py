"""`corral up | down | status`: start, stop and look at a cluster on this machine.

`up` and `down` act on this user's own cluster ($CORRAL_HOME, else the system home for
root, ~/.corral for others); `status` on the cluster the Slurm commands talk to, which
for a user without a cluster of their own is the one root started (corral.paths).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import Any

from corral import paths
from corral.cli import client


def _ping() -> dict[str, Any] | None:
    try:
        return client.get("/v1/ping")  # type: ignore[no-any-return]
    except (client.NotRunning, client.ApiError, OSError):
        return None


def read_pid(name: str, home: str) -> int | None:
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


def _tmp_disk() -> str:
    """TmpDisk= as `slurmd -C` reports it: the size of the TmpFS (/tmp) in MB, for --tmp."""
    try:
        st = os.statvfs("/tmp")
    except OSError:
        return ""
    mb = st.f_blocks * st.f_frsize // (1024 * 1024)
    return f" TmpDisk={mb}" if mb > 0 else ""


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
        f"ThreadsPerCore={h.threads_per_core} RealMemory={mem}{_tmp_disk()}{gres}",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
    ]
    if h.gpu_note and not h.gpus:
        lines.insert(3, f"# GPUs: none found ({h.gpu_note})")
    return "\n".join(lines) + "\n"


def spawn(args: list[str], log_path: str, foreground: bool) -> subprocess.Popen[bytes]:
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    return subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, start_new_session=not foreground,
                            close_fds=True)


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(what)


def cmd_up(args: argparse.Namespace) -> int:
    home = paths.corral_home()
    if not os.path.exists(paths.socket_path(home)) and read_pid("agent", home) is not None \
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
    if running and (read_pid("agent", home) is not None or args.config):
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
        ctl = spawn(["corral.controller", "--home", home, *listen], ctl_log, args.foreground)
        with open(paths.pid_file("controller", home), "w") as f:
            f.write(str(ctl.pid))
        started = ctl
        try:
            wait_for(lambda: started.poll() is not None or _ping() is not None, 30,
                      "controller start")
        except TimeoutError:
            print(f"corral: error: the controller did not answer; see {ctl_log}", file=sys.stderr)
            return 1
        if ctl.poll() is not None:
            print(f"corral: error: the controller exited; see {ctl_log}", file=sys.stderr)
            return 1
    agent_pid = read_pid("agent", home)
    agent: subprocess.Popen[bytes] | None = None
    if not local:
        print("corral: no node of the configuration is on this machine; starting no agent",
              flush=True)
    elif agent_pid is not None and not args.foreground:
        # the agent outlived the controller: it reconnects by itself and re-syncs its jobs
        print(f"corral: the agent (pid {agent_pid}) is still running; it will reconnect", flush=True)
    else:
        print(f"corral: starting the agent for {local_nodes} …", flush=True)
        agent = spawn(["corral.agent", "--home", home, "--nodes", local_nodes], agent_log,
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
        wait_for(lambda: agent_exited() or all_up(), 30, "agent registration")
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
    gpus = sum(n.gpus for n in cfg.nodes)
    if gpus:
        print(f"  GPUs:   {gpus}")
    else:
        # say so: on a laptop every --gres=gpu example would be refused, with no hint why
        with open(cfg_path) as f:
            why = next((ln.split("(", 1)[1].rstrip().rstrip(")") for ln in f
                        if ln.startswith("# GPUs: none found (")), "")
        print("  GPUs:   none" + (f" ({why})" if why else "") + "; GPU jobs are refused. "
              "Declared GPUs for trying GPU scripts: README, 'A first hour'")
    inert = cfg.inert_settings()
    if inert:
        print(f"  accepted but not acted on: {', '.join(inert)}")
    print("  try:    sbatch --wrap 'hostname' && squeue")
    if args.listen:
        answer = None
        try:
            live = [t for t in live_tokens() if t["scope"] == "node"]
            # a restart must not pile up live join tokens: mint one only when none is live
            answer = None if live else \
                client.post("/v1/tokens", {"scope": "node", "ttl": 3600, "uses": 1})
        except (client.NotRunning, client.ApiError) as e:
            print(f"corral: warning: no join token: {e}", file=sys.stderr)
        else:
            if answer is None:
                where = client.get("/v1/config").get("listen") or {}
                print(f"  listen: {where.get('url')} (certificate {where.get('fingerprint')})")
                print(f"  join tokens: {len(live)} still valid ({', '.join(t['id'] for t in live)};"
                      " none minted; a new one: corral token create)")
        if answer is not None:
            where = answer.get("listen") or {}
            print(f"  listen: {where.get('url')} (certificate {where.get('fingerprint')})")
            print("  a join token for one node, valid 1 h (more: corral token create):")
            from corral.admin.joining import join_hint

            for line in join_hint(where.get("url", ""), where.get("fingerprint", ""),
                                  answer["token"]):
                print(line)
    if args.foreground and ctl is not None:
        return _foreground(ctl, agent, home)
    return 0


def live_tokens() -> list[dict[str, Any]]:
    """The join tokens that may still be spent (valid, unused, unrevoked)."""
    answer = client.get("/v1/tokens")
    return [t for t in answer.get("tokens", []) if t.get("status") == "valid"]


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


def stop_pid(pid: int, timeout: float = 10.0) -> None:
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
    agent = read_pid("agent", home)
    ctl = read_pid("controller", home)
    if agent is None and ctl is None and _ping() is None:
        print(f"corral: no cluster is running for {home}")
        return 0
    if agent is not None:
        stop_pid(agent)
    if not args.keep_jobs:
        n = _kill_jobs(home)
        if n:
            print(f"corral: cancelled {n} running job(s)")
        if os.geteuid() == 0 and os.access("/sys/fs/cgroup", os.W_OK):
            from corral.agent.cgroup import cluster_group_name, remove_cluster_groups

            remove_cluster_groups("/sys/fs/cgroup", cluster_group_name(home))
    if ctl is not None:
        stop_pid(ctl)
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
        try:
            live = live_tokens()
        except client.ApiError:  # only root on the controller's machine may list them
            live = None
        if live is not None:
            print(f"  join tokens: {len(live)} valid"
                  + "".join(f"\n    {t['id']}  {t['scope']:<5}  {t['uses_left']} use(s) left, "
                            f"until {time.strftime('%Y-%m-%d %H:%M', time.localtime(t['expires']))}"
                            + (f", node {t['node']}" if t.get("node") else "")
                            for t in live))
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


