"""`--help` and `--usage` of srun, sstat, sdiag and of the commands Corral does not
provide yet (sattach, sbcast, sgather, strigger), checked the way Slurm 22.05's own
testsuite/python checks them: the lines it looks for, exit status 0, text on stdout."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

PROVIDED = ("srun", "sstat", "sdiag")


def _run(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    module = name if name in PROVIDED else "missing"
    call = "main()" if name in PROVIDED else f"{name}()"
    code = (f"import sys; sys.argv = {[name, *args]!r}; "
            f"from corral.cli.{module} import {call.split('(')[0]}; sys.exit({call})")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


CASES = [
    ("srun", "--help", [r"Usage: srun .*?OPTIONS.*?executable.*?args", r"-b, --begin=time",
                        r"-N, --nodes=N", r"-q, --qos=qos", r"--mincpus=n", r"-G, --gpus=n"]),
    ("srun", "--usage", [r"Usage: srun (?:\[-{1,2}.*?\]\s+)+executable \[args\.\.\.\]$"]),
    ("sstat", "--help", [r"sstat \[<OPTION>\]", r"Valid <OPTION> values are:", r"-j, --jobs:"]),
    ("sstat", "--usage", [r"Usage: sstat \[options\] -j <job.*step", r"Use --help for help"]),
    ("sdiag", "--usage", [r"Usage: sdiag(?:\s+\[-{1,2}[^\]]+\])+$"]),
    ("sdiag", "--help", [r"^Usage: sdiag \[OPTIONS\]\n", r"-a, --all +all statistics",
                         r"--usage +display brief usage message\n$"]),
    ("sattach", "--usage", [r"Usage: sattach \[.*\] <jobid\.stepid>$"]),
    ("sattach", "--help", [r"-l, --label +prepend task number", r"-u, --usage +print a brief"]),
    ("sbcast", "--usage", [r"Usage: sbcast (?:\[-+[a-zA-Z-]+]\s)+SOURCE DEST\n$"]),
    ("sbcast", "--help", [r"^Usage: sbcast \[OPTIONS\] SOURCE DEST\n", r"-f, --force +replace"]),
    ("sgather", "--usage", [r"Usage: sgather \[-[A-Za-z]+\] SOURCE DEST$"]),
    ("strigger", "--help", [r"strigger \[--set \| --get \| --clear\] \[OPTIONS\]",
                            r"--set +create a trigger", r"--get +get trigger information",
                            r"--clear +delete a trigger", r"-j, --jobid=",
                            r"-n, --node\[=host\]", r"-v, --verbose +print detailed"]),
    ("strigger", "--usage", [r"^Usage: strigger \[--set \| --get \| --clear \| --version\] "
                             r"\[-[A-Za-z]+\]\n$"]),
]


@pytest.mark.parametrize("name,option,patterns", CASES, ids=[f"{c[0]} {c[1]}" for c in CASES])
def test_help_and_usage_as_slurms_testsuite_checks(name: str, option: str,
                                                   patterns: list[str]) -> None:
    p = _run(name, option)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    missing = [pat for pat in patterns if re.search(pat, p.stdout) is None]
    assert not missing, p.stdout


@pytest.mark.parametrize("name,args", [("strigger", ["--set", "--jobid=1", "--fini"]),
                                       ("sattach", ["5.0"]),
                                       ("sbcast", ["-f", "a", "/tmp/b"]),
                                       ("strigger", ["--", "--help"])])
def test_real_use_of_a_missing_command_still_says_so(name: str, args: list[str]) -> None:
    p = _run(name, *args)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.startswith(f"{name}: error: {name} is not provided by Corral yet")
