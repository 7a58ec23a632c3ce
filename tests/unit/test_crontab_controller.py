"""controller/crontab.py in the harness: a cron job's begin times, its requeue after each
run (same job id), a requeue while running, scancel disabling its lines, replacement."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.controller.crontab import book_of
from corral.controller.errors import SlurmError
from corral.controller.harness import START, Harness
from corral.model.job import JobState, Reason

CONF = """\
ClusterName=t
ScronParameters=enable
NodeName=n[1-2] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=n[1-2] Default=YES
"""
NEXT_MINUTE = START - START % 60 + 60


def entry(cron: str, first: int, last: int, **spec: object) -> dict[str, object]:
    return {"cron": cron, "line_start": first, "line_end": last,
            "payload": {"spec": {"work_dir": "/tmp", **spec},
                        "script": "#!/bin/sh\ntrue\n", "env": {}, "argv": []}}


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(CONF) as harness:
        yield harness


def install(h: Harness, text: str, *entries: dict[str, object]) -> list[int]:
    who = h.who(1000)
    return h.call(book_of(h.ctl).replace, who, who.uid, who.gid, text, list(entries))


def test_a_cron_job_runs_at_its_minute_and_is_requeued(h: Harness) -> None:
    [jid] = install(h, "* * * * * true\n", entry("* * * * * true", 1, 1))
    job = h.job(jid)
    assert (job.state, job.begin_time) == (JobState.PENDING, NEXT_MINUTE)
    assert job.cron_job and job.cron_spec == "* * * * *"
    h.tick()
    assert h.launched() == [] and job.reason == Reason.BEGIN_TIME  # not before its minute
    h.advance(NEXT_MINUTE - START)
    assert h.launched() == [jid]
    h.advance(5)
    h.end(jid)
    h.call(lambda: None)  # the requeue runs just after the end event
    assert (job.state, job.reason) == (JobState.PENDING, Reason.BEGIN_TIME)
    assert job.begin_time == NEXT_MINUTE + 60 and job.restart_count == 1
    assert h.ctl.jobs[jid] is job


def test_requeued_while_running_waits_for_its_next_start(h: Harness) -> None:
    [jid] = install(h, "*/5 * * * * true\n", entry("*/5 * * * * true", 1, 1))
    job = h.job(jid)
    assert job.cron_spec == "0,5,10,15,20,25,30,35,40,45,50,55 * * * *"
    h.advance(job.begin_time - START)
    assert job.state == JobState.RUNNING
    h.call(h.ctl.requeue, h.who(0), [job], False)
    h.end(jid, "REQUEUED")
    h.call(lambda: None)
    assert job.state == JobState.PENDING
    assert job.begin_time is not None and job.begin_time % 300 == 0
    assert job.begin_time > h.clock()


def test_scancel_disables_the_entry_and_replacing_cancels_old_jobs(h: Harness) -> None:
    first, second = install(h, "x\n@daily true\n#SCRON -J b\n@hourly true\n",
                            entry("@daily true", 2, 2), entry("@hourly true", 3, 4))
    h.call(h.ctl.signal_jobs, h.who(1000), [h.job(first)], 9, batch_only=False, cancel=True)
    rec = book_of(h.ctl).by_uid[1000]
    assert rec["disabled"] == "2-2," and h.job(first).state == JobState.CANCELLED
    assert h.store.crontabs[1000]["disabled"] == "2-2,"  # durable
    [third] = install(h, "0 1 * * * true\n", entry("0 1 * * * true", 1, 1))
    assert h.job(second).state == JobState.CANCELLED and not h.job(second).cron_job
    assert h.job(third).state == JobState.PENDING
    install(h, None)  # type: ignore[arg-type]  # scrontab -r
    assert h.job(third).state == JobState.CANCELLED and 1000 not in h.store.crontabs


def test_a_refused_entry_keeps_nothing_of_the_new_crontab(h: Harness) -> None:
    [kept] = install(h, "0 1 * * * true\n", entry("0 1 * * * true", 1, 1))
    with pytest.raises(SlurmError) as e:
        install(h, "a\nb\n", entry("0 2 * * * true", 1, 1),
                entry("0 3 * * * true", 2, 2, partition="nosuch"))
    assert getattr(e.value, "extra", None) == {"failed_lines": "2-2"}
    assert h.job(kept).state == JobState.PENDING and h.job(kept).cron_job
    assert [j.job_id for j in h.ctl.jobs.values()
            if j.state == JobState.PENDING] == [kept]
    assert book_of(h.ctl).by_uid[1000]["crontab"] == "0 1 * * * true\n"
