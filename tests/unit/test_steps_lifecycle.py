"""A job whose srun steps still run when it ends (requeue, cancel, batch script done) stays
COMPLETING with its resources held until the steps are gone, and each step of a job holds
its own GPUs: the controller in process (Harness) with the real step manager, whose steps'
tasks are reported ended by hand as the agents would report them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from corral.controller.core.lifecycle import KILL_TASK_FAILED
from corral.controller.harness import Harness
from corral.controller.steps import LiveStep, StepManager, _Busy
from corral.model import messages as m
from corral.model.job import JobState, Step

CONF = """\
ClusterName=t
KillWait=5
UnkillableStepTimeout=20
SlurmdTimeout=30
MinJobAge=60
NodeName=n[1-2] CPUs=4 RealMemory=4000 Gres=gpu:4
PartitionName=debug Nodes=n[1-2] Default=YES
"""


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(CONF) as harness:
        harness.steps = StepManager(harness.ctl)  # type: ignore[attr-defined]
        yield harness


def steps_of(h: Harness) -> StepManager:
    sm: StepManager = h.steps  # type: ignore[attr-defined]
    return sm


def add_step(h: Harness, job_id: int, ntasks: int = 1, **spec: Any) -> LiveStep:
    """A running srun step of `job_id`, laid out as the step manager lays one out."""
    sm = steps_of(h)
    job = h.job(job_id)
    req = m.StepSpec.from_dict({"argv": ["sleep", "300"], "ntasks": ntasks, **spec})
    mem: dict[str, int] = {}
    nodes, counts, cpus, gpus = sm._layout(job, req, mem)
    sid = sm._next_step_id(job)
    record = Step(str(sid), "sleep", JobState.RUNNING.value, start_time=h.clock())
    job.steps.append(record)
    client: list[m.Message] = []
    st = LiveStep(job_id, sid, client.append, nodes, counts, cpus, gpus, record, mem=mem,
                  gpus_held={} if req.overlap else gpus)
    sm.live[(job_id, sid)] = st
    return st


def task_ended(h: Harness, st: LiveStep, task: int = 0, signal: int = 15) -> None:
    h.call(steps_of(h).agent_message,
           m.TaskExit(job_id=st.job_id, step_id=st.step_id, task_id=task, signal=signal))


def running_job(h: Harness, **spec: Any) -> int:
    a = h.submit(**spec)
    h.tick()
    assert h.job(a).state == JobState.RUNNING
    return a


# ---- requeue ------------------------------------------------------------------------------

def test_requeue_waits_for_the_steps_then_numbers_steps_from_zero(h: Harness) -> None:
    a = running_job(h)
    st = add_step(h, a)
    assert st.step_id == 0
    node = h.ctl.nodes[h.job(a).nodes[0]]
    h.call(h.ctl.requeue, h.who(), [h.job(a)], False)
    assert h.job(a).state == JobState.COMPLETING
    h.end(a, "REQUEUED", signal=15)  # the batch step is gone, the srun step not yet
    assert h.job(a).state == JobState.COMPLETING
    assert node.alloc_cpus > 0, "resources released while a step still runs on them"
    h.advance(3)
    assert h.job(a).state == JobState.COMPLETING and a in h.ctl.cluster.charged
    task_ended(h, st)
    job = h.job(a)
    assert job.state == JobState.PENDING and job.reason == "BeginTime"
    assert node.alloc_cpus == 0 and job.steps == [] and not steps_of(h).live
    assert job.begin_time is not None and job.begin_time > h.clock()
    h.advance(2)
    assert h.job(a).state == JobState.RUNNING and h.job(a).restart_count == 1
    assert add_step(h, a).step_id == 0  # a new run's steps start at 0 again


def test_requeue_with_no_steps_is_immediate(h: Harness) -> None:
    a = running_job(h)
    h.call(h.ctl.requeue, h.who(), [h.job(a)], False)
    h.end(a, "REQUEUED", signal=15)
    assert h.job(a).state == JobState.PENDING


def test_a_step_that_never_reports_is_given_up_after_the_bound(h: Harness) -> None:
    a = running_job(h)
    st = add_step(h, a)
    client: list[m.Message] = []
    st.send = client.append
    h.call(h.ctl.requeue, h.who(), [h.job(a)], False)
    h.end(a, "REQUEUED", signal=15)
    h.advance(24)  # KillWait 5 + UnkillableStepTimeout 20 = 25
    assert h.job(a).state == JobState.COMPLETING
    h.advance(2)
    assert h.job(a).state in (JobState.PENDING, JobState.RUNNING)
    assert not steps_of(h).live and any(isinstance(x, m.StepEnd) for x in client)
    node = h.ctl.nodes[st.nodes[0]]
    assert node.admin_state == "drain" and node.reason == KILL_TASK_FAILED


def test_a_step_on_a_silent_node_does_not_hold_the_job(h: Harness) -> None:
    a = running_job(h, requeue=True)
    st = add_step(h, a)
    node = st.nodes[0]
    h.silent.add(node)
    h.advance(31)  # SlurmdTimeout: NODE_FAIL, requeued (--requeue)
    assert h.job(a).state in (JobState.PENDING, JobState.RUNNING)
    assert (a, 0) not in steps_of(h).live or steps_of(h).live[(a, 0)] is not st


# ---- cancel and normal ends ------------------------------------------------------------------

def test_cancel_shows_completing_until_the_steps_are_gone(h: Harness) -> None:
    a = running_job(h)
    st = add_step(h, a)
    h.call(h.ctl.signal_jobs, h.who(), [h.job(a)], 15, batch_only=False, cancel=True)
    h.end(a, "CANCELLED", signal=15)
    assert h.job(a).state == JobState.COMPLETING and a in h.ctl.cluster.charged
    task_ended(h, st)
    assert h.job(a).state == JobState.CANCELLED and a not in h.ctl.cluster.charged
    assert st.record.state == "CANCELLED"


def test_batch_script_done_while_a_step_runs(h: Harness) -> None:
    a = running_job(h)
    st = add_step(h, a)
    h.end(a, "FAILED", exit_code=3)
    assert h.job(a).state == JobState.COMPLETING
    assert any(x.get("type") == "kill_tasks" and x.get("step_id") == st.step_id
               for x in h.sent), "the step is killed when the job completes"
    task_ended(h, st)
    job = h.job(a)
    assert job.state == JobState.FAILED and job.exit_code == 3


def test_allocation_cancelled_while_a_step_runs(h: Harness) -> None:
    a = running_job(h, batch=False)
    st = add_step(h, a)
    h.call(h.ctl.signal_jobs, h.who(), [h.job(a)], 15, batch_only=False, cancel=True)
    assert h.job(a).state == JobState.COMPLETING and a in h.ctl.cluster.charged
    task_ended(h, st)
    assert h.job(a).state == JobState.CANCELLED and a not in h.ctl.cluster.charged


def test_completing_job_picked_up_again_after_a_restart(h: Harness) -> None:
    a = running_job(h)
    add_step(h, a)
    h.call(h.ctl.requeue, h.who(), [h.job(a)], False)
    h.end(a, "REQUEUED", signal=15)
    assert h.job(a).state == JobState.COMPLETING
    # a restarted controller knows neither the wait nor the step (its srun is gone)
    h.ctl.ending.clear()
    steps_of(h).live.clear()
    h.advance(1)
    assert h.job(a).state in (JobState.PENDING, JobState.RUNNING)
    assert h.job(a).restart_count == 1


# ---- GPUs between concurrent steps -----------------------------------------------------------

def test_steps_hold_distinct_gpus_and_a_third_waits(h: Harness) -> None:
    a = running_job(h, batch=False, gpus_per_node=4, num_tasks=4)  # CPUs for every step
    s1 = add_step(h, a, gpus_per_node=2)
    s2 = add_step(h, a, gpus_per_node=2)
    node = s1.nodes[0]
    assert len(s1.gpus[node]) == len(s2.gpus[node]) == 2
    assert not set(s1.gpus[node]) & set(s2.gpus[node])
    with pytest.raises(_Busy):
        add_step(h, a, gpus_per_node=1)
    # --overlap takes the first of the job's GPUs, held or not; --gres=none takes none
    assert add_step(h, a, gpus_per_node=1, overlap=True).gpus[node] == s1.gpus[node][:1]
    assert add_step(h, a, gpus_per_node=0).gpus[node] == []
    task_ended(h, s1)
    s3 = add_step(h, a, gpus_per_node=1)
    assert s3.gpus[node] == s1.gpus[node][:1]


def test_a_step_without_a_gpu_request_holds_all_of_the_jobs_gpus(h: Harness) -> None:
    a = running_job(h, batch=False, gpus_per_node=4, num_tasks=4)
    s1 = add_step(h, a)
    node = s1.nodes[0]
    assert len(s1.gpus[node]) == 4
    with pytest.raises(_Busy):
        add_step(h, a, gpus_per_node=1)
    task_ended(h, s1)
    add_step(h, a, gpus_per_node=1)
    with pytest.raises(_Busy):
        add_step(h, a)  # all the job's GPUs, one of which a step holds


def test_gpus_per_task_and_too_many(h: Harness) -> None:
    a = running_job(h, batch=False, gpus_per_node=4, num_tasks=2)
    s1 = add_step(h, a, ntasks=2, gpus_per_task=1)
    assert len(s1.gpus[s1.nodes[0]]) == 2
    from corral.controller.state import SlurmError

    with pytest.raises(SlurmError, match="Requested node configuration is not available"):
        add_step(h, a, gpus_per_node=5)


def test_a_node_failing_while_the_job_waits_does_not_change_how_it_ends(h: Harness) -> None:
    a = running_job(h, requeue=False)
    st = add_step(h, a)
    h.call(h.ctl.requeue, h.who(), [h.job(a)], False)
    h.end(a, "REQUEUED", signal=15)
    assert h.job(a).state == JobState.COMPLETING
    h.silent.add(st.nodes[0])
    h.advance(31)  # the step's node stops responding: the step is given up, not the requeue
    assert h.job(a).state in (JobState.PENDING, JobState.RUNNING)
    assert h.job(a).restart_count == 1


def test_a_requeue_asked_while_the_job_waits_for_its_steps_wins(h: Harness) -> None:
    a = running_job(h)
    st = add_step(h, a)
    h.end(a, "COMPLETED")
    assert h.job(a).state == JobState.COMPLETING
    h.call(h.ctl.requeue, h.who(), [h.job(a)], False)
    task_ended(h, st)
    assert h.job(a).state == JobState.PENDING and h.job(a).restart_count == 1


def test_an_exclusive_jobs_implicit_gpus_are_not_given_to_steps_by_default(h: Harness) -> None:
    a = running_job(h, batch=False, exclusive=True)
    assert len(h.job(a).alloc[0].gpus) == 4  # the whole node, GPUs included
    st = add_step(h, a)
    assert st.gpus[st.nodes[0]] == []
    assert len(add_step(h, a, gpus_per_node=2).gpus[st.nodes[0]]) == 2
