"""The step supervisor (slurmstepd's role): runs one job step as its owner and reports its end.

The agent calls `spawn_step(job_dir)`; everything the supervisor needs is in
`job_dir/launch.json`, and everything it produces lands in `job_dir`:

- `stepd.pid`   "PID STARTTIME": the supervisor (STARTTIME from /proc tells a reused pid apart)
- `ctl.sock`    datagram socket for `send_control()` (cancel, signal, suspend, ...)
- `status.json` the final state, written atomically; `read_status()` returns it
- `stepd.log`   the supervisor's own notes (cgroup fall-backs, errors); never the job's output

Privilege separation (docs/SECURITY.md): `job_dir` belongs to the supervisor's uid and is
writable by nobody else (the supervisor refuses to start otherwise), and every file of it is
reached through one descriptor of the directory with O_NOFOLLOW.  The job never holds a way
to write the status, the pid file or the control socket.  Everything opened for the job
(its output, input, working directory, script) is opened by the job's process after it has
become the job's user; the supervisor writes its own lines into the job's output only
through the descriptor that process opened, never by name.

The supervisor is a double-forked copy of the caller, in its own session and reparented to
init, so it outlives the agent; it depends on nothing from the agent after the fork.  Within
it, one loop waits on the control socket, the job's exec-status pipe and SIGCHLD, and runs the
time-limit timers.  The job process is forked from it and confined by cgroups (corral.agent.
cgroup) where writable; otherwise the supervisor becomes a child subreaper and treats all its
descendants as the job's processes.

Run `python -m corral.agent.stepd JOB_DIR` to supervise in the foreground (debugging).
"""

from __future__ import annotations

import errno
import gc
import json
import logging
import os
import re
import resource
import select
import signal
import socket
import stat as stat_mod
import sys
import time
from typing import Any, NoReturn

from corral.agent import launch as launch_mod
from corral.agent.cgroup import CgroupError, StepCgroup
from corral.agent.usage import rusage_figures as usage_figures
from corral.model import messages
from corral.model.launchplan import LaunchPlan, PlanHead
from corral.model.messages import MessageError

LAUNCH_FILE = "launch.json"
STATUS_FILE = "status.json"
PID_FILE = "stepd.pid"
CTL_SOCKET = "ctl.sock"
LOG_FILE = "stepd.log"
PROC_NAME = "corral-stepd"  # /proc/PID/comm of a supervisor: tells it apart from a reused pid

# Slurm records a batch step whose output file cannot be created as killed by "signal" 53
# (job_rc 4021 & 127): sacct shows FAILED 0:53.
OUTPUT_FAILED_SIGNAL = 53
MAX_DATAGRAM = 65536
SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes with the terminating NUL
PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
REAP_TIMEOUT = 5.0  # seconds to wait for the last processes of a finished step to vanish

# The states a status file may hold (what _final_status writes); anything else is garbage.
STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "REQUEUED", "OUT_OF_MEMORY"})
MAX_STATE_FILE = 65536  # status.json and stepd.pid are small; more is not ours
MAX_LAUNCH_FILE = 64 * 1024 * 1024  # launch.json holds the script's environment
STEP_NAME = re.compile(r"^[A-Za-z0-9_]{1,32}$")  # a cgroup path component
OPEN_AS_USER_TIMEOUT = 5.0  # seconds for a helper to open a file as the job's user

log = logging.getLogger("corral.agent.stepd")

_SIGNALS_IGNORED_BY_SUPERVISOR = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE,
                                  signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


# ---------------------------------------------------------------------------------------
# Public API (called by the agent)
# ---------------------------------------------------------------------------------------

# Middle processes of spawn_step() not yet reaped: waiting for their exit (the kernel tearing
# down a copy of the caller's address space) would cost the caller several milliseconds.
_pending_middles: list[int] = []


def _reap_middles() -> None:
    for pid in list(_pending_middles):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid  # reaped by someone else (a SIGCHLD handler of the caller)
        if done:
            _pending_middles.remove(pid)


_ALL_SIGNALS = signal.valid_signals()  # once: building it converts each to an enum


def spawn_step(job_dir: str) -> int:
    """Start a detached supervisor for `job_dir/launch.json`; return its pid.

    When this returns, the supervisor has bound `ctl.sock` and written `stepd.pid`, so
    `send_control()` and `is_alive()` work at once.  Raises RuntimeError if it did not start.

    Call it from a process with no foreign at-fork handlers (the agent's spawner): they run
    in the supervisor's children too, and libuv's (uvloop's) closes descriptor numbers that
    are the supervisor's by then and opens a pipe in their place.
    """
    job_dir = os.path.abspath(job_dir)
    report_r, report_w = os.pipe()  # non-inheritable (O_CLOEXEC) by Python's default
    # Signals stay blocked across fork so none can run the caller's handlers in the child.
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _ALL_SIGNALS)
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        os.close(report_r)
        os.close(report_w)
        raise
    if pid == 0:
        _fork_child(job_dir, report_r, report_w)  # never returns
    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    os.close(report_w)
    _pending_middles.append(pid)
    chunks = []
    try:
        while chunk := os.read(report_r, 64):
            chunks.append(chunk)
    finally:
        os.close(report_r)
    _reap_middles()
    text = b"".join(chunks).decode(errors="replace").strip()
    if text.startswith("ERR "):
        raise RuntimeError(f"step supervisor for {job_dir} did not start: {text[4:]}")
    if not text.isdigit():
        raise RuntimeError(f"step supervisor for {job_dir} did not start"
                           f" (see {os.path.join(job_dir, LOG_FILE)})")
    return int(text)


def send_control(job_dir: str, message: dict[str, Any]) -> bool:
    """Send one control message; False when no supervisor listens on `job_dir/ctl.sock`."""
    data = json.dumps(message).encode()
    with _socket_address(os.path.join(job_dir, CTL_SOCKET)) as address:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.sendto(data, address)
        except BlockingIOError:
            return True  # the supervisor is alive but busy: the message is queued or dropped
        except OSError:
            return False
        finally:
            sock.close()
    return True


def read_status(job_dir: str) -> dict[str, Any] | None:
    """The final status of the step, or None while it has not ended.

    What the file holds is checked (a known state, integer codes, numeric times): anything
    else is logged and treated as no status, never raised to the caller."""
    _reap_middles()
    try:
        data = read_private_file(os.path.join(job_dir, STATUS_FILE), MAX_STATE_FILE)
    except FileNotFoundError:
        return None
    except OSError as e:
        _warn_once(os.path.join(job_dir, STATUS_FILE), str(e))
        return None
    try:
        return validate_status(json.loads(data))
    except ValueError as e:  # json.JSONDecodeError included
        _warn_once(os.path.join(job_dir, STATUS_FILE), str(e))
        return None


_warned: set[tuple[str, str]] = set()


def _warn_once(path: str, problem: str) -> None:
    """Log an unusable file once (the agent re-reads status files every second)."""
    if (path, problem) in _warned:
        return
    if len(_warned) > 1000:
        _warned.clear()
    _warned.add((path, problem))
    log.warning("%s: ignored: %s", path, problem)


def validate_status(obj: Any) -> dict[str, Any]:
    """`obj` as a status dict with checked fields; ValueError if it is not one."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    state = obj.get("state")
    if state not in STATES:
        raise ValueError(f"unknown state {str(state)[:40]!r}")
    out = dict(obj)
    for key in ("exit_code", "signal"):
        value = obj.get(key, 0)
        if type(value) is not int or not 0 <= value <= 255:
            raise ValueError(f"{key} is not an integer 0-255: {str(value)[:40]!r}")
        out[key] = value
    for key in ("start_time", "end_time"):
        value = obj.get(key)
        if value is not None and (type(value) not in (int, float) or value != value
                                  or not 0 <= value < 1e11):
            raise ValueError(f"{key} is not a time: {str(value)[:40]!r}")
    return out


def read_private_file(path: str, limit: int, dir_fd: int | None = None) -> bytes:
    """Read a small regular file that only this uid (or root) can have written.

    O_NOFOLLOW and O_NONBLOCK: a symlink, a FIFO or a device planted in its place is refused
    without following or blocking; a file owned by another user is refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{path}: not a regular file")
        if st.st_uid not in (0, os.geteuid()) and st.st_uid != _dir_owner(path, dir_fd):
            # not ours, nor of the directory's owner (a non-root agent's supervisor)
            raise OSError(errno.EPERM, f"{path}: owned by uid {st.st_uid}")
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"{path}: larger than {limit} bytes")
        chunks = []
        size = 0
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise OSError(errno.EFBIG, f"{path}: larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _dir_owner(path: str, dir_fd: int | None) -> int:
    try:
        parent = os.path.dirname(path) or "."
        return (os.stat(parent, dir_fd=dir_fd) if dir_fd is not None and parent == "."
                else os.lstat(parent)).st_uid
    except OSError:
        return -1


def is_alive(job_dir: str) -> bool:
    """True while the supervisor recorded in `job_dir/stepd.pid` runs (not a reused pid)."""
    _reap_middles()
    try:
        pid_text, start_text = read_private_file(os.path.join(job_dir, PID_FILE),
                                                 MAX_STATE_FILE).decode().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return False
    stat = _proc_stat(pid)
    if stat is None or stat[0] == "Z" or stat[2] != start_text:
        return False
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() == PROC_NAME
    except OSError:
        return False


def run_foreground(job_dir: str) -> int:
    """Supervise the step in this process (no fork); returns when the step has ended."""
    job_dir = os.path.abspath(job_dir)
    return _supervise(job_dir, report_fd=None, detached=False)


# ---------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------

class _socket_address:
    """A socket path short enough for sockaddr_un: long job directories are reached through
    /proc/self/fd/N (N an O_PATH descriptor of the directory) instead."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.dir_fd: int | None = None

    def __enter__(self) -> str:
        if len(os.fsencode(self.path)) <= SUN_PATH_MAX:
            return self.path
        self.dir_fd = os.open(os.path.dirname(self.path), os.O_PATH | os.O_DIRECTORY)
        return f"/proc/self/fd/{self.dir_fd}/{os.path.basename(self.path)}"

    def __exit__(self, *exc: object) -> None:
        if self.dir_fd is not None:
            os.close(self.dir_fd)
            self.dir_fd = None


def _proc_stat(pid: int) -> tuple[str, int, str] | None:
    """(state, ppid, starttime) of a process from /proc/PID/stat, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()  # the command name may contain spaces
    return fields[0].decode(), int(fields[1]), fields[19].decode()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _has_no_children() -> bool:
    """This process has no child at all (live or zombie), hence no descendant: true when
    the step ended cleanly, and then no scan of every process on the node is needed."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WSTOPPED | os.WCONTINUED | os.WNOHANG
                  | os.WNOWAIT)
    except ChildProcessError:
        return True
    return False


def _descendants(root_pid: int) -> list[int]:
    """Every live descendant of root_pid, found through the ppid links in /proc."""
    if root_pid == os.getpid() and _has_no_children():
        return []
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = _proc_stat(int(name))
        if stat is not None and stat[0] != "Z":
            children.setdefault(stat[1], []).append(int(name))
    found: list[int] = []
    todo = [root_pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


# Job output is private to its owner (Slurm leaves it to the umask, usually world-readable):
# on a shared cluster one user must not read another's output.
OUTPUT_FILE_MODE = 0o600


def write_atomic(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """Replace `name` in the directory `dir_fd` with `data` (readers see old or new).

    The temporary name is created with O_EXCL|O_NOFOLLOW: whatever stands there (a link
    planted by someone) is removed, never followed."""
    tmp = f".{name}.tmp.{os.getpid()}"
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)  # the umask does not decide who may read it
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def open_job_dir(job_dir: str) -> int:
    """A descriptor of `job_dir`, checked to be a real directory owned by this
    uid and writable by no one else: the supervisor writes there, a user must not."""
    fd = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise OSError(errno.EPERM, f"{job_dir}: must be owned by uid {os.geteuid()} and not"
                      f" writable by group or others (owner {st.st_uid},"
                      f" mode {stat_mod.S_IMODE(st.st_mode):04o})")
    return fd


_libc_handle: Any = None


def _libc() -> Any:
    """libc through ctypes, loaded once (in the spawner, by preload(): not per job)."""
    global _libc_handle
    if _libc_handle is None:
        import ctypes

        _libc_handle = ctypes.CDLL(None, use_errno=True)
    return _libc_handle


def preload() -> None:
    """Import and load now what every supervisor needs, so that the supervisors forked
    from this process (the spawner) inherit it instead of loading it once per job."""
    import resource  # noqa: F401  (launch.apply_rlimits)

    try:
        _libc()
    except OSError:
        pass


def _set_child_subreaper() -> bool:
    """Orphaned job processes are reparented to us (not init): no process can leave the
    step by double-forking, and we reap them."""
    try:
        return bool(_libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError, ImportError):
        return False


def _set_not_dumpable() -> None:
    """After a switch from root to a user: that user may not ptrace this process (and take
    our descriptors) before its exec, whatever fs.suid_dumpable says.  exec resets it."""
    try:
        _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError, ImportError):
        pass


def _strerror(err: int) -> str:
    return os.strerror(err) if err else "Unknown error"


# ---------------------------------------------------------------------------------------
# Process set-up: from the caller to a detached supervisor
# ---------------------------------------------------------------------------------------

def _fork_child(job_dir: str, report_r: int, report_w: int) -> NoReturn:
    """The middle process: new session, fork the supervisor, exit.  Never returns."""
    code = 1
    try:
        gc.disable()  # collecting the caller's garbage could close fd numbers we reuse
        os.close(report_r)
        os.setsid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _supervise(job_dir, report_fd=report_w, detached=True)
            finally:
                os._exit(code)
        os.close(report_w)  # the caller's read ends when the supervisor closes its copy
        code = 0
    finally:
        os._exit(code)


def _reset_signals(ignored: tuple[int, ...] = ()) -> None:
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    for sig in (signal.SIGCHLD, signal.SIGALRM, signal.SIGXFSZ, signal.SIGTSTP, signal.SIGTTIN,
                signal.SIGTTOU, *_SIGNALS_IGNORED_BY_SUPERVISOR):
        signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)


def _supervise(job_dir: str, report_fd: int | None, detached: bool) -> int:
    """Become the supervisor of job_dir; returns the process exit code."""
    if detached:
        # Nothing of the caller's is ours: its loop, sockets, files.  Keep only report_fd.
        _reset_signals(ignored=_SIGNALS_IGNORED_BY_SUPERVISOR)
        assert report_fd is not None
        os.closerange(3, report_fd)
        os.closerange(report_fd + 1, 1 << 20)
    else:
        _reset_signals(ignored=(signal.SIGPIPE, signal.SIGHUP))
    try:
        dir_fd = open_job_dir(job_dir)
        log_fd = os.open(LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                         | os.O_NONBLOCK | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        if not stat_mod.S_ISREG(os.fstat(log_fd).st_mode):
            raise OSError(errno.EINVAL, f"{os.path.join(job_dir, LOG_FILE)}: not a regular file")
    except OSError as e:
        # Nowhere safe to write a log: tell the caller why (spawn_step raises with it).
        if report_fd is not None:
            os.write(report_fd, f"ERR {e.strerror if e.filename is None else e}".encode()[:4000])
        raise
    if detached:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(log_fd, 2)  # a traceback from the supervisor ends up in stepd.log
        if null > 2:
            os.close(null)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(PROC_NAME)
    except OSError:
        pass
    supervisor = Supervisor(job_dir, log_fd, dir_fd)
    try:
        supervisor.bind()
        stat = _proc_stat(os.getpid())
        write_atomic(dir_fd, PID_FILE, f"{os.getpid()} {stat[2] if stat else 0}\n".encode(),
                     0o600)
    except BaseException as e:
        supervisor.note(f"cannot start: {e}")
        raise
    if report_fd is not None:
        os.write(report_fd, str(os.getpid()).encode())
        os.close(report_fd)
    try:
        supervisor.run()
    except BaseException as e:
        import traceback

        supervisor.note(f"supervisor error: {e!r}")
        traceback.print_exc()  # stderr is stepd.log when detached
        supervisor.emergency_stop()
        return 1
    return 0


# ---------------------------------------------------------------------------------------
# The supervisor
# ---------------------------------------------------------------------------------------

class LaunchError(Exception):
    """The job could not be started; the message is for the job's stderr file."""

    def __init__(self, message: str, exit_code: int = 1, signal_num: int = 0) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.signal_num = signal_num


class Supervisor:
    """Supervises one step: starts it, answers control messages, enforces limits."""

    def __init__(self, job_dir: str, log_fd: int, dir_fd: int | None = None) -> None:
        self.job_dir = job_dir
        self.log_fd = log_fd
        # every file of the job directory is reached through this (no path is re-resolved)
        self.dir_fd = open_job_dir(job_dir) if dir_fd is None else dir_fd
        # The job's stderr as the job's process opened it (as the job's user), passed to us
        # over fd_sock before its exec: our own lines go there, never through a path.
        self.fd_sock: socket.socket | None = None
        self.out_fd: int | None = None
        self.pending_lines: list[str] = []
        self.writers: list[int] = []  # forked writers of our lines into the job's stderr
        self.head: PlanHead | None = None  # whose step, where errors go (even from a bad plan)
        self.plan: LaunchPlan | None = None  # None until launch.json has passed its checks
        self.ctl: socket.socket | None = None
        self.cgroup: StepCgroup | None = None
        self.job_pid = 0
        self.job_status: int | None = None  # waitpid status of the batch shell once reaped
        self.exec_r: int | None = None  # read end of the job's CLOEXEC pipe until exec happens
        self.exec_report = b""
        self.exec_error: dict[str, Any] | None = None
        self.launch_error: LaunchError | None = None
        self.started_sent = False
        self.start_time = time.time()
        self.end_time = 0.0
        self.start_mono = time.monotonic()
        self.reason: str | None = None  # CANCELLED, TIMEOUT or REQUEUED once we kill the step
        self.time_limit = -1.0
        self.kill_wait = 30.0
        self.warn_signal: tuple[int, float, bool] | None = None
        self.warn_sent = False
        self.kill_at: float | None = None  # monotonic time of the SIGKILL after a SIGTERM
        self.suspended_since: float | None = None
        self.suspended_total = 0.0
        self.stopped_by_signal = False  # suspended through SIGSTOP (no freezer)
        self.wake_r = -1
        self.wake_w = -1

    # -- logging ------------------------------------------------------------------------
    def note(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        try:
            os.write(self.log_fd, f"[{stamp}] {message}\n".encode())
        except OSError:
            pass

    def _job_stderr_message(self, text: str, create: bool = False) -> None:
        """Add a `slurmstepd: error:` line to the job's stderr.

        Written through the descriptor the job's process opened as the job's user (never by
        path: the job may have swapped its output for a link by now); queued until that
        descriptor arrives.  `create`: the job never ran, so the file is opened here, by a
        helper process that has become the job's user."""
        line = f"slurmstepd: error: {text}\n"
        if create and self.out_fd is None:
            path = self.head and (self.head.stderr or self.head.stdout)
            if path and self.head is not None:
                flags = os.O_WRONLY | os.O_CREAT | (
                    os.O_APPEND if self.head.open_mode == "append" else os.O_TRUNC)
                self.out_fd = self._open_as_owner(str(path), flags)
        self.pending_lines.append(line)
        self._flush_job_lines()

    def _job_output_fd(self, exec_done: bool = False) -> int | None:
        """The job's stderr descriptor once its process has sent it (None before).
        `exec_done`: the job's process has exec'd, so it sent it already or never will."""
        if self.out_fd is None and self.fd_sock is not None:
            try:
                _, fds, _, _ = socket.recv_fds(self.fd_sock, 16, 1)
            except (BlockingIOError, InterruptedError):
                if not exec_done:
                    return None
                self.note("the job's process did not pass its stderr: notices go here")
                fds = []
            except OSError as e:
                self.note(f"cannot receive the job's stderr: {e}")
                fds = []
            self.fd_sock.close()
            self.fd_sock = None
            if fds:
                self.out_fd = fds[0]
        return self.out_fd

    def _flush_job_lines(self, final: bool = False) -> None:
        if not self.pending_lines:
            return
        fd = self._job_output_fd()
        if fd is None and not final and self.fd_sock is not None:
            return  # the job's process has not passed its stderr yet
        lines, self.pending_lines = self.pending_lines, []
        try:
            # A FIFO, a terminal or a socket could block the supervisor: regular files only.
            regular = fd is not None and stat_mod.S_ISREG(os.fstat(fd).st_mode)
            if regular:
                assert fd is not None
                self._write_detached(fd, "".join(lines).encode())
                return
        except OSError as e:
            self.note(f"cannot write to the job's stderr: {e.strerror}")
        for line in lines:
            self.note(line.rstrip("\n"))

    def _write_detached(self, fd: int, data: bytes) -> None:
        """Write to the job's file from a forked writer: even a regular file may block for
        good (a FUSE file system of the user's), and the supervisor must not.  The writer
        is our child, so the step's end kills it if it is stuck.  It writes as the job's
        user (the descriptor was opened as them; the write counts against their quota and
        limits, as their own would), never as root."""
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                if os.geteuid() == 0 and self.head is not None and self.head.uid != 0:
                    self._become_owner()
                os.write(fd, data)
                code = 0
            except OSError as e:
                self.note(f"cannot write to the job's stderr as uid "
                          f"{self.head.uid if self.head else '?'}: {e.strerror}")
            finally:
                os._exit(code)
        self.writers.append(pid)

    def _wait_writers(self, timeout: float = 2.0) -> None:
        deadline = time.monotonic() + timeout
        for pid in self.writers:
            while True:
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    break  # reaped by _reap() already
                if done:
                    break
                if time.monotonic() > deadline:
                    self.note("a write to the job's stderr did not finish; abandoned")
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.005)
        self.writers = []

    def _open_as_owner(self, path: str, flags: int) -> int | None:
        """Open `path` as the job's user (a forked helper switches identity, opens, and
        passes the descriptor back); None if that fails."""
        if self.head is None:
            return None
        uid = self.head.uid
        flags |= os.O_NONBLOCK | os.O_CLOEXEC
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    parent.close()
                    if os.geteuid() == 0 and uid != 0:
                        self._become_owner()
                    fd = os.open(path, flags, OUTPUT_FILE_MODE)
                    if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
                        raise OSError(errno.EINVAL, "not a regular file")
                    socket.send_fds(child, [b"f"], [fd])
                    code = 0
                except OSError as e:
                    self.note(f"cannot open {path} as uid {uid}: {e.strerror}")
                finally:
                    os._exit(code)
            child.close()
            parent.settimeout(OPEN_AS_USER_TIMEOUT)
            try:
                _, fds, _, _ = socket.recv_fds(parent, 16, 1)
            except OSError:
                fds = []
            if not fds:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.waitpid(pid, 0)
            return fds[0] if fds else None
        finally:
            parent.close()
            child.close()

    def _identity(self) -> launch_mod.RunAs:
        """Who the job runs as: `launch.task_identity()`, as for srun tasks."""
        assert self.head is not None
        return launch_mod.task_identity(self.head.uid, self.head.gid, self.head.user, None)

    def _become_owner(self, ident: launch_mod.RunAs | None = None) -> None:
        """Switch this (forked) process to the job's user and groups; OSError if impossible.
        The launch description's `groups`, when given, replace the user's own."""
        ident = ident or self._identity()
        assert self.head is not None
        groups = self.head.groups
        os.setgroups(ident.groups if groups is None else groups)
        os.setgid(ident.gid)
        os.setuid(ident.uid)
        _set_not_dumpable()

    # -- set-up -------------------------------------------------------------------------
    def bind(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            os.unlink(CTL_SOCKET, dir_fd=self.dir_fd)  # left by an earlier attempt of the step
        except FileNotFoundError:
            pass
        old_umask = os.umask(0o177)  # only the agent's uid may control the step
        try:
            # through the directory's descriptor: the path is not resolved again
            sock.bind(f"/proc/self/fd/{self.dir_fd}/{CTL_SOCKET}")
        finally:
            os.umask(old_umask)
        sock.setblocking(False)
        self.ctl = sock

    def _load_launch(self) -> None:
        """Read and check the plan (model.launchplan); ValueError naming the first bad field.
        Its head (whose step, where errors go) is kept even when the rest fails its checks,
        so the failure reaches the job's own stderr, opened as its user."""
        data = json.loads(read_private_file(LAUNCH_FILE, MAX_LAUNCH_FILE, dir_fd=self.dir_fd))
        try:
            self.head = PlanHead.from_dict(data, LAUNCH_FILE)
            plan = LaunchPlan.from_dict(data, LAUNCH_FILE)
        except MessageError as e:
            raise ValueError(str(e)) from None
        self.plan = plan
        self.time_limit = -1.0 if plan.time_limit is None else plan.time_limit
        self.kill_wait = 30.0 if plan.kill_wait is None else plan.kill_wait
        if plan.signal is not None and plan.signal.num:
            self.warn_signal = (plan.signal.num, float(plan.signal.secs), plan.signal.batch_only)

    def _setup_cgroup(self) -> None:
        plan = self.plan
        assert plan is not None
        if not plan.cgroup_root:
            return
        try:
            cgroup = StepCgroup(plan.cgroup_root, plan.job_id, plan.step, plan.cgroup_cluster)
            # mem_limit_mb: what the agent worked out from --mem and cgroup.conf (a default
            # for a job without --mem); mem_mb alone where no agent did (tests, debugging)
            mem = plan.mem_limit_mb if plan.mem_limit_mb is not None else plan.mem_mb
            # the batch step sets the job's limits on the job's group: its srun steps,
            # siblings of this one (job_J/step_N), share them
            for note in cgroup.create(plan.cpus, mem, plan.pids_max,
                                      job_limits=plan.step == "batch"):
                self.note(f"cgroup: {note}")
        except OSError as e:
            self.note(f"cgroups not used ({e}); falling back to process tracking")
            return
        self.cgroup = cgroup

    # -- the job process ----------------------------------------------------------------
    def _exec_request(self) -> launch_mod.ExecRequest:
        """The step's request for the launch pipeline (agent.launch), its hooks applied;
        LaunchError when a hook refuses it (a bad container image, a mount the user may not
        read)."""
        plan = self.plan
        assert plan is not None and plan.script is not None
        request = launch_mod.ExecRequest(
            argv=[plan.script, *plan.argv], env=dict(plan.env), cwd=plan.work_dir or "/tmp",
            ident=self._identity(), job_id=plan.job_id, step=plan.step, cpus=plan.cpus or None,
            gpus=list(plan.gpus), umask=plan.umask, container=plan.container,
            container_dir=plan.container_dir, image_cache=plan.image_cache, carry_program=True)
        try:
            return launch_mod.prepare(request)
        except launch_mod.LaunchFailure as e:
            raise LaunchError(e.message.strip().removeprefix("slurmstepd: error: "),
                              e.exit_code or 1) from None

    def _start_job(self) -> None:
        plan = self.plan
        assert plan is not None
        if os.geteuid() != 0 and plan.uid != os.geteuid():
            raise LaunchError(
                f"cannot run job {plan.job_id} as uid {plan.uid}: this agent runs as uid "
                f"{os.geteuid()}, not root, and can only run jobs of uid {os.geteuid()}")
        request = self._exec_request()
        exec_r, exec_w = os.pipe()  # both ends close on exec: EOF on exec_r means exec worked
        # the job's process passes its stderr back through this (closed on its exec)
        fd_sock, fd_sock_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.start_time = time.time()
        self.start_mono = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(exec_r)
                fd_sock.close()
                self._exec_job(request, exec_w, fd_sock_child)
            finally:
                os._exit(1)
        os.close(exec_w)
        fd_sock_child.close()
        fd_sock.setblocking(False)
        self.fd_sock = fd_sock
        self.job_pid = pid
        self.exec_r = exec_r
        os.set_blocking(exec_r, False)

    def _exec_job(self, request: launch_mod.ExecRequest, exec_w: int,
                  fd_sock: socket.socket) -> NoReturn:
        """In the forked job process: confine, become the owner, set up I/O, exec."""
        plan = self.plan
        assert plan is not None

        def fail(stage: str, err: int, message: str, code: int) -> NoReturn:
            report = {"stage": stage, "errno": err, "message": message}
            try:
                os.write(exec_w, json.dumps(report).encode())
            finally:
                os._exit(code)

        _reset_signals()
        os.setsid()
        # the supervisor's directory and control socket are no business of the job's
        os.close(self.dir_fd)
        if self.ctl is not None:
            self.ctl.close()
        if self.cgroup is not None:
            try:
                self.cgroup.add_self()
            except CgroupError as e:
                self.note(f"job not confined: {e}")
        ident = request.ident
        if ident.error:
            fail("identity", 0, ident.error, 1)
        # the pipeline's exec side, as for an srun task: CPUs and limits, then identity
        try:
            launch_mod.enter(request, plan.groups)
        except OSError as e:
            fail("identity", e.errno or 0, f"cannot become uid {plan.uid}: {e.strerror}", 1)
        finally:
            for problem in request.notes:
                self.note(problem)
        if ident.switch:
            _set_not_dumpable()
        umask = plan.umask
        if umask is None:
            env_umask = plan.env.get("SLURM_UMASK", "")
            umask = int(env_umask, 8) if re.fullmatch(r"[0-7]{1,4}", env_umask) else 0o022
        os.umask(umask & 0o777)
        self._open_job_io(fail)
        try:
            socket.send_fds(fd_sock, [b"e"], [2])
        except OSError as e:
            self.note(f"cannot pass the job's stderr to the supervisor: {e.strerror}")
        fd_sock.close()
        work_dir = request.cwd
        try:
            os.chdir(work_dir)
        except OSError as e:
            os.write(2, (f"slurmstepd: error: couldn't chdir to `{work_dir}': "
                         f"{_strerror(e.errno or 0)}: going to /tmp instead\n").encode())
            try:
                os.chdir("/tmp")
            except OSError:
                os.write(2, b"slurmstepd: error: couldn't chdir to /tmp either. dying.\n")
                fail("chdir", e.errno or 0, f"couldn't chdir to {work_dir}", 1)
        script = request.argv[0]
        argv = request.command()
        # the batch script's own pid, as slurmstepd sets it for the batch step's task
        request.env["SLURM_TASK_PID"] = str(os.getpid())
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        try:
            os.execve(argv[0], argv, request.env)
        except OSError as e:
            err = e.errno or errno.ENOEXEC
        message = f"execve(): {argv[0]}: {_strerror(err)}"
        if err == errno.ENOENT and not request.wrapper:
            # The script exists but its #! interpreter does not: say which (as Slurm does).
            try:
                with open(script, "rb") as f:
                    head = f.read(256)
                if head.startswith(b"#!"):
                    interp = head[2:].split(b"\n", 1)[0].decode(errors="replace")
                    message = f"execve(): bad interpreter({interp}): {_strerror(err)}"
            except OSError:
                pass
        os.write(2, f"slurmstepd: error: {message}\n".encode())
        fail("exec", err, message, err & 0xFF)

    def _open_job_io(self, fail: Any) -> None:
        """Open stdin/stdout/stderr as the owner (already switched to) and install them."""
        plan = self.plan
        assert plan is not None
        append = plan.open_mode == "append"
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        stdout = plan.stdout or os.devnull
        stderr = plan.stderr or stdout
        stdin = plan.stdin or os.devnull
        fds: list[int] = []
        for name, path, mode in (("stdin", stdin, os.O_RDONLY), ("stdout", stdout, flags),
                                 ("stderr", stderr, flags)):
            if name == "stderr" and stderr == stdout:
                fds.append(os.dup(fds[1]))
                continue
            try:
                # O_NONBLOCK for the open only: a FIFO with no reader fails at once (ENXIO)
                # instead of leaving the job hanging before it starts.
                fd = os.open(path, mode | os.O_NONBLOCK | os.O_CLOEXEC, OUTPUT_FILE_MODE)
                os.set_blocking(fd, True)
                fds.append(fd)
            except OSError as e:
                self.note(f"Could not open {name} file {path}: {e.strerror}")
                fail("output", e.errno or 0, f"Could not open {name} file {path}: {e.strerror}",
                     1)
        # dup2 leaves the target inheritable; the originals stay close-on-exec.
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)

    # -- main loop ----------------------------------------------------------------------
    def run(self) -> None:
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so SIGCHLD wakes select()
        _set_child_subreaper()
        try:
            self._load_launch()
        except (OSError, ValueError, KeyError, TypeError) as e:
            self.note(f"bad {LAUNCH_FILE}: {e}")
            self.launch_error = LaunchError(f"bad launch description: {e}")
        if self.launch_error is None:
            self._setup_cgroup()
            try:
                self._start_job()
            except LaunchError as e:
                self.launch_error = e
            except OSError as e:
                self.launch_error = LaunchError(f"cannot start job: {e}")
        if self.launch_error is not None:
            self._job_stderr_message(str(self.launch_error), create=True)
            self.note(str(self.launch_error))
        else:
            while self.job_status is None:
                self._wait_once()
            plan = self.plan
            if plan is not None and plan.container is not None and plan.container.save \
                    and plan.container_dir:  # --container-save, while the image's mount lives
                from corral.agent import container  # (its squashfuse is one of ours)

                container.save_pending(container.job_dir(plan.container_dir, plan.job_id),
                                       plan.step)
            self._end_of_step_cleanup()
        self._finish()

    def _wait_once(self) -> None:
        readers: list[Any] = [self.wake_r]
        if self.ctl is not None:
            readers.append(self.ctl)
        if self.exec_r is not None:
            readers.append(self.exec_r)
        ready, _, _ = select.select(readers, [], [], self._next_timeout())
        if self.wake_r in ready:
            try:
                while os.read(self.wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        if self.exec_r is not None and self.exec_r in ready:
            self._read_exec_pipe()
        if self.ctl is not None and self.ctl in ready:
            self._read_control()
        self._reap()
        self._run_timers()
        self._flush_job_lines()

    def _read_exec_pipe(self) -> None:
        """Collect the job's exec report; EOF without a report means the exec succeeded."""
        assert self.exec_r is not None
        while True:
            try:
                chunk = os.read(self.exec_r, 4096)
            except BlockingIOError:
                if self.job_status is None:
                    return  # more may come: wait for EOF
                chunk = b""  # the job has exited, so nothing holds the write end any more
            if not chunk:
                break
            self.exec_report += chunk
        os.close(self.exec_r)
        self.exec_r = None
        if self.exec_report:
            try:
                self.exec_error = json.loads(self.exec_report)
            except ValueError:
                self.exec_error = {"stage": "exec", "errno": 0, "message": "unknown failure"}
            self.note(f"job did not start: {self.exec_error.get('message')}")
        elif not self.started_sent:
            # the job's stderr came before its exec: take it now, not when a notice needs it
            self._job_output_fd(exec_done=True)
            self.started_sent = True
            self._notify(messages.StepdStarted(job_id=self._job_id(), step=self._step_name(),
                                               pid=self.job_pid))

    def _read_control(self) -> None:
        assert self.ctl is not None
        while True:
            try:
                data = self.ctl.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return
            try:
                self._handle(messages.decode(data, messages.TO_STEPD))
            except messages.MessageError as e:
                self.note(f"bad control message {data[:200]!r}: {e}")
            except OSError as e:
                self.note(f"control message {data[:200]!r} failed: {e}")

    def _handle(self, message: messages.Message) -> None:
        if isinstance(message, messages.CancelOp):
            self._terminate("CANCELLED")
        elif isinstance(message, messages.RequeueOp):
            self._terminate("REQUEUED")
        elif isinstance(message, messages.SignalOp):
            if message.batch_only:
                self._signal_batch(message.signal)
            else:
                self._signal_all(message.signal)
        elif isinstance(message, messages.SuspendOp):
            self._suspend()
        elif isinstance(message, messages.ResumeOp):
            self._resume()
        elif isinstance(message, messages.TimeLimitOp):
            self.time_limit = message.seconds
            if self.warn_signal and self.warn_sent:
                # A longer limit re-arms the warning signal (as Slurm does on extension).
                self.warn_sent = self._elapsed() >= self.time_limit - self.warn_signal[1]
        elif isinstance(message, messages.NotifyOp):
            # `scontrol notify` and idle-GPU reclaim's notice: Slurm's batch step logs it as
            # an error, which lands in the job's stderr (srun/salloc get theirs from the
            # controller)
            self._job_stderr_message(message.message)

    # -- time ---------------------------------------------------------------------------
    def _elapsed(self) -> float:
        """Seconds the step has run, not counting time suspended (as Slurm's time limit)."""
        now = time.monotonic()
        suspended = self.suspended_total
        if self.suspended_since is not None:
            suspended += now - self.suspended_since
        return now - self.start_mono - suspended

    def _next_timeout(self) -> float | None:
        waits: list[float] = []
        if self.kill_at is not None:
            waits.append(self.kill_at - time.monotonic())
        if self.time_limit >= 0 and self.suspended_since is None and self.reason is None:
            left = self.time_limit - self._elapsed()
            waits.append(left)
            if self.warn_signal and not self.warn_sent:
                waits.append(left - self.warn_signal[1])
        if not waits:
            return None
        return max(0.0, min(waits))

    def _run_timers(self) -> None:
        if self.job_status is not None:
            return
        if self.kill_at is not None and time.monotonic() >= self.kill_at:
            self.kill_at = time.monotonic() + 1.0  # keep at it for processes that resist
            self._signal_all(signal.SIGKILL)
        if self.time_limit < 0 or self.suspended_since is not None or self.reason is not None:
            return
        elapsed = self._elapsed()
        if self.warn_signal and not self.warn_sent and \
                elapsed >= self.time_limit - self.warn_signal[1]:
            self.warn_sent = True
            num, _, batch_only = self.warn_signal
            if batch_only:
                self._signal_batch(num)
            else:
                self._signal_all(num)
        if elapsed >= self.time_limit:
            self._terminate("TIMEOUT")

    # -- signals ------------------------------------------------------------------------
    def _job_pids(self) -> set[int]:
        """Every process of the step: the cgroup's members plus our descendants (which
        include orphans reparented to us as subreaper)."""
        pids = set(_descendants(os.getpid()))
        if self.cgroup is not None:
            pids.update(self.cgroup.pids())
        pids.discard(os.getpid())
        return pids

    def _signal_batch(self, sig: int) -> None:
        if self.job_status is None and self.job_pid:
            try:
                os.kill(self.job_pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _signal_all(self, sig: int) -> None:
        if sig == signal.SIGKILL and self.cgroup is not None:
            try:
                self.cgroup.kill_all()  # atomic where the kernel has it; the loop below as well
            except OSError:
                pass
        signalled: set[int] = set()
        if self.job_status is None and self.job_pid:
            try:
                os.killpg(self.job_pid, sig)  # the job's session leader is its group leader
            except (ProcessLookupError, PermissionError):
                pass
            else:
                # Each process once (as slurmstepd): a second signal is not harmless, e.g. a
                # second SIGTERM within a second makes srun abort its step at once.
                signalled = {pid for pid in self._job_pids() if _pgid(pid) == self.job_pid}
        # Repeat while new processes appear (forked while we were signalling).
        for _ in range(4):
            pids = self._job_pids() - signalled
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            signalled |= pids

    def _suspend(self) -> None:
        if self.suspended_since is not None or self.job_status is not None:
            return
        frozen = False
        if self.cgroup is not None and self.cgroup.can_freeze:
            try:
                frozen = self.cgroup.freeze()
                if not frozen:
                    self.note("freezer did not report FROZEN in time")
                    frozen = True  # the freeze is in effect as far as it goes; thaw on resume
            except OSError as e:
                self.note(f"freezer not usable ({e}); suspending with SIGSTOP")
        if not frozen:
            self._signal_all(signal.SIGSTOP)
            self.stopped_by_signal = True
        self.suspended_since = time.monotonic()

    def _resume(self) -> None:
        if self.suspended_since is None:
            return
        self._thaw()
        self.suspended_total += time.monotonic() - self.suspended_since
        self.suspended_since = None

    def _thaw(self) -> None:
        if self.cgroup is not None and self.cgroup.frozen:
            try:
                self.cgroup.thaw()
            except OSError as e:
                self.note(f"cannot thaw: {e}")
        if self.stopped_by_signal:
            self._signal_all(signal.SIGCONT)
            self.stopped_by_signal = False

    def _terminate(self, reason: str) -> None:
        """SIGTERM to every process, SIGKILL kill_wait seconds later; the step ends as
        `reason` (the first reason wins: a cancel during a time-out stays a TIMEOUT)."""
        if self.job_status is not None:
            return
        if self.reason is None:
            self.reason = reason
            entity = f"JOB {self._job_id()}"
            node = (self.head and self.head.node_name) or os.uname().nodename.split(".")[0]
            when = time.strftime("%Y-%m-%dT%H:%M:%S")
            suffix = {"TIMEOUT": " DUE TO TIME LIMIT", "REQUEUED": " DUE TO JOB REQUEUE"}
            self._job_stderr_message(
                f"*** {entity} ON {node} CANCELLED AT {when}{suffix.get(reason, '')} ***")
        if self.suspended_since is not None:
            self._resume()
        self._signal_all(signal.SIGCONT)
        self._signal_all(signal.SIGTERM)
        if self.kill_at is None:
            self.kill_at = time.monotonic() + max(0.0, self.kill_wait)

    # -- the end ------------------------------------------------------------------------
    def _reap(self) -> None:
        """Collect every exited child: the batch shell and reparented orphans."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.job_pid and self.job_status is None:
                self.job_status = status
                self.end_time = time.time()
                if self.exec_r is not None:
                    self._read_exec_pipe()

    def _end_of_step_cleanup(self) -> None:
        """The batch shell has exited: kill what it left behind, as Slurm does, and wait
        until it is gone so the cgroup can be removed."""
        if self.cgroup is not None and self.cgroup.frozen:
            self._signal_all(signal.SIGKILL)
            self._thaw()  # frozen processes die only once thawed
        if self.stopped_by_signal:
            self._thaw()
        deadline = time.monotonic() + REAP_TIMEOUT
        while True:
            self._reap()
            left = self._job_pids()
            if not left:
                return
            if time.monotonic() > deadline:
                self.note(f"processes still alive after the step ended: {sorted(left)}")
                return
            self._signal_all(signal.SIGKILL)
            time.sleep(0.01)

    def _final_status(self) -> dict[str, Any]:
        exit_code = 0
        sig = 0
        if self.launch_error is not None:
            state, exit_code, sig = "FAILED", self.launch_error.exit_code, \
                self.launch_error.signal_num
        else:
            status = self.job_status or 0
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
            elif os.WIFEXITED(status):
                exit_code = os.WEXITSTATUS(status)
            oom_kills = self.cgroup.oom_kills() if self.cgroup is not None else 0
            if oom_kills:
                step = f"StepId={self._job_id()}.{self._step_name()}"
                self._job_stderr_message(
                    f"Detected {oom_kills} oom-kill event(s) in {step}. Some of your processes"
                    " may have been killed by the cgroup out-of-memory handler.")
            if self.exec_error is not None and self.exec_error.get("stage") == "output":
                exit_code, sig = 0, OUTPUT_FAILED_SIGNAL
            if self.reason is not None:
                state = self.reason
            elif self.exec_error is not None:
                state = "FAILED"
            elif oom_kills:
                state = "OUT_OF_MEMORY"
            elif exit_code == 0 and sig == 0:
                state = "COMPLETED"
            else:
                state = "FAILED"
        return {
            "job_id": self.head.job_id if self.head is not None else None,
            "step": self._step_name(),
            "state": state,
            "exit_code": exit_code,
            "signal": sig,
            "start_time": self.start_time,
            "end_time": self.end_time or time.time(),
            "pid": self.job_pid,
            # every process of the step it reaped: CPU time, largest RSS, I/O (sacct)
            "usage": usage_figures(resource.getrusage(resource.RUSAGE_CHILDREN)),
        }

    def _finish(self) -> None:
        status = self._final_status()
        self._close_control()
        self._flush_job_lines(final=True)
        self._wait_writers()
        if self.out_fd is not None:
            os.close(self.out_fd)
            self.out_fd = None
        write_atomic(self.dir_fd, STATUS_FILE, (json.dumps(status) + "\n").encode(), 0o600)
        self._notify(messages.StepdExited(job_id=self._job_id(), step=self._step_name(),
                                          state=status["state"], exit_code=status["exit_code"],
                                          signal=status["signal"]))
        if self.cgroup is not None and not self.cgroup.remove():
            self.note("could not remove the step's cgroup")
        if self.plan is not None and self.plan.container is not None and self.plan.container_dir:
            from corral.agent import container  # its unnamed container goes with the step

            container.release_step(self.plan.container_dir, self.plan.job_id, self.plan.step)
            container.release_job_if_idle(self.plan.container_dir, self.plan.job_id)

    def _close_control(self) -> None:
        if self.ctl is not None:
            self.ctl.close()
            self.ctl = None
            try:
                os.unlink(CTL_SOCKET, dir_fd=self.dir_fd)
            except OSError:
                pass

    def _job_id(self) -> int:
        return self.head.job_id if self.head is not None else 0

    def _step_name(self) -> str:
        return self.head.step if self.head is not None else "batch"

    def _notify(self, event: messages.StepdStarted | messages.StepdExited) -> None:
        path = self.head.notify_socket if self.head is not None else None
        if not path:
            return
        try:
            with _socket_address(path) as address:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                try:
                    sock.setblocking(False)
                    sock.sendto(messages.encode(event).encode(), address)
                finally:
                    sock.close()
        except OSError as e:
            self.note(f"cannot notify {path}: {e}")

    def emergency_stop(self) -> None:
        """After an internal error: do not leave the job unsupervised; kill it and report."""
        try:
            if self.job_pid and self.job_status is None:
                self.reason = self.reason or "CANCELLED"
                self._signal_all(signal.SIGKILL)
                self._end_of_step_cleanup()
            self._finish()
        except BaseException as e:  # noqa: BLE001 - last resort, already failing
            self.note(f"emergency stop failed: {e!r}")


# ---------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m corral.agent.stepd JOB_DIR", file=sys.stderr)
        return 2
    if not os.path.isfile(os.path.join(args[0], LAUNCH_FILE)):
        print(f"stepd: error: {os.path.join(args[0], LAUNCH_FILE)}: No such file",
              file=sys.stderr)
        return 1
    return run_foreground(args[0])


if __name__ == "__main__":
    sys.exit(main())
