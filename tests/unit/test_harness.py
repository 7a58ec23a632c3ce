"""The controller in process (controller/harness.py): eligibility, priority aging,
dependencies, requeue, arrays, node failure, partition states, agent reports, limits.
Each test runs in milliseconds: injected clock, in-memory store, fake agents."""

from __future__ import annotations

import os
import stat
import time

import pytest

from corral.controller.errors import (
    ESLURM_INVALID_JOB_ID,
    ESLURM_PARTITION_NOT_AVAIL,
    ESLURM_PATHNAME_TOO_LONG,
    SlurmError,
)
from corral.controller.harness import Harness
from corral.controller.jobs import JobEvent, JobEventKind
from corral.model.job import JobState
from corral.model.reasons import ReasonCode
from corral.store.memory import MemoryStore
from corral.store.sqlite import SqliteStore

CONF = """\
ClusterName=t
SlurmdTimeout=30
MinJobAge=60
PriorityWeightAge=1000
PriorityMaxAge=1-0
PriorityWeightPartition=1000
NodeName=n[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=n[1-2] Default=YES
"""


@pytest.fixture
def h() -> Harness:
    with Harness(CONF) as harness:
        yield harness


def state(h: Harness, job_id: int) -> JobState:
    return h.job(job_id).state


# ---- eligibility ------------------------------------------------------------------------

def test_hold_and_begin_time(h: Harness) -> None:
    held = h.submit(held="user")
    later = h.submit(begin_time=h.clock() + 600)
    h.tick()
    assert h.job(held).reason == "JobHeldUser" and h.job(held).priority == 0
    assert h.job(later).reason == "BeginTime" and state(h, later) == JobState.PENDING
    h.advance(601)
    assert state(h, later) == JobState.RUNNING
    h.call(h.ctl.release, h.who(), [h.job(held)])
    h.tick()
    assert state(h, held) == JobState.RUNNING


def test_resources_reason_is_typed(h: Harness) -> None:
    a = h.submit(cpus_per_task=4, num_tasks=2, num_nodes=2)
    b = h.submit(cpus_per_task=1, gpus_per_node=2)
    h.tick()
    assert state(h, a) == JobState.RUNNING
    assert h.job(b).reason == "Resources"
    why = h.ctl.pending_reasons[b]
    assert why.code is ReasonCode.RESOURCES
    assert dict(why.requested)["cpus"] == 1 and dict(why.available)["cpus"] == 0
    assert "needs 1 CPUs on one node; the most free on any node is 0" == why.explain()


# ---- priority ---------------------------------------------------------------------------

def test_priority_ages_and_order_follows_it(h: Harness) -> None:
    blocker = h.submit(num_nodes=2, num_tasks=8, time_limit=86400)
    h.tick()
    assert state(h, blocker) == JobState.RUNNING
    old = h.submit(nice=300, num_nodes=2, num_tasks=8)
    h.tick()
    assert h.job(old).priority == 1000 - 300  # partition factor only: no age yet
    h.advance(12 * 3600)
    assert h.job(old).priority == 1000 + 500 - 300  # half of PriorityMaxAge=1-0
    new = h.submit(num_nodes=2, num_tasks=8)
    h.tick()
    assert h.job(new).priority == 1000
    assert h.job(old).reason == "Resources" and h.job(new).reason == "Priority"
    h.advance(12 * 3600)
    assert h.job(old).priority == 1000 + 1000 - 300  # capped at PriorityMaxAge
    h.end(blocker)
    h.tick()
    assert state(h, old) == JobState.RUNNING and state(h, new) == JobState.PENDING


# ---- partition states -------------------------------------------------------------------

def test_drain_partition_refuses_new_jobs_and_runs_queued(h: Harness) -> None:
    busy = h.submit(num_nodes=2, num_tasks=8)
    queued = h.submit(num_nodes=2, num_tasks=8)
    h.tick()
    h.ctl.partitions["debug"].state = "DRAIN"
    with pytest.raises(SlurmError) as e:
        h.submit()
    assert e.value.errno == ESLURM_PARTITION_NOT_AVAIL == 2070
    assert e.value.message == "Required partition not available (inactive or drain)"
    h.end(busy)
    h.tick()
    assert state(h, queued) == JobState.RUNNING


def test_inactive_refuses_and_starts_none_down_queues_and_starts_none(h: Harness) -> None:
    queued = h.submit()
    part = h.ctl.partitions["debug"]
    part.state = "INACTIVE"
    h.tick()
    assert state(h, queued) == JobState.PENDING and h.job(queued).reason == "PartitionInactive"
    with pytest.raises(SlurmError) as e:
        h.submit()
    assert e.value.errno == ESLURM_PARTITION_NOT_AVAIL
    part.state = "DOWN"
    more = h.submit()
    h.tick()
    for j in (queued, more):
        assert state(h, j) == JobState.PENDING and h.job(j).reason == "PartitionDown"
    part.state = "UP"
    h.tick()
    assert state(h, queued) == state(h, more) == JobState.RUNNING


# ---- dependencies -----------------------------------------------------------------------

class CountingStore(MemoryStore):
    queries = 0

    def query_jobs(self, **filters: object) -> list:  # type: ignore[override]
        self.queries += 1
        return super().query_jobs(**filters)  # type: ignore[arg-type]


def test_dependency_on_job_long_gone_needs_no_store_in_passes() -> None:
    store = CountingStore()
    with Harness(CONF, store=store) as h:
        ok = h.submit()
        bad = h.submit()
        h.tick()
        h.end(ok, "COMPLETED")
        h.end(bad, "FAILED", exit_code=1)
        waits = h.submit(dependency=f"afterok:{ok}", begin_time=h.clock() + 3600)
        never = h.submit(dependency=f"afterok:{bad}", begin_time=h.clock() + 3600)
        h.advance(120)  # both finished jobs expire from memory (MinJobAge=60)
        assert ok not in h.ctl.jobs and bad not in h.ctl.jobs
        before = store.queries
        h.advance(3600)
        for _ in range(5):
            h.tick()
        assert store.queries == before  # no store access in any pass
        assert state(h, waits) == JobState.RUNNING
        assert h.job(never).reason == "DependencyNeverSatisfied"
        now = h.clock()
    # after a restart the store is read once, at recovery, not in passes
    with Harness(CONF, store=store, now=now) as h2:
        before = store.queries
        for _ in range(3):
            h2.tick()
        assert store.queries == before
        assert h2.job(never).reason == "DependencyNeverSatisfied"


def test_dependency_chain_and_unknown_job(h: Harness) -> None:
    a = h.submit()
    b = h.submit(dependency=f"afterok:{a}")
    c = h.submit(dependency="afterany:999999")  # never existed: lifted, as in Slurm
    h.tick()
    assert h.job(b).reason == "Dependency" and state(h, c) == JobState.RUNNING
    h.end(a)
    h.tick()
    assert state(h, b) == JobState.RUNNING


# ---- requeue, arrays, node failure ------------------------------------------------------

def test_requeue_runs_again(h: Harness) -> None:
    a = h.submit()
    h.tick()
    h.call(h.ctl.requeue, h.who(), [h.job(a)], False)
    assert state(h, a) == JobState.COMPLETING and h.controls(a) == ["requeue"]
    h.end(a, "REQUEUED", signal=15)  # what the step supervisor reports
    assert state(h, a) == JobState.PENDING and h.job(a).reason == "BeginTime"
    h.advance(2)
    assert state(h, a) == JobState.RUNNING and h.job(a).restart_count == 1
    assert h.launched() == [a, a]
    h.end(a, "REQUEUED")  # a job cannot requeue itself by writing its status
    assert state(h, a) == JobState.FAILED


def test_array_throttle_and_tasks_split_as_they_start(h: Harness) -> None:
    arr = h.submit(array="0-5%2")
    h.tick()
    running = [j for j in h.ctl.running.values() if j.array_job_id == arr]
    assert sorted(j.array_task_id for j in running) == [0, 1]  # type: ignore[type-var]
    assert h.job(arr).reason == "JobArrayTaskLimit" and h.job(arr).array_tasks == [2, 3, 4, 5]
    h.end(running[0].job_id)
    h.tick()
    assert h.job(arr).array_tasks == [3, 4, 5]
    free = h.submit(array="0-3")  # no throttle: all four start in one pass
    dec = h.call(h.ctl.schedule_pass, h.clock())
    assert dec is not None
    assert len([s for s in dec.starts if s.job_id == free]) == 4
    assert h.job(free).array_task_id == 3  # the last task keeps the array's job id


def test_node_failure_requeues_or_fails(h: Harness) -> None:
    requeued = h.submit(num_tasks=4)
    failed = h.submit(num_tasks=4, requeue=False)
    h.tick()
    assert {h.job(requeued).batch_host, h.job(failed).batch_host} == {"n1", "n2"}
    h.silent.update({"n1", "n2"})
    h.advance(20)
    assert state(h, requeued) == state(h, failed) == JobState.RUNNING  # within SlurmdTimeout
    h.advance(11)
    assert state(h, failed) == JobState.NODE_FAIL
    assert state(h, requeued) == JobState.PENDING and h.job(requeued).restart_count == 1
    assert all(not n.responding and n.alloc_cpus == 0 and n.job_count == 0
               for n in h.ctl.nodes.values())
    h.silent.clear()
    h.register(["n1", "n2"])
    h.advance(2)
    assert state(h, requeued) == JobState.RUNNING


# ---- agent reports (issue 7) ------------------------------------------------------------

def test_bad_end_reports_are_refused_alone(h: Harness) -> None:
    a = h.submit(num_tasks=2)
    h.tick()
    node = h.ctl.nodes[h.job(a).batch_host or ""]
    assert node.free_cpus == 2
    for ev in ({"job_id": a, "state": "BOGUS"}, {"job_id": a, "state": "COMPLETED", "exit_code": "x"},
               {"job_id": 424242, "state": "COMPLETED"}, {"state": "COMPLETED"}, "junk"):
        assert h.call(h.ctl.agent_job_ended, ev, [node.name]) is None
    other = "n2" if node.name == "n1" else "n1"
    assert h.end(a, node=other) is None  # not on that agent's node
    assert state(h, a) == JobState.RUNNING and node.free_cpus == 2
    assert h.end(a) is not None and state(h, a) == JobState.COMPLETED
    for _ in range(3):  # duplicates change nothing
        assert h.end(a) is None
        assert h.ctl.job_ended(a, "COMPLETED", 0, 0, h.clock()) is h.job(a)
    assert node.free_cpus == 4 and node.alloc_cpus == 0 and node.job_count == 0
    assert all(n.free_cpus >= 0 for n in h.ctl.nodes.values())


def test_array_range_capped_by_max_array_size_before_enumeration(h: Harness) -> None:
    t0 = time.perf_counter()
    with pytest.raises(SlurmError) as e:
        h.ctl.find_jobs("1_[0-2147483646]", split=True)
    assert e.value.errno == ESLURM_INVALID_JOB_ID
    assert time.perf_counter() - t0 < 5  # enumerating 2^31 ids would take minutes
    arr = h.submit(array="0-3", held="user")
    assert len(h.call(h.ctl.find_jobs, f"{arr}_[1-2]", split=True)) == 2


def test_script_size_limit_configurable() -> None:
    with Harness(CONF + "SchedulerParameters=max_script_size=100\n") as h:
        with pytest.raises(SlurmError) as e:
            h.submit(script="#!/bin/sh\n" + "é" * 50)  # 110 bytes in UTF-8
        assert e.value.errno == ESLURM_PATHNAME_TOO_LONG == 2012
        assert e.value.message == "Pathname of a file, directory or other parameter too long"
        h.submit(script="#!/bin/sh\n" + "e" * 80)
    with Harness(CONF) as h:
        with pytest.raises(SlurmError):
            h.submit(script="#" * (4 * 1024 * 1024 + 1))
        h.submit(script="#" * (4 * 1024 * 1024))


def test_store_files_are_private(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "state.db")
    old = os.umask(0)
    try:
        with open(path, "w"):
            pass
        os.chmod(path, 0o644)
        store = SqliteStore(path)
        store.write(__import__("corral.store.base", fromlist=["WriteBatch"]).WriteBatch(next_job_id=5))
        for p in (path, path + "-wal", path + "-shm"):
            if os.path.exists(p):
                assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p
        store.close()
    finally:
        os.umask(old)


# ---- the state machine's events ---------------------------------------------------------

def test_every_transition_emits_one_typed_event(h: Harness) -> None:
    seen: list[JobEvent] = []
    h.ctl.table.subscribe(seen.append)
    legacy: list[tuple[str, int]] = []
    h.ctl.listeners.append(lambda ev, job: legacy.append((ev, job.job_id)))
    a = h.submit()
    h.tick()
    h.call(h.ctl.signal_jobs, h.who(), [h.job(a)], 15, batch_only=False, cancel=True)
    h.end(a, "CANCELLED", signal=15)
    assert [(e.kind, e.old, e.new) for e in seen] == [
        (JobEventKind.SUBMITTED, None, JobState.PENDING),
        (JobEventKind.STARTED, JobState.PENDING, JobState.RUNNING),
        (JobEventKind.ENDING, JobState.RUNNING, JobState.COMPLETING),
        (JobEventKind.ENDED, JobState.COMPLETING, JobState.CANCELLED),
    ]
    assert legacy == [("submitted", a), ("started", a), ("ending", a), ("ended", a)]


def test_memory_store_answers_like_sqlite(tmp_path: object) -> None:
    from corral.model.job import Job
    from corral.store.base import JobPayload, NodeRecord, WriteBatch

    jobs = [Job(job_id=i, name=f"j{i}", user="u", uid=1000 + i % 2, gid=1,
                state=[JobState.PENDING, JobState.RUNNING, JobState.COMPLETED][i % 3],
                submit_time=100.0 + i, end_time=200.0 + i if i % 3 == 2 else None,
                array_job_id=4 if i in (4, 5) else None) for i in range(1, 9)]
    batch = WriteBatch(jobs=jobs, payloads=[(1, JobPayload("s", {"A": "1"}))],
                       nodes=[NodeRecord("n1", "drain", "why", "root", 0, 5.0)], next_job_id=20)
    sql = SqliteStore(os.path.join(str(tmp_path), "s.db"))
    mem = MemoryStore()
    for store in (sql, mem):
        store.write(batch)
    try:
        for q in ({}, {"ids": [4], "array_ids": [4]}, {"uids": [1000]}, {"states": ["COMPLETED"]},
                  {"start": 204.0}, {"end": 103.0}, {"limit": 2}):
            assert [j for j, _ in mem.query_records(**q)] == [j for j, _ in sql.query_records(**q)], q  # type: ignore[arg-type]
        assert [j.job_id for j in mem.load_active_jobs()] == [j.job_id for j in sql.load_active_jobs()]
        assert [j.job_id for j in mem.load_recent_finished(204.0)] == \
            [j.job_id for j in sql.load_recent_finished(204.0)]
        assert mem.load_payload(1) == sql.load_payload(1) and mem.load_payload(2) is None
        assert mem.load_nodes() == sql.load_nodes() and mem.next_job_id() == sql.next_job_id() == 20
    finally:
        sql.close()


def test_controller_log_has_one_line_per_job_and_node_event(
        h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="corral.controller.events")
    a = h.submit()
    h.tick()
    h.end(a, "FAILED", exit_code=3)
    h.call(h.ctl.update_nodes, h.who(0), ["n2"], "drain", "disk full")
    h.call(h.ctl.update_nodes, h.who(0), ["n2"], "resume", None)
    h.silent.add("n1")
    h.advance(31)
    h.advance(31)  # still silent: not logged again
    lines = [r.getMessage() for r in caplog.records if r.name == "corral.controller.events"]
    assert lines == [
        f"job {a} submitted by user1000 (uid 1000) to partition debug",
        f"job {a} started on n1",
        f"job {a} ended FAILED exit 3:0",
        "node n2 drained: disk full",
        "node n2 resumed",
        "node n1 not responding",
    ]


def test_state_machine_refuses_impossible_transitions(h: Harness) -> None:
    from corral.controller.jobs import TransitionError

    a = h.submit()
    h.tick()
    h.end(a)
    job = h.job(a)
    for bad in (JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED):
        with pytest.raises(TransitionError):
            h.ctl.set_state(job, bad, h.clock())
    assert job.state == JobState.COMPLETED and a not in h.ctl.running


def test_job_id_ranges_select_tasks_without_enumerating(h: Harness) -> None:
    from corral.controller.core import task_ranges

    assert task_ranges("1-5,7,10-20:5", 1001) == [(1, 5, 1), (7, 7, 1), (10, 20, 5)]
    for bad in ("", "5-1", "1-2000", "x", "1-3:0", "1-", "-3", "0-2147483646"):
        with pytest.raises(SlurmError):
            task_ranges(bad, 1001)
    arr = h.submit(array="0-9", held="user")
    picked = h.call(h.ctl.find_jobs, f"{arr}_[0-8:4]", split=True)
    assert sorted(j.array_task_id for j in picked) == [0, 4, 8]  # type: ignore[type-var]
    assert h.job(arr).array_tasks == [1, 2, 3, 5, 6, 7, 9]
    assert [j.job_id for j in h.ctl.find_jobs(f"{arr}_[0-1000]")] != []


def test_one_job_spec_field_list() -> None:
    from dataclasses import fields

    from corral.model.job import Job
    from corral.model.jobspec import FIELD_NAMES, JobSpecError, validate_spec

    assert FIELD_NAMES <= {f.name for f in fields(Job)}  # every field is a job attribute
    assert validate_spec({"name": "x", "num_nodes": 2.0, "req_nodes": "n[1-2]", "held": None,
                          "nice": -5, "time_limit": -1}) == \
        {"name": "x", "num_nodes": 2, "req_nodes": ["n1", "n2"], "nice": -5, "time_limit": -1}
    for bad in ({"bogus": 1}, {"num_nodes": "2"}, {"num_nodes": True}, {"cpus_per_task": -1},
                {"held": "maybe"}, {"req_nodes": "n[1-"}, {"comment": 5}):
        with pytest.raises(JobSpecError) as e:
            validate_spec(bad)
        assert not e.value.too_long
    with pytest.raises(JobSpecError) as e:
        validate_spec({"comment": "c" * 1025})
    assert e.value.too_long
    validate_spec({"comment": "c" * 1024, "work_dir": "/" + "d" * 4000})


def test_too_long_fields_refused_as_slurm_does(h: Harness) -> None:
    for spec in ({"name": "n" * 10_000}, {"comment": "c" * 10_000}, {"stdout": "/" + "o" * 5000}):
        with pytest.raises(SlurmError) as e:
            h.submit(**spec)
        assert e.value.errno == ESLURM_PATHNAME_TOO_LONG
    assert h.ctl.jobs == {}


def test_config_names_settings_not_acted_on() -> None:
    from corral.model.config import parse_config

    assert parse_config(CONF).inert_settings() == []
    cfg = parse_config(CONF.replace("Default=YES", "Default=YES AllowGroups=wheel")
                       + "Prolog=/etc/prolog\nHealthCheckProgram=/bin/true\n"
                       + "PrologSlurmctld=/etc/ctld_prolog\nPreemptMode=GANG\n")
    # AllowGroups is enforced now (test_partition_access)
    # Prolog, PrologSlurmctld and health checks are acted on (controller.prolog,
    # controller.ctld_scripts, controller.health); gang scheduling's time-slicing is not
    assert cfg.inert_settings() == ["PreemptMode=GANG"]


# ---- idempotent submission ----------------------------------------------------------------

def test_submission_resent_with_its_submit_id_returns_the_same_job() -> None:
    store = MemoryStore()
    with Harness(CONF, store=store) as h:
        a = h.submit(submit_id="ab" * 16, held="user")
        assert h.submit(submit_id="ab" * 16, held="user") == a  # the answer was lost: resent
        assert h.submit(uid=1001, submit_id="ab" * 16, held="user") != a  # per user
        other = h.submit(submit_id="cd" * 16, held="user")
        assert other != a
        count = len(h.ctl.jobs)
        now = h.clock()
    # a controller restarted after committing the job knows the id from the job record
    with Harness(CONF, store=store, now=now) as h2:
        assert h2.submit(submit_id="ab" * 16, held="user") == a
        assert len(h2.ctl.jobs) == count
        assert h2.submit(submit_id="ef" * 16, held="user") not in (a, other)


def test_a_jobs_account_is_lower_cased_as_slurm_does() -> None:
    with Harness(CONF) as h:
        job = h.submit(account="LabA")
        assert h.job(job).account == "laba"
