"""sacct: accounting records of jobs and their steps, formatted as Slurm 22.05 does.

`format_sacct` and the helpers around it are pure (job dicts + `now` in, text out);
`_main` parses the command line, asks the controller and prints.
"""

from __future__ import annotations

import os
import pwd
import sys
import time

from corral.cli import client
from corral.cli import gnugetopt as getopt
from corral.cli.fmt import escape, parse_width, stamp
from corral.cli.scontrol import job_resources, limit_str, mem_str, tres_string
from corral.lazyre import LazyPattern
from corral.model import hostlists
from corral.model.timefmt import format_hms
from corral.model.usage import StepUsage, job_cpu
from corral.model.usage import elapsed as usage_elapsed

# Annotations only: `typing` would cost every sacct start ~3 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PROG = "sacct"
SLURM_VERSION = "22.05.8"

DEFAULT_FIELDS = "jobid,jobname,partition,account,alloccpus,state,exitcode"
BRIEF_FIELDS = "jobid,state,exitcode"
LONG_FIELDS = (
    "jobid,jobidraw,jobname,partition,maxvmsize,maxvmsizenode,maxvmsizetask,avevmsize,maxrss,"
    "maxrssnode,maxrsstask,averss,maxpages,maxpagesnode,maxpagestask,avepages,mincpu,mincpunode,"
    "mincputask,avecpu,ntasks,alloccpus,elapsed,state,exitcode,avecpufreq,reqcpufreqmin,"
    "reqcpufreqmax,reqcpufreqgov,reqmem,consumedenergy,maxdiskread,maxdiskreadnode,"
    "maxdiskreadtask,avediskread,maxdiskwrite,maxdiskwritenode,maxdiskwritetask,avediskwrite,"
    "reqtres,alloctres,tresusageinave,tresusageinmax,tresusageinmaxn,tresusageinmaxt,"
    "tresusageinmin,tresusageinminn,tresusageinmint,tresusageintot,tresusageoutmax,"
    "tresusageoutmaxn,tresusageoutmaxt,tresusageoutave,tresusageouttot")


class UsageError(Exception):
    """Bad command line; the message is complete (Slurm's wording), exit code 1."""


class Field(tuple[str, int, bool]):
    """(name, width, numeric); not a typing.NamedTuple, whose import costs ~3 ms of start."""

    __slots__ = ()

    def __new__(cls, name: str, width: int, numeric: bool) -> Field:
        return super().__new__(cls, (name, width, numeric))

    @property
    def name(self) -> str:
        return self[0]

    @property
    def width(self) -> int:  # negative: left-justified
        return self[1]

    @property
    def numeric(self) -> bool:  # numbers are never truncated with '+'
        return self[2]

    def __repr__(self) -> str:
        return f"Field(name={self[0]!r}, width={self[1]!r}, numeric={self[2]!r})"


# Slurm 22.05's field table: name, default width, numeric.  The order matters: a field
# given on the command line matches the first name it is a prefix of.
_FIELD_TABLE: list[tuple[str, int, bool]] = [
    ("Account", 10, False), ("AdminComment", 15, False), ("AllocCPUS", 10, True),
    ("AllocNodes", 10, False), ("AllocTRES", 10, False), ("AssocID", 7, True),
    ("AveCPU", 10, False), ("AveCPUFreq", 10, False), ("AveDiskRead", 14, False),
    ("AveDiskWrite", 14, False), ("AvePages", 10, False), ("AveRSS", 10, False),
    ("AveVMSize", 10, False), ("BlockID", 16, False), ("Cluster", 10, False),
    ("Comment", 14, False), ("Constraints", 19, False), ("ConsumedEnergy", 14, False),
    ("ConsumedEnergyRaw", 17, True), ("Container", 19, False), ("CPUTime", 10, True),
    ("CPUTimeRAW", 10, True), ("DBIndex", -21, True), ("DerivedExitCode", 15, False),
    ("Elapsed", 10, True), ("ElapsedRaw", 10, True), ("Eligible", 19, False),
    ("End", 19, False), ("ExitCode", 8, False), ("Flags", 19, False), ("GID", 6, True),
    ("Group", 9, False), ("JobID", -12, False), ("JobIDRaw", -12, False),
    ("JobName", 10, False), ("Layout", 9, False), ("MaxDiskRead", 12, False),
    ("MaxDiskReadNode", 15, False), ("MaxDiskReadTask", 15, True),
    ("MaxDiskWrite", 12, False), ("MaxDiskWriteNode", 16, False),
    ("MaxDiskWriteTask", 16, True), ("MaxPages", 8, False), ("MaxPagesNode", 12, False),
    ("MaxPagesTask", 14, True), ("MaxRSS", 10, False), ("MaxRSSNode", 10, False),
    ("MaxRSSTask", 10, True), ("MaxVMSize", 10, False), ("MaxVMSizeNode", 14, False),
    ("MaxVMSizeTask", 14, True), ("McsLabel", 12, False), ("MinCPU", 10, False),
    ("MinCPUNode", 10, False), ("MinCPUTask", 10, True), ("NCPUS", 10, True),
    ("NNodes", 8, True), ("NodeList", 15, False), ("NTasks", 8, True),
    ("Partition", 10, False), ("Priority", 10, True), ("QOS", 10, False),
    ("QOSRAW", 6, True), ("Reason", 22, False), ("ReqCPUFreq", 10, False),
    ("ReqCPUFreqGov", 13, False), ("ReqCPUFreqMax", 13, False), ("ReqCPUFreqMin", 13, False),
    ("ReqCPUS", 8, True), ("ReqMem", 10, False), ("ReqNodes", 8, False),
    ("ReqTRES", 10, False), ("Reservation", 20, False), ("ReservationId", 8, True),
    ("Reserved", 10, True), ("Start", 19, False),
    ("State", 10, False), ("Submit", 19, False), ("SubmitLine", 20, False),
    ("Suspended", 10, True), ("SystemComment", 15, False), ("SystemCPU", 10, False),
    ("Timelimit", 10, False), ("TimelimitRaw", 10, False), ("TotalCPU", 10, False),
    ("TRESUsageInAve", 14, False), ("TRESUsageInMax", 14, False),
    ("TRESUsageInMaxNode", 18, False), ("TRESUsageInMaxTask", 18, False),
    ("TRESUsageInMin", 14, False), ("TRESUsageInMinNode", 18, False),
    ("TRESUsageInMinTask", 18, False), ("TRESUsageInTot", 14, False),
    ("TRESUsageOutAve", 15, False), ("TRESUsageOutMax", 15, False),
    ("TRESUsageOutMaxNode", 19, False), ("TRESUsageOutMaxTask", 19, False),
    ("TRESUsageOutMin", 15, False), ("TRESUsageOutMinNode", 19, False),
    ("TRESUsageOutMinTask", 19, False), ("TRESUsageOutTot", 15, False),
    ("UID", 6, True), ("User", 9, False), ("UserCPU", 10, False), ("WCKey", 10, False),
    ("WCKeyID", 10, True), ("WorkDir", 20, False),
]
FIELDS = [Field(n, w, num) for n, w, num in _FIELD_TABLE]


def parse_fields(spec: str) -> list[Field]:
    """"jobid,jobname%15,ALL" → fields (Slurm matches names by case-insensitive prefix)."""
    out: list[Field] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        width: int | None = None
        if "%" in item:
            item, _, w = item.partition("%")
            import re

            m = re.match(r"(-?)(\d+)", w)
            # Capped (cli/fmt.py MAX_WIDTH): "%999999999" must not print gigabytes of spaces.
            width = (-1 if m.group(1) else 1) * parse_width(m.group(2)) if m else 0
        low = item.lower()
        if low and "all".startswith(low):
            out += [Field(f.name, f.width if width is None else width, f.numeric)
                    for f in FIELDS]
            continue
        match = next((f for f in FIELDS if low and f.name.lower().startswith(low)), None)
        if match is None:
            raise UsageError(f'sacct: error: Invalid field requested: "{item}"')
        out.append(match if width is None else Field(match.name, width, match.numeric))
    return out


def help_fields(names: list[str] | None = None) -> str:
    """--helpformat: the field names (sacct's, or sstat's), four to a line."""
    out: list[str] = []
    for i, name in enumerate([f.name for f in FIELDS] if names is None else names):
        if i & 3:
            out.append(" ")
        elif i:
            out.append("\n")
        out.append(f"{name:<19}")
    return "".join(out) + "\n"


# ---------------------------------------------------------------------------
# time options (-S/-E)
# ---------------------------------------------------------------------------

def midnight(now: float) -> float:
    lt = time.localtime(now)
    return time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))


# ---------------------------------------------------------------------------
# selecting records
# ---------------------------------------------------------------------------

class Selection:
    """Which records to print, after the controller has answered.  (Plain classes, not
    dataclasses, in this module: importing `dataclasses` costs the CLI ~5 ms.)"""

    __slots__ = ("start", "end", "states", "names", "partitions", "job_ids")

    def __init__(self, start: float | None = None, end: float | None = None,
                 states: frozenset[str] | None = None, names: frozenset[str] | None = None,
                 partitions: frozenset[str] | None = None,
                 job_ids: list[tuple[str, str | None]] | None = None) -> None:
        self.start = start  # the time window; None = no window (-j without -S)
        self.end = end
        self.states = states
        self.names = names
        self.partitions = partitions
        self.job_ids = job_ids  # (job part, step) from -j


_ACTIVE = {"RUNNING", "SUSPENDED", "COMPLETING"}


def _time(job: dict[str, Any], key: str) -> float | None:
    value = job.get(key)
    return float(value) if value else None


def _in_window(job: dict[str, Any], sel: Selection, now: float) -> bool:
    start = sel.start
    end = sel.end if sel.end is not None else now
    eligible = _time(job, "eligible_time")
    job_start = _time(job, "start_time")
    job_end = _time(job, "end_time")
    state = str(job.get("state"))
    if sel.states:
        # Slurm's rules with -s: pending jobs eligible in the window, running jobs that ran
        # in it, finished jobs that ended in it.
        if state not in sel.states:
            return False
        if start is None:
            return True
        if state == "PENDING":
            return eligible is not None and eligible <= end and \
                (job_start is None or job_start >= start)
        if state in _ACTIVE:
            return job_start is not None and job_start <= end and \
                (job_end is None or job_end >= start)
        return job_end is not None and start <= job_end <= end
    if start is None:
        return sel.end is None or (eligible is not None and eligible < end)
    if job.get("array_tasks") is not None and _finished(state):
        # slurmdbd leaves a finished array remainder (tasks that never started) out of
        # time-window queries; it shows only when asked for by id (captures E04, E08c).
        return False
    return eligible is not None and eligible < end and (job_end is None or job_end >= start)


def _finished(state: str) -> bool:
    from corral.model.job import FINISHED_STATES  # rarely needed: keep it off the start path

    return state in {s.value for s in FINISHED_STATES}


def _selector_index(job: dict[str, Any], wanted: list[tuple[str, str | None]]) -> list[int]:
    """Indexes of the -j selectors that name this job."""
    keys = {str(job["job_id"]), job.get("display_id") or str(job["job_id"])}
    if job.get("array_job_id") is not None:
        keys.add(str(job["array_job_id"]))
        if job.get("array_task_id") is not None:
            keys.add(f"{job['array_job_id']}_{job['array_task_id']}")
    return [i for i, (jid, _) in enumerate(wanted) if jid in keys]


def select_jobs(jobs: list[dict[str, Any]], sel: Selection, now: float) -> list[dict[str, Any]]:
    out = []
    for job in jobs:
        if not _in_window(job, sel, now):
            continue
        if sel.names and job.get("name") not in sel.names:
            continue
        if sel.partitions and job.get("partition") not in sel.partitions:
            continue
        if sel.job_ids is not None and not _selector_index(job, sel.job_ids):
            continue
        out.append(job)
    if sel.job_ids:
        wanted = sel.job_ids

        def order(job: dict[str, Any]) -> tuple[int, int, int]:
            # Records in the order asked for; an array's tasks by task id, remainder last.
            meta = job.get("array_tasks") is not None
            return (min(_selector_index(job, wanted)), int(meta),
                    int(job.get("array_task_id") or 0))

        out.sort(key=order)
    return out


# ---------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------

class Context:
    __slots__ = ("now", "cluster", "tres_gpu")

    def __init__(self, now: float, cluster: str = "", tres_gpu: bool = True) -> None:
        self.now = now
        self.cluster = cluster
        self.tres_gpu = tres_gpu


if TYPE_CHECKING:
    Getter = Callable[[dict[str, Any], dict[str, Any] | None, Context], str]


def _job_elapsed(job: dict[str, Any], now: float) -> int:
    start = job.get("start_time")
    if start is None:
        return 0
    end = job.get("end_time") or now
    return max(0, int(end - start - float(job.get("suspended_secs") or 0)))


def _step_end(job: dict[str, Any], step: dict[str, Any]) -> float | None:
    return step.get("end_time") or job.get("end_time")


def _elapsed(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> int:
    if step is None:
        return _job_elapsed(job, ctx.now)
    start = step.get("start_time")
    if start is None:
        return 0
    return max(0, int((_step_end(job, step) or ctx.now) - start))


def _cpus(job: dict[str, Any], step: dict[str, Any] | None) -> int:
    return int(step.get("cpus") or 0) if step is not None else job_resources(job)["cpus"]


def _state(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
    if step is not None:
        return str(step.get("state", ""))
    state = str(job.get("state", ""))
    if state == "COMPLETING" and job.get("kill_reason") == "CANCELLED":
        # Slurm records a cancelled job CANCELLED at once, while its steps still end
        # (squeue shows CG until they are gone)
        state = "CANCELLED"
    if state == "CANCELLED" and job.get("cancelled_by") is not None:
        return f"CANCELLED by {job['cancelled_by']}"
    return state


def _step_nodes(job: dict[str, Any], step: dict[str, Any]) -> list[str]:
    return hostlists.expand(step.get("nodes") or "")


def _alloc_tres(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
    if step is None:
        res = job_resources(job)
        if not res["allocated"]:
            return ""
        return tres_string(res["cpus"], res["mem"], res["nodes"], res["gpus"],
                           gpu=ctx.tres_gpu, by_name=True)
    names = set(_step_nodes(job, step))
    allocs = [a for a in job.get("alloc") or [] if a["node"] in names]
    mem = sum(int(a["mem_mb"]) for a in allocs) if allocs else None
    gpus = sum(len(a.get("gpus") or []) for a in allocs)
    return tres_string(int(step.get("cpus") or 0), mem, len(names), gpus, billing=False,
                       gpu=ctx.tres_gpu, by_name=True)


def _req_tres(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
    if step is not None:
        return ""
    req = job_resources({**job, "alloc": []})
    return tres_string(req["cpus"], req["mem"], req["nodes"], req["gpus"], gpu=ctx.tres_gpu,
                       by_name=True)


def _req_mem(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
    if step is not None:
        return ""
    mem = job_resources({**job, "alloc": []})["mem"]
    return mem_str(mem) if mem else "0"


def _node_list(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
    if step is not None:
        return hostlists.compress(_step_nodes(job, step)) or "None assigned"
    return hostlists.compress(job.get("nodes") or []) or "None assigned"


def _derived_exit(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
    if step is not None:
        return ""
    worst = max(((int(s.get("exit_code") or 0), int(s.get("signal") or 0))
                 for s in job.get("steps") or []), default=(0, 0))
    return f"{worst[0]}:{worst[1]}"


def _submit_line(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
    """The job's submission; an srun step's own command line (batch and extern: none)."""
    return str((job if step is None else step).get("submit_line") or "")


def _job_only(key: str, fmt: Callable[[Any], str] = str) -> Getter:
    def get(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
        if step is not None:
            return ""
        value = job.get(key)
        return "" if value is None else fmt(value)
    return get


def _date(job_key: str, step_key: str | None) -> Getter:
    def get(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
        if step is None:
            value = job.get(job_key)
            if job_key == "eligible_time" and not value and job.get("state") == "PENDING":
                value = job.get("begin_time")  # waiting for --begin: eligible then
            return stamp(value, ctx.now)
        if step_key == "end":
            return stamp(_step_end(job, step), ctx.now)
        return stamp(step.get(step_key or "start_time"), ctx.now)
    return get


def _step_zero_job(job_value: str) -> Getter:
    """Statistics Slurm fills for steps (0 with no gatherer) and leaves to job rows."""
    def get(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
        return job_value if step is None else "0"
    return get


def _exit_code(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
    if step is not None:
        return f"{step.get('exit_code', 0)}:{step.get('signal', 0)}"
    return f"{job.get('exit_code', 0)}:{job.get('term_signal', 0)}"


def _timelimit_raw(limit: int) -> str:
    return "UNLIMITED" if limit is None or limit < 0 else str(int(limit) // 60)


GETTERS: dict[str, Getter] = {
    "JobID": lambda j, s, c: j.get("display_id") or str(j["job_id"]) if s is None
    else f"{j.get('display_id') or j['job_id']}.{s['step_id']}",
    "JobIDRaw": lambda j, s, c: str(j["job_id"]) if s is None else f"{j['job_id']}.{s['step_id']}",
    "JobName": lambda j, s, c: str(j.get("name", "")) if s is None else str(s.get("name", "")),
    "Partition": _job_only("partition"),
    "Account": lambda j, s, c: str(j.get("account") or ""),
    "AllocCPUS": lambda j, s, c: str(_cpus(j, s)),
    "NCPUS": lambda j, s, c: str(_cpus(j, s)),
    "AllocNodes": lambda j, s, c: str(len(_step_nodes(j, s)) if s is not None
                                      else len(j.get("nodes") or [])),
    "NNodes": lambda j, s, c: str(len(_step_nodes(j, s)) if s is not None
                                  else job_resources(j)["nodes"]),
    "AllocTRES": _alloc_tres,
    "ReqTRES": _req_tres,
    "ReqMem": _req_mem,
    "ReqCPUS": lambda j, s, c: "" if s is not None
    else str(job_resources({**j, "alloc": []})["cpus"]),
    "ReqNodes": _job_only("num_nodes"),
    "State": _state,
    "ExitCode": _exit_code,
    "DerivedExitCode": _derived_exit,
    "Elapsed": lambda j, s, c: format_hms(_elapsed(j, s, c)),
    "ElapsedRaw": lambda j, s, c: str(_elapsed(j, s, c)),
    "CPUTime": lambda j, s, c: format_hms(_elapsed(j, s, c) * _cpus(j, s)),
    "CPUTimeRAW": lambda j, s, c: str(_elapsed(j, s, c) * _cpus(j, s)),
    "Start": _date("start_time", "start_time"),
    "End": _date("end_time", "end"),
    "Submit": _date("submit_time", "start_time"),
    "Eligible": _date("eligible_time", "start_time"),
    "Timelimit": _job_only("time_limit", limit_str),
    "TimelimitRaw": _job_only("time_limit", _timelimit_raw),
    "NodeList": _node_list,
    "User": _job_only("user"),
    "UID": _job_only("uid"),
    "Group": _job_only("group"),
    "GID": _job_only("gid"),
    "WorkDir": _job_only("work_dir"),
    "SubmitLine": _submit_line,
    "Comment": _job_only("comment"),
    "Priority": _job_only("priority"),
    "QOS": _job_only("qos"),
    "Reservation": _job_only("reservation"),
    "Reason": _job_only("reason"),
    "Cluster": lambda j, s, c: c.cluster,
    "Suspended": lambda j, s, c: format_hms(0 if s is not None
                                            else float(j.get("suspended_secs") or 0)),
    "NTasks": lambda j, s, c: "" if s is None else str(s.get("ntasks", 1)),
    "AveCPUFreq": _step_zero_job(""),
    "ConsumedEnergy": _step_zero_job(""),
    "ConsumedEnergyRaw": _step_zero_job(""),
    "ReqCPUFreq": _step_zero_job("Unknown"),
    "ReqCPUFreqMin": _step_zero_job("Unknown"),
    "ReqCPUFreqMax": _step_zero_job("Unknown"),
    "ReqCPUFreqGov": _step_zero_job("Unknown"),
}


def _usage_field(name: str) -> Getter:
    """A step's measured use (model.usage); empty on the job's line, as in Slurm."""
    def get(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
        return "" if step is None else StepUsage(step.get("usage")).field(name)
    return get


def _cpu_time(which: str) -> Getter:
    """TotalCPU/UserCPU/SystemCPU: the step's, or the sum of the job's steps."""
    def get(job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
        if step is not None:
            u = StepUsage(step.get("usage"))
            if not u:
                return ""
            user, system = u.user(), u.system()
        else:
            both = job_cpu(job.get("steps") or [])
            if both is None:
                return ""
            user, system = both
        return usage_elapsed({"TotalCPU": user + system, "UserCPU": user,
                              "SystemCPU": system}[which], with_ms=True)
    return get


for _name in ("MaxRSS", "MaxRSSNode", "MaxRSSTask", "AveRSS", "AveCPU", "MinCPU", "MinCPUNode",
              "MinCPUTask", "MaxDiskRead", "MaxDiskReadNode", "MaxDiskReadTask", "AveDiskRead",
              "MaxDiskWrite", "MaxDiskWriteNode", "MaxDiskWriteTask", "AveDiskWrite",
              "TRESUsageInAve", "TRESUsageInMax", "TRESUsageInTot", "TRESUsageOutAve",
              "TRESUsageOutMax", "TRESUsageOutTot"):
    GETTERS[_name] = _usage_field(_name)
for _name in ("TotalCPU", "UserCPU", "SystemCPU"):
    GETTERS[_name] = _cpu_time(_name)
# Everything else (virtual memory, pages, energy, WCKeys, reservations …) is not measured
# by Corral and prints empty, as Slurm does without a gatherer.


def _value(field: Field, job: dict[str, Any], step: dict[str, Any] | None, ctx: Context) -> str:
    get = GETTERS.get(field.name)
    # Names, comments and reasons come from users: never raw control characters.
    return escape(get(job, step, ctx)) if get is not None else ""


def _cell(field: Field, value: str) -> str:
    width = abs(field.width)
    if len(value) > width and not field.numeric:
        value = value[:width - 1] + "+"
    return value.ljust(width) if field.width < 0 else value.rjust(width)


def render(rows: list[list[str]], fields: list[Field], *, parsable: str | None = None,
           header: bool = True, delimiter: str = "|") -> str:
    """Lay rows out as sacct does: fixed width (parsable=None), "p" (trailing
    delimiter) or "P" (no trailing delimiter)."""
    lines: list[str] = []

    def emit(values: list[str]) -> None:
        if parsable == "P":
            lines.append(delimiter.join(values) + "\n")
        elif parsable == "p":
            lines.append("".join(v + delimiter for v in values) + "\n")
        else:
            lines.append("".join(_cell(f, v) + " " for f, v in zip(fields, values, strict=True))
                         + "\n")

    if header:
        if parsable:
            emit([f.name for f in fields])
        else:
            # Headers are cut to the width, without the '+' mark.
            emit([f.name[:abs(f.width)] for f in fields])
            lines.append("".join("-" * abs(f.width) + " " for f in fields) + "\n")
    for row in rows:
        emit(row)
    return "".join(lines)


def job_rows(job: dict[str, Any], fields: list[Field], ctx: Context, *, steps: bool = True,
             only_step: str | None = None) -> list[list[str]]:
    """The job's row and its steps' rows (or just the step asked for with -j J.S)."""
    rows: list[list[str]] = []
    if only_step is None:
        rows.append([_value(f, job, None, ctx) for f in fields])
    if steps or only_step is not None:
        for step in job.get("steps") or []:
            if only_step is None or str(step.get("step_id")) == only_step:
                rows.append([_value(f, job, step, ctx) for f in fields])
    return rows


def format_sacct(jobs: list[dict[str, Any]], fields: list[Field], ctx: Context, *,
                 steps: bool = True, parsable: str | None = None, header: bool = True,
                 delimiter: str = "|",
                 job_ids: list[tuple[str, str | None]] | None = None) -> str:
    """Everything sacct prints for already selected job records."""
    rows: list[list[str]] = []
    for job in jobs:
        only_step: str | None = None
        if job_ids:
            picks = [job_ids[i][1] for i in _selector_index(job, job_ids)]
            if picks and None not in picks:
                for step_id in dict.fromkeys(p for p in picks if p is not None):
                    rows += job_rows(job, fields, ctx, only_step=step_id)
                continue
        rows += job_rows(job, fields, ctx, steps=steps, only_step=only_step)
    return render(rows, fields, parsable=parsable, header=header, delimiter=delimiter)


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------

_JOB_ID_RE = LazyPattern(r"^(\d+(?:_(?:\d+|\[[\d,\-%]+\]))?)(?:\.(batch|extern|\d+))?$")


def parse_job_ids(text: str) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if item.isdigit() and item.isascii():  # a plain job id: what the pattern gives
            out.append((item, None))
            continue
        m = _JOB_ID_RE.match(item)
        if not m:
            raise UsageError(f"sacct: fatal: Bad job/step specified: {item}")
        out.append((m.group(1), m.group(2)))
    return out


def parse_states(text: str) -> frozenset[str]:
    from corral.model.job import parse_state

    names: set[str] = set()
    items = [s for s in text.split(",") if s.strip()]
    for i, item in enumerate(items):
        try:
            names.add(parse_state(item).value)
        except ValueError:
            shown = item if i < len(items) - 1 else f"'{item}'"
            raise UsageError(f"sacct: fatal: unrecognized job state value {shown}") from None
    return frozenset(names)


def _user_names(text: str) -> list[str]:
    names: list[str] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            names.append(pwd.getpwuid(int(item)).pw_name if item.isdigit()
                         else pwd.getpwnam(item).pw_name)
        except (KeyError, ValueError):
            if item.isdigit():
                names.append(item)
            else:
                raise UsageError(f"Invalid user id: {item}") from None
    return names


_SHORT = "aA:bcC:DeE:f:F:g:hi:I:j:k:K:lLM:nN:o:pPq:r:R:s:S:Ttu:UvVW:x:X"
_LONG = ["allusers", "accounts=", "allocations", "brief", "completion", "constraints=",
         "delimiter=", "duplicates", "federation", "helpformat", "help-fields", "endtime=",
         "file=", "flags=", "gid=", "group=", "help", "local", "name=", "nnodes=", "ncpus=",
         "jobs=", "timelimit-min=", "timelimit-max=", "long", "allclusters", "cluster=",
         "clusters=", "nodelist=", "noconvert", "units=", "noheader", "fields=", "format=",
         "parsable", "parsable2", "qos=", "partition=", "reason=", "state=", "starttime=",
         "truncate", "uid=", "usage", "user=", "verbose", "version", "wckeys=",
         "whole-hetjob=", "associations=", "array", "json", "yaml"]

_HELP = """\
sacct [<OPTION>]
    Valid <OPTION> values are:
     -a, --allusers:   Display jobs for all users. By default, only the current
                       user's jobs are displayed.  If ran by user root this is
                       the default.
     -b, --brief:      Equivalent to '--format=jobstep,state,error'.
     -D, --duplicates: Accepted; Corral never reuses job ids, so there are no
                       duplicates to show.
         --delimiter:  ASCII characters used to separate the fields when
                       specifying the -p or -P options. The default is '|'.
     -e, --helpformat: Print a list of fields that can be specified with the
                       '--format' option
     -E, --endtime:    Select jobs eligible before this time.
     -h, --help:       Print this description of use.
     -j, --jobs:       Format is <job(.step)>. Display information about this
                       job or comma-separated list of jobs.
     -l, --long:       Equivalent to a long '--format' list.
     -L, --allclusters: Display jobs ran on all clusters (Corral is one).
     -M, --clusters:   Only send data about these clusters (accepted, Corral is
                       one cluster).
         --name:       Display jobs that have any of these name(s).
     -n, --noheader:   No header will be added to the beginning of output.
     -o, --format:     Comma separated list of fields. (use "--helpformat"
                       for a list of available fields).
     -p, --parsable:   output will be '|' delimited with a '|' at the end
     -P, --parsable2:  output will be '|' delimited without a '|' at the end
     -r, --partition:  Comma separated list of partitions to select jobs from.
     -T, --truncate:   Accepted, no effect.
     -v, --verbose:    Accepted, no effect.
         --local, --federation, --noconvert, --units, --whole-hetjob, --array:
                       Accepted, no effect.
     -s, --state:      Select jobs based on their state during the time period
                       given: pending (pd), running (r), completed (cd),
                       cancelled (ca), failed (f), timeout (to), node_fail (nf),
                       out_of_memory (oom).
     -S, --starttime:  Select jobs eligible after this time.  Default is
                       00:00:00 of the current day, unless '-s' is set then
                       the default is 'now'.
     -u, --uid, --user: Use this comma separated list of uids or user names
                       to select jobs to display.
     -V, --version:    Print version.
     -X, --allocations: Only show statistics relevant to the job allocation
                       itself, not taking steps into consideration.

     Note, valid start/end time formats are...
                   HH:MM[:SS] [AM|PM]
                   MMDD[YY] or MM/DD[/YY] or MM.DD[.YY]
                   MM/DD[/YY]-HH:MM[:SS]
                   YYYY-MM-DD[THH:MM[:SS]]
                   now[{+|-}count[seconds(default)|minutes|hours|days|weeks]]
"""

# Options Corral accepts but whose selection it does not implement: refuse rather than
# silently print too much.
_UNSUPPORTED = {"-A": "--accounts", "-C": "--constraints", "-c": "--completion",
                "-f": "--file", "-F": "--flags", "-g": "--gid", "-i": "--nnodes",
                "-I": "--ncpus", "-k": "--timelimit-min", "-K": "--timelimit-max",
                "-q": "--qos", "-R": "--reason", "-W": "--wckeys", "-x": "--associations",
                "-N": "--nodelist", "--group": "--group",
                "--json": "--json", "--yaml": "--yaml"}


def _main(argv: list[str]) -> int:
    try:
        opts, args = getopt.gnu_getopt(argv, _SHORT, _LONG)
    except getopt.GetoptError as e:
        from corral.cli.scontrol import _getopt_error

        sys.stderr.write(_getopt_error(PROG, e) + "\n")
        return 1
    if args:
        sys.stderr.write("sacct: error: Unknown arguments:\n" +
                         "".join(f"sacct: error:  {a}\n" for a in args))
        return 1
    now = time.time()
    field_spec = ""
    brief = long_ = all_users = no_steps = False
    parsable: str | None = None
    header = True
    delimiter = "|"
    users: list[str] | None = None
    sel = Selection()
    start: float | None = None
    end: float | None = None
    try:
        for opt, val in opts:
            if opt in ("-h", "--help"):
                sys.stdout.write(_HELP)
                return 0
            if opt == "--usage" or opt == "-U":
                sys.stdout.write("Usage: sacct [options]\n\tUse --help for help\n")
                return 0
            if opt in ("-e", "--helpformat", "--help-fields"):
                sys.stdout.write(help_fields())
                return 0
            if opt in ("-V", "--version"):
                sys.stdout.write(f"slurm {SLURM_VERSION}\n")
                return 0
            if opt in _UNSUPPORTED or opt in _UNSUPPORTED.values():
                sys.stderr.write(f"sacct: error: {_UNSUPPORTED.get(opt, opt)} is not "
                                 "supported by Corral yet\n")
                return 1
            if opt in ("-a", "--allusers"):
                all_users = True
            elif opt in ("-b", "--brief"):
                brief = True
            elif opt in ("-l", "--long"):
                long_ = True
            elif opt in ("-X", "-t", "--allocations"):
                no_steps = True
            elif opt in ("-n", "--noheader"):
                header = False
            elif opt in ("-p", "--parsable"):
                parsable = "p"
            elif opt in ("-P", "--parsable2"):
                parsable = "P"
            elif opt == "--delimiter":
                delimiter = val
            elif opt in ("-o", "--format", "--fields"):
                field_spec += val + ","
            elif opt in ("-j", "--jobs"):
                sel.job_ids = (sel.job_ids or []) + parse_job_ids(val)
            elif opt in ("-u", "--user", "--uid"):
                if val == "-1":
                    all_users = True
                else:  # after -a, as in sacct: the last of -a and -u wins
                    all_users = False
                    users = (users or []) + _user_names(val)
            elif opt in ("-s", "--state"):
                sel.states = (sel.states or frozenset()) | parse_states(val)
            elif opt in ("-S", "--starttime", "-E", "--endtime"):
                from corral.model.timeparse import TimeParseError, parse_time

                try:
                    stamp = parse_time(val, now, past=True)
                except TimeParseError as e:
                    msg = e.message or f"Invalid time specification (pos=0): {val}"
                    sys.stderr.write(f"sacct: error: {msg}\n")
                    return 1
                if opt in ("-S", "--starttime"):
                    start = stamp
                else:
                    end = stamp
            elif opt == "--name":
                sel.names = frozenset(n for n in val.split(",") if n)
            elif opt in ("-r", "--partition"):
                sel.partitions = frozenset(p for p in val.split(",") if p)
        if brief:
            field_spec += BRIEF_FIELDS + ","
        if long_:
            field_spec += LONG_FIELDS + ","
        if not field_spec:
            field_spec = os.environ.get("SACCT_FORMAT") or DEFAULT_FIELDS
        fields = parse_fields(field_spec)
    except UsageError as e:
        sys.stderr.write(f"{e}\n")
        return 1

    # Slurm's default window: since midnight today, or since now with -s; none with -j.
    if start is None and not sel.job_ids:
        start = now if sel.states else midnight(now)
    sel.start, sel.end = start, end
    if sel.job_ids or os.getuid() == 0:
        all_users = all_users or users is None
    if users is None and not all_users:
        users = [pwd.getpwuid(os.getuid()).pw_name]

    params: dict[str, Any] = {}
    if sel.job_ids:
        params["ids"] = ",".join(dict.fromkeys(j for j, _ in sel.job_ids))
    if all_users:
        params["all_users"] = 1
    elif users:
        params["users"] = ",".join(users)
    if sel.states:
        params["states"] = ",".join(sorted(sel.states))
    if start is not None:
        params["start"] = int(start)
    if end is not None:
        params["end"] = int(end)
    try:
        ans = client.get("/v1/accounting", **params)
    except client.ApiError as e:
        if e.status != 404:
            raise
        ans = {"jobs": []}  # an unknown job id: sacct prints just the header
    jobs = ans.get("jobs") or []
    now = float(ans.get("now") or now)
    ctx = Context(now=now)
    names = {f.name for f in fields}
    if jobs and names & {"Cluster", "AllocTRES", "ReqTRES"}:
        from corral.cli.scontrol import _tres_gpu

        cfg = client.get("/v1/config")
        ctx.cluster = str(cfg.get("cluster_name") or "")
        ctx.tres_gpu = _tres_gpu(cfg)
    selected = select_jobs(jobs, sel, now)
    sys.stdout.write(format_sacct(selected, fields, ctx, steps=not no_steps, parsable=parsable,
                                  header=header, delimiter=delimiter, job_ids=sel.job_ids))
    return 0


def job_text(job_id: str, ans: dict[str, Any]) -> str:
    """What `sacct -j JOBID` prints (that option alone, SACCT_FORMAT unset) from the
    controller's answer to GET /v1/accounting?ids=JOBID&all_users=1, as _main prints it
    (the controller prints that form with it: controller/api_text.py)."""
    sel = Selection()
    sel.job_ids = parse_job_ids(job_id)
    now = float(ans.get("now") or time.time())
    return format_sacct(select_jobs(ans.get("jobs") or [], sel, now),
                        parse_fields(DEFAULT_FIELDS), Context(now=now), steps=True,
                        parsable=None, header=True, delimiter="|", job_ids=sel.job_ids)


def main(argv: list[str] | None = None) -> int:
    return client.run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
