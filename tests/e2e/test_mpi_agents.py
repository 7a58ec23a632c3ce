"""End-to-end: an `srun --mpi=pmi2` step whose two nodes are served by two agent processes, as
on a real cluster (one agent per machine): each agent serves PMI to its own ranks and the
controller gathers their fences (model/pmi.py).  Driven by PMI-1 and PMI-2 clients and, where
Debian's MPICH can be installed, by an MPI allreduce (Debian's MPICH 4.0 speaks PMI-1 on
PMI_FD)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import Cluster, running
from tests.e2e.test_mpi import ALLREDUCE, PMI1_CLIENT, _mpicc

pytestmark = pytest.mark.slow

# node-2's NodeAddr is not this machine's (.invalid never resolves): `corral up` starts no agent for it,
# the test starts a second agent process that serves it alone
TWO_AGENTS_CONFIG = """\
ClusterName=pmiagents
KillWait=2
MinJobAge=600
SchedulerInterval=1
NodeName=node-1 CPUs=4 RealMemory=4000
NodeName=node-2 NodeAddr=node-2.invalid CPUs=4 RealMemory=4000
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""


@contextlib.contextmanager
def second_agent(c: Cluster, nodes: str) -> Iterator[subprocess.Popen[bytes]]:
    """An agent process of its own (its own home: spool, containers, cgroups) serving `nodes`
    of `c`'s controller, stopped after."""
    home = c.home / f"agent-{nodes}"
    home.mkdir()
    log = open(home / "agent.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral.agent", "--home", str(home), "--nodes", nodes,
         "--controller-socket", str(c.home / "corral.sock")],
        stdout=log, stderr=subprocess.STDOUT, env=c.env)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def _responding(c: Cluster, node: str) -> bool:
    out = c.ok("sinfo", "-h", "-N", "-n", node, "-o", "%T")
    return out.strip() in ("idle", "mixed", "allocated")


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, TWO_AGENTS_CONFIG, name="pmiagents") as c, \
            second_agent(c, "node-2") as agent:
        deadline = time.monotonic() + 30
        while not _responding(c, "node-2"):
            assert agent.poll() is None, (c.home / "agent-node-2" / "agent.log").read_text()
            assert time.monotonic() < deadline, "the second agent did not register"
            time.sleep(0.2)
        yield c


def test_the_two_nodes_are_served_by_two_agent_processes(two: Cluster) -> None:
    r = two.run("srun", "-N2", "-n2", "sh", "-c", 'echo "$SLURMD_NODENAME $PPID"', timeout=60)
    assert r.returncode == 0, r.stderr
    rows = dict(line.split() for line in r.stdout.splitlines())
    assert sorted(rows) == ["node-1", "node-2"]
    assert rows["node-1"] != rows["node-2"]  # each task's parent: its own node's agent side


def test_pmi1_exchange_across_two_agents(two: Cluster) -> None:
    script = two.workdir / "pmi1_client.py"
    script.write_text(PMI1_CLIENT)
    os.chmod(script, 0o644)
    r = two.run("srun", "--mpi=pmi2", "-N2", "-n4", sys.executable, str(script), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "span several agents" not in r.stderr
    rows = sorted(r.stdout.splitlines())
    assert len(rows) == 4, r.stdout
    for i, row in enumerate(rows):
        rank, size, kvs, seen, mapping = row.split()
        # each rank sees every rank's put, those of the other agent's ranks included
        assert (rank, size, seen) == (str(i), "4", "v0,v10,v20,v30")
        assert kvs.endswith(".0") and mapping == "(vector,(0,2,2))"


# a PMI-2 client (the length-prefixed wire protocol, as MPICH's PMI-2 client speaks it): each
# rank puts a business card with a ';' in it, fences, and reads every rank's
PMI2_CLIENT = r"""
import os, socket
s = socket.socket(fileno=int(os.environ["PMI_FD"]))
f = s.makefile("rwb", buffering=0)
def enc(**kv):
    body = "".join(f"{k.replace('_', '-')}={v.replace(';', ';;')};" for k, v in kv.items())
    return f"{len(body):<6d}{body}".encode()
def read2():
    n = int(f.read(6).decode())
    body, out, i = f.read(n).decode(), {}, 0
    while i < len(body):
        eq = body.index("=", i)
        j, v = eq + 1, []
        while body[j] != ";" or body[j + 1:j + 2] == ";":
            v.append(body[j])
            j += 2 if body[j] == ";" else 1
        out[body[i:eq]] = "".join(v)
        i = j + 1
    return out
def ask(**kv):
    f.write(enc(**kv))
    return read2()
f.write(b"cmd=init pmi_version=2 pmi_subversion=0\n")
assert b"rc=0" in f.readline()
rank = int(os.environ["PMI_RANK"])
init = ask(cmd="fullinit", pmirank=str(rank))
size = int(init["size"])
mapping = ask(cmd="info-getjobattr", key="PMI_process_mapping")["value"]
assert ask(cmd="kvs-put", key=f"bc-{rank}", value=f"tcp;{rank}")["rc"] == "0"
assert ask(cmd="kvs-fence")["cmd"] == "kvs-fence-response"
seen = [ask(cmd="kvs-get", jobid="x", key=f"bc-{r}")["value"] for r in range(size)]
ask(cmd="finalize")
print(rank, size, "|".join(seen), mapping)
"""


def test_pmi2_exchange_across_two_agents(two: Cluster) -> None:
    script = two.workdir / "pmi2_client.py"
    script.write_text(PMI2_CLIENT)
    os.chmod(script, 0o644)
    r = two.run("srun", "--mpi=pmi2", "-N2", "-n3", sys.executable, str(script), timeout=60)
    assert r.returncode == 0, r.stderr
    seen = "tcp;0|tcp;1|tcp;2"
    assert sorted(r.stdout.splitlines()) == \
        [f"{i} 3 {seen} (vector,(0,1,2),(1,1,1))" for i in range(3)]


def test_several_fences_in_one_step(two: Cluster) -> None:
    """Three rounds of put, barrier, get: each fence is gathered afresh."""
    script = two.workdir / "pmi1_rounds.py"
    script.write_text(PMI1_CLIENT.split("rank, size =")[0] + r"""
rank, size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
assert ask("cmd=init pmi_version=1 pmi_subversion=1")["rc"] == "0"
kvs = ask("cmd=get_my_kvsname")["kvsname"]
rounds = []
for n in range(3):
    assert ask(f"cmd=put kvsname={kvs} key=r{n}k{rank} value={n}-{rank}")["rc"] == "0"
    assert ask("cmd=barrier_in")["cmd"] == "barrier_out"
    rounds.append(",".join(ask(f"cmd=get kvsname={kvs} key=r{n}k{r}")["value"]
                           for r in range(size)))
ask("cmd=finalize")
print(rank, " ".join(rounds))
""")
    os.chmod(script, 0o644)
    r = two.run("srun", "--mpi=pmi2", "-N2", "-n3", sys.executable, str(script), timeout=60)
    assert r.returncode == 0, r.stderr
    want = " ".join(",".join(f"{n}-{k}" for k in range(3)) for n in range(3))
    assert sorted(r.stdout.splitlines()) == [f"{i} {want}" for i in range(3)]


def test_mpich_allreduce_across_two_agents(two: Cluster) -> None:
    mpicc = _mpicc()
    if mpicc is None:
        pytest.skip("MPICH (mpicc) is not installed and could not be")
    src, prog = two.workdir / "allreduce.c", two.workdir / "allreduce"
    src.write_text(ALLREDUCE)
    built = subprocess.run([mpicc, "-o", str(prog), str(src)], capture_output=True, text=True,
                           timeout=120)
    if built.returncode != 0:
        pytest.skip(f"mpicc cannot build here: {built.stderr.strip()[:200]}")
    r = two.run("srun", "--mpi=pmi2", "-N2", "-n4", str(prog), timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == [f"rank {i} of 4 sum 10" for i in range(4)]
    r = two.run("srun", "--mpi=pmi2", "-N2", "-n2", "sh", "-c",
                'echo "$SLURMD_NODENAME $PMI_RANK $PMI_SIZE"', timeout=60)
    assert r.returncode == 0 and sorted(r.stdout.splitlines()) == \
        ["node-1 0 2", "node-2 1 2"], r.stderr
