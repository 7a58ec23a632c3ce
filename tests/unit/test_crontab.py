"""model/crontab.py: Slurm's scrontab file format and next-start times."""

from datetime import datetime

import pytest

from corral.model.crontab import (
    CronError,
    CrontabLineError,
    line_set,
    mark_lines,
    next_start,
    parse_cron_line,
    parse_crontab,
)


def nxt(spec: str, now: str) -> str:
    e = parse_cron_line(spec + " cmd")
    return next_start(e, datetime.fromisoformat(now)).isoformat(" ", "minutes")


def test_every_minute_never_this_minute():
    assert nxt("* * * * *", "2026-11-27 05:00:00") == "2026-11-27 05:01"
    assert nxt("* * * * *", "2026-11-27 05:00:59") == "2026-11-27 05:01"
    assert nxt("* * * * *", "2026-12-31 23:59:30") == "2027-01-01 00:00"


def test_lists_ranges_steps():
    assert nxt("5,10-12 * * * *", "2026-11-27 05:10:00") == "2026-11-27 05:11"
    assert nxt("5,10-12 * * * *", "2026-11-27 05:12:00") == "2026-11-27 06:05"
    assert nxt("*/15 * * * *", "2026-11-27 05:16:00") == "2026-11-27 05:30"
    # Slurm's step keeps values on 0 + k*step for minutes, whatever the range's start
    assert parse_cron_line("1-10/2 * * * * x").minute == frozenset({2, 4, 6, 8, 10})
    assert parse_cron_line("* * */10 * * x").dom == frozenset({1, 11, 21, 31})
    assert nxt("0 3 * * *", "2026-11-27 05:00:00") == "2026-11-28 03:00"


def test_names_and_wrapping():
    e = parse_cron_line("60 24 * Feb sun x")
    assert e.minute == {0} and e.hour == {0} and e.month == {2} and e.dow == {0}
    assert nxt("0 0 * * fri", "2026-11-27 05:00:00") == "2026-12-04 00:00"  # Fri 27 Nov
    assert nxt("0 12 1 jan *", "2026-11-27 05:00:00") == "2027-01-01 12:00"
    with pytest.raises(CronError, match="bad day specification"):
        parse_cron_line("* * * * xyz x")
    with pytest.raises(CronError, match="bad month specification"):
        parse_cron_line("* * * foo * x")
    with pytest.raises(CronError):
        parse_cron_line("* * * * mon-fri x")  # Slurm takes a name alone


def test_either_day_field_rule():
    # both given: the 1st of the month OR a Monday (Vixie cron, as Slurm)
    assert nxt("0 0 1 * mon", "2026-11-27 05:00:00") == "2026-11-30 00:00"  # a Monday
    assert nxt("0 0 1 * mon", "2026-11-30 05:00:00") == "2026-12-01 00:00"
    # one of them a bare *: only the other counts
    assert nxt("0 0 * * mon", "2026-11-30 05:00:00") == "2026-12-07 00:00"
    assert nxt("0 0 1 * *", "2026-11-30 05:00:00") == "2026-12-01 00:00"
    # month restricts both
    assert nxt("0 0 13 jan fri", "2026-11-27 05:00:00") == "2027-01-01 00:00"


def test_keywords():
    assert parse_cron_line("@daily x").spec() == "0 0 * * *"
    assert parse_cron_line("@midnight x").spec() == "0 0 * * *"
    assert parse_cron_line("@hourly x").spec() == "0 0-23 * * *"
    assert parse_cron_line("@weekly x").spec() == "0 0 * * 0"
    assert parse_cron_line("@monthly x").spec() == "0 0 1 * *"
    assert parse_cron_line("@yearly x").spec() == parse_cron_line("@annually x").spec() \
        == "0 0 1 1 *"
    assert nxt("@yearly", "2026-11-27 05:00:00") == "2027-01-01 00:00"
    with pytest.raises(CronError, match="invalid @ line"):
        parse_cron_line("@often x")


def test_impossible_days_and_leap_day():
    with pytest.raises(CronError):
        parse_cron_line("0 0 31 apr * x")
    with pytest.raises(CronError):
        parse_cron_line("0 0 30 feb * x")
    assert nxt("0 0 29 feb *", "2026-11-27 05:00:00") == "2028-02-29 00:00"


def test_bad_fields():
    for spec, msg in (("* * * * ", "unexpected end of line"), ("* * * *", "broken"), ("*/1 * * * * x", "bad step"),
                      ("*/61 * * * * x", "bad step"), ("61 * * * * x", "broken"),
                      ("a * * * * x", "broken")):
        with pytest.raises(CronError, match=msg):
            parse_cron_line(spec)


def test_spec_rebuilt():
    assert parse_cron_line("*/20 1,2,3 * * * x").spec() == "0,20,40 1-3 * * *"
    assert parse_cron_line("* * * * * echo hi").spec() == "* * * * *"


def test_file():
    text = ("# comment\n\nFOO = bar\n#SCRON -t 1\n#SCRON --job-name=j\n"
            "*/5 * * * * echo $FOO\n   @daily   run me\n")
    items = parse_crontab(text)
    assert [(i.line_start, i.line_end) for i in items] == [(4, 6), (7, 7)]
    assert items[0].options == [" -t 1", " --job-name=j"]
    assert items[0].entry.command == "echo bar"
    assert items[1].entry.command == "run me" and items[1].options == []
    with pytest.raises(CrontabLineError) as e:
        parse_crontab("* * * * * ok\n\nnot a cron line\n")
    assert e.value.lineno == 3


def test_marks():
    assert mark_lines("a\nb\nc", line_set("2-3,"), "#BAD: ") == "a\n#BAD: b\n#BAD: c"
