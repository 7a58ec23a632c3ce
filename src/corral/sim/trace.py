"""Workload traces for the simulator: the Standard Workload Format, a GPU-job CSV and a
`sacct --parsable2` export (corral.sim.sacct).

Both become a list of `TraceJob`s, in submission order, with times in seconds from the
trace's start.  A malformed line is a `TraceError` naming the file and line.

SWF (https://www.cs.huji.ac.il/labs/parallel/workload/swf.html): one job per line, 18
whitespace-separated fields; `;` starts a header comment.  Used: submit time (2), run time
(4), requested processors (8, else allocated 5), requested time (9), requested memory per
processor in KB (10), user (12), group (13, the account), partition (16).  A job without a
requested time gets its run time as its limit (exact estimates); jobs with no run time or
no processors (cancelled before they ran) are skipped, as SWF's users usually do.

CSV: a header row, then one job per row.  Columns (aliases in parentheses): `submit`
(submit_s, submit_time), `run_time` (duration, duration_s, runtime), `time_limit`
(limit, timelimit; default the run time), `gpus`, `cpus` (default 1; fractions round up),
`mem_mb` (mem, mem_mib, memory; default 0: the partition's default), `user`, `account`,
`partition`, `qos` (submitted with `--qos`: preemption is replayed).  Extra columns are ignored, so exports such as `gpu_trace_sample.csv` read as is.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path


class TraceError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class TraceJob:
    submit: float  # seconds from the trace's start
    run_time: float  # how long it runs if not killed
    time_limit: float  # seconds; the job ends TIMEOUT there if it runs longer
    cpus: int = 1  # in all
    gpus: int = 0  # in all
    mem_mb: int = 0  # in all; 0: the partition's default
    user: str = "user"
    account: str = ""
    partition: str = ""
    qos: str = ""  # submitted with --qos (preemption, sched/preempt.py); "": the default


@dataclass(frozen=True, slots=True)
class SwfHeader:
    max_nodes: int = 0
    max_procs: int = 0


def _open_text(path: Path) -> io.TextIOBase:
    try:
        if path.suffix == ".gz":
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
        return open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
    except OSError as e:
        raise TraceError(f"{path}: {e.strerror or e}") from None


def read_swf(path: Path) -> tuple[list[TraceJob], SwfHeader]:
    jobs: list[TraceJob] = []
    max_nodes = max_procs = 0
    with _open_text(path) as f:
        try:
            for lineno, line in enumerate(f, 1):
                text = line.strip()
                if not text:
                    continue
                if text.startswith(";"):
                    key, _, value = text[1:].partition(":")
                    if key.strip() == "MaxNodes" and value.strip().isdigit():
                        max_nodes = int(value)
                    elif key.strip() == "MaxProcs" and value.strip().isdigit():
                        max_procs = int(value)
                    continue
                job = _swf_job(text, path, lineno)
                if job is not None:
                    jobs.append(job)
        except (OSError, EOFError, UnicodeError) as e:  # a truncated or corrupt .gz
            raise TraceError(f"{path}: cannot read: {e}") from None
    jobs.sort(key=lambda j: j.submit)
    return jobs, SwfHeader(max_nodes, max_procs)


def _swf_job(text: str, path: Path, lineno: int) -> TraceJob | None:
    fields = text.split()
    if len(fields) != 18:
        raise TraceError(f"{path}:{lineno}: expected 18 SWF fields, found {len(fields)}")
    try:
        v = [float(x) for x in fields]
    except ValueError:
        raise TraceError(f"{path}:{lineno}: SWF fields must be numbers") from None
    submit, run, alloc, req, req_time, req_mem = v[1], v[3], v[4], v[7], v[8], v[9]
    procs = int(req if req > 0 else alloc)
    if run < 0 or procs <= 0 or submit < 0:
        return None
    limit = req_time if req_time > 0 else run
    mem = int(req_mem * procs / 1024) if req_mem > 0 else 0
    user = f"u{int(v[11])}" if v[11] >= 0 else "user"
    account = f"g{int(v[12])}" if v[12] >= 0 else ""
    partition = f"p{int(v[15])}" if v[15] >= 0 else ""
    return TraceJob(submit, run, max(1.0, limit), procs, 0, mem, user, account, partition)


_ALIASES = {
    "submit": ("submit", "submit_s", "submit_time"),
    "run_time": ("run_time", "runtime", "duration", "duration_s"),
    "time_limit": ("time_limit", "timelimit", "limit"),
    "gpus": ("gpus",),
    "cpus": ("cpus",),
    "mem_mb": ("mem_mb", "mem", "mem_mib", "memory"),
    "user": ("user",),
    "account": ("account",),
    "partition": ("partition",),
    "qos": ("qos",),
}


def read_csv(path: Path) -> list[TraceJob]:
    with _open_text(path) as f:
        try:
            rows = csv.reader(f)
            header = next(rows, None)
            if header is None:
                raise TraceError(f"{path}: empty file (a header row is required)")
            names = [h.strip().lower() for h in header]
            col: dict[str, int] = {}
            for key, aliases in _ALIASES.items():
                for a in aliases:
                    if a in names:
                        col[key] = names.index(a)
                        break
            for need in ("submit", "run_time"):
                if need not in col:
                    raise TraceError(f"{path}: no {need} column (header: {','.join(names)})")
            jobs = [job for lineno, row in enumerate(rows, 2)
                    if (job := _csv_job(row, col, path, lineno)) is not None]
        except csv.Error as e:
            raise TraceError(f"{path}: {e}") from None
        except (OSError, EOFError, UnicodeError) as e:
            raise TraceError(f"{path}: cannot read: {e}") from None
    jobs.sort(key=lambda j: j.submit)
    return jobs


def _csv_job(row: list[str], col: dict[str, int], path: Path, lineno: int) -> TraceJob | None:
    if not row or all(not c.strip() for c in row):
        return None

    def cell(key: str) -> str:
        i = col.get(key)
        return row[i].strip() if i is not None and i < len(row) else ""

    def number(key: str, default: float | None = None) -> float:
        text = cell(key)
        if not text:
            if default is None:
                raise TraceError(f"{path}:{lineno}: {key} is missing")
            return default
        try:
            value = float(text)
        except ValueError:
            raise TraceError(f"{path}:{lineno}: {key} is not a number: {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise TraceError(f"{path}:{lineno}: {key} must be a number >= 0: {text!r}")
        return value

    submit = number("submit")
    run = number("run_time")
    limit = number("time_limit", run)
    return TraceJob(submit=submit, run_time=run, time_limit=max(1.0, limit),
                    cpus=max(1, math.ceil(number("cpus", 1))),
                    gpus=math.ceil(number("gpus", 0)),
                    mem_mb=math.ceil(number("mem_mb", 0)),
                    user=cell("user") or "user", account=cell("account"),
                    partition=cell("partition"), qos=cell("qos"))


def read_trace(path: Path) -> tuple[list[TraceJob], SwfHeader | None]:
    """A trace by its name: `.swf` or `.swf.gz` is SWF, anything else CSV."""
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    name = path.name.lower()
    if name.endswith(".swf") or name.endswith(".swf.gz"):
        return read_swf(path)
    from corral.sim.sacct import is_sacct, read_sacct

    with _open_text(path) as f:
        try:
            first = f.readline()
        except (OSError, EOFError, UnicodeError) as e:
            raise TraceError(f"{path}: cannot read: {e}") from None
    if is_sacct(first):
        return read_sacct(path), None
    return read_csv(path), None


def first_jobs(jobs: list[TraceJob], count: int) -> list[TraceJob]:
    """The first `count` jobs; a shorter trace is repeated end to end (each copy shifted by
    the trace's span) until there are enough."""
    if count <= len(jobs) or not jobs:
        return jobs[:count]
    span = max(j.submit for j in jobs) - min(j.submit for j in jobs) + 1.0
    return list(_cycled(jobs, span, count))


def _cycled(jobs: Iterable[TraceJob], span: float, count: int) -> Iterator[TraceJob]:
    base = list(jobs)
    copy = 0
    while True:
        for j in base:
            if count <= 0:
                return
            yield replace(j, submit=j.submit + copy * span)
            count -= 1
        copy += 1
