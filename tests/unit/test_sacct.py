"""sacct output against captures of real Slurm 22.05 (../shared/slurm-reference)."""

from __future__ import annotations

import calendar
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from corral.cli import client, sacct
from corral.model.job import Job, JobState, NodeAlloc, Reason, Step
from corral.model.timeparse import TimeParseError, parse_time
from tests.unit import reference


def ref(name: str) -> str:
    return reference.capture(name)


def ts(hms: str, day: str = "2026-11-23") -> float:
    """A reference time of day (the capture machine ran in UTC)."""
    return float(calendar.timegm(time.strptime(f"{day}T{hms}", "%Y-%m-%dT%H:%M:%S")))


pytestmark = pytest.mark.usefixtures("utc_tz")  # (tests/unit/conftest.py)


SUBMIT = "01:10:49"
LATE_SUBMIT = "01:11:26"  # the D* submissions
NOW = ts("01:20:00")


def job(job_id: int, name: str, *, state: JobState, nodes: Sequence[str] = (),
        cpus_per_node: int = 1, start: str | None = None, end: str | None = None,
        steps: Sequence[Step] = (), submit: str = SUBMIT, **kw: Any) -> dict[str, Any]:
    """A job record of the reference cluster (root's jobs, 1G per CPU)."""
    fields: dict[str, Any] = dict(
        group="root", account="root", partition="debug", priority=1, mem_per_cpu=1024,
        submit_time=ts(submit), eligible_time=ts(submit), state=state,
        start_time=ts(start) if start else None, end_time=ts(end) if end else None,
        nodes=list(nodes), batch_host=nodes[0] if nodes else None,
        alloc=[NodeAlloc(n, cpus_per_node, 1024 * cpus_per_node) for n in nodes],
        steps=list(steps))
    fields.update(kw)
    return Job(job_id=job_id, name=name, user="root", uid=0, gid=0, **fields).to_dict()


def batch(state: str, start: str, end: str | None, *, exit_code: int = 0, signal: int = 0,
          cpus: int = 1, nodes: str = "node-1") -> Step:
    return Step("batch", "batch", state=state, exit_code=exit_code, signal=signal,
                start_time=ts(start), end_time=ts(end) if end else None, cpus=cpus, nodes=nodes)


def step0(name: str, cpus: int, nodes: str, at: str) -> Step:
    return Step("0", name, state="COMPLETED", start_time=ts(at), end_time=ts(at), cpus=cpus,
                nodes=nodes, ntasks=cpus)


CA: dict[str, Any] = dict(state=JobState.CANCELLED, cancelled_by=0)


def final_jobs() -> list[dict[str, Any]]:
    """The reference cluster after the E* cancellations, in the store's record order."""
    t1, t2 = "01:10:52", "01:11:26"
    done = "01:12:19"
    return [
        job(1, "wrap", nodes=["node-1"], start=t1, end=t2,
            steps=[batch("FAILED", t1, t2, exit_code=15)], **CA),
        job(2, "gpujob", nodes=["node-1", "node-2"], cpus_per_node=4, start=t1, end=done,
            num_nodes=2, cpus_per_task=4, mem_per_cpu=None, mem_per_node=4096, gpus_per_node=2,
            steps=[batch("CANCELLED", t1, done, signal=15, cpus=4)], **CA),
        job(3, "fromstdin", nodes=["node-1"], start=t1, end=done,
            steps=[batch("CANCELLED", t1, done, signal=15)], **CA),
        job(4, "bigexcl", num_nodes=4, max_nodes=4, exclusive=True, end=t2, **CA),
        job(5, "heldjob", state=JobState.COMPLETED, nodes=["node-1"], start="01:11:00",
            end="01:11:00", steps=[batch("COMPLETED", "01:11:00", "01:11:00")]),
        job(8, "failer", state=JobState.FAILED, exit_code=3, nodes=["node-1"],
            start="01:11:18", end="01:11:18", reason="NonZeroExitCode",
            steps=[batch("FAILED", "01:11:18", "01:11:18", exit_code=3)]),
        job(9, "shorty", state=JobState.TIMEOUT, nodes=["node-1"], start="01:10:52",
            end="01:11:53", time_limit=60,
            steps=[batch("CANCELLED", "01:10:52", "01:11:53", signal=15)]),
        job(10, "hostname", state=JobState.COMPLETED, nodes=["node-1", "node-2"],
            start=SUBMIT, end=SUBMIT, num_nodes=2, batch=False,
            steps=[step0("hostname", 2, "node-[1-2]", SUBMIT)]),
        job(11, "bash", state=JobState.COMPLETED, nodes=["node-1"], start=SUBMIT, end=SUBMIT,
            batch=False, steps=[step0("bash", 1, "node-1", SUBMIT)]),
        job(12, "arr", array_job_id=7, array_task_id=1, nodes=["node-1"], start="01:10:52",
            end="01:11:53", steps=[batch("CANCELLED", "01:10:52", "01:11:53", signal=15)], **CA),
        job(13, "arr", array_job_id=7, array_task_id=2, nodes=["node-1"], start="01:11:18",
            end="01:11:26", steps=[batch("CANCELLED", "01:11:18", "01:11:26", signal=15)], **CA),
        job(22, "arr", array_job_id=7, array_task_id=3, nodes=["node-1"], start="01:11:26",
            end="01:11:57", steps=[batch("CANCELLED", "01:11:26", "01:11:57", signal=15)], **CA),
        job(14, "wrap", num_nodes=10, submit=LATE_SUBMIT, end=LATE_SUBMIT, **CA),
        job(15, "wrap", num_tasks=1000, submit=LATE_SUBMIT, end=LATE_SUBMIT, **CA),
        job(16, "wrap", state=JobState.FAILED, exit_code=1, submit=LATE_SUBMIT, gpus_per_node=9,
            start=LATE_SUBMIT, end=LATE_SUBMIT),
        job(17, "wrap", state=JobState.FAILED, exit_code=1, submit=LATE_SUBMIT,
            mem_per_cpu=None, mem_per_node=300 * 1024, start=LATE_SUBMIT, end=LATE_SUBMIT),
        job(18, "wrap", state=JobState.COMPLETED, nodes=["node-1"], submit=LATE_SUBMIT,
            start="01:11:30", end="01:11:30",
            steps=[batch("COMPLETED", "01:11:30", "01:11:30")]),
        job(19, "wrap", state=JobState.COMPLETED, nodes=["node-1"], submit=LATE_SUBMIT,
            start="01:11:30", end="01:11:30",
            steps=[batch("COMPLETED", "01:11:30", "01:11:30")]),
        job(20, "true", state=JobState.FAILED, exit_code=1, num_nodes=10, batch=False,
            submit=LATE_SUBMIT, start=LATE_SUBMIT, end=LATE_SUBMIT),
        job(21, "wrap", state=JobState.COMPLETED, nodes=["node-1"], submit=LATE_SUBMIT,
            start="01:11:48", end="01:11:48",
            steps=[batch("COMPLETED", "01:11:48", "01:11:48")]),
        # the array's remainder, cancelled before any of tasks 4-10 started
        job(7, "arr", array_job_id=7, array_tasks=list(range(4, 11)), array_max_running=2,
            end="01:11:57", **CA),
    ]


def busy_jobs() -> list[dict[str, Any]]:
    """The reference cluster at C22: three running, five pending, two srun jobs done."""
    t1 = "01:10:52"
    run: dict[str, Any] = dict(state=JobState.RUNNING, start=t1)
    return [
        job(1, "wrap", nodes=["node-1"], steps=[batch("RUNNING", t1, None)], **run),
        job(2, "gpujob", nodes=["node-1", "node-2"], cpus_per_node=4, num_nodes=2,
            cpus_per_task=4, mem_per_cpu=None, mem_per_node=4096, gpus_per_node=2,
            steps=[batch("RUNNING", t1, None, cpus=4)], **run),
        job(3, "fromstdin", nodes=["node-1"], steps=[batch("RUNNING", t1, None)], **run),
        job(4, "bigexcl", state=JobState.PENDING, num_nodes=4, max_nodes=4, exclusive=True,
            reason=Reason.NODES_DOWN),
        # held and dependent jobs have no eligible time yet: outside any time window
        job(5, "heldjob", state=JobState.PENDING, held="user", eligible_time=None),
        job(6, "depjob", state=JobState.PENDING, dependency="afterok:1", eligible_time=None),
        job(8, "failer", state=JobState.PENDING, reason=Reason.PRIORITY),
        job(9, "shorty", state=JobState.PENDING, reason=Reason.PRIORITY, time_limit=60),
        job(10, "hostname", state=JobState.COMPLETED, nodes=["node-1", "node-2"], start=SUBMIT,
            end=SUBMIT, num_nodes=2, batch=False,
            steps=[step0("hostname", 2, "node-[1-2]", SUBMIT)]),
        job(11, "bash", state=JobState.COMPLETED, nodes=["node-1"], start=SUBMIT, end=SUBMIT,
            batch=False, steps=[step0("bash", 1, "node-1", SUBMIT)]),
        job(7, "arr", state=JobState.PENDING, array_job_id=7, array_tasks=list(range(1, 11)),
            array_max_running=2, reason=Reason.PRIORITY),
    ]


CTX = sacct.Context(now=NOW, cluster="anchor", tres_gpu=False)


def run_pure(jobs: list[dict[str, Any]], *, fields: str = sacct.DEFAULT_FIELDS,
             job_ids: str | None = None, steps: bool = True, parsable: str | None = None,
             start: float | None = None) -> str:
    wanted = sacct.parse_job_ids(job_ids) if job_ids else None
    if start is None and not wanted:
        start = sacct.midnight(NOW)
    sel = sacct.Selection(start=start, job_ids=wanted)
    chosen = sacct.select_jobs(jobs, sel, NOW)
    return sacct.format_sacct(chosen, sacct.parse_fields(fields), CTX, steps=steps,
                              parsable=parsable, job_ids=wanted)


def test_a11_d21_empty() -> None:
    assert run_pure([]) == ref("A11_sacct_empty")
    assert run_pure(final_jobs(), job_ids="999999") == ref("D21_sacct_unknown_job")


def test_c22_running() -> None:
    assert run_pure(busy_jobs()) == ref("C22_sacct_running")


def test_e04_default() -> None:
    assert run_pure(final_jobs()) == ref("E04_sacct")


def test_e05_parsable2_format() -> None:
    assert run_pure(final_jobs(), fields="JobID,JobName,State,Elapsed", parsable="P") == \
        ref("E05_sacct_o_parsable2")


def test_e06_allocations() -> None:
    assert run_pure(final_jobs(), steps=False) == ref("E06_sacct_X")


def test_e07_widths() -> None:
    fields = "JobID,JobName%15,Partition,AllocCPUS,AllocTRES%50,State,ExitCode,NodeList"
    assert run_pure(final_jobs(), fields=fields, steps=False) == ref("E07_sacct_format")


def test_e08_long_parsable2() -> None:
    assert run_pure(final_jobs(), fields=sacct.LONG_FIELDS, job_ids="8", parsable="P") == \
        ref("E08_sacct_l_job8")


def test_e08b_parsable2_default() -> None:
    assert run_pure(final_jobs(), parsable="P") == ref("E08b_sacct_parsable2_default")


def test_e08c_submitit_style() -> None:
    assert run_pure(final_jobs(), fields="JobID,State,NodeList", parsable="P",
                    job_ids="1,2,7") == ref("E08c_sacct_submitit_style")


def test_parsable_trailing_delimiter_and_steps() -> None:
    out = run_pure(final_jobs(), fields="jobid,state", parsable="p", job_ids="8.batch,7_2")
    assert out == ("JobID|State|\n8.batch|FAILED|\n7_2|CANCELLED by 0|\n"
                   "7_2.batch|CANCELLED|\n")


def test_more_fields() -> None:
    jobs = [j for j in final_jobs() if j["job_id"] in (2, 9)]
    out = run_pure(jobs, parsable="P", fields=(
        "jobid,user,uid,group,gid,nnodes,ncpus,reqcpus,reqmem,reqnodes,timelimit,timelimitraw,"
        "elapsedraw,cputime,cputimeraw,start,end,submit,eligible,alloctres,reqtres,cluster,"
        "derivedexitcode,workdir,maxrss,allocnodes,qos,priority,suspended"))
    assert out.splitlines() == [
        "JobID|User|UID|Group|GID|NNodes|NCPUS|ReqCPUS|ReqMem|ReqNodes|Timelimit|TimelimitRaw|"
        "ElapsedRaw|CPUTime|CPUTimeRAW|Start|End|Submit|Eligible|AllocTRES|ReqTRES|Cluster|"
        "DerivedExitCode|WorkDir|MaxRSS|AllocNodes|QOS|Priority|Suspended",
        "2|root|0|root|0|2|8|8|8G|2|UNLIMITED|UNLIMITED|87|00:11:36|696|2026-11-23T01:10:52|"
        "2026-11-23T01:12:19|2026-11-23T01:10:49|2026-11-23T01:10:49|"
        "billing=8,cpu=8,mem=8G,node=2|billing=8,cpu=8,mem=8G,node=2|anchor|0:15|/||2|normal|"
        "1|00:00:00",
        "2.batch|||||1|4||||||87|00:05:48|348|2026-11-23T01:10:52|2026-11-23T01:12:19|"
        "2026-11-23T01:10:52|2026-11-23T01:10:52|cpu=4,mem=4G,node=1||anchor||||1|||00:00:00",
        "9|root|0|root|0|1|1|1|1G|1|00:01:00|1|61|00:01:01|61|2026-11-23T01:10:52|"
        "2026-11-23T01:11:53|2026-11-23T01:10:49|2026-11-23T01:10:49|"
        "billing=1,cpu=1,mem=1G,node=1|billing=1,cpu=1,mem=1G,node=1|anchor|0:15|/||1|normal|"
        "1|00:00:00",
        "9.batch|||||1|1||||||61|00:01:01|61|2026-11-23T01:10:52|2026-11-23T01:11:53|"
        "2026-11-23T01:10:52|2026-11-23T01:10:52|cpu=1,mem=1G,node=1||anchor||||1|||00:00:00",
    ]


def test_gpus_in_tres_when_accounted() -> None:
    two = [j for j in final_jobs() if j["job_id"] == 2]
    two[0]["alloc"][0]["gpus"] = [0, 1]
    two[0]["alloc"][1]["gpus"] = [0, 1]
    out = sacct.format_sacct(two, sacct.parse_fields("alloctres,reqtres"),
                             sacct.Context(now=NOW), steps=False, parsable="P", header=False)
    assert out == ("billing=8,cpu=8,gres/gpu=4,mem=8G,node=2|"
                   "billing=8,cpu=8,gres/gpu=4,mem=8G,node=2\n")


def test_state_window_rules() -> None:
    jobs = final_jobs() + [job(30, "live", state=JobState.RUNNING, nodes=["node-1"],
                               start="01:15:00")]
    running = sacct.Selection(start=NOW, states=frozenset({"RUNNING"}))
    assert [j["job_id"] for j in sacct.select_jobs(jobs, running, NOW)] == [30]
    failed = sacct.Selection(start=ts("01:11:20"), end=ts("01:11:30"),
                             states=frozenset({"FAILED"}))
    assert [j["job_id"] for j in sacct.select_jobs(jobs, failed, NOW)] == [16, 17, 20]
    # a window that ends before the late submissions were eligible
    early = sacct.Selection(start=sacct.midnight(NOW), end=ts("01:11:00"))
    assert 14 not in [j["job_id"] for j in sacct.select_jobs(jobs, early, NOW)]
    yesterday = sacct.Selection(start=ts("00:00:00", "2026-11-24"))
    assert [j["job_id"] for j in sacct.select_jobs(jobs, yesterday, NOW)] == [30]


def test_truncation_and_left_justify() -> None:
    fields = sacct.parse_fields("jobname%4,jobid%-6,alloccpus%2")
    out = sacct.render([["abcdef", "7_[1-3]", "1000"]], fields)
    assert out == "JobN JobID  Al \n---- ------ -- \nabc+ 7_[1-+ 1000 \n"


def test_field_errors_and_prefixes() -> None:
    names = [f.name for f in sacct.parse_fields("tresusageinmaxn,user,end,cputime,jobid")]
    assert names == ["TRESUsageInMaxNode", "User", "End", "CPUTime", "JobID"]
    assert len(sacct.parse_fields("ALL")) == len(sacct.FIELDS)
    with pytest.raises(sacct.UsageError, match='Invalid field requested: "bogus"'):
        sacct.parse_fields("jobid,bogus")
    # Restarts came with Slurm 23.02: 22.05's sacct refuses it
    with pytest.raises(sacct.UsageError, match='Invalid field requested: "Restarts"'):
        sacct.parse_fields("jobid,Restarts")


def test_helpformat_layout() -> None:
    lines = sacct.help_fields().splitlines()
    assert lines[0] == ("Account             AdminComment        AllocCPUS           "
                        "AllocNodes         ")
    assert all(len(line.split()) <= 4 for line in lines)


@pytest.mark.parametrize("text,expected", [
    ("2026-11-20", "2026-11-20T00:00:00"),
    ("2026-11-20T13:05", "2026-11-20T13:05:00"),
    ("2026-11-20T13:05:09", "2026-11-20T13:05:09"),
    ("1120", "2026-11-20T00:00:00"),
    ("112025", "2025-11-20T00:00:00"),
    ("11/20", "2026-11-20T00:00:00"),
    ("11/20/25", "2025-11-20T00:00:00"),
    ("11/20-08:30", "2026-11-20T08:30:00"),
    ("08:30", "2026-11-23T08:30:00"),
    ("8:30pm", "2026-11-23T20:30:00"),
    ("12:10 AM", "2026-11-23T00:10:00"),
    ("now", "2026-11-23T01:20:00"),
    ("now-1hours", "2026-11-23T00:20:00"),
    ("now-2days", "2026-11-21T01:20:00"),
    ("now+30", "2026-11-23T01:20:30"),
    ("NOW-1week", "2026-11-16T01:20:00"),
    ("today", "2026-11-23T00:00:00"),
    ("midnight", "2026-11-23T00:00:00"),
    ("noon", "2026-11-23T12:00:00"),
    ("tomorrow", "2026-11-24T00:00:00"),
])
def test_parse_time(text: str, expected: str) -> None:
    assert time.strftime("%Y-%m-%dT%H:%M:%S",
                         time.localtime(parse_time(text, NOW, past=True))) == expected


@pytest.mark.parametrize("text", ["abc", "2026-13-01", "25:00", "now-1fortnight", "13:00pm",
                                  "1340", ""])
def test_parse_time_rejects(text: str) -> None:
    with pytest.raises(TimeParseError):
        parse_time(text, NOW, past=True)


# ---- the command line, with a fake controller -----------------------------------------


class FakeController:
    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.jobs = jobs
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.config = {"cluster_name": "anchor",
                       "options": {"AccountingStorageTRES": "cpu,mem,node,billing"}}

    def get(self, path: str, **params: Any) -> Any:
        self.calls.append((path, params))
        if path == "/v1/config":
            return self.config
        assert path == "/v1/accounting"
        jobs = self.jobs
        if "ids" in params:
            ids = set(params["ids"].split(","))
            jobs = [j for j in jobs if str(j["job_id"]) in ids
                    or str(j.get("array_job_id")) in ids]
            if not jobs:
                raise client.ApiError(404, "Invalid job id specified")
        return {"jobs": jobs, "now": NOW}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeController:
    ctl = FakeController(final_jobs())
    monkeypatch.setattr(client, "get", ctl.get)
    monkeypatch.setattr(sacct.os, "getuid", lambda: 0)
    monkeypatch.setattr(sacct.time, "time", lambda: NOW)
    return ctl


def test_cli_default_and_query(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert sacct.main([]) == 0
    assert capsys.readouterr().out == ref("E04_sacct")
    assert fake.calls == [("/v1/accounting", {"all_users": 1, "start": int(ts("00:00:00"))})]


def test_cli_e07_and_e08(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert sacct.main(["-X", "-o", "JobID,JobName%15,Partition,AllocCPUS,AllocTRES%50,State,"
                       "ExitCode,NodeList"]) == 0
    assert capsys.readouterr().out == ref("E07_sacct_format")
    assert sacct.main(["-l", "-j", "8", "--parsable2"]) == 0
    assert capsys.readouterr().out == ref("E08_sacct_l_job8")
    assert ("/v1/accounting", {"ids": "8", "all_users": 1}) in fake.calls


def test_cli_d21_unknown_job(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert sacct.main(["-j", "999999"]) == 0
    assert capsys.readouterr() == (ref("D21_sacct_unknown_job"), "")


def test_cli_filters(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert sacct.main(["-n", "-X", "-P", "-b", "--name=failer,shorty", "-S", "2026-11-23",
                       "-E", "now", "-s", "F,TO", "-u", "root"]) == 0
    assert capsys.readouterr().out == "8|FAILED|3:0\n9|TIMEOUT|0:0\n"
    path, params = fake.calls[-1]
    assert params == {"users": "root", "states": "FAILED,TIMEOUT",
                      "start": int(ts("00:00:00")), "end": int(NOW)}


def test_cli_errors(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert sacct.main(["--x"]) == 1
    assert capsys.readouterr().err == "sacct: unrecognized option '--x'\n"
    assert sacct.main(["-o", "jobid,nosuch"]) == 1
    assert capsys.readouterr().err == 'sacct: error: Invalid field requested: "nosuch"\n'
    assert sacct.main(["-S", "yesterdayish"]) == 1
    assert capsys.readouterr().err == \
        "sacct: error: Invalid time specification (pos=0): yesterdayish\n"
    assert sacct.main(["-s", "bogus"]) == 1
    assert capsys.readouterr().err == "sacct: fatal: unrecognized job state value 'bogus'\n"
    assert sacct.main(["-j", "abc"]) == 1
    assert capsys.readouterr().err == "sacct: fatal: Bad job/step specified: abc\n"
    assert sacct.main(["-u", "no-such-user-here"]) == 1
    assert capsys.readouterr().err == "Invalid user id: no-such-user-here\n"
    assert sacct.main(["stray"]) == 1
    assert capsys.readouterr().err == "sacct: error: Unknown arguments:\nsacct: error:  stray\n"
    assert not fake.calls


def test_cli_helpformat_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert sacct.main(["-e"]) == 0
    assert capsys.readouterr().out == sacct.help_fields()
    assert sacct.main(["--version"]) == 0
    assert capsys.readouterr().out == f"slurm {sacct.SLURM_VERSION}\n"


def test_no_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    assert sacct.main([]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("sacct: error: no Corral controller is running for ")
    assert err.count("\n") == 1


def test_cli_defaults_for_ordinary_users(fake: FakeController, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    import pwd

    monkeypatch.setattr(sacct.os, "getuid", lambda: 1)
    me = pwd.getpwuid(1).pw_name
    assert sacct.main(["-s", "R"]) == 0  # with states the window starts now
    assert fake.calls[-1] == ("/v1/accounting", {"users": me, "states": "RUNNING",
                                                 "start": int(NOW)})
    assert capsys.readouterr().out == ref("A11_sacct_empty")  # nothing running at NOW
    assert sacct.main(["-j", "8", "-X", "-n"]) == 0  # asking by id covers every user
    assert fake.calls[-1] == ("/v1/accounting", {"ids": "8", "all_users": 1})
    assert sacct.main(["-a", "-X", "-n", "-o", "jobid"]) == 0
    assert fake.calls[-1][1]["all_users"] == 1
