"""A plain squeue, printed by the controller once per change (controller/answers.py), prints
what the command prints when it formats the records itself."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import DEFAULT_CONFIG, Cluster, running

CONFIG = DEFAULT_CONFIG + "PartitionName=secret Nodes=node-[3-4] Hidden=YES State=UP\n"
# The default order spelled out with a key that sorts nothing ("z"): the command then
# formats the records itself, as before the controller printed them.
SAME_ORDER = ["-S", "P,t,-p,z"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, CONFIG) as c:
        yield c


def _same(cluster: Cluster, *argv: str) -> str:
    """`squeue argv` and its client-formatted twin print the same (a running job's TIME
    may tick between the two: asked again then)."""
    for _ in range(5):
        served = cluster.ok("squeue", *argv)
        formatted = cluster.ok("squeue", *argv, *SAME_ORDER)
        if served == formatted:
            return served
        time.sleep(0.2)
    assert served == formatted, argv
    return served


def test_plain_squeue_is_printed_by_the_controller(cluster: Cluster,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    held = [cluster.sbatch("-H", "-J", name, "--wrap", "true") for name in ("a", "b-long-name")]
    cluster.sbatch("-H", "-p", "secret", "-J", "hid", "--wrap", "true")
    cluster.sbatch("-H", "--array", "1-5%2", "--wrap", "true")
    run = cluster.sbatch("-J", "sleeper", "--wrap", "sleep 60")
    done = cluster.sbatch("--wrap", "true")
    cluster.wait_state(run, "RUNNING")
    cluster.wait_state(done, "COMPLETED")

    out = _same(cluster)
    assert out.splitlines()[0].split() == ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME",
                                           "NODES", "NODELIST(REASON)"]
    assert " sleeper " in out and str(held[1]) in out and " hid " not in out
    assert f" {done} " not in out  # finished: left out without -t
    assert " hid " in _same(cluster, "-a")
    assert f"{done} " in _same(cluster, "-t", "all")
    headless = _same(cluster, "-h")
    assert headless.count("\n") == out.count("\n") - 1 and " sleeper " in headless
    assert _same(cluster, "-t", "R").count("\n") == 2
    assert _same(cluster, "-u", "root", "-p", "debug").count("\n") == out.count("\n")
    assert _same(cluster, "-j", f"{held[0]},{run}").count("\n") == 3
    assert "CLUSTER: testcluster" in _same(cluster, "-M", "testcluster")

    # the controller answered with text, not rows, for a plain squeue
    from corral.cli import client, squeue

    monkeypatch.setenv("CORRAL_HOME", str(cluster.home))
    fields = ",".join(squeue.needed_fields(squeue.default_options()))
    text = client.get("/v1/jobs", fields=fields, states="all", rows="1", render="squeue")
    assert isinstance(text, str) and text.startswith(out.splitlines()[0])
    rows = client.get("/v1/jobs", fields=fields, states="all", rows="1")
    assert isinstance(rows, dict) and len(rows["rows"]) >= 6
    cluster.ok("scancel", str(run))


def test_unknown_job_is_refused_as_before(cluster: Cluster) -> None:
    r = cluster.run("squeue", "-j", "999999")
    assert r.returncode == 1
    assert r.stderr == "slurm_load_jobs error: Invalid job id specified\n"
