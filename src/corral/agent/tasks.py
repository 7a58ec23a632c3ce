"""The tasks of job steps (`srun`'s processes) on this node.

`TaskManager` starts the tasks of a `launch_tasks` message, streams their output to the
controller as it is written, feeds their standard input, forwards signals and terminal
resizes, and reports each task's exit (docs/STEPS.md, "Controller <-> agent").

Starting a task must cost about a millisecond: the agent is a big process, so it never
forks itself.  `os.posix_spawn` (vfork + exec in glibc) starts a chain of small execs:

    [setpriv --reuid --regid --init-groups --]  dash -c WRAPPER  env -i SLURM_TASK_PID=$$ ...  CMD

- `setpriv` (util-linux) switches to the task's user when the agent is root; without it the
  agent falls back to `subprocess` with user/group (a full fork, ~4 ms).
- the dash wrapper sets the umask, changes to the working directory (falling back to /tmp
  with Slurm's message) and knows its own pid, which `env -i` puts in `SLURM_TASK_PID`
  while setting exactly the environment of the message (dash alone would drop variables
  with unusual names, such as exported bash functions, and add PWD/OLDPWD).
- `posix_spawn(setsid=True)` gives each task its own session and process group; a pty
  task opens its terminal by path as a fresh session leader, which makes it the
  controlling terminal without any code in the child.

Measured on a 2-core VM in a 100 MB process: launch() costs ~1 ms per task (almost all of it
posix_spawn waiting for dash's exec); 16 tasks of `true` have all reported their exit ~20 ms
after launch() began.  A Popen with preexec_fn costs ~4 ms per task here, before any exec.

Limits: srun's input is buffered up to STDIN_BUFFER_LIMIT per task, then dropped (the
protocol has no flow control); output is sent as fast as the tasks write it; a program whose
path contains "=" cannot be started (env(1) would read it as a variable).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import fcntl
import logging
import os
import shutil
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.agent import launch as launch_mod
from corral.agent import pmi2
from corral.agent.cgroup import StepCgroup
from corral.agent.launch import LaunchFailure as _TaskFailure
from corral.agent.launch import RunAs as _RunAs
from corral.agent.launch import as_user as _as_user
from corral.model import messages as m
from corral.model.launchplan import ContainerSpec

log = logging.getLogger("corral.agent.tasks")

# Output a step may have in transit to the controller before it credits some (base64 bytes;
# the controller credits every half window it passes on: controller/steps.py).
OUTPUT_WINDOW = 4 << 20
READ_SIZE = 65536
STDIN_BUFFER_LIMIT = 8 * 1024 * 1024  # per task: srun's input beyond this is dropped
DRAIN_GRACE = 1.0  # after a step's processes ended: how long output pipes may stay open
KILL_SETTLE = 10.0  # after SIGKILL: how long kill() waits for the step to end
EARLY_LIMIT = 256 * 1024  # input that arrives before its step's launch, per step
EARLY_STEPS = 64
EARLY_TTL = 60.0
CONTAINER_IDLE = 600.0  # seconds a job's named containers outlive its last step here
ENDED_MEMORY = 256
POLL_INTERVAL = 0.02  # child polling where pidfd_open is missing (Linux < 5.3)
EPILOG_TIMEOUT = 5.0  # srun --task-epilog: "killed if it does not end within a few seconds"
GROUP_REMOVE_TRIES = 20  # a step group still busy at the step's end: retried every 0.5 s

# $0: env(1); $1: umask or ""; $2: working directory; $3: the gate's fd or ""; $4: the task
# prolog or ""; $5: the number K of NAME=VALUE pairs; then NAME=VALUE... CMD ARGS...
# The gate holds the task until the agent has put it in its cgroup and bound its CPUs
# (posix_spawn runs no code of ours in the child): one byte, then EOF.  dash names fds 0-9
# only: on the setpriv-less subprocess path the gate keeps its own number and is read through
# /proc (and stays open, an empty pipe, in that rare fallback).
# srun --task-prolog runs as the user with the task's environment, SLURM_TASK_PID and
# SLURM_SCRIPT_CONTEXT=prolog_task, just before the task; its standard output is read as
# slurmstepd reads it: "export NAME=value" sets NAME for the task, "unset NAME" removes it,
# "print TEXT" writes TEXT to the task's standard output; other lines are ignored.  A prolog
# that fails ends the task with its status, as Slurm's does.  POSIX sh has no arrays: the
# K pairs (the first K positional parameters) are rebuilt in place for each line.
_WRAPPER = (
    'u=$1 d=$2 g=$3 p=$4 k=$5; shift 5; '
    'if [ -z "$g" ]; then :; elif [ "$g" -lt 10 ]; then eval "read -r g <&$g; exec $g<&-" '
    '|| exit 1; else read -r g <"/proc/self/fd/$g" || exit 1; fi; '
    '[ -z "$u" ] || umask "$u"; '
    'if ! CDPATH= cd -- "$d" 2>/dev/null; then '
    'if [ ! -e "$d" ]; then e="No such file or directory"; '
    'elif [ ! -d "$d" ]; then e="Not a directory"; '
    'else e="Permission denied"; fi; '
    "printf \"slurmstepd: error: couldn't chdir to \\`%s': %s: going to /tmp instead\\n\" "
    '"$d" "$e" >&2; '
    "cd /tmp || { echo \"slurmstepd: error: couldn't chdir to /tmp either. dying.\" >&2; "
    'exit 1; }; fi; '
    'if [ -n "$p" ]; then '
    'o=$(i=0; for a do [ $i -lt $k ] && set -- "$@" "$a"; i=$((i+1)); done; shift $i; '
    'exec "$0" -i SLURM_TASK_PID=$$ "$@" SLURM_SCRIPT_CONTEXT=prolog_task "$p" </dev/null) '
    '|| { r=$?; echo "slurmstepd: error: --task-prolog failed status=$r" >&2; exit $r; }; '
    'while IFS= read -r l; do x=; y=; case $l in '
    '"print "*) l=${l#print }; printf \'%s\\n\' "${l#"${l%%[![:space:]]*}"}"; continue;; '
    '"export "*=*) l=${l#export }; l=${l#"${l%%[![:space:]]*}"}; x=${l%%=*}; '
    'x=${x%"${x##*[![:space:]]}"}; y="$x=${l#*=}";; '
    '"unset "*) l=${l#unset }; l=${l#"${l%%[![:space:]]*}"}; x=${l%"${l##*[![:space:]]}"};; '
    'esac; [ -n "$x" ] || continue; '
    'n=$#; i=0; j=0; for a do if [ $i -lt $k ]; then case $a in "$x="*) ;; '
    '*) set -- "$@" "$a"; j=$((j+1));; esac; else '
    'if [ $i -eq $k ] && [ -n "$y" ]; then set -- "$@" "$y"; j=$((j+1)); fi; '
    'set -- "$@" "$a"; fi; i=$((i+1)); done; shift $n; k=$j; '
    'done <<E\n$o\nE\n'
    'fi; '
    'exec "$0" -i SLURM_TASK_PID=$$ "$@"'
)

# Slurm's log levels (srun --slurmd-debug raises slurmstepd's stderr level above ERROR).
LOG_LEVELS = ("quiet", "fatal", "error", "info", "verbose", "debug", "debug2")
ERROR, VERBOSE, DEBUG, DEBUG2 = 2, 4, 5, 6

_DEFAULT_SIGNALS = signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}
_TASK_MESSAGES = frozenset({"launch_tasks", "task_stdin", "task_stdin_eof", "signal_tasks",
                            "kill_tasks", "resize_tasks", "task_flow", "pmi_kvs"})


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _strerror(err: int) -> str:
    return os.strerror(err) if err else "Unknown error"


class _Input:
    """Non-blocking writer of srun's input to a task's stdin pipe (or a pty master)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, owns_fd: bool = True) -> None:
        self.loop = loop
        self.fd = fd
        self.owns_fd = owns_fd  # a pty master is closed by its step, not by stdin EOF
        self.buffer = bytearray()
        self.eof = False
        self.writing = False
        self.dropped = 0

    def write(self, data: bytes) -> None:
        if self.fd < 0 or self.eof:
            return
        if len(self.buffer) + len(data) > STDIN_BUFFER_LIMIT:
            if not self.dropped:
                log.warning("task input buffer full (%d bytes): dropping input", len(self.buffer))
            self.dropped += len(data)
            return
        self.buffer += data
        self._flush()

    def end(self) -> None:
        if self.fd < 0 or self.eof:
            return
        if not self.owns_fd:  # a terminal: end of input is the EOF character
            self.buffer += b"\x04"
            self._flush()
        self.eof = True
        if not self.buffer:
            self.close()

    def _flush(self) -> None:
        while self.buffer and self.fd >= 0:
            try:
                n = os.write(self.fd, memoryview(self.buffer)[:READ_SIZE])
            except BlockingIOError:
                break
            except OSError:  # the task closed its input (EPIPE) or its terminal went away
                self.buffer.clear()
                self.close()
                return
            del self.buffer[:n]
        if self.fd < 0:
            return
        if self.buffer and not self.writing:
            self.loop.add_writer(self.fd, self._flush)
            self.writing = True
        elif not self.buffer:
            if self.writing:
                self.loop.remove_writer(self.fd)
                self.writing = False
            if self.eof:
                self.close()

    def close(self) -> None:
        if self.fd < 0:
            return
        if self.writing:
            self.loop.remove_writer(self.fd)
            self.writing = False
        if self.owns_fd:
            os.close(self.fd)
        self.fd = -1
        self.buffer.clear()


@dataclass
class _Task:
    task_id: int
    local_id: int
    pid: int | None = None
    pidfd: int | None = None
    popen: subprocess.Popen[bytes] | None = None  # only on the setpriv-less fallback path
    status: tuple[int, int] | None = None  # (exit_code, signal) once the process ended
    reaped: bool = False
    streams: dict[int, str] = field(default_factory=dict)  # open output fd -> stream name
    input: _Input | None = None
    stderr_file: int | None = None  # where pre-exec errors go when stderr is a file
    reported: bool = False
    cpus: list[int] | None = None  # CPUs it is bound to
    rlimits: dict[str, tuple[int, bool]] = field(default_factory=dict)  # srun's shell's
    env: dict[str, str] = field(default_factory=dict)  # what it was started with
    epilog: str = ""  # "": none to run, "running", "done"


@dataclass
class _Step:
    job_id: int
    step_id: int
    kill_wait: float
    done: asyncio.Event
    tasks: dict[int, _Task] = field(default_factory=dict)
    pty_master: int | None = None
    drain_timer: asyncio.TimerHandle | None = None
    killing: bool = False
    group: StepCgroup | None = None  # the job's cgroup the tasks join
    group_created: bool = False  # made for this step (emptied and removed at its end)
    group_checked: bool = False
    cpus: list[int] | None = None  # the step's CPUs on this node (None: not bound)
    paused: bool = False  # output flow control: the client is behind, pipes are not read
    unacked: int = 0  # output bytes sent since the controller last said it took them
    task_prolog: str = ""  # srun --task-prolog / --task-epilog: run as the user per task
    task_epilog: str = ""
    ident: _RunAs | None = None
    cwd: str = "/tmp"
    container: ContainerSpec | None = None  # the container its tasks run in (Pyxis)
    container_dirs: set[str] = field(default_factory=set)  # its nodes' container dirs
    pmi: pmi2.StepPmiServer | None = None  # srun --mpi=pmi2 (agent/pmi2.py)
    slurmd_debug: int | None = None  # srun --slurmd-debug: stderr log level above ERROR
    log_task: dict[int, int] = field(default_factory=dict)  # task -> its node's first task


@dataclass
class _Early:
    """Requests for a step whose launch has not been processed yet."""

    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    eof: bool = False
    window: tuple[int, int] | None = None
    cancelled: bool = False
    expiry: asyncio.TimerHandle | None = None


class TaskManager:
    def __init__(self, send: Callable[[dict[str, Any]], None], *, kill_wait: float = 30.0,
                 cgroup_root: str | None = None, cgroup_cluster: str = "",
                 container_dir: str | None = None, image_cache: str | None = None) -> None:
        self.send = send
        # containers (agent.container): per node under container_dir; a job's named ones
        # are removed once none of its steps has run here for CONTAINER_IDLE seconds
        self.container_dir = container_dir
        self.image_cache = image_cache
        self._container_timers: dict[int, asyncio.TimerHandle] = {}
        self.kill_wait = kill_wait
        # cgroup_root None: no cgroups (process groups only), as in unit tests
        self._cgroup_arg: tuple[str | None, str] = (cgroup_root, cgroup_cluster)
        self._steps: dict[tuple[int, int], _Step] = {}
        self._early: dict[tuple[int, int], _Early] = {}
        self._ended: dict[tuple[int, int], None] = {}  # recent steps: late requests are dropped
        self._groups: dict[tuple[str, int], list[int]] = {}
        # told (job, step, group dirs) as a step ends, before its group goes (agent.usage)
        self.on_step_end: Callable[[int, int, dict[str, str] | None], None] | None = None
        self._poller: asyncio.TimerHandle | None = None
        self._setpriv = shutil.which("setpriv")
        self._shell = shutil.which("dash") or "/bin/sh"
        self._env = shutil.which("env") or "/usr/bin/env"
        self._use_pidfd = hasattr(os, "pidfd_open")
        _ensure_std_fds()

    # ---- public API ----------------------------------------------------------------
    def handle(self, raw: dict[str, Any]) -> bool:
        """Dispatch one controller message meant for srun tasks (launch_tasks, task_stdin,
        task_stdin_eof, signal_tasks, kill_tasks, resize_tasks, task_flow); False for any
        other kind.  A malformed one is logged and refused alone."""
        kind = raw.get("type") if isinstance(raw, dict) else None
        if kind not in _TASK_MESSAGES:
            return False
        try:
            msg = m.decode(raw, m.TO_AGENT)
        except m.MessageError as e:
            log.warning("refused %s", e)
            return True
        loop = asyncio.get_running_loop()
        if isinstance(msg, m.LaunchTasks):
            loop.create_task(self.launch(msg))
        elif isinstance(msg, m.TaskStdin):
            self.stdin(msg.job_id, msg.step_id, base64.b64decode(msg.data))
        elif isinstance(msg, m.TaskStdinEof):
            self.stdin(msg.job_id, msg.step_id, None)
        elif isinstance(msg, m.SignalTasks):
            self.signal(msg.job_id, msg.step_id, msg.signal)
        elif isinstance(msg, m.KillTasks):
            loop.create_task(self.kill(msg.job_id, msg.step_id))
        elif isinstance(msg, m.ResizeTasks):
            self.resize(msg.job_id, msg.step_id, msg.rows, msg.cols)
        elif isinstance(msg, m.TaskFlow):
            self.flow(msg.job_id, msg.step_id, msg.pause)
        elif isinstance(msg, m.PmiKvs):  # MPI hook: a fence the controller gathered
            pmi_step = self._steps.get((msg.job_id, msg.step_id))
            if pmi_step is not None and pmi_step.pmi is not None:
                pmi_step.pmi.fence_done(msg.epoch, msg.kvs)
        return True

    async def launch(self, raw: dict[str, Any] | m.LaunchTasks) -> None:
        """Start the tasks of a `launch_tasks` message (returns once all are spawned)."""
        try:
            msg = raw if isinstance(raw, m.LaunchTasks) else m.LaunchTasks.from_dict(raw)
        except m.MessageError as e:
            log.warning("refused %s", e)
            return
        loop = asyncio.get_running_loop()
        job_id, step_id = msg.job_id, msg.step_id
        key = (job_id, step_id)
        specs = list(msg.tasks)
        self._ended.pop(key, None)
        step = self._steps.get(key)
        if step is None:
            if not specs:
                return
            kill_wait = msg.kill_wait
            step = _Step(job_id, step_id, self.kill_wait if kill_wait is None else float(kill_wait),
                         asyncio.Event())
            self._steps[key] = step
        specs = [t for t in specs if t.task_id not in step.tasks]
        early = self._early.pop(key, None)
        if early is not None and early.expiry is not None:
            early.expiry.cancel()
        if early is not None and early.cancelled:
            step.killing = True
        ident = self._identity(msg)
        step.ident, step.cwd = ident, msg.cwd or "/tmp"
        step.task_prolog, step.task_epilog = msg.task_prolog or "", msg.task_epilog or ""
        step.slurmd_debug = msg.slurmd_debug
        step.container = msg.container
        if msg.container is not None:
            if self.container_dir:  # (one message per node this agent serves)
                step.container_dirs |= {os.path.join(self.container_dir, t.node or "node")
                                        for t in specs}
            timer = self._container_timers.pop(job_id, None)
            if timer is not None:
                timer.cancel()
        if not step.group_checked and specs and ident.error is None:
            self._join_job_group(step, msg, specs)
        cwd = msg.cwd or "/tmp"
        # MPI hook (agent/pmi2.py): an --mpi=pmi2 step gets a PMI server; each task an fd
        pmi_first = not step.tasks and step.pmi is None
        if pmi_first:
            step.pmi, pmi_notice = pmi2.server_for(loop, job_id, step_id, specs, pmi_first,
                                                   self.send)
            if pmi_notice and specs:
                specs[0].notice = (specs[0].notice or "") + pmi_notice
        argv = list(msg.argv)
        stdin_mode = msg.stdin
        pty_spec = msg.pty and any(t.task_id == 0 for t in specs)
        pty_slave: int | None = None
        failure: _TaskFailure | None = None  # what stops every task of this message
        if pty_spec and step.pty_master is None:
            try:
                step.pty_master, pty_slave = os.openpty()
            except OSError as e:
                failure = _TaskFailure(f"slurmstepd: error: cannot allocate a pseudo-terminal: "
                                       f"{_strerror(e.errno or 0)}\n", 1)
            else:
                os.set_blocking(step.pty_master, False)
                window = (msg.window.rows, msg.window.cols) if msg.window else None
                if early is not None and early.window is not None:
                    window = early.window
                if window:  # a size unknown (0) is the usual 24x80
                    _set_window(step.pty_master, window[0] or 24, window[1] or 80)
                if ident.switch:
                    with contextlib.suppress(OSError):
                        os.fchown(pty_slave, ident.uid, -1)
        files = self._open_outputs(specs, ident, msg) if failure is None else {}
        resolved: dict[tuple[str, str, str], tuple[str, None] | tuple[None, _TaskFailure]] = {}
        local_tasks = len(specs)
        cpt = msg.cpus_per_task
        try:
            for spec in specs:
                task = _Task(spec.task_id, spec.local_id)
                task.cpus = launch_mod.task_cpus(step.cpus, task.local_id, cpt, local_tasks)
                step.tasks[task.task_id] = task
                if spec.notice:
                    self._error_output(step, task, spec.notice)
                pty = pty_slave if (task.task_id == 0 and pty_spec) else None
                if failure is not None:
                    self._fail(loop, step, task, failure)
                    continue
                self._start(loop, step, task, spec, ident, cwd, argv, stdin_mode, files, pty,
                            resolved)
            if step.slurmd_debug is not None and specs:
                self._launch_log(step, specs, msg)
        finally:
            for fd_or_err in files.values():
                if isinstance(fd_or_err, int):
                    os.close(fd_or_err)
            if pty_slave is not None:
                os.close(pty_slave)
        if early is not None:
            for chunk in early.chunks:
                self.stdin(job_id, step_id, chunk)
            if early.eof:
                self.stdin(job_id, step_id, None)
        for task in list(step.tasks.values()):  # the tasks that could not start
            if task.status is not None:
                self._check_task(step, task)
        self._check_step(step)

    def stdin(self, job_id: int, step_id: int, data: bytes | None) -> None:
        """Feed srun's input to the step's tasks that read it; None is end of input."""
        step = self._steps.get((job_id, step_id))
        if step is None:
            early = self._early_for(job_id, step_id)
            if early is None:
                return
            if data is None:
                early.eof = True
            elif early.size + len(data) <= EARLY_LIMIT:
                early.chunks.append(data)
                early.size += len(data)
            return
        for task in step.tasks.values():
            if task.input is not None:
                if data is None:
                    task.input.end()
                else:
                    task.input.write(data)

    def signal(self, job_id: int, step_id: int, signum: int) -> None:
        step = self._steps.get((job_id, step_id))
        if step is not None:
            self._signal_step(step, int(signum))

    def suspend_job(self, job_id: int, resume: bool) -> None:
        """`scontrol suspend/resume`: the job's srun steps here stop or go on with its batch
        step (each step has its own group, as in Slurm, where slurmd suspends every step)."""
        for (j, _), step in list(self._steps.items()):
            if j == job_id:
                self._signal_step(step, signal.SIGCONT if resume else signal.SIGSTOP)

    async def kill(self, job_id: int, step_id: int) -> None:
        """SIGCONT and SIGTERM every task's process group; SIGKILL after kill_wait."""
        step = self._steps.get((job_id, step_id))
        if step is None:
            early = self._early_for(job_id, step_id)
            if early is not None:  # the launch is still on its way: it will start nothing
                early.cancelled = True
            return
        if step.killing:
            # One kill sequence per step (as slurmstepd): the job's end and the step's srun
            # both ask for it; a second SIGTERM would reach tasks still handling the first.
            return
        step.killing = True
        self.flow(job_id, step_id, False)  # its output must drain for its end to show
        self._signal_step(step, signal.SIGCONT)
        self._signal_step(step, signal.SIGTERM)
        if await self._wait_done(step, step.kill_wait):
            return
        self._signal_step(step, signal.SIGKILL)
        if not await self._wait_done(step, KILL_SETTLE):
            log.warning("step %d.%d: tasks still running %.0f s after SIGKILL",
                        job_id, step_id, KILL_SETTLE)

    def resize(self, job_id: int, step_id: int, rows: int, cols: int) -> None:
        step = self._steps.get((job_id, step_id))
        if step is None:
            early = self._early_for(job_id, step_id)
            if early is not None:
                early.window = (int(rows), int(cols))
            return
        if step.pty_master is not None:
            _set_window(step.pty_master, int(rows) or 24, int(cols) or 80)

    def steps(self) -> list[tuple[int, int]]:
        return list(self._steps)

    def flow(self, job_id: int, step_id: int, pause: bool) -> None:
        """Output flow control (`task_flow`): while paused, the step's output pipes are not
        read, so its tasks block on write once a pipe is full instead of the output piling
        up in the agent or the controller; resuming reads them again."""
        step = self._steps.get((job_id, step_id))
        if step is None:
            return
        if not pause:
            step.unacked = 0  # a resume is also the controller's credit for what it took
        if step.paused == pause:
            return
        step.paused = pause
        loop = asyncio.get_running_loop()
        for task in step.tasks.values():
            for fd in task.streams:
                if pause:
                    loop.remove_reader(fd)
                else:
                    loop.add_reader(fd, self._on_output, step, task, fd)

    async def kill_job(self, job_id: int) -> None:
        await asyncio.gather(*(self.kill(j, s) for (j, s) in list(self._steps) if j == job_id))

    async def shutdown(self) -> None:
        for early in self._early.values():
            if early.expiry is not None:
                early.expiry.cancel()
        self._early.clear()
        await asyncio.gather(*(self.kill(j, s) for (j, s) in list(self._steps)))
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None

    # ---- identity and files ------------------------------------------------------
    def _identity(self, msg: m.LaunchTasks) -> _RunAs:
        return launch_mod.task_identity(msg.uid, msg.gid, msg.user, self._setpriv, self._groups)

    # ---- the job's cgroup and CPUs -------------------------------------------------
    def _cgroup_config(self) -> tuple[str | None, str]:
        return self._cgroup_arg

    def _join_job_group(self, step: _Step, msg: m.LaunchTasks,
                        specs: list[m.TaskSpec]) -> None:
        """Find (the batch step's) or make the job's cgroup here, and the step's CPUs."""
        step.group_checked = True
        root, cluster = self._cgroup_config()
        nodes = {t.node for t in specs}
        mem = [v for n, v in msg.node_mem_mb.items() if n in nodes and v]
        joined, notes = launch_mod.job_cgroup(root, cluster, step.job_id, step.step_id, None,
                                              sum(mem) if mem else None)
        for note in notes:
            log.info("step %d.%d: cgroup: %s", step.job_id, step.step_id, note)
        if joined is None:
            return
        step.group, step.group_created = joined.group, joined.created
        job_cpus = launch_mod.group_cpus(joined.group)
        count = sum(v for n, v in msg.node_cpus.items() if n in nodes)
        busy = {c for other in self._steps.values()
                if other is not step and other.job_id == step.job_id and other.cpus
                and other.cpus != job_cpus for c in other.cpus}
        step.cpus = launch_mod.step_cpus(job_cpus, count, busy)

    def _place(self, step: _Step, task: _Task) -> None:
        """Put a spawned task (held at its gate) in the job's cgroup and on its CPUs."""
        assert task.pid is not None
        if step.group is not None:
            err = launch_mod.add_to_group(step.group, task.pid)
            if err:
                log.warning("step %d.%d task %d not confined: %s", step.job_id, step.step_id,
                            task.task_id, err)
        err = launch_mod.bind_cpus(task.pid, task.cpus)
        if err:
            log.warning("step %d.%d task %d: %s", step.job_id, step.step_id, task.task_id, err)
        for problem in launch_mod.apply_rlimits(task.pid, task.rlimits):
            self._error_output(step, task, f"slurmstepd: error: {problem}\n")

    def _release_group(self, step: _Step, tries: int = GROUP_REMOVE_TRIES) -> None:
        group = step.group
        if group is None or not step.group_created:
            return
        for pid in group.pids():  # what the tasks left behind, as slurmstepd ends a step
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if group.remove(timeout=0) or tries <= 1:
            step.group = None
            return
        asyncio.get_running_loop().call_later(0.5, self._release_group, step, tries - 1)

    def _open_outputs(self, specs: list[m.TaskSpec], ident: _RunAs,
                      msg: m.LaunchTasks) -> dict[str, int | OSError]:
        """Open each distinct output file once (tasks writing one file share its offset)."""
        paths: list[str] = []
        for spec in specs:
            for name in ("stdout", "stderr"):
                path = spec.stdout if name == "stdout" else spec.stderr
                if path and path not in paths:
                    paths.append(str(path))
        files: dict[str, int | OSError] = {}
        if not paths or ident.error:
            return files
        try:
            with _as_user(ident):
                pass
        except OSError as e:  # cannot take the user's rights: refuse rather than open as root
            return {path: e for path in paths}
        append = msg.open_mode == "append"
        # O_NONBLOCK for the open only: a FIFO without a reader fails at once (ENXIO) instead
        # of blocking the agent's event loop; cleared after, so the task's writes block.
        # O_APPEND always, as slurmstepd opens them: tasks share the file, and a shared
        # offset is not enough (cat's copy_file_range moves it without the write lock, so
        # one task could overwrite another's output)
        flags = (os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK | os.O_APPEND
                 | (0 if append else os.O_TRUNC))
        umask = _umask_of(specs[0].env)
        old_umask = os.umask(umask) if umask is not None else None
        try:
            with _as_user(ident):
                for path in paths:
                    try:
                        fd = os.open(path, flags, 0o600)  # private to the owner, as batch output
                    except OSError as e:
                        files[path] = e
                        continue
                    os.set_blocking(fd, True)
                    files[path] = fd
        finally:
            if old_umask is not None:
                os.umask(old_umask)
        return files

    # ---- starting one task -------------------------------------------------------
    def _start(self, loop: asyncio.AbstractEventLoop, step: _Step, task: _Task,
               spec: m.TaskSpec, ident: _RunAs, cwd: str, argv: list[str],
               stdin_mode: str, files: dict[str, int | OSError], pty_slave: int | None,
               resolved: dict[tuple[str, str, str], tuple[str, None] | tuple[None, _TaskFailure]],
               ) -> None:
        # the launch pipeline (agent.launch): its hooks take the submitting shell's limits
        # (SLURM_RLIMIT_*, set while the task waits at its gate) out of the environment and
        # wrap the program in the step's container
        request = launch_mod.ExecRequest(
            argv=list(spec.argv if spec.argv is not None else argv),
            env={k: v for k, v in spec.env.items() if k != "SLURM_TASK_PID" and k and "=" not in k},
            cwd=cwd, ident=ident, job_id=step.job_id, step=str(step.step_id), cpus=task.cpus,
            container=step.container, image_cache=self.image_cache,
            container_dir=(os.path.join(self.container_dir, spec.node or "node")
                           if self.container_dir else None))
        child_fds: list[int] = []  # our copies of the child's ends, closed after the spawn
        gate_w: int | None = None
        try:
            stdout_path, stderr_path = spec.stdout, spec.stderr
            if stderr_path and isinstance(files.get(stderr_path), int):
                task.stderr_file = os.dup(_fd(files[stderr_path]))
            if step.killing:  # cancelled before it started
                raise _TaskFailure("", 0, signal.SIGKILL)
            if ident.error:
                raise _TaskFailure(f"slurmstepd: error: {ident.error}\n", 1)
            for name, path in (("stdout", stdout_path), ("stderr", stderr_path)):
                err = files.get(path) if path else None
                if isinstance(err, OSError):
                    raise _TaskFailure(f"slurmstepd: error: Could not open {name} file {path}: "
                                       f"{_strerror(err.errno or 0)}\n", 1)
            if not request.argv:  # (--multi-prog gives each task its own program)
                raise _TaskFailure("slurmstepd: error: execve(): : No such file or directory\n",
                                   errno.ENOENT)
            launch_mod.prepare(request)
            env = request.env
            task.rlimits = request.rlimits
            if not request.in_container:  # (in a container, the image's PATH finds it)
                rkey = (request.argv[0], env.get("PATH", ""), cwd)
                if rkey not in resolved:
                    resolved[rkey] = launch_mod.resolve_program(request.argv[0], env.get("PATH"),
                                                                cwd, ident)
                program, failure = resolved[rkey]
                if failure is not None:
                    raise failure
                assert program is not None
                request.argv[0] = program

            # fd 0, 1, 2 of the child: ("fd", agent_fd), ("open", path, flags) or
            # ("dup", child_fd)
            stdio: list[tuple[Any, ...]] = []
            if pty_slave is not None:
                assert step.pty_master is not None
                stdio = [("open", os.ttyname(pty_slave), os.O_RDWR), ("dup", 0), ("dup", 0)]
                task.input = _Input(loop, step.pty_master, owns_fd=False)
                task.streams[step.pty_master] = "stdout"
                if not step.paused:
                    loop.add_reader(step.pty_master, self._on_output, step, task,
                                    step.pty_master)
            else:
                in_path = spec.stdin
                if in_path:
                    try:
                        with _as_user(ident):
                            # a FIFO without a writer would block the open: not here
                            fd = os.open(str(in_path),
                                         os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
                            os.set_blocking(fd, True)
                    except OSError as e:
                        raise _TaskFailure(f"slurmstepd: error: Could not open stdin file "
                                           f"{in_path}: {_strerror(e.errno or 0)}\n", 1) from None
                    child_fds.append(fd)
                    stdio.append(("fd", fd))
                elif (stdin_mode == "all" or stdin_mode == str(task.task_id)) \
                        and step.pty_master is None:
                    r, w = os.pipe()
                    child_fds.append(r)
                    os.set_blocking(w, False)
                    task.input = _Input(loop, w)
                    stdio.append(("fd", r))
                else:
                    stdio.append(("open", os.devnull, os.O_RDONLY))
                for name, path in (("stdout", stdout_path), ("stderr", stderr_path)):
                    if path:
                        stdio.append(("fd", _fd(files[path])))
                    else:
                        r, w = os.pipe()
                        child_fds.append(w)
                        stdio.append(("fd", w))
                        os.set_blocking(r, False)
                        task.streams[r] = name
                        if not step.paused:
                            loop.add_reader(r, self._on_output, step, task, r)
            gate = ""
            if step.group is not None or task.cpus or task.rlimits:
                gate_r, gate_w = os.pipe()
                child_fds.append(gate_r)
                stdio.append(("fd", gate_r))
                # posix_spawn puts it on fd 3; subprocess keeps its number (pass_fds), which
                # the user reopens through /proc: the pipe must be the user's
                gate = "3"
                if ident.switch and not ident.prefix:
                    gate = str(gate_r)
                    os.fchown(gate_r, ident.uid, ident.gid)
            if step.pmi is not None:  # MPI hook: the task's end of its PMI socketpair
                pmi_fd = step.pmi.task_end(task.task_id)
                child_fds.append(pmi_fd)
                # posix_spawn numbers it by its place; subprocess keeps its number
                shown = pmi_fd if (ident.switch and not ident.prefix) else len(stdio)
                stdio.append(("fd", pmi_fd))
                env.update(step.pmi.environment(shown, task.task_id))
            umask = _umask_of(env)
            task.env = env
            pairs = [f"{k}={v}" for k, v in env.items()]
            cmd = [self._shell, "-c", _WRAPPER, self._env,
                   "" if umask is None else f"{umask:04o}", cwd, gate, step.task_prolog,
                   str(len(pairs)), *pairs, *request.command()]
            self._spawn(task, ident, cmd, stdio, pty_slave is not None)
            if gate_w is not None:
                self._place(step, task)
                os.write(gate_w, b"\n")
        except _TaskFailure as f:
            self._fail(loop, step, task, f)
        except OSError as e:  # no fds left, no memory for a process...
            self._fail(loop, step, task, _TaskFailure(
                f"slurmstepd: error: task launch failed: {_strerror(e.errno or 0)}\n", 1))
        finally:
            for fd in child_fds:
                os.close(fd)
            if gate_w is not None:
                os.close(gate_w)
        if task.pid is not None:
            self._watch(loop, step, task)

    def _fail(self, loop: asyncio.AbstractEventLoop, step: _Step, task: _Task,
              failure: _TaskFailure) -> None:
        if failure.message:
            self._error_output(step, task, failure.message)
        task.status = (failure.exit_code, failure.signal_num)
        task.reaped = True
        for fd in list(task.streams):
            self._close_stream(loop, step, task, fd)
        if task.input is not None:
            task.input.close()
            task.input = None

    def _spawn(self, task: _Task, ident: _RunAs, cmd: list[str],
               stdio: list[tuple[Any, ...]], pty: bool) -> None:
        if not ident.switch or ident.prefix:
            actions: list[tuple[Any, ...]] = []
            for target, how in enumerate(stdio):
                if how[0] == "open":
                    actions.append((os.POSIX_SPAWN_OPEN, target, how[1], how[2], 0))
                else:  # "fd" and "dup" alike: dup2 onto the target, in order
                    actions.append((os.POSIX_SPAWN_DUP2, how[1], target))
            argv = [*ident.prefix, *cmd]
            task.pid = os.posix_spawn(argv[0], argv, {}, file_actions=actions, setsid=True,
                                      setsigdef=_DEFAULT_SIGNALS, setsigmask=())
            return
        # No setpriv: subprocess's fork path (slower, but still no Python code in the child
        # except TIOCSCTTY for a pty).
        opened: list[int] = []
        try:
            fds: list[int] = []
            for how in stdio:
                if how[0] == "open":
                    fd = os.open(how[1], how[2] | os.O_NOCTTY | os.O_CLOEXEC)
                    opened.append(fd)
                    fds.append(fd)
                elif how[0] == "dup":
                    fds.append(fds[how[1]])
                else:
                    fds.append(how[1])
            preexec = _acquire_ctty if pty else None
            task.popen = subprocess.Popen(
                cmd, stdin=fds[0], stdout=fds[1], stderr=fds[2], env={}, close_fds=True,
                pass_fds=tuple(fds[3:]),
                start_new_session=True, user=ident.uid, group=ident.gid,
                extra_groups=ident.groups, preexec_fn=preexec)
            task.pid = task.popen.pid
        finally:
            for fd in opened:
                os.close(fd)

    def _watch(self, loop: asyncio.AbstractEventLoop, step: _Step, task: _Task) -> None:
        assert task.pid is not None
        if self._use_pidfd:
            try:
                task.pidfd = os.pidfd_open(task.pid)
            except OSError:
                self._use_pidfd = False
            else:
                loop.add_reader(task.pidfd, self._on_pidfd, step, task)
                return
        if self._poller is None:
            self._poller = loop.call_later(POLL_INTERVAL, self._poll_children)

    # ---- srun --slurmd-debug ----------------------------------------------------------
    def _launch_log(self, step: _Step, all_specs: list[m.TaskSpec], msg: m.LaunchTasks) -> None:
        """The step's start on each node as slurmstepd logs it, at the level srun asked."""
        by_node: dict[str, list[m.TaskSpec]] = {}
        for sp in all_specs:
            by_node.setdefault(sp.node, []).append(sp)
        for specs in by_node.values():
            self._node_launch_log(step, specs, msg)

    def _node_launch_log(self, step: _Step, specs: list[m.TaskSpec], msg: m.LaunchTasks) -> None:
        first = min(specs, key=lambda sp: sp.local_id).task_id
        step.log_task.update((sp.task_id, first) for sp in specs)
        task = step.tasks[first]
        level = LOG_LEVELS[min(ERROR + (step.slurmd_debug or 0), DEBUG2)]
        agent_level = logging.getLevelName(logging.getLogger("corral").getEffectiveLevel())
        self._stepd_log(step, task, VERBOSE, f"debug levels are stderr='{level}', "
                        f"logfile='{agent_level.lower()}', syslog='quiet'")
        node = specs[0].node or "?"
        self._stepd_log(step, task, DEBUG, f"[job {step.job_id}] step {step.step_id} on "
                        f"{node}: {len(specs)} tasks as uid {msg.uid}, gid {msg.gid}")
        group = step.group.dirs.get("", "none") if step.group is not None else "none"
        cpus = ",".join(map(str, step.cpus)) if step.cpus is not None else "not bound"
        self._stepd_log(step, task, DEBUG2, f"cwd {step.cwd}, cgroup {group}, CPUs {cpus}")
        when = time.strftime("%Y-%m-%dT%H:%M:%S")
        for sp in specs:
            t = step.tasks.get(sp.task_id)
            if t is not None and t.pid is not None:
                self._stepd_log(step, t, VERBOSE, f"task {t.task_id} ({t.pid}) started {when}")

    def _stepd_log(self, step: _Step, task: _Task, level: int, text: str) -> None:
        """One log line of the agent's about the step, to the stderr of the first task on
        the task's node (slurmstepd writes its log there under --slurmd-debug)."""
        if step.slurmd_debug is None or ERROR + step.slurmd_debug < level:
            return
        target = step.tasks.get(step.log_task.get(task.task_id, task.task_id), task)
        prefix = {DEBUG: "debug:  ", DEBUG2: "debug2: "}.get(level, "")
        self._error_output(step, target, f"slurmstepd: {prefix}{text}\n")

    def _error_output(self, step: _Step, task: _Task, message: str) -> None:
        data = message.encode()
        if task.stderr_file is not None:
            with contextlib.suppress(OSError):
                os.write(task.stderr_file, data)
            return
        self._send_output(step, task, "stderr", data)

    # ---- output ------------------------------------------------------------------
    def _send_output(self, step: _Step, task: _Task, stream: str, data: bytes) -> None:
        encoded = _b64(data)
        self.send(m.TaskOutput(job_id=step.job_id, step_id=step.step_id, task_id=task.task_id,
                               stream=stream, data=encoded).to_dict())
        # A window: past OUTPUT_WINDOW bytes the controller has not credited, stop reading,
        # so a slow client's output waits in the task's pipe, not in transit (the controller
        # asking for a pause comes too late when this machine is busy).
        step.unacked += len(encoded)
        if step.unacked >= OUTPUT_WINDOW and not step.paused:
            self.flow(step.job_id, step.step_id, True)

    def _on_output(self, step: _Step, task: _Task, fd: int) -> None:
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError:  # EIO: a pty whose last slave closed
            data = b""
        if data:
            self._send_output(step, task, task.streams[fd], data)
            return
        self._close_stream(asyncio.get_running_loop(), step, task, fd)
        self._check_task(step, task)

    def _close_stream(self, loop: asyncio.AbstractEventLoop, step: _Step, task: _Task,
                      fd: int) -> None:
        task.streams.pop(fd, None)
        loop.remove_reader(fd)
        if task.input is not None and task.input.fd == fd:  # a pty master: input goes too
            task.input.close()
            task.input = None
        if step.pty_master == fd:
            # Closing the master hangs the terminal up: SIGHUP to a task that closed its
            # terminal fds but has not exited yet. The master is closed at step end.
            return
        os.close(fd)

    def _drain_now(self, step: _Step) -> None:
        """Output pipes held open by processes that left the task's process group."""
        step.drain_timer = None
        loop = asyncio.get_running_loop()
        if step.paused:  # the client is behind: drained once it catches up
            step.drain_timer = loop.call_later(DRAIN_GRACE, self._drain_now, step)
            return
        for task in list(step.tasks.values()):
            for fd in list(task.streams):
                for _ in range(64):  # what is already in the pipe, bounded
                    try:
                        data = os.read(fd, READ_SIZE)
                    except OSError:
                        break
                    if not data:
                        break
                    self._send_output(step, task, task.streams[fd], data)
                self._close_stream(loop, step, task, fd)
            self._check_task(step, task)

    # ---- exits ---------------------------------------------------------------------
    def _on_pidfd(self, step: _Step, task: _Task) -> None:
        if self._collect(task):
            loop = asyncio.get_running_loop()
            if task.pidfd is not None:
                loop.remove_reader(task.pidfd)
                os.close(task.pidfd)
                task.pidfd = None
            self._check_task(step, task)

    def _poll_children(self) -> None:
        self._poller = None
        waiting = False
        for step in list(self._steps.values()):
            for task in list(step.tasks.values()):
                if task.pid is not None and task.status is None:
                    if self._collect(task):
                        self._check_task(step, task)
                    else:
                        waiting = True
        if waiting:
            self._poller = asyncio.get_running_loop().call_later(POLL_INTERVAL,
                                                                 self._poll_children)

    def _collect(self, task: _Task) -> bool:
        """Record the exit of the task's process, leaving it a zombie: while it is one, its
        pid (= its process group id) cannot be reused, so killing what is left of the group
        at the end of the step cannot hit a stranger."""
        assert task.pid is not None
        try:
            res = os.waitid(os.P_PID, task.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped elsewhere: its status is lost
            task.status = (0, 0)
            task.reaped = True
            return True
        if res is None or res.si_pid == 0:
            return False
        if res.si_code == os.CLD_EXITED:
            task.status = (res.si_status, 0)
        else:
            task.status = (0, res.si_status)
        return True

    def _check_task(self, step: _Step, task: _Task) -> None:
        if task.status is not None and not task.streams and not task.reported \
                and step.task_epilog and task.pid is not None and task.epilog != "done":
            if not task.epilog:
                self._run_epilog(step, task)
            return  # reported once the epilog has ended
        if task.status is not None and not task.streams and not task.reported:
            task.reported = True
            if step.slurmd_debug is not None and task.pid is not None:
                code, sig = task.status
                self._stepd_log(step, task, VERBOSE, (
                    f"task {task.task_id} ({task.pid}) exited. Killed by signal {sig}." if sig
                    else f"task {task.task_id} ({task.pid}) exited with exit code {code}."))
            if task.input is not None:
                task.input.close()
                task.input = None
            if task.stderr_file is not None:
                os.close(task.stderr_file)
                task.stderr_file = None
            # exit codes as a wait status holds them (an exec errno is one too)
            self.send(m.TaskExit(job_id=step.job_id, step_id=step.step_id,
                                 task_id=task.task_id, exit_code=task.status[0] & 0xFF,
                                 signal=task.status[1]).to_dict())
        self._check_step(step)

    def _check_step(self, step: _Step) -> None:
        tasks = step.tasks.values()
        if all(t.status is not None for t in tasks) and any(not t.reaped for t in tasks):
            self._end_processes(step)
        if not all(t.reported for t in tasks):
            return
        if step.drain_timer is not None:
            step.drain_timer.cancel()
            step.drain_timer = None
        if step.pty_master is not None:
            os.close(step.pty_master)
            step.pty_master = None
        if step.pmi is not None:  # MPI hook
            step.pmi.close()
            step.pmi = None
        key = (step.job_id, step.step_id)
        if self._steps.get(key) is step:
            del self._steps[key]
            self._ended[key] = None
            if len(self._ended) > ENDED_MEMORY:
                del self._ended[next(iter(self._ended))]
        if self.on_step_end is not None:
            self.on_step_end(step.job_id, step.step_id, step.group.dirs if step.group else None)
        self._release_group(step)
        if step.container is not None:
            self._release_containers(step)
        step.done.set()

    def live_jobs(self) -> set[int]:
        """The jobs with a step running here."""
        return {job_id for job_id, _ in self._steps}

    def _release_containers(self, step: _Step) -> None:
        """The step's unnamed containers go now; the job's named ones once no step of the
        job has run here for CONTAINER_IDLE seconds (a node that is not the batch host hears
        of no job end)."""
        from corral.agent import container

        job_id, step_name, dirs = step.job_id, str(step.step_id), set(step.container_dirs)
        last = not any(k[0] == job_id for k in self._steps)

        def release_now() -> bool:
            """(In a thread: unmounting must not stall the event loop.)  Whether nothing of
            the job is left here."""
            for base in dirs:
                container.release_step(base, job_id, step_name)
            return last and all([container.release_job_if_idle(base, job_id)
                                 for base in dirs])

        def release_later() -> None:
            self._container_timers.pop(job_id, None)
            if job_id not in self.live_jobs():
                for base in dirs:
                    container.release_job(base, job_id)

        def released(done: asyncio.Future[bool]) -> None:
            if not done.cancelled() and done.exception() is not None:
                log.warning("job %d: containers not released: %s", job_id, done.exception())
                return
            if not last or done.cancelled() or done.result():
                return
            old = self._container_timers.pop(job_id, None)
            if old is not None:
                old.cancel()
            self._container_timers[job_id] = loop.call_later(CONTAINER_IDLE, release_later)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (unit tests)
            release_now()
            return
        loop.run_in_executor(None, release_now).add_done_callback(released)

    def _run_epilog(self, step: _Step, task: _Task) -> None:
        """srun --task-epilog: as the user, with the task's environment and SLURM_TASK_PID,
        just after the task ended; killed with what it started after EPILOG_TIMEOUT."""
        task.epilog = "running"
        ident = step.ident
        ep = _Task(task.task_id, task.local_id)
        if ident is None or ident.error:
            task.epilog = "done"
            self._check_task(step, task)
            return
        env = dict(task.env)
        umask = _umask_of(env)
        pairs = [f"{k}={v}" for k, v in env.items()] + [f"SLURM_TASK_PID={task.pid}"]
        cmd = [self._shell, "-c", _WRAPPER, self._env, "" if umask is None else f"{umask:04o}",
               step.cwd, "", "", str(len(pairs)), *pairs, step.task_epilog]
        null_out = ("open", os.devnull, os.O_WRONLY)
        try:
            self._spawn(ep, ident, cmd, [("open", os.devnull, os.O_RDONLY), null_out, null_out],
                        False)
        except OSError as e:
            log.warning("step %d.%d task %d: task epilog not started: %s", step.job_id,
                        step.step_id, task.task_id, e)
            task.epilog = "done"
            self._check_task(step, task)
            return
        deadline = asyncio.get_running_loop().time() + EPILOG_TIMEOUT
        self._poll_epilog(step, task, ep, deadline)

    def _poll_epilog(self, step: _Step, task: _Task, ep: _Task, deadline: float) -> None:
        assert ep.pid is not None
        loop = asyncio.get_running_loop()
        try:
            done = os.waitpid(ep.pid, os.WNOHANG)[0] != 0
        except ChildProcessError:
            done = True
        if not done and loop.time() >= deadline:
            log.warning("step %d.%d task %d: task epilog still running after %.0f s: killed",
                        step.job_id, step.step_id, task.task_id, EPILOG_TIMEOUT)
            with contextlib.suppress(OSError):
                os.killpg(ep.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(ep.pid, 0)
            done = True
        if not done:
            loop.call_later(POLL_INTERVAL * 2, self._poll_epilog, step, task, ep, deadline)
            return
        if ep.popen is not None:
            ep.popen.returncode = 0  # reaped here
        task.epilog = "done"
        self._check_task(step, task)

    def _end_processes(self, step: _Step) -> None:
        """Every task's process ended: kill what they left behind, as slurmstepd does at
        the end of a step, then reap them."""
        for task in step.tasks.values():
            if task.pid is None or task.reaped:
                continue
            with contextlib.suppress(OSError):
                os.killpg(task.pid, signal.SIGKILL)
            try:
                _, status = os.waitpid(task.pid, 0)  # a zombie: returns at once
            except ChildProcessError:
                status = 0
            task.reaped = True
            if task.popen is not None:
                task.popen.returncode = os.waitstatus_to_exitcode(status)
        if any(t.streams for t in step.tasks.values()) and step.drain_timer is None:
            step.drain_timer = asyncio.get_running_loop().call_later(
                DRAIN_GRACE, self._drain_now, step)

    # ---- signals -------------------------------------------------------------------
    def _signal_step(self, step: _Step, signum: int) -> None:
        for task in step.tasks.values():
            if task.pid is None or task.reaped:
                continue
            try:
                os.killpg(task.pid, signum)
            except ProcessLookupError:
                pass
            except PermissionError as e:
                log.warning("step %d.%d task %d: cannot send signal %d: %s", step.job_id,
                            step.step_id, task.task_id, signum, e)

    async def _wait_done(self, step: _Step, timeout: float) -> bool:
        try:
            await asyncio.wait_for(step.done.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def _early_for(self, job_id: int, step_id: int) -> _Early | None:
        key = (job_id, step_id)
        early = self._early.get(key)
        if early is None:
            if len(self._early) >= EARLY_STEPS or key in self._ended:
                return None
            early = self._early[key] = _Early()
            early.expiry = asyncio.get_running_loop().call_later(
                EARLY_TTL, self._early.pop, key, None)
        return early


# ---- helpers ---------------------------------------------------------------------------

def _fd(opened: int | OSError) -> int:
    assert isinstance(opened, int)
    return opened


def _umask_of(env: dict[str, Any]) -> int | None:
    value = str(env.get("SLURM_UMASK", ""))
    if value and len(value) <= 4 and all(c in "01234567" for c in value):
        return int(value, 8)
    return None


def _set_window(fd: int, rows: int, cols: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _acquire_ctty() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _ensure_std_fds() -> None:
    """Keep fds 0-2 taken, so no pipe of ours can be numbered 0-2 (posix_spawn's dup2
    onto 0-2 would then clobber it)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
