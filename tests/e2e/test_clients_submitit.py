"""submitit, unchanged, against a real Corral cluster.

submitit pickles a Python callable into a folder, writes a batch script whose only command is
`srun ... python -m submitit.core._submit FOLDER`, submits it with `sbatch` from $PATH, polls
`sacct -o JobID,State,NodeList --parsable2`, cancels with `scancel` and, on a time-out or
preemption signal (`--signal=USR2@DELAY`), checkpoints and calls `scontrol requeue` from
inside the job: the calls it makes on Slurm.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import submitit
import submitit.helpers
from submitit.core.utils import FailedJobError

from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

JOB_NAME = "submitit-corral"
REPO_ROOT = Path(__file__).resolve().parents[2]


# -- what the jobs run (module level: the job imports this module to unpickle them) --------

def _double_where_run(x: int) -> tuple[int, str, str]:
    return 2 * x, os.environ["SLURM_JOB_ID"], os.environ["SLURM_JOB_PARTITION"]


def _square_timed(x: int) -> tuple[int, str, str, float, float]:
    start = time.time()
    time.sleep(2)
    return (x * x, os.environ["SLURM_ARRAY_JOB_ID"], os.environ["SLURM_ARRAY_TASK_ID"],
            start, time.time())


def _ranks() -> dict[str, Any]:
    env = submitit.JobEnvironment()
    return {"global_rank": env.global_rank, "local_rank": env.local_rank,
            "num_tasks": env.num_tasks, "node": env.node, "num_nodes": env.num_nodes,
            "hostnames": env.hostnames, "nodename": os.environ["SLURMD_NODENAME"]}


def _raise_value_error() -> None:
    raise ValueError("no corral for 42 horses")


class _CountToTarget(submitit.helpers.Checkpointable):
    """Counts one a second; what submitit checkpoints on the time-out signal is `self`."""

    def __init__(self) -> None:
        self.progress = 0
        self.starts: list[tuple[int, int]] = []  # (SLURM_RESTART_COUNT, progress) per run

    def __call__(self, target: int) -> tuple[int, list[tuple[int, int]]]:
        self.starts.append((int(os.environ.get("SLURM_RESTART_COUNT", "0")), self.progress))
        while self.progress < target:
            time.sleep(1)
            self.progress += 1
        return self.progress, self.starts


# -- helpers ------------------------------------------------------------------------------

@pytest.fixture
def executor(cluster: Cluster, monkeypatch: pytest.MonkeyPatch,
             tmp_path: Path) -> Iterator[submitit.AutoExecutor]:
    """An executor as a user makes one, in the shell a user would have."""
    monkeypatch.setenv("CORRAL_HOME", cluster.env["CORRAL_HOME"])
    monkeypatch.setenv("PATH", cluster.env["PATH"])
    # The jobs unpickle functions of this module, so it must be importable there; the
    # commands (sbatch, srun, scontrol in the job) must import the Corral under test.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)]))
    for name in list(os.environ):
        if name.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SACCT_", "SINFO_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(cluster.workdir)
    ex = submitit.AutoExecutor(folder=tmp_path / "%j", cluster="slurm")
    ex.update_parameters(slurm_partition="debug", timeout_min=5, name=JOB_NAME)
    try:
        yield ex
    finally:
        # Whatever happened in the test, leave no job behind.
        cluster.run("scancel", "-n", JOB_NAME)
        cluster.wait_for(lambda: not cluster.squeue_ids("-n", JOB_NAME), timeout=30,
                         what="submitit jobs to end")


def _wait_done(job: submitit.Job[Any], timeout: float = 60) -> None:
    """job.result() waits forever on a job that never ends: bound the wait."""
    deadline = time.monotonic() + timeout
    while not job.done(force_check=True):
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job.job_id} not done after {timeout}s "
                                 f"(state {job.state}); stderr: {job.stderr()}")
        time.sleep(0.5)


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    return max(sum(1 for s, e in intervals if s <= t < e) for t, _ in intervals)


# -- tests --------------------------------------------------------------------------------

def test_submit_returns_the_result(cluster: Cluster, executor: submitit.AutoExecutor) -> None:
    job = executor.submit(_double_where_run, 21)
    assert job.job_id.isdigit(), job.job_id
    _wait_done(job)
    assert job.result() == (42, job.job_id, "debug")
    cluster.wait_state(job.job_id, "COMPLETED")
    assert job.get_info(mode="force")["State"] == "COMPLETED"
    assert job.state == "COMPLETED" and job.done()
    # The script submitit wrote ran as Corral's batch step, the function as step 0.
    steps = cluster.ok("sacct", "-j", job.job_id, "-n", "-P", "-o", "JobID,JobName,State")
    assert steps.splitlines() == [f"{job.job_id}|{JOB_NAME}|COMPLETED",
                                  f"{job.job_id}.batch|batch|COMPLETED",
                                  f"{job.job_id}.0|python|COMPLETED"], steps


def test_map_array_respects_array_parallelism(cluster: Cluster,
                                              executor: submitit.AutoExecutor) -> None:
    executor.update_parameters(slurm_array_parallelism=2)
    items = list(range(6))
    jobs = executor.map_array(_square_timed, items)
    array_id = jobs[0].job_id.split("_")[0]
    assert [j.job_id for j in jobs] == [f"{array_id}_{i}" for i in items]
    # Watch the queue while the array runs: never more than two tasks at once.
    deadline = time.monotonic() + 90
    while not all(j.done(force_check=True) for j in jobs):
        assert time.monotonic() < deadline, "array did not finish"
        running = cluster.squeue_ids("-t", "R", "-n", JOB_NAME)
        assert len(running) <= 2, running
        time.sleep(0.2)
    results = [j.result() for j in jobs]
    assert [r[0] for r in results] == [x * x for x in items]
    assert {r[1] for r in results} == {array_id}
    assert [r[2] for r in results] == [str(i) for i in items]
    # The tasks' own clocks agree: two ran side by side, never three.
    assert _max_overlap([(r[3], r[4]) for r in results]) == 2
    for j in jobs:
        cluster.wait_state(j.job_id, "COMPLETED")


@pytest.mark.parametrize("nodes", [1, 2])
def test_tasks_per_node_job_environment(cluster: Cluster, executor: submitit.AutoExecutor,
                                        nodes: int) -> None:
    executor.update_parameters(nodes=nodes, tasks_per_node=2)
    job = executor.submit(_ranks)
    _wait_done(job)
    per_task = sorted(job.results(), key=lambda r: r["global_rank"])
    assert [(r["global_rank"], r["local_rank"], r["node"]) for r in per_task] == \
        [(rank, rank % 2, rank // 2) for rank in range(2 * nodes)]
    assert {(r["num_tasks"], r["num_nodes"]) for r in per_task} == {(2 * nodes, nodes)}
    # submitit expands SLURM_JOB_NODELIST itself: each task's node is in it, in node order.
    hostnames = per_task[0]["hostnames"]
    assert len(hostnames) == nodes and all(r["hostnames"] == hostnames for r in per_task)
    assert [r["nodename"] for r in per_task] == [hostnames[rank // 2] for rank in range(2 * nodes)]
    cluster.wait_state(job.job_id, "COMPLETED")


def test_cancel_is_seen_as_cancelled(cluster: Cluster, executor: submitit.AutoExecutor) -> None:
    job = executor.submit(time.sleep, 300)
    cluster.wait_state(job.job_id, "RUNNING")
    assert not job.done(force_check=True)
    job.cancel()
    cluster.wait_for(lambda: job.done(force_check=True), timeout=30, what="submitit to see the end")
    assert job.state == f"CANCELLED by {os.getuid()}", job.state
    cluster.wait_state(job.job_id, "CANCELLED")


def test_remote_exception_carries_its_traceback(cluster: Cluster,
                                                executor: submitit.AutoExecutor) -> None:
    job = executor.submit(_raise_value_error)
    _wait_done(job)
    exc = job.exception()
    assert isinstance(exc, FailedJobError), exc
    text = str(exc)
    assert "ValueError: no corral for 42 horses" in text, text
    assert "in _raise_value_error" in text, text
    with pytest.raises(FailedJobError, match="no corral for 42 horses"):
        job.result()
    # The task re-raises after writing its result: the job failed, as on Slurm.
    cluster.wait_state(job.job_id, "FAILED")
    row = cluster.ok("sacct", "-j", job.job_id, "-X", "-n", "-P", "-o", "State,ExitCode")
    assert row == "FAILED|1:0\n", row


@pytest.mark.timeout(240)
def test_checkpointable_job_is_requeued_after_time_out(cluster: Cluster,
                                                       executor: submitit.AutoExecutor) -> None:
    # submitit asks for --signal=USR2@<slurm_signal_delay_s>; its default (90 s) is longer
    # than a 1-minute limit, so the signal would come at once. 30 s before the end, it comes
    # half-way through the first run, which gets through ~30 of the 45 counts.
    executor.update_parameters(timeout_min=1, slurm_signal_delay_s=30)
    target = 45
    job = executor.submit(_CountToTarget(), target)
    _wait_done(job, timeout=200)
    progress, starts = job.result()
    assert progress == target
    # Two runs: the first from nothing, the requeued one from the first one's checkpoint,
    # taken when USR2 came, about 30 s in (not at once, and before the 45 counts were done).
    assert len(starts) == 2, starts
    (first_restarts, first_progress), (second_restarts, second_progress) = starts
    assert (first_restarts, first_progress, second_restarts) == (0, 0, 1), starts
    assert 20 <= second_progress < target, starts
    cluster.wait_state(job.job_id, "COMPLETED", timeout=30)
    row = cluster.ok("sacct", "-j", job.job_id, "-X", "-n", "-P", "-o", "State")
    assert row == "COMPLETED\n" and cluster.restarts(job.job_id) == 1, row
    # submitit appends to its log (--open-mode=append): both runs' lines are there.
    log = Path(str(job.paths.stdout)).read_text()
    assert "Caught signal SIGUSR2" in log and "Requeued job" in log, log
    # the first run's end, as slurmstepd writes it to the job's stderr
    errors = Path(str(job.paths.stderr)).read_text()
    assert f"*** JOB {job.job_id} ON " in errors and " DUE TO JOB REQUEUE ***" in errors, errors
    assert "job abort in progress" not in errors, errors
