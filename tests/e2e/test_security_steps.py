"""Adversarial tests of srun steps (issue 7): the program is looked up with the user's rights,
output a client does not read stays bounded in the controller, and a malformed step message
from a client or an agent is refused alone."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from corral import paths
from tests.e2e.cluster import CAN_CREATE_USERS, Cluster
from tests.e2e.test_users import grant_traverse

pytestmark = pytest.mark.slow

USER = "corral-lnch1"


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _controller_pid(c: Cluster) -> int:
    with open(paths.pid_file("controller", str(c.home))) as f:
        return int(f.read().split()[0])


def _agent_pauses_output() -> bool:
    """Whether the agent hands `task_flow` to its TaskManager (agent/main.py's dispatch)."""
    from corral.agent import main

    return "tasks.handle(" in inspect.getsource(main)


# ---- output back-pressure -------------------------------------------------------------------

SIZE = 60_000_000


def test_unread_srun_output_stays_bounded_in_the_controller(cluster: Cluster) -> None:
    pid = _controller_pid(cluster)
    before = _rss_kb(pid)
    env = dict(cluster.env)
    # a client that does not read its stdout: the pipe fills, srun stops reading its socket
    proc = subprocess.Popen(["srun", "-N1", "bash", "-c", f"head -c {SIZE} /dev/zero; echo end >&2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=str(cluster.workdir))
    try:
        peak = before
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            peak = max(peak, _rss_kb(pid))
            time.sleep(0.2)
        assert proc.poll() is None  # the step is held back, not finished
        # the queue is capped at 16 MB of base64 whether or not the agent pauses: with the
        # old unbounded relay the whole 80 MB of base64 piled up here
        assert peak - before < 48_000, f"controller grew by {peak - before} kB"
        out, err = proc.communicate(timeout=120)  # now read: the step finishes
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert err.endswith(b"end\n")
    if _agent_pauses_output():
        assert len(out) == SIZE  # paused and resumed: nothing lost


@pytest.mark.skipif(not _agent_pauses_output(),
                    reason="agent/main.py does not dispatch task_flow to TaskManager.handle yet")
def test_paused_step_output_arrives_whole(cluster: Cluster) -> None:
    r = subprocess.run(["srun", "-N1", "bash", "-c", f"head -c {SIZE} /dev/zero | tr '\\0' x"],
                       capture_output=True, env=cluster.env, cwd=str(cluster.workdir),
                       timeout=120)
    assert r.returncode == 0 and r.stdout == b"x" * SIZE


# ---- malformed messages ------------------------------------------------------------------------

async def _steps_session(sock: str, frames: list[str]) -> list[dict[str, Any]]:
    """Send frames on a step session; return the replies received within a short while."""
    conn = aiohttp.UnixConnector(path=sock)
    async with aiohttp.ClientSession(connector=conn) as session:
        async with session.ws_connect("http://corral/v1/steps/ws") as ws:
            replies: list[dict[str, Any]] = []
            for frame in frames:
                await ws.send_str(frame)
            try:
                while True:
                    msg = await ws.receive(timeout=1.0)
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        break
                    replies.append(json.loads(msg.data))
            except TimeoutError:
                pass
            assert not ws.closed  # refused alone: the session itself goes on
            return replies


def test_malformed_client_messages_are_refused_alone(cluster: Cluster) -> None:
    sock = paths.socket_path(str(cluster.home))
    # another client's step runs meanwhile, untouched
    other = subprocess.Popen(["srun", "-N1", "bash", "-c", "sleep 2; echo fine"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=cluster.env, cwd=str(cluster.workdir))
    frames = ["{", "[]", '{"type": "signal", "signal": "nine"}', '{"type": "resize", "rows": -4}',
              '{"type": "start", "job_id": "1", "step": {"argv": "ls"}}',
              '{"type": "stdin", "data": "***"}', '{"type": "launch_tasks"}']
    replies = asyncio.run(_steps_session(sock, frames))
    assert [r["type"] for r in replies] == ["error"] * len(frames)
    assert all(r["message"].startswith("malformed message: ") for r in replies)
    assert "signal.signal: expected an integer, got str" in replies[2]["message"]
    out, err = other.communicate(timeout=60)
    assert (other.returncode, out) == (0, "fine\n"), err
    assert cluster.ok("srun", "-N1", "echo", "still-ok") == "still-ok\n"


async def _agent_link(sock: str, frames: list[str]) -> bool:
    """Send frames as an agent that serves no node; True if the link is still open."""
    conn = aiohttp.UnixConnector(path=sock)
    async with aiohttp.ClientSession(connector=conn) as session:
        async with session.ws_connect("http://corral/v1/agent/ws") as ws:
            for frame in frames:
                await ws.send_str(frame)
            try:
                msg = await ws.receive(timeout=1.0)
                return msg.type not in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED,
                                        aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.ERROR)
            except TimeoutError:
                return not ws.closed


def test_malformed_task_messages_from_an_agent_do_not_break_its_link(cluster: Cluster) -> None:
    sock = paths.socket_path(str(cluster.home))
    proc = subprocess.Popen(["srun", "-N1", "bash", "-c", "sleep 2; echo fine"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cluster.env, cwd=str(cluster.workdir))
    time.sleep(1.0)
    frames = [json.dumps(f) for f in (
        {"type": "task_output", "job_id": "x", "step_id": 0, "task_id": 0, "data": ""},
        {"type": "task_exit", "job_id": [], "step_id": {}, "task_id": None},
        {"type": "task_output", "job_id": 1, "step_id": 0, "task_id": 0, "data": "%%%"},
        {"type": "task_exit", "job_id": 1 << 70, "step_id": 0, "task_id": 0},
    )]
    assert asyncio.run(_agent_link(sock, frames))
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (0, "fine\n"), err


# ---- the program, looked up with the user's rights ------------------------------------------

@pytest.fixture(scope="module")
def user_cluster() -> Iterator[tuple[Cluster, pwd.struct_passwd]]:
    if not CAN_CREATE_USERS:
        pytest.skip("needs root and useradd")
    restore = grant_traverse(os.path.realpath(sys.executable))
    made = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", USER], check=True)
        made = True
    home = Path(tempfile.mkdtemp(prefix="corral-launch-"))
    home.chmod(0o755)
    c = Cluster(home / "c")
    try:
        c.start()
        yield c, pwd.getpwnam(USER)
    finally:
        c.stop()
        shutil.rmtree(home, ignore_errors=True)
        if made:
            subprocess.run(["userdel", "--remove", USER], capture_output=True)
        for d, mode in restore:
            os.chmod(d, mode)


def _srun_as(c: Cluster, user: pwd.struct_passwd, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(c.env, HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    return subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                           "--init-groups", "--", "srun", *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=user.pw_dir)


def test_srun_program_lookup_runs_with_the_users_rights(
        user_cluster: tuple[Cluster, pwd.struct_passwd]) -> None:
    c, user = user_cluster
    private = tempfile.mkdtemp(prefix="corral-private-")  # root's, 0700
    prog = os.path.join(private, "prog")
    with open(prog, "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(prog, 0o755)
    try:
        found = _srun_as(c, user, "-N1", prog)
        absent = _srun_as(c, user, "-N1", os.path.join(private, "absent"))
        # the same answer whether the file exists or not: nothing leaks from root's directory
        for r, path in ((found, prog), (absent, os.path.join(private, "absent"))):
            assert r.returncode == 13, r.stderr
            assert r.stderr == (f"slurmstepd: error: execve(): {path}: Permission denied\n"
                                f"srun: error: node-1: task 0: Exited with exit code 13\n")
        r = _srun_as(c, user, "-N1", "no-such-program-here")
        assert r.returncode == 2
        assert r.stderr == ("slurmstepd: error: execve(): no-such-program-here: "
                            "No such file or directory\n"
                            "srun: error: node-1: task 0: Exited with exit code 2\n")
        script = os.path.join(user.pw_dir, "notexec.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho hi\n")
        os.chown(script, user.pw_uid, user.pw_gid)
        os.chmod(script, 0o644)
        r = _srun_as(c, user, "-N1", "./notexec.sh")
        assert r.returncode == 13
        assert r.stderr.startswith("slurmstepd: error: execve(): ./notexec.sh: Permission denied\n")
        assert _srun_as(c, user, "-N1", "id", "-un").stdout == f"{USER}\n"
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_no_allocate_is_for_operators_only(
        user_cluster: tuple[Cluster, pwd.struct_passwd]) -> None:
    """srun -Z runs tasks on a node with no job: only root, SlurmUser and AdminUsers may;
    anyone else is refused as slurmd refuses the launch (and nothing runs)."""
    c, user = user_cluster
    marker = Path(user.pw_dir) / "ran-without-allocation"
    r = _srun_as(c, user, "-Z", "-w", "node-1", "touch", str(marker))
    assert r.returncode == 1
    assert r.stderr == ("srun: error: Task launch for StepId=4294967294.0 failed on node "
                        "node-1: Invalid job credential\n")
    time.sleep(0.5)
    assert not marker.exists()
    assert _srun_as(c, user, "-N1", "id", "-un").stdout == f"{USER}\n"  # still healthy
