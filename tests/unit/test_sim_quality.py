"""Scheduling-quality levers in `corral sim --policy`: the EASY++ policies reach the pass,
and each job's extra wait against EASY is measured and printed (the bound the README
reports)."""

from __future__ import annotations

import pytest

from corral.admin.main import main as corral_main
from corral.controller.core.settings import sched_params
from corral.model.config import parse_config
from corral.sim.compare import policy_conf, render_excess, wait_excess
from corral.sim.engine import JobRecord, SimResult
from corral.sim.generate import gpu_cluster_conf

LAB = gpu_cluster_conf(4, 8)


def _result(starts: list[float | None]) -> SimResult:
    recs = [JobRecord(i, 0.0, 1, 1, 10.0, i + 1, s) for i, s in enumerate(starts)]
    return SimResult(recs, 8, 8, 1, 0.0)


def test_predicting_policies_reach_the_pass() -> None:
    easy_pp = sched_params(parse_config(policy_conf("easy++", LAB)))
    default_pp = sched_params(parse_config(policy_conf("default++", LAB)))
    assert (easy_pp.max_planned, easy_pp.predict_runtime) == (0, 2)
    assert default_pp.predict_runtime == 2
    assert default_pp.max_planned == sched_params(parse_config(LAB)).max_planned
    assert sched_params(parse_config(policy_conf("easy", LAB))).predict_runtime == 0


def test_extra_wait_against_the_baseline_per_job() -> None:
    easy = _result([0, 10, 50, None, 5])
    other = _result([30, 0, 50, 7, None])  # job 0 waits 30 s longer, job 1 10 s less
    ex = wait_excess(other, easy)
    assert (ex.max_extra, ex.worse, ex.both) == (30, 1, 3)
    assert ex.p99_extra == pytest.approx(29.4)  # between 0 and 30, near the top
    better = wait_excess(_result([0, 0, 0, 0, 0]), easy)
    assert (better.max_extra, better.worse) == (0, 0)
    text = render_excess(["easy", "other"], [easy, other])
    assert text.splitlines()[3].split() == ["other", "30", "29", "1/3"]
    assert render_excess(["default", "other"], [easy, other]) == ""


def test_cli_prints_waits_against_easy(capsys: pytest.CaptureFixture[str]) -> None:
    assert corral_main(["sim", "lab:40:2", "--policy", "easy,default,easy++"]) == 0
    out = capsys.readouterr().out
    assert "waits against easy, per job (s)" in out
    block = out.split("waits against easy, per job (s)\n")[1].splitlines()
    assert block[0].split()[:2] == ["policy", "max"]
    assert [ln.split()[0] for ln in block[1:3]] == ["default", "easy++"]
