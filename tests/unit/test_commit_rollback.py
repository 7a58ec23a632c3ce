"""A failed commit takes back the controller's own decisions (controller/shell.py's
`_commit_failed`, `Lifecycle.unstart`): a start whose commit failed sends nothing and is
undone (PENDING again, no allocation, in memory and in the store) and starts later once
the store works; a submission whose commit failed is withdrawn (its client got the
error); an acknowledged submission is kept.  A launch goes out only for a job still in
the run and state it was decided for: a job cancelled while its start's commit was
pending never gets its launch."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from corral.controller import persist
from corral.controller.errors import SlurmError
from corral.controller.harness import FailingStore, Harness
from corral.controller.jobs import JobEvent, JobEventKind
from corral.model.job import Job, JobState
from corral.store.memory import MemoryStore
from corral.store.sqlite import SqliteStore

CONF = """\
ClusterName=t
MinJobAge=60
NodeName=n[1-2] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=n[1-2] Default=YES
"""


def _stored(store: Any, job_id: int) -> Job | None:
    jobs = store.query_jobs(ids=[job_id])
    return jobs[0] if jobs else None


def _watch_sends(h: Harness) -> list[tuple[str, int | None, str | None]]:
    """Every message to an agent: its type, its job, the job's state in the store then."""
    seen: list[tuple[str, int | None, str | None]] = []

    def send(msg: dict[str, Any]) -> None:
        jid = msg.get("launch", {}).get("job_id") or msg.get("job_id")
        stored = _stored(h.store, jid) if jid else None
        seen.append((str(msg.get("type")), jid, stored.state.value if stored else None))
        h.sent.append(msg)

    for name in h.ctl.agent_senders:
        h.ctl.agent_senders[name] = send
    return seen


def _free(h: Harness) -> bool:
    return all(n.alloc_cpus == 0 and n.job_count == 0 and not n.alloc_gpus
               for n in h.ctl.nodes.values()) and not h.ctl.cluster.charged


@pytest.fixture(params=["memory", "sqlite"])
def h(request: pytest.FixtureRequest, tmp_path: Path,
      monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(persist, "RETRY_S", 0.05)
    inner = MemoryStore() if request.param == "memory" else \
        SqliteStore(os.path.join(str(tmp_path), "state.db"))
    with Harness(CONF, store=FailingStore(inner)) as harness:
        yield harness
    inner.close()


def test_a_start_whose_commit_failed_is_undone_and_starts_later(
        h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    store: FailingStore = h.store  # type: ignore[assignment]
    seen = _watch_sends(h)
    jid = h.submit(num_tasks=2)
    events: list[JobEvent] = []
    h.ctl.table.subscribe(events.append)
    before = h.job(jid)
    reason_before = before.reason
    started_before = h.ctl.core.stats["started"]
    store.failing = True
    with caplog.at_level(logging.ERROR, logger="corral.controller"), \
            pytest.raises(SlurmError, match="state store write failed"):
        h.tick()
    assert store.failed >= 1
    assert seen == []  # no launch, no Prolog message, no control
    job = h.job(jid)
    assert job.state is JobState.PENDING and job.alloc == [] and job.nodes == []
    assert job.batch_host is None and job.start_time is None and job.reason == reason_before
    assert not [s for s in job.steps if s.step_id == "batch"]
    assert _free(h) and jid in h.ctl.pending and jid not in h.ctl.running
    assert [e.kind for e in events if e.job.job_id == jid] == [
        JobEventKind.STARTED, JobEventKind.UNSTARTED]
    assert h.ctl.core.stats["started"] == started_before
    stored = _stored(h.store, jid)
    assert stored is not None and stored.state is JobState.PENDING and stored.alloc == []
    assert any("not committed: pending again" in r.getMessage() for r in caplog.records)
    # while the store still fails, a pass starts it again and takes it back again
    with pytest.raises(SlurmError):
        h.tick()
    assert h.job(jid).state is JobState.PENDING and _free(h) and seen == []
    # the store comes back: the job starts, the launch goes out after its commit
    store.failing = False
    h.tick()
    assert h.job(jid).state is JobState.RUNNING
    assert [(kind, j, state) for kind, j, state in seen] == [("launch", jid, "RUNNING")]
    stored = _stored(h.store, jid)
    assert stored is not None and stored.state is JobState.RUNNING and stored.alloc
    # it runs and ends as any job does
    h.end(jid, "COMPLETED")
    assert h.job(jid).state is JobState.COMPLETED and _free(h)


def test_a_submission_whose_commit_failed_is_withdrawn_an_acknowledged_one_kept(
        h: Harness) -> None:
    store: FailingStore = h.store  # type: ignore[assignment]
    kept = h.submit(held="user")
    store.failing = True
    with pytest.raises(SlurmError, match="state store write failed"):
        h.submit(submit_id="abc")
    lost = kept + 1
    store.failing = False
    h.call(asyncio.sleep, 0.2)  # the writer retries what it kept
    h.call(lambda: None)
    assert lost not in h.ctl.jobs and _stored(h.store, lost) is None
    assert (1000, "abc") not in h.ctl.core.submit_ids
    stored = _stored(h.store, kept)
    assert stored is not None and stored.state is JobState.PENDING
    # the client sends it again (same submit id): it is made now, once
    again = h.submit(submit_id="abc")
    assert again != kept and h.job(again).state is JobState.PENDING
    assert _stored(h.store, again) is not None


@pytest.mark.parametrize("commit_fails", [False, True])
def test_a_job_cancelled_while_its_start_commits_never_gets_its_launch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, commit_fails: bool) -> None:
    monkeypatch.setattr(persist, "RETRY_S", 0.05)
    inner = SqliteStore(os.path.join(str(tmp_path), "state.db"))
    store = FailingStore(inner)  # a threaded store: the loop goes on during a commit
    with Harness(CONF, store=store) as h:
        seen = _watch_sends(h)
        jid = h.submit()

        async def scenario() -> None:
            store.hold()
            h.ctl.schedule_pass(h.clock())  # it starts; its commit waits in the store thread
            await asyncio.sleep(0.2)
            assert h.job(jid).state is JobState.RUNNING
            h.ctl.signal_jobs(h.who(), [h.job(jid)], 15, batch_only=False, cancel=True)
            assert h.job(jid).state is JobState.COMPLETING
            store.failing = commit_fails
            store.release()
            with pytest.raises(SlurmError) if commit_fails else _nothing():
                await h.ctl.durable()
            store.failing = False
            for _ in range(100):  # the writer retries until everything is committed
                await asyncio.sleep(0.05)
                if h.job(jid).state.finished and not h.ctl.writer._pending():
                    break
            await h.ctl.durable()

        h.loop.run_until_complete(scenario())
        assert [kind for kind, j, _ in seen if j == jid and kind == "launch"] == []
        assert h.job(jid).state is JobState.CANCELLED and _free(h)
        stored = _stored(store, jid)
        assert stored is not None and stored.state is JobState.CANCELLED
        assert not [s for s in stored.steps if s.step_id == "batch"]  # it never ran
    inner.close()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


def test_array_tasks_whose_start_failed_start_once_later(h: Harness) -> None:
    store: FailingStore = h.store  # type: ignore[assignment]
    seen = _watch_sends(h)
    arr = h.submit(array="0-3")
    store.failing = True
    with pytest.raises(SlurmError):
        h.tick()
    assert seen == [] and _free(h) and not h.ctl.running
    store.failing = False
    h.tick()
    running = sorted((j.array_job_id, j.array_task_id) for j in h.ctl.running.values())
    assert running == [(arr, t) for t in range(4)]
    launched = [j for kind, j, state in seen if kind == "launch" and state == "RUNNING"]
    assert sorted(launched) == sorted(j.job_id for j in h.ctl.running.values())
    for jid in launched:
        h.end(jid, "COMPLETED")
    tasks = [j for j in h.store.query_jobs(array_ids=[arr])]
    assert sorted(t.array_task_id for t in tasks if t.array_task_id is not None) == [0, 1, 2, 3]
    assert all(t.state is JobState.COMPLETED for t in tasks if t.array_task_id is not None)


def test_a_cancel_in_the_failed_batch_is_kept_and_the_start_beside_it_undone(
        h: Harness) -> None:
    store: FailingStore = h.store  # type: ignore[assignment]
    seen = _watch_sends(h)
    a = h.submit(num_tasks=4)
    h.tick()
    assert h.job(a).state is JobState.RUNNING
    b = h.submit(num_tasks=4)
    store.failing = True

    async def cancel_and_start() -> None:
        h.ctl.signal_jobs(h.who(), [h.job(a)], 15, batch_only=False, cancel=True)
        h.ctl.schedule_pass(h.clock())
        await h.ctl.durable()

    with pytest.raises(SlurmError):
        h.loop.run_until_complete(cancel_and_start())
    assert h.job(a).state is JobState.COMPLETING  # the cancel stays
    assert h.job(b).state is JobState.PENDING  # the start beside it was taken back
    assert [kind for kind, j, _ in seen if j in (a, b)] == ["launch"]  # a's, before
    store.failing = False
    h.call(asyncio.sleep, 0.2)
    h.call(lambda: None)
    assert ("control", a, "COMPLETING") in seen  # sent once its commit succeeded
    stored = _stored(h.store, a)
    assert stored is not None and stored.state is JobState.COMPLETING
    h.end(a, "CANCELLED", signal=15)
    assert h.job(a).state is JobState.CANCELLED
    h.tick()
    assert h.job(b).state is JobState.RUNNING
    assert ("launch", b, "RUNNING") in seen


def test_a_start_taken_back_sends_no_prolog_message(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(persist, "RETRY_S", 0.05)
    store = FailingStore(MemoryStore())
    with Harness("Prolog=/bin/true\n" + CONF, store=store) as h:
        seen = _watch_sends(h)
        jid = h.submit()
        store.failing = True
        with pytest.raises(SlurmError):
            h.tick()
        assert seen == [] and jid not in h.ctl.prolog.nodes_of
        store.failing = False
        h.tick()
        assert [(kind, j) for kind, j, _ in seen] == [("job_start", jid), ("launch", jid)]
