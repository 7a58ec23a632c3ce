"""Job arrays under hold, release, requeue, update and throttle (issue 18, item 2), through
the real commands: a `--array=1-5%1` "array train" as a user guide writes it."""

from __future__ import annotations

import pwd
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, needs_test_users
from tests.e2e.test_users import run_as, users  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def c() -> Iterator[Cluster]:
    home = Path(tempfile.mkdtemp(prefix="corral-arrays-"))
    home.chmod(0o755)  # the test users must reach the socket
    cl = Cluster(home / "c")
    cl.start()
    try:
        yield cl
    finally:
        cl.stop()
        shutil.rmtree(home, ignore_errors=True)


def tasks(c: Cluster, arr: int) -> dict[str, tuple[str, str]]:
    """task id -> (state, reason), one line per task (squeue -r)."""
    out = c.ok("squeue", "-h", "-r", "-j", str(arr), "-o", "%i %T %r")
    rows = [ln.split(None, 2) for ln in out.splitlines() if ln.strip()]
    return {r[0].split("_")[1]: (r[1], r[2] if len(r) > 2 else "") for r in rows}


def running(c: Cluster, arr: int) -> list[str]:
    return sorted(t for t, (st, _) in tasks(c, arr).items() if st == "RUNNING")


def never_more_running(c: Cluster, arr: int, most: int, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        now = running(c, arr)
        assert len(now) <= most, now
        time.sleep(0.2)


def test_hold_release_and_throttle_of_an_array_train(c: Cluster) -> None:
    arr = c.sbatch("--array=1-5%1", "--wrap", "sleep 60")
    c.wait_for(lambda: running(c, arr) == ["1"], what="task 1 running")
    # the whole array: pending tasks held, the running one runs on, exit 0
    r = c.run("scontrol", "hold", str(arr))
    assert (r.returncode, r.stderr) == (0, ""), r
    t = tasks(c, arr)
    assert t["1"][0] == "RUNNING", t
    assert all(t[k] == ("PENDING", "JobHeldAdmin") for k in "2345"), t
    c.ok("scontrol", "release", str(arr))
    c.wait_for(lambda: tasks(c, arr)["2"] == ("PENDING", "JobArrayTaskLimit"),
               what="released tasks wait on the throttle")
    # a task held and released alone still counts against the %1 throttle
    c.ok("scontrol", "hold", f"{arr}_3")
    assert tasks(c, arr)["3"] == ("PENDING", "JobHeldAdmin")
    c.ok("scontrol", "release", f"{arr}_3")
    c.wait_for(lambda: tasks(c, arr)["3"] == ("PENDING", "JobArrayTaskLimit"),
               what="task 3 waits on the throttle")
    never_more_running(c, arr, 1, 3.0)
    # a range of tasks
    c.ok("scontrol", "hold", f"{arr}_[4-5]")
    t = tasks(c, arr)
    assert t["4"] == ("PENDING", "JobHeldAdmin") and t["5"] == ("PENDING", "JobHeldAdmin"), t
    # ArrayTaskThrottle=: two at once now, the held ones still held
    c.ok("scontrol", "update", f"JobId={arr}", "ArrayTaskThrottle=2")
    c.wait_for(lambda: len(running(c, arr)) == 2, what="two tasks running")
    never_more_running(c, arr, 2, 2.0)
    assert tasks(c, arr)["5"] == ("PENDING", "JobHeldAdmin")
    # requeue of the whole array: the running tasks go back, the pending stay as they were
    c.ok("scontrol", "requeue", str(arr))
    c.ok("scancel", str(arr))
    c.wait_for(lambda: not c.squeue_ids("-j", str(arr)), what="the array gone")
    states = c.ok("sacct", "-j", str(arr), "-X", "-n", "-P", "-o", "JobID,State")
    assert states and all(ln.split("|")[1].startswith("CANCELLED")
                          for ln in states.splitlines() if ln), states


def test_hold_of_an_array_with_nothing_pending_is_refused(c: Cluster) -> None:
    arr = c.sbatch("--array=1-2", "--wrap", "sleep 60")
    c.wait_for(lambda: running(c, arr) == ["1", "2"], what="both tasks running")
    r = c.run("scontrol", "hold", str(arr))
    assert r.returncode == 1 and "Job is no longer pending execution" in r.stderr, r
    c.ok("scancel", str(arr))


@needs_test_users
def test_a_users_hold_of_their_array_is_a_user_hold(
        c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice, bob = users["corral-alice"], users["corral-bob"]
    r = run_as(c, alice, "sbatch", "--parsable", "-o", "/dev/null", "--array=1-4%1",
               "--wrap", "sleep 60")
    assert r.returncode == 0, r.stderr
    arr = int(r.stdout.strip().split(";")[0])
    c.wait_for(lambda: running(c, arr) == ["1"], what="task 1 running")
    r = run_as(c, bob, "scontrol", "hold", str(arr))
    assert r.returncode == 1 and "Invalid user id" in r.stderr, r
    r = run_as(c, alice, "scontrol", "hold", str(arr))
    assert (r.returncode, r.stderr) == (0, ""), r
    t = tasks(c, arr)
    assert t["1"][0] == "RUNNING" and all(t[k] == ("PENDING", "JobHeldUser") for k in "234"), t
    r = run_as(c, alice, "scontrol", "release", f"{arr}_2")
    assert r.returncode == 0, r
    c.wait_for(lambda: tasks(c, arr)["2"] == ("PENDING", "JobArrayTaskLimit"),
               what="task 2 waits on the throttle")
    r = run_as(c, alice, "scontrol", "update", f"JobId={arr}", "ArrayTaskThrottle=3")
    assert r.returncode == 0, r
    c.wait_for(lambda: running(c, arr) == ["1", "2"], what="task 2 running")
    assert tasks(c, arr)["3"] == ("PENDING", "JobHeldUser")
    run_as(c, alice, "scancel", str(arr))
    c.wait_for(lambda: not c.squeue_ids("-j", str(arr)), what="the array gone")
