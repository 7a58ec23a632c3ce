"""Dependencies: parsing, evaluation and scontrol's Dependency= text."""

from __future__ import annotations

import pytest

from corral.sched.deps import (
    NEVER,
    SATISFIED,
    WAITING,
    Dependency,
    DependencyError,
    DepItem,
    evaluate,
    format_dependency,
    parse_dependency,
)

NOW = 10_000.0

Rec = tuple[str, int, float | None]


def table(jobs: dict[int, list[tuple[int | None, str, int, float | None]]]):  # type: ignore[no-untyped-def]
    """lookup over {job_id: [(task_id, state, exit, start), …]}."""

    def lookup(job_id: int, task_id: int | None) -> list[Rec]:
        rows = jobs.get(job_id, [])
        return [(s, c, t) for tid, s, c, t in rows if task_id is None or tid == task_id]

    return lookup


def test_parse_forms() -> None:
    d = parse_dependency("afterok:1:2,afterany:3")
    assert not d.any_of
    assert [(i.kind, i.job_id) for i in d.items] == [("afterok", 1), ("afterok", 2), ("afterany", 3)]
    d = parse_dependency("afterok:1?afterany:2")
    assert d.any_of and len(d.items) == 2
    d = parse_dependency("afterok:7_2:7_*:8")
    assert d.items == (DepItem("afterok", 7, 2), DepItem("afterok", 7, None, True),
                       DepItem("afterok", 8))
    assert parse_dependency("after:5+10").items == (DepItem("after", 5, delay_s=600),)
    assert parse_dependency("singleton").items == (DepItem("singleton"),)
    assert parse_dependency("AfterOK:4").items[0].kind == "afterok"
    assert parse_dependency("12").items == (DepItem("afterany", 12),)
    assert parse_dependency("afternotok:3,singleton,aftercorr:9").items[2].kind == "aftercorr"
    assert parse_dependency("after:123_[4-5,9]").items == tuple(
        DepItem("after", 123, t) for t in (4, 5, 9))
    assert parse_dependency("afterok:1,afterok:1").items == (DepItem("afterok", 1),)
    # scontrol's own text parses back
    d = parse_dependency("afterok:1_*(unfulfilled),afterany:2(failed)")
    assert d.items == (DepItem("afterok", 1, None, True), DepItem("afterany", 2, failed=True))


@pytest.mark.parametrize("text", ["", "0", None, "  "])
def test_parse_empty_means_none(text: str | None) -> None:
    assert parse_dependency(text) == Dependency()


@pytest.mark.parametrize("text", [
    "afterok", "afterok:", "afterok:abc", "afterok:0", "bogus:1", "afterok:1,", "after:1+0",
    "after:1+x", "afterok:1_x", ",afterok:1", "singleton:1", "afterok:1_[]", "afterok:1;2",
])
def test_parse_errors(text: str) -> None:
    with pytest.raises(DependencyError) as e:
        parse_dependency(text)
    assert str(e.value) == "Job dependency problem"


def test_unsupported_types_say_so() -> None:
    with pytest.raises(DependencyError, match="not supported"):
        parse_dependency("afterburstbuffer:3")


def test_self_dependency_refused() -> None:
    with pytest.raises(DependencyError):
        parse_dependency("afterok:5", own_job_id=5)
    with pytest.raises(DependencyError):
        parse_dependency("afterany:7_*", own_job_id=9, own_array_job_id=7)
    assert parse_dependency("afterok:4", own_job_id=5).items


def test_afterok() -> None:
    dep = parse_dependency("afterok:1")
    assert evaluate(dep, table({1: [(None, "RUNNING", 0, 5.0)]}), NOW) == WAITING
    assert evaluate(dep, table({1: [(None, "PENDING", 0, None)]}), NOW) == WAITING
    assert evaluate(dep, table({1: [(None, "COMPLETED", 0, 5.0)]}), NOW) == SATISFIED
    for state, code in (("FAILED", 3), ("CANCELLED", 0), ("TIMEOUT", 0), ("COMPLETED", 1)):
        assert evaluate(dep, table({1: [(None, state, code, 5.0)]}), NOW) == NEVER


def test_unknown_job_is_satisfied() -> None:
    assert evaluate(parse_dependency("afterok:999999"), table({}), NOW) == SATISFIED


def test_afternotok_and_afterany() -> None:
    notok = parse_dependency("afternotok:1")
    anyd = parse_dependency("afterany:1")
    running = table({1: [(None, "RUNNING", 0, 5.0)]})
    failed = table({1: [(None, "FAILED", 1, 5.0)]})
    done = table({1: [(None, "COMPLETED", 0, 5.0)]})
    assert evaluate(notok, running, NOW) == WAITING
    assert evaluate(notok, failed, NOW) == SATISFIED
    assert evaluate(notok, done, NOW) == NEVER
    assert evaluate(anyd, running, NOW) == WAITING
    assert evaluate(anyd, failed, NOW) == SATISFIED
    assert evaluate(anyd, done, NOW) == SATISFIED


def test_after_with_and_without_delay() -> None:
    running = table({1: [(None, "RUNNING", 0, NOW - 300)]})
    pending = table({1: [(None, "PENDING", 0, None)]})
    assert evaluate(parse_dependency("after:1"), pending, NOW) == WAITING
    assert evaluate(parse_dependency("after:1"), running, NOW) == SATISFIED
    assert evaluate(parse_dependency("after:1+10"), running, NOW) == WAITING
    assert evaluate(parse_dependency("after:1+5"), running, NOW) == SATISFIED
    cancelled = table({1: [(None, "CANCELLED", 0, None)]})
    assert evaluate(parse_dependency("after:1+5"), cancelled, NOW) == SATISFIED


def test_arrays_whole_and_task() -> None:
    arr = table({7: [(1, "COMPLETED", 0, 1.0), (2, "RUNNING", 0, 2.0), (3, "FAILED", 2, 3.0)]})
    assert evaluate(parse_dependency("afterok:7_1"), arr, NOW) == SATISFIED
    assert evaluate(parse_dependency("afterok:7_2"), arr, NOW) == WAITING
    assert evaluate(parse_dependency("afterok:7_3"), arr, NOW) == NEVER
    # the whole array: waits for every task, then fails because one failed
    assert evaluate(parse_dependency("afterok:7"), arr, NOW) == WAITING
    assert evaluate(parse_dependency("afterany:7_*"), arr, NOW) == WAITING
    done = table({7: [(1, "COMPLETED", 0, 1.0), (2, "COMPLETED", 0, 2.0), (3, "FAILED", 2, 3.0)]})
    assert evaluate(parse_dependency("afterok:7_*"), done, NOW) == NEVER
    assert evaluate(parse_dependency("afternotok:7"), done, NOW) == SATISFIED
    assert evaluate(parse_dependency("afterany:7"), done, NOW) == SATISFIED


def test_aftercorr_pairs_tasks() -> None:
    arr = table({7: [(1, "COMPLETED", 0, 1.0), (2, "FAILED", 1, 2.0), (3, "RUNNING", 0, 3.0)]})
    dep = parse_dependency("aftercorr:7")
    assert evaluate(dep, arr, NOW, array_task_id=1) == SATISFIED
    assert evaluate(dep, arr, NOW, array_task_id=2) == NEVER
    assert evaluate(dep, arr, NOW, array_task_id=3) == WAITING


def test_and_or_combination() -> None:
    lk = table({1: [(None, "COMPLETED", 0, 1.0)], 2: [(None, "FAILED", 1, 1.0)],
                3: [(None, "RUNNING", 0, 1.0)]})
    assert evaluate(parse_dependency("afterok:1,afterok:3"), lk, NOW) == WAITING
    assert evaluate(parse_dependency("afterok:1:2"), lk, NOW) == NEVER
    assert evaluate(parse_dependency("afterok:1,afterany:2"), lk, NOW) == SATISFIED
    assert evaluate(parse_dependency("afterok:2?afterok:1"), lk, NOW) == SATISFIED
    assert evaluate(parse_dependency("afterok:2?afterok:3"), lk, NOW) == WAITING
    assert evaluate(parse_dependency("afterok:2?afternotok:1"), lk, NOW) == NEVER


def test_singleton() -> None:
    dep = parse_dependency("singleton")
    assert evaluate(dep, table({}), NOW, job_user="u", job_name="n", singleton_blocked=True) == WAITING
    assert evaluate(dep, table({}), NOW, singleton_blocked=False) == SATISFIED


def test_format_matches_scontrol() -> None:
    # ../shared/slurm-reference/C17: Dependency=afterok:1(unfulfilled)
    lk = table({1: [(None, "RUNNING", 0, 1.0)]})
    assert format_dependency(parse_dependency("afterok:1"), lk, NOW) == "afterok:1(unfulfilled)"
    assert format_dependency(parse_dependency("afterok:1")) == "afterok:1(unfulfilled)"
    arr = table({7: [(1, "RUNNING", 0, 1.0)], 1: [(None, "COMPLETED", 0, 1.0)]})
    text = format_dependency(parse_dependency("afterok:1,afterok:7,after:7+500,singleton"), arr, NOW,
                             singleton_blocked=True, is_array=lambda j: j == 7)
    # fulfilled entries are left out
    assert text == "afterok:7_*(unfulfilled),after:7_*+500(unfulfilled),singleton(unfulfilled)"
    failed = table({1: [(None, "FAILED", 1, 1.0)], 2: [(None, "RUNNING", 0, 1.0)]})
    assert format_dependency(parse_dependency("afterok:1?afterok:2"), failed, NOW) == \
        "afterok:1(failed)?afterok:2(unfulfilled)"
    done = table({1: [(None, "COMPLETED", 0, 1.0)]})
    assert format_dependency(parse_dependency("afterok:1"), done, NOW) == ""
    assert format_dependency(parse_dependency("afterok:3_2")) == "afterok:3_2(unfulfilled)"


def test_index_lookup_matches_records_and_gone_jobs() -> None:
    from corral.model.job import Job, JobState
    from corral.sched.deps import DepIndex, GoneJobs, GoneRecord

    def rec(jid: int, st: JobState, **kw: object) -> Job:
        return Job(job_id=jid, name=str(kw.pop("name", "n")), user="u", uid=int(kw.pop("uid", 1)),
                   gid=1, state=st, **kw)  # type: ignore[arg-type]

    jobs = [
        rec(1, JobState.COMPLETED),
        rec(5, JobState.PENDING, array_job_id=5, array_tasks=[3, 4]),
        rec(6, JobState.COMPLETED, array_job_id=5, array_task_id=1, exit_code=2),
        rec(8, JobState.RUNNING, name="s"),
        rec(9, JobState.PENDING, name="s"),
    ]
    gone = GoneJobs()
    gone.add(GoneRecord(2, None, None, "FAILED", 1, 10.0))
    gone.add(GoneRecord(3, 3, 0, "COMPLETED", 0, 5.0))
    gone.add(GoneRecord(4, 3, 1, "COMPLETED", 0, 6.0))
    gone.missing.add(77)
    idx = DepIndex(jobs, gone)
    assert idx.lookup(1, None) == [("COMPLETED", 0, None)]
    assert sorted(idx.lookup(5, None)) == [("COMPLETED", 2, None), ("PENDING", 0, None)]
    assert idx.lookup(5, 4) == [("PENDING", 0, None)]
    assert idx.lookup(5, 1) == [("COMPLETED", 2, None)]
    assert idx.lookup(2, None) == [("FAILED", 1, 10.0)]
    assert sorted(idx.lookup(3, None)) == [("COMPLETED", 0, 5.0), ("COMPLETED", 0, 6.0)]
    assert idx.lookup(3, 1) == [("COMPLETED", 0, 6.0)]
    assert idx.lookup(77, None) == [] and gone.knows(77) and not gone.knows(78)
    # array 5: task 1 in memory, task 0 gone from memory: both count
    gone.add(GoneRecord(4_000, 5, 0, "FAILED", 1, 1.0))
    assert sorted(idx.lookup(5, None)) == [("COMPLETED", 2, None), ("FAILED", 1, 1.0),
                                           ("PENDING", 0, None)]
    assert idx.lookup(5, 0) == [("FAILED", 1, 1.0)]
    assert idx.singleton_blocked(jobs[4])  # "s" runs as job 8
    assert not idx.singleton_blocked(jobs[0])
