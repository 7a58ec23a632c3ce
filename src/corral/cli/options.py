"""Slurm's command-line grammar, shared by sbatch, srun and salloc.

Three parts:

* the option table of Slurm 22.05 (`src/common/slurm_opt.c`): every long name, its
  short letter, whether it takes an argument, and which commands know it;
* `OptionTable.parse`, an emulation of glibc's `getopt_long` in Slurm's "+" mode
  (stop at the first operand), with glibc's exact error lines and its rules for
  abbreviated long options;
* value parsers with Slurm's own wording for bad values (`--time`, `--mem`, `-N`,
  `--gres`, `--signal`, `--mail-type`, `--hint`, plain integers, #SBATCH lines).

The module only imports `os`, `re` and corral.model so that commands start fast.
"""

from __future__ import annotations

import os

from corral.lazyre import LazyPattern
from corral.model import timefmt
from corral.model.jobspec import BY_NAME, FIELD_NAMES, TOO_LONG
from corral.model.units import str_to_mbytes

TYPE_CHECKING = False  # `typing` would cost every command start ~3 ms
if TYPE_CHECKING:
    from typing import NoReturn

NO_ARG, REQUIRED_ARG, OPTIONAL_ARG = 0, 1, 2

# Exit status of Slurm's option setters (`exit(-1)`), and of its other checks.
EXIT_OPTION = 255
EXIT_ERROR = 1


class CliExit(Exception):
    """Stop the command: write `stdout` and `stderr` as they are, then exit with `code`."""

    def __init__(self, code: int, stderr: str = "", stdout: str = ""):
        super().__init__(stderr or stdout)
        self.code = code
        self.stderr = stderr
        self.stdout = stdout


def fail(prog: str, message: str, code: int = EXIT_ERROR) -> NoReturn:
    """Slurm's `error(...)` followed by `exit(code)`.

    A message of several lines writes "{prog}" where a later line names the command.
    """
    message = message.replace("{prog}", prog)
    raise CliExit(code, f"{prog}: error: {message}\n")


def fatal(prog: str, message: str) -> NoReturn:
    """Slurm's `fatal(...)`: one line, exit status 1."""
    raise CliExit(EXIT_ERROR, f"{prog}: fatal: {message}\n")


class OptionValueError(ValueError):
    """A bad option value; `message` is Slurm's text, `code` its exit status."""

    def __init__(self, message: str, code: int = EXIT_OPTION, before: str = ""):
        super().__init__(message)
        self.message = message
        self.code = code
        self.before = before  # lines Slurm prints first, without the "prog: error:" prefix


def option_error(prog: str, e: OptionValueError) -> CliExit:
    """The CliExit for a bad option value: Slurm's lines and exit status."""
    message = e.message.replace("{prog}", prog)
    return CliExit(e.code, f"{e.before}{prog}: error: {message}\n")


class GetoptError(Exception):
    """getopt_long rejected the command line; `message` is glibc's line without newline.

    `found` holds the options parsed before the bad one: Slurm acts on those first
    (an earlier --help wins over a later typo).
    """

    def __init__(self, message: str, found: list[tuple[Option, str | None]] | None = None):
        super().__init__(message)
        self.message = message
        self.found = found or []


# --------------------------------------------------------------------------
# The option table
# --------------------------------------------------------------------------

class Option:
    """One long option: `key` is what handlers switch on (aliases share a key)."""

    __slots__ = ("name", "has_arg", "short", "key", "commands")

    def __init__(self, name: str, has_arg: int, short: str | None, commands: str,
                 key: str | None = None):
        self.name = name
        self.has_arg = has_arg
        self.short = short
        self.key = key or name
        self.commands = commands

    def __repr__(self) -> str:
        return f"Option({self.name!r})"


# Slurm 22.05's common_options[], in its order (the order of getopt's "possibilities"
# list).  commands: a = salloc, b = sbatch, s = srun.
_R, _N, _O = REQUIRED_ARG, NO_ARG, OPTIONAL_ARG
_TABLE: tuple[tuple[str, int, str | None, str, str | None], ...] = (
    ("accel-bind", _R, None, "s", None),
    ("account", _R, "A", "abs", None),
    ("acctg-freq", _R, None, "abs", None),
    ("array", _R, "a", "b", None),
    ("autocomplete", _R, None, "abs", None),
    ("batch", _R, None, "b", None),
    ("bcast", _O, None, "s", None),
    ("bcast-exclude", _R, None, "s", None),
    ("begin", _R, "b", "abs", None),
    ("bell", _N, None, "a", None),
    ("bb", _R, None, "abs", None),
    ("bbf", _R, None, "abs", None),
    ("cluster-constraint", _R, None, "abs", None),
    ("chdir", _R, "D", "abs", None),
    ("cluster", _R, None, "abs", None),
    ("clusters", _R, "M", "abs", None),
    ("comment", _R, None, "abs", None),
    ("compress", _O, None, "s", None),
    ("container", _R, None, "abs", None),
    ("contiguous", _N, None, "abs", None),
    ("constraint", _R, "C", "abs", None),
    ("core-spec", _R, "S", "abs", None),
    ("cores-per-socket", _R, None, "abs", None),
    ("cpu-bind", _R, None, "s", None),
    ("cpu_bind", _R, None, "s", "cpu-bind"),
    ("cpu-freq", _R, None, "abs", None),
    ("cpus-per-gpu", _R, None, "abs", None),
    ("cpus-per-task", _R, "c", "abs", None),
    ("deadline", _R, None, "abs", None),
    ("debugger-test", _N, None, "s", None),
    ("delay-boot", _R, None, "abs", None),
    ("dependency", _R, "d", "abs", None),
    ("disable-status", _N, "X", "s", None),
    ("distribution", _R, "m", "abs", None),
    ("epilog", _R, None, "s", None),
    ("error", _R, "e", "bs", None),
    ("exact", _N, None, "s", None),
    ("exclude", _R, "x", "abs", None),
    ("exclusive", _O, None, "abs", None),
    ("export", _R, None, "bs", None),
    ("export-file", _R, None, "b", None),
    ("extra-node-info", _R, "B", "abs", None),
    ("get-user-env", _O, None, "ab", None),
    ("gid", _R, None, "b", None),
    ("gpu-bind", _R, None, "abs", None),
    ("gpu-freq", _R, None, "abs", None),
    ("gpus", _R, "G", "abs", None),
    ("gpus-per-node", _R, None, "abs", None),
    ("gpus-per-socket", _R, None, "abs", None),
    ("gpus-per-task", _R, None, "abs", None),
    ("gres", _R, None, "abs", None),
    ("gres-flags", _R, None, "abs", None),
    ("help", _N, "h", "abs", None),
    ("het-group", _R, None, "s", None),
    ("hint", _R, None, "abs", None),
    ("hold", _N, "H", "abs", None),
    ("ignore-pbs", _N, None, "b", None),
    ("immediate", _O, "I", "as", None),
    ("input", _R, "i", "bs", None),
    ("interactive", _N, None, "s", None),
    ("jobid", _R, None, "s", None),
    ("job-name", _R, "J", "abs", None),
    ("kill-command", _O, "K", "a", None),
    ("kill-on-bad-exit", _O, "K", "s", None),
    ("kill-on-invalid-dep", _R, None, "b", None),
    ("label", _N, "l", "s", None),
    ("licenses", _R, "L", "abs", None),
    ("mail-type", _R, None, "abs", None),
    ("mail-user", _R, None, "abs", None),
    ("threads", _R, "T", "s", None),
    ("mcs-label", _R, None, "abs", None),
    ("mem", _R, None, "abs", None),
    ("mem-bind", _R, None, "abs", None),
    ("mem-per-cpu", _R, None, "abs", None),
    ("mem-per-gpu", _R, None, "abs", None),
    ("mincpus", _R, None, "abs", None),
    ("mpi", _R, None, "s", None),
    ("msg-timeout", _R, None, "s", None),
    ("multi-prog", _N, None, "s", None),
    ("network", _R, None, "abs", None),
    ("nice", _O, None, "abs", None),
    ("no-allocate", _N, "Z", "s", None),
    ("no-bell", _N, None, "a", None),
    ("no-kill", _O, "k", "abs", None),
    ("no-shell", _N, None, "a", None),
    ("no-requeue", _N, None, "b", None),
    ("nodefile", _R, "F", "abs", None),
    ("nodelist", _R, "w", "abs", None),
    ("nodes", _R, "N", "abs", None),
    ("ntasks", _R, "n", "abs", None),
    ("ntasks-per-core", _R, None, "abs", None),
    ("ntasks-per-gpu", _R, None, "abs", None),
    ("ntasks-per-node", _R, None, "abs", None),
    ("ntasks-per-socket", _R, None, "abs", None),
    ("ntasks-per-tres", _R, None, "abs", None),
    ("open-mode", _R, None, "bs", None),
    ("output", _R, "o", "bs", None),
    ("overcommit", _N, "O", "abs", None),
    ("overlap", _N, None, "s", None),
    ("oversubscribe", _N, "s", "abs", None),
    ("pack-group", _R, None, "s", "het-group"),
    ("parsable", _N, None, "b", None),
    ("partition", _R, "p", "abs", None),
    ("power", _R, None, "abs", None),
    ("prefer", _R, None, "abs", None),
    ("preserve-env", _N, "E", "s", None),
    ("priority", _R, None, "abs", None),
    ("profile", _R, None, "abs", None),
    ("prolog", _R, None, "s", None),
    ("propagate", _O, None, "bs", None),
    ("pty", _N, None, "s", None),
    ("qos", _R, "q", "abs", None),
    ("quiet", _N, "Q", "abs", None),
    ("quit-on-interrupt", _N, None, "s", None),
    ("reboot", _N, None, "abs", None),
    ("relative", _R, "r", "s", None),
    ("requeue", _N, None, "b", None),
    ("reservation", _R, None, "abs", None),
    ("resv-ports", _O, None, "s", None),
    ("send-libs", _O, None, "s", None),
    ("signal", _R, None, "abs", None),
    ("slurmd-debug", _R, None, "s", None),
    ("sockets-per-node", _R, None, "abs", None),
    ("spread-job", _N, None, "abs", None),
    ("switches", _R, None, "abs", None),
    ("task-epilog", _R, None, "s", None),
    ("task-prolog", _R, None, "s", None),
    ("tasks-per-node", _R, None, "abs", "ntasks-per-node"),
    ("test-only", _N, None, "bs", None),
    ("thread-spec", _R, None, "abs", None),
    ("threads-per-core", _R, None, "abs", None),
    ("time", _R, "t", "abs", None),
    ("time-min", _R, None, "abs", None),
    ("tmp", _R, None, "abs", None),
    ("treewidth", _R, None, "s", None),
    ("uid", _R, None, "b", None),
    ("unbuffered", _N, "u", "s", None),
    ("use-min-nodes", _N, None, "abs", None),
    ("verbose", _N, "v", "abs", None),
    ("version", _N, "V", "abs", None),
    ("usage", _N, None, "abs", None),
    ("wait", _N, "W", "b", None),
    ("wait-all-nodes", _R, None, "ab", None),
    ("wait", _R, "W", "s", "wait-srun"),
    ("wckey", _R, None, "abs", None),
    ("whole", _N, None, "s", None),
    ("wrap", _R, None, "b", None),
    ("x11", _O, None, "as", None),
    # Pyxis' options (a SPANK plugin's, so after Slurm's own): model.launchplan reads them
    ("container-image", _R, None, "abs", None),
    ("container-mounts", _R, None, "abs", None),
    ("container-workdir", _R, None, "abs", None),
    ("container-name", _R, None, "abs", None),
    ("container-save", _R, None, "abs", None),
    ("container-mount-home", _N, None, "abs", None),
    ("no-container-mount-home", _N, None, "abs", None),
    ("container-remap-root", _N, None, "abs", None),
    ("no-container-remap-root", _N, None, "abs", None),
    ("container-entrypoint", _N, None, "abs", None),
    ("no-container-entrypoint", _N, None, "abs", None),
    ("container-entrypoint-log", _N, None, "abs", None),
    ("container-writable", _N, None, "abs", None),
    ("container-readonly", _N, None, "abs", None),
    ("container-env", _R, None, "abs", None),
    ("container-unshare", _R, None, "abs", None),
)

_COMMAND_LETTER = {"salloc": "a", "sbatch": "b", "srun": "s"}
_TABLES: dict[str, OptionTable] = {}


def option_table(command: str) -> OptionTable:
    """The options `command` ("sbatch", "srun" or "salloc") accepts, in Slurm's order."""
    table = _TABLES.get(command)
    if table is None:
        letter = _COMMAND_LETTER[command]
        opts = [Option(name, has_arg, short, cmds, key)
                for name, has_arg, short, cmds, key in _TABLE if letter in cmds]
        table = _TABLES[command] = OptionTable(command, opts)
    return table


class OptionTable:
    """getopt_long(3) over a list of options, as glibc does it with a "+" optstring."""

    def __init__(self, prog: str, options: list[Option]):
        self.prog = prog
        self.options = options
        self.shorts = {o.short: o for o in options if o.short}
        self.by_key = {o.key: o for o in options}

    def parse(self, argv: list[str]) -> tuple[list[tuple[Option, str | None]], int]:
        """Parse options up to the first operand.

        Returns the (option, argument) pairs in order and the index of the first
        operand in `argv` (len(argv) when there is none).  Raises GetoptError with
        glibc's message for the first bad option.
        """
        found: list[tuple[Option, str | None]] = []
        i = 0
        n = len(argv)
        try:
            while i < n:
                arg = argv[i]
                if arg == "--":
                    return found, i + 1
                if not arg.startswith("-") or arg == "-":
                    return found, i
                if arg.startswith("--"):
                    i = self._long(argv, i, found)
                else:
                    i = self._shorts(argv, i, found)
        except GetoptError as e:
            e.found = found
            raise
        return found, n

    def _long(self, argv: list[str], i: int, found: list[tuple[Option, str | None]]) -> int:
        text = argv[i][2:]
        name, eq, value = text.partition("=")
        option = None
        for o in self.options:
            if o.name == name:
                option = o
                break
        if option is None:
            matches = [o for o in self.options if o.name.startswith(name)]
            if not matches:
                raise GetoptError(f"{self.prog}: unrecognized option '--{text}'")
            first = matches[0]
            if any(o.has_arg != first.has_arg or o.key != first.key for o in matches[1:]):
                names = "".join(f" '--{o.name}'" for o in matches)
                raise GetoptError(
                    f"{self.prog}: option '--{text}' is ambiguous; possibilities:{names}")
            option = first
        if eq:
            if option.has_arg == NO_ARG:
                raise GetoptError(
                    f"{self.prog}: option '--{option.name}' doesn't allow an argument")
            found.append((option, value))
            return i + 1
        if option.has_arg == REQUIRED_ARG:
            if i + 1 >= len(argv):
                raise GetoptError(
                    f"{self.prog}: option '--{option.name}' requires an argument")
            found.append((option, argv[i + 1]))
            return i + 2
        found.append((option, None))
        return i + 1

    def _shorts(self, argv: list[str], i: int, found: list[tuple[Option, str | None]]) -> int:
        token = argv[i]
        pos = 1
        while pos < len(token):
            ch = token[pos]
            option = self.shorts.get(ch)
            if option is None:
                raise GetoptError(f"{self.prog}: invalid option -- '{ch}'")
            rest = token[pos + 1:]
            if option.has_arg == NO_ARG:
                found.append((option, None))
                pos += 1
                continue
            if rest:
                found.append((option, rest))
                return i + 1
            if option.has_arg == OPTIONAL_ARG:
                found.append((option, None))
                return i + 1
            if i + 1 >= len(argv):
                raise GetoptError(f"{self.prog}: option requires an argument -- '{ch}'")
            found.append((option, argv[i + 1]))
            return i + 2
        return i + 1


# --------------------------------------------------------------------------
# Value parsers (Slurm's wording)
# --------------------------------------------------------------------------

_STRTOL_RE = LazyPattern(r"\s*[+-]?\d+")
_INT_MAX = 2**31 - 1


def _strtol(text: str) -> tuple[int, str] | None:
    """C strtol(text, &end, 10): the value and what follows it, or None if no digits."""
    m = _STRTOL_RE.match(text)
    if not m:
        return None
    return int(m.group()), text[m.end():]


def parse_int(name: str, value: str, positive: bool) -> int:
    """Slurm's parse_int(): a whole number, > 0 when `positive`; errors exit 1."""
    parsed = _strtol(value)
    if parsed is None or parsed[1] or parsed[0] < 0 or (positive and parsed[0] <= 0):
        raise OptionValueError(f'Invalid numeric value "{value}" for {name}.', EXIT_ERROR)
    if parsed[0] > _INT_MAX:
        raise OptionValueError(f"Numeric argument ({parsed[0]}) to big for {name}.", EXIT_ERROR)
    return parsed[0]


def parse_mbytes(text: str) -> int | None:
    """Slurm's str_to_mbytes() (model/units): "4G" → 4096, None when invalid."""
    return str_to_mbytes(text)


def parse_time_limit(text: str, option: str = "--time") -> int:
    """A --time/--time-min value in seconds; -1 for UNLIMITED (and for 0, as Slurm does)."""
    try:
        secs = timefmt.parse_time_limit(text)
    except timefmt.TimeFormatError:
        raise OptionValueError(f"Invalid {option} specification") from None
    return timefmt.INFINITE if secs == 0 else secs


def parse_begin(text: str, now: float, option: str = "--begin") -> float:
    """--begin (and --deadline): any form of Slurm's time parser (model/timeparse)."""
    from corral.model.timeparse import TimeParseError, parse_time

    try:
        return float(parse_time(text, now))
    except TimeParseError as e:
        raise OptionValueError(f"Invalid {option} specification",
                               before=f"{e.message}\n" if e.message else "") from None


def _str_to_nodes(text: str) -> tuple[int, str]:
    parsed = _strtol(text)
    if parsed is None:
        return 0, text  # strtol converted nothing: 0, and all of it is left over
    value, rest = parsed
    if rest[:1] in ("k", "K"):
        value, rest = value * 1024, rest[1:]
    elif rest[:1] in ("m", "M"):
        value, rest = value * 1024 * 1024, rest[1:]
    return value, rest


def parse_node_count(text: str) -> tuple[int, int]:
    """-N/--nodes: "N" or "min-max" → (min, max); max is 0 when only a count was given.

    Slurm's verify_node_count(); Slurm prints the reason and then exits 255.
    """
    def count(part: str) -> int:
        parsed = _str_to_nodes(part)
        if parsed[1].strip():
            raise OptionValueError(f'"{part}" is not a valid node count')
        return parsed[0]

    if "-" in text:
        lo_text, _, hi_text = text.partition("-")
        lo, hi = count(lo_text), count(hi_text)
    else:
        lo = hi = count(text)
        if lo < 0:
            raise OptionValueError(f'"{text}" is not a valid node count')
    if hi != 0 and hi < lo:
        raise OptionValueError(
            f"Maximum node count {hi} is less than minimum node count {lo}")
    return lo, hi


# Linux signal numbers, the names Slurm's sig_name2num() knows.
SIGNALS: dict[str, int] = {
    "HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8,
    "KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
    "STKFLT": 16, "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22,
    "URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29,
    "PWR": 30, "SYS": 31,
}


def signal_number(text: str) -> int:
    """A signal given as a number, a name or SIGname (any case); 0 when unknown."""
    t = text.strip()
    if t.isdigit():
        return int(t)
    name = t.upper()
    if name.startswith("SIG"):
        name = name[3:]
    return SIGNALS.get(name, 0)


def parse_signal(text: str) -> tuple[str, int, int]:
    """--signal=[{R|B}:]SIG[@secs] → (flags "", "B", "R" or "RB", signal number, secs).

    Slurm's get_signal_opts(); the warning time defaults to 60 seconds.
    """
    flags = ""
    rest = text
    upper = text.upper()
    for prefix, fl in (("RB:", "RB"), ("BR:", "RB"), ("B:", "B"), ("R:", "R")):
        if upper.startswith(prefix):
            flags, rest = fl, text[len(prefix):]
            break
    sig_text, at, secs_text = rest.partition("@")
    num = signal_number(sig_text)
    if num < 1 or num > 0xFFFF:
        raise OptionValueError("Invalid --signal specification")
    if not at:
        return flags, num, 60
    parsed = _strtol(secs_text)
    if parsed is None or parsed[1] or not 0 <= parsed[0] <= 0xFFFF:
        raise OptionValueError("Invalid --signal specification")
    return flags, num, parsed[0]


MAIL_TYPES = ("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "STAGE_OUT", "TIME_LIMIT",
              "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS",
              "INVALID_DEPEND")


def parse_mail_type(text: str) -> str:
    """--mail-type: comma list of Slurm's event names → upper-case list."""
    kinds = [k.strip().upper() for k in text.split(",")]
    if not kinds or any(k not in MAIL_TYPES for k in kinds):
        raise OptionValueError("Invalid --mail-type specification")
    return ",".join(kinds)


HINTS = ("compute_bound", "memory_bound", "multithread", "nomultithread")


def verify_hint(text: str) -> str | None:
    """--hint: Slurm's verify_hint(); returns the error text, or None when valid."""
    for token in text.split(","):
        if token.lower() not in HINTS:
            return f'unrecognized --hint argument "{token}", see --hint=help'
    return None


_GPU_COUNT_RE = LazyPattern(r"\d+[kKmMgG]?")


def _gres_count(text: str) -> int | None:
    if not _GPU_COUNT_RE.fullmatch(text):
        return None
    mult = {"k": 1024, "m": 1024**2, "g": 1024**3}.get(text[-1].lower(), 1)
    digits = text[:-1] if mult != 1 else text
    return int(digits) * mult


GRES_HELP = "Valid gres options are:\ngpu[[:type]:count]\n"


class GresError(ValueError):
    """A --gres/--gpus value the controller would refuse."""


def parse_gres(text: str) -> tuple[int, str | None]:
    """--gres=gpu[:type][:count][,gpu…] → (GPUs per node, type); "none" → (0, None).

    Corral schedules GPUs only: another GRES name raises GresError.
    """
    if text.strip().lower() == "none":
        return 0, None
    total = 0
    gpu_type: str | None = None
    for item in text.split(","):
        parts = item.strip().split(":")
        name = parts[0]
        if name.startswith("gres/"):
            name = name[5:]
        if name != "gpu":
            raise GresError(item)
        count = 1
        kind: str | None = None
        if len(parts) == 2:
            c = _gres_count(parts[1])
            if c is None:
                kind = parts[1]
            else:
                count = c
        elif len(parts) == 3:
            kind = parts[1]
            c = _gres_count(parts[2])
            if c is None:
                raise GresError(item)
            count = c
        elif len(parts) > 3:
            raise GresError(item)
        if kind == "" or (kind is not None and kind.startswith(("-", "+"))):
            # "gpu:-1": Slurm reads a type named "-1", which no node has.
            raise GresError(item)
        if kind is not None:
            if gpu_type is not None and gpu_type != kind:
                raise GresError(item)
            gpu_type = kind
        total += count
    return total, gpu_type


def parse_gpu_request(text: str) -> tuple[int, str | None]:
    """--gpus/--gpus-per-node/--gpus-per-task: "[type:]count" (also "gpu:type:count")."""
    parts = text.strip().split(":")
    if parts and parts[0] == "gpu" and len(parts) > 1:
        parts = parts[1:]
    if len(parts) == 1:
        kind, count_text = None, parts[0]
    elif len(parts) == 2:
        kind, count_text = parts[0], parts[1]
    else:
        raise GresError(text)
    count = _gres_count(count_text)
    if count is None or kind == "" or (kind or "").startswith(("-", "+")):
        raise GresError(text)
    return count, kind


def split_quoted(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside single or double quotes; the quotes themselves are dropped."""
    items: list[str] = []
    cur: list[str] = []
    quote = ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
            else:
                cur.append(ch)
        elif ch in "\"'":
            quote = ch
        elif ch == sep:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return items


def env_flag_is_set(value: str) -> bool:
    """How Slurm reads an environment variable standing for a flag option.

    Set when empty, "yes" (any case) or a non-zero number; anything else unsets it.
    """
    if value == "" or value.lower() == "yes":
        return True
    parsed = _strtol(value)
    return parsed is not None and parsed[0] != 0 and parsed[1] == ""


# --------------------------------------------------------------------------
# Files, paths and #SBATCH lines
# --------------------------------------------------------------------------

def full_path(path: str, base: str) -> str:
    """Slurm's _fullpath(): a relative path is taken relative to `base`."""
    if path.startswith("/"):
        return path
    return f"{base.rstrip('/')}/{path}" if base != "/" else f"/{path}"


def search_path(cmd: str, cwd: str, path_env: str | None) -> str | None:
    """Slurm's search_path() for a script: the current directory, then $PATH.

    Returns an absolute path to a readable file, or None.
    """
    if cmd.startswith("/"):
        return cmd if os.access(cmd, os.R_OK) and not os.path.isdir(cmd) else None
    if cmd.startswith("."):
        dirs = [cwd]
    else:
        dirs = [cwd] + [d for d in (path_env or "").split(":") if d]
    for d in dirs:
        candidate = os.path.normpath(os.path.join(cwd, d, cmd))
        if os.access(candidate, os.R_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def directive_arguments(line: str, file: str, lineno: int, prog: str) -> list[str]:
    """The arguments on one #SBATCH line (text after the magic word), as Slurm splits them.

    Slurm's get_argument(): whitespace separates; single or double quotes group;
    a backslash escapes the next character; an unquoted # starts a comment.
    """
    args: list[str] = []
    pos = 0
    n = len(line)
    while True:
        while pos < n and line[pos].isspace():
            pos += 1
        if pos < n and line[pos] == ":":
            fatal(prog, f"{file}: line {lineno}: Unexpected `:` in [{line}]")
        if pos >= n:
            return args
        cur: list[str] = []
        quote = ""
        escaped = False
        while pos < n and (quote or not line[pos].isspace()) and line[pos] != "\n":
            ch = line[pos]
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
                pos += 1
                continue
            elif quote:
                if ch == quote:
                    quote = ""
                    pos += 1
                    continue
            elif ch in "\"'":
                quote = ch
                pos += 1
                continue
            elif ch == "#":
                break
            cur.append(ch)
            pos += 1
        if quote:
            fatal(prog, f"{file}: line {lineno}: Unmatched `{quote}` in [{line}]")
        if not cur:
            # Slurm stops at an argument that comes out empty ("" or a comment).
            return args
        args.append("".join(cur))


def script_directives(script: str, magic: str = "#SBATCH") -> list[tuple[int, str]]:
    """The (line number, text after `magic`) of each directive at the top of a script.

    Reading stops at the first line that is neither blank nor a comment.
    """
    found: list[tuple[int, str]] = []
    for lineno, line in enumerate(script.split("\n"), 1):
        if line.startswith(magic):
            found.append((lineno, line[len(magic):]))
            continue
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#"):
            break
    return found


def read_hostfile(path: str) -> list[str]:
    """Node names from a file: separated by whitespace or commas, # starts a comment."""
    import re

    names: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.split("#", 1)[0]
            for item in re.split(r"[\s,]+", line.strip()):
                if item:
                    names.append(item)
    return names


def expand_hostlist(expr: str) -> list[str]:
    """Expand "node-[1-3],gpu01"; raises ValueError for a malformed expression."""
    from corral.model.hostlists import HostlistError, expand  # lazy: only for -w/-x

    try:
        return expand(expr)
    except HostlistError as e:
        raise ValueError(str(e)) from None


# --------------------------------------------------------------------------
# Allocation options shared by srun and salloc (sbatch keeps its own copy)
# --------------------------------------------------------------------------

# Accepted, and change nothing Corral schedules or runs (sbatch's list, plus srun's
# binding and I/O tuning options).
# The options of CHECKED_NO_EFFECT are not listed: parse_alloc_value checks their value.
ALLOC_NO_EFFECT = frozenset({
    "contiguous", "delay-boot", "get-user-env", "gpu-bind", "gpu-freq", "gres-flags",
    "mcs-label", "network", "no-kill", "power", "prefer", "propagate", "reboot", "spread-job", "use-min-nodes", "wait-all-nodes", "wckey", "cpu-bind",
    "accel-bind", "compress", "msg-timeout", "threads", "treewidth", "bell",
    "no-bell", "wait-srun", "exact", "whole", "unbuffered", "resv-ports", "send-libs",
    "quit-on-interrupt", "disable-status", "slurmd-debug", "kill-command", "x11",
    "bcast", "bcast-exclude", "preserve-env", "epilog", "prolog", "task-epilog",
    "task-prolog", "hint",
})

# Ask for something Corral cannot give: refusing beats ignoring them.
ALLOC_UNSUPPORTED = frozenset({
    "autocomplete", "bb", "bbf", "cluster", "cluster-constraint", "clusters",
    "container", "core-spec", "cores-per-socket", "cpus-per-gpu", "deadline",
    "extra-node-info", "gpus-per-socket", "licenses",
    "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-socket", "ntasks-per-tres",
    "sockets-per-node", "switches", "test-only", "thread-spec",
    "threads-per-core", "het-group", "multi-prog", "no-allocate", "relative",
    "debugger-test", "interactive",
})


def parse_alloc_value(key: str, arg: str | None, v: dict[str, object], now: float,
                      cwd: str) -> object:
    """The value of one allocation option (its `key`), as sbatch parses it.

    Raises OptionValueError with Slurm's wording.  Keys with no special parsing come
    back as their text.
    """
    a = "" if arg is None else arg
    if key == "begin":
        return parse_begin(a, now)
    if key == "chdir":
        return full_path(a, cwd)
    if key in ("cpus-per-task", "ntasks", "ntasks-per-node", "mincpus"):
        return parse_int(f"--{key}", a, True)
    if key == "exclusive":
        mode = (arg or "exclusive").lower()
        if mode == "exclusive":
            return True
        if mode == "oversubscribe":
            return False
        if mode in ("user", "mcs"):
            raise OptionValueError(f"--exclusive={arg} is not supported by Corral", EXIT_ERROR)
        raise OptionValueError("Invalid --exclusive specification")
    if key in ("mem", "mem-per-cpu", "mem-per-gpu", "tmp"):
        mb = parse_mbytes(a)
        if mb is None:
            raise OptionValueError(f"Invalid --{key} specification")
        if key == "mem-per-gpu":  # a valid value, for a request Corral cannot honour
            raise OptionValueError("--mem-per-gpu is not supported by Corral", EXIT_ERROR)
        return mb
    if key in CHECKED_NO_EFFECT:
        check_no_effect_value(key, a)
        return a
    if key == "priority":
        return parse_priority(a)
    if key == "gres" and a.lower() in ("help", "list"):
        raise CliExit(0, stdout=GRES_HELP)
    if key == "nodes":
        return parse_node_count(a)
    if key == "signal":
        parse_signal(a)
        return a
    if key in ("time", "time-min"):
        return parse_time_limit(a, f"--{key}")
    if key == "mail-type":
        kinds = [k for k in str(v.get("mail-type", "")).split(",") if k]
        for k in parse_mail_type(a).split(","):
            if k != "NONE" and k not in kinds:
                kinds.append(k)
        return ",".join(kinds)
    if key == "nice":
        if arg is None:
            return 100
        parsed = _strtol(arg)
        n = parsed[0] if parsed is not None else 0
        if abs(n) > _INT_MAX - 2:
            raise OptionValueError(f"Invalid --nice value, out of range (+/- {_INT_MAX - 2})")
        return n
    return a


def gpu_request(v: dict[str, object]) -> tuple[int, int, int, str | None]:
    """(GPUs for the job, per node, per task, type) from --gres and --gpus*.

    Raises GresError for a request the controller would refuse.
    """
    gpus = per_node = per_task = 0
    gpu_type: str | None = None
    if "gres" in v:
        per_node, gpu_type = parse_gres(str(v["gres"]))
    for key in ("gpus", "gpus-per-node", "gpus-per-task"):
        if key not in v:
            continue
        count, kind = parse_gpu_request(str(v[key]))
        if key == "gpus":
            gpus = count
        elif key == "gpus-per-node":
            per_node = count
        else:
            per_task = count
        gpu_type = kind or gpu_type
    return gpus, per_node, per_task, gpu_type


# srun's options that ask for GPUs, whichever way (Slurm turns each into a step TRES request)
GPU_KEYS = ("gres", "gpus", "gpus-per-node", "gpus-per-task")


def drop_inherited_gpu_options(v: dict[str, object], src: dict[str, str]) -> None:
    """A GPU request on the command line, of any kind, replaces every GPU option that came
    from the environment.  srun(1): the command line always overrides environment
    variables; inside `salloc --gpus-per-node=4`, `srun --gres=gpu:2` asks for 2 GPUs, not
    for the allocation's SLURM_GPUS_PER_NODE too."""
    if any(src.get(k) == "cli" for k in GPU_KEYS if k in v):
        for k in GPU_KEYS:
            if k in v and src.get(k) != "cli":
                del v[k]


def step_gpu_options(v: dict[str, object], src: dict[str, str],
                     step_gres: str | None) -> dict[str, object]:
    """The GPU options of an srun step: those of `v`, or SLURM_STEP_GRES (srun(1): same as
    --gres, for job steps only, not for the allocation) when no GPU option was given on the
    command line and no --gres came from SLURM_GRES (which Slurm's srun reads first)."""
    given = {k: v[k] for k in GPU_KEYS if k in v}
    if not step_gres or "gres" in given or any(src.get(k) == "cli" for k in given):
        return given
    return {"gres": step_gres}


# What sbatch and salloc export for the GPU options they were given (Slurm 22.05's
# set_env_from_opts(), the option's text as given); --gres exports nothing of its own.
_GPU_OPTION_VARS = (("cpus-per-gpu", "SLURM_CPUS_PER_GPU"), ("gpus", "SLURM_GPUS"),
                    ("gpu-bind", "SLURM_GPU_BIND"), ("gpu-freq", "SLURM_GPU_FREQ"),
                    ("gpus-per-node", "SLURM_GPUS_PER_NODE"),
                    ("gpus-per-socket", "SLURM_GPUS_PER_SOCKET"),
                    ("gpus-per-task", "SLURM_GPUS_PER_TASK"))


def gpu_option_environment(v: dict[str, object]) -> dict[str, str]:
    """SLURM_GPUS, SLURM_GPUS_PER_NODE, SLURM_GPUS_PER_TASK, … for the options in `v`: the
    job's environment (sbatch) or the shell's (salloc) gets them, so that srun inside reads
    the job's request back; `--gres=gpu:N` sets none of them, as in Slurm."""
    out: dict[str, str] = {}
    for key, var in _GPU_OPTION_VARS:
        value = v.get(key)
        if value is not None and value != "":
            text = str(value)
            # --cpus-per-gpu is a number: Slurm prints it with %d
            out[var] = str(int(text)) if key == "cpus-per-gpu" and text.isdigit() else text
    return out


def node_list(expr: str, cwd: str) -> list[str]:
    """-w/-x: a hostlist expression, or a file of names when it contains a "/".

    Raises OSError for an unreadable file and ValueError for a bad expression.
    """
    if "/" in expr:
        return list(dict.fromkeys(read_hostfile(full_path(expr, cwd))))
    return list(dict.fromkeys(expand_hostlist(expr)))


def node_task_counts(v: dict[str, object], req_nodes: list[str], prog: str,
                     messages: list[str]) -> tuple[int, int, int, bool]:
    """(min nodes, max nodes (0: none), tasks, tasks given) as Slurm combines -N, -n,
    --ntasks-per-node and -w; a warning for more nodes than tasks goes to `messages`."""
    nodes_set = "nodes" in v
    pair: tuple[int, int] = v.get("nodes", (1, 0))  # type: ignore[assignment]
    min_nodes, max_nodes = pair
    if req_nodes:
        min_nodes = max(len(req_nodes), min_nodes) if nodes_set else len(req_nodes)
        nodes_set = True
    ntasks_set = "ntasks" in v
    ntasks = int(v.get("ntasks", 1))  # type: ignore[call-overload]
    per_node = v.get("ntasks-per-node")
    if per_node and not ntasks_set and (max_nodes == 0 or min_nodes == max_nodes):
        ntasks, ntasks_set = min_nodes * int(per_node), True  # type: ignore[call-overload]
    if nodes_set and (min_nodes == max_nodes or max_nodes == 0) and not ntasks_set:
        ntasks = max(min_nodes, 1)
    elif nodes_set and ntasks_set:
        if max_nodes and ntasks < max_nodes:
            max_nodes = ntasks
        if ntasks < min_nodes:
            messages.append(f"{prog}: Warning: can't run {ntasks} processes on "
                            f"{min_nodes} nodes, setting nnodes to {ntasks}")
            min_nodes = max_nodes = ntasks
    return min_nodes, max_nodes, ntasks, ntasks_set


def export_environment(export: str, env: dict[str, str]) -> dict[str, str]:
    """--export: ALL (everything), NONE (SLURM_* only), or a list of names (their current
    value) and NAME=value assignments, plus SLURM_*, and everything when ALL is listed."""
    tokens = split_quoted(export)
    upper = [t.upper() for t in tokens]
    if upper == ["ALL"]:
        return dict(env)
    if "ALL" in upper:
        out = dict(env)
    else:
        out = {k: val for k, val in env.items() if k.startswith("SLURM_")}
    for tok, up in zip(tokens, upper, strict=True):
        if up in ("ALL", "NONE") or not tok:
            continue
        name, eq, value = tok.partition("=")
        if eq:
            out[name] = value
        elif name in env:
            out[name] = env[name]
    return out


def _option_keys(*fields: str) -> tuple[tuple[str, str], ...]:
    """(field, option key) pairs from model/jobspec.py's FIELDS; a name that is not a
    field, or a field no option sets, fails at import."""
    out = []
    for name in fields:
        key = BY_NAME[name].option_key
        if key is None:
            raise ImportError(f"no option sets job spec field {name!r}")
        out.append((name, key))
    return tuple(out)


# The job spec fields whose value is the parsed option's value itself.
_FROM_OPTION = _option_keys(
    "partition", "ntasks_per_node", "cpus_per_task", "mem_per_node", "mem_per_cpu",
    "time_limit", "time_min", "exclusive", "dependency", "begin_time", "signal", "mail_type",
    "mail_user", "comment", "work_dir", "account", "qos", "nice")
# acctg_freq: sbatch's jobs are sampled at it (agent.usage); srun and salloc ignore it
_BATCH_FROM_OPTION = _option_keys("requeue", "hint", "acctg_freq")
# sent only when given: an absent one keeps the controller's default
_FROM_OPTION_IF_GIVEN = _option_keys("constraint", "priority", "min_cpus", "min_tmp_disk",
                                     "reservation", "overcommit")
_COMPUTED = frozenset({"name", "batch", "num_nodes", "max_nodes", "num_tasks", "gpus",
                       "gpus_per_node", "gpus_per_task", "gpu_type", "req_nodes", "exc_nodes",
                       "stdout", "stderr", "stdin", "command", "submit_line", "held"})
if not _COMPUTED <= FIELD_NAMES:
    raise ImportError(f"not job spec fields: {sorted(_COMPUTED - FIELD_NAMES)}")


def job_spec(v: dict[str, object], *, name: str, cwd: str, submit_line: str,
             req_nodes: list[str], exc_nodes: list[str], min_nodes: int, max_nodes: int,
             ntasks: int, gpus: tuple[int, int, int, str | None], nodes_given: bool = True,
             batch: tuple[str, str | None, str, str | None] | None = None,
             ) -> dict[str, object]:
    """The job spec that sbatch, salloc and srun (outside a job) send: `v` holds the parsed
    options by key, the other arguments what the command derived from them.

    `batch` is (stdout, stderr, stdin, command) for sbatch; it adds the batch-only fields
    (those and --requeue, --hint).  Without it the spec is an interactive allocation:
    `batch` false, no output files, --cpus-per-task 1 when not given (sbatch leaves it out,
    so the partition's DefCpuPerGPU may apply).  Without `nodes_given` (no -N, no -w) the
    node count is left out: the controller spreads the tasks over as many nodes as they
    need, as Slurm does (its min_nodes NO_VAL)."""
    spec: dict[str, object] = {
        "name": name,
        "num_nodes": min_nodes if nodes_given else None,
        "max_nodes": max_nodes if max_nodes and max_nodes != min_nodes else None,
        "num_tasks": ntasks,
        "gpus": gpus[0],
        "gpus_per_node": gpus[1],
        "gpus_per_task": gpus[2],
        "gpu_type": gpus[3],
        "req_nodes": req_nodes,
        "exc_nodes": exc_nodes,
        "submit_line": submit_line,
        "held": "user" if v.get("hold") else None,
    }
    defaults: dict[str, object] = {"exclusive": False, "nice": 0, "work_dir": cwd,
                                   "cpus_per_task": None if batch else 1}
    for field, key in _FROM_OPTION:
        spec[field] = v.get(key, defaults.get(field))
    spec["mail_type"] = spec["mail_type"] or None  # --mail-type=NONE
    for field, key in _FROM_OPTION_IF_GIVEN:
        if key in v:
            spec[field] = v[key]
    if batch is None:
        spec["batch"] = False
    else:
        for field, key in _BATCH_FROM_OPTION:
            spec[field] = v.get(key)
        spec["stdout"], spec["stderr"], spec["stdin"], spec["command"] = batch
    if not spec.keys() <= FIELD_NAMES:  # the controller would refuse the submission
        raise ValueError(f"not job spec fields: {sorted(spec.keys() - FIELD_NAMES)}")
    return spec


def allocation_spec(v: dict[str, object], *, name: str, cwd: str, submit_line: str,
                    req_nodes: list[str], exc_nodes: list[str], min_nodes: int,
                    max_nodes: int, ntasks: int,
                    gpus: tuple[int, int, int, str | None],
                    nodes_given: bool = True) -> dict[str, object]:
    """`job_spec` of an interactive allocation (srun outside a job, salloc)."""
    return job_spec(v, name=name, cwd=cwd, submit_line=submit_line, req_nodes=req_nodes,
                    exc_nodes=exc_nodes, min_nodes=min_nodes, max_nodes=max_nodes,
                    ntasks=ntasks, gpus=gpus, nodes_given=nodes_given)


# --------------------------------------------------------------------------
# Options Corral accepts without acting on them: their values are still checked
# as Slurm checks them, so a script that Slurm refuses is refused here too.
# --------------------------------------------------------------------------

_DIST_BASES = frozenset(
    [a for a in ("block", "cyclic", "arbitrary", "hostfile")]
    + [f"{a}:{b}" for a in ("block", "cyclic") for b in ("block", "cyclic", "fcyclic")]
    + [f"{a}:{b}:{c}" for a in ("block", "cyclic") for b in ("block", "cyclic", "fcyclic")
       for c in ("block", "cyclic", "fcyclic")])


def _dist_ok(text: str) -> bool:
    """Slurm's _parse_dist_base(): node[:socket[:core]] with "*" defaults, then
    ",pack" or ",nopack"."""
    if not text or text[0] == ",":
        return False
    base, comma, flag = text.partition(",")
    parts = [p for p in base.split(":") if p]  # strtok drops empty fields
    if not parts or len(parts) > 3:
        return False
    out: list[str] = []
    sock = ""
    for i, tok in enumerate(parts):
        if tok == "*":
            tok = ("block", "cyclic", sock)[i]
        if i == 1:
            sock = tok
        out.append(tok)
    if ":".join(out).lower() not in _DIST_BASES:
        return False
    return not (comma and flag) or flag.lower() in ("pack", "nopack")


def _check_distribution(arg: str) -> None:
    if arg[:5].lower() == "plane":
        eq, size = arg.find("="), ""
        if eq >= 0:
            size = arg[eq + 1:]
        parsed = _strtol(size) if size else None
        if parsed is None or parsed[1] or not 0 < parsed[0] <= _INT_MAX:
            raise OptionValueError("Invalid plane size or size not specified\n"
                                   "{prog}: error: Invalid --distribution specification")
        return
    if not _dist_ok(arg):
        raise OptionValueError("Invalid --distribution specification")


_GOVERNORS = (("co", "Conservative"), ("perf", "Performance"), ("pow", "PowerSave"),
              ("user", "UserSpace"), ("onde", "OnDemand"), ("sche", "SchedUtil"))
# Slurm's default CpuFreqGovernors; Corral has no slurm.conf key to change it.
_ALLOWED_GOVERNORS = frozenset({"OnDemand", "Performance", "UserSpace"})


def _governor(text: str) -> str | None:
    low = text.lower()
    for prefix, name in _GOVERNORS:
        if low.startswith(prefix):
            return name
    return None


def _cpu_freq_ok(text: str) -> str | None:
    """A frequency or its synonyms; None (after Slurm's message) when invalid."""
    low = text.lower()
    if low.startswith(("lo", "him1", "highm1", "hi", "med")):
        return text
    import re

    m = re.match(r"\s*\+?(\d+)", text)
    if m and int(m.group(1)) > 0:
        return text
    return None


def _check_cpu_freq(arg: str) -> None:
    """Slurm's cpu_freq_verify_cmdline(): p1[-p2[:p3]]."""
    bad = "Invalid --cpu-freq argument"
    colon = arg.find(":")
    p3 = arg[colon + 1:] if colon >= 0 else None
    dash = arg.find("-")
    if dash >= 0:
        p1 = arg[:dash]
        p2: str | None = arg[dash + 1:colon] if colon > dash else arg[dash + 1:]
    else:
        p1, p2 = (arg[:colon] if colon >= 0 else arg), None
    govs: list[str] = []
    gov = _governor(p1)
    if gov is not None:
        if p3 is not None:
            raise OptionValueError(f"governor cannot be specified twice {p1}{{-}}:{p3} in "
                                   f"--cpu-freq\n{{prog}}: error: {bad}")
        govs.append(gov)
    elif _cpu_freq_ok(p1) is None:
        raise OptionValueError(f'unrecognized --cpu-freq argument "{p1}"\n'
                               f"{{prog}}: error: {bad}")
    if p2 is not None and _cpu_freq_ok(p2) is None:
        raise OptionValueError(f'unrecognized --cpu-freq argument "{p2}"\n'
                               f"{{prog}}: error: {bad}")
    if p3 is not None:
        if p2 is None:
            raise OptionValueError(f"gov on cpu-frec ({p3}) illegal without max\n"
                                   f"{{prog}}: error: {bad}")
        gov = _governor(p3)
        if gov is None:
            raise OptionValueError(f"illegal governor: {p3} on --cpu-freq\n"
                                   f"{{prog}}: error: {bad}")
        govs.append(gov)
    if govs and govs[-1] not in _ALLOWED_GOVERNORS:
        raise OptionValueError(f"governor of {arg} is not allowed in slurm.conf\n"
                               f"{{prog}}: error: {bad}")


def _check_profile(arg: str) -> None:
    """Slurm's acct_gather_profile_from_string(): a word it knows, anywhere in the text."""
    low = arg.lower()
    if not any(w in low for w in ("none", "all", "energy", "task", "lustre", "network")):
        raise OptionValueError(f"invalid --profile={arg} option")


def _freq_int(text: str) -> int:
    parsed = _strtol(text)
    return -1 if parsed is None else parsed[0]


def _check_acctg_freq(arg: str) -> None:
    """Slurm's validate_acctg_freq(): each comma item a number or TYPE=number."""
    bad = []
    for tok in (t for t in arg.split(",") if t):
        low = tok.lower()
        ok = _freq_int(tok) != -1
        for word in ("energy=", "task=", "filesystem=", "network="):
            at = low.find(word)
            if at >= 0 and _freq_int(tok[at + len(word):]) != -1:
                ok = True
        if not ok:
            bad.append(tok)
    if bad:
        raise OptionValueError("\n".join(
            ("{prog}: error: " if i else "") + f"Invalid --acctg-freq specification: {t}"
            for i, t in enumerate(bad)))


MEM_BIND_HELP = """\
Memory bind options:
    --mem-bind=         Bind memory to locality domains (ldom)
        nosort          avoid sorting pages at startup
        sort            sort pages at startup
        q[uiet]         quietly bind before task runs (default)
        v[erbose]       verbosely report binding before task runs
        no[ne]          don't bind tasks to memory (default)
        rank            bind by task rank
        local           bind to memory local to processor
        map_mem:<list>  specify a memory binding for each task
                        where <list> is <cpuid1>,<cpuid2>,...<cpuidN>
        mask_mem:<list> specify a memory binding mask for each tasks
                        where <list> is <mask1>,<mask2>,...<maskN>
        help            show this help message
"""

_MEM_BIND_WORDS = frozenset({"p", "prefer", "nosort", "sort", "q", "quiet", "v", "verbose",
                             "no", "none", "rank", "local"})
_BIND_VALUE_RE = LazyPattern(r"(?:0x)?[0-9a-fA-F]+(?:\*\d+)?")


def _check_mem_bind(arg: str) -> None:
    """Slurm's slurm_verify_mem_bind(): words, or map_mem/mask_mem with a value list."""
    import re

    # A comma followed by a value belongs to a map/mask list, as in Slurm.
    tokens = re.split(r",(?![0-9a-fA-F]*(?:,|$)|\d)", arg)
    for tok in tokens:
        low = tok.lower()
        if low == "help":
            raise CliExit(0, stdout=MEM_BIND_HELP)
        if low in _MEM_BIND_WORDS:
            continue
        for kind, prefixes in (("map_mem", ("map_mem", "mapmem")),
                               ("mask_mem", ("mask_mem", "maskmem"))):
            if low.startswith(prefixes):
                fields = re.split(r"[:=]", tok, maxsplit=2)
                values = fields[1] if len(fields) > 1 else ""
                if not values:
                    raise OptionValueError(f'missing list for "--mem-bind={kind}:<list>"')
                if not all(_BIND_VALUE_RE.fullmatch(x) for x in values.split(",") if x):
                    raise OptionValueError(f'unrecognized --mem-bind argument "{tok}"')
                break
        else:
            raise OptionValueError(f'unrecognized --mem-bind argument "{tok}"')


def _check_kill_on_invalid_dep(arg: str) -> None:
    if arg.lower() not in ("yes", "no"):
        raise OptionValueError("Invalid --kill-on-invalid-dep specification")


# Accepted without effect, and validated as Slurm validates them.
_NO_EFFECT_CHECKS = {
    "acctg-freq": _check_acctg_freq,
    "cpu-freq": _check_cpu_freq,
    "distribution": _check_distribution,
    "kill-on-invalid-dep": _check_kill_on_invalid_dep,
    "mem-bind": _check_mem_bind,
    "profile": _check_profile,
}
CHECKED_NO_EFFECT = frozenset(_NO_EFFECT_CHECKS)


def check_no_effect_value(key: str, arg: str | None) -> None:
    """Check the value of an option Corral ignores; raises OptionValueError (Slurm's text:
    a message spanning lines carries "{prog}" for the command's name on the later lines)."""
    check = _NO_EFFECT_CHECKS.get(key)
    if check is not None:
        check("" if arg is None else arg)


def parse_priority(arg: str) -> int:
    """--priority: a number below NO_VAL, or TOP (Slurm's arg_set_priority)."""
    if arg.strip().upper() == "TOP":
        return 0xFFFFFFFE - 1
    parsed = _strtol(arg)
    value = parsed[0] if parsed is not None else 0
    if value < 0:
        raise OptionValueError("Priority must be >= 0")
    if value >= 0xFFFFFFFE:
        raise OptionValueError(f"Priority must be < {0xFFFFFFFE}")
    return value


def check_constraint(text: str) -> bool:
    """Whether a --constraint parses as Slurm's build_feature_list() reads it:
    features joined by & (or ,) and |, one [..] set of alternatives, (..) groups,
    and *count after a feature."""
    text = text.replace(",", "&")
    feature = False
    bracket = paren = sets = 0
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "*":
            m = _STRTOL_RE.match(text, i + 1)
            if not feature or m is None or int(m.group()) <= 0 or paren:
                return False
            i = m.end()
            continue
        if ch in "&|":
            if not feature:
                return False
            feature = False
        elif ch == "[":
            if feature or bracket:
                return False
            bracket += 1
            sets += 1
        elif ch == "]":
            if not feature or not bracket:
                return False
            bracket -= 1
        elif ch == "(":
            if feature or paren:
                return False
            paren += 1
        elif ch == ")":
            if not feature or not paren:
                return False
            paren -= 1
        else:
            feature = True
        i += 1
    return sets <= 1 and bracket == 0 and paren == 0


# Slurm's job_desc string limits (_test_strlen in slurmctld), checked before sending:
# the fields slurmctld measures, with model/jobspec.py's limits.
_FIELD_LIMITS = tuple((f, BY_NAME[f].max_len) for f in (
    "account", "comment", "constraint", "dependency", "mail_user", "name", "partition", "qos",
    "stdout", "stderr", "stdin", "work_dir", "submit_line"))


def too_long_field(spec: dict[str, object]) -> str | None:
    """The first field of a job spec longer than Slurm allows, or None."""
    for key, limit in _FIELD_LIMITS:
        value = spec.get(key)
        if isinstance(value, str) and len(value.encode("utf-8", "surrogateescape")) > limit:
            return key
    return None


def spec_problem(spec: dict[str, object]) -> tuple[str, str] | None:
    """What slurmctld refuses in a job spec before looking at the cluster:
    (a line to print first, or "", Slurm's error text), or None when fine."""
    if spec.get("partition") == "":
        return "invalid partition specified: ", "Invalid partition name specified"
    if "constraint" in spec and not check_constraint(str(spec["constraint"])):
        return "", "Invalid feature specification"
    if too_long_field(spec) is not None:
        return "", TOO_LONG
    return None


IMMEDIATE_HELD = "Immediate execution impossible, insufficient priority"


def hetjob_refusal(prog: str, failed: str) -> CliExit:
    """Heterogeneous jobs: one line saying why, then Slurm's refusal."""
    return CliExit(EXIT_ERROR, (
        f"{prog}: error: heterogeneous jobs are not supported by Corral\n"
        f"{prog}: error: {failed}: Requested operation not supported on this system\n"))
