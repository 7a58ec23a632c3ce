"""sreport through the real command on a running cluster: cluster utilization,
AccountUtilizationByUser and user topusage over a window, in CPU and GPU time, with
-P, -n, -t; bad input refused."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

SREPORT = ["sreport"]  # the real command
SACCTMGR = ["sacctmgr"]  # the real command
CONFIG = """\
ClusterName=lab
KillWait=2
MinJobAge=600
SchedulerInterval=1
NodeName=node-[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""
WINDOW = ["start=now-2hours", "end=now+1hours"]


@pytest.fixture(scope="module")
def c() -> Iterator[Cluster]:
    home = Path(tempfile.mkdtemp(prefix="corral-sreport-"))
    cl = Cluster(home / "c", CONFIG)
    cl.start()
    try:
        cl.ok(*SACCTMGR, "-i", "add", "account", "physics")
        cl.ok(*SACCTMGR, "-i", "add", "user", "root", "account=physics")
        job = cl.sbatch("-A", "physics", "-c", "2", "--gpus=2", "-o", "/dev/null",
                        "--wrap", "sleep 3")
        cl.wait_state(job, "COMPLETED")
        yield cl
    finally:
        cl.stop()
        shutil.rmtree(home, ignore_errors=True)


def rows(out: str) -> list[list[str]]:
    return [ln.split("|") for ln in out.splitlines() if ln]


def test_cluster_utilization_counts_cpu_and_gpu_time(c: Cluster) -> None:
    out = c.ok(*SREPORT, "-nP", "-t", "seconds", "-T", "cpu,gres/gpu", "cluster",
               "utilization", *WINDOW)
    (cl, t1, *cpu), (_, t2, *gpu) = rows(out)
    assert (cl, t1, t2) == ("lab", "cpu", "gres/gpu")
    alloc, down, plnd, idle, resv, reported = map(int, cpu)
    assert 2 * 3 <= alloc <= 2 * 15, cpu  # 2 CPUs for about 3 s
    assert alloc + down + plnd + idle + resv == reported > 8 * 3600 // 2, cpu
    assert 2 * 3 <= int(gpu[0]) <= 2 * 15, gpu
    # the default layout: Slurm's banner, CPU minutes
    text = c.ok(*SREPORT, "cluster", "utilization", *WINDOW)
    lines = text.splitlines()
    assert lines[0] == "-" * 80 and lines[1].startswith("Cluster Utilization ")
    assert lines[2] == "Usage reported in CPU Minutes"
    assert lines[4].split() == ["Cluster", "Allocated", "Down", "PLND", "Down", "Idle",
                                "Reserved", "Reported"]
    pct = c.ok(*SREPORT, "-nP", "-t", "percent", "cluster", "utilization", *WINDOW)
    assert rows(pct)[0][-1] == "100.00%"


def test_account_utilization_by_user_and_topusage(c: Cluster) -> None:
    out = c.ok(*SREPORT, "-nP", "-t", "seconds", "-T", "gres/gpu", "cluster",
               "AccountUtilizationByUser", *WINDOW)
    got = {(r[1], r[2]): int(r[5]) for r in rows(out)}
    assert got[("root", "")] == got[("physics", "")] == got[("physics", "root")] >= 6, got
    top = c.ok(*SREPORT, "-P", "-t", "seconds", "user", "topusage", *WINDOW)
    lines = top.splitlines()
    assert lines[1].startswith("Top 10 Users ") and lines[4] == \
        "Cluster|Login|Proper Name|Account|Used|Energy"
    r = lines[5].split("|")
    assert (r[0], r[1], r[3]) == ("lab", "root", "physics") and int(r[4]) >= 6
    picked = c.ok(*SREPORT, "-nP", "-t", "seconds", "user", "topusage", "format=login,used",
                  *WINDOW)
    login, used = picked.strip().split("|")
    assert login == "root" and int(used) >= 6
    # nothing ran yesterday
    assert c.ok(*SREPORT, "-nP", "user", "topusage") == ""


@pytest.mark.parametrize("args,msg", [
    (["-t", "fortnights", "cluster", "utilization"], "unknown time format"),
    (["cluster", "nosuchreport"], "Not valid report nosuchreport"),
    (["cluster", "utilization", "start=now", "end=now-3hours"], "Start time must be before"),
    (["cluster", "utilization", "start=yesterdayish"], "Invalid time specification"),
    (["cluster", "utilization", "bogus=1"], "Unknown condition: bogus=1"),
    (["-T", "gres/tpu", "cluster", "utilization"], "Invalid TRES"),
    (["user", "topusage", "format=login,nonsense"], 'Invalid field requested: "nonsense"'),
])
def test_bad_input(c: Cluster, args: list[str], msg: str) -> None:
    r = c.run(*SREPORT, *args)
    assert r.returncode == 1 and msg in r.stderr and "Traceback" not in r.stderr, r
