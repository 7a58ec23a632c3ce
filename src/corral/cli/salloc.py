"""salloc: obtain an allocation, run a command (the user's shell by default) in it on
this machine, then give the allocation back.

The allocation lives as long as salloc's WebSocket to the controller (docs/STEPS.md):
`start` with a null step, then `release` with the command's exit code when it ends,
or `detach` for --no-shell.  Messages and exit codes follow Slurm 22.05's salloc.
"""

from __future__ import annotations

import os
import sys
import time

from corral.cli import client
from corral.cli.options import (
    ALLOC_NO_EFFECT,
    ALLOC_UNSUPPORTED,
    CHECKED_NO_EFFECT,
    EXIT_ERROR,
    IMMEDIATE_HELD,
    CliExit,
    GetoptError,
    GresError,
    Option,
    OptionValueError,
    check_no_effect_value,
    fail,
    full_path,
    gpu_option_environment,
    gpu_request,
    hetjob_refusal,
    job_spec,
    node_list,
    node_task_counts,
    option_error,
    option_table,
    parse_alloc_value,
    parse_int,
    read_hostfile,
    spec_problem,
)
from corral.model.jobspec import short_hostname, submitted_from
from corral.model.pyxis import PYXIS_HELP, container_from_options, pyxis_environment

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from corral.cli.ws import WebSocket

PROG = "salloc"
VERSION_TEXT = "slurm-wlm 22.05.8\n"
TRY_HELP = f'Try "{PROG} --help" for more information\n'
STEPS_RESOURCE = "/v1/steps/ws"

SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM, SIGCHLD, SIGCONT = (
    1, 2, 3, 10, 12, 15, 17, 18)


class SallocRequest:
    def __init__(self) -> None:
        self.command: list[str] = []
        self.v: dict[str, Any] = {}
        self.spec: dict[str, Any] = {}
        self.env: dict[str, str] = {}
        self.shell_env: dict[str, str] = {}  # what salloc itself exports to the command
        self.no_shell = False
        self.verbose = 0
        self.quiet = 0
        self.immediate: int | None = None
        self.ignored: list[str] = []
        self.messages: list[str] = []

    def __repr__(self) -> str:
        return f"SallocRequest(command={self.command!r})"


def _set(req: SallocRequest, option: Option, arg: str | None, now: float, cwd: str) -> None:
    key = option.key
    try:
        if key == "help":
            raise CliExit(0, stdout=HELP_TEXT.replace("\nHelp options:", PYXIS_HELP + "\nHelp options:", 1))
        if key == "usage":
            raise CliExit(0, stdout=USAGE_TEXT)
        if key == "version":
            raise CliExit(0, stdout=VERSION_TEXT)
        if key == "verbose":
            req.verbose += 1
            return
        if key == "quiet":
            req.quiet += 1
            return
        if key == "no-shell":
            req.no_shell = True
            return
        if key in ALLOC_UNSUPPORTED:
            fail(PROG, f"--{option.name} is not supported by Corral")
        if key == "overcommit":
            req.v[key] = True
            return
        if key in ALLOC_NO_EFFECT:
            req.ignored.append(option.name)
            return
        if key in CHECKED_NO_EFFECT:
            check_no_effect_value(key, arg)
            req.ignored.append(option.name)
            return
        value: Any
        if key == "immediate":
            value = 1 if arg is None else parse_int("--immediate", arg, False)
        elif key == "hold":
            value = True
        elif key in ("nodelist", "exclude"):
            value = arg or ""
        else:
            value = parse_alloc_value(key, arg, req.v, now, cwd)
    except OptionValueError as e:
        raise option_error(PROG, e) from None
    req.v[key] = value


# the errors salloc.c words as `Unable to allocate resources` when --immediate is given:
# ESLURM_NOT_TOP_PRIORITY, ESLURM_NODES_BUSY and ETIMEDOUT
_IMMEDIATE_ERRORS = (IMMEDIATE_HELD, "Requested nodes are busy",
                     "Socket timed out on send/recv operation")


def allocation_refusal(line: str, immediate: bool) -> str:
    """The controller words a refused allocation as srun prints it; salloc.c says `Job
    submit/allocate failed` but for the errors of an --immediate request above."""
    head = "Unable to allocate resources: "
    if not line.startswith(head) or (immediate and line[len(head):] in _IMMEDIATE_ERRORS):
        return line
    return "Job submit/allocate failed: " + line[len(head):]


def default_shell(env: dict[str, str]) -> str:
    """$SHELL, else the login shell from the password database, else /bin/sh."""
    shell = env.get("SHELL")
    if shell:
        return shell
    try:
        import pwd
        return pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"
    except KeyError:
        return "/bin/sh"


def parse_salloc(argv: list[str], env: dict[str, str], cwd: str, now: float, *,
                 submit_host: str = "localhost", umask: int = 0o022) -> SallocRequest:
    """Work out salloc's request; raises CliExit with Slurm's text and status."""
    table = option_table(PROG)
    req = SallocRequest()
    try:
        found, index = table.parse(argv)
    except GetoptError as e:
        for option, arg in e.found:
            if option.key in ("help", "usage", "version"):
                _set(req, option, arg, now, cwd)
        raise CliExit(EXIT_ERROR, f"{e.message}\n{TRY_HELP}") from None
    for option, arg in found:
        _set(req, option, arg, now, cwd)
    v = req.v
    if req.quiet and req.verbose:
        fail(PROG, "don't specify both --verbose (-v) and --quiet (-Q)")
    operands = argv[index:]
    if operands and operands[0] == ":":
        raise hetjob_refusal(PROG, "Job submit/allocate failed")
    req.command = operands or [default_shell(env)]
    req.immediate = v.get("immediate")
    if req.immediate is not None and v.get("hold"):
        # slurmctld refuses at once: a held job never has the top priority.
        fail(PROG, f"Unable to allocate resources: {IMMEDIATE_HELD}")  # salloc.c, with -I
    try:
        req_nodes = node_list(v["nodelist"], cwd) if "nodelist" in v else []
        if "nodefile" in v:
            req_nodes = list(dict.fromkeys(read_hostfile(full_path(str(v["nodefile"]), cwd))))
        exc_nodes = node_list(v["exclude"], cwd) if "exclude" in v else []
    except OSError:
        fail(PROG, "Failure getting NodeNames from hostfile")
    except ValueError:
        fail(PROG, "Job submit/allocate failed: Invalid node name specified")
    min_nodes, max_nodes, ntasks, _ = node_task_counts(v, req_nodes, PROG, req.messages)
    try:
        gpus = gpu_request(v)
    except GresError:
        fail(PROG, "Job submit/allocate failed: Invalid generic resource (gres) "
                   "specification")
    # salloc's _opt_verify names the job before its command is looked at
    name = str(v["job-name"]) if "job-name" in v else \
        ("no-shell" if req.no_shell else "interactive")
    req.spec = job_spec(
        v, name=name, cwd=cwd, submit_line=" ".join([PROG, *argv]), req_nodes=req_nodes,
        exc_nodes=exc_nodes, min_nodes=min_nodes, max_nodes=max_nodes, ntasks=ntasks,
        gpus=gpus, nodes_given="nodes" in v or bool(req_nodes))
    problem = spec_problem(req.spec)
    if problem is not None:
        first, error = problem
        raise CliExit(EXIT_ERROR, (f"{PROG}: error: {first}\n" if first else "")
                      + f"{PROG}: error: Job submit/allocate failed: {error}\n")
    job_env = dict(env)
    job_env["SLURM_SUBMIT_DIR"] = cwd
    job_env["SLURM_SUBMIT_HOST"] = submit_host
    job_env["SLURM_UMASK"] = f"0{umask >> 6 & 7}{umask >> 3 & 7}{umask & 7}"
    req.env = job_env
    req.shell_env = gpu_option_environment(v)
    try:  # Pyxis' options: the allocation's srun steps run in the container (PYXIS_*)
        container = container_from_options(v, env)
    except ValueError as e:
        fail(PROG, f"pyxis: {e}")
    if container is not None:
        req.shell_env.update(pyxis_environment(container))
    if req.verbose:
        for opt_name in dict.fromkeys(req.ignored):
            req.messages.append(f"{PROG}: --{opt_name} has no effect under Corral")
    return req


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------

class Salloc:
    """Wait for the allocation, then run the command as a local child."""

    def __init__(self, ws: WebSocket, req: SallocRequest, signal_fd: int | None,
                 err: Any = None, clock: Any = time.monotonic):
        self.ws = ws
        self.req = req
        self.signal_fd = signal_fd
        self.err = err if err is not None else sys.stderr
        self.clock = clock
        self.job_id: int | None = None
        self.pending = False
        self.revoked = False
        self.child: int | None = None
        self.interactive = False

    def info(self, line: str) -> None:
        if not self.req.quiet:
            self.err.write(f"{PROG}: {line}\n")
            self.err.flush()

    def error(self, line: str) -> None:
        self.err.write(f"{PROG}: error: {line}\n")
        self.err.flush()

    def _poll(self, timeout: float | None) -> list[tuple[int, int]]:
        import select
        if self.ws.has_buffered():
            return [(self.ws.fileno(), select.POLLIN)]
        p = select.poll()
        if not self.ws.closed:
            p.register(self.ws.fileno(), select.POLLIN)
        if self.signal_fd is not None:
            p.register(self.signal_fd, select.POLLIN)
        try:
            return p.poll(None if timeout is None else int(timeout * 1000) + 1)
        except InterruptedError:
            return []

    def _signals(self) -> list[int]:
        assert self.signal_fd is not None
        try:
            return list(os.read(self.signal_fd, 64))
        except BlockingIOError:
            return []

    def wait_allocation(self) -> dict[str, Any] | int:
        """The "allocated" message, or salloc's exit code when there is none."""
        from corral.cli.ws import ConnectionClosed, WebSocketError
        pending_since: float | None = None
        while True:
            timeout = None
            if pending_since is not None and self.req.immediate is not None:
                timeout = max(0.0, pending_since + max(self.req.immediate, 1) - self.clock())
                if timeout == 0.0:
                    self.error("Unable to allocate resources: Requested nodes are busy")
                    return 1
            for fd, _ in self._poll(timeout):
                if fd == self.signal_fd:
                    sigs = [s for s in self._signals() if s not in (SIGCHLD, SIGCONT)]
                    if sigs:
                        if self.job_id is not None:
                            self.info(f"Job allocation {self.job_id} has been revoked.")
                        self.info("Job aborted due to signal")
                        return 1
                    continue
                try:
                    msgs = self.ws.read_messages()
                except (ConnectionClosed, WebSocketError):
                    self.error("Lost connection to the Corral controller")
                    return 1
                for i, msg in enumerate(msgs):
                    kind = msg.get("type") if isinstance(msg, dict) else None
                    if kind == "pending":
                        self.job_id = int(msg["job_id"])
                        self.pending = True
                        pending_since = self.clock()
                        self.info(f"Pending job allocation {self.job_id}")
                        self.info(f"job {self.job_id} queued and waiting for resources")
                    elif kind == "allocated":
                        self.job_id = int(msg["job_id"])
                        if self.pending:
                            self.info(f"job {self.job_id} has been allocated resources")
                        self.info(f"Granted job allocation {self.job_id}")
                        self.ws.push_back(msgs[i + 1:])  # e.g. an "ended" right behind
                        return dict(msg)
                    elif kind == "error":
                        for line in str(msg.get("message") or "unknown error").split("\n"):
                            self.error(allocation_refusal(line, self.req.immediate is not None))
                        return 1
                    elif kind == "ended":
                        self.info(f"Job allocation {self.job_id} has been revoked.")
                        return 1

    def run_command(self, alloc_env: dict[str, str]) -> int:
        """Start the command, wait for it while answering the controller; its exit code."""
        from corral.cli.ws import ConnectionClosed, WebSocketError
        env = dict(os.environ)
        env.update({str(k): str(val) for k, val in alloc_env.items()})
        env.update(self.req.shell_env)
        self.child = self._fork(self.req.command, env)
        status: int | None = None
        while status is None:
            pid, st = os.waitpid(self.child, os.WNOHANG)
            if pid == self.child:
                status = st
                break
            for fd, _ in self._poll(None):
                if fd == self.signal_fd:
                    for sig in self._signals():
                        self._on_signal(sig)
                    continue
                try:
                    msgs = self.ws.read_messages()
                except (ConnectionClosed, WebSocketError):
                    continue  # the allocation is gone with it; the command goes on
                for msg in msgs:
                    if isinstance(msg, dict) and msg.get("type") == "ended":
                        self._revoke(str(msg.get("state") or ""))
                    elif isinstance(msg, dict) and msg.get("type") == "user_msg":
                        # `scontrol notify` (Slurm: info("%s", msg)), control characters shown
                        text = "".join(c if c.isprintable() else repr(c)[1:-1]
                                       for c in str(msg.get("message") or ""))
                        sys.stderr.write(f"salloc: {text}\n")
                        sys.stderr.flush()
        if self.interactive:
            self._take_terminal_back()
        if os.WIFEXITED(status):
            return os.WEXITSTATUS(status)
        if os.WIFSIGNALED(status):
            # Slurm: these signals most likely came from the user, a normal exit.
            return 0 if os.WTERMSIG(status) in (SIGHUP, SIGINT, SIGQUIT, 9) else 1
        return 1

    def _on_signal(self, sig: int) -> None:
        if sig in (SIGCHLD, SIGCONT, SIGINT, SIGQUIT):
            return  # SIGCHLD wakes the loop; Ctrl-C belongs to the command
        if self.child is not None:
            try:
                os.kill(self.child, sig)
            except ProcessLookupError:
                pass

    def _revoke(self, state: str) -> None:
        if self.revoked:
            return
        self.revoked = True
        if state == "TIMEOUT":
            self.info(f"Job {self.job_id} has exceeded its time limit and its allocation "
                      "has been revoked.")
        else:
            self.info(f"Job allocation {self.job_id} has been revoked.")
        if self.child is not None:
            try:
                if self.interactive:
                    os.killpg(self.child, SIGHUP)
                else:
                    os.kill(self.child, SIGHUP)
            except ProcessLookupError:
                pass

    def _fork(self, command: list[str], env: dict[str, str]) -> int:
        self.interactive = _is_interactive()
        pid = os.fork()
        if pid == 0:  # the child
            try:
                import _signal
                # Python ignores SIGPIPE and SIGXFSZ: the command must not inherit that.
                for sig in (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD,
                            13, 25, 22, 21, 20):  # SIGPIPE, SIGXFSZ, SIGTTOU, SIGTTIN, SIGTSTP
                    _signal.signal(sig, _signal.SIG_DFL)
                _signal.set_wakeup_fd(-1)
                if self.interactive:
                    os.setpgid(0, 0)
                    _signal.signal(22, _signal.SIG_IGN)
                    os.tcsetpgrp(0, os.getpid())
                    _signal.signal(22, _signal.SIG_DFL)
                os.execvpe(command[0], command, env)
            except OSError:
                pass
            try:
                os.write(2, f'{PROG}: error: Unable to exec command "{command[0]}"\n'.encode())
            finally:
                os._exit(EXIT_ERROR)
        if self.interactive:
            try:  # both sides set it: no race with the child's first read
                os.setpgid(pid, pid)
                os.tcsetpgrp(0, pid)
            except OSError:
                pass
        return pid

    def _take_terminal_back(self) -> None:
        import _signal
        old = _signal.signal(22, _signal.SIG_IGN)  # SIGTTOU: we are in the background now
        try:
            os.tcsetpgrp(0, os.getpgrp())
        except OSError:
            pass
        finally:
            _signal.signal(22, old)

    def release(self, rc: int) -> None:
        if self.revoked or self.ws.closed:
            return
        self.info(f"Relinquishing job allocation {self.job_id}")
        from corral.cli.ws import ConnectionClosed
        try:
            self.ws.send_json({"type": "release", "exit_code": rc})
        except ConnectionClosed:
            pass


def _is_interactive() -> bool:
    """salloc owns the terminal's foreground (Slurm's is_interactive)."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def main(argv: list[str] | None = None) -> int:
    return client.run_cli("salloc", _run, argv)


def _run(args: list[str]) -> int:
    try:
        req = parse_salloc(args, dict(os.environ), os.getcwd(), time.time(),
                           submit_host=short_hostname(), umask=_current_umask())
    except CliExit as e:
        sys.stdout.write(e.stdout)
        sys.stderr.write(e.stderr)
        return e.code
    req.spec.update(submitted_from())  # scontrol's AllocNode:Sid=HOST:SID
    for line in req.messages:
        sys.stderr.write(line + "\n")
    return run_request(req)


def run_request(req: SallocRequest) -> int:
    from corral.cli.srun import SignalPipe
    from corral.cli.ws import ConnectionClosed, WebSocketError, connect

    try:
        # Nothing is sent before the connection is up: safe to try again.
        ws = client.call_with_retry(lambda: connect(client.cli_socket_path(), STEPS_RESOURCE))
    except client.NotRunning as e:
        failed = "Job submit/allocate failed: " if e.timed_out else ""
        sys.stderr.write(f"{PROG}: error: {failed}{e}\n")
        return 1
    except (OSError, WebSocketError) as e:
        sys.stderr.write(f"{PROG}: error: cannot reach the Corral controller: {e}\n")
        return 1
    pipe = SignalPipe((SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD))
    try:
        try:
            ws.send_json({"type": "start", "job_id": None, "alloc": req.spec,
                          "alloc_env": req.env, "step": None})
        except ConnectionClosed:
            sys.stderr.write(f"{PROG}: error: Lost connection to the Corral controller\n")
            return 1
        s = Salloc(ws, req, pipe.read_fd)
        got = s.wait_allocation()
        if isinstance(got, int):
            return got
        if req.no_shell:
            try:
                ws.send_json({"type": "detach"})
            except ConnectionClosed:
                pass
            return 0
        rc = s.run_command(dict(got.get("env") or {}))
        s.release(rc)
        return rc
    finally:
        pipe.close()
        ws.close()


USAGE_TEXT = """\
Usage: salloc [-N numnodes|[min nodes]-[max nodes]] [-n num-processors]
              [-c cpus-per-task] [-p partition] [-t minutes] [-J jobname]
              [-w hosts...] [-x hosts...] [--exclusive] [--mem=MB]
              [--mem-per-cpu=MB] [--gres=list] [--gpus=n] [--gpus-per-node=n]
              [--gpus-per-task=n] [-I[secs]] [-H] [--no-shell] [-v] [-Q]
              [-A account] [-q qos] [-b time] [-d dependency] [-D path]
              [-C list] [-F file] [--comment=text] [--nice[=value]]
              [--priority=value] [--signal=[R:]num[@time]] [--time-min=minutes]
              [--mail-type=type] [--mail-user=user] [-s] [-h] [--usage] [-V]
              [command [args...]]
"""

HELP_TEXT = """\
Usage: salloc [OPTIONS...] [command [args...]]

Parallel run options:
  -A, --account=name          charge job to specified account
  -b, --begin=time            defer job until HH:MM MM/DD/YY
      --comment=name          arbitrary comment
  -c, --cpus-per-task=ncpus   number of cpus required per task
  -d, --dependency=type:jobid[:time] defer job until condition on jobid is satisfied
  -D, --chdir=path            change working directory
  -H, --hold                  submit job in held state
  -I, --immediate[=secs]      exit if resources not available in "secs"
  -J, --job-name=jobname      name of job
      --mail-type=type        notify on state change: BEGIN, END, FAIL or ALL
                              (recorded; Corral does not send mail)
      --mail-user=user        who to send email notification for job state
                              changes
  -n, --ntasks=N              number of processors required
      --nice[=value]          decrease scheduling priority by value
      --ntasks-per-node=n     number of tasks to invoke on each node
  -N, --nodes=N               number of nodes on which to run (N = min[-max])
      --no-shell              immediately exit after allocating resources,
                              without running a command
  -O, --overcommit            overcommit resources
  -p, --partition=partition   partition requested
      --priority=value        set the priority of the job to value (operators)
  -q, --qos=qos               quality of service
  -Q, --quiet                 quiet mode (suppress informational messages)
  -s, --oversubscribe         oversubscribe resources with other jobs
      --signal=[R:]num[@time] send signal when time limit within time seconds
  -t, --time=minutes          time limit
      --time-min=minutes      minimum time limit (if distinct)
  -v, --verbose               verbose mode (multiple -v's increase verbosity)

Constraint options:
  -C, --constraint=list       specify a list of constraints
      --mincpus=n             minimum number of logical processors (threads)
                              per node
  -F, --nodefile=filename     request a specific list of hosts
      --mem=MB                minimum amount of real memory
      --reservation=name      allocate resources from named reservation
      --tmp=MB                minimum amount of temporary disk
  -w, --nodelist=hosts...     request a specific list of hosts
  -x, --exclude=hosts...      exclude a specific list of hosts

Consumable resources related options:
      --exclusive[=oversubscribe] allocate nodes in exclusive mode
      --mem-per-cpu=MB        maximum amount of real memory per allocated
                              cpu required by the job.

GPU scheduling options:
  -G, --gpus=n                count of GPUs required for the job
      --gpus-per-node=n       number of GPUs required per allocated node
      --gpus-per-task=n       number of GPUs required per spawned task
      --gres=list             required generic resources (gpu[:type][:count])

Help options:
  -h, --help                  show this help message
      --usage                 display brief usage message

Other options:
  -V, --version               output version information and exit

Accepted without effect under Corral (values checked as Slurm checks them):
--acctg-freq, --bell, --contiguous, --cpu-freq, --delay-boot, -m/--distribution,
--get-user-env, --gpu-bind, --gpu-freq, --gres-flags, --hint, -K/--kill-command,
--mcs-label, --mem-bind, --network, --no-bell, -k/--no-kill, --power,
--prefer, --profile, --reboot, --spread-job, --use-min-nodes, --wait-all-nodes,
--wckey, --x11.
Other Slurm options are refused with an error.
"""


if __name__ == "__main__":
    sys.exit(main())
