"""SLURM_TIME_FORMAT: model/timefmt.py's formats and the commands that print times."""

from __future__ import annotations

import calendar
import time

import pytest

from corral.cli import fmt, sacct, scontrol, squeue
from corral.model.timefmt import format_timestamp, time_format_error
from corral.model.timeparse import TimeParseError, parse_time

pytestmark = pytest.mark.usefixtures("utc_tz")  # (tests/unit/conftest.py)


def at(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S")))


NOW = at("2026-11-25 12:00:00")  # a Wednesday


def test_standard_and_strftime() -> None:
    t = at("2026-11-23 01:10:49")
    assert format_timestamp(t) == "2026-11-23T01:10:49"
    assert format_timestamp(t, spec="standard") == "2026-11-23T01:10:49"
    assert format_timestamp(t, spec="") == "2026-11-23T01:10:49"
    assert format_timestamp(t, spec="%d %H:%M:%S") == "23 01:10:49"
    assert format_timestamp(t, spec="%s") == str(int(t))
    assert format_timestamp(None, spec="%s") == "Unknown"
    assert format_timestamp(0, spec="relative", none="N/A") == "N/A"


@pytest.mark.parametrize(("when", "shown"), [
    ("2026-11-25 09:05:03", "09:05:03"),
    ("2026-11-24 23:59:00", "Ystday 23:59"),
    ("2026-11-26 08:00:00", "Tomorr 08:00"),
    ("2026-11-23 10:00:00", "23 Nov 10:00"),  # two days ago: only the next days are "near"
    ("2026-11-27 10:00:00", "Fri 10:00"),
    ("2026-12-01 10:00:00", "Tue 10:00"),  # six days ahead
    ("2026-12-02 10:00:00", "2 Dec 10:00"),  # seven
    ("2026-01-03 10:00:00", "3 Jan 10:00"),
    ("2025-11-20 10:00:00", "20 Nov 2025"),
    ("2027-01-01 10:00:00", "1 Jan 2027"),  # another year counts as far, as in Slurm
])
def test_relative(when: str, shown: str) -> None:
    assert format_timestamp(at(when), spec="relative", now=NOW) == shown


@pytest.mark.parametrize("spec", ["no-percent", "%Y" + "x" * 40])
def test_invalid_formats(spec: str) -> None:
    assert time_format_error(spec) == f"invalid SLURM_TIME_FORMAT = '{spec}'"
    assert format_timestamp(at("2026-11-23 01:10:49"), spec=spec) == "2026-11-23T01:10:49"
    assert time_format_error("%F %T") is None and time_format_error("relative") is None


def test_invalid_format_reported_once(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SLURM_TIME_FORMAT", "garbage")
    monkeypatch.setattr("sys.argv", ["squeue"])
    fmt._warned_formats.clear()
    assert fmt.stamp(NOW, NOW) == "2026-11-25T12:00:00"
    assert fmt.stamp(NOW, NOW) == "2026-11-25T12:00:00"
    assert capsys.readouterr().err == "squeue: error: invalid SLURM_TIME_FORMAT = 'garbage'\n"


def _job() -> dict[str, object]:
    return {"job_id": 3, "display_id": "3", "name": "t", "user": "root", "uid": 0, "gid": 0,
            "partition": "debug", "state": "RUNNING", "submit_time": at("2026-11-25 10:00:00"),
            "eligible_time": at("2026-11-25 10:00:00"), "start_time": at("2026-11-25 10:00:05"),
            "time_limit": 3600, "nodes": ["node-1"], "work_dir": "/w"}


def test_commands_follow_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_TIME_FORMAT", "%d %H:%M:%S")
    opts, _q = squeue.parse_args(["-h", "-o", "%V|%S|%e"])  # type: ignore[misc]
    assert squeue.format_jobs([_job()], NOW, opts) == "25 10:00:00|25 10:00:05|25 11:00:05\n"
    text = scontrol.format_job(_job(), NOW)
    assert "SubmitTime=25 10:00:00 EligibleTime=25 10:00:00" in text
    assert "StartTime=25 10:00:05 EndTime=25 11:00:05" in text
    out = sacct.format_sacct([_job()], sacct.parse_fields("submit,start"),
                             sacct.Context(now=NOW), parsable="P", header=False)
    assert out == "25 10:00:00|25 10:00:05\n"
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    assert squeue.format_jobs([_job()], NOW, opts) == "10:00:00|10:00:05|11:00:05\n"
    node = {"name": "n1", "cpus": 1, "real_memory": 1, "reason": "r", "reason_user": "root",
            "reason_time": at("2026-11-24 08:00:00")}
    assert "Reason=r [root@Ystday 08:00]" in scontrol.format_node(node, now=NOW)


# ---- Slurm's parse_time forms (--begin, scontrol update StartTime=), model/timeparse -----

@pytest.mark.parametrize(("text", "when"), [
    ("now", "2026-11-25 12:00:00"),
    ("now+60", "2026-11-25 12:01:00"),
    ("now+1hour", "2026-11-25 13:00:00"),
    ("now+2hours", "2026-11-25 14:00:00"),
    ("now + 3 days", "2026-11-28 12:00:00"),
    ("now+1week", "2026-12-02 12:00:00"),
    ("now+90minutes", "2026-11-25 13:30:00"),
    ("now+5seconds", "2026-11-25 12:00:05"),
    ("16:00", "2026-11-25 16:00:00"),
    ("11:00", "2026-11-26 11:00:00"),  # passed today: tomorrow
    ("16:30:15", "2026-11-25 16:30:15"),
    ("4:00 PM", "2026-11-25 16:00:00"),
    ("4:00pm", "2026-11-25 16:00:00"),
    ("12:00 AM", "2026-11-26 00:00:00"),
    ("12:30PM", "2026-11-25 12:30:00"),
    ("midnight", "2026-11-26 00:00:00"),
    ("noon", "2026-11-26 12:00:00"),  # 12:00 is not after 12:00
    ("elevenses", "2026-11-26 11:00:00"),
    ("fika", "2026-11-25 15:00:00"),
    ("teatime", "2026-11-25 16:00:00"),
    ("today", "2026-11-25 00:00:00"),
    ("tomorrow", "2026-11-26 00:00:00"),
    ("tomorrow 16:00", "2026-11-26 16:00:00"),
    ("1224", "2026-12-24 00:00:00"),
    ("122427", "2027-12-24 00:00:00"),
    ("12/24", "2026-12-24 00:00:00"),
    ("12/24/27", "2027-12-24 00:00:00"),
    ("12.24", "2026-12-24 00:00:00"),
    ("12.24.27", "2027-12-24 00:00:00"),
    ("01/05", "2027-01-05 00:00:00"),  # passed this year: next year's
    ("2026-12-01", "2026-12-01 00:00:00"),
    ("2026-12-01T08:30", "2026-12-01 08:30:00"),
    ("2026-12-01T08:30:45", "2026-12-01 08:30:45"),
    ("16:00 12/24/26", "2026-12-24 16:00:00"),
    ("12/24/26-16:00", "2026-12-24 16:00:00"),
    ("12/24-16:00:30", "2026-12-24 16:00:30"),
    ("uts1800000000", "2027-01-15 08:00:00"),
])
def test_parse_begin_forms(text: str, when: str) -> None:
    assert parse_time(text, NOW) == at(when), text


@pytest.mark.parametrize("text", [
    "", "whenever", "now+", "now+1h", "now+1x", "now1", "25:00", "12:60", "13:00 PM",
    "13/01", "12/32", "12/24/2026", "2026-13-01", "Tomorrow", "uts12", "16", "noonish",
])
def test_parse_begin_refusals(text: str) -> None:
    with pytest.raises(TimeParseError):
        parse_time(text, NOW)
