"""The %-format engine shared by squeue and sinfo.

Slurm prints each field through one routine (`_print_str` in squeue/sinfo):
right-justified fields are printed with "%Ns" and then cut to N characters,
left-justified ones with "%.Ns" (cut by the precision) and padded, fields
without a width are printed whole.  A few node-list fields are printed with
cutting switched off, which only changes right-justified output.  Null strings
go through glibc's printf, which prints "(null)" unless the precision is under
six, where it prints nothing; a `None` value reproduces that.

It also holds what squeue, sinfo, scontrol and sacct print alike: timestamps in the
user's SLURM_TIME_FORMAT (`stamp`, the one place that reads the environment), control
characters escaped (`escape`), field widths capped (`MAX_WIDTH`), Slurm's refusal of an
unknown -M cluster and the reason an ended job shows.  The rest is pure: specs into
`Field`s, values into text.
"""

from __future__ import annotations

import os
import sys
import time

from corral.cli import gnugetopt as getopt
from corral.model.timefmt import format_timestamp, time_format_error

# `typing` and `collections.abc` are for the type checker only: every CLI start
# would pay for importing them (see tests/unit/test_cli_imports.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

    Getter = Callable[[Any], str | None]

NULL = None  # a value that Slurm prints from a NULL char*

# The widest field Corral prints.  Slurm takes any width ("%999999999i") and crashes or
# writes gigabytes; Corral prints such a field this wide instead (docs/COMPATIBILITY.md).
MAX_WIDTH = 1024


def parse_width(digits: str) -> int:
    """A field width from its digits, capped at MAX_WIDTH (and never int() of 5,000 digits)."""
    digits = digits.lstrip("0")
    if len(digits) > len(str(MAX_WIDTH)):
        return MAX_WIDTH
    return min(int(digits or "0"), MAX_WIDTH)


_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def escape(text: str) -> str:
    r"""`text` with control characters written out, so a job name cannot drive the terminal.

    Slurm prints names, comments and reasons raw: an escape sequence in a job's name moves
    the cursor, rewrites other lines or sets the terminal's title for whoever runs squeue.
    Corral prints every character that is not printable (C0 and C1 controls, DEL, Unicode
    format characters such as bidi overrides, separators other than the space) as
    `\t`, `\n`, `\r`, `\xNN`, `\uNNNN` or `\UNNNNNNNN`; printable text, a backslash
    included, is printed as is, so every name Slurm prints cleanly prints the same.
    """
    if text.isprintable():  # the common case, checked in C
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
            continue
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def cluster_error(prog: str, names: str, from_env: bool, mine: str) -> str | None:
    """Slurm's refusal of an unknown -M/--clusters (or SLURM_CLUSTERS) name, or None.

    Corral is one cluster: its own name (any case) or "all" selects it; other names get
    print_db_notok's message.
    """
    for name in (n.strip() for n in names.split(",")):
        if name and name.lower() not in ("all", mine.lower()):
            return (f"{prog}: error: '{name}' can't be reached now, or it is an invalid entry "
                    f"for {'SLURM_CLUSTERS' if from_env else '--cluster'}.  "
                    "Use 'sacctmgr list clusters' to see available clusters.\n")
    return None


class ClusterRefused(Exception):
    """-M/--clusters named another cluster: Slurm's refusal is on stderr (exit 1)."""


def asked_cluster(prog: str, names: str | None, from_env: bool) -> str | None:
    """This cluster's name when -M/--clusters (or SLURM_CLUSTERS: `from_env`) names it,
    None without -M; any other name writes Slurm's refusal (`cluster_error`) to stderr
    and raises ClusterRefused.  Asks the controller for its name."""
    if names is None or not names.strip():
        return None
    from corral.cli import client

    mine = str(client.get("/v1/config").get("cluster_name") or "")
    error = cluster_error(prog, names, from_env, mine)
    if error:
        sys.stderr.write(error)
        raise ClusterRefused(names)
    return mine


# Why a job ended, as slurmctld records it (job_reason_string of FAIL_*): shown as Reason=
# by scontrol and squeue once the job has ended, where the controller sends no reason.
_END_REASONS = {"FAILED": "NonZeroExitCode", "TIMEOUT": "TimeLimit", "NODE_FAIL": "NodeDown",
                "OUT_OF_MEMORY": "OutOfMemory", "DEADLINE": "DeadLine", "BOOT_FAIL": "BootFail"}
# Reasons a job had while it waited: left over once it ended, they say nothing.
_WAIT_REASONS = {"", "None", "Resources", "Priority", "BeginTime", "Dependency"}
# States squeue shows as "(reason)" in %R instead of the node list (_print_job_reason_list).
REASON_STATES = frozenset({"PENDING", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE"})


def pending_node_count(job: dict[str, Any]) -> int:
    """A pending job's node count as squeue %D and scontrol's NumNodes= show it: the nodes
    it asked for, or more when its tasks (or GPUs) need more (node_cnt_wag: the submit
    test's, or backfill's plan)."""
    return max(int(job.get("num_nodes") or 1), int(job.get("node_cnt_wag") or 0),
               len(job.get("sched_nodes") or ()))


def job_reason(job: dict[str, Any]) -> str:
    """The job's Reason: the controller's, or for an ended job why it ended."""
    reason = str(job.get("reason") or "None")
    ended = _END_REASONS.get(str(job.get("state")))
    if ended is not None and reason in _WAIT_REASONS:
        return ended
    return reason


_warned_formats: set[str] = set()


def stamp(ts: float | None, now: float | None = None, none: str = "Unknown") -> str:
    """A timestamp in the user's SLURM_TIME_FORMAT (standard, relative or strftime).

    An unusable value is reported once, as Slurm does, and the standard format printed.
    """
    spec = os.environ.get("SLURM_TIME_FORMAT")
    if spec and spec not in _warned_formats:
        error = time_format_error(spec)
        if error:
            _warned_formats.add(spec)
            prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "slurm"
            sys.stderr.write(f"{prog}: error: {error}\n")
    return format_timestamp(ts, none=none, spec=spec,
                            now=time.time() if now is None else now)


class Field:
    """One column: `key` is a %-letter or a -O field name (lower case)."""

    # A plain class, not a dataclass: `dataclasses` costs ~10 ms of start time.
    __slots__ = ("key", "width", "right", "suffix", "literal")

    def __init__(self, key: str, width: int = 0, right: bool = False, suffix: str = "",
                 literal: str | None = None) -> None:
        self.key = key
        self.width = width
        self.right = right
        self.suffix = suffix
        self.literal = literal  # an invalid token, printed verbatim on every line

    def _astuple(self) -> tuple[str, int, bool, str, str | None]:
        return (self.key, self.width, self.right, self.suffix, self.literal)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Field):
            return NotImplemented
        return self._astuple() == other._astuple()

    def __repr__(self) -> str:
        return (f"Field(key={self.key!r}, width={self.width!r}, right={self.right!r}, "
                f"suffix={self.suffix!r}, literal={self.literal!r})")


class Format:
    __slots__ = ("prefix", "fields", "invalid")

    def __init__(self, prefix: str, fields: list[Field], invalid: list[str]) -> None:
        self.prefix = prefix
        self.fields = fields
        self.invalid = invalid  # the keys Slurm reports as an invalid format specification

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Format):
            return NotImplemented
        return (self.prefix, self.fields, self.invalid) == (other.prefix, other.fields,
                                                            other.invalid)

    def __repr__(self) -> str:
        return (f"Format(prefix={self.prefix!r}, fields={self.fields!r}, "
                f"invalid={self.invalid!r})")


def parse_percent(spec: str, valid: Iterable[str]) -> Format:
    """Parse "-o" specs like '%.18i %9P "%j"'.

    Text before the first % is a prefix; each %-token is [.]width letter suffix.
    Runs of % collapse (Slurm splits with strtok); an unknown letter is printed
    back as its own token text.
    """
    known = set(valid)
    prefix, sep, rest = spec.partition("%")
    fields: list[Field] = []
    invalid: list[str] = []
    if not sep:
        return Format(prefix, fields, invalid)
    for token in rest.split("%"):
        if not token:
            continue
        i = 0
        right = token.startswith(".")
        if right:
            i = 1
        j = i
        while j < len(token) and token[j].isdigit():
            j += 1
        width = parse_width(token[i:j]) if j > i else 0
        letter = token[j:j + 1]
        suffix = token[j + 1:]
        if letter and letter in known:
            fields.append(Field(letter, width, right, suffix))
        else:
            invalid.append(letter)
            fields.append(Field(letter, literal="%" + token))
    return Format(prefix, fields, invalid)


def parse_long(spec: str, valid: Iterable[str], default_width: int = 20) -> Format:
    """Parse "-O" specs like 'jobid:10,name:.30|,state'.

    Each comma-separated item is name[:[.]width[suffix]]; names are
    case-insensitive; without a colon the width is 20, left-justified; with a
    colon but no digits it is 0 (unpadded), as Slurm's strtol reads it.  Unknown names
    are reported and print nothing.
    """
    known = set(valid)
    fields: list[Field] = []
    invalid: list[str] = []
    for item in spec.split(","):
        if not item:
            continue
        name, sep, tail = item.partition(":")
        key = name.strip().lower()
        width, right, suffix = default_width, False, ""
        if sep:
            i = 0
            if tail.startswith("."):
                right, i = True, 1
            j = i
            while j < len(tail) and tail[j].isdigit():
                j += 1
            # Slurm reads the width with strtol: "name:" or "name:|" (no digits) means
            # width 0, i.e. the value unpadded and uncut (what Open OnDemand relies on).
            width = parse_width(tail[i:j]) if j > i else 0
            suffix = tail[j:]
        if key in known:
            fields.append(Field(key, width, right, suffix))
        else:
            invalid.append(name)
    return Format("", fields, invalid)


class Whole(str):
    """A value Slurm prints without cutting it to the width (node lists)."""

    __slots__ = ()


def fit(value: str | None, width: int, right: bool, cut: bool = True) -> str:
    """One field exactly as Slurm's _print_str prints it (control characters escaped)."""
    if value is None:
        # glibc: "%.Ns" with a NULL string prints nothing when N < 6.
        value = "" if (width and not right and width < 6) else "(null)"
    elif not value.isprintable():
        value = Whole(escape(value)) if isinstance(value, Whole) else escape(value)
    if width == 0:
        return value
    if right:
        text = value.rjust(width)
        if cut and not isinstance(value, Whole):
            text = text[:width]
        return text
    return value[:width].ljust(width)


def renderer(fmt: Format, getter_for: Callable[[Field], Getter]) -> Callable[[Any], str]:
    """A function printing one line of `fmt` for a record.

    `getter_for(field)` is asked once per field for a function record → value,
    so the per-line work is only the calls and the padding (squeue prints
    10,000 lines within its time budget).
    """
    prefix = fmt.prefix
    cells: list[tuple[Getter | None, int, bool, str]] = []
    for f in fmt.fields:
        if f.literal is not None:
            cells.append((None, 0, False, f.literal))
        else:
            cells.append((getter_for(f), f.width, f.right, f.suffix))

    def line(record: Any) -> str:
        out = [prefix]
        for getter, width, right, suffix in cells:
            if getter is None:
                out.append(suffix)
                continue
            out.append(fit(getter(record), width, right))
            out.append(suffix)
        return "".join(out)

    return line


# ---- command-line option parsing with glibc getopt_long's wording --------

class UsageError(Exception):
    """A bad option: `message` is what glibc's getopt prints after "prog: "."""


def getopt_long(argv: Sequence[str], shortopts: str,
                longopts: Sequence[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """getopt.gnu_getopt with glibc's error messages (for Slurm-identical errors)."""
    try:
        return getopt.gnu_getopt(list(argv), shortopts, list(longopts))
    except getopt.GetoptError as e:
        raise UsageError(_glibc_message(e, argv, longopts)) from None


def _glibc_message(e: getopt.GetoptError, argv: Sequence[str], longopts: Sequence[str]) -> str:
    opt = e.opt
    msg = e.msg
    is_long = len(opt) > 1 or any(a.startswith("--" + opt) for a in argv if a.startswith("--"))
    if "not a unique prefix" in msg:
        names = [n.rstrip("=") for n in longopts if n.startswith(opt)]
        return (f"option '--{opt}' is ambiguous; possibilities:"
                + "".join(f" '--{n}'" for n in names))
    if "requires argument" in msg:
        if is_long and len(opt) > 1:
            return f"option '--{opt}' requires an argument"
        return f"option requires an argument -- '{opt}'"
    if "must not have an argument" in msg:
        return f"option '--{opt}' doesn't allow an argument"
    if len(opt) > 1 or any(a == "--" + opt or a.startswith("--" + opt + "=") for a in argv):
        return f"unrecognized option '--{opt}'"
    return f"invalid option -- '{opt}'"
