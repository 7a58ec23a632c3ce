"""sstat's own field table: -e lists all of Slurm 22.05's sstat fields, -o matches them."""

from __future__ import annotations

import re

import pytest

from corral.cli import sstat


def test_helpformat_lists_every_field_four_to_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert sstat.main(["-e"]) == 0
    out = capsys.readouterr().out
    names = out.split()
    assert len(names) == 51 == len(set(names))
    assert names[:3] == ["AveCPU", "AveCPUFreq", "AveDiskRead"]
    assert names[-1] == "TRESUsageOutTot"
    for extra in ("ConsumedEnergyRaw", "Nodelist", "Pids", "ReqCPUFreq"):
        assert extra in names
    lines = out.splitlines()
    assert len(lines) == 13 and lines[0].startswith(f"{'AveCPU':<19} {'AveCPUFreq':<19} ")
    # Slurm's own test of sstat -e: fifty names or more, nothing else
    assert re.search(r"^(?:\w+\s+){50,}$", out)


def test_format_matches_sstat_names_by_prefix_in_sstat_order() -> None:
    fields = sstat.parse_stat_fields("jobid,nodel,pid,avedisk,reqcpufreq,ntasks%-4")
    assert [f.name for f in fields] == ["JobID", "Nodelist", "Pids", "AveDiskRead",
                                        "ReqCPUFreq", "NTasks"]
    # sstat's widths: Nodelist and Pids 20, AveDiskRead 12 (sacct's is 14)
    assert [f.width for f in fields][1:4] == [20, 20, 12]
    assert fields[5].width == -4
    assert sstat.parse_stat_fields("maxrss%0")[0].width == sstat.parse_stat_fields("maxrss")[0].width


def test_format_refuses_unknown_field(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(sstat.UsageError):
        sstat.parse_stat_fields("jobid,elapsed")  # a sacct field, not an sstat one
    assert sstat.main(["-j", "1", "-o", "jobid,bogus%5"]) == 1
    assert capsys.readouterr().err == 'sstat: error: Invalid field requested: "bogus"\n'


def test_version_is_the_other_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert sstat.main(["--version"]) == 0
    assert capsys.readouterr().out == "slurm 22.05.8\n"


def test_sdiag_version_is_the_other_commands(capsys: pytest.CaptureFixture[str]) -> None:
    from corral.cli import sdiag

    assert sdiag.main(["-V"]) == 0
    assert capsys.readouterr().out == "slurm 22.05.8\n"
