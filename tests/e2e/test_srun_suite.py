"""srun as Slurm 22.05's own testsuite/python checks it (issue 18, item 5), through the
real command on a running cluster."""

from __future__ import annotations

import re

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


def test_verbose_lists_the_defined_options(cluster: Cluster) -> None:
    """srun -v prints Slurm's "defined options" block on stderr: -v's count and -n's
    tasks among them (testsuite: test_-v, test_--overcommit)."""
    r = cluster.run("srun", "-v", "id", timeout=60)
    assert r.returncode == 0, r.stderr
    assert re.search(r"verbose\s+: 1", r.stderr), r.stderr
    r = cluster.run("srun", "-vvvv", "-N1", "-n3", "--overcommit", "true", timeout=60)
    assert r.returncode == 0, r.stderr
    assert re.search(r"verbose\s+: 4", r.stderr), r.stderr
    assert re.search(r"srun: ntasks\s+: 3\n", r.stderr), r.stderr
    lines = r.stderr.splitlines()
    start = lines.index("srun: defined options")
    end = lines.index("srun: end of defined options")
    assert start < end and "launching" not in "".join(lines[start:end])
    quiet = cluster.run("srun", "-n1", "true", timeout=60)
    assert quiet.returncode == 0 and "defined options" not in quiet.stderr
