"""The controller's edge under attack (docs/SECURITY.md): untrusted agent messages, broken
API payloads, oversized requests, idle and piled-up connections from an unprivileged
user, and a user finding root's cluster without configuring anything.

Needs root (creates users, acts as an agent on the controller's socket).
"""

from __future__ import annotations

import asyncio
import json
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.cluster import Cluster, needs_test_users
from tests.e2e.test_users import run_as, users  # noqa: F401 - the fixture

pytestmark = [
    pytest.mark.slow,
    needs_test_users,
]

IDLE = 3  # MessageTimeout: idle connections are closed after it
CONFIG = f"""\
ClusterName=edgecluster
KillWait=2
MinJobAge=600
SchedulerInterval=1
MessageTimeout={IDLE}
NodeName=node-1 CPUs=4 RealMemory=4000
NodeName=fake1 CPUs=4 RealMemory=4000 NodeAddr=10.213.99.9
PartitionName=debug Nodes=node-1,fake1 Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="module")
def edge(users: dict[str, pwd.struct_passwd]) -> Iterator[Cluster]:  # noqa: F811
    # pytest's tmp dirs are private to root; the users must reach the socket
    top = Path(tempfile.mkdtemp(prefix="corral-edge-"))
    top.chmod(0o755)
    c = Cluster(top / "c", CONFIG)
    c.start()
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(top, ignore_errors=True)


def sock_path(c: Cluster) -> str:
    return str(c.home / "corral.sock")


def raw_http(c: Cluster, head: str, body: bytes = b"", timeout: float = 10) -> tuple[int, Any]:
    """One request, byte for byte as given (no client-side checks)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock_path(c))
    try:
        s.sendall(head.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(1 << 16)
            assert chunk, data
            data += chunk
        header, _, content = data.partition(b"\r\n\r\n")
        length = int(header.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(content) < length:
            chunk = s.recv(1 << 16)
            assert chunk, content
            content += chunk
    finally:
        s.close()
    return int(header.split()[1]), json.loads(content)


def request(c: Cluster, method: str, path: str, body: bytes) -> tuple[int, Any]:
    return raw_http(c, f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n", body)


def node_field(c: Cluster, node: str, field: str) -> str:
    out = c.ok("scontrol", "show", "node", node)
    return out.split(f"{field}=", 1)[1].split()[0]


# ---- untrusted agent messages ---------------------------------------------------------------

class FakeAgent:
    """An agent link on the controller's socket (as root, like the local agent)."""

    def __init__(self, c: Cluster) -> None:
        self.c = c
        self.inbox: list[dict[str, Any]] = []

    async def __aenter__(self) -> FakeAgent:
        self.session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=sock_path(self.c)))
        self.ws = await self.session.ws_connect("http://corral/v1/agent/ws")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.ws.close()
        await self.session.close()

    async def send(self, msg: Any) -> None:
        await self.ws.send_str(msg if isinstance(msg, str) else json.dumps(msg))

    async def expect(self, pred: Any, timeout: float = 15) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for m in self.inbox:
                if pred(m):
                    self.inbox.remove(m)
                    return m
            left = deadline - time.monotonic()
            assert left > 0, f"no such message; got {self.inbox}"
            raw = await self.ws.receive(timeout=left)
            assert raw.type == aiohttp.WSMsgType.TEXT, f"link closed: {raw}"
            data = json.loads(raw.data)
            self.inbox.extend(data.get("messages", [data]))


def test_bad_agent_messages_are_refused_alone(edge: Cluster) -> None:
    c = edge
    other = c.sbatch("-w", "node-1", "--wrap", "sleep 120")  # the real agent's job
    c.wait_state(other, "RUNNING")

    async def scenario() -> dict[str, Any]:
        async with FakeAgent(c) as a:
            await a.send({"type": "ended", "job_id": other, "state": "COMPLETED"})  # unregistered
            await a.send({"type": "register", "nodes": ["fake1", "nosuchnode"], "running": [],
                          "ended": [{"job_id": "x"}], "hw": {"cpus": "lots", "hostname": "fake"}})
            reg = await a.expect(lambda m: m.get("type") == "registered")
            assert reg["nodes"] == ["fake1"]
            jid = await asyncio.to_thread(c.sbatch, "-w", "fake1", "--wrap", "sleep 120")
            launch = await a.expect(lambda m: m.get("type") == "launch")
            assert launch["launch"]["job_id"] == jid
            # a job that rewrote its status, a broken or lying node: each refused alone
            for bad in ["not json {", "[1, 2]", {"type": "bogus"}, {"no": "type"},
                        {"type": "ended", "job_id": jid, "state": "BOGUS"},
                        {"type": "ended", "job_id": str(jid), "state": "COMPLETED"},
                        {"type": "ended", "job_id": jid, "state": "COMPLETED", "exit_code": -5},
                        {"type": "ended", "job_id": jid, "state": "COMPLETED", "end_time": "soon"},
                        {"type": "ended", "job_id": other, "state": "COMPLETED"},  # not its node
                        {"type": "launch_failed", "job_id": other},
                        {"type": "cpus_bound", "job_id": other, "node": "node-1", "cpus": [0]},
                        {"type": "cpus_bound", "job_id": other, "node": "fake1", "cpus": [0]},
                        {"type": "cpus_bound", "job_id": jid, "node": "fake1", "cpus": [1, 2]},
                        {"type": "cpus_bound", "job_id": jid, "node": "fake1", "cpus": [-1]},
                        {"type": "heartbeat", "load": "high"},
                        {"type": "task_exit", "job_id": "x", "step_id": 0, "task_id": 0},
                        {"type": "task_output", "job_id": other, "step_id": 0, "task_id": 0,
                         "data": "forged"},
                        {"type": "register", "nodes": ["node-1"], "running": [], "ended": []}]:
                await a.send(bad)
            await a.send({"type": "heartbeat", "load": 0.5, "free_mem": 1000})
            await a.send({"type": "cpus_bound", "job_id": jid, "node": "fake1", "cpus": [5]})
            await asyncio.sleep(1.5)
            mid = {"job": await asyncio.to_thread(c.state, jid),
                   "other": await asyncio.to_thread(c.state, other),
                   "alloc": await asyncio.to_thread(node_field, c, "fake1", "CPUAlloc"),
                   "fake1": await asyncio.to_thread(c.ok, "sinfo", "-h", "-n", "fake1", "-o", "%t"),
                   "show": await asyncio.to_thread(c.ok, "scontrol", "-d", "show", "job", str(jid))}
            # the link is still up: a valid end is applied and acknowledged, once
            end = {"type": "ended", "job_id": jid, "state": "COMPLETED", "exit_code": 0,
                   "signal": 0, "end_time": time.time()}
            await a.send(end)
            await a.expect(lambda m: m.get("type") == "ack" and m.get("job_id") == jid)
            await a.send(end)  # resent (a reconnect): no second release
            await a.expect(lambda m: m.get("type") == "ack" and m.get("job_id") == jid)
            mid["after"] = await asyncio.to_thread(node_field, c, "fake1", "CPUAlloc")
            mid["jid"] = jid
            return mid

    res = asyncio.run(scenario())
    assert res["job"] == "RUNNING" and res["other"] == "RUNNING"
    assert res["alloc"] == "1" and res["fake1"].strip() in ("alloc", "mix")
    assert res["after"] == "0"
    assert "CPU_IDs=5 " in res["show"], res["show"]  # the agent's real ids, for its own node
    assert c.state(res["jid"]) == "COMPLETED"
    assert c.state(other) == "RUNNING"  # the lying "ended" for node-1's job changed nothing
    assert node_field(c, "node-1", "CPUAlloc") == "1"
    log = (c.home / "log" / "controller.log").read_text()
    assert "ended.state: 'BOGUS' is not one of" in log
    assert "register.ended.job_id: expected an integer" in log
    assert f"job {other} is not running on this agent's nodes" in log
    assert "node 'node-1' is not this agent's" in log
    assert f"job {other} is not running on node 'fake1'" in log
    assert f"job {res['jid']} has no 2 CPUs on node 'fake1'" in log
    assert "this agent's key does not serve" not in log  # the local agent may serve any node
    assert "Traceback" not in log
    # healthy afterwards: node-1 runs a normal job
    c.ok("scancel", str(other))
    job = c.sbatch("-w", "node-1", "--wrap", "true")
    c.wait_state(job, "COMPLETED")


# ---- broken and oversized API requests ---------------------------------------------------------

@pytest.mark.parametrize("method, path, body, status, error", [
    ("POST", "/v1/jobs", b"not json {", 400, "Malformed request: body is not JSON"),
    ("POST", "/v1/jobs", b"[1, 2]", 400, "expected a JSON object"),
    ("POST", "/v1/jobs", b'{"spec": "x", "script": "#!/bin/sh\\n"}', 400, "Invalid job description"),
    ("POST", "/v1/jobs", b'{"script": 5}', 400, "Batch script is empty"),
    ("POST", "/v1/jobs", b'{"script": "#!/bin/sh\\n", "array": 5}', 400, "Invalid job array"),
    ("POST", "/v1/jobs", b'{"script": "#!/bin/sh\\n", "env": [1]}', 400, "Invalid job environment"),
    ("POST", "/v1/jobs/1/signal", b'{"signal": "KILL"}', 400, "Invalid signal"),
    ("GET", "/v1/accounting?start=yesterday", b"", 400, "Invalid time specification"),
    ("GET", "/v1/accounting?start=nan", b"", 400, "Invalid time specification"),
    ("POST", "/v1/jobs", b"[" * 100_000 + b"]" * 100_000, 400, "body is not JSON"),
    ("PATCH", "/v1/jobs/1", b"\xff\xfe", 400, "Malformed request"),
    ("GET", "/v1/nosuchthing", b"", 404, "Not Found"),
    ("GET", "/v1/sreport?start=nan&end=inf", b"", 400, "Invalid time in request"),
    ("GET", "/v1/accounts/events?start=inf", b"", 400, "Invalid time in request"),
    ("GET", "/v1/accounts/events?nodes=node-%5B", b"", 400, "Invalid node name specified"),
    ("POST", "/v1/jobs", b'{"script": "#!/bin/sh\\n", "spec": {"time_limit": NaN}}', 400,
     "Invalid value for time_limit"),
    ("POST", "/v1/jobs", b'{"script": "#!/bin/sh\\n", "spec": {"begin_time": 1e400}}', 400,
     "Invalid value for begin_time"),
    ("POST", "/v1/jobs", b'{"script": "#!/bin/sh\\n", "spec": {"num_tasks": 1e30}}', 400,
     "Invalid value for num_tasks"),
])
def test_a_broken_payload_gets_a_slurm_style_error(edge: Cluster, method: str, path: str,
                                                   body: bytes, status: int, error: str) -> None:
    got, answer = request(edge, method, path, body)
    assert got == status, answer
    assert error in answer["error"]
    assert "Traceback" not in json.dumps(answer)


def test_oversized_bodies_are_refused_before_they_are_read(edge: Cluster) -> None:
    # declared too large: refused at once, without waiting for 40 MB
    t0 = time.monotonic()
    status, answer = raw_http(edge, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                    f"Content-Length: {40 << 20}\r\n\r\n")
    assert status == 413 and "Request too large" in answer["error"]
    assert time.monotonic() - t0 < 5
    # anything but a submission gets 1 MB
    status, answer = request(edge, "PATCH", "/v1/jobs/1", b'{"comment": "' + b"x" * (2 << 20) + b'"}')
    assert status == 413 and "PATCH /v1/jobs/1" in answer["error"]


def test_a_4mb_script_of_non_ascii_still_fits(edge: Cluster) -> None:
    # 2-byte characters, JSON-escaped to 6 bytes each: ~12 MB on the wire
    script = edge.workdir / "big.sh"
    script.write_text("#!/bin/sh\n# " + "é" * (1_990_000) + "\ntrue\n")
    assert 3_900_000 < script.stat().st_size < 4_000_000
    job = edge.sbatch(str(script))
    edge.wait_state(job, "COMPLETED")


# ---- connections ----------------------------------------------------------------------------

HOARDER = """
import json, socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
socks, refused = [], 0
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    socks.append(s)
slow = socks[0]
slow.sendall(b"GET /v1/ping HTTP/1.1\\r\\n")  # headers begun, never finished
time.sleep(2.0)
for s in socks:
    s.setblocking(False)
    try:
        data = s.recv(4096)
    except BlockingIOError:
        continue
    if data == b"":
        refused += 1  # over the limit: closed after a short fuse
print(json.dumps({"refused": refused}), flush=True)
sys.stdin.readline()  # held until the test has timed the other user's commands
closed = 0
deadline = time.monotonic() + 15
open_ = [s for s in socks]
while time.monotonic() < deadline and closed < n:
    closed = 0
    for s in open_:
        try:
            if s.recv(4096) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    time.sleep(0.2)
print(json.dumps({"closed": closed}), flush=True)
"""


def test_one_users_idle_connections_do_not_stall_another_users_commands(
        edge: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    c = edge
    alice, bob = users["corral-alice"], users["corral-bob"]
    n = 400
    env = dict(c.env, HOME=alice.pw_dir, USER=alice.pw_name)
    hoarder = subprocess.Popen([sys.executable, "-c", HOARDER, sock_path(c), str(n)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                               cwd=alice.pw_dir, user=alice.pw_uid, group=alice.pw_gid,
                               extra_groups=[])
    try:
        assert hoarder.stdout is not None and hoarder.stdin is not None
        first = json.loads(hoarder.stdout.readline())
        assert first["refused"] == n - 256  # the per-user limit, answered with a 503 at once
        # first, while her connections are surely still held (they are closed after IDLE s)
        r = run_as(c, alice, "squeue", "-h")  # alice over her limit: a clear message
        assert r.returncode != 0 and "Too many connections from uid" in r.stderr, r.stderr
        for _ in range(5):
            t0 = time.monotonic()
            r = run_as(c, bob, "squeue", "-h")
            assert r.returncode == 0, r.stderr
            assert time.monotonic() - t0 < 5.0  # not stuck behind the hoarder
        hoarder.stdin.write("\n")
        hoarder.stdin.flush()
        second = json.loads(hoarder.stdout.readline())
        assert second["closed"] == n  # idle ones (the half-sent request too) closed after IDLE s
    finally:
        hoarder.kill()
        hoarder.wait(10)
    r = run_as(c, alice, "squeue", "-h")
    assert r.returncode == 0, r.stderr


# ---- issue 9: root's cluster is every user's ------------------------------------------------

def test_a_user_finds_roots_cluster_and_its_status(edge: Cluster,
                                                   users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    c = edge
    alice = users["corral-alice"]
    job = c.sbatch("-w", "node-1", "-J", "statusjob", "--wrap", "sleep 60")
    c.wait_state(job, "RUNNING")
    # no CORRAL_HOME: the commands look for the user's own cluster, then the machine's
    env = {k: v for k, v in c.env.items() if k != "CORRAL_HOME"}
    env.update(HOME=alice.pw_dir, USER=alice.pw_name, CORRAL_SYSTEM_HOME=str(c.home))

    def as_alice(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=30, env=env,
                              cwd=alice.pw_dir, user=alice.pw_uid, group=alice.pw_gid,
                              extra_groups=[])

    try:
        r = as_alice("squeue", "-h", "-o", "%i %j")
        assert r.returncode == 0, r.stderr
        assert f"{job} statusjob" in r.stdout
        r = as_alice("corral", "status")
        assert r.returncode == 0, r.stderr
        out = r.stdout
        assert f"state:  {c.home}" in out
        assert "nodes:  1/2 responding" in out
        assert "node-1" in out and "fake1" in out
        assert "1 running" in out
        assert f"logs:   {c.home}/log/controller.log, {c.home}/log/agent.log" in out
        # her own `corral up` would not touch root's cluster: it is hers to start
        assert not (Path(alice.pw_dir) / ".corral").exists()
    finally:
        c.ok("scancel", str(job))
