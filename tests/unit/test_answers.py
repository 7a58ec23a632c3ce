"""The controller's once-per-change answers (controller/answers.py)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from corral.controller import answers


def test_rows_cache_serves_only_the_same_query_and_generation() -> None:
    cache = answers.RowsCache()
    assert cache.get("fields=job_id&rows=1", (1, 1)) is None
    cache.put("fields=job_id&rows=1", (1, 1), b"P")
    assert cache.get("fields=job_id&rows=1", (1, 1)) == b"P"
    assert cache.get("fields=job_id&rows=1", (2, 1)) is None  # a change since
    assert cache.get("fields=job_id&rows=1", (1, 2)) is None  # a scheduling pass since
    assert cache.get("fields=name&rows=1", (1, 1)) is None


def test_rows_cache_forgets_old_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(answers.time, "monotonic", lambda: clock[0])
    cache = answers.RowsCache()
    cache.put("q", (0, 0), b"P")
    clock[0] += answers.MAX_AGE_S / 2
    assert cache.get("q", (0, 0)) == b"P"
    clock[0] += answers.MAX_AGE_S
    assert cache.get("q", (0, 0)) is None


def test_rows_cache_is_bounded() -> None:
    cache = answers.RowsCache()
    for i in range(answers.MAX_ENTRIES + 5):
        cache.put(f"q{i}", (0, 0), b"P")
    assert cache.get("q0", (0, 0)) is None
    assert cache.get(f"q{answers.MAX_ENTRIES + 4}", (0, 0)) == b"P"


def test_answer_is_the_json_the_controller_built_with_a_fresh_now() -> None:
    prefix = answers.rows_prefix(b'["job_id","name"]', b'[[1,"a"],[2,"b"]]')
    assert json.loads(answers.with_now(prefix, 1700000000.25)) == {
        "fields": ["job_id", "name"], "rows": [[1, "a"], [2, "b"]], "now": 1700000000.25}


def _jobs() -> list[Any]:
    from corral.model.job import Job, JobState, NodeAlloc, Reason

    out = []
    for i in range(1, 40):
        kw: dict[str, Any] = {}
        if i % 3 == 0:
            kw.update(state=JobState.RUNNING, reason=Reason.NONE, nodes=["n1", "n2"],
                      alloc=[NodeAlloc("n1", 2, 1024), NodeAlloc("n2", 2, 1024)],
                      start_time=1000.0 + i)
        if i % 5 == 0:
            kw.update(array_job_id=5, array_tasks=[1, 2, 3], array_max_running=2)
        if i % 7 == 0:
            kw.update(array_job_id=7, array_task_id=i)
        out.append(Job(job_id=i, name=f"j{i}", user="alice", uid=1000, gid=1000,
                       partition="debug", submit_time=900.0, **kw))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_row_builder_reads_what_each_field_getter_reads(seed: int) -> None:
    from corral.controller import server
    from corral.model.job import Job

    rng = random.Random(seed)
    names = sorted(Job.__dataclass_fields__) + sorted(server._DERIVED) + [
        "state", "alloc", "steps", "no_such_field"]
    fields = rng.sample(names, rng.randint(0, 12)) + rng.sample(names, rng.randint(0, 2))
    build = answers.row_builder(fields, server._field_getter,
                                server._DERIVED | Job.__dataclass_fields__.keys())
    for job in _jobs():
        row = build(job)
        assert isinstance(row, list)
        assert row == [server._field_getter(f)(job) for f in fields], fields


def test_row_builder_reads_every_state_as_its_value() -> None:
    from corral.controller import server
    from corral.model.job import Job, JobState

    fields = ["job_id", "state", "name"]
    build = answers.row_builder(fields, server._field_getter,
                                server._DERIVED | Job.__dataclass_fields__.keys())
    job = _jobs()[1]
    for state in JobState:
        job.state = state
        row = build(job)
        assert row[1] == state.value == server._field_getter("state")(job)
        assert type(row[1]) is type(state.value)
