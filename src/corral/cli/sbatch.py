"""sbatch: submit a batch script, with Slurm 22.05's options, precedence and messages.

Slurm's order of work, kept here because users can observe it:

1. a first pass over the command line finds bad options, --help/--usage/--version,
   -v/-Q, --wrap and the script operand;
2. the script is read (file, --wrap or stdin) and checked;
3. #SBATCH directives, then SBATCH_* environment variables, then the command line
   set the options, each overriding the one before;
4. the options are checked and combined (node/task counts, paths, environment).

`parse_sbatch` does all of that without touching the network; `build_payload` makes
the POST /v1/jobs body; `main` submits it and prints Slurm's answer.
"""

from __future__ import annotations

import os
import sys
import time

from corral.cli import client
from corral.cli.options import (
    EXIT_ERROR,
    EXIT_OPTION,
    GRES_HELP,
    NO_ARG,
    OPTIONAL_ARG,
    CliExit,
    GetoptError,
    GresError,
    Option,
    OptionValueError,
    check_no_effect_value,
    directive_arguments,
    env_flag_is_set,
    expand_hostlist,
    export_environment,
    fail,
    fatal,
    full_path,
    gpu_option_environment,
    gpu_request,
    hetjob_refusal,
    job_spec,
    option_error,
    option_table,
    parse_begin,
    parse_int,
    parse_mail_type,
    parse_mbytes,
    parse_node_count,
    parse_priority,
    parse_signal,
    parse_time_limit,
    read_hostfile,
    script_directives,
    search_path,
    spec_problem,
    verify_hint,
)
from corral.model.jobspec import submitted_from

TYPE_CHECKING = False  # annotations only: `typing` would cost every submission ~3 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any, NoReturn

PROG = "sbatch"
VERSION_TEXT = "slurm-wlm 22.05.8\n"  # what real sbatch --version prints (A12)
TRY_HELP = f'Try "{PROG} --help" for more information\n'

WRAP_HEADER = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"

# Options acted on in the first pass only; in #SBATCH lines they are ignored.
_EARLY = frozenset({"help", "usage", "version", "verbose", "quiet", "wrap"})

# Options Corral accepts but that change nothing it schedules or runs: hints about
# binding, frequencies, accounting and placement details it does not model.
# Those of CHECKED_NO_EFFECT have their value checked first, as Slurm does.
_NO_EFFECT = frozenset({
    "contiguous", "cpu-freq", "delay-boot", "distribution", "get-user-env",
    "gpu-bind", "gpu-freq", "gres-flags", "ignore-pbs", "kill-on-invalid-dep", "mcs-label",
    "mem-bind", "network", "no-kill", "power", "prefer", "profile", "propagate",
    "reboot", "spread-job", "use-min-nodes", "wait-all-nodes", "wckey",
})

# Options that ask for something Corral cannot give: refusing beats ignoring them.
_UNSUPPORTED = frozenset({
    "autocomplete", "batch", "bb", "bbf", "cluster-constraint",
    "container", "core-spec", "cores-per-socket", "cpus-per-gpu", "deadline",
    "extra-node-info", "gid", "gpus-per-socket", "licenses", "mem-per-gpu",
    "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-socket", "ntasks-per-tres",
    "sockets-per-node", "switches", "test-only", "thread-spec",
    "threads-per-core", "uid", "switch-req", "switch-wait",
})

# SBATCH_* input variables → option key, in Slurm 22.05's order (later ones win).
SBATCH_ENV_VARS: tuple[tuple[str, str], ...] = (
    ("SBATCH_ACCOUNT", "account"),
    ("SBATCH_ACCTG_FREQ", "acctg-freq"),
    ("SBATCH_ARRAY_INX", "array"),
    ("SBATCH_BATCH", "batch"),
    ("SBATCH_CLUSTER_CONSTRAINT", "cluster-constraint"),
    ("SBATCH_CLUSTERS", "clusters"),
    ("SLURM_CLUSTERS", "clusters"),
    ("SBATCH_CONSTRAINT", "constraint"),
    ("SBATCH_CONTAINER", "container"),
    ("SBATCH_CORE_SPEC", "core-spec"),
    ("SBATCH_CPU_FREQ_REQ", "cpu-freq"),
    ("SBATCH_CPUS_PER_GPU", "cpus-per-gpu"),
    ("SBATCH_DEBUG", "verbose"),
    ("SBATCH_DELAY_BOOT", "delay-boot"),
    ("SBATCH_DISTRIBUTION", "distribution"),
    ("SBATCH_EXCLUSIVE", "exclusive"),
    ("SBATCH_EXPORT", "export"),
    ("SBATCH_GET_USER_ENV", "get-user-env"),
    ("SBATCH_GPU_BIND", "gpu-bind"),
    ("SBATCH_GPU_FREQ", "gpu-freq"),
    ("SBATCH_GPUS", "gpus"),
    ("SBATCH_GPUS_PER_NODE", "gpus-per-node"),
    ("SBATCH_GPUS_PER_SOCKET", "gpus-per-socket"),
    ("SBATCH_GPUS_PER_TASK", "gpus-per-task"),
    ("SBATCH_GRES", "gres"),
    ("SBATCH_GRES_FLAGS", "gres-flags"),
    ("SBATCH_HINT", "hint"),
    ("SLURM_HINT", "hint"),
    ("SBATCH_IGNORE_PBS", "ignore-pbs"),
    ("SBATCH_JOB_NAME", "job-name"),
    ("SBATCH_MEM_BIND", "mem-bind"),
    ("SBATCH_MEM_PER_CPU", "mem-per-cpu"),
    ("SBATCH_MEM_PER_GPU", "mem-per-gpu"),
    ("SBATCH_MEM_PER_NODE", "mem"),
    ("SBATCH_NETWORK", "network"),
    ("SBATCH_NO_KILL", "no-kill"),
    ("SBATCH_NO_REQUEUE", "no-requeue"),
    ("SBATCH_OPEN_MODE", "open-mode"),
    ("SBATCH_OVERCOMMIT", "overcommit"),
    ("SBATCH_PARTITION", "partition"),
    ("SBATCH_POWER", "power"),
    ("SBATCH_PROFILE", "profile"),
    ("SBATCH_QOS", "qos"),
    ("SBATCH_REQ_SWITCH", "switch-req"),
    ("SBATCH_REQUEUE", "requeue"),
    ("SBATCH_RESERVATION", "reservation"),
    ("SBATCH_SIGNAL", "signal"),
    ("SBATCH_SPREAD_JOB", "spread-job"),
    ("SBATCH_THREAD_SPEC", "thread-spec"),
    ("SBATCH_THREADS_PER_CORE", "threads-per-core"),
    ("SBATCH_TIMELIMIT", "time"),
    ("SBATCH_USE_MIN_NODES", "use-min-nodes"),
    ("SBATCH_WAIT", "wait"),
    ("SBATCH_WAIT_ALL_NODES", "wait-all-nodes"),
    ("SBATCH_WAIT4SWITCH", "switch-wait"),
    ("SBATCH_WCKEY", "wckey"),
)

_MEMORY_KEYS = ("mem", "mem-per-cpu", "mem-per-gpu")
_NICE_LIMIT = 2**31 - 3  # Slurm: NICE_OFFSET - 3


class Submission:
    """What sbatch worked out from the command line, the script and the environment."""

    def __init__(self) -> None:
        self.spec: dict[str, Any] = {}
        self.script = ""
        self.argv: list[str] = []
        self.env: dict[str, str] = {}
        self.export = "ALL"
        self.array: str | None = None
        self.open_mode = "truncate"
        self.parsable = False
        self.quiet = False
        self.wait = False
        self.clusters: str | None = None  # -M/--clusters, SBATCH_CLUSTERS
        self.clusters_env = False  # whether the names came from the environment
        self.verbose = 0
        self.messages: list[str] = []  # stderr lines to show before submitting

    def __repr__(self) -> str:
        return f"Submission(name={self.spec.get('name')!r})"


class _Request:
    """Option values as they are set, and where each came from ("script", "env", "cli")."""

    def __init__(self, now: float, cwd: str):
        self.now = now
        self.cwd = cwd
        self.v: dict[str, Any] = {}
        self.src: dict[str, str] = {}
        self.shown: dict[str, str] = {}  # option name → value, for -v
        self.ignored: list[str] = []

    def set(self, key: str, value: Any, source: str) -> None:
        self.v[key] = value
        self.src[key] = source

    def reset(self, key: str) -> None:
        self.v.pop(key, None)
        self.src.pop(key, None)


# --------------------------------------------------------------------------
# Option handlers
# --------------------------------------------------------------------------

def _apply(req: _Request, option: Option, arg: str | None, source: str) -> None:
    """Set one option from `source`; raises CliExit with Slurm's message when bad."""
    key = option.key
    try:
        _set_option(req, key, option, arg, source)
    except OptionValueError as e:
        raise option_error(PROG, e) from None
    req.shown[option.name] = "set" if arg is None else arg


def _set_option(req: _Request, key: str, option: Option, arg: str | None, source: str) -> None:
    if key in _MEMORY_KEYS and parse_mbytes(_req_arg(arg)) is None:
        # Checked before "not supported" (--mem-per-gpu): Slurm's message for a bad size.
        raise OptionValueError(f"Invalid --{key} specification")
    if key in _UNSUPPORTED:
        fail(PROG, f"--{option.name} is not supported by Corral")
    if key in _NO_EFFECT:
        check_no_effect_value(key, arg)
        req.ignored.append(option.name)
        return
    value: Any
    if key == "begin":
        value = parse_begin(_req_arg(arg), req.now)
    elif key == "chdir":
        value = full_path(_req_arg(arg), req.cwd)
    elif key in ("cpus-per-task", "ntasks", "ntasks-per-node", "mincpus"):
        value = parse_int(f"--{key}", _req_arg(arg), True)
    elif key in ("output", "error", "input"):
        a = _req_arg(arg)
        value = "/dev/null" if a.lower() == "none" else a
    elif key == "nodelist":
        req.reset("nodefile")
        value = arg
    elif key == "nodefile":
        req.reset("nodelist")
        value = arg
    elif key == "exclusive":
        a = (arg or "exclusive").lower()
        if a == "exclusive":
            value = True
        elif a == "oversubscribe":
            value = False
        elif a in ("user", "mcs"):
            fail(PROG, f"--exclusive={arg} is not supported by Corral")
        else:
            raise OptionValueError("Invalid --exclusive specification")
    elif key == "oversubscribe":
        key, value = "exclusive", False
    elif key == "gres":
        a = _req_arg(arg)
        if a.lower() in ("help", "list"):
            raise CliExit(0, stdout=GRES_HELP)
        value = a
    elif key == "hint":
        a = _req_arg(arg)
        if a.lower() == "help":
            raise CliExit(0, stdout=_HINT_HELP)
        value = a
    elif key in ("hold", "parsable", "wait", "overcommit"):
        value = True
    elif key == "mail-type":
        kinds = [k for k in req.v.get("mail-type", "").split(",") if k]
        for k in parse_mail_type(_req_arg(arg)).split(","):
            if k != "NONE" and k not in kinds:
                kinds.append(k)
        value = ",".join(kinds)
    elif key == "mem" or key == "mem-per-cpu" or key == "tmp":
        value = parse_mbytes(_req_arg(arg))
        if value is None:
            raise OptionValueError(f"Invalid --{key} specification")
    elif key == "nice":
        value = _nice(arg)
    elif key == "priority":
        value = parse_priority(_req_arg(arg))
    elif key == "requeue" or key == "no-requeue":
        key, value = "requeue", key == "requeue"
    elif key == "nodes":
        value = parse_node_count(_req_arg(arg))
    elif key == "open-mode":
        a = _req_arg(arg)
        if a[:1] in ("a", "A"):
            value = "append"
        elif a[:1] in ("t", "T"):
            value = "truncate"
        else:
            raise OptionValueError("Invalid --open-mode specification")
    elif key == "signal":
        parse_signal(_req_arg(arg))
        value = arg
    elif key == "acctg-freq":
        check_no_effect_value(key, arg)  # Slurm's validation (cli/options.py)
        value = _req_arg(arg)
    elif key == "time" or key == "time-min":
        value = parse_time_limit(_req_arg(arg), f"--{key}")
    elif key in ("cluster", "clusters"):
        # Checked against the cluster's name when submitting (_run): Corral is one cluster.
        key, value = "clusters", _req_arg(arg)
    elif key == "verbose":
        # Only SBATCH_DEBUG reaches here: a number, not a repeat count.
        value = parse_int("--verbose", _req_arg(arg), False)
    else:
        # Plain strings: account, array, comment, constraint, dependency, export,
        # export-file, exclude, gpus*, job-name, mail-user, partition, qos.
        value = _req_arg(arg)
    req.set(key, value, source)


def _req_arg(arg: str | None) -> str:
    return "" if arg is None else arg


def _nice(arg: str | None) -> int:
    if arg is None:
        return 100
    parsed = arg.strip()
    sign = -1 if parsed.startswith("-") else 1
    digits = parsed.lstrip("+-")
    n = 0
    for ch in digits:  # strtoll: the leading digits, 0 when there are none
        if not ch.isdigit():
            break
        n = n * 10 + int(ch)
    n *= sign
    if abs(n) > _NICE_LIMIT:
        raise OptionValueError(f"Invalid --nice value, out of range (+/- {_NICE_LIMIT})")
    return n


def _apply_env(req: _Request, env: dict[str, str]) -> None:
    table = option_table(PROG)
    for var, key in SBATCH_ENV_VARS:
        value = env.get(var)
        if value is None:
            continue
        option = table.by_key.get(key)
        if option is None:  # variables with no command-line twin (--switches' parts)
            fail(PROG, f"{var} is not supported by Corral")
        if key == "verbose":
            _apply(req, option, value, "env")
            continue
        if option.has_arg == NO_ARG:
            if env_flag_is_set(value):
                _apply(req, option, None, "env")
            else:
                req.reset("requeue" if key in ("requeue", "no-requeue") else key)
            continue
        arg: str | None = value
        if option.has_arg == OPTIONAL_ARG and value == "":
            arg = None
        _apply(req, option, arg, "env")


def _getopt_fail(e: GetoptError) -> CliExit:
    return CliExit(EXIT_OPTION, f"{e.message}\n{TRY_HELP}")


def _apply_args(req: _Request, args: list[str], source: str) -> int:
    """Parse `args` and set every non-early option; returns the first operand's index."""
    table = option_table(PROG)
    try:
        found, index = table.parse(args)
    except GetoptError as e:
        for option, arg in e.found:
            if option.key not in _EARLY:
                _apply(req, option, arg, source)
        raise _getopt_fail(e) from None
    for option, arg in found:
        if option.key not in _EARLY:
            _apply(req, option, arg, source)
    return index


# --------------------------------------------------------------------------
# The script
# --------------------------------------------------------------------------

def _check_script(text: str) -> None:
    """Slurm's checks on a script read from a file or stdin."""
    if text == "":
        fail(PROG, "Batch script is empty!")
    if not text.strip():
        fail(PROG, "Batch script contains only whitespace!")
    if not text.startswith("#!"):
        raise CliExit(EXIT_ERROR, (
            f"{PROG}: error: This does not look like a batch script.  The first\n"
            f"{PROG}: error: line must start with #! followed by the path to an interpreter.\n"
            f"{PROG}: error: For instance: #!/bin/sh\n"))
    if "\0" in text:
        raise CliExit(EXIT_ERROR, (
            f"{PROG}: error: The Slurm controller does not allow scripts that\n"
            f"{PROG}: error: contain a NULL character '\\0'.\n"))
    if "\r\n" in text:
        raise CliExit(EXIT_ERROR, (
            f"{PROG}: error: Batch script contains DOS line breaks (\\r\\n)\n"
            f"{PROG}: error: instead of expected UNIX line breaks (\\n).\n"))


def _read_script_file(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------

def parse_sbatch(argv: list[str], env: dict[str, str],
                 stdin_text: str | Callable[[], str] | None, cwd: str, now: float, *,
                 submit_host: str = "localhost", umask: int = 0o022,
                 prio: int = 0) -> Submission:
    """Work out a submission from sbatch's arguments (without the program name).

    `stdin_text` is the script when neither a file nor --wrap is given: the text, a
    function that reads it (called only then), or None for an empty stdin.  Raises
    CliExit for --help/--version and for every error, with Slurm's text and status.
    """
    table = option_table(PROG)
    sub = Submission()
    req = _Request(now, cwd)

    # ---- first pass: early options and the script operand -------------------
    getopt_error: GetoptError | None = None
    try:
        first, index = table.parse(argv)
    except GetoptError as e:
        first, index, getopt_error = e.found, len(argv), e
    wrap: str | None = None
    verbose = quiet = 0
    for option, arg in first:
        if option.key == "help":
            from corral.model.pyxis import PYXIS_HELP

            raise CliExit(0, stdout=HELP_TEXT.replace("\nHelp options:", PYXIS_HELP + "\nHelp options:", 1))
        if option.key == "usage":
            raise CliExit(0, stdout=USAGE_TEXT)
        if option.key == "version":
            raise CliExit(0, stdout=VERSION_TEXT)
        if option.key == "verbose":
            verbose += 1
        elif option.key == "quiet":
            quiet += 1
        elif option.key == "wrap":
            wrap = arg
    if getopt_error is not None:
        raise _getopt_fail(getopt_error)
    operands = argv[index:]
    if operands and operands[0] == ":":
        _refuse_hetjob()
    if operands and wrap is not None:
        fail(PROG, "Script arguments not permitted with --wrap option")

    # ---- the script ------------------------------------------------------------
    script_path: str | None = None
    if wrap is not None:
        script = f"{WRAP_HEADER}{wrap}\n"
        label = "stdin"
    elif operands:
        name = operands[0]
        found = search_path(name, cwd, env.get("PATH"))
        script_path = found or full_path(name, cwd)
        try:
            script = _read_script_file(script_path)
        except OSError:
            fail(PROG, f"Unable to open file {found or name}")
        _check_script(script)
        label = os.path.basename(script_path)
        sub.argv = operands[1:]
    else:
        text = stdin_text() if callable(stdin_text) else stdin_text
        script = text or ""
        _check_script(script)
        label = "stdin"
    sub.script = script

    # ---- second pass: #SBATCH < SBATCH_* < command line ------------------------
    directive_args: list[str] = []
    for lineno, text in _batch_directives(script):
        words = directive_arguments(text, label, lineno, PROG)
        if words[:1] and words[0].lower() in ("hetjob", "packjob"):
            _refuse_hetjob()
        directive_args.extend(words)
    if directive_args:
        stop = _apply_args(req, directive_args, "script")
        if stop < len(directive_args):
            fail(PROG, f"Invalid directive found in batch script: {directive_args[stop]}",
                 EXIT_OPTION)
    _apply_env(req, env)
    _apply_args(req, argv[:index], "cli")

    sub.verbose = verbose or req.v.get("verbose", 0)  # -v on the command line beats SBATCH_DEBUG
    sub.quiet = quiet > 0
    _finish(sub, req, env, script_path, wrap is not None, cwd, submit_host, umask, prio, argv)
    return sub


def _batch_directives(script: str) -> list[tuple[int, str]]:
    """The #SBATCH lines of a script, and its #SLURM lines, which sbatch still applies after
    saying once that they should be #SBATCH (_opt_batch_script)."""
    found = script_directives(script, "#S")
    directives: list[tuple[int, str]] = []
    warned = False
    for lineno, text in found:
        if text.startswith("BATCH"):
            directives.append((lineno, text[len("BATCH"):]))
        elif text.startswith("LURM"):
            if not warned:
                sys.stderr.write(f"{PROG}: error: Change from #SLURM to #SBATCH in your script "
                                 "and verify the options are valid in sbatch\n")
                warned = True
            directives.append((lineno, text[len("LURM"):]))
    return directives


def _refuse_hetjob() -> NoReturn:
    raise hetjob_refusal(PROG, "Batch job submission failed")


def _finish(sub: Submission, req: _Request, env: dict[str, str], script_path: str | None,
            wrapped: bool, cwd: str, submit_host: str, umask: int, prio: int,
            argv: list[str]) -> None:
    """Slurm's _opt_verify(): check and combine the options into the job's spec."""
    v = req.v
    if sub.quiet and sub.verbose:
        fail(PROG, "don't specify both --verbose (-v) and --quiet (-Q)")
    if "hint" in v:
        problem = verify_hint(v["hint"])
        if problem:
            fail(PROG, problem)
    _check_memory_options(req)

    work_dir = v.get("chdir", cwd)
    stdout = v.get("output")
    array = v.get("array")
    if stdout is None:
        stdout = "slurm-%A_%a.out" if array else "slurm-%j.out"
    stdout = full_path(stdout, work_dir)
    stderr = full_path(v["error"], work_dir) if "error" in v else None
    stdin = full_path(v.get("input", "/dev/null"), work_dir)

    # Node and task counts, as Slurm combines -N, -n, --ntasks-per-node and -w.
    nodes_set = "nodes" in v
    min_nodes, max_nodes = v.get("nodes", (1, 0))
    req_nodes = _node_names(v, "nodelist", cwd) if "nodelist" in v else []
    if "nodefile" in v:
        try:
            req_nodes = _dedupe(read_hostfile(full_path(v["nodefile"], cwd)))
        except OSError:
            fail(PROG, "Invalid --nodefile node file", EXIT_OPTION)
    exc_nodes = _node_names(v, "exclude", cwd) if "exclude" in v else []
    if req_nodes:
        min_nodes = max(len(req_nodes), min_nodes) if nodes_set else len(req_nodes)
        nodes_set = True
    ntasks_set = "ntasks" in v
    ntasks = v.get("ntasks", 1)
    per_node = v.get("ntasks-per-node")
    if per_node and not ntasks_set and (max_nodes == 0 or min_nodes == max_nodes):
        ntasks, ntasks_set = min_nodes * per_node, True
    if nodes_set and (min_nodes == max_nodes or max_nodes == 0) and not ntasks_set:
        ntasks = max(min_nodes, 1)
    elif nodes_set and ntasks_set:
        if max_nodes and ntasks < max_nodes:
            max_nodes = ntasks
        if ntasks < min_nodes:
            sub.messages.append(f"{PROG}: Warning: can't run {ntasks} processes on "
                                f"{min_nodes} nodes, setting nnodes to {ntasks}")
            min_nodes = max_nodes = ntasks

    gpus = _gpu_request(v)

    if array is not None:
        _check_array(array)

    if "job-name" in v:
        name = v["job-name"]
    elif script_path is not None:
        name = os.path.basename(script_path)
    else:
        name = "wrap" if wrapped else "sbatch"

    if v.get("mail-type") and not sub.quiet:
        sub.messages.append(f"{PROG}: warning: Corral does not send mail; "
                            "--mail-type is recorded only")
    if sub.verbose:
        sub.messages.extend(_defined_options(req))

    # without -N (or -w) the controller spreads the tasks over as many nodes as they
    # need (Slurm's min_nodes NO_VAL): the count is left out
    sub.spec = job_spec(
        v, name=name, cwd=cwd, submit_line=" ".join([PROG, *argv]), req_nodes=req_nodes,
        exc_nodes=exc_nodes, min_nodes=min_nodes, max_nodes=max_nodes, ntasks=ntasks,
        gpus=gpus, nodes_given=nodes_set,
        batch=(stdout, stderr, stdin, script_path))
    # Pyxis' options: the batch script runs in the container (read only when given: one
    # more module costs every submission)
    if any(k.startswith(("container-", "no-container-")) for k in v) \
            or any(k.startswith("PYXIS_") for k in env):
        from corral.model.pyxis import container_from_options

        try:
            container = container_from_options(v, env)
        except ValueError as e:
            fail(PROG, f"pyxis: {e}")
        if container is not None:
            sub.spec["container"] = container
    _check_spec(sub.spec)
    sub.array = array
    sub.open_mode = v.get("open-mode", "truncate")
    sub.parsable = bool(v.get("parsable"))
    sub.wait = bool(v.get("wait"))
    sub.clusters = v.get("clusters")
    sub.clusters_env = req.src.get("clusters") == "env"
    sub.export = v.get("export", "ALL")
    sub.env = _job_environment(v, env, cwd, submit_host, umask, prio)


def _check_spec(spec: dict[str, Any]) -> None:
    """What slurmctld refuses in a submission before looking at the cluster."""
    problem = spec_problem(spec)
    if problem is not None:
        first, error = problem
        raise CliExit(EXIT_ERROR, (f"{PROG}: error: {first}\n" if first else "")
                      + f"{PROG}: error: Batch job submission failed: {error}\n")


def _check_memory_options(req: _Request) -> None:
    """--mem, --mem-per-cpu and --mem-per-gpu exclude one another (Slurm's rules)."""
    given = [k for k in _MEMORY_KEYS if k in req.v and req.src[k] != "env"]
    if len(given) > 1:
        fatal(PROG, "--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.")
    if given:
        for k in _MEMORY_KEYS:
            if k != given[0]:
                req.reset(k)
    elif sum(k in req.v for k in _MEMORY_KEYS) > 1:
        fatal(PROG, "SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and SLURM_MEM_PER_NODE are "
                    "mutually exclusive.")


def _dedupe(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _node_names(v: dict[str, Any], key: str, cwd: str) -> list[str]:
    expr: str = v[key]
    if "/" in expr:
        try:
            return _dedupe(read_hostfile(full_path(expr, cwd)))
        except OSError:
            fail(PROG, "Failure getting NodeNames from hostfile")
    try:
        return _dedupe(expand_hostlist(expr))
    except ValueError:
        fail(PROG, "Batch job submission failed: Invalid node name specified")


def _gpu_request(v: dict[str, Any]) -> tuple[int, int, int, str | None]:
    """(gpus for the job, per node, per task, type) from --gres and --gpus*."""
    try:
        return gpu_request(v)
    except GresError:
        fail(PROG, "Batch job submission failed: Invalid generic resource (gres) "
                   "specification")


def _check_array(spec: str) -> None:
    """The syntax of --array, without expanding it: indices below Slurm's largest
    MaxArraySize (the controller enforces the cluster's own)."""
    from corral.model.arrays import MAX_ARRAY_SIZE_LIMIT, ArraySpecError, parse_array_ranges

    try:
        parse_array_ranges(spec, MAX_ARRAY_SIZE_LIMIT)
    except ArraySpecError:
        fail(PROG, "Batch job submission failed: Invalid job array specification")


def _job_environment(v: dict[str, Any], env: dict[str, str], cwd: str, submit_host: str,
                     umask: int, prio: int) -> dict[str, str]:
    """The environment the job starts with, per --export (and --export-file).

    ALL: everything; NONE: only SLURM_*; a list: the listed names (current value) or
    NAME=value assignments plus SLURM_*, and everything else too when ALL is in the
    list.  Explicit assignments win over inherited values.
    """
    source = env
    job_env: dict[str, str] = {}
    if "export-file" in v:
        job_env = _read_env_file(v["export-file"], cwd)
        source = {}  # Slurm clears its own environment when --export-file is used
    job_env.update(export_environment(v.get("export", "ALL"), source))
    job_env.update(gpu_option_environment(v))  # whatever --export says, as in Slurm
    job_env["SLURM_PRIO_PROCESS"] = str(prio)
    job_env["SLURM_SUBMIT_DIR"] = cwd
    job_env["SLURM_SUBMIT_HOST"] = submit_host
    job_env["SLURM_UMASK"] = f"0{umask >> 6 & 7}{umask >> 3 & 7}{umask & 7}"
    return job_env


def _read_env_file(spec: str, cwd: str) -> dict[str, str]:
    """--export-file: NAME=value entries separated by NUL bytes or newlines; or an fd."""
    try:
        if spec.isdigit():
            with os.fdopen(int(spec), "rb", closefd=False) as f:
                data = f.read()
        else:
            with open(full_path(spec, cwd), "rb") as f:
                data = f.read()
    except OSError:
        fail(PROG, f"Could not open environment file {spec}")
    text = data.decode("utf-8", "surrogateescape")
    entries = text.split("\0") if "\0" in text else text.split("\n")
    result: dict[str, str] = {}
    for entry in entries:
        name, eq, value = entry.partition("=")
        if eq and name:
            result[name] = value
    return result


def _defined_options(req: _Request) -> list[str]:
    lines = [f"{PROG}: defined options", f"{PROG}: -------------------- --------------------"]
    for name, value in req.shown.items():
        lines.append(f"{PROG}: {name:<20}: {value}")
    lines.append(f"{PROG}: -------------------- --------------------")
    lines.append(f"{PROG}: end of defined options")
    for name in dict.fromkeys(req.ignored):
        lines.append(f"{PROG}: --{name} has no effect under Corral")
    return lines


# --------------------------------------------------------------------------
# Payload, submission, --wait
# --------------------------------------------------------------------------

def build_payload(sub: Submission) -> dict[str, Any]:
    """The POST /v1/jobs body."""
    return {
        "spec": dict(sub.spec),
        "script": sub.script,
        "argv": list(sub.argv),
        "env": dict(sub.env),
        "export": sub.export,
        "array": sub.array,
        "open_mode": sub.open_mode,
    }


def _read_stdin() -> str:
    try:
        data = sys.stdin.buffer.read()
    except (AttributeError, OSError, ValueError):
        return ""
    return data.decode("utf-8", "surrogateescape")


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _short_hostname() -> str:
    # uname's node name is what gethostname(2) returns on Linux, without importing socket.
    return os.uname().nodename.split(".")[0]


class _JobGone(Exception):
    pass


def _job_status(job_id: int, fetch: Callable[..., Any], finished: set[str]) -> int | None:
    """Slurm's exit status once every task of the job has finished (the largest exit code;
    1 for a task ended by a signal), None while one has not.  Raises _JobGone and the
    client's errors."""
    reply = fetch("/v1/jobs", ids=job_id, fields="state,exit_code,term_signal", finished=1)
    jobs = reply.get("jobs", []) if isinstance(reply, dict) else []
    if not jobs:
        raise _JobGone
    if all(j.get("state") in finished for j in jobs):
        return max((1 if j.get("term_signal") else int(j.get("exit_code") or 0)) for j in jobs)
    return None


def _job_events(job_id: int) -> Iterator[dict[str, Any]]:
    """The job's transitions from the controller's event stream (/v1/events), its `hello`
    first; a keep-alive comes every 15 s, so a silent minute means a dead stream."""
    from corral import paths
    from corral.web.events_client import events  # only --wait pays for this import

    if client.cli_socket_path() != paths.socket_path():
        return iter(())  # a joined machine: its agent relays no stream (docs/API.md)
    return events(job=job_id, nodes=False, hello=True, timeout=60.0)


def _gone(job_id: int) -> int:
    sys.stderr.write(f"{PROG}: error: Job {job_id} no longer found and exit code not found\n")
    return 0


def _follow(job_id: int, stream: Callable[[int], Iterable[dict[str, Any]]],
            fetch: Callable[..., Any], finished: set[str]) -> int | None:
    """--wait on the event stream: the job's state is asked once the subscription stands
    (it may have ended before) and at each of its ends; None when the stream is not there
    or ends first (the caller polls then)."""
    try:
        for rec in stream(job_id):
            kind = rec.get("type")
            if kind in ("dropped", "shutdown"):
                return None
            if kind == "hello" or (kind == "job" and rec.get("event") in ("ended", "requeued")):
                code = _job_status(job_id, fetch, finished)
                if code is not None:
                    return code
    except _JobGone:
        return _gone(job_id)
    except client.ApiError as e:
        return _gone(job_id) if e.status == 404 else None
    except (client.NotRunning, OSError, ValueError):  # TimeoutError is an OSError
        return None
    return None


def wait_for_job(job_id: int, *, sleep: Callable[[float], None] = time.sleep,
                 get: Callable[..., Any] | None = None,
                 stream: Callable[[int], Iterable[dict[str, Any]]] | None = None,
                 follow: bool = True) -> int:
    """--wait: until every task of the job has finished; Slurm's exit status.

    It follows the job on the controller's event stream (`stream`; by default /v1/events
    when talking to the controller, `get` None) and polls where there is no stream, it
    ends early, or `follow` is off (an array: its tasks' events carry their own ids)."""
    from corral.model.job import FINISHED_STATES  # only --wait pays for this import

    finished = {s.value for s in FINISHED_STATES}
    fetch = get or client.get
    if follow and (stream is not None or get is None):
        code = _follow(job_id, stream or _job_events, fetch, finished)
        if code is not None:
            return code
    delay = 0.05
    while True:
        sleep(delay)
        delay = min(delay * 2, 2.0)
        try:
            code = _job_status(job_id, fetch, finished)
        except _JobGone:
            return _gone(job_id)
        except client.ApiError as e:
            if e.status == 404:
                return _gone(job_id)
            sys.stderr.write(f"{PROG}: error: Currently unable to load job state "
                             f"information, retrying: {e.message}\n")
            continue
        except (client.NotRunning, OSError) as e:
            sys.stderr.write(f"{PROG}: error: Currently unable to load job state "
                             f"information, retrying: {e}\n")
            continue
        if code is not None:
            return code


def main(argv: list[str] | None = None) -> int:
    return client.run_cli("sbatch", _run, argv)


def _run(args: list[str]) -> int:
    try:
        sub = parse_sbatch(args, dict(os.environ), _read_stdin, os.getcwd(), time.time(),
                           submit_host=_short_hostname(), umask=_current_umask(),
                           prio=os.getpriority(os.PRIO_PROCESS, 0))
    except CliExit as e:
        sys.stdout.write(e.stdout)
        sys.stderr.write(e.stderr)
        return e.code
    for line in sub.messages:
        sys.stderr.write(line + "\n")
    on_cluster = ""
    try:
        # As Slurm: "jobid;cluster" with --parsable, "... on cluster NAME" without.
        from corral.cli.fmt import ClusterRefused, asked_cluster

        try:
            on_cluster = asked_cluster(PROG, sub.clusters, sub.clusters_env) or ""
        except ClusterRefused:
            return 1
        payload = build_payload(sub)
        # one id per sbatch run: resent after a lost answer, it returns the same job
        payload["spec"]["submit_id"] = os.urandom(16).hex()
        payload["spec"].update(submitted_from())  # scontrol's AllocNode:Sid=HOST:SID
        reply = client.post("/v1/jobs", payload, idempotent=True)
        job_id = int(reply["job_id"])
    except client.NotRunning as e:
        failed = "Batch job submission failed: " if e.timed_out else ""
        sys.stderr.write(f"{PROG}: error: {failed}{e}\n")
        return 1
    except client.ApiError as e:
        user_msg = e.payload.get("user_msg")
        if user_msg:
            sys.stderr.write(f"{PROG}: error: {user_msg}\n")
        sys.stderr.write(f"{PROG}: error: Batch job submission failed: {e.message}\n")
        return 1
    except OSError as e:
        sys.stderr.write(f"{PROG}: error: Batch job submission failed: "
                         f"{e.strerror or e}\n")
        return 1
    except (KeyError, TypeError, ValueError):
        sys.stderr.write(f"{PROG}: error: Batch job submission failed: malformed answer "
                         "from the controller\n")
        return 1
    if not sub.quiet:
        if sub.parsable:
            sys.stdout.write(f"{job_id};{on_cluster}\n" if on_cluster else f"{job_id}\n")
        else:
            where = f" on cluster {on_cluster}" if on_cluster else ""
            sys.stdout.write(f"Submitted batch job {job_id}{where}\n")
        sys.stdout.flush()
    if sub.wait:
        # an array's tasks have ids of their own: its records are polled
        return wait_for_job(job_id) if not sub.array else wait_for_job(job_id, follow=False)
    return 0


# --------------------------------------------------------------------------
# --help, --usage
# --------------------------------------------------------------------------

USAGE_TEXT = """\
Usage: sbatch [-N nnodes] [-n ntasks] [-c ncpus] [-p partition] [--hold]
              [--parsable] [-t minutes] [-D path] [-J jobname] [-o file] [-e file]
              [-i file] [--export[=names]] [--export-file=file] [--begin=time]
              [-d type:jobid[:time]] [-a array] [-w hosts] [-x hosts]
              [--exclusive] [--requeue] [--no-requeue] [--signal=[[R][B]:]num[@time]]
              [--mem=MB] [--mem-per-cpu=MB] [--gres=list] [--gpus=n]
              [--gpus-per-node=n] [--gpus-per-task=n] [--hint=type]
              [--mail-type=type] [--mail-user=user] [-A account] [-q qos]
              [--nice[=value]] [--open-mode=a|t] [-C list] [--comment=name]
              [--time-min=minutes] [-W] [-Q] [-v] [--wrap="command"]
              [-F file] [--priority=value] [-h] [--usage] [-V]
              executable [args...]
"""

HELP_TEXT = """\
Usage: sbatch [OPTIONS...] executable [args...]

Parallel run options:
  -a, --array=indexes         job array index values
  -A, --account=name          charge job to specified account
      --acctg-freq=<datatype>=<interval> accounting and profiling sampling
                              intervals. Supported datatypes:
                              task=<interval> energy=<interval>
                              network=<interval> filesystem=<interval>
      --begin=time            defer job until HH:MM MM/DD/YY
      --comment=name          arbitrary comment
  -c, --cpus-per-task=ncpus   number of cpus required per task
  -d, --dependency=type:jobid[:time] defer job until condition on jobid is satisfied
  -D, --chdir=directory       set working directory for batch script
  -e, --error=err             file for batch script's standard error
      --export[=names]        specify environment variables to export
      --export-file=file|fd   specify environment variables file or file
                              descriptor to export
  -H, --hold                  submit job in held state
  -i, --input=in              file for batch script's standard input
  -J, --job-name=jobname      name of job
  -M, --clusters=names        the cluster to submit to: Corral is one cluster,
                              so only its own name (or all) is accepted
      --mail-type=type        notify on state change: BEGIN, END, FAIL or ALL
                              (recorded; Corral does not send mail)
      --mail-user=user        who to send email notification for job state
                              changes
  -n, --ntasks=ntasks         number of tasks to run
      --nice[=value]          decrease scheduling priority by value
      --no-requeue            if set, do not permit the job to be requeued
      --ntasks-per-node=n     number of tasks to invoke on each node
  -N, --nodes=N               number of nodes on which to run (N = min[-max])
      --open-mode={append|truncate} output and error file open mode
  -o, --output=out            file for batch script's standard output
  -O, --overcommit            overcommit resources
  -p, --partition=partition   partition requested
      --priority=value        set the priority of the job to value (operators)
      --parsable              outputs only the jobid and cluster name (if present),
                              separated by semicolon, only on successful submission.
  -q, --qos=qos               quality of service
  -Q, --quiet                 quiet mode (suppress informational messages)
      --requeue               if set, permit the job to be requeued
  -s, --oversubscribe         over subscribe resources with other jobs
      --signal=[[R][B]:]num[@time] send signal when time limit within time seconds
  -t, --time=minutes          time limit
      --time-min=minutes      minimum time limit (if distinct)
  -v, --verbose               verbose mode (multiple -v's increase verbosity)
  -W, --wait                  wait for completion of submitted job
      --wrap[=command string] wrap command string in a sh script and submit

Constraint options:
  -C, --constraint=list       specify a list of constraints
      --mincpus=n             minimum number of logical processors (threads)
                              per node
  -F, --nodefile=filename     request a specific list of hosts
      --mem=MB                minimum amount of real memory (0 = all of it)
      --hint=                 Bind tasks according to application hints
                              (see "--hint=help" for options)
      --reservation=name      allocate resources from named reservation
      --tmp=MB                minimum amount of temporary disk
  -w, --nodelist=hosts...     request a specific list of hosts
  -x, --exclude=hosts...      exclude a specific list of hosts

Consumable resources related options:
      --exclusive[=oversubscribe] allocate nodes in exclusive mode
      --mem-per-cpu=MB        maximum amount of real memory per allocated
                              cpu required by the job.
                              --mem >= --mem-per-cpu if --mem is specified.

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
--contiguous, --cpu-freq, --delay-boot, -m/--distribution,
--get-user-env, --gpu-bind, --gpu-freq, --gres-flags, --ignore-pbs,
--kill-on-invalid-dep, --mcs-label, --mem-bind, --network, -k/--no-kill,
--power, --prefer, --profile, --propagate, --reboot, --spread-job,
--use-min-nodes, --wait-all-nodes, --wckey.
Other Slurm options are refused with an error.
"""

_HINT_HELP = """\
Application hint options:
    --hint=             Bind tasks according to application hints
        compute_bound   use all cores in each socket
        memory_bound    use only one core in each socket
        [no]multithread [don't] use extra threads with in-core multi-threading
        help            show this help message
"""


if __name__ == "__main__":
    sys.exit(main())
