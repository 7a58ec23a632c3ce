"""srun: run a parallel job step, creating an allocation first when there is none.

One WebSocket to the controller carries everything (docs/STEPS.md): the `start` message
(a step in an existing job, or an allocation plus its step), then output, exits and the
end of the step back, and stdin, signals and window sizes forward.  The main loop is a
`select.poll` over the WebSocket, stdin and a self-pipe that signal handlers write to
(`signal.set_wakeup_fd`), so srun starts without asyncio or threads.

Messages follow Slurm 22.05's srun: "srun: job N queued and waiting for resources",
"srun: error: node-1: task 3: Exited with exit code 2", the two-Ctrl-C abort.
"""

from __future__ import annotations

import binascii
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
    NO_ARG,
    OPTIONAL_ARG,
    CliExit,
    GetoptError,
    GresError,
    Option,
    OptionValueError,
    allocation_spec,
    drop_inherited_gpu_options,
    env_flag_is_set,
    export_environment,
    fail,
    gpu_request,
    hetjob_refusal,
    node_list,
    node_task_counts,
    option_error,
    option_table,
    parse_alloc_value,
    parse_int,
    spec_problem,
    step_gpu_options,
)
from corral.lazyre import LazyPattern
from corral.model import messages as m
from corral.model.jobspec import short_hostname, submitted_from
from corral.model.pyxis import PYXIS_HELP, container_from_options

TYPE_CHECKING = False  # annotations only: `typing` would cost every srun ~3 ms
if TYPE_CHECKING:
    from typing import Any

    from corral.cli.ws import WebSocket

PROG = "srun"
MULTI_PROG_LIMIT = 1 << 20  # bytes of a --multi-prog file
EXIT_GATHER = 0.05  # seconds exit lines wait for other tasks of their node ending alike
VERSION_TEXT = "slurm-wlm 22.05.8\n"
TRY_HELP = f'Try "{PROG} --help" for more information\n'
STEPS_RESOURCE = "/v1/steps/ws"
# an allocation srun --jobid (or SLURM_JOB_ID) names that the controller does not confirm
_NO_ALLOCATION = LazyPattern(r"Unable to confirm allocation for job (\d+):|Slurm job (\d+) has expired")

# srun's own options (the rest are allocation options, shared with salloc).
_FLAGS = frozenset({"label", "pty", "overlap", "unbuffered", "disable-status",
                    "quit-on-interrupt", "hold"})

# SLURM_* input variables srun reads (Slurm 22.05's env_vars[]), lowest priority first:
# the command line overrides them.
SRUN_ENV_VARS: tuple[tuple[str, str], ...] = (
    ("SLURM_ACCOUNT", "account"),
    ("SLURM_CPUS_PER_TASK", "cpus-per-task"),
    ("SLURM_DEPENDENCY", "dependency"),
    ("SLURM_DISABLE_STATUS", "disable-status"),
    ("SLURM_EXPORT_ENV", "export"),
    ("SLURM_GPUS", "gpus"),
    ("SLURM_GPUS_PER_NODE", "gpus-per-node"),
    ("SLURM_GPUS_PER_TASK", "gpus-per-task"),
    ("SLURM_GPU_BIND", "gpu-bind"),
    ("SLURM_GRES", "gres"),
    ("SLURM_JOB_ID", "jobid"),
    ("SLURM_JOBID", "jobid"),
    ("SLURM_JOB_NAME", "job-name"),
    ("SLURM_JOB_NUM_NODES", "nodes"),
    ("SLURM_NNODES", "nodes"),
    ("SLURM_KILL_BAD_EXIT", "kill-on-bad-exit"),
    ("SLURM_LABELIO", "label"),
    ("SLURM_MEM_PER_CPU", "mem-per-cpu"),
    ("SLURM_MEM_PER_NODE", "mem"),
    ("SLURM_MPI_TYPE", "mpi"),
    ("SLURM_NPROCS", "ntasks"),
    ("SLURM_NTASKS", "ntasks"),
    ("SLURM_NTASKS_PER_NODE", "ntasks-per-node"),
    ("SLURM_OVERCOMMIT", "overcommit"),
    ("SLURM_OVERLAP", "overlap"),
    ("SLURM_PARTITION", "partition"),
    ("SLURM_QOS", "qos"),
    ("SLURM_RESERVATION", "reservation"),
    ("SLURM_STDERRMODE", "error"),
    ("SLURM_STDINMODE", "input"),
    ("SLURM_STDOUTMODE", "output"),
    ("SLURM_TASK_EPILOG", "task-epilog"),
    ("SLURM_TASK_PROLOG", "task-prolog"),
    ("SLURM_TIMELIMIT", "time"),
    ("SLURM_UNBUFFEREDIO", "unbuffered"),
    ("SLURM_WAIT", "wait-srun"),
)

# Signals srun handles itself; others it forwards to the tasks (Slurm's srun does).
SIGHUP, SIGINT, SIGQUIT, SIGKILL, SIGUSR1, SIGUSR2, SIGPIPE, SIGTERM, SIGCONT, SIGWINCH = (
    1, 2, 3, 9, 10, 12, 13, 15, 18, 28)
_HANDLED_SIGNALS = (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGCONT)


class SrunRequest:
    """What srun worked out from its command line and environment."""

    def __init__(self) -> None:
        self.argv: list[str] = []
        self.v: dict[str, Any] = {}       # option key -> value (allocation options too)
        self.src: dict[str, str] = {}     # option key -> "env" or "cli"
        self.verbose = 0
        self.quiet = 0
        self.ignored: list[str] = []      # options accepted without effect (for -v)
        self.messages: list[str] = []     # stderr lines to show before starting
        self.job_id: int | None = None    # run inside this job
        self.alloc: dict[str, Any] | None = None
        self.alloc_env: dict[str, str] | None = None
        self.step: dict[str, Any] = {}
        self.label = False
        self.unbuffered = False
        self.pty = False
        self.kill_on_bad_exit = False
        self.wait = 0                     # -W: end the step this long after a first exit
        self.immediate: int | None = None  # -I: seconds an allocation may stay pending
        self.alloc_info: tuple[str, str, str] | None = None  # nodes, nodelist, CPUs per node
        self.only_task: dict[int, int] = {}  # -o/-e N: stream (1, 2) -> the task shown

    def __repr__(self) -> str:
        return f"SrunRequest(argv={self.argv!r}, job_id={self.job_id})"


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------

def _set(req: SrunRequest, option: Option, arg: str | None, source: str, now: float,
         cwd: str) -> None:
    """One option from `source` ("env" or "cli"); raises CliExit with Slurm's text."""
    key = option.key
    name = option.name
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
        if key in ALLOC_UNSUPPORTED and key not in _STEP_FLAGS:
            fail(PROG, f"--{name} is not supported by Corral")
        if key in _FLAGS:
            value: Any = True
        elif key == "gpu-bind":
            value = _gpu_bind(arg or "")
        elif key in _STEP_FLAGS:
            value = True
        elif key == "propagate":
            value = _propagate(arg)
        elif key == "overcommit":
            value = True
        elif key == "slurmd-debug":
            value = _slurmd_debug(arg or "", req)
        elif key in ("task-prolog", "task-epilog"):
            # run by the agent on the node (slurmstepd's role): a path as given, relative
            # ones from the task's working directory
            value = arg or ""
        elif key in ALLOC_NO_EFFECT and key not in ("wait-srun",):
            req.ignored.append(name)
            return
        elif key == "jobid":
            value = parse_int("--jobid", arg or "", True)
        elif key == "kill-on-bad-exit":
            value = True if arg is None else parse_int("--kill-on-bad-exit", arg, False) != 0
        elif key == "wait-srun":
            value = parse_int("--wait", arg or "", False)
        elif key == "immediate":
            value = 1 if arg is None else parse_int("--immediate", arg, False)
        elif key == "mpi":
            value = _mpi(arg or "")
        elif key in ("output", "error", "input", "export"):
            value = arg or ""
        elif key in ("nodelist", "exclude"):
            value = arg or ""
        else:
            value = parse_alloc_value(key, arg, req.v, now, cwd)
            if key in CHECKED_NO_EFFECT:  # checked as Slurm checks it, then ignored
                req.ignored.append(name)
    except OptionValueError as e:
        raise option_error(PROG, e) from None
    req.v[key] = value
    req.src[key] = source


# Slurm's log levels (log_string2num); slurmstepd's stderr level is ERROR (2) plus
# --slurmd-debug, at most DEBUG2 (6): DEBUG3 is its I/O tracing.
_LOG_LEVELS = ("quiet", "fatal", "error", "info", "verbose", "debug", "debug2", "debug3",
               "debug4", "debug5")
_MAX_SLURMD_DEBUG = 6 - 2


# srun's own flags among the options an allocation (salloc) refuses
_STEP_FLAGS = ("multi-prog", "no-allocate", "debugger-test")


def _slurmd_debug(arg: str, req: SrunRequest) -> int:
    """--slurmd-debug=LEVEL (a name or a number), as an increment over ERROR."""
    if arg[:1].isdigit():
        digits = arg[:len(arg) - len(arg.lstrip("0123456789"))]
        level = int(digits)
    else:
        level = _LOG_LEVELS.index(arg.lower()) if arg.lower() in _LOG_LEVELS else 0xFFFE
    if level > _MAX_SLURMD_DEBUG:
        req.messages.append(f"{PROG}: Using srun's max debug increment of {_MAX_SLURMD_DEBUG}")
        level = _MAX_SLURMD_DEBUG
    return level


def _gpu_bind(arg: str) -> str:
    from corral.model.jobenv import GpuBindError, parse_gpu_bind

    try:
        parse_gpu_bind(arg)
    except GpuBindError as e:
        fail(PROG, f"Invalid --gpu-bind argument: {e}")
    return arg


def _mpi(arg: str) -> str:
    from corral.model.mpi import LIST_TEXT, MpiTypeError, parse_mpi_type

    if arg.strip().lower() == "list":
        raise CliExit(0, stdout=LIST_TEXT)
    try:
        return parse_mpi_type(arg)
    except MpiTypeError as e:
        fail(PROG, f"--mpi={arg}: {e}")


def _step_mpi_type(v: dict[str, Any]) -> str:
    """--mpi (or SLURM_MPI_TYPE), else slurm.conf's MpiDefault, checked the same way."""
    if "mpi" in v:
        return str(v["mpi"])
    from corral.model.mpi import MpiTypeError, parse_mpi_type

    default = configured_mpi_default()
    try:
        return parse_mpi_type(default)
    except MpiTypeError as e:
        fail(PROG, f"MpiDefault={default}: {e}")


def configured_mpi_default() -> str:
    """slurm.conf's MpiDefault (srun reads it as Slurm's srun does); none when unset."""
    from corral import paths

    try:
        with open(paths.config_path(), encoding="utf-8", errors="replace") as f:
            for line in f:
                key, eq, value = line.split("#", 1)[0].partition("=")
                if eq and key.strip().lower() == "mpidefault":
                    return value.strip().lower() or "none"
    except OSError:
        pass
    return "none"


def _apply_env(req: SrunRequest, env: dict[str, str], now: float, cwd: str) -> None:
    table = option_table(PROG)
    for var, key in SRUN_ENV_VARS:
        value = env.get(var)
        if value is None:
            continue
        option = table.by_key[key]
        if option.has_arg == NO_ARG:
            if env_flag_is_set(value):
                _set(req, option, None, "env", now, cwd)
            continue
        arg: str | None = value
        if option.has_arg == OPTIONAL_ARG and value == "":
            arg = None
        _set(req, option, arg, "env", now, cwd)


def parse_srun(argv: list[str], env: dict[str, str], cwd: str, now: float, *,
               submit_host: str = "localhost", umask: int = 0o022,
               is_tty: bool = False, window: tuple[int, int] | None = None) -> SrunRequest:
    """Work out srun's request from its arguments (without the program name).

    Raises CliExit for --help/--version and every error, with Slurm's text and status.
    """
    table = option_table(PROG)
    req = SrunRequest()
    try:
        found, index = table.parse(argv)
    except GetoptError as e:
        for option, arg in e.found:  # an earlier --help still wins
            if option.key in ("help", "usage", "version"):
                _set(req, option, arg, "cli", now, cwd)
        raise CliExit(EXIT_ERROR, f"{e.message}\n{TRY_HELP}") from None
    _apply_env(req, env, now, cwd)
    for option, arg in found:
        _set(req, option, arg, "cli", now, cwd)
    operands = argv[index:]
    if ":" in operands:  # srun splits its arguments at every ":" into het job components
        raise hetjob_refusal(PROG, "Unable to allocate resources")
    if not operands:
        fail(PROG, "No command given to execute.")
    req.argv = operands
    _finish(req, env, cwd, now, argv, submit_host, umask, is_tty, window)
    if req.verbose:
        req.messages[:0] = defined_options(found)
    return req


def defined_options(found: list[tuple[Option, str | None]]) -> list[str]:
    """srun -v's list of the options set on the command line (Slurm's
    slurm_print_set_options): one line per option, in Slurm's table order, last value
    wins; a flag shows "set", -v its count.  Values are as given, not Slurm's
    normalised forms."""
    order = {o.name: i for i, o in enumerate(option_table(PROG).options)}
    values: dict[str, str] = {}
    verbose = 0
    for option, arg in found:
        if option.key == "verbose":
            verbose += 1
            values[option.name] = str(verbose)
        else:
            values[option.name] = arg if arg is not None else "set"
    rule = f"{PROG}: {'-' * 20} {'-' * 20}"
    lines = [f"{PROG}: defined options", rule]
    for name in sorted(values, key=lambda n: order.get(n, len(order))):
        lines.append(f"{PROG}: {name:<20}: {values[name]}")
    return [*lines, rule, f"{PROG}: end of defined options"]


def _finish(req: SrunRequest, env: dict[str, str], cwd: str, now: float, argv: list[str],
            submit_host: str, umask: int, is_tty: bool,
            window: tuple[int, int] | None) -> None:
    v = req.v
    if req.quiet and req.verbose:
        fail(PROG, "don't specify both --verbose (-v) and --quiet (-Q)")
    req.label = bool(v.get("label"))
    for stream, key in ((1, "output"), (2, "error")):
        if str(v.get(key) or "").isdigit():
            req.only_task[stream] = int(v[key])
    req.unbuffered = bool(v.get("unbuffered"))
    req.kill_on_bad_exit = bool(v.get("kill-on-bad-exit"))
    req.wait = int(v.get("wait-srun", 0))
    req.immediate = v.get("immediate")
    req.pty = bool(v.get("pty"))
    if req.pty and not is_tty:
        if req.verbose:
            req.messages.append(f"{PROG}: error: Not using a pseudo-terminal, "
                                "disregarding --pty option")
        req.pty = False
    req.job_id = v.get("jobid")
    no_alloc = bool(v.get("no-allocate"))
    if no_alloc:  # srun -Z: no job at all, on the named nodes (operators only)
        if not v.get("nodelist"):
            fail(PROG, "must specify a node list with -Z, --no-allocate.")
        if v.get("exclude"):
            fail(PROG, "can not specify --exclude list with -Z, --no-allocate.")
        req.job_id = None
    if req.job_id is not None and env.get("SLURM_JOB_NODELIST"):
        req.alloc_info = (env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or "1",
                          env["SLURM_JOB_NODELIST"], env.get("SLURM_JOB_CPUS_PER_NODE", "1"))

    # Node names and the node/task arithmetic, as sbatch does it.
    try:
        req_nodes = node_list(v["nodelist"], cwd) if "nodelist" in v else []
        exc_nodes = node_list(v["exclude"], cwd) if "exclude" in v else []
    except OSError:
        fail(PROG, "Failure getting NodeNames from hostfile")
    except ValueError:
        fail(PROG, "Invalid node name specified")
    if req_nodes and req.src.get("nodes") == "env":
        del v["nodes"]  # -w on the command line beats the allocation's node count
    if req.src.get("ntasks") == "env" and req.src.get("nodes") == "cli":
        del v["ntasks"]  # likewise -N beats the allocation's task count
    multi_prog = _multi_prog(req, cwd) if v.get("multi-prog") else None
    min_nodes, max_nodes, ntasks, ntasks_set = node_task_counts(v, req_nodes, PROG,
                                                                req.messages)
    if min_nodes == 0 and max_nodes:  # "-N-3" is Slurm's range 0-3: one node at least
        min_nodes = 1
    drop_inherited_gpu_options(v, req.src)
    step_gpu = step_gpu_options(v, req.src, env.get("SLURM_STEP_GRES"))
    try:
        gpus = gpu_request(v)
        step_gpus = gpu_request(step_gpu)
    except GresError:
        fail(PROG, "Invalid generic resource (gres) specification")

    step_env = export_environment(str(v.get("export", "ALL")), env)
    if "cpus-per-task" in v:  # the tasks see -c (Slurm's srun sets it when -c is given)
        step_env["SLURM_CPUS_PER_TASK"] = str(v["cpus-per-task"])
    step_env.update(rlimit_environment(v.get("propagate")))
    mpi_type = _step_mpi_type(v)
    if mpi_type != "none" or "mpi" in v:
        step_env["SLURM_MPI_TYPE"] = mpi_type
    # the tasks' umask: the submitting shell's, unless the allocation set one (Slurm's srun
    # sets SLURM_UMASK only where it is not set yet)
    step_env["SLURM_UMASK"] = env.get("SLURM_UMASK") or \
        f"0{umask >> 6 & 7}{umask >> 3 & 7}{umask & 7}"
    stdin_mode, input_path = _stdin_mode(str(v.get("input", "all")), req.pty)
    # the command line's --mem or --mem-per-cpu beats either from the environment
    mem_keys = [k for k in ("mem", "mem-per-cpu") if k in v]
    mem_key = next((k for k in mem_keys if req.src.get(k) == "cli"), None) or \
        (mem_keys[0] if mem_keys else None)
    time_limit = v.get("time")
    per_node_gpus: int | None = None
    nodes_given = "nodes" in v or bool(req_nodes)
    # a new allocation without -N spreads a --gpus total over the nodes it needs: the
    # step then holds the job's GPUs of each node and, without -n, runs one task on each
    # (srun's default task count is the allocation's node count)
    spread_gpus = req.job_id is None and not no_alloc and not nodes_given and "gpus" in step_gpu
    total_gpus: int | None = None
    if "gres" in step_gpu or "gpus-per-node" in step_gpu:
        per_node_gpus = step_gpus[1]
    elif "gpus" in step_gpu:
        total_gpus = step_gpus[0]
    try:  # Pyxis' options (and their PYXIS_* variables): the tasks run in the container
        container = container_from_options(v, env)
    except ValueError as e:
        fail(PROG, f"pyxis: {e}")
    req.step = {
        "container": container,
        "name": v["job-name"] if req.src.get("job-name") == "cli" else
        os.path.basename(req.argv[0]),
        "argv": list(req.argv),
        "cwd": v.get("chdir", cwd),
        "env": step_env,
        "ntasks": ntasks if ntasks_set else None,
        "nodes": min_nodes if ("nodes" in v or req_nodes) else None,
        "ntasks_per_node": v.get("ntasks-per-node") or (
            1 if spread_gpus and not ntasks_set else None),
        "cpus_per_task": v.get("cpus-per-task", 1),
        "gpus_per_task": step_gpus[2] if "gpus-per-task" in step_gpu else None,
        "gpus_per_node": per_node_gpus,
        **({"gpus": total_gpus} if total_gpus is not None else {}),
        "gpu_bind": v.get("gpu-bind"),
        "multi_prog": multi_prog,
        "nodelist": req_nodes,
        "exclude": exc_nodes,
        "overlap": bool(v.get("overlap")),
        "overcommit": bool(v.get("overcommit")),
        "no_allocate": no_alloc,
        # the step's memory (--mem, --mem-per-cpu, or the allocation's SLURM_MEM_PER_*)
        "mem_per_node": v["mem"] if mem_key == "mem" else None,
        "mem_per_cpu": v["mem-per-cpu"] if mem_key == "mem-per-cpu" else None,
        "task_prolog": v.get("task-prolog") or None,
        "task_epilog": v.get("task-epilog") or None,
        "slurmd_debug": v.get("slurmd-debug"),
        "pty": req.pty,
        "window": {"rows": window[0], "cols": window[1]} if req.pty and window else None,
        "stdin": stdin_mode,
        "output": _output_path(v.get("output")),
        "error": _output_path(v.get("error")),
        "input": input_path,
        "kill_on_bad_exit": req.kill_on_bad_exit,
        "time_limit": time_limit if isinstance(time_limit, int) and time_limit > 0 else None,
        # --open-mode, else what the batch job was given (sbatch exports SLURM_OPEN_MODE)
        "open_mode": "append" if str(v.get("open-mode") or env.get("SLURM_OPEN_MODE", "t"))
        .startswith("a") else "truncate",
        "submit_line": " ".join([PROG, *argv])[:1 << 16],
    }
    if req.job_id is None and not no_alloc:
        if "job-name" in v:
            name = str(v["job-name"])
        else:
            name = os.path.basename(req.argv[0])
        req.alloc = allocation_spec(
            v, name=name, cwd=cwd, submit_line=" ".join([PROG, *argv]), req_nodes=req_nodes,
            exc_nodes=exc_nodes, min_nodes=min_nodes, max_nodes=max_nodes, ntasks=ntasks,
            gpus=gpus, nodes_given=nodes_given)
        problem = spec_problem(req.alloc)
        if problem is not None:
            first, error = problem
            raise CliExit(EXIT_ERROR, (f"{PROG}: error: {first}\n" if first else "")
                          + f"{PROG}: error: Unable to allocate resources: {error}\n")
        if req.immediate is not None and v.get("hold"):
            # slurmctld refuses at once: a held job never has the top priority
            fail(PROG, f"Unable to allocate resources: {IMMEDIATE_HELD}")
        alloc_env = export_environment(str(v.get("export", "ALL")), env)
        alloc_env["SLURM_SUBMIT_DIR"] = cwd
        alloc_env["SLURM_SUBMIT_HOST"] = submit_host
        alloc_env["SLURM_UMASK"] = f"0{umask >> 6 & 7}{umask >> 3 & 7}{umask & 7}"
        req.alloc_env = alloc_env
    if req.verbose:
        for name in dict.fromkeys(req.ignored):
            req.messages.append(f"{PROG}: --{name} has no effect under Corral")


RLIMITS = ("CPU", "FSIZE", "DATA", "STACK", "CORE", "RSS", "NPROC", "NOFILE", "MEMLOCK", "AS")


def _rlimit_names(text: str) -> set[str] | None:
    """"ALL", "NONE" or a list of rlimit names (Slurm's parse_rlimits); None if bad."""
    names = {n.strip().upper().removeprefix("RLIMIT_") for n in text.split(",")}
    if names == {"ALL"}:
        return set(RLIMITS)
    if names == {"NONE"}:
        return set()
    return names if names <= set(RLIMITS) else None


def _propagate(arg: str | None) -> str:
    if arg is None or arg == "":
        return "ALL"
    if _rlimit_names(arg) is None:
        fail(PROG, f"--propagate={arg} is not valid.")
    return arg


def _configured_propagation() -> set[str]:
    """PropagateResourceLimits / PropagateResourceLimitsExcept of slurm.conf (default ALL)."""
    from corral import paths

    chosen, excluded = set(RLIMITS), set()
    try:
        with open(paths.config_path(), encoding="utf-8", errors="replace") as f:
            for line in f:
                key, eq, value = line.split("#", 1)[0].partition("=")
                key = key.strip().lower()
                names = _rlimit_names(value.strip()) if eq else None
                if names is None:
                    continue
                if key == "propagateresourcelimits":
                    chosen = names
                elif key == "propagateresourcelimitsexcept":
                    excluded = names
    except OSError:
        pass
    return chosen - excluded


def rlimit_environment(propagate: str | None) -> dict[str, str]:
    """SLURM_RLIMIT_<NAME> for the shell's soft limits to propagate to the tasks (as Slurm's
    srun sends them; "U" first marks a limit the user asked for with --propagate)."""
    import resource

    explicit = propagate is not None
    names = _rlimit_names(propagate) if propagate is not None else _configured_propagation()
    out: dict[str, str] = {}
    for name in RLIMITS:
        if name not in (names or ()):
            continue
        res = getattr(resource, f"RLIMIT_{name}", None)
        if res is None:
            continue
        soft = resource.getrlimit(res)[0]
        value = (1 << 64) - 1 if soft == resource.RLIM_INFINITY else soft
        out[f"SLURM_RLIMIT_{name}"] = f"{'U' if explicit else ''}{value}"
    return out


def _multi_prog(req: SrunRequest, cwd: str) -> str:
    """--multi-prog: the configuration file's text, checked as srun checks it; with no task
    count given, its highest rank sets the count (Slurm's verify_multi_name)."""
    from corral.model.jobenv import MultiProgError, verify_multi_prog

    fname = req.argv[0]
    try:
        with open(os.path.join(cwd, fname), "rb") as f:
            data = f.read(MULTI_PROG_LIMIT + 1)
    except OSError:
        fail(PROG, f"Unable to open configuration file {fname}")
    if len(data) > MULTI_PROG_LIMIT:
        fail(PROG, f"Line 1 of configuration file {fname} too long")
    text = data.decode(errors="surrogateescape")
    ntasks = req.v.get("ntasks")
    try:
        count = verify_multi_prog(text, fname, ntasks if isinstance(ntasks, int) else None)
    except MultiProgError as e:
        raise CliExit(EXIT_ERROR, "".join(f"{PROG}: error: {line}\n" for line in e.lines)) \
            from None
    if ntasks is None:
        req.v["ntasks"] = count
        req.src["ntasks"] = "cli"
    return text


def _stdin_mode(mode: str, pty: bool) -> tuple[str, str | None]:
    """-i/--input: (stdin mode of the step, input file pattern or None)."""
    if pty:
        return "0", None
    low = mode.lower()
    if low in ("all", ""):
        return "all", None
    if low == "none":
        return "none", None
    if mode.isdigit():  # that task reads srun's input, the others /dev/null (srun(1))
        return str(int(mode)), None
    return "none", mode


def _output_path(mode: Any) -> str | None:
    """-o/-e: None streams to srun; "none" discards; a pattern goes to the agent."""
    if mode is None:
        return None
    text = str(mode)
    if text.lower() == "all" or text == "":
        return None
    if text.lower() == "none":
        return "/dev/null"
    if text.isdigit():  # one task's stream to srun, the others' dropped (Session.on_message)
        return None
    return text


def start_message(req: SrunRequest) -> dict[str, Any]:
    """The first message on the WebSocket (checked as the controller will check it)."""
    try:
        step = m.StepSpec.from_dict(req.step, "step")
    except m.MessageError as e:
        fail(PROG, f"invalid step request: {e}")
    return m.StepStart(job_id=req.job_id, alloc=req.alloc, step=step,
                   alloc_env=req.alloc_env).to_dict()


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

_PARTIAL_LIMIT = 1 << 16  # flush a line this long even without its newline


def write_all(fd: int, data: bytes) -> None:
    """os.write until everything is written (stdout may be a pipe that takes less)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except BlockingIOError:
            _wait_writable(fd)
            continue
        view = view[n:]


def _wait_writable(fd: int) -> None:
    import select
    p = select.poll()
    p.register(fd, select.POLLOUT)
    p.poll(1000)


class OutputRouter:
    """Task output to srun's stdout/stderr: whole lines per task (Slurm's buffered I/O),
    with "T: " labels under -l; raw bytes under --pty or -u without -l."""

    def __init__(self, label: bool, raw: bool, ntasks: int = 1,
                 fds: tuple[int, int] = (1, 2)):
        self.label = label
        self.raw = raw and not label
        self.fds = fds
        self.width = len(str(max(ntasks - 1, 0)))
        self.partial: dict[tuple[int, int], bytearray] = {}
        self.broken = False  # stdout/stderr went away (a closed pipe)

    def set_ntasks(self, ntasks: int) -> None:
        self.width = len(str(max(ntasks - 1, 0)))

    def _emit(self, fd: int, data: bytes) -> None:
        if self.broken or not data:
            return
        try:
            write_all(self.fds[fd - 1] if fd in (1, 2) else fd, data)
        except BrokenPipeError:
            self.broken = True

    def _prefix(self, task: int) -> bytes:
        return f"{task:>{self.width}}: ".encode()

    def output(self, task: int, stream: int, data: bytes) -> None:
        """`stream` is 1 (stdout) or 2 (stderr)."""
        if self.raw:
            self._emit(stream, data)
            return
        key = (task, stream)
        buf = self.partial.get(key)
        if buf:
            buf += data
            data = bytes(buf)
            buf.clear()
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) >= _PARTIAL_LIMIT:
                self._write_lines(task, stream, data, complete=False)
            else:
                self.partial.setdefault(key, bytearray()).extend(data)
            return
        self._write_lines(task, stream, data[:end + 1], complete=True)
        rest = data[end + 1:]
        if rest:
            self.partial.setdefault(key, bytearray()).extend(rest)

    def _write_lines(self, task: int, stream: int, data: bytes, complete: bool) -> None:
        if not self.label:
            self._emit(stream, data)
            return
        prefix = self._prefix(task)
        lines = data.split(b"\n")
        if complete:
            lines.pop()  # the empty piece after the last newline
        # Slurm labels a partial line too and ends it with a newline.
        self._emit(stream, b"".join(prefix + line + b"\n" for line in lines))

    def flush_task(self, task: int) -> None:
        for stream in (1, 2):
            buf = self.partial.pop((task, stream), None)
            if buf:
                self._write_lines(task, stream, bytes(buf), complete=False)

    def flush_all(self) -> None:
        for task, _ in sorted(self.partial):
            self.flush_task(task)


# --------------------------------------------------------------------------
# Task states and Slurm's messages about them
# --------------------------------------------------------------------------

def ranges(ids: list[int]) -> str:
    """Slurm's bit_fmt(): 0-3,5,7-8."""
    out: list[str] = []
    ids = sorted(set(ids))
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def cpu_counts(per_node: str) -> str:
    """SLURM_JOB_CPUS_PER_NODE ("2(x2),1") as srun -v prints it ("2(x2),1(x1)")."""
    out = []
    for part in per_node.split(","):
        part = part.strip()
        if part:
            out.append(part if part.endswith(")") else f"{part}(x1)")
    return ",".join(out)


def job_line(job_id: int, nnodes: str, nodelist: str, per_node: str) -> str:
    """srun -v's allocation line (srun_job.c, _print_job_information), which tools parse."""
    return (f"{PROG}: jobid {job_id}: nodes({nnodes}):`{nodelist}', "
            f"cpu counts: {cpu_counts(per_node)}")


def signal_text(sig: int) -> str:
    """strsignal(3): "Killed", "Terminated", "Segmentation fault"…"""
    import signal  # only when a task died of a signal
    try:
        text = signal.strsignal(sig)
    except ValueError:
        text = None
    return text or f"Unknown signal {sig}"


class StepState:
    """Where each task of the step is, for exit lines and the Ctrl-C status line."""

    def __init__(self, job_id: int, step_id: int, nodes: list[str],
                 tasks_per_node: list[int]):
        self.job_id = job_id
        self.step_id = step_id
        self.nodes = nodes
        self.tasks_per_node = tasks_per_node
        self.ntasks = sum(tasks_per_node)
        self.exits: dict[int, tuple[int, int]] = {}

    @property
    def step_name(self) -> str:
        return f"StepId={self.job_id}.{self.step_id}"

    def node_of(self, task: int) -> str:
        n = task
        for node, count in zip(self.nodes, self.tasks_per_node, strict=False):
            if n < count:
                return node
            n -= count
        return self.nodes[-1] if self.nodes else "Unknown"

    def status_lines(self) -> list[str]:
        """Slurm's task_state_print(): running, exited abnormally, exited, unknown."""
        running = [t for t in range(self.ntasks) if t not in self.exits]
        abnormal = [t for t, (c, s) in self.exits.items() if c or s]
        normal = [t for t, (c, s) in self.exits.items() if not c and not s]
        lines = []
        for ids, what in ((running, "running"), (abnormal, "exited abnormally"),
                          (normal, "exited")):
            if ids:
                word = "task" if len(ids) == 1 else "tasks"
                lines.append(f"{PROG}: {self.step_name} {word} {ranges(ids)}: {what}")
        return lines


def exit_line(node: str, task: int | list[int], exit_code: int, sig: int) -> str | None:
    """srun's error line for a task (or tasks of one node, ended alike) that failed, or
    None when it succeeded."""
    if isinstance(task, list):
        task_str = f"task {task[0]}" if len(task) == 1 else f"tasks {ranges(task)}"
    else:
        task_str = f"task {task}"
    if sig:
        core = ""
        if sig & 0x80:  # an agent may report the core-dump bit
            sig &= 0x7F
            core = " (core dumped)"
        return f"{PROG}: error: {node}: {task_str}: {signal_text(sig)}{core}"
    if exit_code:
        return f"{PROG}: error: {node}: {task_str}: Exited with exit code {exit_code}"
    return None


def step_exit_code(exits: dict[int, tuple[int, int]]) -> int:
    """Slurm's rule: the highest signal (as 128+signal) wins over exit codes; otherwise
    the highest exit code."""
    sigs = [s & 0x7F for _, s in exits.values() if s]
    if sigs:
        return 128 + max(sigs)
    return max((c for c, _ in exits.values()), default=0)


# --------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------

_IMMEDIATE_REASONS = {
    "Priority": "Immediate execution impossible, insufficient priority",
    "PartitionNodeLimit": "Requested partition configuration not available now",
    "PartitionTimeLimit": "Requested partition configuration not available now",
}


class Session:
    """srun's main loop: one WebSocket, stdin and a signal pipe under select.poll."""

    def __init__(self, ws: WebSocket, req: SrunRequest, *, stdin_fd: int = 0,
                 out_fds: tuple[int, int] = (1, 2), err: Any = None,
                 clock: Any = time.monotonic):
        self.ws = ws
        self.req = req
        self.stdin_fd = stdin_fd
        self.err = err if err is not None else sys.stderr
        self.clock = clock
        self.router = OutputRouter(req.label, raw=req.pty or req.unbuffered, fds=out_fds)
        self.job_id: int | None = req.job_id
        self.own_alloc = req.job_id is None
        self.allocated = not self.own_alloc
        self.pending_since: float | None = None
        self.step: StepState | None = None
        self.waited = False         # the step had to wait ("waiting")
        self.rc: int | None = None  # set when srun is done
        self.cancelled = False      # we aborted the step (two Ctrl-C, SIGTERM…)
        self.last_intr = -10.0
        self.kill_sent = 0
        self.first_exit: float | None = None
        self.stdin_open = False
        self.bad_exit_handled = False
        # exit lines gathered for EXIT_GATHER s: tasks of one node that end alike share a
        # line ("node-1: tasks 0,2-9: Killed"), as slurmstepd's exit messages group them
        self.pending_exits: dict[tuple[str, int, int, bool], list[int]] = {}
        self.exits_due: float | None = None
        self.wait_fired = False
        self.broken_pipe_handled = False
        self.pending_reason: str | None = None

    # ---- small helpers -----------------------------------------------------
    def info(self, line: str) -> None:
        if not self.req.quiet:
            self.err.write(line + "\n")
            self.err.flush()

    def error(self, line: str) -> None:
        self.err.write(f"{PROG}: error: {line}\n")
        self.err.flush()

    def send(self, msg: m.Message) -> None:
        from corral.cli.ws import ConnectionClosed
        try:
            self.ws.send_json(msg.to_dict())
        except ConnectionClosed:
            pass

    # ---- controller messages -------------------------------------------------
    def on_message(self, raw: Any) -> None:
        try:
            msg = m.decode(raw, m.TO_CLIENT)
        except m.MessageError as e:
            self.router.flush_all()
            self.error(f"malformed message from the controller: {e}")
            self.rc = 1
            return
        if isinstance(msg, m.Output):
            stream = 2 if msg.stream == "stderr" else 1
            if self.req.only_task.get(stream, msg.task) != msg.task:
                return  # srun -o/-e N: only task N's
            self.router.output(msg.task, stream, binascii.a2b_base64(msg.data))
            if self.router.broken:
                self.on_broken_pipe()
        elif isinstance(msg, m.TaskEnded):
            self.on_exit(msg.task, msg.exit_code, msg.signal)
        elif isinstance(msg, m.StepEnd):
            self.router.flush_all()
            self.flush_exits()
            self.rc = msg.exit_code
        elif isinstance(msg, m.StepStarted):
            self.on_step(msg)
        elif isinstance(msg, m.Pending):
            self.job_id = msg.job_id
            self.pending_reason = msg.reason
            self.pending_since = self.clock()
            self.info(f"{PROG}: job {self.job_id} queued and waiting for resources")
        elif isinstance(msg, m.Allocated):
            self.job_id = msg.job_id
            if self.pending_since is not None:
                self.info(f"{PROG}: job {self.job_id} has been allocated resources")
            self.pending_since = None
            self.allocated = True
            if self.req.verbose:
                self.info(job_line(msg.job_id, msg.env.get("SLURM_JOB_NUM_NODES", "1"),
                                   msg.nodes, msg.env.get("SLURM_JOB_CPUS_PER_NODE", "1")))
        elif isinstance(msg, m.Waiting):
            self.waited = True
            text = msg.message or "Requested nodes are busy"
            job = f"Job {self.job_id} " if self.job_id is not None else ""
            if text.startswith("Job step creation"):  # Slurm: "Job 12 step creation …"
                self.info(f"{PROG}: {job}{text[4:]}")
            else:
                self.info(f"{PROG}: {text}")
        elif isinstance(msg, m.Error):
            self.router.flush_all()
            for line in (msg.message or "unknown error").split("\n"):
                self.error(line)
            expired = _NO_ALLOCATION.match(msg.message or "")
            if expired:  # srun's existing_allocation() says what to check
                self.info(f"{PROG}: Check SLURM_JOB_ID environment variable. Expired or "
                          f"invalid job {expired.group(1) or expired.group(2)}")
            self.rc = 1
        elif isinstance(msg, m.UserMessage):
            self.info(f"{PROG}: {msg.message}")  # Slurm: info("%s", um->msg)
        elif isinstance(msg, m.AllocationEnded):
            if self.step is None:
                self.error(f"Job allocation {self.job_id} has been revoked")
                self.rc = 1
            else:
                self.info(f"{PROG}: Force Terminated JobId={self.job_id}")
            self.own_alloc = False  # the job is over already

    def on_step(self, msg: m.StepStarted) -> None:
        self.job_id = msg.job_id
        self.step = StepState(self.job_id, msg.step_id, list(msg.nodes),
                              list(msg.tasks_per_node))
        self.step.ntasks = msg.ntasks
        self.router.set_ntasks(msg.ntasks)
        if self.waited:
            self.info(f"{PROG}: Step created for {self.step.step_name}")
        if self.req.verbose:  # step_launch.c's and launch/slurm's lines
            first = 0
            for node, count in zip(msg.nodes, msg.tasks_per_node, strict=False):
                ids = ranges(list(range(first, first + count)))
                shown = f"[{ids}]" if count > 1 else ids
                self.info(f"{PROG}: launching {self.step.step_name} on host {node}, "
                          f"{count} tasks: {shown}")
                first += count
            for node, count in zip(msg.nodes, msg.tasks_per_node, strict=False):
                self.info(f"{PROG}: launch/slurm: _task_start: Node {node}, {count} tasks "
                          f"started")
        if self.req.v.get("debugger-test"):
            self.dump_proctable()
        if self.req.step.get("stdin") != "none":
            self.stdin_open = True

    def dump_proctable(self) -> None:
        """--debugger-test (Slurm's hidden MPIR check): the process table a parallel debugger
        would read, one line per task once the step has started.  The agents do not tell
        srun their tasks' process ids (pid:0), and the tasks run on: Slurm holds them
        stopped for a debugger."""
        from corral.model.jobenv import multi_prog_argv

        step = self.step
        assert step is not None
        text = self.req.step.get("multi_prog")
        argv = list(self.req.step.get("argv") or [])
        for task in range(step.ntasks):
            if text is not None:
                exe = (multi_prog_argv(text, task, []) or ["(null)"])[0]
            else:
                exe = argv[0] if argv else "(null)"
            self.info(f"{PROG}: task:{task}, host:{step.node_of(task)}, pid:0, "
                      f"executable:{exe}")

    def on_exit(self, task: int, exit_code: int, sig: int) -> None:
        self.router.flush_task(task)
        step = self.step
        if step is None:
            return
        step.exits[task] = (exit_code, sig)
        if self.first_exit is None:
            self.first_exit = self.clock()
        if self.req.verbose:
            status = sig if sig else exit_code << 8
            self.info(f"{PROG}: launch/slurm: _task_finish: Received task exit notification "
                      f"for 1 task of {step.step_name} (status=0x{status:04x}).")
            if not exit_code and not sig:
                self.info(f"{PROG}: launch/slurm: _task_finish: {step.node_of(task)}: task "
                          f"{task}: Completed")
        if exit_code or sig:
            # after our own abort, tasks killed by it are not errors (Slurm: verbose only)
            verbose_only = bool(sig) and self.cancelled
            if self.req.verbose or not verbose_only:
                key = (step.node_of(task), exit_code, sig, verbose_only)
                self.pending_exits.setdefault(key, []).append(task)
                if self.exits_due is None:
                    self.exits_due = self.clock() + EXIT_GATHER
        if (exit_code or sig) and self.req.kill_on_bad_exit and not self.bad_exit_handled:
            self.bad_exit_handled = True
            self.send(m.Cancel())

    def flush_exits(self) -> None:
        for (node, exit_code, sig, verbose_only), tasks in self.pending_exits.items():
            line = exit_line(node, tasks, exit_code, sig)
            if line is None:
                continue
            if verbose_only:
                self.info(line.replace(f"{PROG}: error: ", f"{PROG}: ", 1))
            else:
                self.err.write(line + "\n")
                self.err.flush()
        self.pending_exits.clear()
        self.exits_due = None

    def on_broken_pipe(self) -> None:
        # Slurm's _handle_pipe: nobody reads the output any more, end the tasks.
        if not self.broken_pipe_handled:
            self.broken_pipe_handled = True
            self.send(m.Cancel())

    # ---- signals -------------------------------------------------------------
    def on_signal(self, sig: int) -> None:
        if sig == SIGWINCH:
            self.send_window()
            return
        if sig == SIGCONT:
            return
        if self.step is None:
            if sig in (SIGINT, SIGTERM, SIGHUP, SIGQUIT):
                self.abort_before_step()
            return
        if sig == SIGINT:
            self.on_interrupt()
        elif sig in (SIGTERM, SIGHUP, SIGQUIT):
            if sig == SIGQUIT:
                self.info(f"{PROG}: Quit")
            self.force_termination()
        else:
            self.send(m.SignalStep(signal=sig))

    def abort_before_step(self) -> None:
        if not self.allocated and self.job_id is not None:
            self.info(f"{PROG}: Job allocation {self.job_id} has been revoked")
        elif self.allocated and self.job_id is not None:
            self.info(f"{PROG}: Cancelled pending job step with signal {SIGINT}")
            self.error(f"Unable to create step for job {self.job_id}: "
                       "Job/step already completing or completed")
        self.rc = 1
        # Closing the socket without release cancels an allocation we created.
        self.own_alloc = False

    def on_interrupt(self) -> None:
        """Slurm's _handle_intr(): status on the first Ctrl-C, abort on a second within 1 s."""
        step = self.step
        assert step is not None
        now = self.clock()
        if self.req.v.get("quit-on-interrupt") or now - self.last_intr < 1.0:
            self.info(f"{PROG}: sending Ctrl-C to {step.step_name}")
            self.send(m.SignalStep(signal=SIGINT))
            self.force_termination(kill_now=True)
            return
        self.last_intr = now
        if self.req.v.get("disable-status"):
            self.info(f"{PROG}: sending Ctrl-C to {step.step_name}")
            self.send(m.SignalStep(signal=SIGINT))
        elif not self.cancelled:
            self.info(f"{PROG}: interrupt (one more within 1 sec to abort)")
            for line in step.status_lines():
                self.info(line)

    def force_termination(self, kill_now: bool = False) -> None:
        """Slurm's job_force_termination(): end the step; say so once.  From Ctrl-C
        (`kill_now`), SIGKILL to the tasks at once as Slurm's does, so a task that ignores
        SIGINT and SIGTERM ends too.  From SIGTERM/SIGHUP/SIGQUIT, the step's SIGTERM,
        KillWait, SIGKILL: those usually reach the tasks too (a requeue, the job's end),
        and a task that handles SIGTERM keeps its grace (submitit's checkpointing)."""
        if self.kill_sent == 0:
            self.info(f"{PROG}: forcing job termination")
            if kill_now:
                self.send(m.SignalStep(signal=SIGKILL))
        else:
            self.info(f"{PROG}: job abort in progress")
        self.kill_sent += 1
        self.cancelled = True
        self.send(m.Cancel())

    def send_window(self) -> None:
        size = terminal_size(self.stdin_fd)
        if size is not None and self.step is not None:
            self.send(m.Resize(rows=size[0], cols=size[1]))

    # ---- stdin ---------------------------------------------------------------
    def on_stdin(self) -> None:
        try:
            data = os.read(self.stdin_fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            self.send(m.Stdin(data=binascii.b2a_base64(data, newline=False).decode("ascii")))
        else:
            self.stdin_open = False
            self.send(m.StdinEof())

    # ---- timers --------------------------------------------------------------
    def next_timeout(self) -> float | None:
        deadlines = []
        if self.pending_since is not None and self.req.immediate is not None:
            deadlines.append(self.pending_since + max(self.req.immediate, 1))
        if self.first_exit is not None and self.req.wait > 0 and self.rc is None \
                and not self.cancelled and not self.wait_fired:
            deadlines.append(self.first_exit + self.req.wait)
        if self.exits_due is not None:
            deadlines.append(self.exits_due)
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - self.clock())

    def on_timer(self) -> None:
        now = self.clock()
        if (self.pending_since is not None and self.req.immediate is not None
                and now >= self.pending_since + max(self.req.immediate, 1)):
            self.error("Unable to allocate resources: " + _IMMEDIATE_REASONS.get(
                str(self.pending_reason), "Requested nodes are busy"))
            self.own_alloc = False  # closing the socket cancels the pending job
            self.rc = 1
            return
        if self.exits_due is not None and now >= self.exits_due:
            self.flush_exits()
        if (self.first_exit is not None and self.req.wait > 0 and not self.cancelled
                and not self.wait_fired and self.step is not None
                and now >= self.first_exit + self.req.wait):
            # Slurm's launch_g_step_terminate(): SIGKILL to the step, its tasks' ends
            # reported as errors (not job_force_termination's abort)
            self.wait_fired = True
            self.flush_exits()
            self.info(f"{PROG}: First task exited {self.req.wait}s ago")
            for line in self.step.status_lines():
                self.info(line)
            self.send(m.SignalStep(signal=SIGKILL))
            self.send(m.Cancel())

    # ---- the loop ------------------------------------------------------------
    def run(self, signal_fd: int | None = None) -> int:
        """Poll until the step ends; returns srun's exit code."""
        import select

        from corral.cli.ws import ConnectionClosed, WebSocketError

        poller = select.poll()
        ws_fd = self.ws.fileno()
        poller.register(ws_fd, select.POLLIN)
        if signal_fd is not None:
            poller.register(signal_fd, select.POLLIN)
        stdin_registered = False
        while self.rc is None:
            if self.stdin_open and not stdin_registered:
                try:
                    poller.register(self.stdin_fd, select.POLLIN)
                    stdin_registered = True
                except (OSError, ValueError):
                    self.stdin_open = False
            elif not self.stdin_open and stdin_registered:
                poller.unregister(self.stdin_fd)
                stdin_registered = False
            if self.ws.has_buffered():
                events = [(ws_fd, select.POLLIN)]
            else:
                timeout = self.next_timeout()
                try:
                    events = poller.poll(None if timeout is None else int(timeout * 1000) + 1)
                except InterruptedError:
                    events = []
            if not events:
                self.on_timer()
                continue
            for fd, ev in events:
                if fd == signal_fd:
                    for sig in os.read(fd, 64):
                        self.on_signal(sig)
                elif fd == ws_fd:
                    try:
                        msgs = self.ws.read_messages()
                    except (ConnectionClosed, WebSocketError):
                        if self.rc is None:
                            self.router.flush_all()
                            self.error("Lost connection to the Corral controller")
                            self.rc = 1
                        self.own_alloc = False
                        break
                    for msg in msgs:
                        self.on_message(msg)
                        if self.rc is not None:
                            break
                elif fd == self.stdin_fd:
                    if ev & select.POLLIN:
                        self.on_stdin()
                    elif ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                        self.stdin_open = False
                        self.send(m.StdinEof())
                if self.rc is not None:
                    break
        self.flush_exits()
        rc = self.rc
        if self.own_alloc and self.allocated:
            self.send(m.Release(exit_code=rc))
        self.ws.close()
        return rc


def terminal_size(fd: int) -> tuple[int, int] | None:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return None
    return size.lines, size.columns


# --------------------------------------------------------------------------
# Signals and the terminal
# --------------------------------------------------------------------------

class SignalPipe:
    """Signal handlers that only wake the poll loop: the C handler writes each signal's
    number to a pipe (`set_wakeup_fd`); the loop reads and handles them in order."""

    def __init__(self, signals: tuple[int, ...]):
        import _signal  # the C module: `signal` itself costs enum's import

        self._signal = _signal
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.old_wakeup = _signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        self.saved: dict[int, Any] = {}
        for sig in signals:
            self.saved[sig] = _signal.signal(sig, _note_signal)

    def close(self) -> None:
        for sig, handler in self.saved.items():
            try:
                self._signal.signal(sig, handler)
            except (OSError, ValueError, TypeError):
                pass
        self._signal.set_wakeup_fd(self.old_wakeup)
        os.close(self.read_fd)
        os.close(self.write_fd)


def _note_signal(signum: int, frame: Any) -> None:
    """The Python-level handler: nothing to do, the wakeup fd carries the signal."""


class RawTerminal:
    """--pty: the local terminal in raw mode, put back as it was no matter what."""

    def __init__(self, fd: int):
        import termios
        self.termios = termios
        self.fd = fd
        self.saved = termios.tcgetattr(fd)
        mode = termios.tcgetattr(fd)
        # cfmakeraw(3)
        mode[0] &= ~(termios.IGNBRK | termios.BRKINT | termios.PARMRK | termios.ISTRIP
                     | termios.INLCR | termios.IGNCR | termios.ICRNL | termios.IXON)
        mode[1] &= ~termios.OPOST
        mode[2] &= ~(termios.CSIZE | termios.PARENB)
        mode[2] |= termios.CS8
        mode[3] &= ~(termios.ECHO | termios.ECHONL | termios.ICANON | termios.ISIG
                     | termios.IEXTEN)
        mode[6][termios.VMIN] = 1
        mode[6][termios.VTIME] = 0
        termios.tcsetattr(fd, termios.TCSANOW, mode)

    def restore(self) -> None:
        try:
            self.termios.tcsetattr(self.fd, self.termios.TCSADRAIN, self.saved)
        except self.termios.error:
            pass


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def main(argv: list[str] | None = None) -> int:
    return client.run_cli("srun", _run, argv)


def _run(args: list[str]) -> int:
    is_tty = os.isatty(0)
    window = terminal_size(0) if is_tty else None
    try:
        req = parse_srun(args, dict(os.environ), os.getcwd(), time.time(),
                         submit_host=short_hostname(),
                         umask=_current_umask(), is_tty=is_tty, window=window)
    except CliExit as e:
        sys.stdout.write(e.stdout)
        sys.stderr.write(e.stderr)
        return e.code
    if req.alloc is not None:
        req.alloc.update(submitted_from())  # scontrol's AllocNode:Sid=HOST:SID
    for line in req.messages:
        sys.stderr.write(line + "\n")
    return run_request(req)


def run_request(req: SrunRequest, *, stdin_fd: int = 0) -> int:
    """Connect, start, and run the session to its end."""
    from corral.cli.ws import ConnectionClosed, WebSocketError, connect

    try:
        # a controller restarting: retried within the window, as every command does
        ws = client.call_with_retry(lambda: connect(client.cli_socket_path(), STEPS_RESOURCE))
    except client.NotRunning as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 1
    except (OSError, WebSocketError) as e:
        sys.stderr.write(f"{PROG}: error: cannot reach the Corral controller: {e}\n")
        return 1
    signals = _HANDLED_SIGNALS + ((SIGWINCH,) if req.pty else ())
    pipe = SignalPipe(signals)
    raw: RawTerminal | None = None
    try:
        if req.pty:  # before the step can start: no keystroke may reach the local tty driver
            raw = RawTerminal(stdin_fd)
        try:
            ws.send_json(start_message(req))
        except ConnectionClosed:
            sys.stderr.write(f"{PROG}: error: Lost connection to the Corral controller\n")
            return 1
        session = Session(ws, req, stdin_fd=stdin_fd)
        if req.verbose and req.job_id is not None and req.alloc_info is not None:
            session.info(job_line(req.job_id, *req.alloc_info))
        return session.run(pipe.read_fd)
    finally:
        if raw is not None:
            raw.restore()
        pipe.close()
        ws.close()


# --------------------------------------------------------------------------
# --help, --usage
# --------------------------------------------------------------------------

USAGE_TEXT = """\
Usage: srun [-N nnodes] [-n ntasks] [-c ncpus] [-p partition] [-t minutes]
            [-J jobname] [-w hosts] [-x hosts] [--jobid=id] [--overlap] [--pty]
            [-o out] [-e err] [-i in] [-l] [-u] [-K[0|1]] [-W sec] [-I[sec]]
            [--export=names] [--mem=MB] [--mem-per-cpu=MB] [--gres=list]
            [--gpus=n] [--gpus-per-node=n] [--gpus-per-task=n] [--mpi=type]
            [-v] [-Q] executable [args...]
"""

HELP_TEXT = """\
Usage: srun [OPTIONS...] executable [args...]

Parallel run options:
  -b, --begin=time            defer job until HH:MM MM/DD/YY
  -c, --cpus-per-task=ncpus   number of cpus required per task
  -D, --chdir=path            change remote current working directory
  -e, --error=err             location of stderr redirection
      --export=env_vars|NONE  environment variables passed to launcher with
                              optional values or NONE (pass no variables)
  -i, --input=in              location of stdin redirection (a file, all,
                              none, or the id of the one task that reads it)
  -I, --immediate[=secs]      exit if resources not available in "secs"
      --jobid=id              run under already allocated job
  -J, --job-name=jobname      name of job
  -K, --kill-on-bad-exit      kill the job if any task terminates with a
                              non-zero exit code
  -l, --label                 prepend task number to lines of stdout/err
      --mpi=type              type of MPI being used (none, pmi2)
      --multi-prog            if set the program name specified is the
                              configuration specification for multiple programs
  -n, --ntasks=ntasks         number of tasks to run
      --ntasks-per-node=n     number of tasks to invoke on each node
  -N, --nodes=N               number of nodes on which to run (N = min[-max])
  -o, --output=out            location of stdout redirection
  -O, --overcommit            overcommit resources: tasks share the CPUs of
                              one task per node
      --overlap               Allow other steps to overlap this step
      --task-epilog=program   run "program" after launching task
      --task-prolog=program   run "program" before launching task
  -p, --partition=partition   partition requested
      --propagate[=rlimits]   propagate all [or specific list of] rlimits
      --pty                   run task zero in pseudo terminal
  -q, --qos=qos               quality of service
  -Q, --quiet                 quiet mode (suppress informational messages)
  -t, --time=minutes          time limit
  -u, --unbuffered            do not line-buffer stdout/err
  -v, --verbose               verbose mode (multiple -v's increase verbosity)
  -Z, --no-allocate           don't allocate nodes (must supply -w; operators
                              only)
  -W, --wait=sec              seconds to wait after first task exits
                              before killing job

Constraint options:
      --mincpus=n             minimum number of logical processors per node
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
      --gpu-bind=...          task to gpu binding options
      --gres=list             required generic resources (gpu[:type][:count],
                              gpu:0 or none for a step without GPUs)

Help options:
  -h, --help                  show this help message
      --usage                 display brief usage message

Other options:
  -V, --version               output version information and exit

Accepted without effect under Corral (their values are checked as Slurm checks
them): --cpu-bind, -m/--distribution, --mem-bind, --cpu-freq, --profile,
--acctg-freq, --kill-on-invalid-dep, --hint, -X/--disable-status, --exact, --whole
and other placement and tuning options.  Other Slurm options are refused with an
error.
"""


if __name__ == "__main__":
    sys.exit(main())
