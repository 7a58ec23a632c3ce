"""squeue -s/--steps: step ids, -o/-O step fields and the option handling (squeue_steps)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.cli import client, squeue, squeue_steps
from corral.cli.squeue_steps import (
    STEP_FORMAT,
    format_steps,
    parse_step_format,
    parse_step_ids,
    step_records,
)

pytestmark = pytest.mark.usefixtures("utc_tz")  # (tests/unit/conftest.py)

NOW = 1795396249.0


def step(step_id: str, name: str, **kw: Any) -> dict[str, Any]:
    return {"step_id": step_id, "name": name, "state": "RUNNING", "start_time": NOW - 70,
            "end_time": None, "nodes": "node-1", "ntasks": 1, "cpus": 1, **kw}


def jobs() -> list[dict[str, Any]]:
    return [
        {"job_id": 9, "state": "RUNNING", "partition": "debug", "user": "root", "uid": 0,
         "array_job_id": 8, "array_task_id": 1, "steps": [step("0", "x", nodes="node-3")]},
        {"job_id": 7, "state": "RUNNING", "partition": "debug", "user": "root", "uid": 0,
         "array_job_id": None, "array_task_id": None,
         "steps": [step("batch", "batch", start_time=NOW - 100),
                   step("1", "hostname", end_time=NOW - 1),  # finished: not listed
                   step("0", "sleep", nodes="node-[1-2]", ntasks=2, cpus=2)]},
        {"job_id": 5, "state": "PENDING", "partition": "debug", "user": "root", "uid": 0,
         "steps": []},
        {"job_id": 3, "state": "RUNNING", "partition": "a", "user": "alice", "uid": 1001,
         "steps": [step("0", "first")]},
    ]


def test_default_format_and_order() -> None:
    # partition first, then job and step id; an array task's steps as A_T.S
    out = format_steps(step_records(jobs()), NOW, parse_step_format(None, None))
    assert out == (
        "         STEPID     NAME PARTITION     USER      TIME NODELIST\n"
        "            3.0    first         a    alice      1:10 node-1\n"
        "            7.0    sleep     debug     root      1:10 node-[1-2]\n"
        "        7.batch    batch     debug     root      1:40 node-1\n"
        "          8_1.0        x     debug     root      1:10 node-3\n")
    assert STEP_FORMAT == "%.15i %.8j %.9P %.8u %.9M %N"


def test_percent_fields() -> None:
    fmt = parse_step_format("%i|%A|%l|%U|%.10S|%b", None)
    out = format_steps(step_records(jobs(), [(7, None)]), NOW, fmt)
    assert out.splitlines() == [
        "STEPID|TASKS|TIME_LIMIT|UID|START_TIME|TRES_PER_JOB",  # START_TIME: always left
        "7.0|2|UNLIMITED|0|2026-11-23|(null)",
        "7.batch|1|UNLIMITED|0|2026-11-23|(null)"]


def test_invalid_letter_reported_and_printed_back(capsys: pytest.CaptureFixture[str]) -> None:
    fmt = parse_step_format("%i %t", None)
    assert capsys.readouterr().err == "squeue: error: Invalid job step format specification: t\n"
    out = format_steps(step_records(jobs(), [(3, None)]), NOW, fmt, header=False)
    assert out == "3.0 %t\n"


def test_all_keeps_only_step_fields(capsys: pytest.CaptureFixture[str]) -> None:
    fmt = parse_step_format("%all", None)
    assert capsys.readouterr().err == ""
    assert format_steps([], NOW, fmt) == (
        "TRES_PER_JOB|STEPID|NAME|TIME_LIMIT|USER|TASKS|TIME|NODELIST|PARTITION|START_TIME|UID|\n")


def test_long_fields(capsys: pytest.CaptureFixture[str]) -> None:
    fmt = parse_step_format(None, "stepid:8,jobid:.4,arraytaskid:4,numcpus:3,bogus,stepstate:8")
    assert capsys.readouterr().err == \
        "squeue: error: Invalid job step format specification: bogus\n"
    out = format_steps(step_records(jobs(), [(8, None), (7, None)]), NOW, fmt)
    assert out.splitlines() == ["STEPID  JOB_ARRANUMSTATE   ",
                                "7.0        7N/A 2  RUNNING ",
                                "7.batch    7N/A 1  RUNNING ",
                                "8_1.0      91   1  RUNNING "]


def test_step_and_job_filters() -> None:
    ids = [s["step_id"] for s in step_records(jobs(), None, parse_step_ids("7.batch,8_1.0,3.5"))]
    assert ids == ["batch", "0"]
    assert [s["job_id"] for s in step_records(jobs(), [(8, 1)])] == [9]
    assert step_records(jobs(), [(8, 2)]) == []


def test_parse_step_ids_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_step_ids("7.0,12_3.batch") == [(7, None, "0"), (12, 3, "batch")]
    for text, msg in [("7", "7.??"), ("0.1", "0.1"), ("x.1", "x.1"), ("7.y", "7.y")]:
        with pytest.raises(squeue._Exit):
            parse_step_ids(text)
        assert capsys.readouterr().err == f"squeue: error: Invalid job_step id: {msg}\n"


def test_main_state_checked_not_filtering(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[dict[str, str]] = []

    def fake_get(path: str, **params: str) -> dict[str, Any]:
        asked.append(params)
        return {"jobs": jobs(), "now": NOW}

    monkeypatch.setattr(client, "get", fake_get)
    assert squeue._main(["--steps", "--state=RUNNING", "--format=%i", "--noheader",
                         "--job", "7"]) == 0
    assert capsys.readouterr().out == "7.0\n7.batch\n"
    assert asked[-1]["ids"] == "7"
    assert squeue._main(["-s", "-t", "PD", "-h", "-o", "%i", "-p", "a"]) == 0
    assert capsys.readouterr().out == "3.0\n7.0\n7.batch\n8_1.0\n"  # not "PD" only
    assert asked[-1]["partitions"] == "a"  # the controller keeps partition a's jobs
    assert squeue._main(["-s", "-t", "nope"]) == 1
    assert "Invalid job state specified: nope" in capsys.readouterr().err
    assert squeue._main(["-h", "-o", "%i", "-s", "7.0"]) == 0  # the list as an argument
    assert capsys.readouterr().out == "7.0\n"
    assert squeue._main(["-h", "-o", "%i", "--step=8_1.0"]) == 0  # --step: as Slurm's help says
    assert capsys.readouterr().out == "8_1.0\n"


def test_main_unknown_job_lists_nothing(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    def fake_get(path: str, **params: str) -> dict[str, Any]:
        raise client.ApiError(404, "Invalid job id specified")

    monkeypatch.setattr(client, "get", fake_get)
    assert squeue_steps.steps_main(["-s", "-j", "99", "-o", "%i"]) == 0
    assert capsys.readouterr().out == "STEPID\n"


def test_main_format_and_Format_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    assert squeue_steps.steps_main(["-s", "-o", "%i", "-O", "stepid"]) == 1
    assert capsys.readouterr().err == \
        "squeue: error: -O (--Format) is incompatible with -o (--format)\n"
    assert squeue_steps.steps_main(["-s", "-O", "stepid", "-o", "%i"]) == 1
    assert capsys.readouterr().err == \
        "squeue: error: -o (--format) is incompatible with -O (--Format)\n"


def test_array_ids_and_unlimited_limit_cut_to_width() -> None:
    fmt = parse_step_format(None, "arrayjobid:4,arraytaskid:4,timelimit:.5")
    out = format_steps(step_records(jobs(), [(8, None), (7, None)]), NOW, fmt, header=False)
    # a plain job's steps: array job id 0, task N/A; UNLIMITED is cut as Slurm's _print_str cuts
    assert out.splitlines() == ["0   N/A UNLIM", "0   N/A UNLIM", "8   1   UNLIM"]
