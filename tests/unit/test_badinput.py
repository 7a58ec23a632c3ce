"""Bad input refused as Slurm 22.05 refuses it: exact message and exit status.

Run through the real commands (`python -m corral.cli.<cmd>`): every refusal here
happens before any request is sent, so no cluster is needed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from corral.cli.options import (
    CliExit,
    OptionValueError,
    check_constraint,
    check_no_effect_value,
    parse_mbytes,
    parse_priority,
)

SRC = str(Path(__file__).resolve().parents[2] / "src")
NO_CLUSTER = {"CORRAL_HOME": "/nonexistent/corral-home"}


def run(cmd: str, *args: str, stdin: str = "") -> tuple[int, str]:
    env = {**os.environ, **NO_CLUSTER, "PYTHONPATH": SRC}
    env.pop("SLURM_JOB_ID", None)
    p = subprocess.run([sys.executable, "-m", f"corral.cli.{cmd}", *args], input=stdin,
                       capture_output=True, text=True, env=env, timeout=30)
    assert "Traceback" not in p.stderr
    return p.returncode, p.stderr


def sbatch(*args: str) -> tuple[int, str]:
    return run("sbatch", *args, "--wrap=true")


@pytest.mark.parametrize("opt", ["--mem", "--mem-per-cpu", "--mem-per-gpu"])
@pytest.mark.parametrize("value", ["", "1GG", "1.5G", "-1", "G", "4Gx", "4GBB"])
def test_bad_memory_sizes(opt: str, value: str) -> None:
    assert sbatch(f"{opt}={value}") == (255, f"sbatch: error: Invalid {opt} specification\n")


def test_bad_memory_in_directive(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --mem=1GG\ntrue\n")
    assert run("sbatch", str(script)) == (255, "sbatch: error: Invalid --mem specification\n")
    script.write_text("#!/bin/sh\n#SBATCH --mem=\ntrue\n")
    assert run("sbatch", str(script)) == (255, "sbatch: error: Invalid --mem specification\n")


@pytest.mark.parametrize("text, mb", [("4G", 4096), ("4GB", 4096), ("4gb", 4096),
                                      ("1K", 1), ("10", 10), (" 2M", 2), ("+3G", 3072)])
def test_good_memory_sizes(text: str, mb: int) -> None:
    assert parse_mbytes(text) == mb


GRES_ERR = ("sbatch: error: Batch job submission failed: Invalid generic resource (gres) "
            "specification\n")


@pytest.mark.parametrize("spec", ["gpu:-1", "gpu:a100:-1", "gpu::1", "gpu:", "gpu:a:b:c"])
def test_bad_gres(spec: str, tmp_path: Path) -> None:
    assert sbatch(f"--gres={spec}") == (1, GRES_ERR)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n#SBATCH --gres={spec}\ntrue\n")
    assert run("sbatch", str(script)) == (1, GRES_ERR)
    assert run("salloc", f"--gres={spec}", "true") == (1, GRES_ERR.replace(
        "sbatch", "salloc").replace("Batch job submission failed", "Job submit/allocate failed"))


TOO_LONG = ("Pathname of a file, directory or other parameter too long\n")


def test_too_long_names_comments_and_directives(tmp_path: Path) -> None:
    want = (1, f"sbatch: error: Batch job submission failed: {TOO_LONG}")
    assert sbatch("-J", "x" * 10240) == want
    assert sbatch("--comment", "y" * 10240) == want
    assert sbatch("-J", "x" * 1024)[1] != want[1]  # Slurm's limit is 1024 bytes
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --job-name=" + "z" * 100_000 + "\ntrue\n")
    assert run("sbatch", str(script)) == want
    script.write_text("#!/bin/sh\n#SBATCH --output=" + "o" * 100_000 + "\ntrue\n")
    assert run("sbatch", str(script)) == want
    assert run("salloc", "-J", "x" * 10240, "true") == (
        1, f"salloc: error: Job submit/allocate failed: {TOO_LONG}")


def test_empty_partition() -> None:
    assert sbatch("-p", "") == (1, "sbatch: error: invalid partition specified: \n"
                                   "sbatch: error: Batch job submission failed: Invalid "
                                   "partition name specified\n")
    assert run("salloc", "-p", "", "true") == (
        1, "salloc: error: invalid partition specified: \n"
           "salloc: error: Job submit/allocate failed: Invalid partition name specified\n")


@pytest.mark.parametrize("text", ["a", "a&b", "a|b", "a,b", "[a|b]", "[a&b]", "a*2",
                                  "[rack1*2&rack2*4]", "(a|b)&c", "a&[b|c]",
                                  "a&"])  # Slurm ignores a trailing operator
def test_constraints_that_parse(text: str) -> None:
    assert check_constraint(text)


@pytest.mark.parametrize("text", ["&a", "a&&b", "a||b", "[a|b", "a|b]", "[a][b]",
                                  "[[a]]", "a*0", "a*x", "*2", "(a", "a)", "((a))", "(a*2)"])
def test_constraints_that_do_not(text: str) -> None:
    assert not check_constraint(text)
    assert sbatch(f"--constraint={text}") == (
        1, "sbatch: error: Batch job submission failed: Invalid feature specification\n")


@pytest.mark.parametrize("opt, value, message", [
    ("--distribution", "diagonal", "Invalid --distribution specification"),
    ("--distribution", "block:bogus", "Invalid --distribution specification"),
    ("--distribution", "block,wat", "Invalid --distribution specification"),
    ("--distribution", "plane", "Invalid plane size or size not specified\n"
                                "sbatch: error: Invalid --distribution specification"),
    ("--cpu-freq", "fast", 'unrecognized --cpu-freq argument "fast"\n'
                           "sbatch: error: Invalid --cpu-freq argument"),
    ("--cpu-freq", "low-high:turbo", "illegal governor: turbo on --cpu-freq\n"
                                          "sbatch: error: Invalid --cpu-freq argument"),
    ("--profile", "garbage", "invalid --profile=garbage option"),
    ("--acctg-freq", "often", "Invalid --acctg-freq specification: often"),
    ("--mem-bind", "everywhere", 'unrecognized --mem-bind argument "everywhere"'),
    ("--mem-bind", "map_mem", 'missing list for "--mem-bind=map_mem:<list>"'),
    ("--kill-on-invalid-dep", "maybe", "Invalid --kill-on-invalid-dep specification"),
])
def test_ignored_options_are_validated(opt: str, value: str, message: str) -> None:
    assert sbatch(f"{opt}={value}") == (255, f"sbatch: error: {message}\n")
    if opt != "--kill-on-invalid-dep":  # sbatch only
        assert run("salloc", f"{opt}={value}", "true") == (
            255, f"salloc: error: {message}\n".replace("sbatch:", "salloc:"))


@pytest.mark.parametrize("opt, value", [
    ("distribution", "block"), ("distribution", "cyclic:cyclic:fcyclic"),
    ("distribution", "*:block,pack"), ("distribution", "plane=4"),
    ("distribution", "arbitrary"), ("cpu-freq", "2400000"), ("cpu-freq", "low-high"),
    ("cpu-freq", "performance"), ("cpu-freq", "1000-2000:userspace"),
    ("profile", "task,energy"), ("profile", "none"), ("acctg-freq", "30"),
    ("acctg-freq", "task=30,energy=10"), ("mem-bind", "local"), ("mem-bind", "v,rank"),
    ("mem-bind", "map_mem:0,1"), ("mem-bind", "mask_mem:0x3,0xc"),
    ("kill-on-invalid-dep", "YES"),
])
def test_ignored_options_good_values(opt: str, value: str) -> None:
    check_no_effect_value(opt, value)


def test_mem_bind_help() -> None:
    with pytest.raises(CliExit) as e:
        check_no_effect_value("mem-bind", "help")
    assert e.value.code == 0 and "map_mem:<list>" in e.value.stdout


def test_priority_values() -> None:
    assert parse_priority("100") == 100
    with pytest.raises(OptionValueError, match="Priority must be >= 0"):
        parse_priority("-1")
    assert sbatch("--priority=-3") == (255, "sbatch: error: Priority must be >= 0\n")


def test_hetjob_refused(tmp_path: Path) -> None:
    not_supported = "Requested operation not supported on this system"
    assert run("salloc", "-n1", ":", "-n2", "true") == (
        1, "salloc: error: heterogeneous jobs are not supported by Corral\n"
           f"salloc: error: Job submit/allocate failed: {not_supported}\n")
    script = tmp_path / "het.sh"
    script.write_text("#!/bin/sh\n#SBATCH -n1\n#SBATCH hetjob\n#SBATCH -n2\ntrue\n")
    assert run("sbatch", str(script)) == (
        1, "sbatch: error: heterogeneous jobs are not supported by Corral\n"
           f"sbatch: error: Batch job submission failed: {not_supported}\n")


def test_immediate_with_hold_refused() -> None:
    assert run("salloc", "--immediate", "--hold", "true") == (
        1, "salloc: error: Unable to allocate resources: Immediate execution impossible, "
           "insufficient priority\n")


# ---- array ranges are bounded before anything is listed ---------------------------

def test_array_ranges_checked_before_enumeration() -> None:
    import tracemalloc

    from corral.model.arrays import (
        ArraySpecError,
        array_spec_contains,
        parse_array_ranges,
        parse_array_spec,
    )

    tracemalloc.start()
    try:
        for spec, size in (("0-2147483646", 1 << 31), ("0-2147483646", 1001),
                           ("0-4000001", 1 << 40), ("5,0-99999999:2", 10**9)):
            with pytest.raises(ArraySpecError):
                parse_array_spec(spec, size)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
    assert parse_array_spec("0-1000", 1001)[0][-1] == 1000
    with pytest.raises(ArraySpecError):
        parse_array_spec("0-1001", 1001)  # MaxArraySize=1001: indices 0..1000
    ranges, throttle = parse_array_ranges("1-7:3,20%2", 1001)
    assert throttle == 2 and [list(r) for r in ranges] == [[1, 4, 7], [20]]
    assert array_spec_contains(ranges, 4) and not array_spec_contains(ranges, 5)


def test_sbatch_array_beyond_any_max_array_size() -> None:
    want = (1, "sbatch: error: Batch job submission failed: Invalid job array specification\n")
    assert sbatch("--array=0-2147483646") == want
    assert sbatch("--array=1_[0-2]") == want


def test_scancel_huge_array_range_is_refused_without_work() -> None:
    import time
    start = time.monotonic()
    assert run("scancel", "1_[0-2147483646]") == (
        1, "scancel: error: _parse_single_range: Too many hosts in range `0-2147483646'\n"
           "scancel: error: Invalid job id 1_[0-2147483646]\n")
    assert time.monotonic() - start < 10
    assert run("scancel", "1_[3,0-65536]")[1].endswith("Invalid job id 1_[3,0-65536]\n")


def test_begin_uses_slurms_time_parser() -> None:
    assert run("salloc", "--begin=whenever", "true") == (
        255, "Invalid time specification (pos=0): whenever\n"
             "salloc: error: Invalid --begin specification\n")
    assert sbatch("--begin=now+1h") == (
        255, "Invalid time specification (pos=4): now+1h\n"
             "sbatch: error: Invalid --begin specification\n")


# ---- --help and --usage list what Corral accepts ------------------------------------

@pytest.mark.parametrize("cmd", ["sbatch", "salloc"])
def test_help_lists_every_accepted_option(cmd: str) -> None:
    import importlib

    from corral.cli.options import ALLOC_UNSUPPORTED, option_table

    mod = importlib.import_module(f"corral.cli.{cmd}")
    refused = mod._UNSUPPORTED if cmd == "sbatch" else ALLOC_UNSUPPORTED
    p = subprocess.run([sys.executable, "-m", f"corral.cli.{cmd}", "--help"],
                       capture_output=True, text=True, timeout=30,
                       env={**os.environ, "PYTHONPATH": SRC})
    code, out = p.returncode, p.stdout
    assert code == 0
    aliases = {"cpu_bind", "pack-group", "tasks-per-node"}  # Slurm lists the main name
    for o in option_table(cmd).options:
        if o.key in refused or o.name in aliases or o.key == "mem-per-gpu":
            continue
        assert f"--{o.name}" in out, f"{cmd} --help does not list --{o.name}"
    assert " : " not in out.splitlines()[0]  # no het-job components
    usage = subprocess.run([sys.executable, "-m", f"corral.cli.{cmd}", "--usage"],
                           capture_output=True, text=True, timeout=30,
                           env={**os.environ, "PYTHONPATH": SRC}).stdout
    assert usage.startswith(f"Usage: {cmd} ") and "--priority" in usage


def test_units_follow_str_to_mbytes() -> None:
    from corral.model.units import SizeFormatError, parse_mem_mb, str_to_mbytes

    assert [str_to_mbytes(t) for t in ("1025K", "2t", "7mb", "0")] == [2, 2097152, 7, 0]
    for bad in ("", "1GG", "1.5G", "-5", "5P", "G", "4 G"):
        assert str_to_mbytes(bad) is None
        with pytest.raises(SizeFormatError):
            parse_mem_mb(bad)
