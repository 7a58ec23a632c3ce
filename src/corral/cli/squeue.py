"""squeue: the job queue, printed as Slurm 22.05 prints it.

`format_jobs()` is the pure part (job dicts + `now` → text); `main()` parses
options, asks the controller for just the fields the format needs, and prints.
"""

from __future__ import annotations

import os
import pwd
import sys
import time

from corral.cli import client
from corral.cli.fmt import (
    REASON_STATES,
    ClusterRefused,
    Field,
    Format,
    UsageError,
    Whole,
    asked_cluster,
    fit,
    getopt_long,
    job_reason,
    parse_long,
    parse_percent,
    pending_node_count,
    renderer,
    stamp,
)
from corral.model.arrays import format_task_ids
from corral.model.hostlists import compress
from corral.model.jobspec import mbytes_exact, pn_min_cpus
from corral.model.timefmt import format_duration
from corral.model.units import format_mem_mb

# Annotations only: `typing` would cost every squeue start ~3 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from corral.cli.fmt import Getter

    Job = dict[str, Any]

DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"
DEFAULT_SORT = "P,t,-p"

Value = str | None  # None prints as C's NULL string: "(null)"

# States squeue shows when no -t is given (Slurm: pending, running, suspended,
# completing, configuring…; finished jobs are left out).
_ACTIVE = {"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED"}
_ON_NODES = {"RUNNING", "SUSPENDED", "COMPLETING"}


# ---- field values -------------------------------------------------------

# corral.model.job's STATE_CODES as plain strings (the controller's kept squeue text uses
# it too): importing that module (enum, dataclasses) would cost squeue ~15 ms of its start;
# test_cli_imports.py checks that the two tables agree.
CODE_OF_STATE = {"PENDING": "PD", "RUNNING": "R", "SUSPENDED": "S", "COMPLETING": "CG",
                 "COMPLETED": "CD", "CANCELLED": "CA", "FAILED": "F", "TIMEOUT": "TO",
                 "NODE_FAIL": "NF", "PREEMPTED": "PR", "OUT_OF_MEMORY": "OOM", "BOOT_FAIL": "BF",
                 "DEADLINE": "DL", "REQUEUED": "RQ"}
_STATE_OF_CODE = {code: state for state, code in CODE_OF_STATE.items()}


def _code(j: Job) -> str:
    state = str(j.get("state", "PENDING"))
    return CODE_OF_STATE.get(state, state)


def _pending(j: Job) -> bool:
    return j.get("state") == "PENDING"


def _run_seconds(j: Job, now: float) -> float:
    start = j.get("start_time")
    if start is None or _pending(j):
        return 0.0
    end = j.get("end_time")
    if end is None:
        end = now
    if j.get("state") == "SUSPENDED" and j.get("suspend_time"):
        end = j["suspend_time"]
    return max(0.0, end - start - (j.get("suspended_secs") or 0.0))


def _limit(j: Job) -> str:
    return format_duration(j.get("time_limit", -1), limit=True)


def _time_left(j: Job, now: float) -> str:
    limit = j.get("time_limit", -1)
    if limit is None or limit < 0:
        return "UNLIMITED"
    return format_duration(max(0, limit - int(_run_seconds(j, now))), limit=True)


def _nodes_text(names: list[str] | None) -> str:
    if names and len(names) == 1:
        return names[0]  # the common case, without the hostlist library
    return compress(names or [])


def _num_nodes(j: Job) -> str:
    if j.get("nodes") and not _pending(j):
        return str(len(j["nodes"]))
    return str(pending_node_count(j))


def _num_cpus(j: Job) -> str:
    if not _pending(j) and j.get("alloc_cpus"):
        return str(j["alloc_cpus"])
    # -O: one task's CPUs per node (slurmctld's min_cpus), as scontrol's NumCPUs=
    tasks = (j.get("num_nodes") or 1) if j.get("overcommit") and not j.get("gpus_per_task") \
        else (j.get("num_tasks") or 1)
    cpus = tasks * (j.get("cpus_per_task") or 1)
    # Slurm asks at least one CPU per requested node.
    return str(max(cpus, j.get("num_nodes") or 1))


def _min_memory(j: Job) -> str:
    mem = j.get("mem_per_node")
    if mem is None:
        mem = j.get("mem_per_cpu")
    if not mem:
        return "0"
    return format_mem_mb(mem)


def _tres_per_node(j: Job) -> str:
    n = j.get("gpus_per_node") or 0
    if not n:
        return "N/A"
    kind = f"gpu:{j['gpu_type']}" if j.get("gpu_type") else "gpu"
    return f"gres:{kind}:{n}"


def _reason_list(j: Job) -> str:
    # Slurm: pending, failed, timed-out, OOM and deadline jobs show "(reason)", others nodes.
    if j.get("state") not in REASON_STATES:
        return Whole(_nodes_text(j.get("nodes")))
    return f"({job_reason(j)})"


def _expected_start(j: Job, now: float) -> float | None:
    """A pending job's start as Slurm shows it: backfill's estimate, else its --begin time."""
    begin = j.get("begin_time")
    if begin and begin > now:
        return max(begin, j.get("sched_start") or 0)
    return j.get("sched_start")


def _start(j: Job, now: float) -> str:
    if _pending(j):
        return stamp(_expected_start(j, now), now, "N/A")
    return stamp(j.get("start_time"), now, "N/A")


def _end(j: Job, now: float) -> str:
    if _pending(j):
        sched, limit = _expected_start(j, now), j.get("time_limit", -1)
        if sched is None or limit is None or limit < 0:
            return "N/A"
        return stamp(sched + limit, now, "N/A")
    if j.get("end_time") is not None:
        return stamp(j["end_time"], now, "N/A")
    limit, start = j.get("time_limit", -1), j.get("start_time")
    if limit is None or limit < 0 or start is None:
        return "NONE"
    return stamp(start + limit + (j.get("suspended_secs") or 0), now, "NONE")


def _array_task(j: Job) -> str:
    if j.get("array_tasks") is not None:
        spec = format_task_ids(j["array_tasks"])
        if j.get("array_max_running"):
            spec += f"%{j['array_max_running']}"
        return spec
    if j.get("array_task_id") is not None:
        return str(j["array_task_id"])
    return "N/A"


def _or_null(v: Any) -> Value:
    return None if v in (None, "") else str(v)


def _dependency(job: Job) -> str:
    from corral.cli.depshow import dependency_str  # here: one module less at every start

    return dependency_str(job)


def _hosts_or_empty(v: list[str] | None) -> str:
    return compress(v) if v else ""


class Column:
    # Plain classes here, not dataclasses: `dataclasses` costs ~10 ms of start time.
    __slots__ = ("header", "needs", "value", "no_cut")

    def __init__(self, header: str, needs: tuple[str, ...], value: Callable[[Job, float], Value],
                 no_cut: bool = False) -> None:
        self.header = header
        self.needs = needs
        self.value = value
        self.no_cut = no_cut  # node lists are printed without cutting right-justified text


_C = Column
COLUMNS: dict[str, Column] = {
    "i": _C("JOBID", ("display_id", "array_job_id", "array_task_id", "array_tasks",
                      "array_max_running"), lambda j, n: j["display_id"]),
    "A": _C("JOBID", ("job_id",), lambda j, n: str(j["job_id"])),
    "F": _C("ARRAY_JOB_ID", ("job_id", "array_job_id"),
            lambda j, n: str(j.get("array_job_id") or j["job_id"])),
    "K": _C("ARRAY_TASK_ID", ("array_task_id", "array_tasks", "array_max_running"),
            lambda j, n: _array_task(j)),
    "j": _C("NAME", ("name",), lambda j, n: j.get("name", "")),
    "u": _C("USER", ("user",), lambda j, n: j.get("user", "")),
    "U": _C("UID", ("uid",), lambda j, n: str(j.get("uid", ""))),
    "g": _C("GROUP", ("group", "gid"), lambda j, n: j.get("group") or str(j.get("gid", ""))),
    "G": _C("GROUP", ("gid",), lambda j, n: str(j.get("gid", ""))),
    "a": _C("ACCOUNT", ("account",), lambda j, n: _or_null(j.get("account"))),
    "P": _C("PARTITION", ("partition",), lambda j, n: j.get("partition", "")),
    "t": _C("ST", ("state",), lambda j, n: _code(j)),
    "T": _C("STATE", ("state",), lambda j, n: str(j.get("state", ""))),
    "M": _C("TIME", ("state", "start_time", "end_time", "suspend_time", "suspended_secs"),
            lambda j, n: format_duration(_run_seconds(j, n))),
    "l": _C("TIME_LIMIT", ("time_limit",), lambda j, n: _limit(j)),
    "L": _C("TIME_LEFT", ("time_limit", "state", "start_time", "end_time", "suspend_time",
                          "suspended_secs"), _time_left),
    "D": _C("NODES", ("state", "nodes", "num_nodes", "node_cnt_wag", "sched_nodes"),
            lambda j, n: _num_nodes(j)),
    "C": _C("CPUS", ("state", "alloc_cpus", "num_tasks", "cpus_per_task", "num_nodes",
                     "overcommit", "gpus_per_task"),
            lambda j, n: _num_cpus(j)),
    "m": _C("MIN_MEMORY", ("mem_per_node", "mem_per_cpu"), lambda j, n: _min_memory(j)),
    "b": _C("TRES_PER_NODE", ("gpus_per_node", "gpu_type"), lambda j, n: _tres_per_node(j)),
    "R": _C("NODELIST(REASON)", ("state", "nodes", "reason"), lambda j, n: _reason_list(j)),
    "r": _C("REASON", ("state", "reason"), lambda j, n: job_reason(j)),
    "N": _C("NODELIST", ("nodes",), lambda j, n: _hosts_or_empty(j.get("nodes")), True),
    "S": _C("START_TIME", ("state", "start_time", "sched_start", "begin_time"), _start),
    "e": _C("END_TIME", ("state", "start_time", "end_time", "time_limit", "sched_start",
                         "begin_time", "suspended_secs"), _end),
    "V": _C("SUBMIT_TIME", ("submit_time",),
            lambda j, n: stamp(j.get("submit_time"), n, "N/A")),
    "Q": _C("PRIORITY", ("priority",), lambda j, n: str(j.get("priority", 0))),
    "p": _C("PRIORITY", ("priority",), lambda j, n: f"{(j.get('priority') or 0) / 2**32:.14f}"),
    "Z": _C("WORK_DIR", ("work_dir",), lambda j, n: _or_null(j.get("work_dir"))),
    "o": _C("COMMAND", ("command",), lambda j, n: _or_null(j.get("command"))),
    "c": _C("MIN_CPUS", ("cpus_per_task", "ntasks_per_node", "num_tasks", "min_cpus",
                         "overcommit"),
            lambda j, n: str(_min_cpus(j))),
    "d": _C("MIN_TMP_DISK", ("min_tmp_disk",),
            lambda j, n: mbytes_exact(int(j.get("min_tmp_disk") or 0))),
    "h": _C("OVER_SUBSCRIBE", ("exclusive",), lambda j, n: "NO" if j.get("exclusive") else "OK"),
    "f": _C("FEATURES", ("constraint",), lambda j, n: _or_null(j.get("constraint"))),
    "E": _C("DEPENDENCY", ("dependency", "dependency_text", "reason"),
            lambda j, n: _dependency(j)),
    "k": _C("COMMENT", ("comment",), lambda j, n: _or_null(j.get("comment"))),
    "y": _C("NICE", ("nice",), lambda j, n: str(j.get("nice", 0))),
    "x": _C("EXC_NODES", ("exc_nodes",), lambda j, n: _hosts_or_empty(j.get("exc_nodes")), True),
    "n": _C("REQ_NODES", ("req_nodes",), lambda j, n: _hosts_or_empty(j.get("req_nodes")), True),
    "q": _C("QOS", ("qos",), lambda j, n: _or_null(j.get("qos"))),
    "v": _C("RESERVATION", ("reservation",), lambda j, n: _or_null(j.get("reservation"))),
    "w": _C("WCKEY", (), lambda j, n: None),
    "W": _C("LICENSES", (), lambda j, n: None),
    "B": _C("EXEC_HOST", ("batch_host", "batch", "submit_host"), lambda j, n: (
        j.get("batch_host") if j.get("batch", True) else j.get("submit_host")) or "n/a"),
    "z": _C("S:C:T", (), lambda j, n: "*:*:*"),
    "H": _C("SOCKETS_PER_NODE", (), lambda j, n: "*"),
    "I": _C("CORES_PER_SOCKET", (), lambda j, n: "*"),
    "J": _C("THREADS_PER_CORE", (), lambda j, n: "*"),
    "O": _C("CONTIGUOUS", (), lambda j, n: "0"),
    "X": _C("CORE_SPEC", (), lambda j, n: "N/A"),
    "s": _C("", (), lambda j, n: ""),
    "Y": _C("SCHEDNODES", ("sched_nodes",),
            lambda j, n: compress(j["sched_nodes"]) if j.get("sched_nodes") else None, True),
}


def _min_cpus(j: Job) -> int:
    """pn_min_cpus: the CPUs every node gets: -c times --ntasks-per-node, or --mincpus."""
    return pn_min_cpus(int(j.get("cpus_per_task") or 1),
                       None if j.get("overcommit") else j.get("ntasks_per_node"),
                       int(j.get("num_tasks") or 1), j.get("min_cpus"))


def _secs(seconds: float) -> str:
    """_print_secs: M:SS, H:MM:SS, D-HH:MM:SS."""
    return format_duration(max(0, int(seconds)))


def _tres_alloc(j: Job) -> str:
    """TRES=, as scontrol prints it: what the job holds, or asks for while pending."""
    alloc = j.get("alloc") or []
    if alloc and not _pending(j):
        cpus = sum(int(a["cpus"]) for a in alloc)
        mem = sum(int(a["mem_mb"]) for a in alloc)
        nodes = len(alloc)
        gpus = sum(len(a.get("gpus") or []) for a in alloc)
    else:
        nodes = int(j.get("num_nodes") or 1)
        tasks = int(j.get("ntasks_per_node") or 0) * nodes or max(int(j.get("num_tasks") or 1),
                                                                  nodes)
        cpus = tasks * int(j.get("cpus_per_task") or 1)
        mem = int(j.get("mem_per_node") or 0) * nodes or int(j.get("mem_per_cpu") or 0) * cpus
        gpus = int(j.get("gpus") or 0) or int(j.get("gpus_per_node") or 0) * nodes \
            or int(j.get("gpus_per_task") or 0) * tasks
    text = f"cpu={cpus}"
    if mem:
        text += f",mem={format_mem_mb(mem)}"
    text += f",node={nodes},billing={cpus}"
    if gpus:
        text += f",gres/gpu={gpus}"
    return text


def _gres_req(j: Job, key: str) -> str:
    n = j.get(key) or 0
    if not n:
        return "N/A"
    kind = f"gpu:{j['gpu_type']}" if j.get("gpu_type") else "gpu"
    return f"gres:{kind}:{n}"


def _pending_time(j: Job, now: float) -> str:
    start, submit = j.get("start_time"), float(j.get("submit_time") or now)
    return str(int((start if start and start < now else now) - submit))


def _std_path(j: Job, key: str) -> Value:
    if key == "stdin":
        return _or_null(j.get("stdin"))
    if key == "stderr" and not j.get("batch", True):
        return "N/A"
    path = j.get(key) or (j.get("stdout") if key == "stderr" else None)
    return path or f"{j.get('work_dir') or ''}/slurm-{j['job_id']}.out"


_NA: Callable[[Job, float], Value] = lambda j, n: "N/A"  # noqa: E731
_NULL: Callable[[Job, float], Value] = lambda j, n: None  # noqa: E731
_ZERO: Callable[[Job, float], Value] = lambda j, n: "0"  # noqa: E731

# Fields only -O names (no %-letter); keys are the -O names themselves.
COLUMNS.update({
    "cpus-per-task": _C("CPUS_PER_TASK", ("cpus_per_task",),
                        lambda j, n: str(j.get("cpus_per_task") or 1)),
    "eligibletime": _C("ELIGIBLE_TIME", ("eligible_time", "begin_time", "state"),
                       lambda j, n: stamp(j.get("eligible_time") or (
                           j.get("begin_time") if _pending(j) else None), n, "N/A")),
    "accruetime": _C("ACCRUE_TIME", ("eligible_time",),
                     lambda j, n: stamp(j.get("eligible_time"), n, "N/A")),
    "lastschedeval": _C("LAST_SCHED_EVAL", ("last_sched_eval",),
                        lambda j, n: stamp(j.get("last_sched_eval"), n, "N/A")),
    "pendingtime": _C("PENDING_TIME", ("submit_time", "start_time"), _pending_time),
    "exit_code": _C("EXIT_CODE", ("exit_code", "term_signal"),
                    lambda j, n: f"{j.get('exit_code') or 0}:{j.get('term_signal') or 0}"),
    "numtasks": _C("TASKS", ("num_tasks", "ntasks_per_node", "num_nodes"), lambda j, n: str(
        int(j.get("ntasks_per_node") or 0) * int(j.get("num_nodes") or 1)
        or int(j.get("num_tasks") or 1))),
    "ntpernode": _C("NTASKS_PER_NODE", ("ntasks_per_node",),
                    lambda j, n: str(j["ntasks_per_node"]) if j.get("ntasks_per_node") else "N/A"),
    "ntpercore": _C("NTASKS_PER_CORE", (), _NA),
    "ntpersocket": _C("NTASKS_PER_SOCKET", (), _NA),
    "ntperboard": _C("NTASKS_PER_BOARD", (), _NA),
    "maxnodes": _C("MAX_NODES", ("max_nodes", "num_nodes"),
                   lambda j, n: str(j.get("max_nodes") or j.get("num_nodes") or 1)),
    "maxcpus": _C("MAX_CPUS", ("state", "alloc_cpus", "num_tasks", "cpus_per_task", "num_nodes",
                               "overcommit", "gpus_per_task"),
                  lambda j, n: _num_cpus(j)),
    "requeue": _C("REQUEUE", ("requeue",), lambda j, n: "1" if j.get("requeue", True) else "0"),
    "restartcnt": _C("RESTART_COUNT", ("restart_count",),
                     lambda j, n: str(j.get("restart_count") or 0)),
    "batchflag": _C("BATCH_FLAG", ("batch",), lambda j, n: "1" if j.get("batch", True) else "0"),
    "stdout": _C("STDOUT", ("stdout", "work_dir", "job_id"), lambda j, n: _std_path(j, "stdout")),
    "stderr": _C("STDERR", ("stdout", "stderr", "work_dir", "job_id", "batch"),
                 lambda j, n: _std_path(j, "stderr")),
    "stdin": _C("STDIN", ("stdin",), lambda j, n: _std_path(j, "stdin")),
    "mintime": _C("TIME_MIN", ("time_min",), lambda j, n: _secs(j.get("time_min") or 0)),
    "admin_comment": _C("ADMIN_COMMENT", (), _NULL),
    "system_comment": _C("SYSTEM_COMMENT", (), _NULL),
    "allocnodes": _C("ALLOC_NODES", ("submit_host",), lambda j, n: _or_null(j.get("submit_host"))),
    "allocsid": _C("ALLOC_SID", ("alloc_sid",), lambda j, n: str(j.get("alloc_sid") or 0)),
    "associd": _C("ASSOC_ID", (), _ZERO),
    "boardspernode": _C("BOARDS_PER_NODE", (), _NA),
    "deadline": _C("DEADLINE", (), _NA),
    "delayboot": _C("DELAY_BOOT", (), lambda j, n: "0:00"),
    "container": _C("CONTAINER", (), _NULL),
    "containerid": _C("CONTAINERID", (), _NULL),
    "burstbuffer": _C("BURST_BUFFER", (), _NULL),
    "burstbufferstate": _C("BURST_BUFFER_STATE", (), _NULL),
    "network": _C("NETWORK", (), _NULL),
    "mcslabel": _C("MCSLABEL", (), _NULL),
    "clusterfeature": _C("CLUSTER_FEATURES", (), _NULL),
    "prefer": _C("PREFER", (), _NULL),
    "profile": _C("PROFILE", (), lambda j, n: "NotSet"),
    "reboot": _C("REBOOT", (), _ZERO),
    "reqswitch": _C("REQ_SWITCH", (), _ZERO),
    "wait4switch": _C("WAIT4SWITCH", (), lambda j, n: "0:00"),
    "resizetime": _C("RESIZE_TIME", (), _NA),
    "preempttime": _C("PREEMPT_TIME", (), _NA),
    "sperboard": _C("SOCKETS_PER_BOARD", (), _ZERO),
    "origin": _C("ORIGIN", (), lambda j, n: "NA"),
    "originraw": _C("ORIGIN_RAW", (), lambda j, n: "NA"),
    "siblingsactive": _C("ACTIVE_SIBLINGS", (), lambda j, n: "NA"),
    "siblingsactiveraw": _C("ACTIVE_SIBLINGS_RAW", (), lambda j, n: "NA"),
    "siblingsviable": _C("VIABLE_SIBLINGS", (), lambda j, n: "NA"),
    "siblingsviableraw": _C("VIALBLE_SIBLINGS_RAW", (), lambda j, n: "NA"),  # sic, as Slurm
    "hetjobid": _C("HET_JOB_ID", (), _NA),
    "hetjoboffset": _C("HET_JOB_OFFSET", (), _NA),
    "hetjobidset": _C("HET_JOB_ID_SET", (), _NA),
    "tres-per-job": _C("TRES_PER_JOB", ("gpus", "gpu_type"), lambda j, n: _gres_req(j, "gpus")),
    "tres-per-task": _C("TRES_PER_TASK", ("gpus_per_task", "gpu_type"),
                        lambda j, n: _gres_req(j, "gpus_per_task")),
    "tres-alloc": _C("TRES_ALLOC", ("state", "alloc", "num_nodes", "ntasks_per_node",
                                    "num_tasks", "cpus_per_task", "mem_per_node", "mem_per_cpu",
                                    "gpus", "gpus_per_node", "gpus_per_task"),
                     lambda j, n: _tres_alloc(j)),
    "cpus-per-tres": _C("CPUS_PER_TRES", (), _NA),
    "mem-per-tres": _C("MEM_PER_TRES", (), _NA),
    "tres-bind": _C("TRES_BIND", (), _NA),
    "tres-freq": _C("TRES_FREQ", (), _NA),
    "tres-per-socket": _C("TRES_PER_SOCKET", (), _NA),
    "cluster": _C("CLUSTER", ("_cluster",), lambda j, n: _or_null(j.get("_cluster"))),
})

# -O names: (letter whose value it prints, header when it differs from the letter's).
LONG_FIELDS: dict[str, tuple[str, str | None]] = {
    "account": ("a", None), "arrayjobid": ("F", None), "arraytaskid": ("K", None),
    "batchhost": ("B", None), "command": ("o", None), "comment": ("k", None),
    "contiguous": ("O", None), "corespec": ("X", None), "cores": ("I", None),
    "dependency": ("E", None), "endtime": ("e", None), "excnodes": ("x", None),
    "feature": ("f", None), "gres": ("b", None), "groupid": ("G", None),
    "groupname": ("g", None), "jobarrayid": ("i", None), "jobid": ("A", None),
    "licenses": ("W", None), "mincpus": ("c", None), "minmemory": ("m", None),
    "mintmpdisk": ("d", None), "name": ("j", None), "nice": ("y", None),
    "nodelist": ("N", None), "numcpus": ("C", None), "numnodes": ("D", None),
    "oversubscribe": ("h", None), "shared": ("h", None), "partition": ("P", None),
    "priority": ("p", None), "prioritylong": ("Q", None), "qos": ("q", None),
    "reason": ("r", None), "reasonlist": ("R", None), "reqnodes": ("n", None),
    "reservation": ("v", None), "schednodes": ("Y", None), "sct": ("z", None),
    "sockets": ("H", None), "starttime": ("S", None), "state": ("T", None),
    "statecompact": ("t", None), "submittime": ("V", None), "threads": ("J", None),
    "timeleft": ("L", None), "timelimit": ("l", None), "timeused": ("M", None),
    "tres-per-node": ("b", None), "userid": ("U", None), "username": ("u", None),
    "wckey": ("w", None), "workdir": ("Z", None),
}
# -O names of fields without a letter, and Slurm's other spellings of them.
LONG_FIELDS.update({name: (name, None) for name in COLUMNS if len(name) > 1})
LONG_FIELDS.update({"cpuspertask": ("cpus-per-task", None), "tres": ("tres-alloc", None),
                    "packjobid": ("hetjobid", None), "packjoboffset": ("hetjoboffset", None),
                    "packjobidset": ("hetjobidset", None)})

SORT_KEYS = set("BbcCdDefgGhHiIjJlLmMnNOpPQStTuUvVz")


# ---- ordering -------------------------------------------------------------

def list_positions(jobs: Sequence[Job]) -> dict[int, float]:
    """Where each record would sit in slurmctld's job list (creation order).

    Slurm splits a pending array task off by turning the array's record into the
    task and appending a fresh record for the rest, so the first task sits at
    the array's place and each later one where the previous remainder was.
    """
    pos: dict[int, float] = {}
    arrays: dict[int, list[tuple[int, Job]]] = {}
    for i, j in enumerate(jobs):
        if j.get("array_job_id") is None:
            pos[i] = float(j.get("job_id", 0))
        else:
            arrays.setdefault(j["array_job_id"], []).append((i, j))
    for array_id, members in arrays.items():
        tasks = sorted(((i, j) for i, j in members
                        if j.get("array_tasks") is None and not j.get("_expanded")),
                       key=lambda ij: ij[1].get("job_id", 0))
        place = float(array_id)
        for i, j in tasks:
            pos[i] = place
            place = j.get("job_id", 0) + 0.5
        for i, j in members:
            if j.get("array_tasks") is not None or j.get("_expanded"):
                pos[i] = place
    return pos


def _sort_value(key: str, j: Job, now: float, pos: float) -> Any:
    if key == "i":
        task = j.get("array_task_id")
        # An array's pending record has no task id (NO_VAL in Slurm): after its tasks.
        return (j.get("array_job_id") or j.get("job_id", 0), 2**32 if task is None else task)
    if key == "P":
        return j.get("partition", "")
    if key == "t":
        return _code(j)
    if key == "T":
        return str(j.get("state", ""))
    if key in ("p", "Q"):
        return j.get("priority", 0)
    if key == "S":
        if _pending(j):
            return (max(now, _expected_start(j, now) or now), pos)
        return (j.get("start_time") or now, pos)
    if key == "j":
        return j.get("name", "")
    if key == "u":
        return j.get("user", "")
    if key == "U":
        return j.get("uid", 0)
    if key == "g":
        return j.get("group", "")
    if key == "G":
        return j.get("gid", 0)
    if key == "M":
        return _run_seconds(j, now)
    if key == "l":
        limit = j.get("time_limit", -1)
        return float("inf") if limit is None or limit < 0 else limit
    if key == "L":
        limit = j.get("time_limit", -1)
        return float("inf") if limit is None or limit < 0 else limit - _run_seconds(j, now)
    if key == "D":
        return int(_num_nodes(j))
    if key == "C":
        return int(_num_cpus(j))
    if key == "m":
        return j.get("mem_per_node") or j.get("mem_per_cpu") or 0
    if key == "N":
        return (j.get("nodes") or [""])[0]
    if key == "V":
        return j.get("submit_time") or 0
    if key == "e":
        return j.get("end_time") or 0
    if key == "B":
        return j.get("batch_host") or ""
    return 0  # keys Slurm accepts but does not sort on


# The -S keys whose value is the record's alone: what _sort_value returns for them.
_SIMPLE_SORT: dict[str, Callable[[Job], Any]] = {
    "P": lambda j: j.get("partition", ""),
    "t": _code,
    "T": lambda j: str(j.get("state", "")),
    "p": lambda j: j.get("priority", 0),
    "Q": lambda j: j.get("priority", 0),
    "j": lambda j: j.get("name", ""),
    "u": lambda j: j.get("user", ""),
}


def sort_jobs(jobs: list[Job], sort: str, now: float) -> list[Job]:
    """Order records as squeue does.

    The starting order (what ties fall back to) was measured on Slurm 22.05:
    jobs holding nodes by start time, latest first, then in job-list order;
    after them pending jobs in reverse job-list order.  The -S keys are then
    applied as stable sorts from the last to the first, as Slurm does.
    """
    positions = list_positions(jobs)
    indexed = list(enumerate(jobs))
    active = [(i, j) for i, j in indexed if j.get("state") != "PENDING"]  # not _pending(j)
    pending = [(i, j) for i, j in indexed if j.get("state") == "PENDING"]
    active.sort(key=lambda ij: (-(ij[1].get("start_time") or 0), positions[ij[0]]))
    pending.sort(key=lambda ij: -positions[ij[0]])
    order = active + pending
    keys = [k for k in sort.split(",") if k]
    for spec in reversed(keys):
        reverse = spec.startswith("-")
        key = spec.lstrip("+-")
        simple = _SIMPLE_SORT.get(key)
        if simple is not None:  # needs neither the time nor the list position
            def simple_key(ij: tuple[int, Job], f: Callable[[Job], Any] = simple) -> Any:
                return f(ij[1])
            order.sort(key=simple_key, reverse=reverse)
            continue
        def sort_key(ij: tuple[int, Job], k: str = key) -> Any:
            return _sort_value(k, ij[1], now, positions[ij[0]])
        order.sort(key=sort_key, reverse=reverse)
    return [j for _, j in order]


def expand_arrays(jobs: list[Job], only_tasks: dict[int, set[int]] | None = None) -> list[Job]:
    """One record per pending array task (squeue -r, or -j 7_5 naming one task)."""
    out: list[Job] = []
    for j in jobs:
        tasks = j.get("array_tasks")
        if tasks is None:
            out.append(j)
            continue
        wanted = only_tasks.get(j.get("array_job_id") or -1) if only_tasks is not None else None
        if only_tasks is not None and wanted is None:
            out.append(j)
            continue
        for t in tasks:
            if wanted is not None and t not in wanted:
                continue
            rec = dict(j)
            rec["array_tasks"] = None
            rec["array_task_id"] = t
            rec["display_id"] = f"{j['array_job_id']}_{t}"
            rec["_expanded"] = True  # still sits where the array's record sits
            out.append(rec)
    return out


# ---- formatting -----------------------------------------------------------

class Options:
    __slots__ = ("fmt", "long_spec", "header", "long_listing", "sort", "array", "only_tasks",
                 "letters", "plain")

    def __init__(self, fmt: Format, long_spec: bool = False, header: bool = True,
                 long_listing: bool = False, sort: str = DEFAULT_SORT, array: bool = False,
                 only_tasks: dict[int, set[int]] | None = None,
                 letters: dict[str, str] | None = None) -> None:
        self.fmt = fmt
        self.long_spec = long_spec  # -O: headers from LONG_FIELDS
        self.header = header
        self.long_listing = long_listing  # -l: date line first
        self.sort = sort
        self.array = array
        self.only_tasks = only_tasks
        self.letters: dict[str, str] = {} if letters is None else letters  # -O name → letter
        # the default format and order, records as they come (-h aside): what the
        # controller can render itself (render_default)
        self.plain = False


def needed_fields(opts: Options) -> list[str]:
    """The job fields the chosen format and sort need from the controller."""
    need = {"job_id", "state", "array_job_id", "array_task_id", "array_tasks", "start_time",
            "priority", "partition"}
    for f in opts.fmt.fields:
        if f.literal is None:
            need.update(COLUMNS[opts.letters.get(f.key, f.key)].needs)
    for spec in opts.sort.split(","):
        key = spec.lstrip("+-")
        if key in COLUMNS:
            need.update(COLUMNS[key].needs)
    if opts.array or opts.only_tasks:
        need.update(COLUMNS["i"].needs)
    return sorted(need)


def format_jobs(jobs: list[Job], now: float, opts: Options,
                holes: list[Job] | None = None) -> str:
    """The whole squeue output for these job records.  `holes`: see render_rows."""
    lines: list[str] = []
    if opts.long_listing:
        lines.append(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)))
    letters = opts.letters

    if opts.header:
        def header_of(f: Field) -> Getter:
            if opts.long_spec:
                letter, alt = LONG_FIELDS[f.key]
                text = alt or COLUMNS[letter].header
            else:
                text = COLUMNS[letters.get(f.key, f.key)].header
            return lambda _record: text
        lines.append(renderer(opts.fmt, header_of)(None))
    records = expand_arrays(jobs, None if opts.array else opts.only_tasks) \
        if (opts.array or opts.only_tasks) else jobs
    head = "".join(text + "\n" for text in lines)
    return head + render_rows(opts.fmt, letters, sort_jobs(records, opts.sort, now), now, holes)


# Columns that print one field of the record as it is (with its default): read straight
# from the records, without a call per record.
_PLAIN: dict[str, tuple[str, str]] = {"j": ("name", ""), "u": ("user", ""),
                                      "P": ("partition", "")}


def _column_values(key: str, records: Sequence[Job], now: float) -> list[Value]:
    if key in _PLAIN:
        name, default = _PLAIN[key]
        return [j.get(name, default) for j in records]
    if key == "i":
        return [j["display_id"] for j in records]
    if key == "t":
        codes = CODE_OF_STATE
        return [codes.get(s, s) for s in [str(j.get("state", "PENDING")) for j in records]]
    if key == "M":  # format_duration(_run_seconds(j, now)), once per distinct second
        durations: dict[int, str] = {0: format_duration(0)}
        times: list[Value] = []
        for j in records:
            if j.get("state") == "PENDING" or j.get("start_time") is None:
                times.append(durations[0])
                continue
            secs = int(_run_seconds(j, now))
            text = durations.get(secs)
            if text is None:
                text = durations[secs] = format_duration(secs)
            times.append(text)
        return times
    if key == "D":  # _num_nodes
        return [str(len(j["nodes"])) if j.get("nodes") and j.get("state") != "PENDING"
                else str(max(int(j.get("num_nodes") or 1), int(j.get("node_cnt_wag") or 0),
                             len(j.get("sched_nodes") or ())))  # pending_node_count
                for j in records]
    if key == "R":  # _reason_list: a reason depends on the state and reason alone
        reasons: dict[tuple[Any, Any], str] = {}
        lists: dict[tuple[str, ...], str] = {}
        texts: list[Value] = []
        for j in records:
            state = j.get("state")
            if state in REASON_STATES:
                pair = (state, j.get("reason"))
                text = reasons.get(pair)
                if text is None:
                    text = reasons[pair] = f"({job_reason(j)})"
                texts.append(text)
            else:  # a node list: compressed once per distinct list
                nodes = j.get("nodes")
                names = tuple(nodes) if nodes else ()
                text = lists.get(names)
                if text is None:
                    text = lists[names] = Whole(_nodes_text(nodes))
                texts.append(text)
        return texts
    value = COLUMNS[key].value
    return [value(j, now) for j in records]


# Columns whose values are never anything but printable ASCII (numbers, state codes,
# durations): padded without checking for characters to escape.
_PRINTABLE = frozenset("itMDTlLCQpAyUG")


def _fit_column(values: list[Value], width: int, right: bool,
                printable: bool = False) -> list[str]:
    """fit() over a column: plain printable strings padded here, the rest (None, Whole,
    text to escape) through fit()."""
    if printable and width and all(v.__class__ is str for v in values):
        if right:
            return [v.rjust(width)[:width] for v in values]  # type: ignore[union-attr]
        return [v[:width].ljust(width) for v in values]  # type: ignore[index]
    if width == 0:
        return [v if v.__class__ is str and v.isprintable() else fit(v, 0, right)
                for v in values]
    if right:
        return [v.rjust(width)[:width] if v.__class__ is str and v.isprintable()
                else fit(v, width, True) for v in values]
    return [v[:width].ljust(width) if v.__class__ is str and v.isprintable()
            else fit(v, width, False) for v in values]


def render_rows(fmt: Format, letters: dict[str, str], records: Sequence[Job],
                now: float, holes: list[Job] | None = None) -> str:
    """One line of `fmt` per record, built a column at a time (squeue prints 10,000 lines
    within its time budget): each column's values, then their padding, then one %-template
    filled per line.  Prints exactly what fit() prints cell by cell.

    `holes` (a list to fill): a TIME (%M) cell that moves with `now` (a job running now)
    is printed as TIME_HOLE repeated to the column's width, and its record appended to
    `holes` in the order of the lines: the text then holds for any `now` once those
    cells are filled in (render_default)."""
    template = [fmt.prefix.replace("%", "%%")]
    columns: list[list[str]] = []
    for f in fmt.fields:
        if f.literal is not None:
            template.append(f.literal.replace("%", "%%"))
            continue
        key = letters.get(f.key, f.key)
        values = _column_values(key, records, now)
        if holes is not None and key == "M" and f.width:
            live = [_runs_now(j) for j in records]
            if True in live:
                hole = TIME_HOLE * f.width
                values = [hole if on else v for on, v in zip(live, values, strict=True)]
                holes.extend(j for on, j in zip(live, records, strict=True) if on)
        if COLUMNS[key].no_cut:  # node lists: printed whole, as fit() prints a Whole
            values = [None if v is None else Whole(v) for v in values]
        columns.append(_fit_column(values, f.width, f.right, key in _PRINTABLE))
        template.append("%s" + f.suffix.replace("%", "%%"))
    line = "".join(template) + "\n"
    if not columns:
        return (line % ()) * len(records)
    return "".join([line % cells for cells in zip(*columns, strict=True)])


TIME_HOLE = "\x00"  # never printed: fit() escapes control characters


def _runs_now(j: Job) -> bool:
    """Whether the job's TIME (_run_seconds) counts up to `now`."""
    state = j.get("state")
    return (state != "PENDING" and j.get("start_time") is not None and j.get("end_time") is None
            and not (state == "SUSPENDED" and j.get("suspend_time")))


def default_options() -> Options:
    """A plain `squeue`'s options, whatever this process's environment says."""
    return Options(fmt=parse_percent(DEFAULT_FORMAT, COLUMNS), sort=DEFAULT_SORT)


class RenderedQueue:
    """A plain `squeue`'s whole output for a set of records, for any `now`: the text
    between the TIME cells of the jobs running now, and those jobs (text_at fills them).

    The controller builds one per change and serves it to every plain `squeue` (issue
    #19): the records, their order and every other cell are the same whenever it is
    asked."""

    __slots__ = ("pieces", "running", "width")

    def __init__(self, pieces: list[str], running: list[Job], width: int) -> None:
        self.pieces = pieces
        self.running = running
        self.width = width

    def text_at(self, now: float) -> str:
        if not self.running:
            return self.pieces[0]
        cells = _fit_column(_column_values("M", self.running, now), self.width, True, True)
        out = [self.pieces[0]]
        for cell, piece in zip(cells, self.pieces[1:], strict=True):
            out.append(cell)
            out.append(piece)
        return "".join(out)


def render_default(jobs: list[Job], states: list[str] | None,
                   hidden: set[str] | None) -> RenderedQueue | None:
    """What _main prints for a plain `squeue` (the header included) given the records the
    controller answers: those in `states` (None: all), without jobs in the `hidden`
    partitions (None: -a).  None where the text cannot be split at its TIME cells."""
    opts = default_options()
    jobs = select_states(jobs, states)
    if jobs and hidden:
        jobs = [j for j in jobs if j.get("partition") not in hidden]
    running: list[Job] = []
    text = format_jobs(jobs, 0.0, opts, running)
    width = next(f.width for f in opts.fmt.fields if f.key == "M")
    pieces = text.split(TIME_HOLE * width)
    if len(pieces) != len(running) + 1:
        return None
    return RenderedQueue(pieces, running, width)


class QueuePrinter:
    """render_default again and again for one query, from the answer's rows (lists in
    `fields` order): a job's line is printed again only when its row changed since the
    last print, and the lines are put in squeue's order by one sort on keys built from
    the rows (sort_jobs' stable sorts for P,t,-p, as one key).  The controller keeps one
    per query and prints a queue of 10,000 jobs after each change."""

    ROW_KEYS = ("job_id", "state", "partition", "priority", "start_time", "array_job_id")

    def __init__(self, fields: list[str]) -> None:
        self.fields = fields
        self.opts = default_options()
        self.header = format_jobs([], 0.0, self.opts)
        self.width = next(f.width for f in self.opts.fmt.fields if f.key == "M")
        self.hole = TIME_HOLE * self.width
        # job id → (its row, its line (with TIME_HOLE where its TIME moves), its record then,
        # its sort key when it is no array's)
        self._lines: dict[Any, tuple[list[Any], str, Job | None, tuple[Any, ...] | None]] = {}

    def print(self, rows: list[list[Any]], states: list[str] | None,
              hidden: set[str] | None) -> RenderedQueue | None:
        fields = self.fields
        at = {name: i for i, name in enumerate(fields)}
        if any(k not in at for k in self.ROW_KEYS):
            return render_default([dict(zip(fields, r, strict=True)) for r in rows], states,
                                  hidden)
        i_id, i_state, i_part, i_prio, i_start, i_array = (at[k] for k in self.ROW_KEYS)
        if states is not None:
            wanted = set(states)
            rows = [r for r in rows if r[i_state] in wanted]
        if rows and hidden:
            rows = [r for r in rows if r[i_part] not in hidden]
        old = self._lines
        lines: dict[Any, tuple[list[Any], str, Job | None, tuple[Any, ...] | None]] = {}
        fresh: list[list[Any]] = []
        for r in rows:
            entry = old.get(r[i_id])
            if entry is not None and entry[0] == r:
                lines[r[i_id]] = entry
            else:
                fresh.append(r)
                lines[r[i_id]] = entry  # type: ignore[assignment]  # replaced below
        if len(lines) != len(rows) or any(
                not isinstance(r[i_prio], (int, float)) for r in fresh):
            # job ids not unique (no line can be told by its id), or odd priorities
            return render_default([dict(zip(fields, r, strict=True)) for r in rows], None, None)
        codes = CODE_OF_STATE

        def key(r: list[Any], pos: float) -> tuple[Any, ...]:
            # sort_jobs: the base order (running jobs by start, latest first, then pending
            # jobs in reverse list order), then stable sorts by -p, t and P: one sort on
            # (P, t, -p, base order); the row's place in the list breaks ties
            state = r[i_state]
            code = codes.get(str(state), str(state))
            if state == "PENDING":
                return (r[i_part], code, -r[i_prio], 1, -pos, 0)
            return (r[i_part], code, -r[i_prio], 0, -(r[i_start] or 0), pos)

        if fresh:
            records = [dict(zip(fields, r, strict=True)) for r in fresh]
            running: list[Job] = []
            text = render_rows(self.opts.fmt, {}, records, 0.0, running)
            printed = text.split("\n")
            if len(printed) != len(records) + 1:
                return render_default([dict(zip(fields, r, strict=True)) for r in rows], None,
                                      None)
            for r, rec, line in zip(fresh, records, printed, strict=False):
                # an array's records sit where the others of the array put them: keyed below
                lines[r[i_id]] = (r, line + "\n", rec if self.hole in line else None,
                                  None if r[i_array] is not None else key(r, float(r[i_id])))
        self._lines = lines
        members = [i for i, r in enumerate(rows) if r[i_array] is not None]
        placed = {members[k]: pos for k, pos in list_positions(
            [dict(zip(fields, rows[i], strict=True)) for i in members]).items()}
        decorated = []
        for i, r in enumerate(rows):
            known = lines[r[i_id]][3]
            decorated.append((key(r, placed[i]) if known is None else known, i))
        decorated.sort()
        ordered = [lines[rows[i][i_id]] for _, i in decorated]
        body = "".join([e[1] for e in ordered])
        moving = [e[2] for e in ordered if e[2] is not None]
        pieces = (self.header + body).split(self.hole)
        if len(pieces) != len(moving) + 1:
            return None
        return RenderedQueue(pieces, moving, self.width)


# ---- options --------------------------------------------------------------

SHORT = "A:ahi:j:lL:M:n:o:O:p:q:R:rs:S:t:u:vVw:"
LONG = ["accounts=", "all", "array", "array-unique", "federation", "format=", "Format=",
        "help", "hide", "iterate=", "jobs=", "job=", "local", "long", "licenses=",
        "clusters=", "cluster=", "me", "name=", "noconvert", "noheader", "nodelist=",
        "nodes=", "partition=", "partitions=", "priority", "qos=", "reservation=",
        "sib", "sibling", "sort=", "start", "steps=", "states=", "state=", "usage",
        "user=", "users=", "verbose", "version", "json", "yaml"]

USAGE = """\
Usage: squeue [-A account] [--clusters names] [-i seconds] [--job jobid]
              [-n name] [-o format] [-p partitions] [--qos qos]
              [--reservation reservation] [--sort fields] [--start]
              [--step step_id] [-t states] [-u user_name] [--usage]
              [-L licenses] [-w nodes] [--federation] [--local] [--sibling]
\t      [-ahjlrsv]
"""

HELP = """\
Usage: squeue [OPTIONS]
  -A, --account=account(s)        comma separated list of accounts
\t\t\t\t  to view, default is all accounts
  -a, --all                       display jobs in hidden partitions
      --array-unique              display one unique pending job array
                                  element per line
      --federation                Report federated information if a member
                                  of one
  -h, --noheader                  no headers on output
      --hide                      do not display jobs in hidden partitions
  -i, --iterate=seconds           specify an interation period
  -j, --job=job(s)                comma separated list of jobs IDs
                                  to view, default is all
      --json                      Produce JSON output
      --local                     Report information only about jobs on the
                                  local cluster. Overrides --federation.
  -l, --long                      long report
  -L, --licenses=(license names)  comma separated list of license names to view
  -M, --clusters=cluster_name     cluster to issue commands to.  Default is
                                  current cluster.  cluster with no name will
                                  reset to default. Implies --local.
      --me                        equivalent to --user=<uid>
  -n, --name=job_name(s)          comma separated list of job names to view
      --noconvert                 don't convert units from their original type
                                  (e.g. 2048M won't be converted to 2G).
  -o, --format=format             format specification
  -O, --Format=format             format specification
  -p, --partition=partition(s)    comma separated list of partitions
\t\t\t\t  to view, default is all partitions
  -q, --qos=qos(s)                comma separated list of qos's
\t\t\t\t  to view, default is all qos's
  -R, --reservation=name          reservation to view, default is all
  -r, --array                     display one job array element per line
      --sibling                   Report information about all sibling jobs
                                  on a federated cluster. Implies --federation.
  -s, --steps=step(s)             comma separated list of job steps
\t\t\t\t  to view, default is all
  -S, --sort=fields               comma separated list of fields to sort on
      --start                     print expected start times of pending jobs
  -t, --states=states             comma separated list of states to view,
\t\t\t\t  default is pending and running,
\t\t\t\t  '--states=all' reports all states
  -u, --user=user_name(s)         comma separated list of users to view
      --name=job_name(s)          comma separated list of job names to view
  -v, --verbose                   verbosity level
  -V, --version                   output version information and exit
  -w, --nodelist=hostlist         list of nodes to view, default is
\t\t\t\t  all nodes
      --yaml                      Produce YAML output

Help options:
  --help                          show this help message
  --usage                         display a brief summary of squeue options
"""

_VALID_STATES = ("PENDING,RUNNING,SUSPENDED,COMPLETED,CANCELLED,FAILED,TIMEOUT,NODE_FAIL,"
                 "PREEMPTED,BOOT_FAIL,DEADLINE,OUT_OF_MEMORY,COMPLETING,CONFIGURING,RESIZING,"
                 "RESV_DEL_HOLD,REQUEUED,REQUEUE_FED,REQUEUE_HOLD,REVOKED,SIGNALING,"
                 "SPECIAL_EXIT,STAGE_OUT,STOPPED")


class _Exit(Exception):
    def __init__(self, code: int):
        self.code = code


def _err(msg: str) -> None:
    sys.stderr.write(f"squeue: error: {msg}\n")


def _parse_states(text: str) -> list[str] | None:
    """-t values → state names; None means all states."""
    names: list[str] = []
    for item in text.split(","):
        t = item.strip().upper()
        if not t:
            continue
        if t == "ALL":
            return None
        if t in _STATE_OF_CODE:
            names.append(_STATE_OF_CODE[t])
        elif t in CODE_OF_STATE or t == "CANCELED":
            names.append("CANCELLED" if t == "CANCELED" else t)
        else:
            _err(f"Invalid job state specified: {item}")
            sys.stderr.write(f"squeue: error: Valid job states include: {_VALID_STATES}\n\n")
            raise _Exit(1)
    return names


def _parse_job_ids(text: str) -> tuple[list[str], dict[int, set[int]]]:
    ids: list[str] = []
    tasks: dict[int, set[int]] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        base, sep, task = item.partition("_")
        if not base.isdigit() or (sep and not task.isdigit()):
            _err(f"Invalid job id: {item}")
            raise _Exit(1)
        ids.append(item)
        if sep:
            tasks.setdefault(int(base), set()).add(int(task))
    return ids, tasks


def _valid_users(text: str) -> list[str]:
    users: list[str] = []
    for name in text.split(","):
        name = name.strip()
        if not name:
            continue
        try:
            users.append(pwd.getpwuid(int(name)).pw_name if name.isdigit()
                         else pwd.getpwnam(name).pw_name)
        except (KeyError, ValueError):
            # Slurm reports it, keeps the valid names, and still prints the header.
            sys.stderr.write(f"squeue: error: Invalid user: {name}\n\n")
    return users


def check_clusters(prog: str, names: str | None, from_env: bool) -> str | None:
    """The "CLUSTER: name" line that -M/--clusters asks for, or None without -M.

    An unknown cluster name is refused with Slurm's message and exit code 1 (raised as _Exit).
    """
    try:
        mine = asked_cluster(prog, names, from_env)
    except ClusterRefused:
        raise _Exit(1) from None
    return None if mine is None else f"CLUSTER: {mine}\n"


class Query:
    __slots__ = ("params", "states", "no_users", "clusters", "clusters_env", "show_hidden",
                 "accounts", "qos")

    def __init__(self) -> None:
        # Jobs in Hidden partitions are listed with -a, or when named by -p or -j.
        self.show_hidden = False
        self.clusters: str | None = os.environ.get("SLURM_CLUSTERS") or None
        self.clusters_env = self.clusters is not None  # named by SLURM_CLUSTERS, not -M
        self.params: dict[str, str] = {}
        # None means every state; by default finished jobs are left out.
        self.states: list[str] | None = sorted(_ACTIVE)
        self.no_users = False  # every -u name was invalid: nothing can match
        # -A: the accounts to list, lower-cased (Slurm compares them without case); the
        # controller does not filter on them, the records are filtered here.
        self.accounts: set[str] | None = None
        self.qos: set[str] | None = None  # -q: the same, for QoS names


def parse_args(argv: Sequence[str]) -> tuple[Options, Query] | int:
    """Options → (Options, Query), or an exit code after printing help/usage/errors."""
    try:
        opts_list, rest = getopt_long(argv, SHORT, LONG)
    except UsageError as e:
        sys.stderr.write(f"squeue: {e}\nTry \"squeue --help\" for more information\n")
        return 1
    if rest:
        _err(f"Unrecognized option: {rest[0]}")
        sys.stdout.write(USAGE)
        return 1
    fmt_text: str | None = None
    long_text: str | None = None
    q = Query()
    header = True
    long_listing = start = array = False
    sort: str | None = None
    only_tasks: dict[int, set[int]] = {}
    states_given = False
    try:
        for opt, val in opts_list:
            if opt == "--help":
                sys.stdout.write(HELP)
                return 0
            if opt == "--usage":
                sys.stdout.write(USAGE)
                return 0
            if opt in ("-V", "--version"):
                sys.stdout.write("slurm 22.05.8\n")
                return 0
            if opt in ("-h", "--noheader"):
                header = False
            elif opt in ("-l", "--long"):
                long_listing = True
            elif opt in ("-o", "--format"):
                fmt_text = val
            elif opt in ("-O", "--Format"):
                long_text = val
            elif opt in ("-S", "--sort"):
                sort = val
            elif opt in ("-r", "--array"):
                array = True
            elif opt == "--start":
                start = True
            elif opt in ("-u", "--user", "--users"):
                users = _valid_users(val)
                if users:
                    q.params["users"] = ",".join(users)
                else:
                    q.no_users = True
            elif opt == "--me":
                q.params["users"] = pwd.getpwuid(os.getuid()).pw_name
            elif opt in ("-j", "--jobs", "--job"):
                if val:
                    ids, tasks = _parse_job_ids(val)
                    q.params["ids"] = ",".join(ids)
                    only_tasks.update(tasks)
            elif opt in ("-p", "--partition", "--partitions"):
                q.params["partitions"] = val
            elif opt in ("-t", "--states", "--state"):
                q.states = _parse_states(val)
                states_given = True
            elif opt in ("-n", "--name"):
                q.params["names"] = val
            elif opt in ("-w", "--nodelist", "--nodes"):
                q.params["nodes"] = val
            elif opt in ("-i", "--iterate"):
                if not val.isdigit() or int(val) <= 0:
                    sys.stderr.write(f"squeue: error: --iterate={val}\n\n")
                    return 1
            elif opt in ("-a", "--all"):
                q.show_hidden = True
            elif opt == "--hide":
                q.show_hidden = False
            elif opt in ("-M", "--clusters", "--cluster"):
                q.clusters, q.clusters_env = val, False
            elif opt in ("-A", "--accounts"):  # --account too: a prefix, as in Slurm
                q.accounts = {a.lower() for a in val.split(",") if a}
            elif opt in ("-q", "--qos"):
                q.qos = {x.lower() for x in val.split(",") if x}
            elif opt in ("--json", "--yaml", "-R",
                         "--reservation", "-L", "--licenses"):
                # filters Corral cannot apply yet: refuse rather than list every job
                sys.stderr.write(f"squeue: error: {opt} is not supported by Corral\n")
                return 1
            # -v, --local, --federation… are accepted and change nothing here.
    except _Exit as e:
        return e.code
    if start and not states_given:
        q.states = ["PENDING"]
    if "partitions" in q.params or "ids" in q.params:
        q.show_hidden = True
    if long_text is not None:
        fmt = parse_long(long_text, LONG_FIELDS)
        letters = {name: LONG_FIELDS[name][0] for name in LONG_FIELDS}
        long_spec = True
        for name in fmt.invalid:
            _err(f"Invalid job format specification: {name}")
    else:
        text = fmt_text or os.environ.get("SQUEUE_FORMAT") or (
            START_FORMAT if start else LONG_FORMAT if long_listing else DEFAULT_FORMAT)
        if text.lower() == "%all":  # parse_format: every letter, a-z then A-Z, '|' between
            text = ALL_FORMAT
        fmt = parse_percent(text, COLUMNS)
        letters = {}
        long_spec = False
        for letter in fmt.invalid:
            _err(f"Invalid job format specification: {letter}")
    sort_text = sort or os.environ.get("SQUEUE_SORT") or ("S" if start else DEFAULT_SORT)
    for spec in sort_text.split(","):
        key = spec.lstrip("+-")
        if key and (len(key) != 1 or key not in SORT_KEYS):
            _err(f"Invalid sort specification: {key[:1]}")
            return 1
    opts = Options(fmt=fmt, long_spec=long_spec, header=header, long_listing=long_listing,
                   sort=sort_text, array=array, only_tasks=only_tasks or None, letters=letters)
    opts.plain = (long_text is None and text == DEFAULT_FORMAT and sort_text == DEFAULT_SORT
                  and not long_listing and not array and not only_tasks)
    return opts, q


ALL_FORMAT = "|".join("%" + chr(c) for c in [*range(ord("a"), ord("z") + 1),
                                              *range(ord("A"), ord("Z") + 1)])


def select_states(jobs: list[Job], states: list[str] | None) -> list[Job]:
    """Keep the jobs in `states` (None: all); the default leaves finished jobs out."""
    if states is None:
        return jobs
    wanted = set(states)
    return [j for j in jobs if j.get("state") in wanted]


def select_accounts(jobs: list[Job], accounts: set[str]) -> list[Job]:
    """Keep the jobs charging one of `accounts` (lower-cased): Slurm's -A, exact names, no
    sub-accounts."""
    return [j for j in jobs if (j.get("account") or "").lower() in accounts]


def _main(argv: list[str]) -> int:
    if any(a in ("-s", "--steps", "--step") or a.startswith(("--steps=", "--step="))
           or (a.startswith("-s") and not a.startswith("--")) for a in argv):
        from corral.cli.squeue_steps import steps_main  # only when asked: keeps starts light

        return steps_main(argv)
    parsed = parse_args(argv)
    if isinstance(parsed, int):
        return parsed
    opts, q = parsed
    try:
        cluster_line = check_clusters("squeue", q.clusters, q.clusters_env)
    except _Exit as e:
        return e.code
    params = dict(q.params)
    fields = needed_fields(opts)
    if q.accounts is not None and "account" not in fields:
        fields.append("account")
    if q.qos is not None and "qos" not in fields:
        fields.append("qos")
    params["fields"] = ",".join(fields)
    if q.states is not None:
        params["states"] = ",".join(q.states)
    else:  # -t all: finished jobs the controller still remembers, too
        params["states"] = "all"
    params["rows"] = "1"
    if (opts.plain and q.accounts is None and q.qos is None and not q.no_users):
        # the controller prints a plain squeue itself, once per change (render_default)
        params["render"] = "squeue"
        if q.show_hidden:
            params["all"] = "1"
    try:
        answer = client.get("/v1/jobs", **params)
    except client.ApiError as e:
        if e.status == 404 or "Invalid job id" in e.message:
            sys.stderr.write(f"slurm_load_jobs error: {e.message}\n")
            return 1
        raise
    if isinstance(answer, str):  # that text, the header first
        if cluster_line:
            sys.stdout.write(cluster_line)
        sys.stdout.write(answer if opts.header else answer.partition("\n")[2])
        sys.stdout.flush()
        return 0
    if "rows" in answer:  # the compact form: field names once, then one list per job
        names = answer["fields"]
        answer["jobs"] = [dict(zip(names, row, strict=True)) for row in answer["rows"]]
    now = float(answer.get("now") or time.time())
    # Every -u name was invalid: Slurm matches nothing but still prints the header.
    jobs = [] if q.no_users else select_states(answer.get("jobs", []), q.states)
    if q.accounts is not None:
        jobs = select_accounts(jobs, q.accounts)
    if q.qos is not None:
        jobs = [j for j in jobs if (j.get("qos") or "").lower() in q.qos]
    if jobs and not q.show_hidden:
        hidden = {p["name"] for p in client.get("/v1/partitions").get("partitions", [])
                  if p.get("hidden")}
        if hidden:
            jobs = [j for j in jobs if j.get("partition") not in hidden]
    if "_cluster" in params["fields"].split(",") and jobs:  # -O cluster
        name = client.get("/v1/config").get("cluster_name")
        for j in jobs:
            j["_cluster"] = name
    if cluster_line:
        sys.stdout.write(cluster_line)
    sys.stdout.write(format_jobs(jobs, now, opts))
    sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    return client.run_cli("squeue", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
