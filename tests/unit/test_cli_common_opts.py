"""--help, --usage and -V/--version of sshare, sprio, sreport and sacctmgr, answered by one
helper (cli/common_opts.py) without asking the controller."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.cli import common_opts, sacctmgr, sprio, sreport, sshare


def test_helper_answers_only_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    ask = common_opts.answer_info_option
    assert ask("--help", "H\n", "U\n") and capsys.readouterr().out == "H\n"
    assert ask("--usage", "H\n", "U\n") and capsys.readouterr().out == "U\n"
    for opt in ("-V", "--version"):
        assert ask(opt, "H\n", "U\n") and capsys.readouterr().out == "slurm 22.05.8\n"
    assert not ask("-l", "H\n", "U\n") and capsys.readouterr().out == ""
    # a command that answers -h with its help, and has no --usage of its own
    assert ask("-h", "H\n", help_opts=("-h", "--help"), usage_opts=())
    assert capsys.readouterr().out == "H\n"
    assert not ask("--usage", "H\n", help_opts=("-h", "--help"), usage_opts=())


@pytest.fixture(autouse=True)
def no_controller(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "none"))  # any request would fail


@pytest.mark.parametrize(("argv", "expected"), [
    (["--help"], sshare.HELP), (["--usage"], sshare.USAGE), (["-l", "--help"], sshare.HELP),
    (["-V"], "slurm 22.05.8\n"), (["--version"], "slurm 22.05.8\n")])
def test_sshare(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert sshare.main(argv) == 0
    assert capsys.readouterr() == (expected, "")


@pytest.mark.parametrize(("argv", "expected"), [
    (["--help"], sprio.HELP), (["--usage"], sprio.USAGE), (["-V"], "slurm 22.05.8\n"),
    (["--version"], "slurm 22.05.8\n")])
def test_sprio(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert sprio.main(argv) == 0
    assert capsys.readouterr() == (expected, "")


@pytest.mark.parametrize(("argv", "expected"), [
    (["-h"], sreport.USAGE), (["--help"], sreport.USAGE), (["--usage"], sreport.USAGE),
    (["-V"], "slurm 22.05.8\n"), (["--version"], "slurm 22.05.8\n")])
def test_sreport(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert sreport.main(argv) == 0
    assert capsys.readouterr() == (expected, "")


@pytest.mark.parametrize(("argv", "expected"), [
    (["-h"], sacctmgr.usage()), (["--help"], sacctmgr.usage()), (["help"], sacctmgr.usage()),
    (["--usage"], sacctmgr.usage()),  # sacctmgr.c maps --usage to -h
    (["-V"], "slurm 22.05.8\n"), (["--version"], "slurm 22.05.8\n")])
def test_sacctmgr(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert sacctmgr.main(argv) == 0
    assert capsys.readouterr() == (expected, "")
