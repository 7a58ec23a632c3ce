"""scancel of tasks still in an array's pending record (Slurm's job_str_signal): they are
taken off the record, not split off into cancelled records of their own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.controller.errors import ESLURM_ACCESS_DENIED
from corral.controller.harness import Harness
from corral.controller.state import SlurmError
from corral.model.job import JobState

CONF = """\
ClusterName=t
NodeName=n[1-2] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=n[1-2] Default=YES
"""


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(CONF) as harness:
        yield harness


def test_named_pending_tasks_are_dropped_from_the_array_record(h: Harness) -> None:
    arr = h.submit(array="0-7", held="user")
    before = len(h.ctl.jobs)
    assert h.call(h.ctl.drop_pending_tasks, h.who(), f"{arr}_7") is True
    assert h.job(arr).array_tasks == list(range(7))
    assert len(h.ctl.jobs) == before  # no record split off
    assert h.ctl.find_jobs(f"{arr}_7") == []
    assert h.call(h.ctl.drop_pending_tasks, h.who(), f"{arr}_[0-5:2]") is True
    assert h.job(arr).array_tasks == [1, 3, 5, 6]
    # every task left named, or none: the plain cancel's business
    assert h.call(h.ctl.drop_pending_tasks, h.who(), f"{arr}_[0-9]") is False
    assert h.call(h.ctl.drop_pending_tasks, h.who(), f"{arr}_7") is False
    assert h.call(h.ctl.drop_pending_tasks, h.who(), str(arr)) is False
    assert h.job(arr).array_tasks == [1, 3, 5, 6] and h.job(arr).state == JobState.PENDING


def test_only_those_who_may_cancel_drop_tasks(h: Harness) -> None:
    arr = h.submit(array="0-3", held="user")
    with pytest.raises(SlurmError) as e:
        h.call(h.ctl.drop_pending_tasks, h.who(uid=2000), f"{arr}_1")
    assert e.value.errno == ESLURM_ACCESS_DENIED
    assert h.job(arr).array_tasks == [0, 1, 2, 3]
    assert h.call(h.ctl.drop_pending_tasks, h.who(uid=0), f"{arr}_1") is True
