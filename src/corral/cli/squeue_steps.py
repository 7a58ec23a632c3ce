"""squeue -s/--steps: the running steps, printed as Slurm 22.05 prints them.

The pure part (`parse_step_ids`, `step_records`, `format_steps`) turns the controller's job
records (each with its `steps`) into text; `steps_main` parses the options, asks the
controller and prints.  Imported only when squeue is given -s/--steps.
"""

from __future__ import annotations

import os
import sys
import time

from corral.cli import client
from corral.cli.fmt import (
    Format,
    UsageError,
    Whole,
    fit,
    getopt_long,
    parse_long,
    parse_percent,
    stamp,
)
from corral.cli.squeue import (
    ALL_FORMAT,
    LONG,
    SHORT,
    USAGE,
    _err,
    _Exit,
    _parse_job_ids,
    _parse_states,
    _valid_users,
)
from corral.model.timefmt import format_duration

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    Step = dict[str, Any]

# squeue.c's step format when no -o/-O is given (SQUEUE_FORMAT does not apply to steps).
STEP_FORMAT = "%.15i %.8j %.9P %.8u %.9M %N"

# Steps that squeue lists: those of jobs holding their nodes (a pending step is left out).
_LISTED_JOB_STATES = ("RUNNING", "SUSPENDED", "COMPLETING")


def _step_id(s: Step) -> str:
    if s.get("array_job_id") is not None and s.get("array_task_id") is not None:
        return f"{s['array_job_id']}_{s['array_task_id']}.{s['step_id']}"
    return f"{s['job_id']}.{s['step_id']}"


def _secs(seconds: float) -> str:
    """Slurm's _print_secs: M:SS, H:MM:SS, D-HH:MM:SS."""
    return format_duration(int(seconds))


def _time_used(s: Step, now: float) -> str:
    return _secs(max(0.0, now - float(s.get("start_time") or now)))


def _start(s: Step, now: float) -> str:
    return stamp(s["start_time"], now) if s.get("start_time") else "N/A"


# letter -> (header, value(step, now), printed whole (never cut to the width))
STEP_COLUMNS: dict[str, tuple[str, Callable[[Step, float], str | None], bool]] = {
    "A": ("TASKS", lambda s, _n: str(s.get("ntasks") or 1), False),
    "b": ("TRES_PER_JOB", lambda _s, _n: None, False),  # Corral keeps no per-step TRES
    "i": ("STEPID", lambda s, _n: _step_id(s), False),
    "j": ("NAME", lambda s, _n: s.get("name") or "", False),
    "l": ("TIME_LIMIT", lambda _s, _n: "UNLIMITED", False),  # steps have no limit of their own
    "M": ("TIME", _time_used, True),
    "N": ("NODELIST", lambda s, _n: s.get("nodes") or "", True),
    "P": ("PARTITION", lambda s, _n: s.get("partition") or "", False),
    "S": ("START_TIME", _start, False),
    "U": ("UID", lambda s, _n: str(s.get("uid", "")), False),
    "u": ("USER", lambda s, _n: s.get("user") or "", False),
}

# -O names (case-insensitive) -> a letter above, or (header, value) of their own
LONG_STEP_FIELDS: dict[str, str | tuple[str, Callable[[Step, float], str | None]]] = {
    "numtasks": "A", "gres": "b", "tres-per-node": "b", "stepid": "i", "stepname": "j",
    "timelimit": "l", "timeused": "M", "nodes": "N", "partition": "P", "starttime": "S",
    "userid": "U", "username": "u",
    "jobid": ("JOB_ID", lambda s, _n: str(s["job_id"])),
    # a plain job's step carries array job id 0 in Slurm's step records, and prints it
    "arrayjobid": ("ARRAY_JOB_ID", lambda s, _n: str(s.get("array_job_id") or 0)),
    "arraytaskid": ("ARRAY_TASK_ID", lambda s, _n: "N/A" if s.get("array_task_id") is None
                    else str(s["array_task_id"])),
    "numcpus": ("NUM_CPUS", lambda s, _n: str(s.get("cpus") or 0)),
    "stepstate": ("STATE", lambda s, _n: s.get("state") or "RUNNING"),
}


def _column(key: str) -> tuple[str, Callable[[Step, float], str | None], bool, bool]:
    """(header, value, whole, header left-justified) of a %-letter or an -O name."""
    entry = LONG_STEP_FIELDS.get(key, key)
    if isinstance(entry, tuple):
        return entry[0], entry[1], False, False
    header, value, whole = STEP_COLUMNS[entry]
    # Slurm prints START_TIME's header left-justified and NODELIST's uncut, whatever the field
    return header, value, whole, entry == "S"


def parse_step_format(text: str | None, long_text: str | None) -> Format:
    """-o/-O for steps (default STEP_FORMAT); invalid fields reported as Slurm reports them."""
    if long_text is not None:
        fmt = parse_long(long_text, LONG_STEP_FIELDS)
        for name in fmt.invalid:
            _err(f"Invalid job step format specification: {name}")
        return fmt
    text = text or STEP_FORMAT
    if text.lower() == "%all":  # every letter; those steps lack are left out without a word
        fmt = parse_percent(ALL_FORMAT, STEP_COLUMNS)
        return Format(fmt.prefix, [f for f in fmt.fields if f.literal is None], [])
    fmt = parse_percent(text, STEP_COLUMNS)
    for letter in fmt.invalid:
        _err(f"Invalid job step format specification: {letter}")
    return fmt


def parse_step_ids(text: str) -> list[tuple[int, int | None, str]]:
    """--steps=J.S,J_T.S,... -> (job id, array task or None, step id); errors as Slurm's."""
    wanted: list[tuple[int, int | None, str]] = []
    for item in text.split(","):
        if not item:
            continue
        job, dot, step = item.partition(".")
        if not job:
            break
        if not dot:
            _err(f"Invalid job_step id: {job}.??")
            raise _Exit(1)
        base, sep, task = job.partition("_")
        step = step.split(".")[0]
        if (not base.isdigit() or int(base) <= 0 or (sep and not task.isdigit())
                or not (step.isdigit() or step in ("batch", "extern"))):
            _err(f"Invalid job_step id: {job}.{step}")
            raise _Exit(1)
        wanted.append((int(base), int(task) if sep else None, step))
    return wanted


def _job_matches(s: Step, job_id: int, task: int | None) -> bool:
    """squeue's match of a job (or array task) id against a step's job."""
    if task is None:
        return job_id in (s["job_id"], s.get("array_job_id"))
    return s.get("array_job_id") == job_id and s.get("array_task_id") == task


def step_records(jobs: Sequence[dict[str, Any]],
                 jobs_wanted: Sequence[tuple[int, int | None]] | None = None,
                 steps_wanted: Sequence[tuple[int, int | None, str]] | None = None,
                 ) -> list[Step]:
    """The running steps of `jobs` (each merged with its job's fields), filtered by -j and
    --steps, in Slurm's default order: partition, then job and step id (batch, extern last)."""
    out: list[Step] = []
    for job in jobs:
        if job.get("state") not in _LISTED_JOB_STATES:
            continue
        for st in job.get("steps") or []:
            if st.get("end_time") is not None:
                continue
            s = {**job, **st, "job_id": job["job_id"], "state": st.get("state") or "RUNNING"}
            if jobs_wanted is not None and not any(_job_matches(s, j, t) for j, t in jobs_wanted):
                continue
            if steps_wanted is not None and not any(
                    step == str(s["step_id"]) and _job_matches(s, j, t)
                    for j, t, step in steps_wanted):
                continue
            out.append(s)

    def order(s: Step) -> tuple[str, int, int, str]:
        sid = str(s["step_id"])
        return (s.get("partition") or "", int(s["job_id"]),
                int(sid) if sid.isdigit() else 1 << 30, sid)

    return sorted(out, key=order)


def format_steps(steps: Sequence[Step], now: float, fmt: Format, header: bool = True) -> str:
    """The header (unless -h) and one line of `fmt` per step record."""
    cells = [_column(f.key) for f in fmt.fields if f.literal is None]
    lines: list[str] = []

    def line(s: Step | None) -> str:
        out = [fmt.prefix]
        it = iter(cells)
        for f in fmt.fields:
            if f.literal is not None:
                out.append(f.literal)
                continue
            title, value, whole, left_title = next(it)
            if s is None:
                out.append(fit(title, f.width, f.right and not left_title,
                               cut=title != "NODELIST"))
            else:
                v = value(s, now)
                out.append(fit(Whole(v) if whole and v is not None else v, f.width, f.right))
            out.append(f.suffix)
        return "".join(out) + "\n"

    if header:
        lines.append(line(None))
    lines.extend(line(s) for s in steps)
    return "".join(lines)


def _normalized(argv: Sequence[str]) -> list[str]:
    """-s takes an optional list, which getopt cannot say: spell it --steps=LIST."""
    norm = []
    for a in argv:
        if a in ("-s", "--steps", "--step"):
            norm.append("--steps=")
        elif a.startswith("-s") and not a.startswith("--"):
            norm.append("--steps=" + a[2:])
        elif a.startswith("--step="):
            norm.append("--steps=" + a[len("--step="):])
        else:
            norm.append(a)
    return norm


def steps_main(argv: Sequence[str]) -> int:
    """squeue -s/--steps [list]: the steps of running jobs."""
    try:
        opts_list, rest = getopt_long(_normalized(argv), SHORT, LONG)
    except UsageError as e:
        sys.stderr.write(f"squeue: {e}\nTry \"squeue --help\" for more information\n")
        return 1
    header = True
    fmt_text: str | None = None
    long_text: str | None = None
    steps_wanted: list[tuple[int, int | None, str]] | None = None
    jobs_wanted: list[tuple[int, int | None]] | None = None
    params: dict[str, str] = {
        "fields": "job_id,state,partition,user,uid,steps,array_job_id,array_task_id"}
    no_users = False
    try:
        for opt, val in opts_list:
            if opt in ("-h", "--noheader"):
                header = False
            elif opt == "--steps":
                if val:
                    steps_wanted = (steps_wanted or []) + parse_step_ids(val)
            elif opt in ("-o", "--format"):
                if long_text is not None:
                    _err("-o (--format) is incompatible with -O (--Format)")
                    return 1
                fmt_text = val
            elif opt in ("-O", "--Format"):
                if fmt_text is not None:
                    _err("-O (--Format) is incompatible with -o (--format)")
                    return 1
                long_text = val
            elif opt in ("-u", "--user", "--users"):
                users = _valid_users(val)
                no_users = not users
                if users:
                    params["users"] = ",".join(users)
            elif opt == "--me":
                import pwd

                params["users"] = pwd.getpwuid(os.getuid()).pw_name
            elif opt in ("-j", "--jobs", "--job"):
                ids, _tasks = _parse_job_ids(val)
                jobs_wanted = [(int(i.partition("_")[0]),
                                int(i.partition("_")[2]) if "_" in i else None) for i in ids]
                params["ids"] = ",".join(str(j) for j, _t in jobs_wanted)
            elif opt in ("-p", "--partition", "--partitions"):
                params["partitions"] = val
            elif opt in ("-t", "--states", "--state"):
                # Slurm 22.05 checks the states but does not filter steps by them: it lists
                # every running step whatever -t says.
                _parse_states(val)
            elif opt in ("--help", "--usage", "-V", "--version"):
                from corral.cli.squeue import _main

                return _main([opt])
            elif opt in ("-v", "--verbose", "-a", "--all", "--hide", "--local",
                         "--federation", "--sib", "--sibling"):
                pass  # change nothing here
            else:
                sys.stderr.write(f"squeue: error: {opt} is not supported by Corral "
                                 "with --steps\n")
                return 1
        if rest:  # squeue -s J.S: the list as an argument, in place of -s's
            steps_wanted = parse_step_ids(rest[0])
            if len(rest) > 1:
                _err(f"Unrecognized option: {rest[1]}")
                sys.stdout.write(USAGE)
                return 1
        fmt = parse_step_format(fmt_text, long_text)
    except _Exit as e:
        return e.code
    jobs: list[dict[str, Any]] = []
    now = time.time()
    if not no_users:
        try:
            answer = client.get("/v1/jobs", **params)
        except client.ApiError as e:
            # Slurm loads every step and filters them: an unknown job just lists nothing
            if e.status != 404 and "Invalid job id" not in e.message:
                raise
        else:
            jobs = answer.get("jobs", [])
            now = float(answer.get("now") or now)
    records = step_records(jobs, jobs_wanted, steps_wanted)
    sys.stdout.write(format_steps(records, now, fmt, header))
    sys.stdout.flush()
    return 0
