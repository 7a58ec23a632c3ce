"""Policy details of issue 18 (item 3) through the real commands: squeue -q, sprio --help."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import BIN, Cluster, running

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory) as cl:
        yield cl


def test_squeue_filters_by_qos(c: Cluster) -> None:
    c.ok("sacctmgr", "-i", "add", "qos", "fast")
    plain = c.sbatch("-H", "--wrap", "true")
    fast = c.sbatch("-H", "--qos=fast", "--wrap", "true")
    assert c.squeue_ids("-q", "fast") == [str(fast)]
    assert c.squeue_ids("--qos=FAST,nosuch") == [str(fast)]
    assert str(plain) in c.squeue_ids("--qos", "normal")
    assert c.squeue_ids("-q", "nosuch") == []
    c.ok("scancel", str(plain), str(fast))


def test_sprio_help_and_usage_are_slurms() -> None:
    out = subprocess.run([f"{BIN}/sprio", "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[0] == "Usage: sprio [OPTIONS]"
    assert "      --federation                display jobs in federation if a member of one" \
        in lines
    assert "  -M, --cluster=cluster_name      cluster to issue commands to.  Default is" in lines
    assert lines[-1] == "  --usage                         display a brief summary of sprio options"
    out = subprocess.run([f"{BIN}/sprio", "--usage"], capture_output=True, text=True, timeout=30)
    assert out.stdout == ("Usage: sprio [-j jid[s]] [-u user_name[s]] [-o format] [-p partitions]\n"
                          "   [--federation] [--local] [--sibling] [--usage] [-hlnvVw]\n")
