"""`scontrol notify` (and idle-GPU reclaim's notice) in a batch job's output: the step
supervisor writes `slurmstepd: error: MESSAGE` to the job's stderr through the descriptor
the job opened as its user, never by path as root.  Real supervisors and processes, as in
test_stepd.py (whose fixtures these use)."""

from __future__ import annotations

import os
import pwd
from typing import Any

from corral.agent import stepd
from tests.unit.clean_spawner import _close_clean_spawner, spawn_step  # noqa: F401
from tests.unit.test_stepd import (  # noqa: F401  (fixtures)
    Jobs,
    _as_owner,
    _wait_for,
    jobs,
    other_user,
    read,
    wait_status,
)


def _supervisor_state(job_dir: str) -> str:
    """What the supervisor was doing, for a timeout's message: its log, its kernel state
    and its descriptors (these tests once timed out in CI only)."""
    parts = [f"stepd.log: {read(job_dir, stepd.LOG_FILE)!r}"]
    try:
        pid = read(job_dir, stepd.PID_FILE).split()[0]
        for name in ("status", "wchan", "stack"):
            try:
                with open(f"/proc/{pid}/{name}") as f:
                    text = f.read()
                if name == "status":
                    text = " ".join(line for line in text.splitlines()
                                    if line.split(":")[0] in ("State", "SigBlk", "SigCgt"))
                parts.append(f"{name}: {text.strip()}")
            except OSError as e:
                parts.append(f"{name}: {e}")
        fds = sorted(os.listdir(f"/proc/{pid}/fd"), key=int)
        parts.append("fds: " + ", ".join(
            f"{fd}->{os.readlink(f'/proc/{pid}/fd/{fd}')}" for fd in fds))
    except (OSError, IndexError) as e:
        parts.append(f"no supervisor state: {e}")
    return "\n".join(parts)


def _wait_for_notice(predicate: Any, job_dir: str, what: str) -> None:
    try:
        _wait_for(predicate, 10, what)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{_supervisor_state(job_dir)}") from None


def test_notify_goes_to_the_batch_jobs_stderr(jobs: Jobs) -> None:  # noqa: F811
    d = jobs.start("echo ready\necho from-job >&2\nsleep 300\n")
    _wait_for(lambda: "from-job" in read(d, "err"), 10, "the script to start")
    assert stepd.send_control(d, {"op": "notify", "message": "checkpoint soon"})
    _wait_for_notice(lambda: "checkpoint soon" in read(d, "err"), d, "the notice")
    assert read(d, "err") == "from-job\nslurmstepd: error: checkpoint soon\n"
    assert read(d, "out") == "ready\n"  # stderr only, as Slurm's
    stepd.send_control(d, {"op": "cancel"})
    assert wait_status(d)["state"] == "CANCELLED"


def test_notify_is_written_as_the_owner_and_never_through_a_link_they_plant(
        jobs: Jobs, other_user: pwd.struct_passwd) -> None:  # noqa: F811
    """The job swaps its stderr for a link to a file only root may write: the notice goes
    to the file the job opened (renamed), the link's target is untouched."""
    victim = os.path.join(jobs.base, "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    os.chmod(victim, 0o644)
    d, out_dir = _as_owner(jobs, "mv err err.opened\nln -s ../victim err\necho swapped >&2\n"
                           "sleep 300\n", other_user)
    spawn_step(d)
    opened = os.path.join(out_dir, "err.opened")
    _wait_for(lambda: "swapped" in read(out_dir, "err.opened"), 10, "the swap")
    assert os.path.islink(os.path.join(out_dir, "err"))
    assert stepd.send_control(d, {"op": "notify", "message": "GPUs idle"})
    _wait_for_notice(lambda: "GPUs idle" in read(out_dir, "err.opened"), d, "the notice")
    assert read(out_dir, "err.opened") == "swapped\nslurmstepd: error: GPUs idle\n"
    assert read(jobs.base, "victim") == "precious\n"
    assert os.stat(opened).st_uid == other_user.pw_uid
    stepd.send_control(d, {"op": "cancel"})
    assert wait_status(d)["state"] == "CANCELLED"
    assert read(jobs.base, "victim") == "precious\n"


def test_notify_to_a_job_whose_stderr_is_not_a_file_is_logged(jobs: Jobs) -> None:  # noqa: F811
    d = jobs.start("echo ready\nsleep 300\n", stderr="/dev/null")
    _wait_for(lambda: read(d, "out") == "ready\n", 10, "the script to start")
    assert stepd.send_control(d, {"op": "notify", "message": "nowhere to go"})
    _wait_for_notice(lambda: "nowhere to go" in read(d, "stepd.log"), d,
                     "the notice in the log")
    assert stepd.is_alive(d)
    stepd.send_control(d, {"op": "cancel"})
    assert wait_status(d)["state"] == "CANCELLED"
