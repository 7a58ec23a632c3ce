"""Accounting policy in the controller (harness: in process, injected clock): association
and QoS limits counted inside the pass with Slurm's reasons, submit-time refusals with
Slurm's messages, AccountingStorageEnforce, and fairshare in priority/multifactor."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.controller.accounts import Caller
from corral.controller.errors import SlurmError
from corral.controller.harness import Harness
from corral.model.job import JobState
from corral.store.memory import MemoryStore

BASE = """\
ClusterName=t
PriorityWeightAge=0
PriorityWeightPartition=0
NodeName=n[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=n[1-2] Default=YES
"""
ROOT = Caller("root", True)


def sacctmgr(h: Harness, op: str, entity: str, names: list[str] | None = None,
             where: dict[str, str] | None = None, sets: dict[str, str] | None = None) -> str:
    return h.ctl.accounts.execute(ROOT, {"op": op, "entity": entity, "names": names or [],
                                         "where": where or {}, "set": sets or {},
                                         "options": {}}).out


def lab(h: Harness) -> None:
    sacctmgr(h, "add", "account", ["lab"])
    sacctmgr(h, "add", "user", ["user1000", "user1001"], {"account": "lab"})


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(BASE + "AccountingStorageEnforce=associations,limits\n") as harness:
        lab(harness)
        yield harness


def state(h: Harness, job_id: int) -> JobState:
    return h.job(job_id).state


def test_grp_gres_counts_starts_of_the_same_pass_and_frees_on_end(h: Harness) -> None:
    sacctmgr(h, "modify", "user", where={"names": "user1000"}, sets={"GrpTRES": "gres/gpu=2"})
    a = [h.submit(uid=1000, gpus=1) for _ in range(3)]
    b = h.submit(uid=1001, gpus=1)
    h.tick()
    assert [state(h, j) for j in a] == [JobState.RUNNING, JobState.RUNNING, JobState.PENDING]
    assert h.job(a[2]).reason == "AssocGrpGRES"
    assert "GrpTRES gres/gpu" in h.ctl.pending_reasons[a[2]].explain()
    assert state(h, b) == JobState.RUNNING  # another user's job is not held back
    h.end(a[0])
    h.tick()
    assert state(h, a[2]) == JobState.RUNNING  # starts as soon as the limit allows


def test_max_jobs_and_qos_limits_have_slurms_reasons(h: Harness) -> None:
    sacctmgr(h, "modify", "user", where={"names": "user1001"}, sets={"MaxJobs": "1"})
    x = [h.submit(uid=1001) for _ in range(2)]
    h.tick()
    assert state(h, x[0]) == JobState.RUNNING and h.job(x[1]).reason == "AssocMaxJobsLimit"
    sacctmgr(h, "add", "qos", ["small"], {"MaxJobsPerUser": "1"})
    sacctmgr(h, "modify", "user", where={"names": "user1000"}, sets={"QOS": "normal,small"})
    y = [h.submit(uid=1000, qos="small") for _ in range(2)]
    h.tick()
    assert state(h, y[0]) == JobState.RUNNING
    assert h.job(y[1]).reason == "QOSMaxJobsPerUserLimit"


def test_submit_limit_and_unknown_user_account_qos_are_refused(h: Harness) -> None:
    sacctmgr(h, "modify", "user", where={"names": "user1001"}, sets={"MaxSubmitJobs": "2"})
    h.submit(uid=1001, held="user")
    h.submit(uid=1001, held="user")
    with pytest.raises(SlurmError) as e:
        h.submit(uid=1001)
    assert e.value.errno == 2050 and str(e.value) == (
        "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)")
    with pytest.raises(SlurmError) as e:
        h.submit(uid=1002)  # no association
    assert e.value.errno == 2045
    assert str(e.value) == "Invalid account or account/partition combination specified"
    with pytest.raises(SlurmError) as e:
        h.submit(uid=1000, account="other")
    assert e.value.errno == 2045
    sacctmgr(h, "add", "qos", ["high"])
    with pytest.raises(SlurmError) as e:
        h.submit(uid=1000, qos="high")  # not in the association's QOS list
    assert str(e.value) == "Invalid qos specification"
    j = h.submit(uid=1000)
    assert h.job(j).account == "lab" and h.job(j).qos == "normal"


def test_nothing_enforced_by_default() -> None:
    with Harness(BASE) as h:
        lab(h)
        sacctmgr(h, "modify", "user", where={"names": "user1000"},
                 sets={"GrpTRES": "gres/gpu=1"})
        a = [h.submit(uid=1000, gpus=1) for _ in range(2)]
        other = h.submit(uid=1002)  # no association: accepted, account = user name
        h.tick()
        assert all(state(h, j) == JobState.RUNNING for j in [*a, other])
        assert h.job(a[0]).account == "lab" and h.job(other).account == "user1002"


def test_fairshare_puts_the_user_who_used_the_gpus_behind() -> None:
    store = MemoryStore()
    conf = BASE + "PriorityWeightFairshare=10000\nAccountingStorageEnforce=associations\n"
    with Harness(conf, store=store) as h:
        lab(h)
        hog = h.submit(uid=1000, gpus=2, num_nodes=2)
        h.tick()
        assert state(h, hog) == JobState.RUNNING
        h.clock.advance(3600)
        h.end(hog)
        blocker = h.submit(uid=0, num_nodes=2, exclusive=True)
        h.tick()
        assert state(h, blocker) == JobState.RUNNING
        first = h.submit(uid=1000)
        second = h.submit(uid=1001)
        h.advance(1)  # a tick: a pass, and the periodic duties that persist usage
        assert h.job(second).priority > h.job(first).priority
        assert store.load_usage_state()  # persisted
        now = h.clock()
    with Harness(conf, store=store, now=now) as h2:  # usage survives a restart
        h2.tick()
        assert h2.job(second).priority > h2.job(first).priority


def test_grp_submit_jobs_on_the_account_counts_every_user_below_it(h: Harness) -> None:
    sacctmgr(h, "modify", "account", where={"names": "lab"}, sets={"GrpSubmitJobs": "2"})
    h.submit(uid=1000, held="user")
    h.submit(uid=1001, held="user")
    with pytest.raises(SlurmError) as e:
        h.submit(uid=1000)
    assert e.value.errno == 2050


def test_tres_weight_makes_gpus_count_and_sprio_components_add_up() -> None:
    from corral.sched.priority import components

    conf = BASE.replace("PriorityWeightAge=0", "PriorityWeightAge=0\nPriorityWeightTRES=GRES/gpu=4000"
                        "\nPriorityWeightJobSize=1000\nPriorityFavorSmall=YES")
    with Harness(conf) as h:
        big = h.submit(gpus=4, num_nodes=2, held="user")
        small = h.submit(held="user")
        p = h.ctl.sched_params.priority
        jb, js = h.job(big), h.job(small)
        jb.held = js.held = None
        cb = components(jb, h.clock(), p, h.ctl.partitions)
        cs = components(js, h.clock(), p, h.ctl.partitions)
        assert cb.tres == {"gres/gpu": 1.0} and cs.tres == {"gres/gpu": 0.0}
        assert cs.job_size > cb.job_size  # PriorityFavorSmall
        assert cb.priority == int(4000 * 1.0 + 1000 * cb.job_size)
        assert cb.priority > cs.priority  # the GPUs weigh more than the size


def test_qos_priority_weighs_with_priority_weight_qos() -> None:
    conf = BASE.replace("PriorityWeightAge=0", "PriorityWeightAge=0\nPriorityWeightQOS=1000")
    with Harness(conf) as h:
        lab(h)
        sacctmgr(h, "add", "qos", ["high"], {"Priority": "100"})
        sacctmgr(h, "add", "qos", ["low"], {"Priority": "25"})
        sacctmgr(h, "modify", "user", where={"names": "user1000"},
                 sets={"QOS": "normal,high,low"})
        hi = h.submit(uid=1000, qos="high", begin_time=h.clock() + 3600)
        lo = h.submit(uid=1000, qos="low", begin_time=h.clock() + 3600)
        h.tick()
        assert (h.job(hi).priority, h.job(lo).priority) == (1000, 250)


def test_oversubscribe_exclusive_partition_gives_whole_nodes() -> None:
    conf = BASE.replace("Default=YES", "Default=YES OverSubscribe=EXCLUSIVE")
    with Harness(conf) as h:
        a, b = h.submit(), h.submit()
        h.tick()
        assert h.job(a).exclusive and h.job(a).nodes != h.job(b).nodes


def test_job_submitted_to_two_partitions_starts_where_it_can_first() -> None:
    conf = BASE.replace("PartitionName=debug Nodes=n[1-2] Default=YES",
                        "PartitionName=a Nodes=n1 Default=YES\nPartitionName=b Nodes=n2")
    with Harness(conf) as h:
        fill_a = h.submit(partition="a", exclusive=True)
        fill_b = h.submit(partition="b", exclusive=True)
        h.tick()
        both = h.submit(partition="a,b", exclusive=True)
        array = h.submit(partition="b,a", array="1-2", exclusive=True)
        h.tick()
        assert h.job(both).state == JobState.PENDING and h.job(both).partition == "a,b"
        assert h.job(both).reason not in ("None", "")
        h.end(fill_b)
        h.tick()
        assert h.job(both).state == JobState.RUNNING and h.job(both).partition == "b"
        h.end(fill_a)
        h.tick()
        started = [j for j in h.ctl.jobs.values() if j.array_job_id == array
                   and j.state == JobState.RUNNING]
        assert [j.partition for j in started] == ["a"]  # one task, in the free partition
        assert h.ctl.jobs[array].state == JobState.PENDING
    with Harness(conf) as h2, pytest.raises(SlurmError):
        h2.submit(partition="a,nosuch")


def test_association_priority_weighs_with_priority_weight_assoc() -> None:
    conf = BASE.replace("PriorityWeightAge=0", "PriorityWeightAge=0\nPriorityWeightAssoc=1000")
    with Harness(conf) as h:
        lab(h)
        sacctmgr(h, "add", "account", ["other"])
        sacctmgr(h, "add", "user", ["user1001"], {"account": "other"})
        sacctmgr(h, "modify", "account", where={"names": "lab"}, sets={"Priority": "40"})
        sacctmgr(h, "modify", "user", where={"names": "user1001", "account": "other"},
                 sets={"Priority": "10"})
        a = h.submit(uid=1000, begin_time=h.clock() + 3600)  # inherits lab's 40
        b = h.submit(uid=1001, account="other", begin_time=h.clock() + 3600)
        h.tick()
        assert (h.job(a).priority, h.job(b).priority) == (1000, 250)


def test_partition_min_nodes_holds_smaller_jobs() -> None:
    conf = BASE.replace("Default=YES", "Default=YES MinNodes=2")
    with Harness(conf) as h:
        small, big = h.submit(), h.submit(num_nodes=2)
        h.tick()
        assert h.job(small).reason == "PartitionNodeLimit"
        assert h.job(big).state == JobState.RUNNING


def test_grp_tres_mins_on_the_account_counts_its_users_decayed_usage(h: Harness) -> None:
    sacctmgr(h, "modify", "account", where={"names": "lab"}, sets={"GrpTRESMins": "cpu=60"})
    first = h.submit(uid=1000, num_tasks=2)
    h.tick()
    h.clock.advance(3600)  # 2 CPUs for an hour: 120 CPU-minutes, over the account's 60
    h.end(first)
    late = h.submit(uid=1001)
    h.tick()
    assert h.job(late).reason == "AssocGrpCPUMinutesLimit"
