"""A plain squeue printed by the controller (answers.squeue_text, squeue.render_default)
against what the command prints from the rows answer itself, byte for byte."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from corral.cli import squeue
from corral.controller import answers
from tests.unit.test_squeue_fast import NOW, _random_job

pytestmark = pytest.mark.usefixtures("utc_tz")  # (tests/unit/conftest.py)


def _printed_by_command(jobs: list[dict[str, Any]], states: list[str] | None,
                        hidden: set[str] | None, now: float) -> str:
    """What _main prints from the records (its client-side path)."""
    jobs = squeue.select_states(jobs, states)
    if jobs and hidden:
        jobs = [j for j in jobs if j.get("partition") not in hidden]
    return squeue.format_jobs(jobs, now, squeue.default_options())


@pytest.mark.parametrize("seed", range(30))
def test_rendered_text_is_the_commands_at_any_now(seed: int) -> None:
    rng = random.Random(seed)
    jobs = [_random_job(rng, 100 + i) for i in range(rng.randint(0, 150))]
    for j in jobs:
        if rng.random() < 0.2 and j["start_time"] is not None:
            j["end_time"] = None  # running, completing… with a TIME that moves
    states = rng.choice([None, sorted(squeue._ACTIVE), ["RUNNING"], ["PENDING"], []])
    hidden = rng.choice([None, set(), {"gpu"}, {"debug", "gpu"}])
    rendered = squeue.render_default(jobs, states, hidden)
    assert rendered is not None
    for now in (NOW, NOW + 0.4, NOW + 1, NOW + 59.9, NOW + 3600, NOW + 86400 * 3):
        assert rendered.text_at(now) == _printed_by_command(jobs, states, hidden, now), now


def test_a_queue_without_running_jobs_is_one_text() -> None:
    rng = random.Random(7)
    jobs = [dict(_random_job(rng, i), state="PENDING", start_time=None) for i in range(1, 50)]
    text = answers.squeue_text(list(jobs[0]), [list(j.values()) for j in jobs], "all", None)
    assert text is not None and text.body is not None
    assert text.at(NOW) == _printed_by_command(jobs, None, None, NOW).encode()
    assert text.at(NOW + 100) == text.body


def _controller_jobs() -> list[Any]:
    from corral.model.job import Job, JobState, NodeAlloc, Reason

    out = []
    for i in range(1, 60):
        kw: dict[str, Any] = {"reason": Reason.PRIORITY, "priority": i * 1000}
        if i % 3 == 0:
            kw.update(state=JobState.RUNNING, reason=Reason.NONE, nodes=["n1", "n2"],
                      alloc=[NodeAlloc("n1", 2, 1024), NodeAlloc("n2", 2, 1024)],
                      start_time=NOW - 37.5 * i)
        if i % 4 == 0:
            kw.update(state=JobState.SUSPENDED, nodes=["n3"], start_time=NOW - 500,
                      suspend_time=NOW - 100, suspended_secs=20.0)
        if i % 5 == 0:
            kw.update(array_job_id=i, array_tasks=[1, 2, 3, 7], array_max_running=2)
        if i % 7 == 0:
            kw.update(state=JobState.COMPLETED, start_time=NOW - 90, end_time=NOW - 30)
        if i % 11 == 0:
            kw.update(reason=Reason.HELD_USER, held="user", priority=0)
        out.append(Job(job_id=i, name=f"j{i}\tx" if i % 13 == 0 else f"job{i}",
                       user="alice" if i % 2 else "bob", uid=1000, gid=1000,
                       partition="debug" if i % 6 else "hidden", submit_time=NOW - 1000,
                       **kw))
    return out


@pytest.mark.parametrize("states", [None, "all", "PENDING,RUNNING,SUSPENDED", "RUNNING"])
def test_controller_text_from_jobs_is_what_the_command_prints_from_json(
        states: str | None) -> None:
    """From the controller's Job objects (not their JSON) to the same bytes the command
    prints from the rows answer it decodes."""
    from corral.controller import server
    from corral.model.job import Job

    fields = answers.squeue_fields()
    build = answers.row_builder(fields, server._field_getter,
                                server._DERIVED | Job.__dataclass_fields__.keys())
    rows = [build(j) for j in _controller_jobs()]
    for hidden in (None, {"hidden"}):
        text = answers.squeue_text(fields, rows, states, hidden)
        assert text is not None
        decoded = [dict(zip(fields, row, strict=True)) for row in json.loads(json.dumps(rows))]
        wanted = None if states in (None, "all") else states.split(",")  # type: ignore[union-attr]
        for now in (NOW, NOW + 1.5, NOW + 7200):
            assert text.at(now) == _printed_by_command(decoded, wanted, hidden, now).encode()


def test_the_printing_thread_gets_copies_of_every_container() -> None:
    from corral.model.job import Job

    for f in answers.squeue_fields():
        spec = Job.__dataclass_fields__.get(f)
        kind = str(spec.type) if spec is not None else ""
        assert any(c in kind for c in ("list", "dict", "set")) == (f in answers.CONTAINER_FIELDS), f


def test_requests_during_a_print_wait_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import threading

    printed: list[int] = []
    release = threading.Event()
    real = answers.squeue_text

    def slow_print(*args: Any) -> Any:
        printed.append(1)
        release.wait(10)
        return real(*args)

    monkeypatch.setattr(answers, "squeue_text", slow_print)
    monkeypatch.setattr(answers, "PRINT_ON_LOOP", 0)  # these few rows too: on the thread
    rng = random.Random(3)
    jobs = [dict(_random_job(rng, i), state="PENDING", start_time=None) for i in range(1, 20)]
    fields, rows = list(jobs[0]), [list(j.values()) for j in jobs]

    async def scenario() -> list[Any]:
        cache = answers.RowsCache()
        first = asyncio.ensure_future(cache.print_text("q", (1, 1), fields, rows, "all", None))
        await asyncio.sleep(0.05)
        waiting = asyncio.ensure_future(cache.being_printed("q", (1, 1)))
        other_generation = await cache.being_printed("q", (2, 1))
        release.set()
        texts = [await first, await waiting, other_generation, cache.get("q", (1, 1))]
        # a new generation with the same rows: the text printed before, not printed again
        same = await cache.print_text("q", (2, 1), fields, [list(r) for r in rows], "all", None)
        assert same is texts[0] and cache.get("q", (2, 1)) is same and printed == [1]
        changed = [list(r) for r in rows]
        changed[0][fields.index("name")] = "renamed"
        new = await cache.print_text("q", (3, 1), fields, changed, "all", None)
        assert printed == [1, 1] and new is not same and b"renamed" in new.at(NOW)
        # the same rows, but a partition hidden since: printed again, without its jobs
        part = changed[0][fields.index("partition")]
        hid = await cache.print_text("q", (4, 1), fields, [list(r) for r in changed], "all",
                                     {part})
        assert printed == [1, 1, 1] and b"renamed" not in hid.at(NOW)
        cache._thread().shutdown()
        return texts

    first, waiting, other, kept = asyncio.run(scenario())
    assert printed == [1, 1, 1]
    assert first is waiting is kept and other is None
    assert first.at(NOW) == _printed_by_command(jobs, None, None, NOW).encode()


@pytest.mark.parametrize("seed", range(25))
def test_printer_prints_each_version_of_a_changing_queue_as_the_command(seed: int) -> None:
    """QueuePrinter, reusing the lines of unchanged rows, over a queue that changes
    between prints: jobs come and go, start, change priority; arrays split tasks off."""
    rng = random.Random(1000 + seed)
    jobs = [_random_job(rng, 100 + i) for i in range(rng.randint(0, 80))]
    for j in jobs[: len(jobs) // 4]:  # tasks split off array 100 / its record
        j.update(array_job_id=100, array_task_id=rng.randint(1, 9))
    fields = sorted({k for j in jobs for k in j} | set(squeue.needed_fields(
        squeue.default_options())))
    printer = squeue.QueuePrinter(fields)
    for _round in range(6):
        for j in jobs:
            if j["start_time"] is not None and rng.random() < 0.3:
                j["end_time"] = None
        states = rng.choice([None, sorted(squeue._ACTIVE), ["PENDING", "RUNNING"]])
        hidden = rng.choice([None, {"gpu"}])
        rows = [[j.get(f) for f in fields] for j in jobs]
        rendered = printer.print(rows, states, hidden)
        assert rendered is not None
        records = [dict(zip(fields, r, strict=True)) for r in rows]
        for now in (NOW, NOW + 61.5):
            assert rendered.text_at(now) == _printed_by_command(records, states, hidden, now)
        # the next version: some jobs change, some leave, some come
        for j in rng.sample(jobs, min(len(jobs), rng.randint(0, 5))):
            j.update(priority=rng.randint(0, 10), state=rng.choice(["PENDING", "RUNNING"]),
                     start_time=rng.choice([None, NOW - 5]), name=rng.choice(["x", "y\tz"]))
        if jobs and rng.random() < 0.5:
            jobs.remove(rng.choice(jobs))
        jobs += [_random_job(rng, 1000 + 10 * _round + k) for k in range(rng.randint(0, 3))]
        rng.shuffle(jobs) if rng.random() < 0.2 else None


def test_only_the_recent_queries_keep_their_lines() -> None:
    import asyncio

    rng = random.Random(5)
    jobs = [_random_job(rng, i) for i in range(1, 30)]
    fields, rows = list(jobs[0]), [list(j.values()) for j in jobs]

    async def scenario() -> answers.RowsCache:
        cache = answers.RowsCache()
        for q in range(answers.MAX_PRINTERS + 3):
            await cache.print_text(f"q{q}", (1, 1), fields, [list(r) for r in rows], "all", None)
        await cache.print_text("q0", (1, 1), fields, [list(r) for r in rows], "all", None)
        cache._thread().shutdown()
        return cache

    cache = asyncio.run(scenario())
    for kept in (cache._printers, cache._printed):
        assert len(kept) == answers.MAX_PRINTERS
        assert list(kept)[-1] == "q0" and f"q{answers.MAX_PRINTERS + 2}" in kept
