"""A small helper process that starts step supervisors on the agent's behalf.

Forking the agent itself (tens of MB, an event loop, aiohttp) costs 10-30 ms per job on
a small machine and blocks the loop meanwhile.  This process is forked before the agent
loads anything heavy, stays small, and forks the supervisors; the agent only sends it a
job directory and awaits the supervisor's pid.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from typing import NoReturn


def _serve(sock: socket.socket) -> NoReturn:
    from corral.agent import stepd

    stepd.preload()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on `corral up --foreground` reaches the agent
    while True:
        try:
            msg = sock.recv(8192)
        except InterruptedError:
            continue
        except OSError:
            os._exit(0)
        if not msg:  # the agent is gone
            os._exit(0)
        try:
            reply = str(stepd.spawn_step(msg.decode()))
        except Exception as e:  # reported to the agent, which fails the job
            reply = f"ERR {e}"
        try:
            sock.send(reply.encode())
        except OSError:
            os._exit(0)


def close_inherited_fds() -> None:
    """Close every descriptor above stderr that this process inherited.

    The agent starts srun tasks with posix_spawn, which passes on any descriptor not marked
    close-on-exec, and step supervisors are forked from here: a descriptor left open by
    whatever started the agent (a shell, a service manager, a test harness) would reach
    every job of every user."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        os.closerange(3, 65536)
        return
    for fd in fds:
        if fd > 2:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, already closed


def supervisor_pid(reply: str) -> int:
    """The pid in the spawner's reply (`_serve`); RuntimeError with spawn_step's message,
    or when the spawner is gone (an empty reply)."""
    if not reply:
        raise RuntimeError("the spawner process is gone")
    if reply.startswith("ERR "):
        raise RuntimeError(reply[4:])
    return int(reply)


class Spawner:
    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.sock = sock
        self.pid = pid
        self._lock: asyncio.Lock | None = None

    @classmethod
    def start(cls) -> Spawner:
        """Fork the spawner; called first thing by `python -m corral.agent`, so the agent
        and the spawner drop the descriptors they inherited before opening their own."""
        close_inherited_fds()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            parent.close()
            _serve(child)
        child.close()
        return cls(parent, pid)

    async def spawn(self, job_dir: str) -> int:
        """Start a supervisor for `job_dir`; its pid. Raises RuntimeError if it failed."""
        if self._lock is None:
            self._lock = asyncio.Lock()
            self.sock.setblocking(False)
        loop = asyncio.get_running_loop()
        async with self._lock:
            await loop.sock_sendall(self.sock, job_dir.encode())
            reply = (await loop.sock_recv(self.sock, 8192)).decode()
        return supervisor_pid(reply)

    def close(self) -> None:
        self.sock.close()
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
