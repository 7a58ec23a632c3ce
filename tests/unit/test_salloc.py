"""salloc against a scripted fake controller (the one test_srun.py defines)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral.cli import salloc
from corral.cli.options import CliExit
from tests.unit import test_srun
from tests.unit.test_srun import Peer, child_env

# The fake controller's fixtures, shared with test_srun.py.
home = test_srun.home
controller = test_srun.controller

ALLOC_ENV = {"SLURM_JOB_ID": "42", "SLURM_JOBID": "42", "SLURM_JOB_NODELIST": "node-1",
             "SLURM_NNODES": "1"}


def run_salloc(home: Path, args: list[str], timeout: float = 30,
               **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "corral.cli.salloc", *args],
                          stdin=subprocess.DEVNULL, capture_output=True,
                          env=child_env(home, **env), timeout=timeout)


async def grant(peer: Peer, pending: bool = False) -> dict[str, Any]:
    start = await peer.recv_type("start")
    if pending:
        await peer.send({"type": "pending", "job_id": 42, "reason": "Resources"})
    await peer.send({"type": "allocated", "job_id": 42, "nodes": "node-1", "env": ALLOC_ENV})
    return start


def test_runs_the_command_with_the_allocation_environment(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        start = await grant(peer)
        assert start["job_id"] is None and start["step"] is None
        # Slurm 22.05 salloc names the job "interactive", not after its command
        assert start["alloc"]["name"] == "interactive" and start["alloc"]["num_nodes"] == 2
        assert start["alloc_env"]["KEEP"] == "me"
        await peer.drain()

    ctl = controller(script)
    res = run_salloc(home, ["-N2", "sh", "-c", 'echo "$SLURM_JOB_ID $SLURM_JOB_NODELIST $KEEP"; '
                            "exit 3"], KEEP="me")
    assert res.stdout == b"42 node-1 me\n"
    assert res.stderr.decode() == ("salloc: Granted job allocation 42\n"
                                   "salloc: Relinquishing job allocation 42\n")
    assert res.returncode == 3
    assert ctl.sent("release") == [{"type": "release", "exit_code": 3}]


def test_pending_allocation_messages(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        await grant(peer, pending=True)
        await peer.drain()

    controller(script)
    res = run_salloc(home, ["true"])
    assert res.returncode == 0
    assert res.stderr.decode() == ("salloc: Pending job allocation 42\n"
                                   "salloc: job 42 queued and waiting for resources\n"
                                   "salloc: job 42 has been allocated resources\n"
                                   "salloc: Granted job allocation 42\n"
                                   "salloc: Relinquishing job allocation 42\n")


def test_no_shell_detaches(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        await grant(peer)
        await peer.drain()

    ctl = controller(script)
    res = run_salloc(home, ["--no-shell", "-n", "4"])
    assert res.returncode == 0
    assert res.stderr.decode() == "salloc: Granted job allocation 42\n"
    assert ctl.sent("detach") == [{"type": "detach"}]
    assert ctl.sent("release") == []


def test_revoked_allocation_hangs_up_the_command(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        await grant(peer)
        await asyncio.sleep(0.5)  # the command is running by then
        await peer.send({"type": "ended", "state": "CANCELLED"})
        await peer.drain()

    ctl = controller(script)
    res = run_salloc(home, ["sleep", "30"], timeout=20)
    assert res.returncode == 0  # a command ended by SIGHUP is a normal exit (Slurm)
    assert res.stderr.decode() == ("salloc: Granted job allocation 42\n"
                                   "salloc: Job allocation 42 has been revoked.\n")
    assert ctl.sent("release") == []


def test_time_limit_revocation_wording(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        await grant(peer)
        await peer.send({"type": "ended", "state": "TIMEOUT"})
        await peer.drain()

    controller(script)
    res = run_salloc(home, ["sleep", "30"], timeout=20)
    assert "salloc: Job 42 has exceeded its time limit and its allocation has been " \
           "revoked.\n" in res.stderr.decode()


def test_error_from_the_controller(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        await peer.recv_type("start")
        await peer.send({"type": "error", "message": "Job submit/allocate failed: Requested "
                         "node configuration is not available"})
        await peer.drain()

    controller(script)
    res = run_salloc(home, ["-N", "99", "true"])
    assert res.returncode == 1
    assert res.stderr.decode() == ("salloc: error: Job submit/allocate failed: Requested node "
                                   "configuration is not available\n")


def test_command_that_cannot_run(home: Path, controller: Any) -> None:
    async def script(peer: Peer) -> None:
        await grant(peer)
        await peer.drain()

    ctl = controller(script)
    res = run_salloc(home, ["/no/such/command"])
    assert res.returncode == 1
    assert 'salloc: error: Unable to exec command "/no/such/command"\n' in res.stderr.decode()
    assert ctl.sent("release") == [{"type": "release", "exit_code": 1}]


def test_no_controller(home: Path) -> None:
    res = run_salloc(home, ["true"])
    assert res.returncode == 1
    assert res.stderr.decode().startswith("salloc: error: no Corral controller is running")


def test_parse_defaults_and_errors() -> None:
    req = salloc.parse_salloc(["-J", "dev", "--gpus-per-node=2", "-t", "1:00:00"],
                              {"SHELL": "/bin/zsh"}, "/w", 0.0)
    assert req.command == ["/bin/zsh"]
    assert req.spec["name"] == "dev" and req.spec["gpus_per_node"] == 2
    assert req.spec["time_limit"] == 3600 and req.spec["batch"] is False
    with pytest.raises(CliExit) as info:
        salloc.parse_salloc(["--bogus"], {}, "/w", 0.0)
    assert info.value.code == 1
    assert info.value.stderr == ("salloc: unrecognized option '--bogus'\n"
                                 'Try "salloc --help" for more information\n')
    with pytest.raises(CliExit) as info:
        salloc.parse_salloc(["--licenses=x", "true"], {}, "/w", 0.0)
    assert info.value.stderr == "salloc: error: --licenses is not supported by Corral\n"
