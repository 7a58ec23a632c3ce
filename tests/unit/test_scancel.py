"""scancel: argument parsing, what it asks the controller, and Slurm 22.05's messages."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import pytest

from corral.cli import client, scancel
from corral.model.job import Job, JobState
from tests.unit import reference


def ref(name: str) -> str:
    return reference.capture(name)


class FakeController:
    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []
        self.calls: list[tuple[str, str, Any]] = []
        self.fail: dict[str, client.ApiError] = {}

    def get(self, path: str, **params: Any) -> Any:
        self.calls.append(("GET", path, {k: v for k, v in params.items() if v is not None}))
        assert path == "/v1/jobs"
        jobs = self.jobs
        if params.get("users"):
            jobs = [j for j in jobs if j["user"] in params["users"].split(",")]
        if params.get("states"):
            jobs = [j for j in jobs if j["state"] in params["states"].split(",")]
        if params.get("ids"):
            ids = params["ids"].split(",")
            jobs = [j for j in jobs if str(j["job_id"]) in ids]
            if not jobs:
                raise client.ApiError(404, "Invalid job id specified")
        return {"jobs": jobs, "now": 0.0}

    def post(self, path: str, body: Any = None) -> Any:
        self.calls.append(("POST", path, body))
        if path in self.fail:
            raise self.fail[path]
        return {"ok": True}

    def posts(self) -> list[tuple[str, Any]]:
        return [(p, b) for m, p, b in self.calls if m == "POST"]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeController:
    ctl = FakeController()
    monkeypatch.setattr(client, "get", ctl.get)
    monkeypatch.setattr(client, "post", ctl.post)
    return ctl


CANCEL = {"signal": 9, "batch_only": False, "full": False, "cancel": True}
UNKNOWN = client.ApiError(404, "Invalid job id specified")


def test_e01_e02_cancel_by_id(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert scancel.main(["7_2"]) == 0
    assert capsys.readouterr() == (ref("E01_scancel_array_task"), "")
    assert scancel.main(["1"]) == 0
    assert capsys.readouterr() == (ref("E02_scancel"), "")
    assert scancel.main(["7_[1-3]", "8"]) == 0
    assert fake.posts() == [("/v1/jobs/7_2/signal", CANCEL), ("/v1/jobs/1/signal", CANCEL),
                            ("/v1/jobs/7_%5B1-3%5D/signal", CANCEL),
                            ("/v1/jobs/8/signal", CANCEL)]


def test_d13_unknown_job_is_silent(fake: FakeController,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    fake.fail["/v1/jobs/999999/signal"] = UNKNOWN
    assert scancel.main(["999999"]) == 0
    assert capsys.readouterr() == (ref("D13_scancel_unknown_job"), "")


def test_d13b_verbose_unknown_job(fake: FakeController,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    fake.fail["/v1/jobs/999999/signal"] = UNKNOWN
    assert scancel.main(["-v", "999999"]) == 0
    out, err = capsys.readouterr()
    assert out == ref("D13b_scancel_v_unknown_job")
    assert err == ref("D13b_scancel_v_unknown_job.err")


def test_d14_bad_id(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert scancel.main(["abc"]) == 1
    out, err = capsys.readouterr()
    assert out == ref("D14_scancel_bad_id")
    assert err == ref("D14_scancel_bad_id.err")
    assert not fake.calls


def test_permission_denied(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    fake.fail["/v1/jobs/12/signal"] = client.ApiError(403, "Access/permission denied")
    assert scancel.main(["12", "13"]) == 1
    assert capsys.readouterr().err == \
        "scancel: error: Kill job error on job id 12: Access/permission denied\n"
    assert [p for p, _ in fake.posts()] == ["/v1/jobs/12/signal", "/v1/jobs/13/signal"]


@pytest.mark.parametrize("text,expected", [
    ("12", scancel.JobRef("12")),
    ("7_2", scancel.JobRef("7_2")),
    ("7_[1-3]", scancel.JobRef("7_[1-3]")),
    ("7_[1,3,5-9]", scancel.JobRef("7_[1,3,5-9]")),
    ("12.0", scancel.JobRef("12", "0")),
    ("7_2.3", scancel.JobRef("7_2", "3")),
])
def test_parse_job_id(text: str, expected: scancel.JobRef) -> None:
    assert scancel.parse_job_id(text) == expected
    assert str(expected) == text


@pytest.mark.parametrize("text", ["abc", "0", "-5", "12.batch", "7_", "7_[]", "7_[1-", "1 2",
                                  "12x", ""])
def test_parse_job_id_rejects(text: str) -> None:
    with pytest.raises(scancel.UsageError, match="^" + re.escape(f"scancel: error: Invalid job id {text}") + "$"):
        scancel.parse_job_id(text)


def test_signals(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert [scancel.parse_signal(s) for s in ("USR1", "sigusr2", "SIGTERM", "9", "kill")] == \
        [10, 12, 15, 9, 9]
    assert scancel.main(["-s", "USR1", "-v", "12"]) == 0
    assert capsys.readouterr().err == "scancel: Signal 10 to job 12\n"
    assert scancel.main(["--signal=TERM", "-b", "13"]) == 0
    assert scancel.main(["-s", "KILL", "-f", "14"]) == 0
    assert fake.posts() == [
        ("/v1/jobs/12/signal", {"signal": 10, "batch_only": False, "full": False,
                                "cancel": False}),
        ("/v1/jobs/13/signal", {"signal": 15, "batch_only": True, "full": False,
                                "cancel": False}),
        ("/v1/jobs/14/signal", {"signal": 9, "batch_only": False, "full": True,
                                "cancel": True}),
    ]
    assert scancel.main(["-s", "BOGUS", "12"]) == 1
    assert capsys.readouterr().err == "scancel: error: Unknown job signal: BOGUS\n"


def job(job_id: int, user: str, state: JobState, **kw: Any) -> dict[str, Any]:
    return Job(job_id=job_id, name=kw.pop("name", "w"), user=user, uid=1000, gid=1000,
               partition="debug", state=state, **kw).to_dict()


def test_filters_fetch_then_signal(fake: FakeController) -> None:
    fake.jobs = [
        job(12, "daemon", JobState.RUNNING),
        job(13, "nobody", JobState.PENDING),
        job(14, "daemon", JobState.PENDING),
        job(20, "daemon", JobState.RUNNING, array_job_id=7, array_task_id=3),
        job(7, "daemon", JobState.PENDING, array_job_id=7, array_tasks=[4, 5, 6, 9]),
    ]
    assert scancel.main(["-u", "root", "-t", "PD,r", "-p", "debug", "-n", "w",
                         "-w", "node-1"]) == 0
    assert fake.calls[0] == ("GET", "/v1/jobs", {
        "users": "root", "states": "PENDING,RUNNING", "partitions": "debug", "names": "w",
        "nodes": "node-1"})
    assert fake.posts() == []  # root has no jobs here
    fake.calls.clear()
    assert scancel.main(["--user=daemon", "--state=pending", "--signal=USR1"]) == 0
    assert [p for p, _ in fake.posts()] == ["/v1/jobs/14/signal",
                                            "/v1/jobs/7_%5B4-6%2C9%5D/signal"]


def test_filter_with_ids_limits_to_matches(fake: FakeController) -> None:
    fake.jobs = [job(12, "daemon", JobState.RUNNING), job(13, "nobody", JobState.RUNNING)]
    assert scancel.main(["-u", "daemon", "12", "13"]) == 0
    assert fake.calls[0][2]["ids"] == "12,13"
    assert [p for p, _ in fake.posts()] == ["/v1/jobs/12/signal"]


def test_me_and_filters_default_to_own_jobs(fake: FakeController,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name
    assert scancel.main(["--me"]) == 0
    assert fake.calls[-1][2] == {"users": me}
    monkeypatch.setattr(scancel.os, "getuid", lambda: 4242)
    monkeypatch.setattr(scancel.pwd, "getpwuid", lambda uid: pwd.struct_passwd(
        ("someone", "x", uid, uid, "", "/", "/bin/sh")))
    assert scancel.main(["-p", "debug"]) == 0
    assert fake.calls[-1][2] == {"users": "someone", "partitions": "debug"}


def test_account_filter(fake: FakeController, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    import pwd

    fake.jobs = [job(12, "daemon", JobState.RUNNING, account="smithlab"),
                 job(13, "ben", JobState.PENDING, account="students"),
                 job(14, "ann", JobState.PENDING, account="other"),
                 job(15, "pi", JobState.PENDING, account="smithlab")]
    # a non-root caller: with -A (and no -u) every user's jobs are asked for, not only its own
    monkeypatch.setattr(scancel.os, "getuid", lambda: 4242)
    monkeypatch.setattr(scancel.pwd, "getpwuid", lambda uid: pwd.struct_passwd(
        ("pi", "x", uid, uid, "", "/", "/bin/sh")))
    assert scancel.main(["-A", "smithlab"]) == 0
    assert fake.calls[0] == ("GET", "/v1/jobs", {})
    # the account exactly: its sub-account students is not included
    assert [p for p, _ in fake.posts()] == ["/v1/jobs/12/signal", "/v1/jobs/15/signal"]
    fake.calls.clear()
    assert scancel.main(["--account=students", "-t", "PD"]) == 0
    assert [p for p, _ in fake.posts()] == ["/v1/jobs/13/signal"]
    fake.calls.clear()
    assert scancel.main(["-A", "SmithLab"]) == 0  # case as given, as in Slurm
    assert fake.posts() == []
    fake.calls.clear()
    assert scancel.main(["-A", "smithlab", "-u", "daemon"]) == 0
    assert fake.calls[0][2] == {"users": "daemon"}
    assert [p for p, _ in fake.posts()] == ["/v1/jobs/12/signal"]
    # refused jobs: one Slurm error line each, exit 1, the others still cancelled
    fake.calls.clear()
    denied = client.ApiError(403, "Access/permission denied")
    fake.fail = {"/v1/jobs/12/signal": denied, "/v1/jobs/15/signal": denied}
    assert scancel.main(["-A", "smithlab"]) == 1
    assert capsys.readouterr().err == (
        "scancel: error: Kill job error on job id 12: Access/permission denied\n"
        "scancel: error: Kill job error on job id 15: Access/permission denied\n")
    assert len(fake.posts()) == 2


def test_interactive(fake: FakeController, monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    fake.jobs = [job(12, "daemon", JobState.RUNNING, name="train"),
                 job(13, "daemon", JobState.RUNNING, name="eval")]
    monkeypatch.setattr("sys.stdin", io.StringIO("y\nn\n"))
    assert scancel.main(["-i", "12", "13"]) == 0
    assert capsys.readouterr().out == ("Cancel job_id=12 name=train partition=debug [y/n]? "
                                       "Cancel job_id=13 name=eval partition=debug [y/n]? ")
    assert [p for p, _ in fake.posts()] == ["/v1/jobs/12/signal"]


def test_usage_errors(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert scancel.main([]) == 1
    assert capsys.readouterr().err == "scancel: error: No job identification provided\n"
    assert scancel.main(["--bogus", "1"]) == 1
    assert capsys.readouterr().err == ("scancel: unrecognized option '--bogus'\n"
                                       'Try "scancel --help" for more information\n')
    assert scancel.main(["-t", "done"]) == 1
    assert capsys.readouterr().err == ("Invalid job state specified: done\n"
                                       "Valid job states are PENDING, RUNNING, and SUSPENDED\n")
    assert scancel.main(["-u", "no-such-user-here"]) == 1
    assert capsys.readouterr().err == "scancel: error: Invalid user name: no-such-user-here\n"
    assert scancel.main(["12.batch"]) == 1
    assert capsys.readouterr().err == "scancel: error: Invalid job id 12.batch\n"
    assert scancel.main(["-q", "normal", "1"]) == 1
    assert capsys.readouterr().err == "scancel: error: --qos is not supported by Corral yet\n"
    assert not fake.calls
    assert scancel.main(["12.0"]) == 0  # a step: signalled through /v1/jobs/12.0/signal
    assert [p for p, _ in fake.posts()] == ["/v1/jobs/12.0/signal"]


def test_version_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert scancel.main(["-V"]) == 0
    assert capsys.readouterr().out == f"slurm {scancel.SLURM_VERSION}\n"
    assert scancel.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--signal" in out and "  -A, --account=account " in out


def test_no_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    assert scancel.main(["12"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("scancel: error: no Corral controller is running for ")
    assert err.count("\n") == 1


TRY_AGAIN = client.ApiError(400, "Job can not be altered now, try again later",
                            {"error": "Job can not be altered now, try again later",
                             "errno": 2020})


def test_signal_to_pending_job_is_retried(fake: FakeController, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Slurm's scancel: a job that cannot take a signal yet is tried again after 5, 6, ...
    seconds, ten tries in all, then reported; jobs that took it are not sent it twice."""
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:  # job 5 starts running during the second wait
            del fake.fail["/v1/jobs/5/signal"]

    monkeypatch.setattr(scancel.time, "sleep", sleep)
    fake.fail["/v1/jobs/5/signal"] = TRY_AGAIN
    fake.fail["/v1/jobs/6/signal"] = TRY_AGAIN
    assert scancel.main(["-v", "-s", "USR1", "4", "5", "6"]) == 1
    posts = [p for p, _ in fake.posts()]
    assert posts.count("/v1/jobs/4/signal") == 1
    assert posts.count("/v1/jobs/5/signal") == 3
    assert posts.count("/v1/jobs/6/signal") == 10
    assert slept == [5, 6, 7, 8, 9, 10, 11, 12, 13]
    err = capsys.readouterr().err
    assert err.count("scancel: Job is in transitional state, retrying\n") == 2 + 9
    assert err.endswith("scancel: error: Kill job error on job id 6: "
                        "Job can not be altered now, try again later\n")


def test_try_again_is_quiet_without_verbose(fake: FakeController,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(scancel.time, "sleep", lambda s: fake.fail.clear())
    fake.fail["/v1/jobs/5/signal"] = TRY_AGAIN
    assert scancel.main(["-s", "USR1", "5"]) == 0
    assert capsys.readouterr() == ("", "")
