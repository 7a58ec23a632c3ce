"""sshare and sprio output from the controller's data (the columns and widths of Slurm
22.05; the e2e tests run them against a live cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.cli import client, sprio, sshare

SHARE_ROWS: dict[str, Any] = {"fair_tree": True, "rows": [
    {"depth": 0, "account": "root", "user": "", "raw_shares": 1, "norm_shares": 1.0,
     "raw_usage": 5400.7, "norm_usage": 1.0, "effective_usage": 1.0, "level_fs": 0.0,
     "fairshare": 0.0},
    {"depth": 1, "account": "lab", "user": "", "raw_shares": 1, "norm_shares": 1.0,
     "raw_usage": 5400.7, "norm_usage": 1.0, "effective_usage": 1.0, "level_fs": 1.0,
     "fairshare": 0.0, "grp_tres_mins": {"gres/gpu": 600}},
    {"depth": 2, "account": "lab", "user": "ann", "raw_shares": 1, "norm_shares": 0.5,
     "raw_usage": 5400.7, "norm_usage": 1.0, "effective_usage": 1.0, "level_fs": 0.5,
     "fairshare": 0.5},
    {"depth": 2, "account": "lab", "user": "ben", "raw_shares": 1, "norm_shares": 0.5,
     "raw_usage": 0.0, "norm_usage": 0.0, "effective_usage": 0.0, "level_fs": "inf",
     "fairshare": 1.0},
]}
PRIO: dict[str, Any] = {
    "weights": {"age": 1000, "assoc": 0, "fairshare": 10000, "job_size": 0, "partition": 0,
                "qos": 0, "tres": {"gres/gpu": 2000}},
    "jobs": [{"job_id": 7, "display_id": "7", "partition": "debug", "user": "ann",
              "account": "lab", "qos": "normal", "priority": 7500, "site": 0, "age": 0.5,
              "assoc": 0.0, "fairshare": 0.5, "job_size": 0.0, "partition_factor": 1.0,
              "qos_factor": 0.0, "nice": 0, "tres": {"gres/gpu": 0.5}}]}


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> None:
    def get(path: str, **_: Any) -> Any:
        return SHARE_ROWS if path == "/v1/sshare" else PRIO
    monkeypatch.setattr(client, "get", get)
    monkeypatch.setattr(sshare, "_caller", lambda: "ann")


def test_sshare_default_shows_accounts_and_the_callers_lines(
        answers: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert sshare.main([]) == 0
    assert capsys.readouterr().out == (
        "Account                    User  RawShares  NormShares    RawUsage  EffectvUsage"
        "  FairShare \n"
        "-------------------- ---------- ---------- ----------- ----------- ------------- "
        "---------- \n"
        + "root".ljust(20) + " " + "".rjust(10) + " " + "".rjust(10) + " "
        + "0.000000".rjust(11) + " " + "5400".rjust(11) + " " + "1.000000".rjust(13) + " "
        + "".rjust(10) + " \n"
        +
        " lab                                     1    1.000000        5400      1.000000"
        "            \n"
        "  lab                       ann          1    0.500000        5400      1.000000"
        "   0.500000 \n")


def test_sshare_all_parsable_format_and_long(answers: None,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert sshare.main(["-a", "-P", "-n", "-o", "Account,User,FairShare,LevelFS"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "root|||", " lab|||", "  lab|ann|0.500000|0.500000", "  lab|ben|1.000000|inf"]
    assert sshare.main(["-l", "-u", "ben", "-p"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|"
                      "FairShare|LevelFS|GrpTRESMins|TRESRunMins|")
    assert out[2] == " lab||1|1.000000|5400|1.000000|1.000000|||gres/gpu=600||"
    assert sshare.main(["-o", "bogus"]) == 1
    assert "Invalid field requested" in capsys.readouterr().err


def test_sprio_columns_follow_the_weights(answers: None,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert sprio.main([]) == 0
    assert capsys.readouterr().out == (
        "          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE"
        "                 TRES\n"
        "              7 debug           7500          0        500       5000"
        "        gres/gpu=1000\n")
    assert sprio.main(["-w", "-h"]) == 0
    assert capsys.readouterr().out.split() == ["Weights", "1", "1000", "10000", "gres/gpu=2000"]
    assert sprio.main(["-n", "-h", "-o", "%i %f %u"]) == 0
    assert capsys.readouterr().out == "7 0.5000000 ann\n"
    assert sprio.main(["-j", "9"]) == 0
    assert capsys.readouterr().err == "Unable to find jobs matching user/id(s) specified\n"
    assert sprio.main(["-o", "%Z"]) == 1
