"""sched/limits_check.py: Slurm's reasons, in-pass charging, submit refusals."""

from __future__ import annotations

from corral.model.assoc import ROOT, Account, AssocDB, Association, ClusterRecord, Limits, Qos, User
from corral.sched.limits_check import (
    ESLURM_ACCOUNTING_POLICY,
    ESLURM_INVALID_ACCOUNT,
    ESLURM_INVALID_QOS,
    MSG_ACCOUNTING_POLICY,
    JobReq,
    LimitLedger,
    SubmitChoice,
    SubmitRefusal,
    all_reason_names,
    default_time_limit,
    reason_name,
    resolve_submit,
)


def lab() -> AssocDB:
    """root → lab (GrpTRES gres/gpu=4, MaxWall 1440) → students (MaxJobs 2 per user);
    users ann and ben in students, pi in lab."""
    db = AssocDB()
    db.clusters["c"] = ClusterRecord("c")
    db.accounts["lab"] = Account("lab")
    db.accounts["students"] = Account("students")
    db.assocs[1] = Association(1, "c", ROOT)
    db.assocs[2] = Association(2, "c", "lab", parent=ROOT,
                               limits=Limits(grp_tres={"gres/gpu": 4}, max_wall=1440))
    db.assocs[3] = Association(3, "c", "students", parent="lab", limits=Limits(max_jobs=2))
    db.assocs[10] = Association(10, "c", "students", "ann")
    db.assocs[11] = Association(11, "c", "students", "ben",
                                limits=Limits(grp_tres={"cpu": 8}, grp_submit_jobs=3))
    db.assocs[12] = Association(12, "c", "lab", "pi")
    for u, a in (("ann", "students"), ("ben", "students"), ("pi", "lab")):
        db.users[u] = User(u, a)
    db.qos["normal"] = Qos("normal", 1)
    db.qos["gpu"] = Qos("gpu", 2, limits=Limits(max_tres_per_user={"gres/gpu": 2},
                                                 max_jobs_per_user=1))
    db.qos["strict"] = Qos("strict", 3, flags=("DenyOnLimit",),
                           limits=Limits(max_wall=60, max_tres_per_job={"gres/gpu": 1}))
    return db


def job(jid: int, user: str, account: str = "students", qos: str | None = "normal",
        gpus: int = 0, cpus: int = 1, minutes: int = 60) -> JobReq:
    tres = {"cpu": cpus, "node": 1}
    if gpus:
        tres["gres/gpu"] = gpus
    return JobReq(jid, user, account, "gpu", qos, tres, tres, minutes)


def test_reason_names_are_slurms() -> None:
    assert reason_name("Assoc", "grp", "gres/gpu") == "AssocGrpGRES"
    assert reason_name("Assoc", "grp", "cpu") == "AssocGrpCpuLimit"
    assert reason_name("Assoc", "grp", "mem") == "AssocGrpMemLimit"
    assert reason_name("QOS", "max_per_user", "gres/gpu") == "QOSMaxGRESPerUser"
    assert reason_name("QOS", "max_per_job", "mem") == "QOSMaxMemoryPerJob"
    assert reason_name("QOS", "min_per_job", "cpu") == "QOSMinCpuNotSatisfied"
    assert reason_name("Assoc", "grp_run_mins", "cpu") == "AssocGrpCPURunMinutesLimit"
    names = all_reason_names()
    assert "AssocMaxWallDurationPerJobLimit" in names and "QOSMaxJobsPerUserLimit" in names


def test_group_gpu_limit_counts_jobs_started_earlier_in_the_pass() -> None:
    led = LimitLedger(lab(), "c")
    a1, b1, a2 = job(1, "ann", gpus=2), job(2, "ben", gpus=2), job(3, "ann", gpus=1)
    for j in (a1, b1, a2):
        led.add_pending(j)
    assert led.check_start(a1) is None
    led.start(a1)
    assert led.check_start(b1) is None
    led.start(b1)
    hit = led.check_start(a2)  # lab's GrpTRES gres/gpu=4 is full
    assert hit is not None and hit.code == "AssocGrpGRES" and hit.text() == "AssocGrpGRES"
    assert (hit.used, hit.allowed, hit.where) == (4, 4, "assoc lab")
    # a CPU-only job of the same group is not held by the GPU limit
    assert led.check_start(job(4, "pi", account="lab")) is None


def test_max_jobs_inherited_from_the_account_counts_per_user() -> None:
    led = LimitLedger(lab(), "c")
    for i in (1, 2):
        led.add_running(job(i, "ann"), 30)
    hit = led.check_start(job(3, "ann"))
    assert hit is not None and hit.code == "AssocMaxJobsLimit"
    assert led.check_start(job(4, "ben")) is None  # ben's own count


def test_user_cpu_limit_and_max_wall() -> None:
    led = LimitLedger(lab(), "c")
    hit = led.check_start(job(1, "ben", cpus=9))
    assert hit is not None and hit.code == "AssocGrpCpuLimit"
    hit = led.check_start(job(2, "ann", minutes=2000))  # lab's MaxWall, inherited
    assert hit is not None and hit.code == "AssocMaxWallDurationPerJobLimit"


def test_qos_per_user_limits_come_first_and_override() -> None:
    led = LimitLedger(lab(), "c")
    led.add_running(job(1, "ann", qos="gpu", gpus=1), 10)
    hit = led.check_start(job(2, "ann", qos="gpu", gpus=1))
    assert hit is not None and hit.code == "QOSMaxJobsPerUserLimit"
    led2 = LimitLedger(lab(), "c")
    hit = led2.check_start(job(3, "ben", qos="gpu", gpus=3))
    assert hit is not None and hit.code == "QOSMaxGRESPerUser"


def test_group_tres_run_minutes() -> None:
    db = lab()
    db.assocs[2].limits.grp_tres_run_mins = {"gres/gpu": 600}
    led = LimitLedger(db, "c")
    led.add_running(job(1, "pi", account="lab", gpus=1, minutes=500), 500)
    hit = led.check_start(job(2, "ann", gpus=1, minutes=200))
    assert hit is not None and hit.code == "AssocGrpGRESRunMinutes"
    assert led.check_start(job(3, "ann", gpus=1, minutes=100)) is None


def test_group_tres_minutes_uses_decayed_usage() -> None:
    db = lab()
    db.assocs[2].limits.grp_tres_mins = {"gres/gpu": 1000}
    led = LimitLedger(db, "c", used_tres_mins={2: {"gres/gpu": 1000.0}})
    hit = led.check_start(job(1, "ann", gpus=1))
    assert hit is not None and hit.code == "AssocGrpGRESMinutes"
    assert led.check_start(job(2, "ann")) is None  # no GPUs asked


def test_submit_limits_refuse_with_slurms_message() -> None:
    led = LimitLedger(lab(), "c")
    for i in range(3):
        j = job(i, "ben")
        assert led.check_submit(j) is None
        led.add_pending(j)
    r = led.check_submit(job(9, "ben"))
    assert isinstance(r, SubmitRefusal)
    assert (r.message, r.errno) == (MSG_ACCOUNTING_POLICY, ESLURM_ACCOUNTING_POLICY)
    assert r.message == ("Job violates accounting/QOS policy (job submit limit, user's size "
                         "and/or time limits)")
    assert r.hit is not None and r.hit.code == "AssocGrpSubmitJobsLimit"


def test_deny_on_limit_refuses_oversized_jobs_at_submit_others_pend() -> None:
    led = LimitLedger(lab(), "c")
    r = led.check_submit(job(1, "ann", qos="strict", minutes=120))
    assert r is not None and r.errno == ESLURM_ACCOUNTING_POLICY
    assert r.hit is not None and r.hit.code == "QOSMaxWallDurationPerJobLimit"
    # without DenyOnLimit the same kind of excess is accepted and pends with the reason
    big = job(2, "ann", minutes=5000)
    assert led.check_submit(big) is None
    hit = led.pending_reason_at_submit(big)
    assert hit is not None and hit.code == "AssocMaxWallDurationPerJobLimit"


def test_resolve_submit_account_and_qos() -> None:
    db = lab()
    db.assocs[10].qos = ("normal", "gpu")
    assert resolve_submit(db, "c", "ann", None, "gpu", None) == SubmitChoice("students", "normal", 10)
    assert resolve_submit(db, "c", "ann", "students", None, "gpu") == \
        SubmitChoice("students", "gpu", 10)
    bad = resolve_submit(db, "c", "ann", "lab", None, None)  # no association with lab
    assert isinstance(bad, SubmitRefusal) and bad.errno == ESLURM_INVALID_ACCOUNT
    assert bad.message == "Invalid account or account/partition combination specified"
    bad = resolve_submit(db, "c", "ann", None, None, "strict")  # not in ann's QoS list
    assert isinstance(bad, SubmitRefusal) and bad.errno == ESLURM_INVALID_QOS
    assert bad.message == "Invalid qos specification"
    nobody = resolve_submit(db, "c", "eve", None, None, None)
    assert isinstance(nobody, SubmitRefusal) and nobody.errno == ESLURM_INVALID_ACCOUNT
    assert default_time_limit(db, 10, "normal") == 1440
    assert default_time_limit(db, 10, "strict") == 60


def test_job_request_from_records() -> None:
    from corral.model.job import Job, NodeAlloc
    from corral.sched.limits_check import job_request

    j = Job(7, "x", "ann", 1000, 1000, account="students", qos="normal", partition="gpu",
            num_nodes=2, num_tasks=4, cpus_per_task=2, mem_per_cpu=1000, gpus_per_node=2,
            time_limit=90)
    r = job_request(j)
    assert (r.user, r.account, r.partition, r.qos, r.time_limit_min) == \
        ("ann", "students", "gpu", "normal", 2)
    assert dict(r.tres) == {"cpu": 8, "node": 2, "mem": 8000, "gres/gpu": 4}
    assert dict(r.tres_per_node) == {"cpu": 4, "node": 1, "mem": 4000, "gres/gpu": 2}
    j.alloc = [NodeAlloc("n1", 6, 100, [0, 1, 2]), NodeAlloc("n2", 2, 50, [])]
    r = job_request(j)
    assert dict(r.tres) == {"cpu": 8, "mem": 150, "node": 2, "gres/gpu": 3}
    assert dict(r.tres_per_node)["gres/gpu"] == 3


def test_pending_requests_are_made_when_asked_for() -> None:
    from corral.model.job import Job, NodeAlloc
    from corral.sched.limits_check import PendingRequests, job_request

    def job(job_id: int, held: bool = False) -> Job:
        return Job(job_id, "x", "ann", 1000, 1000, account="students", num_tasks=2,
                   cpus_per_task=3, time_limit=60, held=held)

    jobs = {1: job(1), 2: job(2, held=True), 3: job(3)}
    reqs = PendingRequests(jobs)
    assert reqs.get(1) == job_request(jobs[1])
    assert reqs.get(1) is reqs.get(1)  # (made once)
    assert reqs.get(2) is None and reqs.get(4) is None  # held, unknown
    assert reqs.get(2, "none") == "none"
    assert sorted(reqs) == [1, 3] and len(reqs) == 2 and 3 in reqs and 2 not in reqs
    assert reqs[3].tres == {"cpu": 6, "node": 1}
    # a running job: by its allocation, the most on one node from each node's share
    run = job(5)
    run.alloc = [NodeAlloc("n1", 2, 100, []), NodeAlloc("n2", 6, 50, [1, 2])]
    r = job_request(run)
    assert dict(r.tres) == {"cpu": 8, "mem": 150, "node": 2, "gres/gpu": 2}
    assert dict(r.tres_per_node) == {"cpu": 6, "mem": 100, "node": 1, "gres/gpu": 2}


def test_pending_requests_of_one_size_share_their_tres_and_differ_from_other_sizes() -> None:
    from corral.model.job import Job
    from corral.sched.limits_check import PendingRequests, job_request

    def job(job_id: int, user: str, **size: object) -> Job:
        return Job(job_id, "x", user, 1000, 1000, account="students",  # type: ignore[arg-type]
                   partition="gpu", time_limit=3600, **size)

    jobs = {1: job(1, "ann", gpus_per_node=2, num_nodes=2),
            2: job(2, "bob", gpus_per_node=2, num_nodes=2),
            3: job(3, "ann", gpus_per_node=2, num_nodes=2, mem_per_node=1000),
            4: job(4, "ann", gpus_per_task=1, num_tasks=4, overcommit=True),
            5: job(5, "ann", gpus_per_task=1, num_tasks=4),
            6: job(6, "ann", num_tasks=3, array_tasks=[1, 2, 3])}
    reqs = PendingRequests(jobs)
    for job_id, j in jobs.items():
        assert reqs[job_id] == job_request(j)  # the same request, field by field
    assert reqs[1].tres is reqs[2].tres and reqs[1].user != reqs[2].user
    assert reqs[3].tres == {"cpu": 2, "node": 2, "mem": 2000, "gres/gpu": 4}
    assert reqs[1].tres != reqs[3].tres
    assert reqs[6].submit_count == 3 and reqs[5].submit_count == 1


def test_a_pass_over_10000_jobs_of_500_users_in_50_accounts() -> None:
    """Correct at scale; its speed is bench/bench_sched.py's (--policy)."""
    from corral.sched.fairshare import Usage, fairshare_factors
    from corral.sched.limits_check import build_ledger

    db = AssocDB()
    db.clusters["c"] = ClusterRecord("c")
    db.assocs[1] = Association(1, "c", ROOT)
    db.qos["normal"] = Qos("normal", 1, limits=Limits(max_jobs_per_user=30))
    aid = 2
    users = []
    for a in range(50):
        acct = f"acct{a}"
        db.accounts[acct] = Account(acct)
        db.assocs[aid] = Association(aid, "c", acct, parent=ROOT,
                                     limits=Limits(grp_tres={"gres/gpu": 64}))
        aid += 1
        for u in range(10):
            name = f"u{a}_{u}"
            db.users[name] = User(name, acct)
            db.assocs[aid] = Association(aid, "c", acct, name, limits=Limits(max_jobs=20))
            users.append((name, acct, aid))
            aid += 1
    jobs = [JobReq(i, users[i % 500][0], users[i % 500][1], "gpu", "normal",
                   {"cpu": 4, "node": 1, "gres/gpu": 1}, {"cpu": 4, "node": 1, "gres/gpu": 1}, 60)
            for i in range(10_000)]
    led = build_ledger(db, "c", running=[], pending=jobs)
    started = 0
    for j in jobs:
        if led.check_start(j) is None:
            led.start(j)
            started += 1
    infos = fairshare_factors(db, "c", {a: Usage(float(a)) for _, _, a in users})
    assert started == 50 * 64  # every account's GPUs full, nothing more
    assert len([i for i in infos.values() if i.fairshare > 0]) == 500


def test_accounting_storage_enforce_implications() -> None:
    import pytest

    from corral.sched.limits_check import parse_enforce

    assert parse_enforce("") == frozenset()
    assert parse_enforce("limits") == {"limits", "associations"}
    assert parse_enforce("associations,limits,qos,safe") == \
        {"associations", "limits", "qos", "safe"}
    assert parse_enforce("safe") == {"safe", "limits", "associations"}
    with pytest.raises(ValueError, match="Invalid AccountingStorageEnforce option: bogus"):
        parse_enforce("limits,bogus")
