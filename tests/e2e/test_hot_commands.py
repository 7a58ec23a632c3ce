"""The hot commands' common forms (cli/hot.py: the controller's text, written as it comes)
print what the full commands print, byte for byte, and leave every other form to them."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.e2e.cluster import DEFAULT_CONFIG, Cluster, running

CONFIG = DEFAULT_CONFIG + "PartitionName=secret Nodes=node-[3-4] Hidden=YES State=UP\n"
# A variable of each command's own: the hot form then leaves the command to do it all.
FULL = {"SQUEUE_CORRAL_TEST": "1", "SINFO_CORRAL_TEST": "1", "SCONTROL_CORRAL_TEST": "1",
        "SCANCEL_CORRAL_TEST": "1", "SACCT_CORRAL_TEST": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, CONFIG) as c:
        yield c


def _hot(cluster: Cluster, command: str, *args: str) -> tuple[int | None, str, bool]:
    """hot.run in a fresh interpreter: (its exit code or None, stdout, whether the full
    command's module was imported)."""
    code = ("import sys; from corral.cli import hot; rc = hot.run(sys.argv[1], sys.argv[2:]); "
            "sys.stderr.write(f'{rc}|{\"corral.cli.\" + sys.argv[1] in sys.modules}')")
    r = subprocess.run([sys.executable, "-c", code, command, *args], capture_output=True,
                       text=True, env=cluster.env, timeout=60, cwd=str(cluster.workdir))
    rc_text, _, imported = r.stderr.rpartition("\n")[2].partition("|")
    return None if rc_text == "None" else int(rc_text), r.stdout, imported == "True"


def _same(cluster: Cluster, *argv: str) -> str:
    """`argv` (the hot form) and the full command print the same, and exit alike (a
    running job's TIME may tick between the two: asked again then)."""
    for _ in range(5):
        hot = cluster.run(*argv)
        full = cluster.run(*argv, env=FULL)
        if (hot.returncode, hot.stdout, hot.stderr) == (full.returncode, full.stdout, full.stderr):
            return hot.stdout
        time.sleep(0.2)
    assert (hot.returncode, hot.stdout, hot.stderr) == (full.returncode, full.stdout,
                                                        full.stderr), argv
    return hot.stdout


def test_hot_forms_print_what_the_commands_print(cluster: Cluster) -> None:
    held = cluster.sbatch("-H", "-J", "held", "--wrap", "true")
    cluster.sbatch("-H", "-p", "secret", "-J", "hid", "--wrap", "true")
    array = cluster.sbatch("-H", "--array", "1-5%2", "--wrap", "true")
    run = cluster.sbatch("-J", "sleeper", "-N2", "--gres=gpu:2", "--wrap", "sleep 60")
    done = cluster.sbatch("--wrap", "true")
    cluster.wait_state(run, "RUNNING")
    cluster.wait_state(done, "COMPLETED")
    cluster.ok("scontrol", "update", "NodeName=node-4", "State=DRAIN", "Reason=hot test")

    assert " sleeper " in _same(cluster, "squeue")
    assert "drain" in _same(cluster, "sinfo")
    for job in (held, array, run, done):
        assert f"JobId={job} " in _same(cluster, "scontrol", "show", "job", str(job))
        assert f"\n{job}" in _same(cluster, "sacct", "-j", str(job))
    assert "ArrayTaskId=1-5%2" in _same(cluster, "scontrol", "show", "jobs", str(array))
    assert "Reason=hot test" in _same(cluster, "scontrol", "show", "node", "node-4")
    assert _same(cluster, "scontrol", "show", "nodes", "node-1").startswith("NodeName=node-1 ")
    # errors: the full command's own messages and exit codes
    _same(cluster, "scontrol", "show", "job", "999999")
    _same(cluster, "scontrol", "show", "node", "node-99")
    _same(cluster, "scancel", "999999")
    _same(cluster, "sacct", "-j", "999999")

    for argv in (["squeue"], ["sinfo"], ["scontrol", "show", "job", str(run)],
                 ["scontrol", "show", "node", "node-4"], ["sacct", "-j", str(done)]):
        for _ in range(5):  # a running job's TIME may tick between the two: asked again
            rc, out, imported = _hot(cluster, *argv)
            full = cluster.ok(*argv, env=FULL)
            if out == full:
                break
            time.sleep(0.2)
        assert rc == 0 and out == full and not imported, argv
    cluster.ok("scontrol", "update", "NodeName=node-4", "State=RESUME")


def test_hot_scancel_cancels_and_stays_quiet_on_unknown_jobs(cluster: Cluster) -> None:
    job = cluster.sbatch("-H", "--wrap", "true")
    assert _hot(cluster, "scancel", str(job)) == (0, "", False)
    cluster.wait_state(job, "CANCELLED")
    assert _hot(cluster, "scancel", "999999") == (0, "", False)
    r = cluster.run("scancel", str(job))  # already cancelled: quiet, as scancel is
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_other_forms_are_left_to_the_commands(cluster: Cluster) -> None:
    for argv in (["squeue", "-h"], ["sinfo", "-N"], ["scontrol", "show", "job"],
                 ["scontrol", "-o", "show", "job", "1"], ["scontrol", "show", "node", "node-[1-2]"],
                 ["scancel", "1", "2"], ["scancel", "-v", "1"], ["scancel", "01"],
                 ["sacct", "-j", "1", "-X"], ["sacct", "-j", "1_2"]):
        assert _hot(cluster, *argv) == (None, "", False), argv
    cluster.sbatch("-H", "-J", "naïve", "--wrap", "true")  # printed as the locale says
    assert _hot(cluster, "squeue") == (None, "", False)
    tz = subprocess.run([sys.executable, "-c", "from corral.cli import hot; "
                         "print(hot.run('sinfo', []))"], capture_output=True, text=True,
                        env={**cluster.env, "TZ": "UTC"}, timeout=60)
    assert tz.stdout == "None\n"
    # no controller: left to the command, which says so
    gone = {**cluster.env, "CORRAL_HOME": str(cluster.home / "nowhere")}
    for argv in (["squeue"], ["scancel", "5"]):
        r = subprocess.run([sys.executable, "-c", "import sys; from corral.cli import hot; "
                            "print(hot.run(sys.argv[1], sys.argv[2:]))", *argv],
                           capture_output=True, text=True, env=gone, timeout=60)
        assert r.stdout == "None\n", argv


SBATCH_FULL = {"SBATCH_CORRAL_TEST": "1"}  # an SBATCH_ variable: the fast path declines
SCRIPT = ("#!/bin/sh\n#SBATCH -J fromscript --time=5  # five minutes\n#SBATCH --gpus=2 -n 2\n"
          "#SBATCH -o %x-%j.out\necho hi\n")
SBATCH_FORMS = [
    ["-H", "--wrap", "true"],
    ["-H", "-J", "wide", "-t", "1:00:00", "-N", "2", "-n", "4", "-c", "2", "--mem=1G",
     "--gres=gpu:1", "-p", "debug", "-o", "out-%j.txt", "-e", "err.txt", "--wrap", "sleep 1"],
    ["-H", "--array=1-3%2", "-d", "singleton", "--export=NONE,FOO=1", "--wrap", "true"],
    ["-H", "--gpus-per-node=2", "--gpus-per-task=1", "-N1", "-n2", "--wrap", "true"],
    ["-H", "job.sh", "an-arg"],
    ["-H", "-J", "cli-wins", "-t", "7", "./job.sh"],
]


def _show(cluster: Cluster, job: int) -> str:
    """scontrol show job, less what differs between two submissions (ids, times)."""
    import re

    text = cluster.ok("scontrol", "show", "job", str(job), env=FULL)
    text = re.sub(r"\b(\w*Time)=\S+", r"\1=T", text)
    # the id in JobId=, ArrayJobId= and the output files' names, not in the test's paths
    return re.sub(rf"(?<=[=_-]){job}(?=[\s._]|$)", "ID", text)


@pytest.mark.parametrize("args", SBATCH_FORMS, ids=" ".join)
def test_fast_sbatch_submits_what_sbatch_submits(cluster: Cluster, args: list[str]) -> None:
    (cluster.workdir / "job.sh").write_text(SCRIPT)
    rc, out, imported = _hot(cluster, "sbatch", *args)
    assert rc == 0 and not imported and out.startswith("Submitted batch job "), (rc, out)
    fast = int(out.split()[-1])
    full = cluster.run("sbatch", *args, env=SBATCH_FULL)
    assert full.returncode == 0 and full.stdout.startswith("Submitted batch job "), full
    assert _show(cluster, fast) == _show(cluster, int(full.stdout.split()[-1]))
    cluster.ok("scancel", str(fast), str(full.stdout.split()[-1]))


def test_fast_sbatch_prints_what_sbatch_prints(cluster: Cluster) -> None:
    # --parsable, and the controller's refusals in sbatch's words
    rc, out, imported = _hot(cluster, "sbatch", "-H", "--parsable", "--wrap", "true")
    assert rc == 0 and out.strip().isdigit() and not imported
    for args in (["-p", "nosuch", "--wrap", "true"], ["-d", "bogus", "--wrap", "t"],
                 ["--gres=gpu:9", "--wrap", "true"]):
        assert _hot(cluster, "sbatch", *args)[0] == 1, args  # answered by the fast path
        fast = cluster.run("sbatch", *args)
        full = cluster.run("sbatch", *args, env=SBATCH_FULL)
        assert (fast.returncode, fast.stdout, fast.stderr) == \
            (full.returncode, full.stdout, full.stderr), args
        assert fast.returncode == 1 and "Batch job submission failed" in fast.stderr, args
    # forms it leaves to sbatch, which prints its own errors
    for args in (["--time-min=5", "--wrap", "true"], ["-t", "x", "--wrap", "true"], ["nosuch.sh"]):
        assert _hot(cluster, "sbatch", *args) == (None, "", False), args
