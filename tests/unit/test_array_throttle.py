"""The % throttle of a job array counts every task, whichever record it is pending in
(tasks held and released alone are split off the array record), and partition updates
parse as scontrol's do."""

from __future__ import annotations

import pytest

from corral.model.job import Job
from corral.model.partspec import PartSpecError, parse_fields
from corral.sched.pipeline import run_pass
from tests.unit.test_sched import _cluster, _pending_job


def _task(job_id: int, task: int, limit: int) -> Job:
    return _pending_job(job_id, array_job_id=7, array_task_id=task, array_max_running=limit)


def test_tasks_split_off_their_array_count_against_its_throttle() -> None:
    meta = _pending_job(7, array_job_id=7, array_tasks=[3, 4], array_max_running=2)
    dec = run_pass(_cluster([_task(8, 1, 2), _task(9, 2, 2), meta]))
    assert len(dec.starts) == 2, dec.starts
    assert dec.reason_texts.get(7) == "JobArrayTaskLimit"


def test_a_split_task_waits_while_the_throttle_is_used_by_running_tasks() -> None:
    import dataclasses

    from corral.model.job import NodeAlloc
    from corral.sched.snapshot import INFINITE_TIME, RunningView

    snap = dataclasses.replace(_cluster([_task(8, 1, 1)]), running=[
        RunningView(10, INFINITE_TIME, [NodeAlloc(node="node-1", cpus=1, mem_mb=100)], False, 7)])
    dec = run_pass(snap)
    assert dec.starts == [] and dec.reason_texts == {8: "JobArrayTaskLimit"}


def test_partition_fields_parse_with_scontrols_messages() -> None:
    assert parse_fields([("State", "drain"), ("MaxTime", "30"), ("Nodes", "n[1-2]"),
                         ("Default", "yes"), ("MaxNodes", "UNLIMITED")]) == {
        "state": "DRAIN", "max_time": 1800, "nodes": ["n1", "n2"], "default": True,
        "max_nodes": None}
    with pytest.raises(PartSpecError) as e:
        parse_fields([("State", "sideways")])
    assert e.value.lines == ["Invalid input: State=sideways",
                             "Acceptable State values are UP, DOWN, DRAIN and INACTIVE"]
    with pytest.raises(PartSpecError) as e:
        parse_fields([("Colour", "blue")])
    assert e.value.lines[0] == "Update of this parameter is not supported: Colour=blue"
