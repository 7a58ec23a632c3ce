"""The embedded default: `corral up` with no configuration, this machine as the only node."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(Path(tmp_path_factory.mktemp("default")))
    c.home.mkdir(parents=True, exist_ok=True)
    c.workdir.mkdir(exist_ok=True)
    r = c.run("corral", "up", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "is up" in r.stdout and str(c.home) in r.stdout
    try:
        yield c
    finally:
        c.stop()


def test_default_config_describes_this_machine(default_cluster: Cluster) -> None:
    c = default_cluster
    conf = (c.home / "slurm.conf").read_text()
    assert "PartitionName=debug" in conf and "Default=YES" in conf
    node = os.uname().nodename.split(".")[0]
    m = re.search(rf"^NodeName={re.escape(node)} CPUs={len(os.sched_getaffinity(0))} .*$", conf, re.M)
    assert m, conf
    if not os.path.exists("/dev/nvidiactl"):
        assert "Gres=" not in m.group(0)  # no NVML here means no GPUs
    out = c.ok("sinfo", "-h", "-o", "%P %a %D %t %N")
    assert out.split() == ["debug*", "up", "1", "idle", node]
    # a second `up` is a no-op
    r = c.run("corral", "up")
    assert r.returncode == 0 and "already running" in r.stdout
    st = c.ok("corral", "status")
    assert "1/1 responding" in st


def test_job_is_bound_to_its_cpus(default_cluster: Cluster) -> None:
    c = default_cluster
    jid = c.sbatch("-c1", "-o", "aff-%j.out", "--wrap", "grep Cpus_allowed_list /proc/self/status")
    c.wait_state(jid, "COMPLETED")
    text = (c.workdir / f"aff-{jid}.out").read_text()
    allowed = text.split(":", 1)[1].strip()
    assert re.fullmatch(r"\d+", allowed), f"one CPU expected, got {allowed!r}"


@pytest.mark.skipif(os.geteuid() != 0 or not os.access("/sys/fs/cgroup", os.W_OK),
                    reason="memory cgroups need root and a writable cgroup tree")
def test_memory_limit_is_enforced(default_cluster: Cluster) -> None:
    c = default_cluster
    hog = c.workdir / "hog.py"
    hog.write_text("x = bytearray(400 * 1024 * 1024)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\n"
                   "print('survived')\n")
    jid = c.sbatch("--mem=100M", "-o", "hog-%j.out", "--wrap", f"{sys.executable} {hog}")
    c.wait_state(jid, {"OUT_OF_MEMORY", "FAILED", "COMPLETED"}, timeout=60)
    assert c.state(jid) == "OUT_OF_MEMORY"
    assert "survived" not in (c.workdir / f"hog-{jid}.out").read_text()
