"""N1 (issue 18): submit limits hold when many submissions are in flight at once.  Each
submission awaits durability after its checks; the store's commit is made to yield here,
as the real writer thread does, so that the submissions interleave."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from corral.controller.errors import SlurmError
from corral.controller.harness import Harness
from corral.model.job import JobState
from tests.unit.test_policy_limits import BASE, lab, sacctmgr


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(BASE + "AccountingStorageEnforce=associations,limits\n") as harness:
        lab(harness)
        real = harness.ctl.durable

        async def slow_durable() -> None:
            await asyncio.sleep(0)  # the commit happens on another thread meanwhile
            await real()

        harness.ctl.durable = slow_durable  # type: ignore[method-assign]
        yield harness


def _flood(h: Harness, n: int, uid: int = 1000) -> list[int | str]:
    async def one() -> int | str:
        try:
            job = await h.ctl.submit(h.who(uid), {"work_dir": "/tmp", "held": "user"},
                                     "#!/bin/sh\ntrue\n", {}, [], None)
            return job.job_id
        except SlurmError as e:
            return e.user_msg or e.message

    async def all_at_once() -> list[int | str]:
        return list(await asyncio.gather(*(one() for _ in range(n))))

    return h.loop.run_until_complete(all_at_once())


@pytest.mark.parametrize(("entity", "where", "sets", "reason"), [
    ("user", {"names": "user1000", "account": "lab"}, {"maxsubmitjobs": "6"},
     "AssocMaxSubmitJobLimit"),
    ("account", {"names": "lab"}, {"grpsubmitjobs": "6"}, "AssocGrpSubmitJobsLimit"),
    ("qos", {"names": "normal"}, {"maxsubmitjobsperuser": "6"},
     "QOSMaxSubmitJobPerUserLimit"),
])
def test_concurrent_submissions_stop_at_the_submit_limit(
        h: Harness, entity: str, where: dict[str, str], sets: dict[str, str],
        reason: str) -> None:
    sacctmgr(h, "modify", entity, where=where, sets=sets)
    answers = _flood(h, 50)
    ok = [a for a in answers if isinstance(a, int)]
    assert len(ok) == 6, answers
    assert set(answers) - set(ok) == {reason}
    assert sorted(j.job_id for j in h.ctl.pending.values()) == sorted(ok)
    assert not h.ctl.submitting  # every place taken is given back
    # a refused or finished submission frees its place: one more fits after a cancel
    h.call(h.ctl.signal_jobs, h.who(0), [h.job(ok[0])], 15, batch_only=False, cancel=True)
    assert h.job(ok[0]).state == JobState.CANCELLED
    assert sum(isinstance(a, int) for a in _flood(h, 5)) == 1
