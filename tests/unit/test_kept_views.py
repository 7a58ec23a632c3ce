"""What the core keeps between passes and ticks, brought up to date from the job table's marks
(controller/core/followed.py), against the same built from scratch, after each of a random
run of changes to the real controller (controller/harness): submissions (arrays too), passes,
ends, cancels, requeues, suspensions, time limit and other updates, holds, node drains, downs
and failures, time passing.

- the passes' running views (Passes.running_views) equal fresh `running_view`s, in order;
- the time-limit check's index (Lifecycle._may_act) finds something whenever the full loop
  over the running jobs would act, now and at later times;
- check_ending's set of COMPLETING jobs names one whenever one is not yet followed;
- expire_finished's heap of ends finds a finished job whenever one ended before the cutoff."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from corral.controller.core.lifecycle import PREEMPT_KILLS, Lifecycle
from corral.controller.core.passes import running_view
from corral.controller.harness import Harness
from corral.controller.state import SlurmError
from corral.model.job import JobState
from tests.unit.random_changes import SHARED, RandomChanges

CONF = """\
ClusterName=t
SlurmdTimeout=30
KillWait=7
NodeName=n[1-4] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=n[1-3] Default=YES MaxTime=60
PartitionName=gpu Nodes=n[3-4]
"""


def loop_would_act(lc: Lifecycle, now: float) -> bool:
    """Whether check_time_limits' loop over every running job acts on one at `now`."""
    core = lc.core
    for job in core.running.values():
        if job.suspended_for is not None and job.state == JobState.SUSPENDED \
                and job.job_id not in core.cluster.loans.get(job.suspended_for, ()):
            return True
        if job.kill_reason in PREEMPT_KILLS and job.state == JobState.RUNNING \
                and job.job_id not in lc.preempt_deadlines:
            return True
        if job.time_limit > 0 and job.start_time is not None and job.state == JobState.RUNNING \
                and now >= job.start_time + job.time_limit + job.suspended_secs:
            return True
    return False


class Scene(RandomChanges):
    def __init__(self, seed: int) -> None:
        super().__init__(seed, CONF)
        self.root = self.h.who(0, True)

    def step(self) -> str:
        rng, h, ctl, root = self.rng, self.h, self.h.ctl, self.root
        op = rng.choice(["submit", "submit", "submit", "array", "tick", "tick", "end", "end",
                         "hold", "release", "update", "limit", "cancel", "requeue", "suspend",
                         "advance", "advance", "drain", "down", "resume", "node_fails"])
        if op in SHARED:
            self.shared_step(op, root)
        elif op in ("submit", "array"):
            spec: dict[str, Any] = {"num_nodes": rng.choice([1, 1, 2]),
                                    "cpus_per_task": rng.choice([1, 2, 4]),
                                    "time_limit": rng.choice([30, 120, 600, 3600])}
            if rng.random() < 0.3:
                spec["partition"] = rng.choice(["gpu", "debug,gpu"])
            if rng.random() < 0.3:
                spec["gpus_per_node"] = rng.choice([1, 2])
            if rng.random() < 0.2:
                spec["exclusive"] = True
            if rng.random() < 0.1:
                spec["held"] = "user"
            try:
                h.submit(uid=rng.choice([1000, 1001]),
                         array=rng.choice(["1-4", "1-6%2"]) if op == "array" else None, **spec)
            except SlurmError:
                pass
        elif op == "end":
            for job in self.some_jobs("RUNNING", "COMPLETING"):
                h.end(job.job_id, rng.choice(["COMPLETED", "FAILED"]))
        elif op == "hold":
            self.request(lambda: ctl.hold(root, self.some_jobs("PENDING"), "hold"))
        elif op in ("update", "limit"):
            for job in self.some_jobs("PENDING", "RUNNING", "SUSPENDED"):
                change = {"timelimit": str(rng.choice([1, 2, 10, 60]))} if op == "limit" \
                    else rng.choice([{"priority": rng.randint(1, 10**6)}, {"qos": "normal"},
                                     {"partition": rng.choice(["debug", "gpu"])},
                                     {"nice": 50}])
                self.request(lambda j=job, c=change: ctl.update_job(root, j, c))
        elif op in ("drain", "down", "resume"):
            names = rng.sample(sorted(ctl.nodes), rng.randint(1, 2))
            self.request(lambda: ctl.update_nodes(root, names, op.upper(),
                                                  None if op == "resume" else "test"))
        elif op == "advance":
            h.advance(rng.choice([1, 5, 40, 70, 700]))
        return op

    def check(self, done: list[str]) -> None:
        core = self.h.ctl.core
        now = self.h.clock()
        kept = core.passes.running_views(now)
        assert kept == [running_view(j, now) for j in core.running.values()], done
        lc = core.lifecycle
        for later in (0, 30, 61, 600, 4000):
            if loop_would_act(lc, now + later):
                assert lc._may_act(now + later), (done, later)
        cutoff = now - core.settings.min_job_age
        for later in (0, 30, 300, 4000):
            if any(j.state.finished and (j.end_time or 0) < cutoff + later
                   for j in core.jobs.values()):
                assert lc._may_expire(cutoff + later), (done, later)
        lc._follow_marks()
        if any(j.state == JobState.COMPLETING and j.job_id not in lc.ending
               for j in core.running.values()):
            assert lc._completing_unfollowed(), done


@pytest.fixture
def scenes() -> Iterator[list[Scene]]:
    made: list[Scene] = []
    yield made
    for s in made:
        s.h.close()


@pytest.mark.parametrize("seed", range(10))
def test_kept_views_equal_views_built_from_scratch(seed: int, scenes: list[Scene]) -> None:
    scene = Scene(seed)
    scenes.append(scene)
    done: list[str] = []
    states: set[str] = set()
    for _ in range(80):
        done.append(scene.step())
        states.update(j.state.value for j in scene.h.ctl.jobs.values())
        scene.check(done)
    assert {"RUNNING", "PENDING"} <= states and len(states) >= 4, states


def test_a_time_limit_shortened_while_running_is_found_due() -> None:
    with Harness(CONF) as h:
        job_id = h.submit(time_limit=3600)
        h.tick()
        lc = h.ctl.core.lifecycle
        now = h.clock()
        assert not lc._may_act(now + 120)  # (the heap's entry: an hour from now)
        h.call(h.ctl.update_job, h.who(0, True), h.job(job_id), {"timelimit": "1"})
        assert lc._may_act(now + 120)
        h.advance(120)
        assert h.job(job_id).kill_reason == "TIMEOUT"


def test_finished_jobs_are_forgotten_after_min_job_age_as_a_full_scan_finds_them() -> None:
    with Harness(CONF) as h:
        ids = [h.submit(time_limit=60) for _ in range(3)]
        h.tick()
        h.end(ids[0])
        h.advance(100)
        h.end(ids[1])
        lc = h.ctl.core.lifecycle
        ended = h.job(ids[0]).end_time
        assert ended is not None
        assert not lc._may_expire(ended)
        assert lc._may_expire(ended + 1)
        h.advance(h.ctl.core.settings.min_job_age - 50)
        assert ids[0] not in h.ctl.jobs and ids[1] in h.ctl.jobs
