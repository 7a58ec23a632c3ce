"""Output file-name patterns, letter by letter, for the batch step and srun steps
(sbatch(1)/srun(1) "filename pattern", as slurmstepd expands them)."""

from __future__ import annotations

import pytest

from corral.model.patterns import expand_pattern

BATCH = dict(job_id=8, name="train", user="alice", node="node-2")
ARRAY = dict(job_id=12, name="sweep", user="bob", node="node-1", array_job_id=10,
             array_task_id=2)


@pytest.mark.parametrize("pattern, want", [
    ("slurm-%j.out", "slurm-8.out"),
    ("dask-worker-%J.out", "dask-worker-8.out"),  # the batch step has no step number
    ("%5J", "00008"),
    ("%s", "batch"),
    ("%5s", "batch"),
    ("%A", "8"),  # not an array: the job id
    ("%a", "4294967294"),  # not an array: Slurm's NO_VAL
    ("%x-%u@%N", "train-alice@node-2"),
    ("%n.%t", "0.0"),
    ("%3n-%4t", "000-0000"),
    ("%%j is %j, 100%%", "%j is 8, 100%"),
    ("%5j", "00008"),
    ("%015j", "0000000008"),  # at most ten digits
    ("%q %", "%q %"),  # unknown letter and a trailing % stay
    ("%b", "%b"),  # not a 22.05 letter
    ("\\%j\\%x", "%j%x"),  # a backslash turns expansion off
    ("%j%j", "88"),
])
def test_batch_step(pattern: str, want: str) -> None:
    assert expand_pattern(pattern, **BATCH) == want  # type: ignore[arg-type]


def test_batch_array_element() -> None:
    assert expand_pattern("slurm-%A_%a.out", **ARRAY) == "slurm-10_2.out"  # type: ignore[arg-type]
    assert expand_pattern("%4A_%3a-%J-%j", **ARRAY) == "0010_002-12-12"  # type: ignore[arg-type]


@pytest.mark.parametrize("pattern, want", [
    ("out-%J.txt", "out-8.3.txt"),
    ("%5J", "00008.3"),
    ("%s", "3"),
    ("%2s", "03"),
    ("%j-%t-%n-%N", "8-5-1-node-2"),
    ("%3t", "005"),
    ("%u %x", "alice train"),
    ("%A %a", "8 4294967294"),
])
def test_srun_step(pattern: str, want: str) -> None:
    got = expand_pattern(pattern, step="3", task=5, node_index=1, **BATCH)  # type: ignore[arg-type]
    assert got == want


def test_huge_width_is_bounded() -> None:
    assert expand_pattern("%99999999999999999999j", **BATCH) == "0000000008"  # type: ignore[arg-type]
