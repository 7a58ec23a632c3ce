"""srun and its WebSocket client against a scripted fake controller.

The fake controller is aiohttp's WebSocket server on a Unix socket in a thread (an
implementation independent of corral.cli.ws); srun runs as a real process so that its
signal handling, stdin and exit code are the real ones.
"""

from __future__ import annotations

import asyncio
import base64
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import WSMsgType, web

from corral.cli import srun, ws
from corral.cli.options import CliExit

Script = Callable[["Peer"], Awaitable[None]]


class Peer:
    """The controller's side of one client connection, for a test script."""

    def __init__(self, sock: web.WebSocketResponse, log: list[dict[str, Any]]):
        self.sock = sock
        self.log = log

    async def send(self, msg: dict[str, Any]) -> None:
        await self.sock.send_json(msg)

    async def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        raw = await asyncio.wait_for(self.sock.receive(), timeout)
        if raw.type != WSMsgType.TEXT:
            raise EOFError(f"client sent {raw.type}")
        msg = raw.json()
        self.log.append(msg)
        return msg

    async def recv_type(self, kind: str, timeout: float = 10.0) -> dict[str, Any]:
        while True:
            msg = await self.recv(timeout)
            if msg.get("type") == kind:
                return msg

    async def output(self, task: int, data: bytes, stream: str = "stdout") -> None:
        await self.send({"type": "output", "task": task, "stream": stream,
                         "data": base64.b64encode(data).decode()})

    async def drain(self) -> None:
        """Read until the client closes, recording what it sent."""
        while True:
            try:
                await self.recv(10.0)
            except (TimeoutError, EOFError):
                return


class FakeController:
    """aiohttp serving /v1/steps/ws on `home`/corral.sock, running `script` per client."""

    def __init__(self, home: Path, script: Script):
        self.path = str(home / "corral.sock")
        self.script = script
        self.log: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self.done = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/v1/steps/ws", self._handle)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.UnixSite(self.runner, self.path).start())
        self.ready.set()
        self.loop.run_forever()

    async def _handle(self, request: web.Request) -> web.WebSocketResponse:
        assert request.headers.get("Host") == "corral"
        sock = web.WebSocketResponse()
        await sock.prepare(request)
        try:
            await self.script(Peer(sock, self.log))
        except BaseException as e:  # reported by the test
            self.errors.append(e)
        finally:
            self.done.set()
        return sock

    def sent(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.log if m.get("type") == kind]

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def controller(home: Path) -> Any:
    made: list[FakeController] = []

    def make(script: Script) -> FakeController:
        ctl = FakeController(home, script)
        made.append(ctl)
        return ctl

    yield make
    for ctl in made:
        ctl.close()
        if ctl.errors:
            raise ctl.errors[0]


def child_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["CORRAL_HOME"] = str(home)
    env.update(extra)
    return env


def run_srun(home: Path, args: list[str], *, stdin: bytes | None = b"", timeout: float = 30,
             **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "corral.cli.srun", *args], input=stdin,
                          capture_output=True, env=child_env(home, **env), timeout=timeout)


async def start_step(peer: Peer, job_id: int = 5, step_id: int = 0,
                     nodes: list[str] | None = None,
                     per_node: list[int] | None = None) -> dict[str, Any]:
    start = await peer.recv_type("start")
    nodes = nodes or ["node-1"]
    per_node = per_node or [1]
    await peer.send({"type": "step", "job_id": job_id, "step_id": step_id, "nodes": nodes,
                     "tasks_per_node": per_node, "ntasks": sum(per_node)})
    return start


# --------------------------------------------------------------------------
# ws.py
# --------------------------------------------------------------------------

def test_accept_key_matches_rfc6455_example() -> None:
    assert ws.accept_key(b"dGhlIHNhbXBsZSBub25jZQ==") == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize("size", [0, 5, 125, 126, 65535, 65536, 300_000])
def test_frames_round_trip_masked_and_fragmented(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    mask = b"\x01\x80\xfe\x33"
    masked = ws.encode_frame(ws.OP_TEXT, payload, mask=mask)
    assert masked[1] & 0x80
    assert ws.mask_payload(mask, ws.mask_payload(mask, payload)) == payload
    if size:
        assert ws.mask_payload(mask, payload) != payload
    # a server message split in two fragments with a ping in between
    text = ('{"x": "' + "a" * size + '"}').encode()
    half = len(text) // 2
    stream = (ws.encode_frame(ws.OP_TEXT, text[:half], fin=False)
              + ws.encode_frame(ws.OP_PING, b"hi")
              + ws.encode_frame(ws.OP_CONT, text[half:]))

    class FakeSock:
        def __init__(self) -> None:
            self.sent = b""

        def sendall(self, data: bytes) -> None:
            self.sent += data

        def fileno(self) -> int:
            return -1

        def close(self) -> None:
            pass

    sock = FakeSock()
    client = ws.WebSocket(sock, stream)
    assert client.has_buffered()
    assert client.read_messages() == [{"x": "a" * size}]
    # the ping was answered with a masked pong carrying the same payload
    assert sock.sent[0] == 0x80 | ws.OP_PONG and sock.sent[1] == 0x80 | 2
    assert ws.mask_payload(sock.sent[2:6], sock.sent[6:]) == b"hi"


def test_connect_refused_upgrade_reports_the_error(tmp_path: Path) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"error": "Access/permission denied"}, status=403)

    app = web.Application()
    app.router.add_get("/v1/steps/ws", handler)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    path = str(tmp_path / "s.sock")
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.UnixSite(runner, path).start())
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        with pytest.raises(ws.WebSocketError, match="Access/permission denied"):
            ws.connect(path, "/v1/steps/ws")
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)


def test_ws_talks_to_aiohttp_and_sees_the_close(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        msg = await peer.recv()
        await peer.send({"echo": msg, "big": "z" * 200_000})
        await peer.sock.ping(b"p")
        await peer.sock.close(code=4000)

    ctl = controller(script)
    client = ws.connect(ctl.path, "/v1/steps/ws")
    client.send_json({"hello": "wörld"})
    got = client.recv_json(timeout=10)
    assert got["echo"] == {"hello": "wörld"} and len(got["big"]) == 200_000
    with pytest.raises(ws.ConnectionClosed) as info:
        while True:
            assert client.recv_json(timeout=10) is not None
    assert info.value.code == 4000


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------

def parse(args: list[str], env: dict[str, str] | None = None, **kw: Any) -> srun.SrunRequest:
    return srun.parse_srun(args, env or {"PATH": "/bin"}, "/home/alice", 1000.0, **kw)


def test_inside_a_job_the_step_takes_the_allocation_environment() -> None:
    req = parse(["-l", "hostname"], {"SLURM_JOB_ID": "12", "SLURM_JOB_NUM_NODES": "2",
                                      "HOME": "/home/alice"})
    assert req.job_id == 12 and req.alloc is None and req.label
    step = req.step
    assert step["argv"] == ["hostname"] and step["name"] == "hostname"
    assert step["nodes"] == 2 and step["ntasks"] is None  # the controller: one per node
    assert step["stdin"] == "all" and step["gpus_per_node"] is None
    assert step["env"]["HOME"] == "/home/alice"
    msg = srun.start_message(req)
    assert msg["type"] == "start" and msg["job_id"] == 12 and "alloc_env" not in msg


def test_fewer_tasks_than_allocated_nodes_warns_like_slurm() -> None:
    req = parse(["-n1", "true"], {"SLURM_JOB_ID": "3", "SLURM_JOB_NUM_NODES": "2"})
    assert req.messages == ["srun: Warning: can't run 1 processes on 2 nodes, "
                            "setting nnodes to 1"]
    assert req.step["nodes"] == 1 and req.step["ntasks"] == 1


def test_outside_a_job_srun_asks_for_an_allocation_named_after_the_command() -> None:
    req = parse(["-N2", "--ntasks-per-node=2", "-t", "5", "--gres=gpu:2", "/usr/bin/nvidia-smi",
                 "-L"], {"PATH": "/bin", "FOO": "1"})
    assert req.job_id is None and req.alloc is not None
    spec = req.alloc
    assert spec["name"] == "nvidia-smi" and spec["batch"] is False
    assert spec["num_nodes"] == 2 and spec["num_tasks"] == 4 and spec["time_limit"] == 300
    assert spec["gpus_per_node"] == 2
    assert req.step["argv"] == ["/usr/bin/nvidia-smi", "-L"]
    assert req.alloc_env is not None and req.alloc_env["FOO"] == "1"
    assert req.alloc_env["SLURM_SUBMIT_DIR"] == "/home/alice"


@pytest.mark.parametrize(("gres", "per_node"), [("gpu:0", 0), ("none", 0), ("gpu:3", 3),
                                                 ("gpu:a100:2", 2)])
def test_gres_sets_the_steps_gpus_per_node(gres: str, per_node: int) -> None:
    req = parse([f"--gres={gres}", "true"], {"SLURM_JOB_ID": "7"})
    assert req.step["gpus_per_node"] == per_node


def test_io_options_and_export() -> None:
    req = parse(["-o", "out-%t.txt", "-e", "none", "-i", "none", "--export=NONE,A=1", "-K",
                 "--overlap", "true"], {"SLURM_JOB_ID": "7", "B": "2", "SLURM_X": "y"})
    step = req.step
    assert step["output"] == "out-%t.txt" and step["error"] == "/dev/null"
    assert step["stdin"] == "none" and step["kill_on_bad_exit"] and step["overlap"]
    env = {k: v for k, v in step["env"].items() if not k.startswith("SLURM_RLIMIT_")}
    assert env == {"A": "1", "SLURM_JOB_ID": "7", "SLURM_X": "y", "SLURM_UMASK": "0022"}


@pytest.mark.parametrize(("args", "code", "stderr"), [
    (["--bogus", "true"], 1,
     "srun: unrecognized option '--bogus'\nTry \"srun --help\" for more information\n"),
    (["-n"], 1,
     "srun: option requires an argument -- 'n'\nTry \"srun --help\" for more information\n"),
    (["--mpi=pmix", "true"], 1,
     "srun: error: --mpi=pmix: PMIx is not supported by Corral (use pmi2 or none)\n"),
    (["--mpi=pmix_v4", "true"], 1,
     "srun: error: --mpi=pmix_v4: PMIx is not supported by Corral (use pmi2 or none)\n"),
    (["--mpi=bogus", "true"], 1,
     "srun: error: --mpi=bogus: unknown MPI type (Corral offers: none, pmi2)\n"),
    (["-t", "bogus", "true"], 255, "srun: error: Invalid --time specification\n"),
    (["--gres=fpga:1", "true"], 1,
     "srun: error: Invalid generic resource (gres) specification\n"),
    ([], 1, "srun: error: No command given to execute.\n"),
])
def test_bad_command_lines(args: list[str], code: int, stderr: str) -> None:
    with pytest.raises(CliExit) as info:
        parse(args, {"SLURM_JOB_ID": "7"})
    assert info.value.code == code
    assert info.value.stderr == stderr


def test_main_prints_help_version_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert srun.main(["--version"]) == 0
    assert capsys.readouterr().out == "slurm-wlm 22.05.8\n"
    assert srun.main(["--help", "--bogus"]) == 0
    assert capsys.readouterr().out.startswith("Usage: srun [OPTIONS...]")
    assert srun.main(["--mpi=list"]) == 0
    assert capsys.readouterr().out == "MPI plugin types are...\n\tnone\n\tpmi2\n"


# --------------------------------------------------------------------------
# Output routing
# --------------------------------------------------------------------------

def test_labels_whole_lines_per_task_and_stream() -> None:
    r, w = os.pipe()
    r2, w2 = os.pipe()
    router = srun.OutputRouter(label=True, raw=False, ntasks=12, fds=(w, w2))
    router.output(3, 1, b"hel")
    router.output(10, 1, b"ten\nte")
    router.output(3, 1, b"lo\nwor")
    router.output(3, 2, b"err\n")
    router.flush_task(3)
    router.flush_all()
    os.close(w)
    os.close(w2)
    assert os.read(r, 1000) == b"10: ten\n 3: hello\n 3: wor\n10: te\n"
    assert os.read(r2, 1000) == b" 3: err\n"


def test_unlabelled_output_keeps_lines_whole_and_raw_mode_passes_bytes() -> None:
    r, w = os.pipe()
    router = srun.OutputRouter(label=False, raw=False, ntasks=2, fds=(w, w))
    router.output(0, 1, b"a")
    router.output(1, 1, b"b\n")
    router.output(0, 1, b"c\n")
    raw = srun.OutputRouter(label=False, raw=True, fds=(w, w))
    raw.output(0, 1, b"\x1b[1mx")
    os.close(w)
    assert os.read(r, 100) == b"b\nac\n\x1b[1mx"


def test_exit_lines_and_exit_code_rules() -> None:
    assert srun.exit_line("node-1", 3, 0, 9) == "srun: error: node-1: task 3: Killed"
    assert srun.exit_line("node-2", 1, 2, 0) == \
        "srun: error: node-2: task 1: Exited with exit code 2"
    assert srun.exit_line("node-2", 1, 0, 0) is None
    assert srun.exit_line("n", 0, 0, 11 | 0x80) == \
        "srun: error: n: task 0: Segmentation fault (core dumped)"
    assert srun.step_exit_code({0: (3, 0), 1: (0, 0)}) == 3
    assert srun.step_exit_code({0: (200, 0), 1: (0, 9), 2: (0, 15)}) == 128 + 15
    assert srun.ranges([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"


# --------------------------------------------------------------------------
# srun against the fake controller
# --------------------------------------------------------------------------

def test_labelled_output_exit_lines_and_exit_code(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        await start_step(peer, job_id=9, step_id=2, nodes=["node-1", "node-2"],
                         per_node=[2, 2])
        await peer.output(0, b"zero pa")
        await peer.output(2, b"two\n")
        await peer.output(0, b"rt\nlast")
        await peer.output(1, b"oops\n", "stderr")
        await peer.send({"type": "exit", "task": 0, "exit_code": 0, "signal": 0})
        await peer.send({"type": "exit", "task": 1, "exit_code": 2, "signal": 0})
        await peer.send({"type": "exit", "task": 2, "exit_code": 0, "signal": 0})
        await peer.send({"type": "exit", "task": 3, "exit_code": 0, "signal": 9})
        await peer.send({"type": "step_end", "exit_code": 137})
        await peer.drain()

    ctl = controller(script)
    res = run_srun(home, ["-l", "-n4", "hostname"], SLURM_JOB_ID="9")
    assert res.stdout == b"2: two\n0: zero part\n0: last\n"
    assert res.stderr.decode() == ("1: oops\n"
                                   "srun: error: node-1: task 1: Exited with exit code 2\n"
                                   "srun: error: node-2: task 3: Killed\n")
    assert res.returncode == 137
    start = ctl.sent("start")[0]
    assert start["job_id"] == 9 and start["alloc"] is None
    assert start["step"]["ntasks"] == 4 and start["step"]["argv"] == ["hostname"]
    assert ctl.sent("release") == []  # srun did not create the allocation


def test_stdin_is_forwarded_until_eof(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        await start_step(peer)
        data = b""
        while True:
            msg = await peer.recv()
            if msg["type"] == "stdin_eof":
                break
            assert msg["type"] == "stdin"
            data += base64.b64decode(msg["data"])
        await peer.output(0, data.upper())
        await peer.send({"type": "exit", "task": 0, "exit_code": 0, "signal": 0})
        await peer.send({"type": "step_end", "exit_code": 0})
        await peer.drain()

    controller(script)
    payload = b"line one\nline two\n" + bytes(range(256)) * 400 + b"\n"
    res = run_srun(home, ["cat"], stdin=payload, SLURM_JOB_ID="5")
    assert res.returncode == 0, res.stderr
    assert res.stdout == payload.upper()


def test_new_allocation_pending_messages_and_release(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        start = await peer.recv_type("start")
        assert start["job_id"] is None and start["alloc"]["name"] == "sleep"
        await peer.send({"type": "pending", "job_id": 77, "reason": "Resources"})
        await peer.send({"type": "allocated", "job_id": 77, "nodes": "node-1",
                         "env": {"SLURM_JOB_ID": "77"}})
        await peer.send({"type": "waiting", "message": "Job step creation temporarily "
                         "disabled, retrying (Requested nodes are busy)"})
        await peer.send({"type": "step", "job_id": 77, "step_id": 0, "nodes": ["node-1"],
                         "tasks_per_node": [1], "ntasks": 1})
        await peer.send({"type": "exit", "task": 0, "exit_code": 3, "signal": 0})
        await peer.send({"type": "step_end", "exit_code": 3})
        await peer.drain()

    ctl = controller(script)
    res = run_srun(home, ["sleep", "0"])
    assert res.stderr.decode() == (
        "srun: job 77 queued and waiting for resources\n"
        "srun: job 77 has been allocated resources\n"
        "srun: Job 77 step creation temporarily disabled, retrying (Requested nodes are busy)\n"
        "srun: Step created for StepId=77.0\n"
        "srun: error: node-1: task 0: Exited with exit code 3\n")
    assert res.returncode == 3
    assert ctl.sent("release") == [{"type": "release", "exit_code": 3}]
    assert "alloc_env" in ctl.sent("start")[0]


def test_controller_error_is_printed_and_exits_1(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        await peer.recv_type("start")
        await peer.send({"type": "error", "message": "Unable to allocate resources: "
                         "Requested node configuration is not available"})
        await peer.drain()

    ctl = controller(script)
    res = run_srun(home, ["-N", "10", "true"])
    assert res.returncode == 1
    assert res.stderr.decode() == ("srun: error: Unable to allocate resources: Requested node "
                                   "configuration is not available\n")
    assert ctl.sent("release") == []


def test_immediate_gives_up_on_a_pending_allocation(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        await peer.recv_type("start")
        await peer.send({"type": "pending", "job_id": 8, "reason": "PartitionNodeLimit"})
        await peer.drain()

    ctl = controller(script)
    t0 = time.monotonic()
    res = run_srun(home, ["--immediate=1", "-N", "10", "true"])
    assert res.returncode == 1 and time.monotonic() - t0 < 15
    assert res.stderr.decode().endswith(
        "srun: error: Unable to allocate resources: Requested partition configuration not "
        "available now\n")
    assert ctl.sent("release") == []  # closing the socket cancels the pending job


def test_no_controller_is_one_clear_line(home: Path) -> None:
    res = run_srun(home, ["true"], SLURM_JOB_ID="1")
    assert res.returncode == 1
    assert res.stderr.decode() == (f"srun: error: no Corral controller is running for {home} "
                                   "(start one with `corral up`, or set CORRAL_HOME)\n")


def test_lost_controller_connection(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        await start_step(peer)
        await peer.output(0, b"partial")
        await peer.sock.close()

    controller(script)
    res = run_srun(home, ["true"], SLURM_JOB_ID="1")
    assert res.returncode == 1
    assert res.stdout == b"partial"
    assert res.stderr.decode() == "srun: error: Lost connection to the Corral controller\n"


def test_kill_on_bad_exit_cancels_the_step(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        await start_step(peer, per_node=[2])
        await peer.send({"type": "exit", "task": 1, "exit_code": 4, "signal": 0})
        await peer.recv_type("cancel")
        await peer.send({"type": "exit", "task": 0, "exit_code": 0, "signal": 15})
        await peer.send({"type": "step_end", "exit_code": 143})
        await peer.drain()

    controller(script)
    res = run_srun(home, ["-K", "-n2", "x"], SLURM_JOB_ID="1")
    assert res.returncode == 143
    assert "srun: error: node-1: task 1: Exited with exit code 4\n" in res.stderr.decode()


def test_two_ctrl_c_within_a_second_abort_the_step(home: Path, controller: Any) -> None:
    got_signal = threading.Event()
    running = threading.Event()

    async def script(peer: Peer) -> None:
        await start_step(peer, job_id=5, step_id=1)
        await peer.output(0, b"started\n")
        running.set()
        sig = await peer.recv_type("signal", timeout=20)
        assert sig["signal"] == 2
        got_signal.set()
        await peer.recv_type("cancel")
        await peer.send({"type": "exit", "task": 0, "exit_code": 0, "signal": 2})
        await peer.send({"type": "step_end", "exit_code": 130})
        await peer.drain()

    ctl = controller(script)
    proc = subprocess.Popen([sys.executable, "-m", "corral.cli.srun", "sleep", "100"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=child_env(home, SLURM_JOB_ID="5"))
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"started\n"
        assert running.wait(10)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        assert not got_signal.is_set()  # the first Ctrl-C only reports (Slurm)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.decode() == ("srun: interrupt (one more within 1 sec to abort)\n"
                            "srun: StepId=5.1 task 0: running\n"
                            "srun: sending Ctrl-C to StepId=5.1\n"
                            "srun: forcing job termination\n")
    # SIGINT, then SIGKILL to the tasks at once (job_force_termination), then the step's end
    assert [m["type"] for m in ctl.log] == ["start", "stdin_eof", "signal", "signal", "cancel"]
    assert [m["signal"] for m in ctl.log if m["type"] == "signal"] == [2, 9]


def test_pty_raw_mode_window_size_and_restore(home: Path, controller: Any,
                                             tmp_path: Path) -> None:
    resized = threading.Event()

    async def script(peer: Peer) -> None:
        start = await start_step(peer)
        assert start["step"]["pty"] is True and start["step"]["stdin"] == "0"
        assert start["step"]["window"] == {"rows": 30, "cols": 100}
        await peer.output(0, b"ready\r\n")
        data = b""
        while b"q" not in data:
            msg = await peer.recv()
            if msg["type"] == "resize":
                assert (msg["rows"], msg["cols"]) == (40, 120)
                resized.set()
            elif msg["type"] == "stdin":
                chunk = base64.b64decode(msg["data"])
                data += chunk
                await peer.output(0, b"<" + chunk + b">")
        await peer.send({"type": "exit", "task": 0, "exit_code": 0, "signal": 0})
        await peer.send({"type": "step_end", "exit_code": 0})
        await peer.drain()

    controller(script)
    stty_file = tmp_path / "stty.txt"
    env = child_env(home, SLURM_JOB_ID="5")
    cmd = (f"stty -a > {tmp_path}/before.txt; {sys.executable} -m corral.cli.srun --pty bash; "
           f"echo rc=$?; stty -a > {stty_file}")
    pid, master = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execve("/bin/sh", ["sh", "-c", cmd], env)
    import fcntl
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    output = b""

    def read_until(marker: bytes, timeout: float = 20) -> None:
        nonlocal output
        deadline = time.monotonic() + timeout
        while marker not in output:
            left = deadline - time.monotonic()
            assert left > 0, output
            ready, _, _ = select.select([master], [], [], left)
            if ready:
                try:
                    output += os.read(master, 4096)
                except OSError:
                    break

    try:
        read_until(b"ready")
        # raw mode: a Ctrl-C byte goes to the task instead of signalling srun
        os.write(master, b"a\x03")
        read_until(b"\x03>")
        assert b"^C" not in output  # the local terminal did not echo it
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        deadline = time.monotonic() + 10
        while not resized.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert resized.is_set()
        os.write(master, b"q")
        read_until(b"rc=")
        read_until(b"\n")
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(master)
    assert b"rc=0" in output
    before = (tmp_path / "before.txt").read_text()
    after = stty_file.read_text()
    assert {"icanon", "echo", "isig", "icrnl", "opost"} <= set(after.split())
    # the same settings as before srun, window size aside
    assert before.split("\n", 1)[1] == after.split("\n", 1)[1]


# ---- --multi-prog, --gpu-bind ------------------------------------------------------------

def test_multi_prog_file_sets_the_task_count_and_travels_in_the_step(tmp_path: Any) -> None:
    conf = tmp_path / "m.conf"
    conf.write_text("0-2 hostname\n3 echo %t\n")
    req = srun.parse_srun(["--multi-prog", "m.conf", "extra"], {"PATH": "/bin"},
                          str(tmp_path), 1000.0)
    assert req.step["multi_prog"] == conf.read_text() and req.step["ntasks"] == 4
    assert req.step["argv"] == ["m.conf", "extra"]
    assert req.alloc is not None and req.alloc["num_tasks"] == 4


@pytest.mark.parametrize(("text", "args", "lines"), [
    ("0 a\n0 b\n", [], ["Duplicate record for task 0",
                        "Line 2 of configuration file m.conf invalid"]),
    ("0 a\n", ["-n2"], ["Configuration file m.conf invalid, no record for task id 1"]),
    ("0-3 a\n", ["-n2"], ["Invalid task id, 3 >= ntasks",
                          "Line 1 of configuration file m.conf invalid"]),
    ("* a\n0 b\n", [], ["Task range specification with asterisk must be last",
                        "Line 2 of configuration file m.conf invalid"]),
    ("x1 a\n", [], ["Invalid task range specification (x1)",
                    "Line 1 of configuration file m.conf invalid"]),
    ("0\n", [], ["Line 1 of configuration file m.conf invalid"]),
])
def test_multi_prog_errors_are_srun_s(tmp_path: Any, text: str, args: list[str],
                                      lines: list[str]) -> None:
    (tmp_path / "m.conf").write_text(text)
    with pytest.raises(CliExit) as info:
        srun.parse_srun([*args, "--multi-prog", "m.conf"], {"PATH": "/bin"}, str(tmp_path),
                        1000.0)
    assert info.value.code == 1
    assert info.value.stderr == "".join(f"srun: error: {line}\n" for line in lines)


def test_multi_prog_argv_per_task() -> None:
    from corral.model.jobenv import multi_prog_argv

    text = "# c\n\n0,2 prog %t-%o 'a b' c\\ d\n1,3-4 other\n* rest %o\n"
    assert multi_prog_argv(text, 0, ["x"]) == ["prog", "0-0", "a b", "c d", "x"]
    assert multi_prog_argv(text, 2, []) == ["prog", "2-1", "a b", "c d"]
    assert multi_prog_argv(text, 4, []) == ["other"]
    assert multi_prog_argv(text, 7, []) == ["rest", "7"]
    assert multi_prog_argv("0 a\n", 1, []) is None


@pytest.mark.parametrize("value", ["closest", "none", "verbose,none", "map_gpu:0,1*2",
                                   "mask_gpu:0x3,c", "per_task:2", "single:1", "closest:1",
                                   "single:", "map_gpu:", "NONE", "Verbose,cl"])
def test_gpu_bind_accepted(value: str) -> None:
    req = parse([f"--gpu-bind={value}", "true"], {"SLURM_JOB_ID": "7"})
    assert req.step["gpu_bind"] == value


@pytest.mark.parametrize("value", ["", "bogus", "map_gpu:x", "map_gpu:0x3", "verbose,",
                                   "verbose", "mask_gpu:0xg", "map_gpu:1*x"])
def test_gpu_bind_refused(value: str) -> None:
    # srun's check (tres_bind.c) and message
    with pytest.raises(CliExit) as info:
        parse([f"--gpu-bind={value}", "true"], {"SLURM_JOB_ID": "7"})
    assert info.value.stderr == f"srun: error: Invalid --gpu-bind argument: gpu:{value}\n"


def test_gpu_binding_per_task() -> None:
    from corral.model.jobenv import bind_task_gpus

    gpus = [4, 5, 6, 7]
    # per_task: the i-th block; past the step's GPUs, its first (slurmstepd's fallback)
    assert [bind_task_gpus("per_task", [1], i, gpus) for i in range(5)] == \
        [[4], [5], [6], [7], [4]]
    assert bind_task_gpus("per_task", [3], 1, gpus) == [7]
    assert [bind_task_gpus("single", [2], i, gpus) for i in range(4)] == [[4], [4], [5], [5]]
    assert bind_task_gpus("map_gpu", [9, 5], 0, gpus) == [4]  # not the step's: its first
    assert bind_task_gpus("map_gpu", [9, 5], 1, gpus) == [5]
    assert bind_task_gpus("mask_gpu", [0x30], 0, gpus) == [4, 5]
    assert bind_task_gpus("closest", [], 0, gpus) == gpus
    assert bind_task_gpus("none", [], 0, gpus) is None


def test_gpu_bind_read_as_slurmstepd_reads_it() -> None:
    from corral.model.jobenv import parse_gpu_bind

    assert parse_gpu_bind("map_gpu:1*2,0") == (False, "map_gpu", [1, 1, 0])
    assert parse_gpu_bind("mask_gpu:0x3,12") == (False, "mask_gpu", [3, 12])  # strtol base 0
    assert parse_gpu_bind("verbose,single:0") == (True, "single", [1])
    assert parse_gpu_bind("c")[1] == "none"  # srun accepts it; slurmstepd binds nothing
    assert parse_gpu_bind("per_task:0")[1] == "none"


@pytest.mark.parametrize(("args", "code", "stderr"), [
    (["-p", "", "true"], 1, "srun: error: invalid partition specified: \n"
     "srun: error: Unable to allocate resources: Invalid partition name specified\n"),
    (["-I", "-H", "true"], 1, "srun: error: Unable to allocate resources: Immediate execution "
     "impossible, insufficient priority\n"),
    (["-C", "a&|b", "true"], 1,
     "srun: error: Unable to allocate resources: Invalid feature specification\n"),
    (["-n1", "true", ":", "-n1", "hostname"], 1,
     "srun: error: heterogeneous jobs are not supported by Corral\n"
     "srun: error: Unable to allocate resources: Requested operation not supported on this "
     "system\n"),
    (["--cpu-freq=xx", "true"], 255, "srun: error: unrecognized --cpu-freq argument \"xx\"\n"
     "srun: error: Invalid --cpu-freq argument\n"),
    (["-m", "bogus", "true"], 255, "srun: error: Invalid --distribution specification\n"),
])
def test_allocation_refused_before_asking_the_controller(args: list[str], code: int,
                                                         stderr: str) -> None:
    """What slurmctld refuses in the job spec (options.spec_problem), -I with -H, het job
    components, and bad values of ignored options: Slurm's lines and exit status."""
    with pytest.raises(CliExit) as info:
        parse(args)
    assert (info.value.code, info.value.stderr) == (code, stderr)


def test_hold_input_task_and_checked_options_named_by_verbose() -> None:
    req = parse(["-v", "-H", "-m", "block", "--cpu-freq=high", "--input=3", "-n4", "cat"])
    assert req.alloc is not None and req.alloc["held"] == "user"
    assert req.step["stdin"] == "3" and req.step["input"] is None
    assert req.messages[0] == "srun: defined options"  # -v's list comes first
    assert req.messages[-2:] == ["srun: --distribution has no effect under Corral",
                                 "srun: --cpu-freq has no effect under Corral"]
    assert "--cpu-freq" in srun.HELP_TEXT and "--kill-on-invalid-dep" in srun.HELP_TEXT
    msg = srun.start_message(req)
    assert msg["step"]["stdin"] == "3"


def test_resource_limits_propagate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shell's soft limits travel as SLURM_RLIMIT_* (PropagateResourceLimits, default
    ALL, and PropagateResourceLimitsExcept; --propagate overrides, marking its names "U")."""
    import resource

    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    try:
        env = parse(["true"], {"SLURM_JOB_ID": "7"}).step["env"]
        assert env["SLURM_RLIMIT_CORE"] == "0"
        assert {k for k in env if k.startswith("SLURM_RLIMIT_")} == {
            f"SLURM_RLIMIT_{n}" for n in srun.RLIMITS}
        (tmp_path / "slurm.conf").write_text("PropagateResourceLimitsExcept=CORE,NOFILE\n")
        env = parse(["true"], {"SLURM_JOB_ID": "7"}).step["env"]
        assert "SLURM_RLIMIT_CORE" not in env and "SLURM_RLIMIT_STACK" in env
        (tmp_path / "slurm.conf").write_text("PropagateResourceLimits=NONE\n")
        env = parse(["--propagate=core", "true"], {"SLURM_JOB_ID": "7"}).step["env"]
        assert [k for k in env if k.startswith("SLURM_RLIMIT_")] == ["SLURM_RLIMIT_CORE"]
        assert env["SLURM_RLIMIT_CORE"] == "U0"
        env = parse(["true"], {"SLURM_JOB_ID": "7"}).step["env"]
        assert not [k for k in env if k.startswith("SLURM_RLIMIT_")]
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    with pytest.raises(CliExit) as info:
        parse(["--propagate=CORE,bogus", "true"], {"SLURM_JOB_ID": "7"})
    assert (info.value.code, info.value.stderr) == (
        1, "srun: error: --propagate=CORE,bogus is not valid.\n")


def test_no_allocate_needs_a_node_list_and_makes_no_allocation() -> None:
    for args, err in ((["-Z", "true"], "must specify a node list with -Z, --no-allocate."),
                      (["-Z", "-w", "node-1", "-x", "node-2", "true"],
                       "can not specify --exclude list with -Z, --no-allocate.")):
        with pytest.raises(CliExit) as info:
            parse(args)
        assert (info.value.code, info.value.stderr) == (1, f"srun: error: {err}\n")
    req = parse(["-Z", "-w", "node-1", "-n2", "hostname"], {"SLURM_JOB_ID": "9"})
    assert req.job_id is None and req.alloc is None
    msg = srun.start_message(req)
    assert msg["job_id"] is None and msg["alloc"] is None
    assert msg["step"]["no_allocate"] and msg["step"]["nodelist"] == ["node-1"]
