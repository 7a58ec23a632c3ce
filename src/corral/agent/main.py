"""`python -m corral.agent`: the node agent (slurmd's role).

It keeps one WebSocket to the controller, launches batch steps through the step
supervisor (`agent.stepd`), forwards control requests, and reports how jobs ended.
A job's supervisor is its own process: jobs keep running while the agent or the
controller restarts, and the agent re-reports what happened when it reconnects.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import shutil
import signal
import socket
import sys
import time
from typing import Any

import aiohttp
from yarl import URL

from corral import paths
from corral.agent import gpu, hw, images, stepd, usage
from corral.agent import metrics as agent_metrics
from corral.agent import remote as remote_mod
from corral.agent.cgroup import CgroupConf, cluster_group_name
from corral.agent.health import HealthMonitor
from corral.agent.prolog import PrologRunner
from corral.agent.proxy import Proxy
from corral.agent.remote import JoinError, RemoteController, fingerprint_mismatch
from corral.agent.spawner import Spawner
from corral.agent.tasks import TaskManager
from corral.auth import join_token_path, parse_fingerprint
from corral.model import messages
from corral.model.launchplan import LaunchPlan

log = logging.getLogger("corral.agent")


class Agent:
    def __init__(self, home: str, nodes: list[str], controller_socket: str,
                 spawner: Spawner | None = None, remote: RemoteController | None = None) -> None:
        self.spawner = spawner
        self._outbox: asyncio.Queue[dict[str, Any]] | None = None
        self.launching: dict[int, asyncio.Task[None]] = {}
        self.heartbeat = 10.0  # seconds; the controller sets it from SlurmdTimeout
        self.home = home
        self.nodes = nodes
        self.controller_socket = controller_socket
        self.remote = remote  # set on a joined machine: the controller is over TCP+TLS
        self.cluster_config: dict[str, Any] = {}  # from the controller's "registered"
        self._registered = asyncio.Event()
        self.auth_failures = 0  # consecutive refusals of the join token
        self.spool = paths.spool_dir(home)
        _private_dir(self.spool)
        self.notify_path = os.path.join(self.spool, "notify.sock")
        self.hw = hw.detect()
        self.start_time = time.time()
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.reported: set[int] = set()  # ended jobs sent since the last (re)connect
        self.cgroup_root = _cgroup_root()
        # one cgroup subtree per agent home: clusters side by side never share a job's group
        self.cgroup_cluster = cluster_group_name(home)
        self.container_dir = os.path.join(home, "containers")  # agent.container's
        self.tasks = TaskManager(self._send, cgroup_root=self.cgroup_root,
                                 cgroup_cluster=self.cgroup_cluster,
                                 container_dir=self.container_dir,
                                 image_cache=images.cache_dir(home))
        self.cgroup_conf = CgroupConf.load(os.path.join(home, "cgroup.conf"))
        for note in self.cgroup_conf.notes:
            log.warning("%s", note)
        self.stop = asyncio.Event()
        self._dgram: socket.socket | None = None
        # resource use per step and GPU (sstat, sacct, metrics): agent.usage
        self.usage = usage.UsageSampler(self.cgroup_root, self.cgroup_cluster,
                                        gpu.backend_for(home))
        self.tasks.on_step_end = self._step_usage_final
        self._usage_wake = asyncio.Event()  # a job asked for a shorter interval
        self.health = HealthMonitor(nodes, self.usage.gpus, self._send)  # agent.health
        self.prologs = PrologRunner(nodes, self._send)  # agent.prolog
        self.metrics = agent_metrics.AgentMetrics(  # per-GPU series over HTTP (agent.metrics)
            nodes, self.usage.gpus, agent_metrics.liveness(self.job_dir, self.tasks.live_jobs))
        self.metrics.holders.recover({j: self.job_dir(j) for j in self.job_ids()})

    # ---- job directories --------------------------------------------------
    def job_dir(self, job_id: int) -> str:
        return os.path.join(self.spool, f"job{job_id}")

    def job_ids(self) -> list[int]:
        out = []
        for name in os.listdir(self.spool):
            if name.startswith("job") and name[3:].isdigit():
                out.append(int(name[3:]))
        return sorted(out)

    def ended_event(self, job_id: int) -> dict[str, Any] | None:
        d = self.job_dir(job_id)
        st = stepd.read_status(d)
        if st is None:
            if job_id in self.launching:
                return None  # its supervisor is being started: not there yet, not lost
            if os.path.exists(os.path.join(d, "launch.json")) and not stepd.is_alive(d):
                # the supervisor vanished without a word (machine reboot, kill -9), or left
                # a status that read_status() refused (logged there)
                return {"type": "ended", "job_id": job_id, "state": "NODE_FAIL", "exit_code": 0,
                        "signal": 0, "end_time": time.time()}
            return None
        return {"type": "ended", "job_id": job_id, "state": st["state"],
                "exit_code": st.get("exit_code", 0), "signal": st.get("signal", 0),
                "end_time": st.get("end_time") or time.time()}

    # ---- controller link ---------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if os.path.exists(self.notify_path):
            os.unlink(self.notify_path)
        old_umask = os.umask(0o177)  # only we may send: no window before a chmod
        try:
            self._dgram.bind(self.notify_path)
        finally:
            os.umask(old_umask)
        self._dgram.setblocking(False)
        loop.add_reader(self._dgram.fileno(), self._on_notify)
        scan = loop.create_task(self._scan_loop())
        sampling = loop.create_task(self._usage_loop())
        self.release_stale_containers()
        delay = 0.05
        while not self.stop.is_set():
            try:
                await self._session()
                delay = 0.05
            except aiohttp.ServerFingerprintMismatch as e:
                log.error("%s", fingerprint_mismatch(self.remote.url if self.remote else "", e))
            except aiohttp.WSServerHandshakeError as e:
                self.auth_failures += e.status == 401
                log.warning("the controller refused this agent: HTTP %d %s", e.status, e.message)
            except (aiohttp.ClientError, OSError) as e:
                log.debug("controller not reachable: %s", e)
            except asyncio.CancelledError:
                break
            except Exception:
                log.exception("agent session failed")
            self.ws = None
            if self.stop.is_set():
                break
            try:
                await asyncio.wait_for(self.stop.wait(), timeout=delay)
            except TimeoutError:
                pass
            delay = min(delay * 2, 2.0)
        scan.cancel()
        sampling.cancel()
        self.health.close()
        await self.metrics.close()
        self.usage.gpus.close()
        loop.remove_reader(self._dgram.fileno())
        self._dgram.close()

    def _open(self) -> tuple[aiohttp.ClientSession, str | URL, dict[str, str], float]:
        """Session, WebSocket URL, upgrade headers and ping interval for the controller link."""
        if self.remote is None:
            conn = aiohttp.UnixConnector(path=self.controller_socket)
            return aiohttp.ClientSession(connector=conn), "http://corral/v1/agent/ws", {}, 30.0
        # over a network, ping: a dead link is noticed within 1.5 ping intervals (a pong may
        # take half an interval, so not too short for a slow network)
        return (self.remote.session(), self.remote.target("/v1/agent/ws"),
                self.remote.agent_headers(self.nodes[0] if self.nodes else None, self.hw),
                max(5.0, self.heartbeat))

    async def _session(self) -> None:
        session, url, headers, ping = self._open()
        async with session:
            async with session.ws_connect(url, headers=headers, heartbeat=ping,
                                          max_msg_size=64 * 1024 * 1024) as ws:
                self.ws = ws
                self.auth_failures = 0
                self._registered.clear()
                self.reported = set()
                running, ended = [], []
                for jid in self.job_ids():
                    ev = self.ended_event(jid)
                    if ev is not None:
                        ended.append(ev)
                        self.reported.add(jid)
                    elif stepd.is_alive(self.job_dir(jid)):
                        running.append(jid)
                h = self.hw
                await ws.send_str(json.dumps({
                    "type": "register", "nodes": self.nodes, "running": running, "ended": ended,
                    "hw": {"hostname": h.hostname, "arch": h.arch, "os": h.os,
                           "boot_time": h.boot_time, "start_time": self.start_time,
                           "cpus": h.cpus, "memory_mb": h.memory_mb,
                           "gpus": [g.index for g in h.gpus],
                           "addr": self.remote.local_address() if self.remote else "127.0.0.1"},
                }))
                log.info("connected to controller; %d running, %d ended jobs", len(running), len(ended))
                for ev in ended:  # their last figures, read before the ack removes them
                    final = self._batch_usage(ev["job_id"])
                    if final is not None:
                        await ws.send_str(json.dumps(final))
                hb = asyncio.get_running_loop().create_task(self._heartbeat(ws))
                self._outbox = asyncio.Queue()
                sender = asyncio.get_running_loop().create_task(self._sender(ws, self._outbox))
                try:
                    async for msg in ws:
                        if msg.type != aiohttp.WSMsgType.TEXT:
                            if msg.type in (aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSED):
                                break
                            continue
                        self._on_frame(msg.data)
                finally:
                    hb.cancel()
                    sender.cancel()
                    self._outbox = None
        log.warning("lost the controller; reconnecting")

    async def _heartbeat(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        # the interval comes with "registered"; before it, the controller has heard us anyway
        await self._registered.wait()
        while True:
            await asyncio.sleep(self.heartbeat)
            self.health.check_gpus()  # GPU trouble that is new goes out with its own heartbeat
            await ws.send_str(json.dumps({"type": "heartbeat", "load": os.getloadavg()[0],
                                          "free_mem": hw.free_memory_mb()}))

    @staticmethod
    async def _sender(ws: aiohttp.ClientWebSocketResponse,
                      outbox: asyncio.Queue[dict[str, Any]]) -> None:
        """One writer keeps messages in order (a task's output before its exit)."""
        while True:
            msg = await outbox.get()
            await ws.send_str(json.dumps(msg, separators=(",", ":")))

    def _send(self, msg: dict[str, Any]) -> None:
        if self._outbox is not None:
            self._outbox.put_nowait(msg)

    def _on_frame(self, text: str) -> None:
        """One WebSocket frame: a message, or a batch of them; a bad one is dropped alone."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            log.warning("ignored a controller frame that is not JSON: %r", text[:200])
            return
        if isinstance(data, dict) and data.get("type") == "batch":
            try:
                batch = messages.decode(data, messages.TO_AGENT)
            except messages.MessageError as e:
                log.warning("ignored %s", e)
                return
            assert isinstance(batch, messages.Batch)
            for m in batch.messages:
                self._handle(m)
            return
        self._handle(data)

    def _handle(self, m: Any) -> None:
        """Dispatch one controller message; a malformed one is logged and dropped, alone."""
        self.metrics.holders.observe(m)  # which job holds each GPU (agent.metrics)
        try:
            if self.prologs.gate(m, self._handle):  # after the job's Prolog on its node
                return
            if self.tasks.handle(m):
                return
            msg = messages.decode(m, messages.TO_AGENT)
        except messages.MessageError as e:
            log.warning("ignored %s", e)
            return
        except Exception:  # a bug must not end the link to the controller
            log.exception("ignored a controller message that could not be handled")
            return
        loop = asyncio.get_running_loop()
        if isinstance(msg, messages.LaunchJob):
            jid = msg.launch.job_id
            task = loop.create_task(self.launch(msg.launch))
            self.launching[jid] = task
            task.add_done_callback(functools.partial(self._launched, jid))
        elif isinstance(msg, messages.Control):
            loop.create_task(self.control(msg.job_id, msg.control))
        elif isinstance(msg, messages.HealthCheck):
            loop.create_task(self.health.run(msg))
        elif isinstance(msg, messages.JobStart):
            self.prologs.job_start(msg)
        elif isinstance(msg, messages.JobEnd):
            loop.create_task(self.prologs.job_end(msg))
        elif isinstance(msg, messages.Ack):
            self._forget(msg.job_id)
        elif isinstance(msg, messages.Reconnect):
            # the controller gave this link up (it heard nothing for SlurmdTimeout)
            log.warning("the controller asks for a new connection (%s)", msg.reason)
            if self.ws is not None:
                loop.create_task(self.ws.close())
        elif isinstance(msg, messages.Registered):
            self.heartbeat = msg.heartbeat
            self.cluster_config = dict(msg.config)
            loop.create_task(self.metrics.configure(msg.config.get(agent_metrics.CONFIG_FIELD)))
            self._registered.set()
            for jid in msg.ack:
                self._forget(jid)
        else:
            log.warning("ignored a %s message not meant for an agent", msg.TYPE)

    def _launched(self, job_id: int, _task: asyncio.Task[None]) -> None:
        self.launching.pop(job_id, None)

    async def control(self, job_id: int, op: dict[str, Any]) -> None:
        launching = self.launching.get(job_id)
        if launching is not None:  # a cancel right after the launch must reach the job
            await asyncio.wait([launching])
        if op.get("op") in ("suspend", "resume"):
            self.tasks.suspend_job(job_id, op.get("op") == "resume")
        if not stepd.send_control(self.job_dir(job_id), op):
            log.info("job %s: supervisor gone; control %s dropped", job_id, op)

    def release_stale_containers(self) -> None:
        """Unmount and remove the containers of jobs that no longer run here (at start, after
        a crash; at stop): a job whose batch step lives on keeps its own."""
        if not os.path.isdir(self.container_dir):
            return
        from corral.agent import container

        live = {jid for jid in self.job_ids() if stepd.is_alive(self.job_dir(jid))}
        container.release_stale(self.container_dir, live | self.tasks.live_jobs())

    def _forget(self, job_id: int) -> None:
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)
        self.usage.forget_job(job_id)
        if os.path.isdir(self.container_dir):  # the job's containers on this node go too
            from corral.agent import container

            for node in self.nodes:
                container.release_job(os.path.join(self.container_dir, node), job_id)
        self.reported.discard(job_id)

    # ---- launching -------------------------------------------------------
    async def launch(self, spec: LaunchPlan) -> None:
        job_id = spec.job_id
        d = self.job_dir(job_id)
        acctg = spec.acctg_freq
        if acctg:
            self.usage.set_job_frequency(job_id, acctg)
            self._usage_wake.set()
        try:
            if os.path.lexists(d):
                if stepd.is_alive(d):
                    log.warning("job %d is already running here; launch ignored", job_id)
                    return
                shutil.rmtree(d)  # fd-based on Linux: does not follow links inside
            uid, gid = spec.uid, spec.gid
            # The job directory is the supervisor's (status, control socket, environment):
            # ours, 0711.  The job reaches only its script, by name, read-only.
            os.mkdir(d, 0o711)
            os.chmod(d, 0o711)  # whatever the umask
            dir_fd = stepd.open_job_dir(d)
            try:
                fd = os.open("script", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o500, dir_fd=dir_fd)
                with os.fdopen(fd, "wb") as f:
                    f.write((spec.script_text or "").encode("utf-8", "surrogateescape"))
                    f.flush()
                    # the owner reads and runs it; no one else reads it (it may hold secrets)
                    if os.geteuid() == 0:
                        os.fchown(f.fileno(), uid, gid)
                    os.fchmod(f.fileno(), 0o500)
                bound = self._pick_cpus(job_id, spec.cpus_count)
                launch = spec.node_side(
                    script=os.path.join(d, "script"), notify_socket=self.notify_path,
                    cgroup_root=self.cgroup_root, cgroup_cluster=self.cgroup_cluster,
                    cpus=bound, **self._limits(spec),
                    container_dir=os.path.join(self.container_dir, spec.node_name or "node"),
                    image_cache=images.cache_dir(self.home))
                # the job's whole environment: readable by root only
                stepd.write_atomic(dir_fd, "launch.json", json.dumps(launch.to_dict()).encode(),
                                   0o600)
            finally:
                os.close(dir_fd)
            if self.spawner is not None:
                await self.spawner.spawn(d)
            else:
                stepd.spawn_step(d)
            if bound:  # the real ids, for `scontrol -d show job` (one node: _pick_cpus)
                self._send(messages.CpusBound(job_id=job_id, node=self.nodes[0],
                                              cpus=bound).to_dict())
        except Exception as e:
            log.exception("launch of job %d failed", job_id)
            self._send({"type": "launch_failed", "job_id": job_id, "error": str(e)})

    def _limits(self, spec: LaunchPlan) -> dict[str, Any]:
        """The cgroup limits of a job (cgroup.conf): its memory limit, a default for a job
        without --mem (the node's memory, as Slurm gives it the whole node), and its pids."""
        mem = spec.mem_mb
        node_mem = spec.node_mem_mb
        limit = self.cgroup_conf.memory_limit_mb(
            int(mem) if mem else None,
            int(node_mem) if node_mem else self.hw.memory_mb, self.hw.memory_mb)
        return {"mem_limit_mb": limit, "pids_max": self.cgroup_conf.pids_max}

    def _pick_cpus(self, job_id: int, count: int) -> list[int] | None:
        """Real CPU ids for a job, or None where CPU binding would be fiction.

        Binding applies when this agent serves one node whose CPUs are this machine's;
        an agent standing in for several declared nodes shares the machine's CPUs between
        them, so their jobs get no affinity (cgroup memory limits still apply).
        """
        if len(self.nodes) != 1 or count <= 0 or count > self.hw.cpus:
            return None
        available = sorted(os.sched_getaffinity(0))
        used: set[int] = set()
        for jid in self.job_ids():
            if jid == job_id:
                continue
            try:
                data = stepd.read_private_file(os.path.join(self.job_dir(jid), "launch.json"),
                                               stepd.MAX_LAUNCH_FILE)
                cpus = json.loads(data).get("cpus") or []
                used.update(c for c in cpus if type(c) is int)
            except (OSError, ValueError, AttributeError, TypeError):
                continue
        free = [c for c in available if c not in used]
        return free[:count] if len(free) >= count else None

    # ---- endings -----------------------------------------------------------
    def _on_notify(self) -> None:
        assert self._dgram is not None
        while True:
            try:
                data = self._dgram.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                return
            try:
                msg = messages.decode(data, messages.TO_AGENT_FROM_STEPD)
            except messages.MessageError as e:
                log.warning("ignored a bad notification %r: %s", data[:200], e)
                continue
            if isinstance(msg, messages.StepdExited):
                self._report(msg.job_id)

    def _report(self, job_id: int) -> None:
        if job_id in self.reported or self.ws is None:
            return
        ev = self.ended_event(job_id)
        if ev is not None:
            self.reported.add(job_id)
            # the batch step's last figures go before its end: sacct has them at once
            final = self._batch_usage(job_id)
            if final is not None:
                self._send(final)
            self._send(ev)

    def _batch_usage(self, job_id: int) -> dict[str, Any] | None:
        """The ended batch step's final `usage`: what sampling saw, with its supervisor's
        count of every process it reaped (stepd's status)."""
        st = stepd.read_status(self.job_dir(job_id)) or {}
        extra = st.get("usage") if isinstance(st.get("usage"), dict) else None
        return self.usage.final(job_id, "batch", None, extra)

    async def _scan_loop(self) -> None:
        """Catch endings whose notification was missed (agent restarting, full socket)."""
        while True:
            await asyncio.sleep(1.0)
            if self.ws is None:
                continue
            for jid in self.job_ids():
                if jid not in self.reported:
                    self._report(jid)


    async def _usage_loop(self) -> None:
        """Sample every running step and GPU at JobAcctGatherFrequency (agent.usage)."""
        while True:
            await self._registered.wait()  # the frequency comes with "registered"
            default = usage.parse_frequency(self.cluster_config.get("acct_gather_frequency"))
            tick = self.usage.tick(default)  # sbatch --acctg-freq may ask for less
            try:
                await asyncio.wait_for(self._usage_wake.wait(), tick or usage.DEFAULT_FREQUENCY)
            except TimeoutError:
                pass
            self._usage_wake.clear()
            if tick is None or self.ws is None or not self._registered.is_set():
                continue
            # reading cgroups and NVML blocks briefly: off the loop
            msg = await asyncio.get_running_loop().run_in_executor(
                None, functools.partial(self.usage.sample, None, default))
            if msg["steps"] or msg["gpus"]:
                self._send(msg)

    def _step_usage_final(self, job_id: int, step_id: int, dirs: dict[str, str] | None) -> None:
        """An srun step ended here (agent.tasks): its last figures, before its group goes."""
        final = self.usage.final(job_id, str(step_id), dirs)
        if final is not None:
            self._send(final)


def _private_dir(path: str) -> None:
    """Make `path` a directory of ours that no one else may write (0711 when root: the
    jobs' users reach their scripts through it), refusing a symlink in its place."""
    os.makedirs(path, mode=0o711, exist_ok=True)
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.geteuid():
        raise SystemExit(f"corral-agent: {path} must be a directory owned by uid"
                         f" {os.geteuid()}")
    if st.st_mode & 0o7777 != 0o711 and (os.geteuid() == 0 or st.st_mode & 0o022):
        os.chmod(path, 0o711)


def _cgroup_root() -> str | None:
    """Confine jobs with cgroups only where this agent may write them."""
    root = "/sys/fs/cgroup"
    if os.geteuid() != 0 or not os.access(root, os.W_OK):
        log.info("cgroups not writable here: jobs are confined by process group and affinity only")
        return None
    return root


def main(argv: list[str] | None = None, spawner: Spawner | None = None) -> int:
    ap = argparse.ArgumentParser(prog="corral-agent")
    ap.add_argument("--home", default=None)
    ap.add_argument("--nodes", default=None, help="hostlist of the node names this agent serves")
    ap.add_argument("--controller-socket", default=None)
    ap.add_argument("--controller-url", default=None,
                    help="https://HOST:PORT of a controller on another machine (corral join)")
    ap.add_argument("--fingerprint", default=None, help="the controller certificate's SHA256:…")
    ap.add_argument("--token-file", default=None, help="file holding the join token")
    ap.add_argument("--login-only", action="store_true",
                    help="serve no node: only forward this machine's CLI requests")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    from corral.model.hostlists import expand

    home = os.path.abspath(args.home) if args.home else paths.corral_home()
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    if not args.nodes and not args.login_only:
        ap.error("--nodes is required (or --login-only)")
    try:
        rc = asyncio.run(_run(args, home, expand(args.nodes or ""), spawner))
    finally:
        if spawner is not None:
            spawner.close()
    return rc


async def _run(args: argparse.Namespace, home: str, nodes: list[str],
               spawner: Spawner | None) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    remote: RemoteController | None = None
    proxy: Proxy | None = None
    if args.controller_url:
        try:
            with open(args.token_file or join_token_path(home)) as f:
                token = f.read().strip()
            remote = RemoteController(args.controller_url, parse_fingerprint(args.fingerprint or ""),
                                      token)
            await _check_join(remote, stop)
        except (JoinError, OSError, ValueError) as e:
            return _join_failed(home, str(e))
        if stop.is_set():
            return 0
        proxy = Proxy(remote, paths.agent_socket_path(home))
        await proxy.start()
    try:
        if args.login_only:
            await stop.wait()
            return 0
        agent = Agent(home, nodes, args.controller_socket or paths.socket_path(home), spawner,
                      remote)
        loop.create_task(_stop_on(stop, agent.stop))
        task = loop.create_task(agent.run())
        await agent.stop.wait()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        # srun tasks are the agent's children (batch jobs have their own supervisors)
        await agent.tasks.shutdown()
        agent.release_stale_containers()
        return 0
    finally:
        if proxy is not None:
            await proxy.stop()


async def _stop_on(outer: asyncio.Event, inner: asyncio.Event) -> None:
    await outer.wait()
    inner.set()


async def _check_join(remote: RemoteController, stop: asyncio.Event, patience: float = 20.0) -> None:
    """Prove the token and the fingerprint with a signed ping before serving anything.

    A refusal is final (JoinError); an unreachable controller is retried for `patience`
    seconds, so `corral join` reports a typo in the address instead of hanging.
    """
    deadline = time.monotonic() + patience
    while True:
        async with remote.session() as session:
            try:
                await remote.check(session)
                return
            except (aiohttp.ClientError, OSError) as e:
                if time.monotonic() > deadline:
                    raise JoinError(f"cannot reach the controller at {remote.url}: {e}") from None
                log.info("controller at %s not reachable yet: %s", remote.url, e)
        try:
            await asyncio.wait_for(stop.wait(), timeout=1.0)
            return
        except TimeoutError:
            pass


def _join_failed(home: str, message: str) -> int:
    """Tell `corral join` (which waits for this process) why joining failed."""
    log.error("cannot join: %s", message)
    try:
        with open(remote_mod.join_error_path(home), "w") as f:
            f.write(message + "\n")
    except OSError:
        pass
    return 2


if __name__ == "__main__":
    sys.exit(main())
