"""Step supervisors for the unit tests, forked from a fresh interpreter as the agent's own
spawner forks them (agent/spawner.py), never from pytest's process.

Why: a fork runs the at-fork handlers of everything the forking process has loaded.
libuv's (uvloop, which the controller's tests load) closes the descriptor numbers of its
old lock pipe in every child and opens a new pipe at the lowest free numbers.  In a step
supervisor's job process those numbers are the supervisor's own: CI once saw the socket
that passes the job's stderr back turn into that pipe (ENOTSOCK), so `scontrol notify`
lines never reached the job's stderr.  The agent is safe (its spawner is forked before it
loads anything, and it never loads uvloop); pytest's process is not."""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

import corral
from corral.agent import spawner

_SERVE = ("import socket, sys\n"
          "from corral.agent import spawner\n"
          "spawner._serve(socket.socket(fileno=int(sys.argv[1])))\n")


class CleanSpawner:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        src = os.path.dirname(os.path.dirname(os.path.abspath(corral.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _SERVE, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        ours.settimeout(60)
        self.sock = ours

    def spawn(self, job_dir: str) -> int:
        """stepd.spawn_step(job_dir), in the clean process: the supervisor's pid, or
        RuntimeError with spawn_step's message."""
        self.sock.send(os.path.abspath(job_dir).encode())
        return spawner.supervisor_pid(self.sock.recv(8192).decode())

    def close(self) -> None:
        self.sock.close()  # its recv ends: it exits
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_spawner: CleanSpawner | None = None


def spawn_step(job_dir: str) -> int:
    global _spawner
    if _spawner is None or _spawner.proc.poll() is not None:
        _spawner = CleanSpawner()
        atexit.register(_spawner.close)
    return _spawner.spawn(job_dir)


def close() -> None:
    """Stop the spawner process (a module's teardown: later tests count our children)."""
    global _spawner
    if _spawner is not None:
        _spawner.close()
        _spawner = None


@pytest.fixture(scope="module", autouse=True)
def _close_clean_spawner() -> Iterator[None]:
    """Imported by the modules that spawn: the spawner goes with the module's tests."""
    yield
    close()
