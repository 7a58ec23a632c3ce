"""squeue output against real Slurm 22.05 captures (shared/slurm-reference)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from corral.cli import client, squeue
from corral.cli.fmt import fit, parse_long, parse_percent
from corral.model.job import Job, JobState, NodeAlloc, Reason
from tests.unit import reference

T0 = 1795396249.0  # submission time of the B* jobs
START = T0 + 3  # jobs 1-3 start
BACKFILL = START + 26  # the backfill pass that starts 7_1, 9, 7_2


def ref(name: str) -> str:
    return reference.capture(name)


pytestmark = pytest.mark.usefixtures("utc_tz")  # (tests/unit/conftest.py)


def job(job_id: int, name: str, **kw: Any) -> Job:
    kw.setdefault("mem_per_cpu", 1024)
    kw.setdefault("priority", 1)
    return Job(job_id=job_id, name=name, user="root", uid=0, gid=0, group="root",
               partition="debug", submit_time=T0, **kw)


def running(job_id: int, name: str, nodes: list[str], start: float, cpus: int = 1,
            **kw: Any) -> Job:
    alloc = [NodeAlloc(n, cpus // len(nodes), 1024) for n in nodes]
    return job(job_id, name, state=JobState.RUNNING, reason=Reason.NONE, nodes=nodes,
               alloc=alloc, start_time=start, batch_host=nodes[0], **kw)


def array_meta(tasks: list[int], reason: str) -> Job:
    return job(7, "arr", reason=reason, array_job_id=7, array_tasks=tasks, array_max_running=2)


def busy_queue() -> list[dict[str, Any]]:
    """The C* scenario: three running jobs, six pending records."""
    jobs = [
        running(1, "wrap", ["node-1"], START),
        running(2, "gpujob", ["node-1", "node-2"], START, cpus=8, num_nodes=2,
                cpus_per_task=4, mem_per_node=4096, mem_per_cpu=None, gpus_per_node=2),
        running(3, "fromstdin", ["node-1"], START),
        job(4, "bigexcl", num_nodes=4, exclusive=True, reason=Reason.NODES_DOWN),
        job(5, "heldjob", held="user", priority=0, reason=Reason.HELD_USER),
        job(6, "depjob", dependency="afterok:1", reason=Reason.DEPENDENCY),
        array_meta(list(range(1, 11)), Reason.PRIORITY),
        job(8, "failer", reason=Reason.PRIORITY),
        job(9, "shorty", time_limit=60, reason=Reason.PRIORITY),
    ]
    return [j.to_dict() for j in jobs]


def after_backfill() -> list[dict[str, Any]]:
    """C25: 7_1, 9 and 7_2 started by backfill; 8 ran and failed."""
    jobs = [
        running(1, "wrap", ["node-1"], START),
        running(2, "gpujob", ["node-1", "node-2"], START, cpus=8, num_nodes=2),
        running(3, "fromstdin", ["node-1"], START),
        job(4, "bigexcl", num_nodes=4, exclusive=True, reason=Reason.NODES_DOWN),
        job(5, "heldjob", held="user", priority=0, reason=Reason.HELD_USER),
        job(6, "depjob", reason=Reason.DEPENDENCY),
        running(12, "arr", ["node-1"], BACKFILL, array_job_id=7, array_task_id=1),
        job(8, "failer", state=JobState.FAILED, start_time=BACKFILL, end_time=BACKFILL),
        running(9, "shorty", ["node-1"], BACKFILL, time_limit=60),
        running(13, "arr", ["node-1"], BACKFILL, array_job_id=7, array_task_id=2),
        array_meta(list(range(3, 11)), Reason.ARRAY_LIMIT),
    ]
    return [j.to_dict() for j in jobs]


def show(argv: list[str], jobs: list[dict[str, Any]], now: float) -> str:
    parsed = squeue.parse_args(argv)
    assert not isinstance(parsed, int)
    opts, query = parsed
    return squeue.format_jobs(squeue.select_states(jobs, query.states), now, opts)


# ---- captures --------------------------------------------------------------

def test_a05_a06_empty_queue() -> None:
    now = time.mktime((2026, 11, 23, 1, 10, 49, 0, 0, -1))
    assert show([], [], now) == ref("A05_squeue_empty.txt")
    assert show(["-l"], [], now) == ref("A06_squeue_l_empty.txt")


def test_c06_default_order_and_columns() -> None:
    assert show([], busy_queue(), START + 3) == ref("C06_squeue.txt")


def test_c07_long() -> None:
    now = time.mktime((2026, 11, 23, 1, 10, 55, 0, 0, -1))
    jobs = busy_queue()
    for j in jobs:  # shift the scenario so the runs are 3 s old at the capture time
        if j["start_time"]:
            j["start_time"] = now - 3
    assert show(["-l"], jobs, now) == ref("C07_squeue_l.txt")


def test_c08_start() -> None:
    assert show(["--start"], busy_queue(), START + 3) == ref("C08_squeue_start.txt")


def test_c09_custom_format() -> None:
    argv = ["-o", "%.18i %.9P %.30j %.8u %.8T %.9M %.4D %R"]
    assert show(argv, busy_queue(), START + 3) == ref("C09_squeue_o_format.txt")


def test_c10_array_expanded() -> None:
    assert show(["-r"], busy_queue(), START + 3) == ref("C10_squeue_r.txt")


def test_c11_pending_only() -> None:
    assert show(["-t", "PD"], busy_queue(), START + 3) == ref("C11_squeue_t_PD.txt")


def test_c12_one_job_no_header() -> None:
    jobs = [j for j in busy_queue() if j["job_id"] == 1]
    out = show(["-h", "-j", "1", "-o", "%i %T %N %C %m %b"], jobs, START + 3)
    assert out == ref("C12_squeue_j1_h.txt")


def test_c23_simple_slurm_format() -> None:
    argv = ["--me", "-o", '"%i","%j","%t","%M","%L","%D","%C","%m","%b","%R"']
    assert show(argv, busy_queue(), START + 3) == ref("C23_squeue_me_simple_slurm_fmt.txt")


def test_c25_after_backfill() -> None:
    assert show([], after_backfill(), BACKFILL + 7) == ref("C25_squeue_after_backfill.txt")


def test_c26_start_after_backfill() -> None:
    out = show(["--start"], after_backfill(), BACKFILL + 7)
    assert out == ref("C26_squeue_start_after_backfill.txt")


def test_e03_after_cancellations() -> None:
    later = BACKFILL + 11
    jobs = [
        running(2, "gpujob", ["node-1", "node-2"], START, cpus=8, num_nodes=2),
        running(3, "fromstdin", ["node-1"], START),
        job(4, "bigexcl", num_nodes=4, exclusive=True, reason=Reason.NODES_DOWN),
        job(5, "heldjob", reason=Reason.PRIORITY),
        job(6, "depjob", reason=Reason.DEPENDENCY_NEVER),
        running(12, "arr", ["node-1"], BACKFILL, array_job_id=7, array_task_id=1),
        running(9, "shorty", ["node-1"], BACKFILL, time_limit=60),
        array_meta(list(range(3, 11)), Reason.ARRAY_LIMIT),
        job(14, "wrap", num_nodes=10, reason=Reason.PARTITION_NODE_LIMIT),
        job(15, "wrap", num_nodes=16, num_tasks=1000, reason="PartitionConfig"),
        job(18, "wrap", reason=Reason.PRIORITY),
        job(19, "wrap", reason=Reason.PRIORITY),
        job(21, "wrap", reason=Reason.PRIORITY),
    ]
    out = show([], [j.to_dict() for j in jobs], later)
    assert out == ref("E03_squeue_after_cancel.txt")


def test_e09_final_empty() -> None:
    done = [job(1, "wrap", state=JobState.CANCELLED).to_dict()]
    assert show([], done, T0) == ref("E09_squeue_final.txt")


# ---- ordering measured on Slurm 22.05 beyond the captures -------------------

def test_sort_keys_fall_back_to_slurms_base_order() -> None:
    jobs = after_backfill()
    now = BACKFILL + 7
    ids = lambda argv: show(["-h", "-o", "%i"] + argv, jobs, now).split()  # noqa: E731
    assert ids(["-S", "t"]) == ["7_[3-10%2]", "6", "5", "4", "7_1", "9", "7_2", "1", "2", "3"]
    assert ids(["-S", "S"]) == ["1", "2", "3", "7_1", "9", "7_2", "4", "5", "6", "7_[3-10%2]"]
    assert ids(["-S", "-p"]) == ["7_1", "9", "7_2", "1", "2", "3", "7_[3-10%2]", "6", "4", "5"]
    assert ids(["-S", "i"]) == ["1", "2", "3", "4", "5", "6", "7_1", "7_2", "7_[3-10%2]", "9"]


def test_job_id_naming_one_pending_task_shows_that_task() -> None:
    meta = [j for j in busy_queue() if j["job_id"] == 7]  # what the controller answers
    out = show(["-h", "-j", "7_5", "-o", "%i %K %A"], meta, START)
    assert out == "7_5 5 7\n"


# ---- field rules measured on Slurm 22.05 -----------------------------------

def test_field_width_rules() -> None:
    assert fit("7_[1-10%2]", 5, right=True) == "7_[1-"
    assert fit("7_[1-10%2]", 5, right=False) == "7_[1-"
    assert fit("1", 5, right=False) == "1    "
    assert fit(None, 5, right=False) == "     "  # glibc prints nothing for %.5s of NULL
    assert fit(None, 5, right=True) == "(null"
    assert fit(None, 0, right=False) == "(null)"
    assert fit("node-1", 5, right=True, cut=False) == "node-1"


def test_letters_for_a_pending_and_a_running_job() -> None:
    jobs = [j for j in busy_queue() if j["job_id"] in (1, 5)]
    spec = "%a|%K|%N|%S|%e|%p|%B|%z|%h|%Y|%5Y|%.5R|%5R|%o|%c"
    out = show(["-h", "-o", spec], jobs, START + 3)
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(START))
    assert out.splitlines() == [
        "(null)|N/A||N/A|N/A|0.00000000000000|n/a|*:*:*|OK|(null)|     |(JobH|(JobH|(null)|1",
        f"(null)|N/A|node-1|{start}|NONE|0.00000000023283|node-1|*:*:*|OK|(null)|     "
        "|node-1|node-|(null)|1",
    ]


def test_invalid_letter_is_printed_back_and_reported(capsys: pytest.CaptureFixture[str]) -> None:
    jobs = [j for j in busy_queue() if j["job_id"] == 1]
    out = show(["-o", "%i %! %5! x%"], jobs, START)
    assert out == "JOBID %! %5! x\n1 %! %5! x\n"
    assert capsys.readouterr().err == ("squeue: error: Invalid job format specification: !\n" * 2)


def test_long_format_spec() -> None:
    jobs = [j for j in busy_queue() if j["job_id"] == 1]
    out = show(["-O", "JobID:5|,Name:3;"], jobs, START)
    assert out == "JOBID|NAM;\n1    |wra;\n"
    out = show(["-O", "jobid:0,name,state:.9"], jobs, START)
    assert out == "JOBIDNAME                    STATE\n1wrap                  RUNNING\n"


def test_format_parsing() -> None:
    fmt = parse_percent('pre "%.18i",%9P %j', squeue.COLUMNS)
    assert fmt.prefix == 'pre "'
    assert [(f.key, f.width, f.right, f.suffix) for f in fmt.fields] == [
        ("i", 18, True, '",'), ("P", 9, False, " "), ("j", 0, False, "")]
    long = parse_long("jobid:.10,NAME", squeue.LONG_FIELDS)
    assert [(f.key, f.width, f.right) for f in long.fields] == [("jobid", 10, True),
                                                               ("name", 20, False)]


def test_needed_fields_are_few() -> None:
    parsed = squeue.parse_args([])
    assert not isinstance(parsed, int)
    fields = squeue.needed_fields(parsed[0])
    assert "script" not in fields and "steps" not in fields and "alloc" not in fields
    assert {"display_id", "name", "user", "reason", "nodes"} <= set(fields)


# ---- errors ------------------------------------------------------------------

def test_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert squeue.main(["--x"]) == 1
    assert capsys.readouterr().err == ("squeue: unrecognized option '--x'\n"
                                       "Try \"squeue --help\" for more information\n")
    assert squeue.main(["-x"]) == 1
    assert capsys.readouterr().err == ("squeue: invalid option -- 'x'\n"
                                       "Try \"squeue --help\" for more information\n")
    assert squeue.main(["-h", "-n"]) == 1
    assert capsys.readouterr().err == ("squeue: option requires an argument -- 'n'\n"
                                       "Try \"squeue --help\" for more information\n")
    assert squeue.main(["-j", "abc"]) == 1
    assert capsys.readouterr().err == "squeue: error: Invalid job id: abc\n"
    assert squeue.main(["-t", "foo"]) == 1
    assert capsys.readouterr().err.startswith("squeue: error: Invalid job state specified: foo\n")
    assert squeue.main(["-S", "Z"]) == 1
    assert capsys.readouterr().err == "squeue: error: Invalid sort specification: Z\n"
    assert squeue.main(["foo"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "squeue: error: Unrecognized option: foo\n"
    assert captured.out.startswith("Usage: squeue [-A account]")


def test_help_and_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert squeue.main(["--usage"]) == 0
    assert capsys.readouterr().out.startswith("Usage: squeue [-A account] [--clusters names]")
    assert squeue.main(["--help"]) == 0
    assert "  -u, --user=user_name(s)" in capsys.readouterr().out


def test_d16_unknown_job(monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(path: str, **params: Any) -> Any:
        raise client.ApiError(404, "Invalid job id specified")

    monkeypatch.setattr(client, "get", refuse)
    assert squeue.main(["-j", "999999"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ref("D16_squeue_unknown_job.txt")
    assert captured.err == ref("D16_squeue_unknown_job.err.txt")


def test_d19_unknown_user(monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[dict[str, Any]] = []

    def answer(path: str, **params: Any) -> Any:
        asked.append(params)
        return {"jobs": busy_queue(), "now": START}

    monkeypatch.setattr(client, "get", answer)
    assert squeue.main(["-u", "nosuchuser"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ref("D19_squeue_bad_user.txt")
    assert captured.err == ref("D19_squeue_bad_user.err.txt")


def test_query_sent_to_controller(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[dict[str, Any]] = []

    def answer(path: str, **params: Any) -> Any:
        asked.append({"path": path, **params})
        return {"jobs": [], "now": START}

    monkeypatch.setattr(client, "get", answer)
    assert squeue.main(["-p", "debug", "-n", "arr", "-w", "node-1", "-t", "R,pd",
                        "-u", "root"]) == 0
    q = asked[0]
    assert q["path"] == "/v1/jobs"
    assert (q["partitions"], q["names"], q["nodes"], q["users"]) == ("debug", "arr",
                                                                     "node-1", "root")
    assert q["states"] == "RUNNING,PENDING"
    assert "name" in q["fields"].split(",")


def test_no_controller(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    assert squeue.main([]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("squeue: error: no Corral controller is running")
    assert captured.err.count("\n") == 1


def test_missing_capture_fails_unless_opted_out(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """A clone without the captures must not pass every golden test by skipping them."""
    monkeypatch.setattr(reference, "REF", tmp_path)
    monkeypatch.delenv(reference.SKIP_ENV, raising=False)
    with pytest.raises(pytest.fail.Exception, match="C06_squeue.txt is missing"):
        reference.capture("C06_squeue.txt")
    monkeypatch.setenv(reference.SKIP_ENV, "1")
    with pytest.raises(pytest.skip.Exception):
        reference.capture("C06_squeue")
    (tmp_path / "C06_squeue.txt").write_text("x\n")
    assert reference.capture("C06_squeue") == "x\n"


# ---- every -o letter and -O name: right, or refused with Slurm's message ---------------


def _one(spec: str, rec: dict[str, Any], long: bool = False, now: float = T0) -> str:
    parsed = squeue.parse_args(["-h", "-O" if long else "-o", spec])
    assert not isinstance(parsed, int)
    return squeue.format_jobs([rec], now, parsed[0])


def _rec(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"job_id": 5, "display_id": "5", "state": "PENDING",
                            "partition": "debug", "name": "n", "user": "root", "uid": 0,
                            "submit_time": T0 - 60, "work_dir": "/w", "num_nodes": 1}
    base.update(kw)
    return base


def test_min_cpus_is_per_node() -> None:
    assert _one("%c", _rec(ntasks_per_node=3, cpus_per_task=2, num_tasks=3)) == "6\n"
    assert _one("%c", _rec(cpus_per_task=4)) == "4\n"
    assert _one("mincpus", _rec(ntasks_per_node=3, cpus_per_task=2, num_tasks=3),
                long=True).strip() == "6"
    assert _one("cpus-per-task", _rec(ntasks_per_node=3, cpus_per_task=2), long=True
                ).strip() == "2"
    parsed = squeue.parse_args(["-O", "cpus-per-task,cpuspertask"])
    assert not isinstance(parsed, int)
    assert squeue.format_jobs([], T0, parsed[0]).split() == ["CPUS_PER_TASK", "CPUS_PER_TASK"]


def test_long_only_fields() -> None:
    rec = _rec(state="FAILED", exit_code=3, term_signal=0, num_tasks=4, ntasks_per_node=2,
               num_nodes=2, restart_count=1, start_time=T0 - 30, end_time=T0 - 10,
               eligible_time=T0 - 60, stdout="/w/out-%j.txt", batch=True, requeue=False)
    spec = ("exit_code:|,numtasks:|,ntpernode:|,restartcnt:|,requeue:|,batchflag:|,"
            "pendingtime:|,stdout:|,stderr:|,reason:|,reasonlist:|,maxnodes")
    values = _one(spec, rec, long=True).replace(" ", "").rstrip("\n").split("|")
    assert values == ["3:0", "4", "2", "1", "0", "1", "30", "/w/out-%j.txt",
                      "/w/out-%j.txt", "NonZeroExitCode", "(NonZeroExitCode)", "2"]
    assert _one("tres-alloc:60", _rec(num_tasks=2, cpus_per_task=2, mem_per_cpu=1024,
                                      gpus_per_node=1), long=True).rstrip() == \
        "cpu=4,mem=4G,node=1,billing=4,gres/gpu=1"


def test_unknown_long_field_refused(capsys: pytest.CaptureFixture[str]) -> None:
    parsed = squeue.parse_args(["-O", "jobid,nosuchfield"])
    assert not isinstance(parsed, int)
    assert capsys.readouterr().err == "squeue: error: Invalid job format specification: " \
        "nosuchfield\n"


def test_begin_time_is_start_time() -> None:
    rec = _rec(begin_time=T0 + 3600, reason="BeginTime", time_limit=600)
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(T0 + 3600))
    end = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(T0 + 4200))
    assert _one("%S|%e|%R", rec) == f"{start}|{end}|(BeginTime)\n"
    assert _one("eligibletime", rec, long=True).strip() == start


def test_features_and_exec_host() -> None:
    assert _one("%f", _rec(constraint="a100&ib")) == "a100&ib\n"
    assert _one("%f", _rec()) == "(null)\n"
    assert _one("%B", _rec(state="RUNNING", batch=False, submit_host="login1",
                           nodes=["node-1"])) == "login1\n"
    assert _one("%B", _rec(state="RUNNING", batch_host="node-1", nodes=["node-1"])) == "node-1\n"


def test_jobs_in_hidden_partitions_need_all(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    jobs = [_rec(job_id=1, display_id="1", partition="open"),
            _rec(job_id=2, display_id="2", partition="secret")]
    answers = {"/v1/jobs": {"jobs": jobs, "now": T0},
               "/v1/partitions": {"partitions": [{"name": "open"},
                                                 {"name": "secret", "hidden": True}]}}
    monkeypatch.setattr(client, "get", lambda path, **kw: answers[path])
    monkeypatch.delenv("SLURM_CLUSTERS", raising=False)
    for argv, shown in ((["-h", "-o", "%i"], ["1"]), (["-a", "-h", "-o", "%i"], ["1", "2"]),
                        (["-h", "-p", "secret,open", "-o", "%i"], ["1", "2"]),
                        (["-h", "-j", "1,2", "-o", "%i"], ["1", "2"]),
                        (["-a", "--hide", "-h", "-o", "%i"], ["1"])):
        assert squeue.main(argv) == 0
        assert sorted(capsys.readouterr().out.split()) == shown, argv


def test_account_filter(monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    jobs = [_rec(job_id=1, display_id="1", account="smithlab"),
            _rec(job_id=2, display_id="2", account="students"),
            _rec(job_id=3, display_id="3", account="other"),
            _rec(job_id=4, display_id="4")]
    asked: list[dict[str, Any]] = []

    def answer(path: str, **params: Any) -> Any:
        if path == "/v1/partitions":
            return {"partitions": [{"name": "debug"}]}
        asked.append(params)
        return {"jobs": jobs, "now": T0}

    monkeypatch.setattr(client, "get", answer)
    monkeypatch.delenv("SLURM_CLUSTERS", raising=False)
    # exact names (no sub-accounts), a list, without case, as Slurm's squeue -A
    for argv, shown in ((["-A", "smithlab"], ["1"]), (["--account=smithlab,Students"], ["1", "2"]),
                        (["-A", "SMITHLAB"], ["1"]), (["-A", "nosuch"], []),
                        (["--accounts", "students"], ["2"]), (["--acc=other"], ["3"]),
                        ([], ["1", "2", "3", "4"])):
        assert squeue.main(["-h", "-o", "%i", *argv]) == 0
        assert sorted(capsys.readouterr().out.split()) == shown, argv
        # the account is asked for although the format does not print it
        assert ("account" in asked[-1]["fields"].split(",")) == bool(argv), argv
    assert "accounts" not in asked[-1]
    assert squeue.main(["--help"]) == 0
    assert "  -A, --account=account(s)" in capsys.readouterr().out
