"""sbatch: option grammar, #SBATCH/environment precedence, messages, payload, main()."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from corral.cli import client, sbatch
from corral.cli.options import (
    CliExit,
    GetoptError,
    OptionValueError,
    directive_arguments,
    option_table,
    parse_gpu_request,
    parse_gres,
    parse_mbytes,
    parse_node_count,
    parse_signal,
    parse_time_limit,
    script_directives,
)
from corral.cli.sbatch import WRAP_HEADER, Submission, build_payload, parse_sbatch
from tests.unit.http_peer import read_request

NOW = 1_800_000_000.0
CWD = "/home/alice/runs"
BASE_ENV = {"HOME": "/home/alice", "PATH": "/usr/bin:/bin", "SLURM_CONF": "/etc/slurm.conf"}


def parse(argv: list[str], env: dict[str, str] | None = None, stdin: str | None = None,
          cwd: str = CWD) -> Submission:
    return parse_sbatch(argv, dict(BASE_ENV if env is None else env), stdin, cwd, NOW,
                        submit_host="login1", umask=0o022)


def wrap(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    return parse([*args, "--wrap=true"], env).spec


def error_of(argv: list[str], env: dict[str, str] | None = None, stdin: str | None = None,
             cwd: str = CWD) -> tuple[int, str]:
    with pytest.raises(CliExit) as exc:
        parse(argv, env, stdin, cwd)
    return exc.value.code, exc.value.stderr


def script_file(tmp_path: Path, text: str, name: str = "job.sh") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ---------------------------------------------------------------- getopt_long


@pytest.mark.parametrize("argv", [
    ["-Jname"], ["-J", "name"], ["--job-name=name"], ["--job-name", "name"],
    ["--job-n=name"], ["--job", "name"],
])
def test_job_name_forms(argv: list[str]) -> None:
    assert wrap(*argv)["name"] == "name"


def test_required_argument_may_start_with_dash() -> None:
    assert wrap("-J", "-x")["name"] == "-x"


def test_clustered_short_flags() -> None:
    sub = parse(["-HWJx", "--wrap=true"])
    assert sub.spec["held"] == "user" and sub.wait and sub.spec["name"] == "x"


def test_ambiguous_abbreviation_lists_possibilities() -> None:
    code, err = error_of(["--cpu=3", "--wrap=true"])
    assert code == 255
    assert err == ("sbatch: option '--cpu=3' is ambiguous; possibilities: '--cpu-freq' "
                   "'--cpus-per-gpu' '--cpus-per-task'\n"
                   'Try "sbatch --help" for more information\n')


def test_unique_abbreviations() -> None:
    spec = wrap("--part=gpu", "--cpus-per-t=4", "--no-req")
    assert (spec["partition"], spec["cpus_per_task"], spec["requeue"]) == ("gpu", 4, False)


def test_exact_name_beats_longer_names() -> None:
    # --time is exact although --time-min shares the prefix; same for --mem, --gpus.
    spec = wrap("--time=5", "--mem=1G", "--gpus=2")
    assert (spec["time_limit"], spec["mem_per_node"], spec["gpus"]) == (300, 1024, 2)


def test_unknown_option_d12() -> None:
    assert error_of(["--nosuchoption", "--wrap=true"]) == (
        255, "sbatch: unrecognized option '--nosuchoption'\n"
             'Try "sbatch --help" for more information\n')


@pytest.mark.parametrize("argv, line", [
    (["-y"], "sbatch: invalid option -- 'y'"),
    (["-J"], "sbatch: option requires an argument -- 'J'"),
    (["--job-name"], "sbatch: option '--job-name' requires an argument"),
    (["--parsable=1"], "sbatch: option '--parsable' doesn't allow an argument"),
    (["--pars=1"], "sbatch: option '--parsable' doesn't allow an argument"),
    (["--bogus=3"], "sbatch: unrecognized option '--bogus=3'"),
    (["--cpu-bind=cores"], "sbatch: unrecognized option '--cpu-bind=cores'"),  # srun only
])
def test_getopt_messages(argv: list[str], line: str) -> None:
    assert error_of(argv) == (255, f'{line}\nTry "sbatch --help" for more information\n')


def test_getopt_stops_at_first_operand_and_double_dash(tmp_path: Path) -> None:
    path = script_file(tmp_path, "#!/bin/sh\ntrue\n")
    sub = parse(["-p", "a", path, "-N", "2", "--bogus"])
    assert sub.argv == ["-N", "2", "--bogus"] and sub.spec["num_nodes"] is None
    sub = parse(["-p", "a", "--", path, "x"])
    assert sub.spec["command"] == path and sub.argv == ["x"]


def test_option_table_srun_differs() -> None:
    srun = option_table("srun")
    found, index = srun.parse(["--cpu-bind=cores", "-W", "5", "hostname"])
    assert [(o.key, a) for o, a in found] == [("cpu-bind", "cores"), ("wait-srun", "5")]
    assert index == 3
    with pytest.raises(GetoptError):
        option_table("sbatch").parse(["--cpu-bind=cores"])


# ---------------------------------------------------------------- early pass


def test_version_is_exactly_slurms() -> None:
    with pytest.raises(CliExit) as exc:
        parse(["-V"])
    assert (exc.value.code, exc.value.stdout, exc.value.stderr) == (0, "slurm-wlm 22.05.8\n", "")


def test_help_lists_supported_options() -> None:
    with pytest.raises(CliExit) as exc:
        parse(["--help"])
    assert exc.value.code == 0
    for opt in ("--job-name", "--partition", "--gres", "--gpus-per-node", "--wrap", "--array",
                "--dependency", "--export", "--mem-per-cpu", "--signal", "--wait"):
        assert opt in exc.value.stdout


def test_usage() -> None:
    with pytest.raises(CliExit) as exc:
        parse(["--usage"])
    assert exc.value.code == 0 and exc.value.stdout.startswith("Usage: sbatch")


def test_help_before_typo_wins_typo_before_help_loses() -> None:
    with pytest.raises(CliExit) as exc:
        parse(["-h", "--nosuch"])
    assert exc.value.code == 0
    assert error_of(["--nosuch", "-h"])[0] == 255


def test_help_wins_over_bad_value() -> None:
    # Values are checked in the second pass, after --help has exited.
    with pytest.raises(CliExit) as exc:
        parse(["--time=abc", "--help"])
    assert exc.value.code == 0


def test_script_arguments_with_wrap() -> None:
    assert error_of(["--wrap=true", "extra"]) == (
        1, "sbatch: error: Script arguments not permitted with --wrap option\n")


def test_verbose_and_quiet_conflict() -> None:
    assert error_of(["-v", "-Q", "--wrap=true"]) == (
        1, "sbatch: error: don't specify both --verbose (-v) and --quiet (-Q)\n")


def test_verbose_lists_defined_options() -> None:
    sub = parse(["-v", "-J", "x", "--gpu-bind=closest", "--wrap=true"])
    text = "\n".join(sub.messages)
    assert "sbatch: defined options" in text and "sbatch: job-name            : x" in text
    assert "sbatch: --gpu-bind has no effect under Corral" in text


# ---------------------------------------------------------------- script sources


def test_wrap_script_text_and_defaults() -> None:
    sub = parse(["--wrap=sleep 600"])
    assert sub.script == "#!/bin/sh\n# This script was created by sbatch --wrap.\n\nsleep 600\n"
    assert sub.script == f"{WRAP_HEADER}sleep 600\n"
    spec = sub.spec
    assert spec["name"] == "wrap" and spec["command"] is None
    assert spec["stdout"] == f"{CWD}/slurm-%j.out" and spec["stderr"] is None
    assert spec["stdin"] == "/dev/null" and spec["work_dir"] == CWD
    assert spec["submit_line"] == "sbatch --wrap=sleep 600"


def test_stdin_script_name_from_directive_b03() -> None:
    sub = parse([], stdin="#!/bin/bash\n#SBATCH -J fromstdin\nsleep 600\n")
    assert sub.spec["name"] == "fromstdin" and sub.spec["command"] is None


def test_stdin_default_name_and_lazy_read() -> None:
    calls: list[int] = []

    def read() -> str:
        calls.append(1)
        return "#!/bin/sh\ntrue\n"

    sub = parse_sbatch([], dict(BASE_ENV), read, CWD, NOW)
    assert sub.spec["name"] == "sbatch" and calls == [1]
    parse_sbatch(["--wrap=true"], dict(BASE_ENV), read, CWD, NOW)
    assert calls == [1]  # stdin is not read when --wrap gives the script


def test_file_script_name_command_and_args(tmp_path: Path) -> None:
    path = script_file(tmp_path, "#!/bin/bash\necho $1\n", "train.sh")
    sub = parse(["train.sh", "a b", "c"], cwd=str(tmp_path))
    assert sub.spec["name"] == "train.sh" and sub.spec["command"] == path
    assert sub.argv == ["a b", "c"] and sub.script == "#!/bin/bash\necho $1\n"
    assert sub.spec["stdout"] == f"{tmp_path}/slurm-%j.out"


def test_script_found_on_path(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    path = script_file(bindir, "#!/bin/sh\ntrue\n", "onpath.sh")
    env = dict(BASE_ENV, PATH=f"/nonexistent:{bindir}")
    sub = parse(["onpath.sh"], env=env, cwd=str(tmp_path))
    assert sub.spec["command"] == path


def test_missing_script_d03() -> None:
    assert error_of(["/nonexistent/script.sh"]) == (
        1, "sbatch: error: Unable to open file /nonexistent/script.sh\n")


def test_no_shebang_d08(tmp_path: Path) -> None:
    script_file(tmp_path, "echo hi\n", "noshebang.sh")
    assert error_of(["noshebang.sh"], cwd=str(tmp_path)) == (1, (
        "sbatch: error: This does not look like a batch script.  The first\n"
        "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
        "sbatch: error: For instance: #!/bin/sh\n"))


@pytest.mark.parametrize("stdin", [None, ""])
def test_empty_stdin_d09(stdin: str | None) -> None:
    assert error_of([], stdin=stdin) == (1, "sbatch: error: Batch script is empty!\n")


def test_whitespace_dos_and_nul_scripts() -> None:
    assert error_of([], stdin=" \n\n") == (
        1, "sbatch: error: Batch script contains only whitespace!\n")
    code, err = error_of([], stdin="#!/bin/sh\r\ntrue\r\n")
    assert code == 1 and err.startswith("sbatch: error: Batch script contains DOS line breaks")
    code, err = error_of([], stdin="#!/bin/sh\ntrue\0\n")
    assert code == 1 and "NULL character" in err


# ---------------------------------------------------------------- #SBATCH lines


def test_directives_stop_at_first_command() -> None:
    text = ("#!/bin/bash\n\n# a comment\n#SBATCH -J first\n   # indented comment\n"
            "#SBATCH -p p1\necho hi\n#SBATCH -J late\n")
    assert script_directives(text) == [(4, " -J first"), (6, " -p p1")]
    spec = parse([], stdin=text).spec
    assert spec["name"] == "first" and spec["partition"] == "p1"


def test_directive_quotes_comments_and_escapes() -> None:
    assert directive_arguments(' --job-name="my job" -p a # trailing', "f", 2, "sbatch") == [
        "--job-name=my job", "-p", "a"]
    assert directive_arguments(" --comment='a # b' x\\\"y\\#z", "f", 2, "sbatch") == [
        "--comment=a # b", 'x"y#z']
    # As in Slurm, a backslash does not protect whitespace: it still separates.
    assert directive_arguments(" x\\ y", "f", 2, "sbatch") == ["x", "y"]
    spec = parse([], stdin='#!/bin/sh\n#SBATCH --job-name="my job"  # why\ntrue\n').spec
    assert spec["name"] == "my job"


def test_directive_unmatched_quote_names_line() -> None:
    assert error_of([], stdin='#!/bin/sh\n#SBATCH -J "oops\ntrue\n') == (
        1, 'sbatch: fatal: stdin: line 2: Unmatched `"` in [ -J "oops]\n')


def test_directive_stray_argument() -> None:
    # --nice takes an optional argument, so "0" is left over, as in Slurm.
    assert error_of([], stdin="#!/bin/sh\n#SBATCH --nice 0\ntrue\n") == (
        255, "sbatch: error: Invalid directive found in batch script: 0\n")


def test_directive_unknown_option() -> None:
    assert error_of([], stdin="#!/bin/sh\n#SBATCH --bogus\ntrue\n") == (
        255, "sbatch: unrecognized option '--bogus'\nTry \"sbatch --help\" for more "
             "information\n")


def test_directive_bad_value() -> None:
    assert error_of([], stdin="#!/bin/sh\n#SBATCH --time=soon\ntrue\n") == (
        255, "sbatch: error: Invalid --time specification\n")


def test_directive_early_options_are_ignored_but_parsable_is_not() -> None:
    sub = parse([], stdin="#!/bin/sh\n#SBATCH --wrap=ignored -Q --parsable\ntrue\n")
    assert sub.script.endswith("true\n") and not sub.quiet and sub.parsable


def test_hetjob_directive_refused() -> None:
    code, err = error_of([], stdin="#!/bin/sh\n#SBATCH -n1\n#SBATCH hetjob\n#SBATCH -n2\nx\n")
    assert code == 1 and "not supported" in err


# ---------------------------------------------------------------- precedence


SCRIPT = "#!/bin/sh\n#SBATCH -J fromscript -p p_script -t 10 -A acct_script --qos=q_script\nx\n"


def test_precedence_script_env_cli() -> None:
    env = dict(BASE_ENV, SBATCH_JOB_NAME="fromenv", SBATCH_PARTITION="p_env",
               SBATCH_TIMELIMIT="20")
    spec = parse(["-J", "fromcli"], env=env, stdin=SCRIPT).spec
    assert spec["name"] == "fromcli"           # cli > env > script
    assert spec["partition"] == "p_env"        # env > script
    assert spec["time_limit"] == 20 * 60       # env > script
    assert spec["account"] == "acct_script"    # only the script set it
    assert spec["qos"] == "q_script"


def test_sbatch_env_variables() -> None:
    env = dict(BASE_ENV, SBATCH_ACCOUNT="a", SBATCH_QOS="high", SBATCH_GRES="gpu:a100:2",
               SBATCH_EXCLUSIVE="", SBATCH_NO_REQUEUE="1", SBATCH_WAIT="yes",
               SBATCH_MEM_PER_CPU="2G", SBATCH_GPUS="3", SBATCH_EXPORT="NONE")
    sub = parse(["--wrap=true"], env=env)
    spec = sub.spec
    assert (spec["account"], spec["qos"]) == ("a", "high")
    assert (spec["gpus_per_node"], spec["gpu_type"], spec["gpus"]) == (2, "a100", 3)
    assert spec["exclusive"] is True and spec["requeue"] is False and sub.wait
    assert spec["mem_per_cpu"] == 2048 and sub.export == "NONE"


def test_env_flag_zero_unsets_and_requeue_wins_over_no_requeue() -> None:
    env = dict(BASE_ENV, SBATCH_WAIT="0")
    assert not parse(["--wrap=true"], env=env).wait
    stdin = "#!/bin/sh\n#SBATCH --no-requeue\nx\n"
    assert parse([], dict(BASE_ENV, SBATCH_REQUEUE="no"), stdin).spec["requeue"] is None
    env = dict(BASE_ENV, SBATCH_NO_REQUEUE="1", SBATCH_REQUEUE="1")
    assert parse(["--wrap=true"], env=env).spec["requeue"] is True


def test_bad_env_value_is_reported() -> None:
    env = dict(BASE_ENV, SBATCH_TIMELIMIT="")
    assert error_of(["--wrap=true"], env=env) == (
        255, "sbatch: error: Invalid --time specification\n")


def test_cli_memory_option_replaces_env_one() -> None:
    env = dict(BASE_ENV, SBATCH_MEM_PER_NODE="8G")
    spec = wrap("--mem-per-cpu=1G", env=env)
    assert spec["mem_per_node"] is None and spec["mem_per_cpu"] == 1024


def test_memory_options_conflict() -> None:
    assert error_of(["--mem=1G", "--mem-per-cpu=1G", "--wrap=true"]) == (
        1, "sbatch: fatal: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.\n")
    env = dict(BASE_ENV, SBATCH_MEM_PER_NODE="1G", SBATCH_MEM_PER_CPU="1G")
    code, err = error_of(["--wrap=true"], env=env)
    assert code == 1 and "SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and SLURM_MEM_PER_NODE" in err


# ---------------------------------------------------------------- values


@pytest.mark.parametrize("text, secs", [
    ("30", 1800), ("0:30", 60), ("1:30", 120), ("1:30:00", 5400), ("2-0", 172800),
    ("2-3", 183600), ("2-3:04", 183840), ("2-3:04:05", 183900), ("UNLIMITED", -1),
    ("infinite", -1), ("-1", -1), ("0", -1),
])
def test_time_formats(text: str, secs: int) -> None:
    assert parse_time_limit(text) == secs
    assert wrap(f"--time={text}")["time_limit"] == secs


@pytest.mark.parametrize("text", ["abc", "1:2:3:4", "1-", "", "5m"])
def test_bad_time_d02(text: str) -> None:
    assert error_of([f"--time={text}", "--wrap=true"]) == (
        255, "sbatch: error: Invalid --time specification\n")


def test_time_min() -> None:
    assert wrap("--time-min=1:00:00")["time_min"] == 3600
    assert error_of(["--time-min=x", "--wrap=true"]) == (
        255, "sbatch: error: Invalid --time-min specification\n")


@pytest.mark.parametrize("text, mb", [
    ("4G", 4096), ("500", 500), ("500M", 500), ("1T", 1048576), ("1024K", 1), ("1K", 1),
    ("4GB", 4096), ("0", 0), ("2g", 2048),
])
def test_mem_sizes(text: str, mb: int) -> None:
    assert parse_mbytes(text) == mb
    assert wrap(f"--mem={text}")["mem_per_node"] == mb


@pytest.mark.parametrize("text", ["1.5G", "abc", "-5", "4X"])
def test_bad_mem(text: str) -> None:
    assert error_of([f"--mem={text}", "--wrap=true"]) == (
        255, "sbatch: error: Invalid --mem specification\n")
    assert error_of([f"--mem-per-cpu={text}", "--wrap=true"]) == (
        255, "sbatch: error: Invalid --mem-per-cpu specification\n")


@pytest.mark.parametrize("text, want", [
    ("gpu", (1, None)), ("gpu:2", (2, None)), ("gpu:a100:2", (2, "a100")),
    ("gpu:a100", (1, "a100")), ("none", (0, None)), ("gpu:1,gpu:1", (2, None)),
    ("gres/gpu:4", (4, None)),
])
def test_gres_forms(text: str, want: tuple[int, str | None]) -> None:
    assert parse_gres(text) == want
    spec = wrap(f"--gres={text}")
    assert (spec["gpus_per_node"], spec["gpu_type"]) == want


@pytest.mark.parametrize("text", ["nvme:1", "gpu:a:b", "gpu:a:b:1", "gpu::1"])
def test_bad_gres(text: str) -> None:
    assert error_of([f"--gres={text}", "--wrap=true"]) == (
        1, "sbatch: error: Batch job submission failed: Invalid generic resource (gres) "
           "specification\n")


def test_gpus_options() -> None:
    assert parse_gpu_request("a100:4") == (4, "a100")
    assert parse_gpu_request("gpu:a100:4") == (4, "a100")
    spec = wrap("-G", "h100:8", "--gpus-per-task=1")
    assert (spec["gpus"], spec["gpu_type"], spec["gpus_per_task"]) == (8, "h100", 1)
    spec = wrap("--gpus-per-node=2")
    assert spec["gpus_per_node"] == 2 and spec["gpus"] == 0


def test_b02_resources() -> None:
    sub = parse(["--parsable", "-J", "gpujob", "-N2", "-c4", "--mem=4G",
                 "--gpus-per-node=2", "--wrap=sleep 600"])
    spec = sub.spec
    assert sub.parsable and spec["name"] == "gpujob"
    assert (spec["num_nodes"], spec["max_nodes"], spec["num_tasks"]) == (2, None, 2)
    assert (spec["cpus_per_task"], spec["mem_per_node"], spec["gpus_per_node"]) == (4, 4096, 2)


@pytest.mark.parametrize("text, want", [
    ("2", (2, 2)), ("2-4", (2, 4)), ("1k", (1024, 1024)), ("3-", (3, 0)),
])
def test_node_counts(text: str, want: tuple[int, int]) -> None:
    assert parse_node_count(text) == want


def test_node_count_errors() -> None:
    assert error_of(["-N", "x", "--wrap=true"]) == (
        255, 'sbatch: error: "x" is not a valid node count\n')
    assert error_of(["-N", "4-2", "--wrap=true"]) == (
        255, "sbatch: error: Maximum node count 2 is less than minimum node count 4\n")


def test_task_and_node_arithmetic() -> None:
    spec = wrap("-N", "2-4")
    assert (spec["num_nodes"], spec["max_nodes"], spec["num_tasks"]) == (2, 4, 1)
    spec = wrap("-N2", "--ntasks-per-node=4")
    assert (spec["num_tasks"], spec["ntasks_per_node"]) == (8, 4)
    spec = wrap("-N4", "-n8")
    assert (spec["num_nodes"], spec["num_tasks"]) == (4, 8)
    spec = wrap("-n3")
    # no -N: the count is left to the controller (as many nodes as the tasks need)
    assert (spec["num_nodes"], spec["num_tasks"]) == (None, 3)
    assert wrap("-w", "n1", "-n3")["num_nodes"] == 1
    assert wrap("--mincpus=4")["min_cpus"] == 4
    # -n beyond one node's CPUs without -N: no client-side refusal (Slurm's sbatch has
    # none); the controller spreads the tasks.
    spec = wrap("-n3000")
    assert (spec["num_tasks"], spec["max_nodes"]) == (3000, None)
    sub = parse(["-N3", "-n2", "--wrap=true"])
    assert (sub.spec["num_nodes"], sub.spec["num_tasks"]) == (2, 2)
    assert sub.messages == ["sbatch: Warning: can't run 2 processes on 3 nodes, "
                            "setting nnodes to 2"]


@pytest.mark.parametrize("argv, name", [
    (["-c", "0"], "--cpus-per-task"), (["-n", "x"], "--ntasks"),
    (["--ntasks-per-node=-1"], "--ntasks-per-node"),
])
def test_bad_integers(argv: list[str], name: str) -> None:
    value = argv[-1].split("=")[-1]
    assert error_of([*argv, "--wrap=true"]) == (
        1, f'sbatch: error: Invalid numeric value "{value}" for {name}.\n')


def test_nodelist_and_exclude(tmp_path: Path) -> None:
    spec = wrap("-w", "node-[1-3]", "-x", "node-4,node-5")
    assert spec["req_nodes"] == ["node-1", "node-2", "node-3"] and spec["num_nodes"] == 3
    assert spec["exc_nodes"] == ["node-4", "node-5"] and spec["num_tasks"] == 3
    hosts = tmp_path / "hosts"
    hosts.write_text("node-7\nnode-8 # spare\n")
    spec = parse(["-N", "3", f"--nodelist={hosts}", "--wrap=true"]).spec
    assert spec["req_nodes"] == ["node-7", "node-8"] and spec["num_nodes"] == 3
    assert parse(["-F", str(hosts), "--wrap=true"]).spec["req_nodes"] == ["node-7", "node-8"]
    code, err = error_of(["-w", "node-[1-", "--wrap=true"])
    assert code == 1 and "Invalid node name specified" in err


@pytest.mark.parametrize("text, want", [
    ("USR1", ("", 10, 60)), ("B:USR1@30", ("B", 10, 30)), ("SIGTERM@5", ("", 15, 5)),
    ("R:12", ("R", 12, 60)), ("rb:usr2@0", ("RB", 12, 0)),
])
def test_signal_forms(text: str, want: tuple[str, int, int]) -> None:
    assert parse_signal(text) == want
    assert wrap(f"--signal={text}")["signal"] == text


@pytest.mark.parametrize("text", ["FOO", "10@x", "0", "B:", "USR1@-1"])
def test_bad_signal(text: str) -> None:
    with pytest.raises(OptionValueError):
        parse_signal(text)
    assert error_of([f"--signal={text}", "--wrap=true"]) == (
        255, "sbatch: error: Invalid --signal specification\n")


def test_begin() -> None:
    assert wrap("--begin=now+1hour")["begin_time"] == NOW + 3600
    assert wrap("-b", "now")["begin_time"] == NOW
    assert error_of(["--begin=whenever", "--wrap=true"]) == (
        255, "Invalid time specification (pos=0): whenever\n"
             "sbatch: error: Invalid --begin specification\n")
    assert error_of(["--begin=", "--wrap=true"]) == (
        255, "sbatch: error: Invalid --begin specification\n")
    # every form of Slurm's parser, also in #SBATCH lines (model/timeparse.py has the rest)
    assert wrap("--begin=now+2days")["begin_time"] == NOW + 2 * 86400
    script = "#!/bin/sh\n#SBATCH --begin=2027-01-02T03:04:05\ntrue\n"
    import time
    want = time.mktime((2027, 1, 2, 3, 4, 5, 0, 0, -1))
    assert parse([], stdin=script).spec["begin_time"] == want
    assert wrap("--begin=4:00 PM 1/2/27")["begin_time"] == time.mktime(
        (2027, 1, 2, 16, 0, 0, 0, 0, -1))


def test_array_d22() -> None:
    sub = parse(["--array=1-10%2", "--wrap=true"])
    assert sub.array == "1-10%2" and sub.spec["stdout"] == f"{CWD}/slurm-%A_%a.out"
    assert parse(["-a", "0,3,5-9:2", "--wrap=true"]).array == "0,3,5-9:2"
    for bad in ("abc", "5-1", "1-10%", "1:2", "1-9:0", ""):
        assert error_of([f"--array={bad}", "--wrap=true"]) == (
            1, "sbatch: error: Batch job submission failed: Invalid job array specification\n")


def test_flags_and_strings() -> None:
    sub = parse(["-H", "--parsable", "-W", "--nice", "-d", "afterok:1", "--comment=c",
                 "-A", "acc", "-q", "qq", "-C", "a100", "--hint=nomultithread",
                 "--open-mode=append", "--exclusive", "--wrap=true"])
    spec = sub.spec
    assert spec["held"] == "user" and sub.parsable and sub.wait and spec["nice"] == 100
    assert (spec["dependency"], spec["comment"], spec["account"], spec["qos"]) == (
        "afterok:1", "c", "acc", "qq")
    assert spec["constraint"] == "a100" and spec["hint"] == "nomultithread"
    assert sub.open_mode == "append" and spec["exclusive"] is True
    assert wrap("--nice=-5")["nice"] == -5
    assert wrap("--exclusive", "-s")["exclusive"] is False


def test_value_errors() -> None:
    assert error_of(["--open-mode=x", "--wrap=true"]) == (
        255, "sbatch: error: Invalid --open-mode specification\n")
    assert error_of(["--hint=fast", "--wrap=true"]) == (
        1, 'sbatch: error: unrecognized --hint argument "fast", see --hint=help\n')
    assert error_of(["--mail-type=SOMETIMES", "--wrap=true"]) == (
        255, "sbatch: error: Invalid --mail-type specification\n")
    assert error_of(["--exclusive=bogus", "--wrap=true"]) == (
        255, "sbatch: error: Invalid --exclusive specification\n")
    assert error_of(["--nice=9999999999", "--wrap=true"]) == (
        255, "sbatch: error: Invalid --nice value, out of range (+/- 2147483645)\n")


def test_mail_is_recorded_with_one_warning() -> None:
    sub = parse(["--mail-type=END,FAIL", "--mail-user=a@b", "--mail-type=begin",
                 "--wrap=true"])
    assert sub.spec["mail_type"] == "END,FAIL,BEGIN" and sub.spec["mail_user"] == "a@b"
    assert sub.messages == ["sbatch: warning: Corral does not send mail; --mail-type is "
                            "recorded only"]
    assert parse(["-Q", "--mail-type=END", "--wrap=true"]).messages == []


@pytest.mark.parametrize("option", ["--switches=1", "--test-only", "--mem-per-gpu=1G",
                                    "--exclusive=user"])
def test_unsupported_options_are_refused(option: str) -> None:
    argv = [option, "--wrap=true"]
    code, err = error_of(argv)
    assert code == 1 and err.startswith("sbatch: error: ") and "not supported by Corral" in err


def test_no_effect_options_are_accepted() -> None:
    spec = wrap("--gpu-bind=closest", "--mem-bind=local", "-k", "--propagate", "--wckey=x")
    assert spec["name"] == "wrap"


# ---------------------------------------------------------------- paths, export, payload


def test_paths_relative_to_chdir() -> None:
    spec = wrap("-D", "sub", "-o", "out/%x-%j.log", "-e", "none", "-i", "in.txt")
    assert spec["work_dir"] == f"{CWD}/sub"
    assert spec["stdout"] == f"{CWD}/sub/out/%x-%j.log"
    assert spec["stderr"] == "/dev/null" and spec["stdin"] == f"{CWD}/sub/in.txt"
    spec = wrap("--chdir=/scratch", "--output=/abs/o")
    assert (spec["work_dir"], spec["stdout"]) == ("/scratch", "/abs/o")


def test_export_all_is_default() -> None:
    env = dict(BASE_ENV, FOO="1")
    sub = parse(["--wrap=true"], env=env)
    assert sub.export == "ALL" and sub.env["FOO"] == "1" and sub.env["HOME"] == "/home/alice"
    assert sub.env["SLURM_SUBMIT_DIR"] == CWD and sub.env["SLURM_SUBMIT_HOST"] == "login1"
    assert sub.env["SLURM_UMASK"] == "0022" and sub.env["SLURM_PRIO_PROCESS"] == "0"


def test_export_none() -> None:
    sub = parse(["--export=NONE", "--wrap=true"], env=dict(BASE_ENV, FOO="1"))
    assert sub.export == "NONE"
    assert set(sub.env) == {"SLURM_CONF", "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST",
                            "SLURM_UMASK", "SLURM_PRIO_PROCESS"}


def test_export_list_and_all_with_assignments() -> None:
    env = dict(BASE_ENV, FOO="1", BAR="old")
    sub = parse(["--export=FOO,BAR=new,MISSING", "--wrap=true"], env=env)
    assert sub.env["FOO"] == "1" and sub.env["BAR"] == "new"
    assert "HOME" not in sub.env and "MISSING" not in sub.env and "SLURM_CONF" in sub.env
    sub = parse(["--export=ALL,BAR=new,Q='a,b'", "--wrap=true"], env=env)
    assert sub.env["HOME"] == "/home/alice" and sub.env["BAR"] == "new"
    assert sub.env["Q"] == "a,b"


def test_export_file(tmp_path: Path) -> None:
    envfile = tmp_path / "env"
    envfile.write_bytes(b"A=1\0B=two words\0")
    sub = parse([f"--export-file={envfile}", "--wrap=true"], env=dict(BASE_ENV, FOO="1"))
    assert sub.env["A"] == "1" and sub.env["B"] == "two words" and "FOO" not in sub.env
    code, err = error_of(["--export-file=/nonexistent/env", "--wrap=true"])
    assert code == 1 and "/nonexistent/env" in err


def test_payload_shape() -> None:
    sub = parse(["-J", "x", "--array=1-3", "--export=NONE", "--wrap=true"])
    payload = build_payload(sub)
    assert set(payload) == {"spec", "script", "argv", "env", "export", "array", "open_mode"}
    assert payload["array"] == "1-3" and payload["export"] == "NONE"
    assert payload["open_mode"] == "truncate" and payload["argv"] == []
    spec = payload["spec"]
    for key in ("name", "partition", "num_nodes", "max_nodes", "num_tasks", "ntasks_per_node",
                "cpus_per_task", "mem_per_node", "mem_per_cpu", "gpus", "gpus_per_node",
                "gpus_per_task", "gpu_type", "time_limit", "time_min", "req_nodes",
                "exc_nodes", "exclusive", "requeue", "dependency", "begin_time", "signal",
                "hint", "mail_type", "mail_user", "comment", "work_dir", "stdout", "stderr",
                "stdin", "command", "submit_line", "account", "qos", "nice", "held"):
        assert key in spec
    assert spec["partition"] is None and spec["time_limit"] is None and spec["requeue"] is None
    assert json.loads(json.dumps(payload)) == payload


# ---------------------------------------------------------------- main()


class FakeClient:
    def __init__(self, reply: Any = None, error: Exception | None = None):
        self.reply = reply if reply is not None else {"job_id": 7}
        self.error = error
        self.posts: list[tuple[str, Any]] = []

    def post(self, path: str, body: Any = None, *, idempotent: bool = False) -> Any:
        self.posts.append((path, body))
        self.idempotent = idempotent
        if self.error:
            raise self.error
        return self.reply


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    f = FakeClient()
    monkeypatch.setattr(client, "post", f.post)
    return f


def test_main_submits_and_prints(fake: FakeClient, capsys: pytest.CaptureFixture[str]) -> None:
    assert sbatch.main(["-J", "hello", "--wrap=echo hi"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == ("Submitted batch job 7\n", "")
    path, body = fake.posts[0]
    assert path == "/v1/jobs" and body["spec"]["name"] == "hello"
    assert body["script"].endswith("echo hi\n")
    # a fresh 128-bit id per run, so the client may resend it after a lost answer
    sid = body["spec"]["submit_id"]
    assert len(sid) == 32 and int(sid, 16) >= 0 and fake.idempotent
    assert sbatch.main(["--wrap=true"]) == 0
    assert fake.posts[1][1]["spec"]["submit_id"] != sid


def test_main_parsable_and_quiet(fake: FakeClient, capsys: pytest.CaptureFixture[str]) -> None:
    assert sbatch.main(["--parsable", "--wrap=true"]) == 0
    assert capsys.readouterr().out == "7\n"
    assert sbatch.main(["-Q", "--wrap=true"]) == 0
    assert capsys.readouterr().out == ""


def test_main_server_error_d01(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    f = FakeClient(error=client.ApiError(400, "Invalid partition name specified"))
    monkeypatch.setattr(client, "post", f.post)
    assert sbatch.main(["-p", "nosuch", "--wrap=true"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "sbatch: error: Batch job submission failed: Invalid partition name specified\n"


def test_main_usage_error_does_not_submit(fake: FakeClient,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert sbatch.main(["--time=abc", "--wrap=true"]) == 255
    assert capsys.readouterr().err == "sbatch: error: Invalid --time specification\n"
    assert fake.posts == []


def test_main_malformed_reply(monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(client, "post", FakeClient(reply={"oops": 1}).post)
    assert sbatch.main(["--wrap=true"]) == 1
    assert capsys.readouterr().err == (
        "sbatch: error: Batch job submission failed: malformed answer from the controller\n")


def test_main_over_a_real_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The request really goes out as HTTP/JSON on $CORRAL_HOME/corral.sock."""
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "corral.sock"))
    server.listen(1)
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        head, body = read_request(conn)
        received.append(head + b"\r\n\r\n" + body)
        answer = b'{"job_id": 12}'
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer))
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert sbatch.main(["-J", "sock", "--wrap=true"]) == 0
    finally:
        thread.join(timeout=10)
        server.close()
    assert capsys.readouterr().out == "Submitted batch job 12\n"
    head, _, body = received[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/jobs HTTP/1.1")
    assert json.loads(body)["spec"]["name"] == "sock"


def test_main_without_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    assert sbatch.main(["--wrap=true"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("sbatch: error: ")
    assert "Traceback" not in err


def test_console_run_without_controller(tmp_path: Path) -> None:
    env = dict(os.environ, CORRAL_HOME=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "corral.cli.sbatch", "--wrap=true"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_import_stays_light() -> None:
    code = ("import sys, corral.cli.sbatch; "
            "print(sorted(m for m in ('http.client', 'argparse', 'aiohttp', 'ssl', "
            "'corral.model.job', 'hostlist') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.strip() == "[]"


# ---------------------------------------------------------------- --wait


def test_wait_returns_the_jobs_exit_code() -> None:
    replies = iter([
        {"jobs": [{"state": "RUNNING", "exit_code": 0, "term_signal": 0}]},
        {"jobs": [{"state": "COMPLETED", "exit_code": 0, "term_signal": 0},
                  {"state": "FAILED", "exit_code": 3, "term_signal": 0}]},
    ])
    calls: list[dict[str, Any]] = []

    def get(path: str, **params: Any) -> Any:
        calls.append(dict(params, path=path))
        return next(replies)

    assert sbatch.wait_for_job(9, sleep=lambda s: None, get=get) == 3
    assert calls[0] == {"path": "/v1/jobs", "ids": 9, "fields": "state,exit_code,term_signal",
                        "finished": 1}


def test_wait_signal_means_one_and_lost_job_means_zero(
        capsys: pytest.CaptureFixture[str]) -> None:
    def killed(path: str, **params: Any) -> Any:
        return {"jobs": [{"state": "CANCELLED", "exit_code": 0, "term_signal": 9}]}

    assert sbatch.wait_for_job(9, sleep=lambda s: None, get=killed) == 1

    def gone(path: str, **params: Any) -> Any:
        raise client.ApiError(404, "Invalid job id specified")

    assert sbatch.wait_for_job(9, sleep=lambda s: None, get=gone) == 0
    assert "Job 9 no longer found" in capsys.readouterr().err


def test_main_wait(monkeypatch: pytest.MonkeyPatch, fake: FakeClient,
                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sbatch, "wait_for_job", lambda job_id: 42 if job_id == 7 else 0)
    assert sbatch.main(["-W", "--wrap=exit 42"]) == 42
    assert capsys.readouterr().out == "Submitted batch job 7\n"


def _serve_http(server: socket.socket, received: list[bytes], answer: bytes | None,
                count: int = 1, full: bool = False) -> None:
    """Accept `count` connections; read each request (`full`: with its body); answer it
    (or, with None, close)."""
    for _ in range(count):
        try:
            conn, _ = server.accept()
        except OSError:
            return
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        if full:
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += conn.recv(65536)
            data = head + b"\r\n\r\n" + body
        received.append(data)
        if answer is not None:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer))
        conn.close()


def test_main_rides_out_a_controller_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The controller is down (its pid file says one should run) and comes back: the
    submission waits, is sent once, and says so once."""
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    monkeypatch.delenv("CORRAL_MESSAGE_TIMEOUT", raising=False)
    monkeypatch.setattr(client, "_announced", False)
    (tmp_path / "controller.pid").write_text("1\n")
    received: list[bytes] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def come_back() -> None:
        import time
        time.sleep(1.0)
        server.bind(str(tmp_path / "corral.sock"))
        server.listen(4)
        _serve_http(server, received, b'{"job_id": 7}')

    thread = threading.Thread(target=come_back, daemon=True)
    thread.start()
    try:
        assert sbatch.main(["--wrap=true"]) == 0
    finally:
        thread.join(timeout=10)
        server.close()
    out, err = capsys.readouterr()
    assert out == "Submitted batch job 7\n"
    assert err == "sbatch: error: Slurm controller not responding, sleeping and retrying.\n"
    assert len(received) == 1


def test_main_gives_up_after_message_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import time
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    (tmp_path / "controller.pid").write_text("1\n")
    (tmp_path / "slurm.conf").write_text("ClusterName=x\nMessageTimeout=1\n")
    monkeypatch.delenv("CORRAL_MESSAGE_TIMEOUT", raising=False)
    monkeypatch.setattr(client, "_announced", False)
    start = time.monotonic()
    assert sbatch.main(["--wrap=true"]) == 1
    assert 0.9 < time.monotonic() - start < 5
    assert capsys.readouterr().err == (
        "sbatch: error: Slurm controller not responding, sleeping and retrying.\n"
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
        "(connect failure)\n")


def test_main_without_any_controller_fails_at_once(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """No cluster was ever started here: no waiting."""
    import time
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    start = time.monotonic()
    assert sbatch.main(["--wrap=true"]) == 1
    assert time.monotonic() - start < 3  # no retry loop (that would take MessageTimeout)
    assert "no Corral controller is running" in capsys.readouterr().err


def test_plain_post_is_never_sent_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A controller that read a request and closed without answering may have acted on
    it: a POST without a submission id is not repeated (a GET would be)."""
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    monkeypatch.setenv("CORRAL_MESSAGE_TIMEOUT", "3")
    monkeypatch.setattr(client, "_announced", True)
    monkeypatch.setattr(client, "_retry_prog", "scancel")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "corral.sock"))
    server.listen(4)
    server.settimeout(2)
    received: list[bytes] = []
    thread = threading.Thread(target=_serve_http, args=(server, received, None, 2),
                              daemon=True)
    thread.start()
    try:
        with pytest.raises(client.ApiError):
            client.post("/v1/jobs/1/signal", {"signal": 9})
    finally:
        thread.join(timeout=10)
        server.close()
    assert len(received) == 1


def test_submission_lost_answer_is_resent_with_the_same_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The controller read the submission and died before answering: sbatch sends it
    again with the same submit_id, which the controller answers with the job it made."""
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    monkeypatch.setenv("CORRAL_MESSAGE_TIMEOUT", "5")
    monkeypatch.setattr(client, "_announced", False)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "corral.sock"))
    server.listen(4)
    server.settimeout(4)
    received: list[bytes] = []

    def serve() -> None:
        _serve_http(server, received, None, full=True)  # the old controller, killed
        _serve_http(server, received, b'{"job_id": 42}', full=True)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert sbatch.main(["--parsable", "--wrap=true"]) == 0
    finally:
        thread.join(timeout=10)
        server.close()
    assert capsys.readouterr().out == "42\n"
    assert len(received) == 2
    ids = [json.loads(r.partition(b"\r\n\r\n")[2])["spec"]["submit_id"] for r in received]
    assert ids[0] == ids[1] and len(ids[0]) == 32


def test_get_is_asked_again_after_a_silent_close(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    monkeypatch.setenv("CORRAL_MESSAGE_TIMEOUT", "5")
    monkeypatch.setattr(client, "_announced", True)
    monkeypatch.setattr(client, "_retry_prog", "squeue")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "corral.sock"))
    server.listen(4)
    received: list[bytes] = []

    def serve() -> None:
        _serve_http(server, received, None)       # the old controller, going away
        _serve_http(server, received, b'{"ok": 1}')

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert client.get("/v1/ping") == {"ok": 1}
    finally:
        thread.join(timeout=10)
        server.close()
    assert len(received) == 2
