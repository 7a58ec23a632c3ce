"""Bounded field widths, escaped control characters and -M/--clusters (issue 7, item 6)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.cli import client, fmt, sacct, scontrol, sinfo, squeue


def test_escape_control_characters() -> None:
    assert fmt.escape("plain name é 中") == "plain name é 中"
    assert fmt.escape("back\\slash") == "back\\slash"  # printable text is left alone
    assert fmt.escape("\x1b[2J\x1b]0;pwned\x07") == "\\x1b[2J\\x1b]0;pwned\\x07"
    assert fmt.escape("a\tb\nc\rd\x7f") == "a\\tb\\nc\\rd\\x7f"
    assert fmt.escape("\x9b31m") == "\\x9b31m"  # C1 CSI
    assert fmt.escape("evil\u202egnp.exe") == "evil\\u202egnp.exe"  # bidi override
    assert fmt.escape("\U000e0041") == "\\U000e0041"


def test_fit_escapes_and_keeps_whole() -> None:
    assert fmt.fit("a\x1bb", 6, False) == "a\\x1bb"
    value = fmt.fit(fmt.Whole("n\x1b"), 2, True)
    assert value == "n\\x1b"  # node lists are never cut, escaped or not


@pytest.mark.parametrize("digits", ["999999999", "9" * 5000, "000001025"])
def test_widths_are_capped(digits: str) -> None:
    f = fmt.parse_percent(f"%{digits}i %.{digits}j", "ij")
    assert [x.width for x in f.fields] == [fmt.MAX_WIDTH, fmt.MAX_WIDTH]
    f = fmt.parse_long(f"jobid:{digits},name:.{digits}", ["jobid", "name"])
    assert [x.width for x in f.fields] == [fmt.MAX_WIDTH, fmt.MAX_WIDTH]
    fields = sacct.parse_fields(f"jobid%{digits},jobname%-{digits}")
    assert [x.width for x in fields] == [fmt.MAX_WIDTH, -fmt.MAX_WIDTH]
    assert fmt.parse_width("12") == 12


def test_squeue_huge_width_is_bounded() -> None:
    opts, _q = squeue.parse_args(["-o", "%999999999i"])  # type: ignore[misc]
    jobs = [{"job_id": i, "display_id": str(i), "state": "PENDING", "partition": "debug"}
            for i in range(1, 101)]
    out = squeue.format_jobs(jobs, 0.0, opts)
    assert len(out) == 101 * (fmt.MAX_WIDTH + 1)


def test_squeue_escapes_name_comment_reason() -> None:
    opts, _q = squeue.parse_args(["-h", "-o", "%j|%k|%r|%R"])  # type: ignore[misc]
    jobs = [{"job_id": 1, "display_id": "1", "state": "PENDING", "partition": "debug",
             "name": "x\x1b[31m", "comment": "a\nb", "reason": "Bad\x07"}]
    assert squeue.format_jobs(jobs, 0.0, opts) == "x\\x1b[31m|a\\nb|Bad\\x07|(Bad\\x07)\n"


def test_scontrol_and_sacct_escape() -> None:
    job = {"job_id": 5, "name": "n\x1b]0;t\x07", "comment": "c\r", "state": "PENDING",
           "user": "u", "uid": 1, "gid": 1, "partition": "p", "work_dir": "/w"}
    text = scontrol.format_job(job, 0.0)
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "JobName=n\\x1b]0;t\\x07" in text and "Comment=c\\r " in text
    out = sacct.format_sacct([job], sacct.parse_fields("jobname%30,comment%30"),
                             sacct.Context(now=0.0), parsable="P", header=False)
    assert out == "n\\x1b]0;t\\x07|c\\r\n"
    node = {"name": "n1", "cpus": 1, "real_memory": 1, "reason": "disk\x1b[8m"}
    assert "Reason=disk\\x1b[8m" in scontrol.format_node(node)


def test_sinfo_escapes_reason() -> None:
    opts = sinfo.parse_args(["-h", "-o", "%E|%N"])
    assert not isinstance(opts, int)
    nodes = [{"name": "n1", "state_short": "drain", "reason": "x\x1b[1m"}]
    parts = [{"name": "p", "nodes": ["n1"]}]
    sinfo.prepare(opts, nodes, parts)
    assert sinfo.format_sinfo(nodes, parts, 0.0, opts) == "x\\x1b[1m|n1\n"


def test_cluster_error_wording() -> None:
    assert fmt.cluster_error("squeue", "anchor", False, "anchor") is None
    assert fmt.cluster_error("squeue", "ANCHOR,all", False, "anchor") is None
    assert fmt.cluster_error("squeue", "nope", False, "anchor") == (
        "squeue: error: 'nope' can't be reached now, or it is an invalid entry for "
        "--cluster.  Use 'sacctmgr list clusters' to see available clusters.\n")
    assert "invalid entry for SLURM_CLUSTERS." in str(
        fmt.cluster_error("sinfo", "anchor,x", True, "anchor"))


def _fake_get(monkeypatch: pytest.MonkeyPatch, answers: dict[str, Any]) -> None:
    monkeypatch.setattr(client, "get", lambda path, **kw: answers[path])


def test_squeue_unknown_cluster_refused(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    _fake_get(monkeypatch, {"/v1/config": {"cluster_name": "anchor"},
                            "/v1/jobs": {"jobs": [], "now": 0}})
    monkeypatch.delenv("SLURM_CLUSTERS", raising=False)
    assert squeue.main(["--clusters=nope"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "'nope' can't be reached now" in err
    assert squeue.main(["-M", "anchor", "-h"]) == 0
    assert capsys.readouterr().out == "CLUSTER: anchor\n"
    monkeypatch.setenv("SLURM_CLUSTERS", "other")
    assert sinfo.main(["-h"]) == 1
    assert "invalid entry for SLURM_CLUSTERS" in capsys.readouterr().err
