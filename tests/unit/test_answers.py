"""The controller's once-per-change answers (controller/answers.py)."""

from __future__ import annotations

import json

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
