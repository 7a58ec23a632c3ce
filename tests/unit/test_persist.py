"""The one write path (controller/persist.py): nothing reaches an agent before the change it
depends on is committed, nothing when a commit fails, a fenced writer writes nothing, and
sacctmgr's changes are written as rows."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from corral.controller import persist
from corral.controller.accounts import Caller
from corral.controller.errors import SlurmError
from corral.controller.harness import Harness
from corral.model.job import JobState
from corral.store.base import PreparedBatch
from corral.store.memory import MemoryStore
from corral.store.sqlite import SqliteStore

CONF = """\
ClusterName=t
MinJobAge=60
NodeName=n[1-2] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=n[1-2] Default=YES
"""


def _stored_state(store: Any, job_id: int) -> str | None:
    jobs = store.query_jobs(ids=[job_id])
    return jobs[0].state.value if jobs else None


def _watch_sends(h: Harness) -> list[tuple[str, dict[str, Any], str | None]]:
    """Every message to an agent, with the job's state in the store when it was sent."""
    seen: list[tuple[str, dict[str, Any], str | None]] = []

    def send(msg: dict[str, Any]) -> None:
        jid = msg.get("launch", {}).get("job_id") or msg.get("job_id")
        seen.append((str(msg.get("type")), msg, _stored_state(h.store, jid) if jid else None))
        h.sent.append(msg)

    for name in h.ctl.agent_senders:
        h.ctl.agent_senders[name] = send
    return seen


@pytest.fixture(params=["memory", "sqlite"])
def h(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    store = MemoryStore() if request.param == "memory" else \
        SqliteStore(os.path.join(str(tmp_path), "state.db"))
    with Harness(CONF, store=store) as harness:  # type: ignore[arg-type]
        yield harness
    store.close()


def test_a_launch_is_sent_only_after_its_start_is_committed(h: Harness) -> None:
    seen = _watch_sends(h)
    ids = [h.submit() for _ in range(3)]
    h.tick()
    launches = [(m["launch"]["job_id"], state) for kind, m, state in seen if kind == "launch"]
    assert sorted(jid for jid, _ in launches) == ids
    assert all(state == "RUNNING" for _, state in launches), launches
    # a cancel's control follows the launch, also after its own commit
    h.call(h.ctl.signal_jobs, h.who(), [h.job(ids[0])], 15, batch_only=False, cancel=True)
    kinds = [(kind, state) for kind, m, state in seen if m.get("job_id") == ids[0]
             or m.get("launch", {}).get("job_id") == ids[0]]
    assert kinds[0] == ("launch", "RUNNING") and kinds[-1][0] == "control"
    assert kinds[-1][1] != "RUNNING"


def test_a_failed_commit_sends_nothing_and_leaves_the_stored_job(
        h: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(persist, "RETRY_S", 0.05)
    seen = _watch_sends(h)
    jid = h.submit()
    real_commit = h.store.commit
    failing = True

    def commit(prepared: PreparedBatch) -> None:
        if failing:
            raise OSError("injected: disk full")
        real_commit(prepared)

    monkeypatch.setattr(h.store, "commit", commit)
    with caplog.at_level(logging.ERROR, logger="corral.controller"), \
            pytest.raises(SlurmError, match="state store write failed"):
        h.tick()
    assert seen == []  # no launch, no control
    assert _stored_state(h.store, jid) == "PENDING"  # the store has the job as it was
    assert h.job(jid).state is JobState.PENDING  # and so has memory: the start was undone
    assert any("store write failed" in r.getMessage() for r in caplog.records)
    # the store comes back: the next pass starts it, the start is committed, then (only
    # then) the launch goes out
    failing = False
    h.tick()
    assert [(kind, state) for kind, _, state in seen] == [("launch", "RUNNING")]
    assert h.job(jid).state is JobState.RUNNING


def test_a_fenced_writer_writes_and_sends_nothing(h: Harness) -> None:
    seen = _watch_sends(h)
    jid = h.submit()
    h.store.take_epoch()  # another controller takes the store
    with pytest.raises(SlurmError, match="store write"):
        h.tick()
    assert h.ctl.writer.fenced
    assert seen == [] and _stored_state(h.store, jid) == "PENDING"
    with pytest.raises(SlurmError, match="another controller"):
        h.call(lambda: None)


def test_sacctmgr_changes_are_written_as_rows(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    batches: list[PreparedBatch] = []
    real_commit = h.store.commit

    def commit(prepared: PreparedBatch) -> None:
        batches.append(prepared)
        real_commit(prepared)

    monkeypatch.setattr(h.store, "commit", commit)
    root = Caller("root", True)
    h.call(h.ctl.accounts.execute, root, {"op": "add", "entity": "account", "names": ["phys"]})
    h.call(h.ctl.accounts.execute, root, {"op": "add", "entity": "user", "names": ["ann"],
                                          "where": {"account": "phys"}})
    rows = [b.batch.accounting for b in batches if b.batch.accounting]
    assert len(rows) == 2
    # the second change wrote the user and its association, not the whole table again
    assert sorted(kind for kind, _, _ in rows[1].upserts) == ["assocs", "users"]
    assert rows[1].deletes == [] and all(b.batch.epoch == h.ctl.writer.epoch for b in batches)
    h.call(h.ctl.accounts.execute, root, {"op": "delete", "entity": "user", "names": ["ann"]})
    assert ("users", "ann") in batches[-1].batch.accounting.deletes
    stored = h.store.load_accounting()
    assert "phys" in {a["name"] for a in stored["accounts"]}
    assert "ann" not in {u["name"] for u in stored["users"]}


def test_a_dependency_on_a_job_gone_from_memory_is_read_off_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    store = SqliteStore(os.path.join(str(tmp_path), "state.db"))
    with Harness(CONF, store=store) as h:  # type: ignore[arg-type]
        a = h.submit()
        h.tick()
        h.end(a, "FAILED", exit_code=1)
        h.clock.advance(3600)
        h.call(h.ctl.expire_finished, h.clock())
        assert a not in h.ctl.jobs
        b = h.submit()  # no pass runs until tick()
        readers: list[str] = []
        real = store.query_jobs

        def slow_query(**kw: Any) -> Any:
            readers.append(threading.current_thread().name)
            time.sleep(0.3)
            return real(**kw)

        monkeypatch.setattr(store, "query_jobs", slow_query)
        h.call(h.ctl.update_job, h.who(), h.job(b), {"dependency": f"afterok:{a}"})
        h.tick()
        # the read is still under way: b waits, its dependency is not lifted
        assert h.job(b).state is JobState.PENDING
        h.call(asyncio.sleep, 0.6)
        assert readers and all(name.startswith("store") for name in readers)
        assert h.ctl.gone.lookup(a, None) == [("FAILED", 1, h.ctl.gone.by_id[a].start_time)]
        h.tick()
        assert h.job(b).state is JobState.PENDING
    store.close()
