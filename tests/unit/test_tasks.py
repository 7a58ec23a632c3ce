"""TaskManager (agent/tasks.py) with real processes."""

from __future__ import annotations

import asyncio
import base64
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from corral.agent import tasks as tasks_mod
from corral.agent.tasks import TaskManager

PATH = "/usr/local/bin:/usr/bin:/bin"


class Collector:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def send(self, msg: dict[str, Any]) -> None:
        self.messages.append(msg)

    def output(self, task_id: int = 0, stream: str = "stdout", step_id: int | None = None) -> bytes:
        return b"".join(base64.b64decode(m["data"]) for m in self.messages
                        if m["type"] == "task_output" and m["task_id"] == task_id
                        and m["stream"] == stream and (step_id is None or m["step_id"] == step_id))

    def exits(self, step_id: int | None = None) -> dict[int, tuple[int, int]]:
        return {m["task_id"]: (m["exit_code"], m["signal"]) for m in self.messages
                if m["type"] == "task_exit" and (step_id is None or m["step_id"] == step_id)}


def launch_msg(argv: list[str], ntasks: int = 1, *, step_id: int = 0, cwd: str = "/tmp",
               env: dict[str, str] | None = None, uid: int | None = None,
               gid: int | None = None, user: str = "", **extra: Any) -> dict[str, Any]:
    base_env = {"PATH": PATH} if env is None else env
    tasks = [{"task_id": i, "local_id": i, "node": "node-1",
              "env": {**base_env, "SLURM_PROCID": str(i)},
              "stdout": None, "stderr": None, "stdin": None} for i in range(ntasks)]
    for arg, key in (("stdout", "stdout"), ("stderr", "stderr"), ("stdin_path", "stdin")):
        if arg in extra:
            value = extra.pop(arg)
            for t in tasks:
                t[key] = value(t["task_id"]) if callable(value) else value
    msg = {"type": "launch_tasks", "job_id": 7, "step_id": step_id,
           "uid": os.geteuid() if uid is None else uid,
           "gid": os.getegid() if gid is None else gid, "user": user, "home": "/tmp",
           "cwd": cwd, "argv": argv, "pty": False, "window": None, "stdin": "none",
           "tasks": tasks}
    msg.update(extra)
    return msg


async def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.005)


async def wait_idle(tm: TaskManager, timeout: float = 10.0) -> None:
    await wait_for(lambda: not tm.steps(), timeout)


def run(coro_fn: Callable[[TaskManager, Collector], Awaitable[None]],
        **kwargs: Any) -> Collector:
    col = Collector()

    async def main() -> None:
        tm = TaskManager(col.send, **kwargs)
        try:
            await coro_fn(tm, col)
        finally:
            await tm.shutdown()
            assert tm.steps() == []

    asyncio.run(main())
    return col


def test_output_complete_and_in_order() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["seq", "1", "50000"]))
        await wait_idle(tm)

    col = run(body)
    expected = "".join(f"{i}\n" for i in range(1, 50001)).encode()
    assert col.output(0) == expected
    assert col.exits() == {0: (0, 0)}
    last_output = max(i for i, m in enumerate(col.messages) if m["type"] == "task_output")
    exit_index = next(i for i, m in enumerate(col.messages) if m["type"] == "task_exit")
    assert last_output < exit_index


def test_stdout_stderr_separated_and_exit_codes() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["sh", "-c", "echo out$SLURM_PROCID; echo err >&2; "
                                    "exit $((SLURM_PROCID + 3))"], 3))
        await tm.launch(launch_msg(["sh", "-c", "kill -SEGV $$"], step_id=1))
        await wait_idle(tm)

    col = run(body)
    for t in range(3):
        assert col.output(t, "stdout", 0) == f"out{t}\n".encode()
        assert col.output(t, "stderr", 0) == b"err\n"
    assert col.exits(0) == {0: (3, 0), 1: (4, 0), 2: (5, 0)}
    assert col.exits(1) == {0: (0, signal.SIGSEGV)}


def test_streaming_is_not_buffered() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["sh", "-c", "printf partial; sleep 30"]))
        await wait_for(lambda: col.output(0) == b"partial")
        assert tm.steps() == [(7, 0)]
        await tm.kill(7, 0)

    col = run(body)
    assert col.exits() == {0: (0, signal.SIGTERM)}


def test_stdin_to_task_zero_then_eof() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["cat"], 2, stdin="0"))
        tm.stdin(7, 0, b"hello ")
        tm.stdin(7, 0, b"world\n" * 20000)  # more than a pipe holds: buffered in the agent
        await wait_for(lambda: 1 in col.exits())  # task 1 reads /dev/null
        assert 0 not in col.exits()
        tm.stdin(7, 0, None)
        await wait_idle(tm)

    col = run(body)
    assert col.output(0) == b"hello " + b"world\n" * 20000
    assert col.output(1) == b""
    assert col.exits() == {0: (0, 0), 1: (0, 0)}


def test_stdin_all_and_none() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["cat"], 2, stdin="all"))
        await tm.launch(launch_msg(["cat"], 1, stdin="none", step_id=1))
        tm.stdin(7, 0, b"x\n")
        tm.stdin(7, 0, None)
        await wait_idle(tm)

    col = run(body)
    assert col.output(0, step_id=0) == b"x\n"
    assert col.output(1, step_id=0) == b"x\n"
    assert col.output(0, step_id=1) == b""


def test_stdin_before_launch_is_kept() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        tm.stdin(7, 0, b"early\n")
        tm.stdin(7, 0, None)
        await tm.launch(launch_msg(["cat"], stdin="0"))
        await wait_idle(tm)

    assert run(body).output(0) == b"early\n"


def test_signal_reaches_trap() -> None:
    script = 'trap "echo got-usr1; exit 3" USR1; echo ready; while :; do sleep 0.05; done'

    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["sh", "-c", script]))
        await wait_for(lambda: col.output(0) == b"ready\n")
        tm.signal(7, 0, signal.SIGUSR1)
        await wait_idle(tm)

    col = run(body)
    assert col.output(0) == b"ready\ngot-usr1\n"
    assert col.exits() == {0: (3, 0)}


def test_kill_escalates_to_sigkill_after_kill_wait() -> None:
    script = 'trap "" TERM; echo ready; while :; do sleep 0.05; done'
    elapsed: list[float] = []

    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["sh", "-c", script], 2))
        await wait_for(lambda: col.output(0) == b"ready\n" and col.output(1) == b"ready\n")
        t0 = time.monotonic()
        await tm.kill(7, 0)
        elapsed.append(time.monotonic() - t0)
        assert tm.steps() == []

    col = run(body, kill_wait=0.4)
    assert col.exits() == {0: (0, signal.SIGKILL), 1: (0, signal.SIGKILL)}
    assert 0.4 <= elapsed[0] < 6.0


def test_kill_wait_from_message_and_sigterm() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["sleep", "60"], kill_wait=0.2))
        t0 = time.monotonic()
        await tm.kill(7, 0)
        assert time.monotonic() - t0 < 5  # SIGTERM, not the 100 s of the agent's KillWait

    assert run(body, kill_wait=100).exits() == {0: (0, signal.SIGTERM)}


def test_kill_before_launch_starts_nothing() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.kill(7, 0)
        await tm.launch(launch_msg(["sh", "-c", "echo should-not-run"], 2))
        await wait_idle(tm)

    col = run(body)
    assert col.exits() == {0: (0, signal.SIGKILL), 1: (0, signal.SIGKILL)}
    assert col.output(0) == b""


def test_kill_job_and_shutdown() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["sleep", "60"], step_id=0))
        await tm.launch(launch_msg(["sleep", "60"], step_id=1))
        await tm.launch({**launch_msg(["sleep", "60"]), "job_id": 8})
        assert sorted(tm.steps()) == [(7, 0), (7, 1), (8, 0)]
        await tm.kill_job(7)
        assert tm.steps() == [(8, 0)]
        await tm.shutdown()
        assert tm.steps() == []

    col = run(body)
    assert [m["signal"] for m in col.messages if m["type"] == "task_exit"] == [15, 15, 15]


def test_environment_exact_and_task_pid() -> None:
    env = {"PATH": PATH, "BASH_FUNC_module%%": "() {  echo hi\n}", "IFS": ":",
           "WEIRD": "a b\tc", "EMPTY": "", "SLURM_TASK_PID": "stale"}

    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["env", "-0"], env=env))
        await tm.launch(launch_msg(["sh", "-c", 'echo "$$ $SLURM_TASK_PID"'], step_id=1))
        await wait_idle(tm)

    col = run(body)
    got = dict(item.split("=", 1) for item in col.output(0, step_id=0).decode().split("\0") if item)
    expected = {k: v for k, v in env.items() if k != "SLURM_TASK_PID"}
    pid = got.pop("SLURM_TASK_PID")
    assert got == {**expected, "SLURM_PROCID": "0"}
    assert pid.isdigit()
    shell_pid, task_pid = col.output(0, step_id=1).split()
    assert shell_pid == task_pid


def test_umask_cwd_and_session() -> None:
    with tempfile.TemporaryDirectory() as d:
        async def body(tm: TaskManager, col: Collector) -> None:
            await tm.launch(launch_msg(
                ["sh", "-c", "umask; pwd; ps -o sid= -o pgid= -p $$; echo $$"], cwd=d,
                env={"PATH": PATH, "SLURM_UMASK": "0077"}))
            await wait_idle(tm)

        col = run(body)
        umask, cwd, ids, pid = col.output(0).decode().split("\n")[:4]
        assert umask == "0077"
        assert os.path.realpath(cwd) == os.path.realpath(d)
        assert ids.split() == [pid, pid]  # its own session and process group


def test_missing_cwd_goes_to_tmp() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["pwd"], cwd="/nonexistent/dir"))
        await wait_idle(tm)

    col = run(body)
    assert col.output(0, "stderr") == (b"slurmstepd: error: couldn't chdir to `/nonexistent/dir': "
                                       b"No such file or directory: going to /tmp instead\n")
    assert col.output(0) == b"/tmp\n"
    assert col.exits() == {0: (0, 0)}


def test_exec_failures() -> None:
    with tempfile.TemporaryDirectory() as d:
        noexec = os.path.join(d, "noexec.sh")
        badinterp = os.path.join(d, "bad.sh")
        with open(noexec, "w") as f:
            f.write("#!/bin/sh\necho hi\n")
        with open(badinterp, "w") as f:
            f.write("#!/no/such/shell\necho hi\n")
        os.chmod(badinterp, 0o755)

        async def body(tm: TaskManager, col: Collector) -> None:
            await tm.launch(launch_msg(["no-such-command-xyz", "a"], 2, step_id=0))
            if os.geteuid() != 0:  # root may execute anything with an x bit only
                await tm.launch(launch_msg([noexec], step_id=1))
            await tm.launch(launch_msg(["./bad.sh"], step_id=2, cwd=d))
            await wait_idle(tm)

        col = run(body)
    for t in (0, 1):
        assert col.output(t, "stderr", 0) == (b"slurmstepd: error: execve(): no-such-command-xyz: "
                                              b"No such file or directory\n")
    assert col.exits(0) == {0: (2, 0), 1: (2, 0)}
    if os.geteuid() != 0:
        assert col.exits(1) == {0: (13, 0)}
    assert col.output(0, "stderr", 2) == (b"slurmstepd: error: execve(): bad interpreter"
                                          b"(/no/such/shell): No such file or directory\n")
    assert col.exits(2) == {0: (2, 0)}


def test_sigpipe_is_default_in_tasks() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["sh", "-c", "yes | head -n 1"]))
        await wait_idle(tm)

    col = run(body)
    assert col.output(0) == b"y\n"
    assert col.output(0, "stderr") == b""  # `yes` died of SIGPIPE, no "Broken pipe" error


def test_output_files() -> None:
    with tempfile.TemporaryDirectory() as d:
        shared = os.path.join(d, "out.txt")
        with open(shared, "w") as f:
            f.write("old content that must be truncated\n" * 10)

        async def body(tm: TaskManager, col: Collector) -> None:
            await tm.launch(launch_msg(
                ["sh", "-c", "echo out-$SLURM_PROCID; echo err-$SLURM_PROCID >&2"], 3,
                stdout=shared, stderr=lambda t: os.path.join(d, f"err-{t}.txt")))
            await tm.launch(launch_msg(["cat"], step_id=1, stdin_path=shared))
            await wait_idle(tm)
            await tm.launch(launch_msg(["cat"], step_id=2, stdin_path=shared))
            await tm.launch(launch_msg(["echo", "x"], step_id=3,
                                       stdout=os.path.join(d, "missing", "o.txt")))
            await wait_idle(tm)

        col = run(body)
        with open(shared) as f:
            assert sorted(f.read().splitlines()) == ["out-0", "out-1", "out-2"]
        for t in range(3):
            with open(os.path.join(d, f"err-{t}.txt")) as f:
                assert f.read() == f"err-{t}\n"
        assert col.output(0, "stdout", 0) == b"" and col.output(0, "stderr", 0) == b""
        assert sorted(col.output(0, step_id=2).decode().splitlines()) == ["out-0", "out-1", "out-2"]
        assert col.output(0, "stderr", 3) == (
            f"slurmstepd: error: Could not open stdout file {d}/missing/o.txt: "
            f"No such file or directory\n").encode()
        assert col.exits(3) == {0: (1, 0)}


def test_fifo_as_output_never_blocks_the_agent() -> None:
    """srun -o FIFO: without a reader the task fails at once with Slurm's line (the open
    does not wait in the agent's loop); with a reader the task's writes block normally."""
    with tempfile.TemporaryDirectory() as d:
        fifo = os.path.join(d, "fifo")
        os.mkfifo(fifo)
        got: list[bytes] = []

        async def body(tm: TaskManager, col: Collector) -> None:
            t0 = time.monotonic()
            await tm.launch(launch_msg(["echo", "x"], stdout=fifo))
            assert time.monotonic() - t0 < 5.0  # the open did not block
            await wait_idle(tm)
            # a reader: output larger than a pipe holds arrives whole, writes were blocking
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            try:
                await tm.launch(launch_msg(["head", "-c", "300000", "/dev/zero"], step_id=1,
                                           stdout=fifo))
                loop = asyncio.get_running_loop()
                chunks: list[bytes] = []

                def drain() -> None:
                    try:
                        chunks.append(os.read(reader, 65536))
                    except BlockingIOError:
                        pass
                loop.add_reader(reader, drain)
                await wait_idle(tm)
                await wait_for(lambda: sum(map(len, chunks)) >= 300000)
                loop.remove_reader(reader)
                got.append(b"".join(chunks))
            finally:
                os.close(reader)

        col = run(body)
        assert col.output(0, "stderr", 0) == (
            f"slurmstepd: error: Could not open stdout file {fifo}: "
            f"No such device or address\n").encode()
        assert col.exits(0) == {0: (1, 0)}
        assert col.exits(1) == {0: (0, 0)} and got == [b"\0" * 300000]


def test_fifo_as_input_without_writer_does_not_block() -> None:
    with tempfile.TemporaryDirectory() as d:
        fifo = os.path.join(d, "fifo")
        os.mkfifo(fifo)

        async def body(tm: TaskManager, col: Collector) -> None:
            t0 = time.monotonic()
            await tm.launch(launch_msg(["sh", "-c", "echo started"], stdin_path=fifo))
            assert time.monotonic() - t0 < 5.0  # the open did not block
            await wait_idle(tm)

        col = run(body)
        assert col.output(0) == b"started\n" and col.exits() == {0: (0, 0)}


def test_resource_limits_from_srun_are_set_on_each_task() -> None:
    """SLURM_RLIMIT_* (srun's shell's soft limits) are set on the task while it waits at its
    gate and are not left in its environment."""
    async def body(tm: TaskManager, col: Collector) -> None:
        env = {"PATH": PATH, "SLURM_RLIMIT_NOFILE": "123", "SLURM_RLIMIT_CORE": "0",
               "SLURM_RLIMIT_FSIZE": "18446744073709551615", "SLURM_RLIMIT_CPU": "x"}
        await tm.launch(launch_msg(["sh", "-c", "ulimit -n; ulimit -c; ulimit -f; "
                                    "env | grep -c SLURM_RLIMIT_ || true"], 2, env=env))
        await wait_idle(tm)

    col = run(body)
    for t in (0, 1):
        assert col.output(t) == b"123\n0\nunlimited\n0\n"
    assert col.exits() == {0: (0, 0), 1: (0, 0)}


def test_task_prolog_and_epilog(monkeypatch: pytest.MonkeyPatch) -> None:
    """srun --task-prolog runs just before each task with its environment and SLURM_TASK_PID;
    its "export NAME=value" lines reach the task (and win over srun's); --task-epilog runs
    just after each task ends, before its exit is reported; one that hangs is killed."""
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o755)
        prolog = os.path.join(d, "prolog")
        epilog = os.path.join(d, "epilog")
        with open(prolog, "w") as f:
            f.write("#!/bin/sh\necho \"export FROM_PROLOG=rank$SLURM_PROCID\"\n"
                    "echo 'export SHARED=prolog'\necho 'ignored line'\n"
                    "echo \"prolog pid $SLURM_TASK_PID\" >&2\n")
        with open(epilog, "w") as f:
            f.write("#!/bin/sh\necho \"$SLURM_PROCID $SLURM_TASK_PID $SHARED\" "
                    "> epilog-$SLURM_PROCID\n[ \"$SLURM_PROCID\" = 1 ] && exec sleep 60\n"
                    "exit 0\n")
        os.chmod(prolog, 0o755)
        os.chmod(epilog, 0o755)
        monkeypatch.setattr(tasks_mod, "EPILOG_TIMEOUT", 1.0)
        seen: dict[int, bool] = {}

        async def body(tm: TaskManager, col: Collector) -> None:
            env = {"PATH": PATH, "SHARED": "srun"}
            await tm.launch(launch_msg(
                ["sh", "-c", "echo $FROM_PROLOG $SHARED $SLURM_TASK_PID"], 2, env=env, cwd=d,
                task_prolog=prolog, task_epilog=epilog))

            def exited() -> bool:
                for t in col.exits():
                    seen.setdefault(t, os.path.exists(os.path.join(d, f"epilog-{t}")))
                return len(col.exits()) == 2
            t0 = time.monotonic()
            await wait_for(exited)
            assert time.monotonic() - t0 < 5  # the hanging epilog was killed after 1 s
            await wait_idle(tm)

        col = run(body)
        assert seen == {0: True, 1: True}  # each epilog ran before its task's exit was sent
        for t in (0, 1):
            words = col.output(t).decode().split()
            assert words[:2] == [f"rank{t}", "prolog"], words
            assert col.output(t, "stderr") == f"prolog pid {words[2]}\n".encode()
            with open(os.path.join(d, f"epilog-{t}")) as f:
                assert f.read() == f"{t} {words[2]} srun\n"
        assert col.exits() == {0: (0, 0), 1: (0, 0)}


def test_background_process_does_not_hold_the_step() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        t0 = time.monotonic()
        await tm.launch(launch_msg(["sh", "-c", "sleep 30 & echo started"]))
        await wait_idle(tm)
        assert time.monotonic() - t0 < tasks_mod.DRAIN_GRACE + 4

    col = run(body)
    assert col.output(0) == b"started\n"
    assert col.exits() == {0: (0, 0)}


def test_leftover_outside_the_group_holding_output() -> None:
    leftover: list[int] = []

    async def body(tm: TaskManager, col: Collector) -> None:
        t0 = time.monotonic()
        # setsid: the leftover escapes the task's process group, and keeps stdout open
        script = ('setsid sleep 30 & p=$!; '
                  'until [ "$(ps -o sid= -p $p | tr -d " ")" = $p ]; do sleep 0.01; done; echo $p')
        await tm.launch(launch_msg(["sh", "-c", script]))
        await wait_idle(tm, timeout=tasks_mod.DRAIN_GRACE + 5)
        leftover.append(int(col.output(0)))
        assert tasks_mod.DRAIN_GRACE <= time.monotonic() - t0 < tasks_mod.DRAIN_GRACE + 4

    try:
        col = run(body)
        assert col.exits() == {0: (0, 0)}
    finally:
        for pid in leftover:
            os.kill(pid, signal.SIGKILL)


def test_without_pidfd_children_are_polled() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        tm._use_pidfd = False
        await tm.launch(launch_msg(["sh", "-c", "sleep 0.1; exit 4"], 3))
        await wait_idle(tm)

    assert run(body).exits() == {0: (4, 0), 1: (4, 0), 2: (4, 0)}


def test_second_launch_merges_into_step() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        first = launch_msg(["sleep", "60"], 2)
        second = launch_msg(["sleep", "60"], 4)
        second["tasks"] = second["tasks"][1:]  # task 1 again (ignored), tasks 2 and 3
        await tm.launch(first)
        await tm.launch(second)
        assert tm.steps() == [(7, 0)]
        await tm.kill(7, 0)

    col = run(body)
    assert col.exits() == {t: (0, signal.SIGTERM) for t in range(4)}
    assert len([m for m in col.messages if m["type"] == "task_exit"]) == 4


def test_pty() -> None:
    script = ('if [ "$SLURM_PROCID" = 1 ]; then tty; exit; fi; '
              "tty; stty size; echo ready; read line; stty size; echo got:$line")

    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["sh", "-c", script], 2, stdin="0", pty=True,
                                   window={"rows": 33, "cols": 111}))
        await wait_for(lambda: b"ready" in col.output(0))
        tm.resize(7, 0, 40, 120)
        tm.stdin(7, 0, b"hello\n")
        await wait_idle(tm)

    col = run(body)
    lines = col.output(0).decode().replace("\r\n", "\n").split("\n")
    assert lines[0].startswith("/dev/pts/")
    assert lines[1] == "33 111"
    assert lines[2:6] == ["ready", "hello", "40 120", "got:hello"]  # "hello" is the echo
    assert col.output(1).decode() == "not a tty\n"  # other tasks: no terminal, no input
    assert col.exits() == {0: (0, 0), 1: (1, 0)}


def test_pty_eof_and_signal() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["cat"], stdin="0", pty=True, window={"rows": 5, "cols": 7}))
        tm.stdin(7, 0, b"abc\n")
        for _ in range(200):  # the terminal echoed the line: cat is reading it
            if col.output(0, step_id=0).count(b"abc") >= 2:
                break
            await asyncio.sleep(0.01)
        tm.stdin(7, 0, None)  # ^D on the terminal: cat sees end of input
        await wait_idle(tm)
        await tm.launch(launch_msg(["sleep", "60"], step_id=1, pty=True))
        tm.signal(7, 1, signal.SIGINT)
        await wait_idle(tm)

    col = run(body)
    assert col.output(0, step_id=0).replace(b"\r\n", b"\n").startswith(b"abc\nabc\n")
    assert col.exits(0) == {0: (0, 0)}
    assert col.exits(1) == {0: (0, signal.SIGINT)}


def test_sixteen_tasks_start_fast() -> None:
    times: list[float] = []

    async def body(tm: TaskManager, col: Collector) -> None:
        for step in range(3):
            t0 = time.perf_counter()
            await tm.launch(launch_msg(["true"], 16, step_id=step))
            spawned = time.perf_counter()
            await wait_idle(tm)
            times.append(spawned - t0)
            times.append(time.perf_counter() - t0)

    col = run(body)
    print(f"\n16 x true: launch {1000 * times[-2]:.1f} ms ({1000 * times[-2] / 16:.2f} ms/task), "
          f"all exits {1000 * times[-1]:.1f} ms")
    assert len(col.exits(2)) == 16 and set(col.exits(2).values()) == {(0, 0)}
    assert times[-1] < 10.0  # all ran; the speed is bench_srun.py's


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_no_fd_leaks_and_no_zombies() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        before = _open_fds()
        await tm.launch(launch_msg(["sh", "-c", "echo hi; cat"], 4, stdin="all"))
        await tm.launch(launch_msg(["cat"], step_id=1, pty=True, stdin="0"))
        await tm.launch(launch_msg(["no-such-command-xyz"], step_id=2))
        tm.stdin(7, 0, b"data\n")
        tm.stdin(7, 0, None)
        tm.stdin(7, 1, None)
        await tm.kill(7, 1)
        await wait_idle(tm)
        await asyncio.sleep(0.05)
        assert _open_fds() == before
        with pytest.raises(ChildProcessError):
            os.waitpid(-1, os.WNOHANG)

    run(body)


# ---- another user (root only) ---------------------------------------------------------

@pytest.fixture(scope="module")
def other_user() -> Iterator[pwd.struct_passwd]:
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd")
    name = f"crltask{os.getpid() % 100000}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name],
                   check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)


@pytest.mark.parametrize("with_setpriv", [True, False])
def test_other_user(other_user: pwd.struct_passwd, with_setpriv: bool) -> None:
    d = tempfile.mkdtemp()
    os.chown(d, other_user.pw_uid, other_user.pw_gid)
    secret = os.path.join(tempfile.mkdtemp(), "secret")  # root's 0700 directory
    try:
        async def body(tm: TaskManager, col: Collector) -> None:
            if not with_setpriv:
                tm._setpriv = None  # the fallback: subprocess with user/group
            ident: dict[str, Any] = {"uid": other_user.pw_uid, "gid": other_user.pw_gid,
                                     "user": other_user.pw_name}
            await tm.launch(launch_msg(["sh", "-c", "id -u; id -g; echo $SLURM_TASK_PID $$"],
                                       cwd=d, **ident))
            await tm.launch(launch_msg(["echo", "in-file"], step_id=1, cwd=d,
                                       stdout=os.path.join(d, "o.txt"), **ident))
            await tm.launch(launch_msg(["echo", "x"], step_id=2, cwd=d, stdout=secret, **ident))
            await tm.launch(launch_msg(["tty"], step_id=3, cwd=d, pty=True, **ident))
            await wait_idle(tm)

        col = run(body)
        uid, gid, pids = col.output(0, step_id=0).decode().splitlines()
        assert (int(uid), int(gid)) == (other_user.pw_uid, other_user.pw_gid)
        assert pids.split()[0] == pids.split()[1]
        st = os.stat(os.path.join(d, "o.txt"))
        assert (st.st_uid, st.st_gid) == (other_user.pw_uid, other_user.pw_gid)
        with open(os.path.join(d, "o.txt")) as f:
            assert f.read() == "in-file\n"
        assert not os.path.exists(secret)  # opened with the user's rights, not root's
        assert b"Permission denied" in col.output(0, "stderr", 2)
        assert col.exits(2) == {0: (1, 0)}
        tty = col.output(0, step_id=3).decode().strip()
        assert tty.startswith("/dev/pts/")
        assert col.exits(3) == {0: (0, 0)}
    finally:
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(os.path.dirname(secret), ignore_errors=True)


def test_non_root_cannot_run_other_uid() -> None:
    if os.geteuid() == 0:
        pytest.skip("root may run tasks of any uid")

    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["true"], uid=os.geteuid() + 1))
        await wait_idle(tm)

    col = run(body)
    assert b"cannot run tasks of uid" in col.output(0, "stderr")
    assert col.exits() == {0: (1, 0)}


@pytest.mark.parametrize("with_setpriv", [True, False])
def test_program_resolved_with_the_users_rights(other_user: pwd.struct_passwd,
                                                with_setpriv: bool) -> None:
    # root's private directory: whether a program exists there must not show (Slurm resolves
    # the program in the task, after it became the user)
    private = tempfile.mkdtemp()
    os.chmod(private, 0o700)
    prog = os.path.join(private, "prog")
    with open(prog, "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(prog, 0o755)
    public = tempfile.mkdtemp()
    os.chmod(public, 0o755)
    mine = os.path.join(public, "mine")
    with open(mine, "w") as f:
        f.write("#!/bin/sh\necho mine\n")
    os.chmod(mine, 0o700)  # root's, not executable for the user
    ident: dict[str, Any] = {"uid": other_user.pw_uid, "gid": other_user.pw_gid,
                             "user": other_user.pw_name}
    try:
        async def body(tm: TaskManager, col: Collector) -> None:
            if not with_setpriv:
                tm._setpriv = None
            await tm.launch(launch_msg([prog], step_id=0, **ident))
            await tm.launch(launch_msg([os.path.join(private, "absent")], step_id=1, **ident))
            await tm.launch(launch_msg(["prog"], step_id=2,
                                       env={"PATH": f"{private}:{PATH}"}, **ident))
            await tm.launch(launch_msg([mine], step_id=3, **ident))
            await wait_idle(tm)

        col = run(body)
        assert col.output(0, "stderr", 0) == \
            f"slurmstepd: error: execve(): {prog}: Permission denied\n".encode()
        absent = os.path.join(private, "absent")
        assert col.output(0, "stderr", 1) == \
            f"slurmstepd: error: execve(): {absent}: Permission denied\n".encode()
        # not found on PATH for the user (root would have found it first in PATH)
        assert col.output(0, "stderr", 2) == \
            b"slurmstepd: error: execve(): prog: No such file or directory\n"
        assert col.output(0, "stderr", 3) == \
            f"slurmstepd: error: execve(): {mine}: Permission denied\n".encode()
        assert col.exits(0) == {0: (13, 0)} and col.exits(2) == {0: (2, 0)}
        assert col.output(0, "stdout", 0) == b""
    finally:
        shutil.rmtree(private, ignore_errors=True)
        shutil.rmtree(public, ignore_errors=True)


# ---- cgroups, CPUs, flow control --------------------------------------------------------

def _cgroup_root() -> str:
    from corral.agent import launch

    root = launch.cgroup_root()
    if root is None:
        pytest.skip("needs a writable cgroup hierarchy (root)")
    return root


def _job_dirs(root: str, cluster: str) -> list[str]:
    return [p for c in ("memory", "freezer", "pids", "cpuset", "")
            if os.path.isdir(p := os.path.join(root, c, "corral", cluster, "job_7"))]


def test_tasks_get_a_step_group_beside_the_batch_steps_on_its_cpus() -> None:
    from corral.agent.cgroup import StepCgroup, remove_cluster_groups

    root = _cgroup_root()
    cluster = f"ttasks{os.getpid()}"
    cpu = sorted(os.sched_getaffinity(0))[-1]
    batch = StepCgroup(root, 7, "batch", cluster)
    batch.create([cpu], 300, job_limits=True)  # what the batch step's supervisor makes
    try:
        async def body(tm: TaskManager, col: Collector) -> None:
            await tm.launch(launch_msg(["sh", "-c", "cat /proc/self/cgroup; "
                                        "grep Cpus_allowed_list /proc/self/status"],
                                       node_cpus={"node-1": 1}))
            await wait_idle(tm)
            deadline = time.monotonic() + 5
            while any(os.path.isdir(os.path.join(d, "step_0")) for d in _job_dirs(root, cluster)) \
                    and time.monotonic() < deadline:
                await asyncio.sleep(0.05)

        col = run(body, cgroup_root=root, cgroup_cluster=cluster)
        out = col.output(0).decode()
        # its own group under the job's (which holds the job's limits), not the batch step's:
        # a signal to the batch step's processes does not reach the tasks directly
        assert f"/corral/{cluster}/job_7/step_0" in out, out
        assert f"/corral/{cluster}/job_7/step_batch" not in out, out
        assert out.strip().splitlines()[-1].split()[-1] == str(cpu)
        assert col.exits() == {0: (0, 0)}
        dirs = _job_dirs(root, cluster)
        assert dirs  # the job's group stays while its batch step runs; the step's is gone
        assert not any(os.path.isdir(os.path.join(d, "step_0")) for d in dirs)
        mem = os.path.join(root, "memory", "corral", cluster, "job_7", "memory.limit_in_bytes")
        if os.path.exists(mem):  # cgroup v1 here: the job's limit is on the job's group
            with open(mem) as f:
                assert int(f.read()) == 300 * 1024 * 1024
    finally:
        batch.remove()
        remove_cluster_groups(root, cluster)


def test_tasks_of_an_allocation_get_a_job_group_removed_at_the_end() -> None:
    from corral.agent.cgroup import remove_cluster_groups

    root = _cgroup_root()
    cluster = f"ttasks{os.getpid()}b"
    try:
        async def body(tm: TaskManager, col: Collector) -> None:
            await tm.launch(launch_msg(["sh", "-c", "cat /proc/self/cgroup; "
                                        "setsid sleep 30 >/dev/null 2>&1 & echo"],
                                       step_id=4, node_mem_mb={"node-1": 300}))
            await wait_idle(tm)
            deadline = time.monotonic() + 5
            while _job_dirs(root, cluster) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # the escaped `sleep` is killed with the group

        col = run(body, cgroup_root=root, cgroup_cluster=cluster)
        assert f"/corral/{cluster}/job_7/step_4" in col.output(0).decode()
        assert col.exits() == {0: (0, 0)}
        assert _job_dirs(root, cluster) == []
    finally:
        remove_cluster_groups(root, cluster)


def test_paused_output_blocks_the_task_until_resumed() -> None:
    async def body(tm: TaskManager, col: Collector) -> None:
        await tm.launch(launch_msg(["sh", "-c", "head -c 2000000 /dev/zero; echo done >&2"]))
        tm.flow(7, 0, True)
        await asyncio.sleep(0.5)
        held = len(col.output(0))
        assert held < 2000000 and col.exits() == {}  # blocked on its full pipe
        await asyncio.sleep(0.3)
        assert len(col.output(0)) == held  # nothing read while paused
        tm.flow(7, 0, False)
        await wait_idle(tm)

    col = run(body)
    assert len(col.output(0)) == 2000000
    assert col.output(0, "stderr") == b"done\n"
    assert col.exits() == {0: (0, 0)}


@pytest.mark.parametrize("with_setpriv", [True, False])
def test_another_users_tasks_join_the_job_group(other_user: pwd.struct_passwd,
                                                with_setpriv: bool) -> None:
    # the gate works on both spawn paths (posix_spawn's fd 3, subprocess's pass_fds)
    from corral.agent.cgroup import remove_cluster_groups

    root = _cgroup_root()
    cluster = f"ttasks{os.getpid()}u{int(with_setpriv)}"
    ident: dict[str, Any] = {"uid": other_user.pw_uid, "gid": other_user.pw_gid,
                             "user": other_user.pw_name}
    try:
        async def body(tm: TaskManager, col: Collector) -> None:
            if not with_setpriv:
                tm._setpriv = None
            await tm.launch(launch_msg(["sh", "-c", "id -u; cat /proc/$$/cgroup"], 2,
                                       step_id=5, **ident))
            await tm.launch(launch_msg(["ls", "/proc/self/fd"], step_id=6, **ident))
            await wait_idle(tm)

        col = run(body, cgroup_root=root, cgroup_cluster=cluster)
        for t in range(2):
            lines = col.output(t, step_id=5).decode().splitlines()
            assert lines[0] == str(other_user.pw_uid), lines
            assert any(f"/corral/{cluster}/job_7/step_5" in ln for ln in lines), lines
        if with_setpriv:  # the gate is not left open in the task (ls's directory is its fd 3)
            fds = col.output(0, step_id=6).split()
            assert b"3" in fds and not {b"4", b"5", b"6", b"7", b"8", b"9"} & set(fds), fds
        assert col.exits(5) == {0: (0, 0), 1: (0, 0)}, col.messages
    finally:
        remove_cluster_groups(root, cluster)


@pytest.mark.parametrize("with_setpriv", [True, False])
def test_task_prolog_and_epilog_run_as_the_user(other_user: pwd.struct_passwd,
                                                with_setpriv: bool) -> None:
    """The prolog and epilog are the user's programs: they run with the task owner's ids,
    never root's (a root prolog could be made to write anywhere)."""
    d = tempfile.mkdtemp()
    os.chmod(d, 0o755)
    work = os.path.join(d, "work")
    os.mkdir(work)
    os.chown(work, other_user.pw_uid, other_user.pw_gid)
    prolog, epilog = os.path.join(d, "prolog"), os.path.join(d, "epilog")
    with open(prolog, "w") as f:
        f.write("#!/bin/sh\necho \"export PROLOG_UID=$(id -u)\"\n")
    with open(epilog, "w") as f:
        f.write("#!/bin/sh\nid -u > epilog.uid\n")
    os.chmod(prolog, 0o755)
    os.chmod(epilog, 0o755)
    try:
        async def body(tm: TaskManager, col: Collector) -> None:
            if not with_setpriv:
                tm._setpriv = None
            await tm.launch(launch_msg(
                ["sh", "-c", "echo $PROLOG_UID"], cwd=work, uid=other_user.pw_uid,
                gid=other_user.pw_gid, user=other_user.pw_name,
                task_prolog=prolog, task_epilog=epilog))
            await wait_idle(tm)

        col = run(body)
        assert col.output(0) == f"{other_user.pw_uid}\n".encode()
        assert col.exits() == {0: (0, 0)}
        out = os.path.join(work, "epilog.uid")
        with open(out) as f:
            assert f.read() == f"{other_user.pw_uid}\n"
        assert os.stat(out).st_uid == other_user.pw_uid
    finally:
        shutil.rmtree(d, ignore_errors=True)
