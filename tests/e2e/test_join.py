"""Two machines, really networked: `corral up --listen` in one network namespace,
`corral join` in another, a veth pair between them on a private test subnet.

Needs root and `ip netns` (skipped otherwise). Everything this module creates — two
namespaces, one veth pair, the addresses on it — lives inside those namespaces and is
removed at the end, with every process left in them.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.test_users import users  # noqa: F401 - the fixture: two unprivileged users

SUFFIX = str(os.getpid() % 100000)
NS_CTL, NS_JOIN = f"crl{SUFFIX}c", f"crl{SUFFIX}j"  # controller's machine, joining machine
VETH_CTL, VETH_JOIN = f"crlv{SUFFIX}c", f"crlv{SUFFIX}j"
CTL_ADDR, JOIN_ADDR, GHOST_ADDR = "10.213.77.1", "10.213.77.2", "10.213.77.9"
PORT = 47811
URL = f"https://{CTL_ADDR}:{PORT}"
SLURMD_TIMEOUT = 4

CONFIG = f"""\
ClusterName=joincluster
KillWait=2
MinJobAge=600
SchedulerInterval=1
SlurmdTimeout={SLURMD_TIMEOUT}
NodeName=local1 CPUs=2 RealMemory=1000
NodeName=ghost1 CPUs=2 RealMemory=1000 NodeAddr={GHOST_ADDR}
PartitionName=debug Nodes=local1,ghost1 Default=YES MaxTime=INFINITE State=UP
"""


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("useradd") is None or shutil.which("setpriv") is None:
        return "needs useradd and setpriv for the test users"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "needs iproute2 (`ip`) and util-linux `unshare`"
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10)
    if r.returncode != 0:
        return f"`ip netns` does not work here: {r.stderr.decode().strip()}"
    return None


pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


def kill_namespace_processes(ns: str) -> None:
    """Whatever still runs in a namespace this module made was started by it."""
    for _ in range(20):
        r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10)
        pids = [int(p) for p in r.stdout.split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


class Machine:
    """A CORRAL_HOME whose processes run in one network namespace."""

    def __init__(self, cluster: Cluster, ns: str, home: Path, hostname: str | None = None):
        self.cluster, self.ns, self.home, self.hostname = cluster, ns, home, hostname

    def run(self, *args: str, timeout: float = 60, input: str | None = None
            ) -> subprocess.CompletedProcess[str]:
        cmd = ["ip", "netns", "exec", self.ns]
        if self.hostname:  # its own host name, as a separate machine would have
            cmd += ["unshare", "--uts", "sh", "-c", f'hostname {self.hostname} && exec "$@"', "-"]
        return self.cluster.run(*cmd, *args, timeout=timeout, input=input,
                                env={"CORRAL_HOME": str(self.home)})

    def run_as(self, user: pwd.struct_passwd, *args: str, timeout: float = 60,
               input: str | None = None) -> subprocess.CompletedProcess[str]:
        """As an unprivileged user of this machine (no CORRAL_HOME of theirs: the agent's)."""
        return self.run("setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                        "--clear-groups", "env", f"HOME={user.pw_dir}", f"USER={user.pw_name}",
                        *args, timeout=timeout, input=input)


@pytest.fixture(scope="module")
def net() -> Iterator[None]:
    try:
        ip("netns", "add", NS_CTL)
        ip("netns", "add", NS_JOIN)
        ip("link", "add", VETH_CTL, "netns", NS_CTL, "type", "veth", "peer", "name", VETH_JOIN,
           "netns", NS_JOIN)
        for ns, dev, addr in ((NS_CTL, VETH_CTL, CTL_ADDR), (NS_JOIN, VETH_JOIN, JOIN_ADDR)):
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "link", "set", dev, "up")
        yield
    finally:
        for ns in (NS_JOIN, NS_CTL):
            kill_namespace_processes(ns)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


class JoinedCluster:
    def __init__(self, root: Path) -> None:
        self.c = Cluster(root / "ctl", CONFIG)
        self.ctl = Machine(self.c, NS_CTL, root / "ctl")
        self.joined = Machine(self.c, NS_JOIN, root / "joined", hostname="joined1")
        self.root = root
        self.join_line = ""

    def start(self) -> None:
        self.c.home.mkdir(parents=True)
        self.c.workdir.mkdir()
        cfg = self.root / "input.conf"
        cfg.write_text(CONFIG)
        r = self.ctl.run("corral", "up", "--config", str(cfg), "--listen", f"{CTL_ADDR}:{PORT}")
        assert r.returncode == 0, r.stdout + r.stderr
        m = re.search(r"corral join (\S+) --fingerprint (\S+) --token-file FILE", r.stdout)
        assert m, r.stdout
        assert m.group(1) == URL
        self.join_line = m.group(0)
        self.fingerprint = m.group(2)
        t = re.search(r"token: (\S+)", r.stdout)
        assert t, r.stdout
        self.token = t.group(1)

    def new_token(self, *args: str) -> str:
        out = self.c.ok("corral", "token", "create", *args)
        m = re.search(r"token: (\S+)", out)
        assert m, out
        return m.group(1)

    def join(self) -> subprocess.CompletedProcess[str]:
        # no --name: the node is named after the machine's (namespace's) host name; the
        # token from a root-only file, never the command line
        token_file = self.root / "token"
        token_file.write_text(self.token + "\n")
        token_file.chmod(0o600)
        return self.joined.run("corral", "join", URL, "--token-file", str(token_file),
                               "--fingerprint", self.fingerprint)

    def stop(self) -> None:
        for m in (self.joined, self.ctl):
            try:
                m.run("corral", "down", timeout=60)
            except subprocess.TimeoutExpired:
                pass

    def controller_log(self) -> str:
        return (self.c.home / "log" / "controller.log").read_text()

    def node_states(self) -> dict[str, str]:
        out = self.c.ok("sinfo", "-N", "-h", "-o", "%N %t")
        return dict(line.split() for line in out.splitlines() if line.strip())


@pytest.fixture(scope="module")
def jc(net: None, users: dict[str, pwd.struct_passwd]) -> Iterator[JoinedCluster]:  # noqa: F811
    # pytest's tmp dirs are private to root; the test users must reach the agent's socket
    top = Path(tempfile.mkdtemp(prefix="corral-join-"))
    top.chmod(0o755)
    jc = JoinedCluster(top)
    try:
        jc.start()
        yield jc
    finally:
        jc.stop()
        shutil.rmtree(top, ignore_errors=True)


def test_a_wrong_token_is_refused_and_logged(jc: JoinedCluster, tmp_path: Path) -> None:
    bad = Machine(jc.c, NS_JOIN, tmp_path / "bad")
    wrong = jc.token.split(".")[0] + ".not-the-secret"
    for token in ("not-the-token", wrong):
        r = bad.run("corral", "join", URL, "--name", "intruder", "--fingerprint", jc.fingerprint,
                    input=token + "\n")  # the token on standard input
        assert r.returncode != 0
        assert "refused the join token" in r.stderr, r.stderr
    assert re.search(rf"refused POST /v1/join from {re.escape(JOIN_ADDR)}: missing or wrong "
                     r"join token", jc.controller_log())
    assert "intruder" not in jc.node_states()
    assert not (tmp_path / "bad" / "auth" / "machine.key").exists()


def test_a_token_on_the_command_line_is_refused(jc: JoinedCluster, tmp_path: Path) -> None:
    # any local user reads a command line from /proc: nothing is sent, nothing is started
    r = Machine(jc.c, NS_JOIN, tmp_path / "argv").run(
        "corral", "join", URL, "--token", jc.token, "--fingerprint", jc.fingerprint)
    assert r.returncode == 2
    assert "--token is refused" in r.stderr and "--token-file" in r.stderr
    assert not (tmp_path / "argv" / "agent.pid").exists()


def test_join_without_a_fingerprint_is_refused(jc: JoinedCluster, tmp_path: Path) -> None:
    r = Machine(jc.c, NS_JOIN, tmp_path / "tofu").run("corral", "join", URL, input=jc.token + "\n")
    assert r.returncode == 2
    assert "--fingerprint is required" in r.stderr
    assert "--insecure-trust-first-use" in r.stderr


def test_a_wrong_fingerprint_makes_join_fail(jc: JoinedCluster, tmp_path: Path) -> None:
    wrong = "SHA256:" + "A" * 43
    r = Machine(jc.c, NS_JOIN, tmp_path / "fp").run(
        "corral", "join", URL, "--name", "spoofed", "--fingerprint", wrong, input=jc.token + "\n")
    assert r.returncode != 0
    assert f"has fingerprint {jc.fingerprint}, not the expected {wrong}" in r.stderr
    assert "spoofed" not in jc.node_states()


def test_the_joined_node_appears_in_sinfo(jc: JoinedCluster) -> None:
    r = jc.join()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "as node joined1" in r.stdout
    # the machine's key: root's, in a root-only directory; the token is spent
    key = jc.joined.home / "auth" / "machine.key"
    assert key.stat().st_uid == 0 and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    tokens = jc.c.ok("corral", "token", "list")
    assert re.search(rf"^{jc.token.split('.')[0]} +node +used +0 .* joined1$", tokens, re.M), tokens
    assert re.search(r"^joined1 +node ", jc.c.ok("corral", "node", "list"), re.M)
    states = jc.node_states()
    assert states["joined1"] == "idle"
    assert states["local1"] == "idle"
    assert states["ghost1"] == "down*"  # configured, never joined
    node = jc.c.ok("scontrol", "show", "node", "joined1")
    assert f"NodeAddr={JOIN_ADDR}" in node
    assert "Partitions=debug" in node


def test_status_shows_where_things_are_on_both_machines(jc: JoinedCluster) -> None:
    out = jc.ctl.run("corral", "status").stdout
    assert f"listen: {URL} (certificate {jc.fingerprint})" in out
    assert f"logs:   {jc.c.home}/log/controller.log, {jc.c.home}/log/agent.log" in out
    assert re.search(r"^ +joined1 +idle ", out, re.M), out
    out = jc.joined.run("corral", "status").stdout
    assert "(on another machine)" in out
    assert f"logs:   {jc.c.home}/log/controller.log on the controller's machine; this " \
           f"machine's agent: {jc.joined.home}/log/agent.log" in out


def test_srun_spans_the_local_and_the_joined_node(jc: JoinedCluster) -> None:
    out = jc.c.ok("srun", "-N2", "-w", "local1,joined1", "-l", "hostname", timeout=60)
    lines = sorted(out.splitlines())
    assert lines == [f"0: {os.uname().nodename}", "1: joined1"]


def test_a_batch_job_runs_on_the_joined_node(jc: JoinedCluster) -> None:
    out_file = jc.root / "batch.out"
    job = jc.c.sbatch("-w", "joined1", "-o", str(out_file), "--wrap", "hostname; echo $SLURMD_NODENAME")
    jc.c.wait_state(job, "COMPLETED", timeout=30)
    assert out_file.read_text().split() == ["joined1", "joined1"]


def test_the_cli_on_the_joined_machine_goes_through_its_agent(
        jc: JoinedCluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice = users["corral-alice"]
    out = Path(alice.pw_dir) / "remote.out"
    r = jc.joined.run_as(alice, "sbatch", "--parsable", "-o", str(out), "--wrap",
                         "echo submitted remotely; id -u")
    assert r.returncode == 0, r.stderr
    job = int(r.stdout.strip())
    jc.c.wait_state(job, "COMPLETED", timeout=30)
    # the agent signed for the caller's uid (SO_PEERCRED): the job is alice's and ran as her
    r = jc.joined.run_as(alice, "sacct", "-j", str(job), "-X", "-n", "-P", "-o", "User,State")
    assert r.stdout.split() == ["corral-alice|COMPLETED"], r.stdout + r.stderr
    assert out.read_text() == f"submitted remotely\n{alice.pw_uid}\n"
    # srun's WebSocket goes through the agent too
    r = jc.joined.run_as(alice, "srun", "-N2", "-w", "local1,joined1", "-l",
                         "sh", "-c", "read line; echo $line $SLURMD_NODENAME; exit 3",
                         input="hello\n")
    assert r.returncode == 3, r.stderr
    # srun's stdin reaches every task (srun's default), from a machine that runs neither
    assert sorted(r.stdout.splitlines()) == ["0: hello local1", "1: hello joined1"]
    assert "joined1: task 1: Exited with exit code 3" in r.stderr


def test_a_signed_request_carries_no_admin_level(
        jc: JoinedCluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    """N5: an Administrator's uid signed by a joined machine (whose root could sign for
    any uid) has a plain user's sacctmgr rights; on the controller's machine it has them."""
    alice, bob = users["corral-alice"], users["corral-bob"]
    jc.c.ok("sacctmgr", "-i", "add", "account", "n5lab")
    jc.c.ok("sacctmgr", "-i", "add", "user", alice.pw_name, bob.pw_name, "account=n5lab")
    jc.c.ok("sacctmgr", "-i", "modify", "user", alice.pw_name, "set", "AdminLevel=Admin")
    try:
        r = jc.joined.run_as(alice, "sacctmgr", "-i", "add", "account", "n5remote")
        assert r.returncode == 1 and "Access/permission denied" in r.stderr, r
        r = jc.joined.run_as(alice, "sacctmgr", "-i", "modify", "user", bob.pw_name, "set",
                             "AdminLevel=Administrator")
        assert r.returncode == 1 and "must be a super user" in r.stderr, r
        r = jc.joined.run_as(alice, "sacctmgr", "dump", "joincluster", "file=/dev/null")
        assert r.returncode == 1 and "sufficient privileges" in r.stderr, r
        out = jc.c.ok("sacctmgr", "-n", "-P", "show", "user", "format=user,admin")
        assert f"{bob.pw_name}|None" in out.split() and "n5remote" not in jc.c.ok(
            "sacctmgr", "-n", "-P", "show", "account", "format=account")
        r = jc.ctl.run_as(alice, "sacctmgr", "-i", "add", "account", "n5local")
        assert r.returncode == 0, r.stderr
    finally:
        jc.c.ok("sacctmgr", "-i", "delete", "account", "n5local")
        jc.c.ok("sacctmgr", "-i", "delete", "user", alice.pw_name, bob.pw_name)
        jc.c.ok("sacctmgr", "-i", "delete", "account", "n5lab")


def test_no_user_on_a_joined_machine_gets_its_key_or_roots_powers(
        jc: JoinedCluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    bob = users["corral-bob"]
    key = jc.joined.home / "auth" / "machine.key"
    r = jc.joined.run_as(bob, "cat", str(key))
    assert r.returncode != 0 and "Permission denied" in r.stderr
    r = jc.joined.run_as(bob, "scontrol", "update", "nodename=local1", "state=drain", "reason=x")
    assert r.returncode != 0 and "Access/permission denied" in r.stderr
    # root there holds the key: it vouches for that machine's users, but is not the
    # cluster's root (a job as root would run as root everywhere)
    r = jc.joined.run("sbatch", "--wrap", "id")
    assert r.returncode != 0
    assert "root on a joined machine is not root of the cluster" in r.stderr, r.stderr
    r = jc.joined.run("scontrol", "update", "nodename=local1", "state=drain", "reason=x")
    assert r.returncode != 0 and "Access/permission denied" in r.stderr
    r = jc.joined.run("squeue", "-h")  # reading is fine
    assert r.returncode == 0, r.stderr
    assert jc.node_states()["local1"] == "idle"


NODE_KEY_PROBE = """
import asyncio, json, sys, time
import aiohttp
from corral.agent.remote import RemoteController
from corral.auth import H_JOIN_NODE
url, fp, key_file, victim = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
from corral.auth import parse_fingerprint
rc = RemoteController(url, parse_fingerprint(fp), open(key_file).read())
async def main():
    async with rc.session() as s:
        headers = rc.sign("GET", "/v1/agent/ws", b"", 0, 0)
        async with s.ws_connect(rc.target("/v1/agent/ws"), headers=headers) as ws:
            # joined1's key offers another node, then reports that node's job ended
            await ws.send_str(json.dumps({"type": "register", "nodes": ["local1"],
                                          "running": [], "ended": []}))
            reg = json.loads((await ws.receive(timeout=10)).data)["messages"][0]
            await ws.send_str(json.dumps({"type": "ended", "job_id": victim,
                                          "state": "COMPLETED", "exit_code": 0}))
            ack = json.loads((await ws.receive(timeout=10)).data)["messages"][0]
            print(json.dumps({"registered": reg["nodes"], "ack": ack}))
asyncio.run(main())
"""


def test_a_node_key_acts_only_for_its_node(jc: JoinedCluster) -> None:
    c = jc.c
    job = c.sbatch("-w", "local1", "--wrap", "sleep 60")
    c.wait_state(job, "RUNNING")
    try:
        key = str(jc.joined.home / "auth" / "machine.key")
        r = jc.joined.run(sys.executable, "-c", NODE_KEY_PROBE, URL, jc.fingerprint, key, str(job))
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        assert res["registered"] == []  # local1 is not joined1's to serve
        assert res["ack"] == {"type": "ack", "job_id": job}  # acknowledged, and ignored
        assert c.state(job) == "RUNNING"
        assert jc.node_states() == {"local1": "mix", "ghost1": "down*", "joined1": "idle"}
        assert "this agent's key does not serve node 'local1'" in jc.controller_log()
    finally:
        c.run("scancel", str(job))


SIGNED_PROBE = """
import http.client, json, ssl, sys, time
from corral.auth import Credential, derive_cluster_key, sign_request
host, port, key_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cred = Credential.loads(open(key_file).read())
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE  # the test looks at authentication, not the certificate
def get(path, headers):
    c = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return [r.status, json.loads(body or b"null")]
def sign(key, uid, key_id=cred.key_id, path="/v1/whoami"):
    return sign_request(key, "GET", path, b"", uid, 4343, time.time(), key_id=key_id)
path = "/v1/whoami"
signed = sign(cred.secret, 4242)
forged = dict(sign(cred.secret, 4242), **{"X-Corral-Uid": "0"})
ws = {"Upgrade": "websocket", "Connection": "Upgrade",
      "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}
print(json.dumps({
    "unsigned": get(path, {}),
    "signed": get(path, signed),
    "replayed": get(path, signed),
    "forged": get(path, forged),
    "other_key": get(path, sign(derive_cluster_key("guessed"), 0)),
    "unknown_key_id": get(path, sign(cred.secret, 0, key_id="0000000000000000")),
    "old_join_token_as_bearer": get("/v1/agent/ws", dict(ws, Authorization="Bearer x")),
    "agent_ws_other_node": get("/v1/agent/ws", dict(ws, **sign(cred.secret, 0, path="/v1/agent/ws"),
                                                    **{"X-Corral-Node": "local1"})),
    "tokens_over_tcp": get("/v1/tokens", sign(cred.secret, 0, path="/v1/tokens")),
}))
"""


def test_signed_requests_over_tcp(jc: JoinedCluster) -> None:
    key = str(jc.joined.home / "auth" / "machine.key")
    r = jc.joined.run(sys.executable, "-c", SIGNED_PROBE, CTL_ADDR, str(PORT), key)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["signed"][0] == 200 and res["signed"][1]["uid"] == 4242
    assert res["signed"][1]["gid"] == 4343
    for case in ("unsigned", "replayed", "forged", "other_key", "unknown_key_id",
                 "old_join_token_as_bearer", "agent_ws_other_node"):
        assert res[case][0] == 401, (case, res[case])
    assert "replayed request" in res["replayed"][1]["error"]
    assert "bad request signature" in res["forged"][1]["error"]
    assert "unknown or revoked machine key" in res["unknown_key_id"][1]["error"]
    assert "cannot serve node local1" in res["agent_ws_other_node"][1]["error"]
    # root on a joined machine cannot mint tokens: that is the controller's machine's
    assert res["tokens_over_tcp"][0] == 403, res["tokens_over_tcp"]
    log = jc.controller_log()
    assert "replayed request" in log and "cannot serve node local1" in log


def _run_requeueable_job_on_joined1(jc: JoinedCluster, out_file: Path) -> int:
    c = jc.c
    c.ok("scontrol", "update", "nodename=local1", "state=drain", "reason=steer")
    try:
        job = c.sbatch("--requeue", "--open-mode=append", "-o", str(out_file),
                       "--wrap", "echo ran on $SLURMD_NODENAME; sleep 300")
        c.wait_for(lambda: _where(jc, job) == ["RUNNING", "joined1"], 30, "the job on joined1")
    finally:
        c.ok("scontrol", "update", "nodename=local1", "state=resume")
    return job


def _where(jc: JoinedCluster, job: int) -> list[str]:
    return jc.c.ok("squeue", "-h", "-j", str(job), "-o", "%T %N").split()


def _cut_and_requeue(jc: JoinedCluster, job: int, out_file: Path) -> None:
    c = jc.c
    cut = time.monotonic()
    ip("-n", NS_JOIN, "link", "set", VETH_JOIN, "down")
    c.wait_for(lambda: jc.node_states()["joined1"].endswith("*"), SLURMD_TIMEOUT + 6,
               "joined1 not responding")
    assert time.monotonic() - cut < SLURMD_TIMEOUT + 3  # the periodic check ticks every second
    c.wait_for(lambda: _where(jc, job) == ["RUNNING", "local1"], 30, "the job rerunning on local1")
    assert "Restarts=1" in c.ok("scontrol", "show", "job", str(job))
    c.wait_for(lambda: "ran on local1" in out_file.read_text(), 10, "the rerun's output")
    assert out_file.read_text().splitlines()[0] == "ran on joined1"


def _restore_network(jc: JoinedCluster) -> None:
    ip("-n", NS_JOIN, "link", "set", VETH_JOIN, "up")
    # the agent is asked to reconnect over its old link, or notices the dead link itself
    jc.c.wait_for(lambda: not jc.node_states()["joined1"].endswith("*"), 30, "joined1 back")


def test_a_network_cut_makes_the_node_not_respond_and_requeues_its_job(jc: JoinedCluster) -> None:
    out_file = jc.root / "requeue.out"
    job = _run_requeueable_job_on_joined1(jc, out_file)
    try:
        _cut_and_requeue(jc, job, out_file)
    finally:
        jc.c.run("scancel", str(job))
        _restore_network(jc)
    jc.c.wait_for(lambda: jc.node_states()["joined1"] == "idle", 30, "joined1 idle again")


def test_a_stale_copy_after_reconnecting_does_not_end_the_rerun(jc: JoinedCluster) -> None:
    out_file = jc.root / "stale.out"
    job = _run_requeueable_job_on_joined1(jc, out_file)
    try:
        _cut_and_requeue(jc, job, out_file)
        _restore_network(jc)
        time.sleep(3)  # the agent cancels its stale copy and reports how it ended
        assert _where(jc, job) == ["RUNNING", "local1"]
    finally:
        jc.c.run("scancel", str(job))
        if jc.node_states()["joined1"].endswith("*"):
            _restore_network(jc)


def test_a_login_only_machine_submits_without_being_a_node(jc: JoinedCluster, tmp_path: Path) -> None:
    login = Machine(jc.c, NS_JOIN, tmp_path / "login")
    try:
        node_token = jc.new_token()
        r = login.run("corral", "join", URL, "--fingerprint", jc.fingerprint, "--login-only",
                      "--name", "login1", input=node_token + "\n")
        assert r.returncode != 0 and "is for a node, not a login host" in r.stderr, r.stderr
        token = jc.new_token("--login")
        # a login token cannot make a node
        r = login.run("corral", "join", URL, "--fingerprint", jc.fingerprint, "--name", "sneaky",
                      input=token + "\n")
        assert r.returncode != 0 and "is for a login host, not a node" in r.stderr, r.stderr
        r = login.run("corral", "join", URL, "--fingerprint", jc.fingerprint, "--login-only",
                      "--name", "login1", input=token + "\n")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "as a login (submit) host" in r.stdout
        r = login.run("squeue", "-h", "-o", "%i")
        assert r.returncode == 0, r.stderr
        assert set(jc.node_states()) == {"local1", "ghost1", "joined1"}
    finally:
        login.run("corral", "down")


def test_a_revoked_or_unusable_token_joins_nothing(jc: JoinedCluster, tmp_path: Path) -> None:
    c = jc.c
    token = jc.new_token("--ttl", "10m", "--uses", "3")
    token_id = token.split(".")[0]
    assert re.search(rf"^{token_id} +node +valid +3 ", c.ok("corral", "token", "list"), re.M)
    assert "revoked" in c.ok("corral", "token", "revoke", token_id)
    assert re.search(rf"^{token_id} +node +revoked ", c.ok("corral", "token", "list"), re.M)
    m = Machine(c, NS_JOIN, tmp_path / "late")
    r = m.run("corral", "join", URL, "--fingerprint", jc.fingerprint, "--name", "late1",
              input=token + "\n")
    assert r.returncode != 0 and f"join token {token_id} was revoked" in r.stderr, r.stderr
    bound = jc.new_token("--node", "gpu9")
    r = m.run("corral", "join", URL, "--fingerprint", jc.fingerprint, "--name", "late1",
              input=bound + "\n")
    assert r.returncode != 0 and "is for node gpu9, not late1" in r.stderr, r.stderr
    r = c.run("corral", "token", "create", "--ttl", "soon")
    assert r.returncode == 2 and "invalid --ttl 'soon'" in r.stderr
    assert "late1" not in jc.node_states()


AGENT_SOCKET_HOARDER = """
import socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
socks = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    socks.append(s)
time.sleep(2.0)
closed = 0
for s in socks:
    s.setblocking(False)
    try:
        closed += s.recv(16) == b""
    except BlockingIOError:
        pass
print(closed)
"""


def test_the_joined_agents_socket_limits_each_user(
        jc: JoinedCluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice, bob = users["corral-alice"], users["corral-bob"]
    sock = str(jc.joined.home / "agent.sock")
    hoarder = subprocess.Popen(
        ["ip", "netns", "exec", NS_JOIN, "setpriv", f"--reuid={alice.pw_uid}",
         f"--regid={alice.pw_gid}", "--clear-groups", sys.executable, "-c",
         AGENT_SOCKET_HOARDER, sock, "300"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        r = jc.joined.run_as(bob, "squeue", "-h")
        assert r.returncode == 0, r.stderr
        assert time.monotonic() - t0 < 6.0  # not stuck behind the hoarder
        out, _ = hoarder.communicate(timeout=30)
    finally:
        hoarder.kill()
        hoarder.wait(10)
    assert int(out) == 300 - 256  # over the per-user limit: closed after a short fuse


def test_a_connection_that_never_starts_tls_is_closed(jc: JoinedCluster) -> None:
    probe = (f"import socket, time; s = socket.create_connection(('{CTL_ADDR}', {PORT}));"
             "t = time.monotonic(); s.settimeout(30); s.recv(1); print(time.monotonic() - t)")
    r = jc.joined.run(sys.executable, "-c", probe, timeout=40)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) < 15  # MessageTimeout (10 s by default), not asyncio's 60 s


REPLAY_PROBE = """
import http.client, json, ssl, sys, time
from corral.auth import Credential, sign_request
host, port, key_file, saved = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
def get(headers):
    c = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
    c.request("GET", "/v1/whoami", headers=headers)
    r = c.getresponse()
    return [r.status, json.loads(r.read() or b"null")]
if sys.argv[5] == "sign":
    cred = Credential.loads(open(key_file).read())
    headers = sign_request(cred.secret, "GET", "/v1/whoami", b"", 4242, 4242, time.time(),
                           key_id=cred.key_id)
    open(saved, "w").write(json.dumps(headers))
    print(json.dumps(get(headers)))
else:
    print(json.dumps(get(json.load(open(saved)))))
"""


def test_a_signed_request_does_not_replay_after_a_controller_restart(jc: JoinedCluster) -> None:
    key = str(jc.joined.home / "auth" / "machine.key")
    saved = str(jc.root / "signed.json")
    r = jc.joined.run(sys.executable, "-c", REPLAY_PROBE, CTL_ADDR, str(PORT), key, saved, "sign")
    assert json.loads(r.stdout)[0] == 200, r.stdout + r.stderr
    r = jc.ctl.run("corral", "down", "--keep-jobs")
    assert r.returncode == 0, r.stderr
    r = jc.ctl.run("corral", "up", "--config", str(jc.root / "input.conf"),
                   "--listen", f"{CTL_ADDR}:{PORT}")
    assert r.returncode == 0, r.stdout + r.stderr
    # the nonce memory of the last run is gone; its signatures are refused by their age
    r = jc.joined.run(sys.executable, "-c", REPLAY_PROBE, CTL_ADDR, str(PORT), key, saved, "replay")
    status, answer = json.loads(r.stdout)
    assert status == 401 and "signed before the controller started" in answer["error"]
    # the joined node's agent signs afresh and comes back by itself
    jc.c.wait_for(lambda: jc.node_states().get("joined1") == "idle", 30, "joined1 back")


def test_a_joined_machine_rejoins_with_its_own_key(jc: JoinedCluster) -> None:
    r = jc.joined.run("corral", "down")
    assert r.returncode == 0, r.stderr
    jc.c.wait_for(lambda: jc.node_states()["joined1"].endswith("*"), 15, "joined1 gone")
    # no token this time: the stored key is enough (the one-use token is spent anyway)
    r = jc.joined.run("corral", "join", URL, "--fingerprint", jc.fingerprint, input="")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rejoining with this machine's key (node joined1)" in r.stdout
    jc.c.wait_for(lambda: jc.node_states()["joined1"] == "idle", 30, "joined1 back")


def test_a_revoked_key_is_shut_out_alone(jc: JoinedCluster, tmp_path: Path) -> None:
    c = jc.c
    login = Machine(c, NS_JOIN, tmp_path / "login2")
    try:
        r = login.run("corral", "join", URL, "--fingerprint", jc.fingerprint, "--login-only",
                      "--name", "login2", input=jc.new_token("--login") + "\n")
        assert r.returncode == 0, r.stdout + r.stderr
        assert login.run("squeue", "-h").returncode == 0
        out = c.ok("corral", "node", "revoke", "login2")
        assert "revoked the key of login2" in out
        r = login.run("squeue", "-h")
        assert r.returncode != 0 and "unknown or revoked machine key" in r.stderr, r.stderr
        assert jc.joined.run("squeue", "-h").returncode == 0  # the other machine is untouched
        # a node's key: its link is cut and it cannot come back
        c.ok("corral", "node", "revoke", "joined1")
        c.wait_for(lambda: jc.node_states()["joined1"].endswith("*"), 15, "joined1 shut out")
        time.sleep(3)
        assert jc.node_states()["joined1"].endswith("*")
        assert re.search(r"^joined1 +node +\S+ +\S+ +\d{4}-", c.ok("corral", "node", "list"), re.M)
        assert "unknown or revoked machine key" in jc.controller_log()
        job = c.sbatch("-w", "local1", "--wrap", "true")
        c.wait_state(job, "COMPLETED")
    finally:
        login.run("corral", "down")


def test_a_machine_named_like_a_node_is_told_to_use_name(jc: JoinedCluster, tmp_path: Path) -> None:
    """Issue 18: a machine whose host name is already a node of the cluster is told why it
    cannot join and what to do (--name), and its token is not spent."""
    twin = Machine(jc.c, NS_JOIN, tmp_path / "twin", hostname="local1")
    token = jc.new_token()
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    r = twin.run("corral", "join", URL, "--token-file", str(token_file),
                 "--fingerprint", jc.fingerprint)
    assert r.returncode == 1, r
    assert "local1, this machine's host name, is already a node of the cluster: join under " \
        "another name with --name NAME" in r.stderr, r.stderr
    token_id = token.split(".")[0]
    listed = jc.c.ok("corral", "token", "list")
    assert re.search(rf"^{re.escape(token_id)}\b.*\bvalid\b", listed, re.M), listed
    jc.c.ok("corral", "token", "revoke", token_id)
