"""The pass's per-stage timings (Decision.stage_seconds, by a timer the caller injects) and
the answers the scheduler keeps across passes: neither may change a decision."""

from __future__ import annotations

from collections.abc import Callable

from corral.model.job import Job, JobState, NodeAlloc
from corral.model.node import Partition
from corral.sched import backfill
from corral.sched.backfill import schedule
from corral.sched.deps import DepIndex, parse_dependency
from corral.sched.pipeline import ClusterSnapshot, Decision, SchedParams, run_pass
from corral.sched.preempt import PreemptPolicy, QosPreempt
from corral.sched.snapshot import INFINITE_TIME, NodeView, PendingView, RunningView, Snapshot

NOW = 1_000_000.0


def _ticks() -> Callable[[], float]:
    """A fake clock: each reading one second after the last."""
    t = [0.0]

    def timer() -> float:
        t[0] += 1.0
        return t[0]
    return timer


def _view(name: str, free_gpus: int = 4) -> NodeView:
    return NodeView(name, 16, 64_000, 4, 16, 64_000, list(range(free_gpus)), True,
                    partitions=("gpu",))


def _job(job_id: int, gpus: int, **kw: object) -> Job:
    return Job(job_id=job_id, name="j", user="u", uid=1, gid=1, partition="gpu",
               submit_time=NOW - 1000 + job_id, gpus_per_node=gpus, time_limit=3600,
               **kw)  # type: ignore[arg-type]


def _cluster(pending: list[Job]) -> ClusterSnapshot:
    views = [_view("n1"), _view("n2", free_gpus=0)]
    running = [RunningView(50, NOW + 600, [NodeAlloc("n2", 4, 1000, [0, 1, 2, 3])],
                           qos="normal", partition="gpu", start_time=NOW - 60)]
    ran = Job(job_id=50, name="r", user="u", uid=1, gid=1, partition="gpu",
              state=JobState.RUNNING)
    return ClusterSnapshot(now=NOW, nodes={v.name: v for v in views},
                           partitions={"gpu": Partition("gpu", ["n1", "n2"])},
                           running=running, pending=pending, jobs=[*pending, ran],
                           params=SchedParams())


def _same(a: Decision, b: Decision) -> bool:
    return (a.starts, a.reasons, a.priorities, a.planned, a.became_eligible,
            a.dependency_texts, a.preemptions) == \
        (b.starts, b.reasons, b.priorities, b.planned, b.became_eligible,
         b.dependency_texts, b.preemptions)


def test_stage_seconds_by_the_injected_timer_and_the_same_decision() -> None:
    jobs = [_job(1, 4), _job(2, 4), _job(3, 1, dependency="afterok:50"), _job(4, 8)]
    plain = run_pass(_cluster(jobs))
    assert plain.stage_seconds == {}  # no timer: nothing measured, nothing read
    timed = run_pass(_cluster(jobs), timer=_ticks())
    assert _same(plain, timed)
    assert [s.job_id for s in timed.starts] == [1] and 2 in timed.planned
    # one reading at the start, then one at the end of each stage (each a tick later)
    assert timed.stage_seconds == {"eligibility": 1.0, "priority": 1.0, "limits": 1.0,
                                   "backfill": 1.0, "decision": 1.0}


def test_a_pass_with_no_candidate_still_times_what_ran() -> None:
    timed = run_pass(_cluster([_job(1, 1, held="user")]), timer=_ticks())
    assert timed.reason_texts == {1: "JobHeldUser"}
    assert set(timed.stage_seconds) == {"eligibility", "priority", "decision"}


def test_preemption_checks_are_timed_apart_from_backfill() -> None:
    policy = PreemptPolicy("preempt/qos", "requeue", 0,
                           {"high": QosPreempt(frozenset({"normal"})), "normal": QosPreempt()})
    views = {"n1": _view("n1", free_gpus=0)}
    running = [RunningView(50, INFINITE_TIME, [NodeAlloc("n1", 4, 1000, [0, 1, 2, 3])],
                           qos="normal", partition="gpu", start_time=NOW - 60)]
    job = PendingView(1, 100, NOW - 10, "gpu", gpus_per_node=2, mem_per_node=1000,
                      qos="high")
    view = Snapshot(NOW, views, {"gpu": Partition("gpu", ["n1"])}, running, [job],
                    preempt=policy)
    plain = schedule(view)
    timed = schedule(view, timer=_ticks())
    assert plain.preemptions == timed.preemptions and [p[2] for p in plain.preemptions] == [[50]]
    assert plain.preempt_seconds == 0.0 and timed.preempt_seconds == 1.0


def test_answers_kept_across_passes_decide_as_fresh_ones() -> None:
    """The idle-sample fits and requests remembered from one pass serve the next; a pass
    after the caches are dropped decides the same."""
    jobs = [_job(1, 4), _job(2, 4), _job(3, 16), _job(4, 2, exclusive=True)]
    first = run_pass(_cluster(jobs))
    again = run_pass(_cluster(jobs))
    backfill._FITS_IDLE.clear()
    backfill._REQUESTS.clear()
    fresh = run_pass(_cluster(jobs))
    assert _same(first, again) and _same(first, fresh)
    assert first.reason_texts[3] == "PartitionConfig"  # 16 GPUs fit no node, ever


def test_pass_item_states_answer_once_lookup_reads_anew() -> None:
    jobs = [Job(job_id=7, name="a", user="u", uid=1, gid=1, state=JobState.RUNNING)]
    index = DepIndex(jobs)
    dep = parse_dependency("afterany:7")
    assert index.item_states(dep, 0.0, False) == ("unfulfilled",)
    jobs[0].state = JobState.COMPLETED
    assert index.lookup(7, None) == [("COMPLETED", 0, None)]
    assert index.item_states(dep, 0.0, False) == ("unfulfilled",)  # within one pass
    assert DepIndex(jobs).item_states(dep, 0.0, False) == ("fulfilled",)


def test_run_minutes_charged_when_a_limit_reads_them() -> None:
    """Running jobs' remaining TRES-minutes are added only when a GrpTRESRunMins limit is
    checked, in charging order; starts after a check count in the next one."""
    from corral.sched.limits_check import LimitLedger
    from tests.unit.test_limits_check import job, lab

    db = lab()
    db.assocs[2].limits.grp_tres_run_mins = {"gres/gpu": 1000}
    led = LimitLedger(db, "c")
    led.add_running(job(1, "pi", account="lab", gpus=1, minutes=500), 300)
    led.add_running(job(2, "ben", gpus=1, minutes=500), 300)
    assert led.check_start(job(3, "ann", gpus=1, minutes=400)) is None  # 600 + 400
    led.start(job(3, "ann", gpus=1, minutes=400))
    hit = led.check_start(job(4, "ann", gpus=1, minutes=1))
    assert hit is not None and hit.code == "AssocGrpGRESRunMinutes" and hit.used == 1000
    assert led.check_start(job(5, "pi", account="lab", minutes=60)) is None  # no GPUs asked
