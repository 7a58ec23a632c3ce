"""Node features and --constraint (sched.features, honoured by select and backfill),
partition access, -n without -N, priority/top/notify/reconfigure, and the job record's
derived fields, through the controller in process (controller/harness.py)."""

from __future__ import annotations

import pytest

from corral.controller.errors import (
    ESLURM_ACCESS_DENIED,
    ESLURM_INVALID_ACCOUNT,
    ESLURM_INVALID_FEATURE,
    ESLURM_INVALID_GRES,
    ESLURM_INVALID_QOS,
    ESLURM_JOB_MISSING_REQUIRED_PARTITION_GROUP,
    ESLURM_PRIO_RESET_FAIL,
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
    ESLURM_USER_ID_MISSING,
    SlurmError,
)
from corral.controller.harness import Harness
from corral.controller.identity import group_name
from corral.model.job import JobState
from corral.sched.features import ConstraintError, parse_constraint, satisfiable

CONF = """\
ClusterName=t
MinJobAge=60
NodeName=a[1-2] CPUs=16 RealMemory=16000 Feature=intel,ib
NodeName=b[1-2] CPUs=16 RealMemory=16000 Features=amd,ib Gres=gpu:v100:2
NodeName=c1 CPUs=16 RealMemory=16000 Feature=amd
PartitionName=debug Nodes=a[1-2],b[1-2],c1 Default=YES
"""


@pytest.fixture
def h() -> Harness:
    with Harness(CONF) as harness:
        yield harness


def nodes_of(h: Harness, job_id: int) -> list[str]:
    return sorted(h.job(job_id).nodes)


# ---- the grammar ---------------------------------------------------------------------

def test_constraint_grammar() -> None:
    c = parse_constraint("intel&ib")
    assert [a.node_ok({"intel", "ib"}) for a in c.alternatives] == [True]
    assert not c.node_may({"intel"})
    assert parse_constraint("intel|amd").node_may({"amd"})
    assert parse_constraint("intel,ib").node_may({"intel", "ib"})
    assert len(parse_constraint("[intel|amd]").alternatives) == 2
    assert parse_constraint("(intel|amd)&ib").node_may({"amd", "ib"})
    assert not parse_constraint("(intel|amd)&ib").node_may({"amd"})
    counted = parse_constraint("intel*1&amd*2").alternatives[0]
    assert counted.counts == (("intel", 1), ("amd", 2))
    for bad in ("", "a&", "&a", "a||b", "[a|b", "a)", "a*0", "a*x", "[a|[b]]", "[a]&[b]"):
        with pytest.raises(ConstraintError):
            parse_constraint(bad)
    nodes = [{"intel", "ib"}, {"amd"}]
    assert satisfiable(parse_constraint("amd"), nodes)
    assert not satisfiable(parse_constraint("arm"), nodes)
    assert not satisfiable(parse_constraint("amd*2"), nodes)


# ---- features in scheduling ----------------------------------------------------------

def test_constraint_picks_matching_nodes(h: Harness) -> None:
    a = h.submit(num_nodes=1, constraint="intel")
    b = h.submit(num_nodes=2, constraint="amd&ib")
    c = h.submit(num_nodes=1, constraint="amd&!ib".replace("&!ib", "") + "|intel")
    h.tick()
    assert nodes_of(h, a)[0].startswith("a")
    assert nodes_of(h, b) == ["b1", "b2"]
    assert h.job(c).state == JobState.RUNNING


def test_matching_or_puts_every_node_on_one_feature(h: Harness) -> None:
    # three amd nodes exist (b1, b2, c1) but only two intel: 3 nodes must all be amd
    j = h.submit(num_nodes=3, constraint="[intel|amd]")
    h.tick()
    assert nodes_of(h, j) == ["b1", "b2", "c1"]
    k = h.submit(num_nodes=2, constraint="[intel|amd]")
    h.tick()
    assert nodes_of(h, k) == ["a1", "a2"]


def test_counted_features(h: Harness) -> None:
    j = h.submit(num_nodes=3, constraint="intel*1&amd*2")
    h.tick()
    names = nodes_of(h, j)
    assert len(names) == 3
    assert sum(n.startswith("a") for n in names) >= 1
    assert sum(not n.startswith("a") for n in names) >= 2


def test_unknown_feature_refused_and_bad_syntax_refused(h: Harness) -> None:
    for bad in ("arm", "intel&amd*5", "a&", "[x|y"):
        with pytest.raises(SlurmError) as e:
            h.submit(constraint=bad)
        assert e.value.errno == ESLURM_INVALID_FEATURE
        assert e.value.message == "Invalid feature specification"
    # features that exist but never together on one node: no node configuration fits
    with pytest.raises(SlurmError) as e:
        h.submit(constraint="intel&amd")
    assert e.value.errno in (ESLURM_INVALID_FEATURE, ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
    assert h.ctl.jobs == {}


def test_constraint_waits_for_matching_nodes_only(h: Harness) -> None:
    big = h.submit(num_nodes=2, num_tasks=32, cpus_per_task=1, constraint="intel")
    h.tick()
    assert nodes_of(h, big) == ["a1", "a2"]
    wait = h.submit(num_nodes=1, constraint="intel")
    other = h.submit(num_nodes=1, constraint="amd")
    h.tick()
    assert h.job(wait).state == JobState.PENDING and h.job(wait).reason == "Resources"
    assert h.job(other).state == JobState.RUNNING
    h.end(big)
    h.tick()
    assert h.job(wait).state == JobState.RUNNING


def test_features_go_away_with_reconfigure_bad_constraints(h: Harness) -> None:
    blocker = h.submit(num_nodes=5, num_tasks=80)
    h.tick()
    j = h.submit(constraint="intel")
    h.tick()
    assert h.job(j).state == JobState.PENDING
    h.call(h.ctl.reconfigure, h.who(0), CONF.replace("Feature=intel,ib", "Feature=ib"))
    h.end(blocker)
    h.tick()
    assert h.job(j).state == JobState.PENDING and h.job(j).reason == "BadConstraints"
    assert h.ctl.nodes["a1"].features == ["ib"]


def test_gpu_type_honoured_and_unknown_type_refused(h: Harness) -> None:
    j = h.submit(gpus_per_node=1, gpu_type="v100")
    h.tick()
    assert nodes_of(h, j)[0].startswith("b")
    with pytest.raises(SlurmError) as e:
        h.submit(gpus_per_node=1, gpu_type="abc")
    assert e.value.errno == ESLURM_INVALID_GRES
    assert e.value.message == "Invalid generic resource (gres) specification"


def test_mincpus_skips_small_nodes() -> None:
    conf = ("NodeName=s1 CPUs=2 RealMemory=1000\nNodeName=l1 CPUs=8 RealMemory=1000\n"
            "PartitionName=p Nodes=s1,l1 Default=YES\n")
    with Harness(conf) as h:
        j = h.submit(num_nodes=1, min_cpus=4)
        h.tick()
        assert nodes_of(h, j) == ["l1"]
        assert h.job(j).to_dict()["min_cpus"] == 4


# ---- -n without -N ---------------------------------------------------------------------

def test_ntasks_without_nodes_spreads(h: Harness) -> None:
    j = h.submit(num_tasks=30)  # no num_nodes: as many 16-CPU nodes as needed
    h.tick()
    assert h.job(j).state == JobState.RUNNING
    assert len(h.job(j).nodes) == 2 and h.job(j).alloc_cpus == 30
    # with -N the count is fixed, as before: 30 tasks on one 16-CPU node never fit
    with pytest.raises(SlurmError):
        h.submit(num_nodes=1, num_tasks=30)
    small = h.submit(num_tasks=4)
    h.tick()
    assert len(h.job(small).nodes) == 1


def test_ntasks_without_nodes_waits_and_plans(h: Harness) -> None:
    full = h.submit(num_nodes=5, num_tasks=80, time_limit=600)
    h.tick()
    j = h.submit(num_tasks=40, time_limit=60)
    h.tick()
    assert h.job(j).state == JobState.PENDING and h.job(j).reason == "Resources"
    assert h.job(j).sched_start is not None
    h.end(full)
    h.tick()
    assert len(h.job(j).nodes) == 3


# ---- partition access --------------------------------------------------------------

def access_conf(extra: str) -> str:
    return CONF.replace("Default=YES", "Default=YES\nPartitionName=p Nodes=c1 " + extra)


@pytest.mark.parametrize("extra,errno,message", [
    ("AllowGroups=nosuchgroup", ESLURM_JOB_MISSING_REQUIRED_PARTITION_GROUP,
     "User's group not permitted to use this partition"),
    ("RootOnly=YES", ESLURM_ACCESS_DENIED, "Access/permission denied"),
    ("AllowAccounts=physics", ESLURM_INVALID_ACCOUNT,
     "Invalid account or account/partition combination specified"),
    ("DenyAccounts=user1000", ESLURM_INVALID_ACCOUNT,
     "Invalid account or account/partition combination specified"),
    ("AllowQos=high", ESLURM_INVALID_QOS, "Invalid qos specification"),
    ("DenyQos=normal", ESLURM_INVALID_QOS, "Invalid qos specification"),
])
def test_partition_access_refused(extra: str, errno: int, message: str) -> None:
    with Harness(access_conf(extra)) as h:
        with pytest.raises(SlurmError) as e:
            h.submit(partition="p")
        assert (e.value.errno, e.value.message) == (errno, message)
        assert h.ctl.jobs == {}
        if errno in (ESLURM_ACCESS_DENIED, ESLURM_JOB_MISSING_REQUIRED_PARTITION_GROUP):
            h.submit(partition="p", uid=0)  # root passes RootOnly and AllowGroups
        # the same check when a pending job is moved there
        j = h.submit(held="user")
        with pytest.raises(SlurmError) as e:
            h.call(h.ctl.update_job, h.who(), h.job(j), {"Partition": "p"})
        assert e.value.errno == errno and h.job(j).partition == "debug"


def test_partition_access_allowed() -> None:
    group = group_name(1000)
    with Harness(access_conf(f"AllowGroups=wheel,{group} AllowAccounts=physics,user1000 "
                             "AllowQos=normal,high DenyQos=low")) as h:
        j = h.submit(partition="p")
        assert h.job(j).partition == "p"
        j = h.submit(partition="p", account="physics", qos="high")
        with pytest.raises(SlurmError):
            h.submit(partition="p", qos="low")
    with Harness(access_conf("Hidden=YES")) as h:
        assert h.ctl.partitions["p"].to_dict()["hidden"] is True


# ---- holds and other users' jobs ---------------------------------------------------------

def test_owner_requeuehold_is_a_user_hold(h: Harness) -> None:
    j = h.submit()
    h.tick()
    h.call(h.ctl.requeue, h.who(), [h.job(j)], True)
    h.end(j, "CANCELLED", signal=15)
    assert h.job(j).held == "user" and h.job(j).reason == "JobHeldUser"
    h.call(h.ctl.release, h.who(), [h.job(j)])
    assert h.job(j).held is None
    h.tick()
    h.advance(2)
    assert h.job(j).state == JobState.RUNNING
    # an operator's requeuehold stays an admin hold
    h.call(h.ctl.requeue, h.who(0), [h.job(j)], True)
    h.end(j, "CANCELLED", signal=15)
    assert h.job(j).held == "admin"
    with pytest.raises(SlurmError):
        h.call(h.ctl.release, h.who(), [h.job(j)])


def test_other_users_job_invalid_user_id(h: Harness) -> None:
    j = h.submit(held="user")
    for fn, args in ((h.ctl.hold, ("uhold",)), (h.ctl.release, ()),):
        with pytest.raises(SlurmError) as e:
            h.call(fn, h.who(2000), [h.job(j)], *args)
        assert (e.value.errno, e.value.message) == (ESLURM_USER_ID_MISSING, "Invalid user id")
    with pytest.raises(SlurmError) as e:
        h.call(h.ctl.update_job, h.who(2000), h.job(j), {"Comment": "x"})
    assert e.value.errno == ESLURM_USER_ID_MISSING
    with pytest.raises(SlurmError) as e:
        h.call(h.ctl.requeue, h.who(2000), [h.job(j)], False)
    assert e.value.errno == ESLURM_ACCESS_DENIED


# ---- priority, start time, top, notify -----------------------------------------------

def test_update_priority_operators_only(h: Harness) -> None:
    blocker = h.submit(num_nodes=5, num_tasks=80)
    h.tick()
    a, b = h.submit(), h.submit()
    h.tick()
    with pytest.raises(SlurmError) as e:
        h.call(h.ctl.update_job, h.who(), h.job(a), {"Priority": 10**6})
    assert e.value.errno == ESLURM_ACCESS_DENIED
    with pytest.raises(SlurmError) as e:
        h.call(h.ctl.update_job, h.who(), h.job(a), {"Priority": 0 + 1})
    assert e.value.errno == ESLURM_PRIO_RESET_FAIL
    h.call(h.ctl.update_job, h.who(0), h.job(b), {"Priority": 10**6})
    # Priority=0 holds
    h.call(h.ctl.update_job, h.who(), h.job(a), {"Priority": 0})
    assert h.job(a).held == "user"
    h.tick()
    assert h.job(b).priority == 10**6
    h.end(blocker)
    h.advance(1)
    assert h.job(b).state == JobState.RUNNING and h.job(b).priority_set == 10**6


def test_submit_priority_operators_only(h: Harness) -> None:
    mine = h.submit(priority=5000, held="user")
    theirs = h.submit(priority=5000, held="user", uid=0)
    assert h.job(mine).priority_set is None and h.job(theirs).priority_set == 5000
    zero = h.submit(priority=0)
    assert h.job(zero).held == "user"


def test_start_time_update_and_requeue_now(h: Harness) -> None:
    j = h.submit(begin_time=h.clock() + 3600)
    h.tick()
    assert h.job(j).reason == "BeginTime"
    h.call(h.ctl.update_job, h.who(), h.job(j), {"StartTime": h.clock()})
    h.tick()
    assert h.job(j).state == JobState.RUNNING
    h.call(h.ctl.requeue, h.who(), [h.job(j)], False)
    h.end(j, "CANCELLED", signal=15)
    assert h.job(j).state == JobState.PENDING and h.job(j).begin_time is not None
    h.call(h.ctl.update_job, h.who(), h.job(j), {"StartTime": h.clock()})
    h.tick()
    assert h.job(j).state == JobState.RUNNING  # at once, without waiting


def test_top_moves_job_ahead_of_own_jobs() -> None:
    with Harness(CONF + "PriorityMaxAge=00:10:00\n") as h:
        top_scenario(h)


def top_scenario(h: Harness) -> None:
    blocker = h.submit(num_nodes=5, num_tasks=80)
    h.tick()
    first = h.submit()
    h.advance(100)
    second = h.submit()
    h.advance(100)
    assert h.job(first).priority > h.job(second).priority
    total = h.job(first).priority + h.job(second).priority
    h.call(h.ctl.top, h.who(), [h.job(second)])
    h.tick()
    assert h.job(second).priority > h.job(first).priority
    assert h.job(first).priority + h.job(second).priority == total
    with pytest.raises(SlurmError):
        h.call(h.ctl.top, h.who(2000), [h.job(first)])
    h.end(blocker)
    h.tick()
    assert h.job(second).state == JobState.RUNNING


def test_notify_recorded_and_sent(h: Harness) -> None:
    j = h.submit()
    h.tick()
    h.call(h.ctl.notify_job, h.who(), h.job(j), "checkpoint now")
    assert h.job(j).notices == ["checkpoint now"]
    assert "notify" in h.controls(j)
    with pytest.raises(SlurmError) as e:
        h.call(h.ctl.notify_job, h.who(2000), h.job(j), "x")
    assert e.value.errno == ESLURM_USER_ID_MISSING


# ---- reconfigure, config ------------------------------------------------------------

def test_reconfigure_partitions_and_limits(h: Harness) -> None:
    with pytest.raises(SlurmError) as e:
        h.call(h.ctl.reconfigure, h.who(), CONF)
    assert e.value.errno == ESLURM_ACCESS_DENIED
    conf2 = CONF.replace("Default=YES", "Default=YES MaxTime=10") + \
        "NodeName=d1 CPUs=4 RealMemory=1000\nPartitionName=new Nodes=d1\nMaxArraySize=5\n"
    changes = h.call(h.ctl.reconfigure, h.who(0), conf2)
    assert "node d1 added" in changes and "partition new added" in changes
    assert h.ctl.partitions["debug"].max_time == 600 and h.ctl.max_array_size == 5
    j = h.submit(time_limit=3600)
    h.tick()
    assert h.job(j).reason == "PartitionTimeLimit"
    info = h.ctl.config_info()
    assert info["node_count"] == 6 and info["next_job_id"] == j + 1
    assert info["options"]["MaxArraySize"] == "5"


# ---- the job record -----------------------------------------------------------------

def test_job_record_fields(h: Harness) -> None:
    a = h.submit(num_nodes=1, num_tasks=2, constraint="intel")
    h.tick()
    rec = h.job(a).to_dict()
    assert rec["alloc"][0]["cpu_ids"] == [0, 1] and rec["features"] == "intel"
    b = h.submit(num_nodes=1, num_tasks=2, req_nodes=["a1"] if "a1" in h.job(a).nodes else ["a2"])
    h.tick()
    assert h.job(b).to_dict()["alloc"][0]["cpu_ids"] == [2, 3]
    launch = [m["launch"] for m in h.sent if m.get("type") == "launch"][0]
    assert launch["node_mem_mb"] == 16000 and launch["cpu_ids"] == [0, 1]
    dep = h.submit(dependency=f"afterok:{a}")
    h.tick()
    assert h.job(dep).dependency_text == f"afterok:{a}(unfulfilled)"
    h.end(a, "FAILED", exit_code=3)
    h.tick()
    assert h.job(dep).dependency_text == f"afterok:{a}(failed)"
    h.call(h.ctl.update_job, h.who(), h.job(dep), {"Dependency": ""})
    assert "dependency_text" not in h.job(dep).to_dict()
    assert h.job(a).reason == "NonZeroExitCode"
    h.end(b, "COMPLETED")
    assert h.job(b).reason == "None"
    t = h.submit()
    h.tick()
    h.end(t, "TIMEOUT")
    assert h.job(t).reason == "TimeLimit"
    s = h.submit()
    h.tick()
    h.end(s, "FAILED", exit_code=0, signal=9)
    assert h.job(s).reason == "RaisedSignal:9(KILL)"


def test_feature_keys_of_node_lines() -> None:
    from corral.model.config import parse_config

    cfg = parse_config("NodeName=x1 CPUs=1 AvailableFeatures=a,b ActiveFeatures=a,b\n"
                       "NodeName=x2 CPUs=1 ActiveFeatures=c\nNodeName=x3 CPUs=1 Features=d,d\n"
                       "PartitionName=p Nodes=x[1-3]\n")
    assert [n.features for n in cfg.nodes] == [["a", "b"], ["c"], ["d"]]
    assert cfg.nodes[0].to_dict()["features"] == ["a", "b"]


def test_clients_send_only_job_spec_fields() -> None:
    """sbatch and salloc/srun build their request from model/jobspec.py's names: the
    controller refuses any other key, so a field added on one side only fails here."""
    from corral.cli import options, sbatch
    from corral.model.jobspec import FIELD_NAMES

    sub = sbatch.parse_sbatch(["-n2", "--mincpus=2", "--priority=5", "-C", "a", "-H",
                               "--comment=c", "--wrap=true"], {"PATH": "/bin"}, None, "/tmp",
                              1_800_000_000.0, submit_host="h", umask=0o022)
    assert set(sub.spec) <= FIELD_NAMES
    assert sub.spec["min_cpus"] == 2 and sub.spec["priority"] == 5
    spec = options.allocation_spec({"mincpus": 2, "constraint": "a", "priority": 1},
                                   name="x", cwd="/", submit_line="salloc", req_nodes=[],
                                   exc_nodes=[], min_nodes=1, max_nodes=0, ntasks=1,
                                   gpus=(0, 0, 0, None), nodes_given=False)
    assert set(spec) <= FIELD_NAMES and spec["num_nodes"] is None


def test_ntasks_without_nodes_takes_fewest_nodes(h: Harness) -> None:
    # a1, a2 and c1 partly busy (14 of 16 CPUs); b1, b2 idle: 20 tasks go to b1 and b2
    for node in ("a1", "a2", "c1"):
        h.submit(num_nodes=1, num_tasks=14, req_nodes=[node])
    h.tick()
    j = h.submit(num_tasks=20)
    h.tick()
    assert nodes_of(h, j) == ["b1", "b2"]


def test_agent_bound_cpus_replace_ledger_ids(h: Harness) -> None:
    j = h.submit(num_nodes=1, num_tasks=2, req_nodes=["c1"])
    h.tick()
    assert h.job(j).alloc[0].cpu_ids == [0, 1]
    assert not h.call(h.ctl.agent_bound_cpus, j, "c1", [5])  # wrong count: ignored
    assert not h.call(h.ctl.agent_bound_cpus, j, "a1", [5, 6])  # not on that node
    assert h.call(h.ctl.agent_bound_cpus, j, "c1", [7, 5])
    assert h.job(j).to_dict()["alloc"][0]["cpu_ids"] == [5, 7]
    k = h.submit(num_nodes=1, num_tasks=2, req_nodes=["c1"])
    h.tick()
    assert h.job(k).alloc[0].cpu_ids == [0, 1]  # 5 and 7 are held
    h.end(j)
    assert h.ctl.nodes["c1"].used_cpu_ids == [0, 1]
    info = h.ctl.ping_info()
    assert info["ok"] and info["host"]


def test_reconfigure_rereads_cadence_health_and_prolog_settings(h: Harness) -> None:
    assert h.ctl.health.program == "" and not h.ctl.prolog.settings.active
    text = CONF + ("SchedulerParameters=sched_interval=7\nHealthCheckProgram=/bin/true\n"
                   "HealthCheckInterval=30\nProlog=/bin/true\nPrologSlurmctld=/bin/true\n")
    h.call(h.ctl.reconfigure, h.who(0), text)
    assert h.ctl.cadence.params.tick_interval == 7.0
    assert (h.ctl.health.program, h.ctl.health.interval) == ("/bin/true", 30)
    assert h.ctl.prolog.settings.prolog == "/bin/true"
    assert h.ctl.shell.launch_gate is not None  # batch launches wait for PrologSlurmctld
    h.call(h.ctl.reconfigure, h.who(0), CONF)
    assert h.ctl.health.program == "" and not h.ctl.prolog.settings.active
    assert h.ctl.shell.launch_gate is None
