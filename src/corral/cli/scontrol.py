"""scontrol: show jobs, nodes, partitions and the configuration; hold, release,
requeue, suspend and update jobs and nodes.  Output follows Slurm 22.05 byte for byte.

The `format_*` functions are pure (dicts + `now` in, text out) so they can be
checked against captures of real Slurm without a controller.
"""

from __future__ import annotations

import os
import sys
import time

from corral.cli import client
from corral.cli import gnugetopt as getopt
from corral.cli.client import quote
from corral.cli.fmt import escape, job_reason, pending_node_count, stamp
from corral.model import hostlists
from corral.model.arrays import format_task_ids
from corral.model.jobspec import mbytes_exact, pn_min_cpus
from corral.model.timefmt import format_hms

TYPE_CHECKING = False  # annotations only: `typing` would cost every start ~3 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PROG = "scontrol"
SLURM_VERSION = "22.05.8"
# Slurm's NO_VAL: the array task id printed in file names of a pending array's meta record.
NO_VAL = 4294967294


class UsageError(Exception):
    """Bad command line: message already in Slurm's wording, exit code 1."""


# ---------------------------------------------------------------------------
# shared value formatting (also used by sacct)
# ---------------------------------------------------------------------------

def mem_str(mb: int | float) -> str:
    """Megabytes the way Slurm prints TRES and MinMemory: 1G, 500M, 200000M (exact units only)."""
    value = int(mb)
    if value == 0:
        return "0"
    units = "MGTP"
    i = 0
    while i < len(units) - 1 and value % 1024 == 0:
        value //= 1024
        i += 1
    return f"{value}{units[i]}"


def limit_str(seconds: int | None) -> str:
    """A time limit as scontrol and sacct print it: UNLIMITED, 01:00:00, 1-00:00:00."""
    if seconds is None or seconds < 0:
        return "UNLIMITED"
    return format_hms(seconds)


def job_resources(job: dict[str, Any]) -> dict[str, Any]:
    """What a job holds (if allocated) or asks for: nodes, cpus, mem (MB or None), gpus, ntasks."""
    num_nodes = int(job.get("num_nodes") or 1)
    per_node = job.get("ntasks_per_node")
    ntasks = per_node * num_nodes if per_node else max(int(job.get("num_tasks") or 1), num_nodes)
    # -O: one task's CPUs per node (slurmctld's min_cpus), whatever the task count
    one_per_node = job.get("overcommit") and not job.get("gpus_per_task")
    cpus = (num_nodes if one_per_node else ntasks) * int(job.get("cpus_per_task") or 1)
    mem: int | None = None
    if job.get("mem_per_node"):
        mem = int(job["mem_per_node"]) * num_nodes
    elif job.get("mem_per_cpu"):
        mem = int(job["mem_per_cpu"]) * cpus
    gpus = int(job.get("gpus") or 0)
    if not gpus and job.get("gpus_per_node"):
        gpus = int(job["gpus_per_node"]) * num_nodes
    if not gpus and job.get("gpus_per_task"):
        gpus = int(job["gpus_per_task"]) * ntasks
    res = {"nodes": num_nodes, "cpus": cpus, "mem": mem, "gpus": gpus, "ntasks": ntasks,
           "allocated": False}
    alloc = job.get("alloc") or []
    if alloc:
        res.update(nodes=len(alloc), cpus=sum(int(a["cpus"]) for a in alloc),
                   mem=sum(int(a["mem_mb"]) for a in alloc),
                   gpus=sum(len(a.get("gpus") or []) for a in alloc), allocated=True)
    return res


def tres_string(cpus: int, mem: int | None, nodes: int | None, gpus: int, *,
                billing: bool = True, gpu: bool = True, by_name: bool = False) -> str:
    """A TRES list. scontrol orders by TRES id (cpu,mem,node,billing,gres/gpu); sacct by name."""
    items: list[tuple[str, str]] = [("cpu", str(cpus))]
    if mem is not None:
        items.append(("mem", mem_str(mem)))
    if nodes:
        items.append(("node", str(nodes)))
    if billing:
        items.append(("billing", str(cpus)))
    if gpu and gpus:
        items.append(("gres/gpu", str(gpus)))
    if by_name:
        items.sort()
    return ",".join(f"{k}={v}" for k, v in items)


_PATTERN_CODES = "AajJuxNnts%"


def _substitute_percent(pattern: str, sub: Callable[[str, str], str]) -> str:
    r"""re.sub(r"%(\d*)([AajJuxNnts%])", ...) without `re` (a command's start would pay
    for it): each match's width digits and code go to `sub`; anything else is kept."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while (j := pattern.find("%", i)) >= 0:
        k = j + 1
        while k < n and pattern[k].isdecimal():  # what \d matches in a str pattern
            k += 1
        if k < n and pattern[k] in _PATTERN_CODES:
            out += (pattern[i:j], sub(pattern[j + 1:k], pattern[k]))
            i = k + 1
        else:
            out.append(pattern[i:j + 1])
            i = j + 1
    out.append(pattern[i:])
    return "".join(out)


def expand_io_pattern(pattern: str, job: dict[str, Any]) -> str:
    """Expand %j, %A, %a, %u, %x … in an output file name as scontrol shows it."""
    array_job = job.get("array_job_id")
    task = job.get("array_task_id")
    is_meta = job.get("array_tasks") is not None

    def sub(width: str, code: str) -> str:
        if code == "%":
            return "%"
        value: str
        if code in "jJ":
            value = str(job["job_id"])
        elif code == "A":
            value = str(array_job if array_job is not None else job["job_id"])
        elif code == "a":
            value = str(NO_VAL if (is_meta or task is None) else task)
        elif code == "u":
            value = str(job.get("user", ""))
        elif code == "x":
            value = str(job.get("name", ""))
        elif code == "N":
            value = str(job.get("batch_host") or "")
        elif code == "s":
            value = str(NO_VAL)
        else:  # %n node id, %t task id: the batch step runs as task 0 on node 0
            value = "0"
        return value.zfill(int(width)) if width else value

    path = _substitute_percent(pattern, sub)
    if not path.startswith("/"):
        path = os.path.join(job.get("work_dir") or "/", path)
    return path


def _io_paths(job: dict[str, Any]) -> tuple[str, str, str]:
    default = "slurm-%A_%a.out" if job.get("array_job_id") is not None else "slurm-%j.out"
    out = job.get("stdout") or default
    err = job.get("stderr") or out
    return (expand_io_pattern(err, job), job.get("stdin") or "/dev/null",
            expand_io_pattern(out, job))


# ---------------------------------------------------------------------------
# show job
# ---------------------------------------------------------------------------

def _dependency_str(job: dict[str, Any]) -> str:
    from corral.cli.depshow import dependency_str  # here: one module less at every start

    return dependency_str(job)


def _reason(job: dict[str, Any]) -> str:
    reason = job_reason(job)
    held = job.get("held")
    if held and reason == "None":
        reason = "JobHeldAdmin" if held == "admin" else "JobHeldUser"
    return reason.replace(" ", "_")


def _gres_name(job: dict[str, Any]) -> str:
    return f"gpu:{job['gpu_type']}" if job.get("gpu_type") else "gpu"


def _ranges(ids: list[int]) -> str:
    """0,1,2,5 → "0-2,5" (Slurm's bit_fmt)."""
    spans: list[list[int]] = []
    for i in sorted(ids):
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def detail_lines(job: dict[str, Any]) -> list[str]:
    """`scontrol -d show job`: JOB_GRES= and one "  Nodes=… CPU_IDs=… Mem=… GRES=…" line per
    group of nodes holding the same resources, as scripts grep them for GPU indexes.

    CPU_IDs come from the allocation's `cpu_ids` where the controller sends them; without
    them Corral cannot say which CPUs a job holds and prints the count's range from 0
    marked as such ("0-3(count)") rather than pretend."""
    alloc = job.get("alloc") or []
    total = sum(len(a.get("gpus") or []) for a in alloc)
    lines = [f"JOB_GRES={_gres_name(job)}:{total}" if total else "JOB_GRES=(null)"]
    rows: list[tuple[str, str, str, list[str]]] = []
    for a in alloc:
        ids = a.get("cpu_ids")
        cpus = _ranges([int(c) for c in ids]) if ids else f"0-{int(a['cpus']) - 1}(count)" \
            if int(a["cpus"]) > 1 else "0(count)"
        gpus = a.get("gpus") or []
        gres = f"{_gres_name(job)}:{len(gpus)}(IDX:{_ranges(gpus)})" if gpus else ""
        key = (cpus, str(int(a["mem_mb"])), gres)
        if rows and rows[-1][:3] == key:
            rows[-1][3].append(a["node"])
        else:
            rows.append((*key, [a["node"]]))
    for cpus, mem, gres, nodes in rows:
        lines.append(f"  Nodes={hostlists.compress(nodes)} CPU_IDs={cpus} Mem={mem} GRES={gres}")
    return lines


def format_job(job: dict[str, Any], now: float, *, one_liner: bool = False,
               tres_gpu: bool = True, details: bool = False) -> str:
    """One job as `scontrol show job` prints it (a block ending in a blank line);
    `details` (-d) adds the per-node allocation lines."""
    res = job_resources(job)
    state = job.get("state", "PENDING")
    pending = state == "PENDING"
    start = job.get("start_time")
    end = job.get("end_time")
    limit = job.get("time_limit", -1)
    eligible = job.get("eligible_time")
    begin = job.get("begin_time")
    if pending and start is None and job.get("sched_start"):
        start = job["sched_start"]  # backfill's expected start, as Slurm shows it
    if pending and begin and begin > now:
        # --begin / StartTime=: Slurm shows the begin time as the job's eligible and start time
        eligible = eligible or begin
        start = max(start or 0, begin)
    if end is None and start is not None and limit is not None and limit >= 0:
        end = start + limit + float(job.get("suspended_secs") or 0)

    head = f"JobId={job['job_id']} "
    if job.get("array_job_id") is not None:
        if job.get("array_tasks") is not None:
            spec = format_task_ids(job["array_tasks"])
            if job.get("array_max_running"):
                spec += f"%{job['array_max_running']}"
            head += f"ArrayJobId={job['array_job_id']} ArrayTaskId={spec} "
            if job.get("array_max_running"):
                head += f"ArrayTaskThrottle={job['array_max_running']} "
        else:
            head += f"ArrayJobId={job['array_job_id']} ArrayTaskId={job.get('array_task_id')} "
    head += f"JobName={job.get('name', '')}"

    priority = 0 if job.get("held") else job.get("priority", 0)
    run = _run_seconds(job, now)
    suspend_time = job.get("suspend_time")
    pre_suspend = int(suspend_time - start - float(job.get("suspended_secs") or 0)) \
        if suspend_time and start else 0
    nodes = job.get("nodes") or []
    node_line = f"NodeList={hostlists.compress(nodes)}"
    if pending and job.get("sched_nodes"):
        node_line += f" SchedNodeList={hostlists.compress(job['sched_nodes'])}"
    nodes_shown = pending_node_count(job) if pending else res["nodes"]
    if pending and job.get("max_nodes"):
        num_nodes = f"{nodes_shown}-{job['max_nodes']}"
    else:
        num_nodes = str(nodes_shown)
    per_node = job.get("ntasks_per_node") or 0
    # (-O: --ntasks-per-node does not raise it, as in slurmctld)
    min_cpus_node = pn_min_cpus(int(job.get("cpus_per_task") or 1),
                                None if job.get("overcommit") else per_node,
                                int(job.get("num_tasks") or 1), job.get("min_cpus"))
    if job.get("mem_per_node") is not None:
        min_mem = f"MinMemoryNode={mem_str(job['mem_per_node'])}"
    elif job.get("mem_per_cpu") is not None:
        min_mem = f"MinMemoryCPU={mem_str(job['mem_per_cpu'])}"
    else:
        min_mem = "MinMemoryNode=0"
    lines = [
        head,
        f"UserId={job.get('user', '')}({job.get('uid', 0)}) "
        f"GroupId={job.get('group') or job.get('gid', '')}({job.get('gid', 0)}) MCS_label=N/A",
        f"Priority={priority} Nice={job.get('nice', 0)} Account={job.get('account') or '(null)'} "
        f"QOS={job.get('qos') or 'normal'}",
        f"JobState={state} Reason={_reason(job)} Dependency={_dependency_str(job)}",
        f"Requeue={1 if job.get('requeue', True) else 0} Restarts={job.get('restart_count', 0)} "
        f"BatchFlag={1 if job.get('batch', True) else 0} Reboot=0 "
        f"ExitCode={job.get('exit_code', 0)}:{job.get('term_signal', 0)}",
        f"RunTime={format_hms(run)} TimeLimit={limit_str(limit)} "
        f"TimeMin={'N/A' if job.get('time_min') is None else limit_str(job['time_min'])}",
        f"SubmitTime={stamp(job.get('submit_time'), now)} "
        f"EligibleTime={stamp(eligible, now)}",
        # Corral has no separate accrue clock: priority age accrues from eligibility.
        f"AccrueTime={stamp(job.get('eligible_time'), now)}",
        f"StartTime={stamp(start, now)} EndTime={stamp(end, now)} Deadline=N/A",
        *([("CronJob=Yes " if job.get("cron_job") else "")
           + f'CrontabSpec="{job.get("cron_spec")}"'] if job.get("cron_spec") else []),
        f"SuspendTime={stamp(suspend_time, now, 'None')} SecsPreSuspend={pre_suspend} "
        f"LastSchedEval={stamp(job.get('last_sched_eval'), now)} "
        f"Scheduler={job.get('scheduler') or 'Main'}",
        f"Partition={job.get('partition', '')} "
        f"AllocNode:Sid={job.get('submit_host') or '(null)'}:{job.get('alloc_sid') or 0}",
        f"ReqNodeList={hostlists.compress(job.get('req_nodes') or []) or '(null)'} "
        f"ExcNodeList={hostlists.compress(job.get('exc_nodes') or []) or '(null)'}",
        node_line,
    ]
    if job.get("batch_host"):
        lines.append(f"BatchHost={job['batch_host']}")
    lines += [
        f"NumNodes={num_nodes} NumCPUs={res['cpus']} NumTasks={res['ntasks']} "
        f"CPUs/Task={job.get('cpus_per_task', 1)} ReqB:S:C:T=0:0:*:*",
        "TRES=" + tres_string(res["cpus"], res["mem"], res["nodes"], res["gpus"], gpu=tres_gpu),
        f"Socks/Node=* NtasksPerN:B:S:C={per_node}:0:*:* CoreSpec=*",
    ]
    if details:
        lines += detail_lines(job)
    lines += [
        f"MinCPUsNode={min_cpus_node} {min_mem} "
        f"MinTmpDiskNode={mbytes_exact(int(job.get('min_tmp_disk') or 0))}",
        f"Features={job.get('constraint') or '(null)'} DelayBoot=00:00:00",
        *([f"Reservation={job['reservation']}"] if job.get("reservation") else []),
        f"OverSubscribe={'NO' if job.get('exclusive') else 'OK'} Contiguous=0 "
        "Licenses=(null) Network=(null)",
        f"Command={job.get('command') or '(null)'}",
        f"WorkDir={job.get('work_dir', '')}",
    ]
    if job.get("comment"):
        lines.append(f"Comment={job['comment']} ")
    if job.get("batch", True):
        err, inp, out = _io_paths(job)
        lines += [f"StdErr={err}", f"StdIn={inp}", f"StdOut={out}"]
    lines.append("Power=")
    gres = f"gres:gpu:{job['gpu_type']}:" if job.get("gpu_type") else "gres:gpu:"
    if job.get("gpus"):
        lines.append(f"TresPerJob={gres}{job['gpus']}")
    if job.get("gpus_per_node"):
        lines.append(f"TresPerNode={gres}{job['gpus_per_node']}")
    if job.get("gpus_per_task"):
        lines.append(f"TresPerTask={gres}{job['gpus_per_task']}")
    if job.get("mail_type") and job.get("mail_user"):
        lines.append(f"MailUser={job['mail_user']} MailType={job['mail_type']}")
    sep = " " if one_liner else "\n   "
    lines = [escape(line) for line in lines]  # user-given names, comments, reasons
    # Slurm ends every job record with one more (empty) line start.
    return sep.join(lines) + sep + ("\n" if one_liner else "\n\n")


def _run_seconds(job: dict[str, Any], now: float) -> float:
    start = job.get("start_time")
    if start is None:
        return 0.0
    end = job.get("end_time")
    if end is None:
        end = job.get("suspend_time") if job.get("state") == "SUSPENDED" and \
            job.get("suspend_time") else now
    return max(0.0, end - start - float(job.get("suspended_secs") or 0))


# ---------------------------------------------------------------------------
# show node / partition / config
# ---------------------------------------------------------------------------

def _gres(gpus: int, gpu_type: str | None) -> str:
    if not gpus:
        return "(null)"
    return f"gpu:{gpu_type}:{gpus}" if gpu_type else f"gpu:{gpus}"


def format_node(node: dict[str, Any], *, one_liner: bool = False, tres_gpu: bool = True,
                now: float | None = None) -> str:
    """One node as `scontrol show node` prints it (`now` for relative SLURM_TIME_FORMAT)."""
    first = f"NodeName={node['name']} "
    if node.get("arch"):
        first += f"Arch={node['arch']} "
    first += f"CoresPerSocket={node.get('cores_per_socket', 1)} "
    cpu_load = node.get("cpu_load")
    load = "N/A" if cpu_load is None else f"{float(cpu_load):.2f}"
    free_mem = node.get("free_mem")
    features = ",".join(node.get("features") or []) or "(null)"
    lines = [
        first,
        f"CPUAlloc={node.get('alloc_cpus', 0)} CPUEfctv={node['cpus']} CPUTot={node['cpus']} "
        f"CPULoad={load}",
        f"AvailableFeatures={features}",
        f"ActiveFeatures={features}",
        f"Gres={_gres(int(node.get('gpus') or 0), node.get('gpu_type'))}",
        f"NodeAddr={node.get('addr') or node['name']} "
        f"NodeHostName={node.get('hostname') or node['name']} "
        f"Version={SLURM_VERSION if node.get('registered') else '(null)'}",
    ]
    if node.get("os"):
        lines.append(f"OS={node['os']} ")
    alloc_gpus = len(node.get("alloc_gpus") or [])
    lines += [
        f"RealMemory={node['real_memory']} AllocMem={node.get('alloc_mem', 0)} "
        f"FreeMem={'N/A' if free_mem is None else free_mem} "
        f"Sockets={node.get('sockets', 1)} Boards=1",
        f"State={node.get('state', 'UNKNOWN')} ThreadsPerCore={node.get('threads_per_core', 1)} "
        f"TmpDisk={int(node.get('tmp_disk') or 0)} Weight={node.get('weight', 1)} "
        "Owner=N/A MCS_label=N/A",
    ]
    if node.get("partitions"):
        lines.append(f"Partitions={','.join(node['partitions'])} ")
    lines += [
        f"BootTime={stamp(node.get('boot_time'), now, 'None')} "
        f"SlurmdStartTime={stamp(node.get('agent_start_time'), now, 'None')}",
        f"LastBusyTime={stamp(node.get('last_busy'), now)}",
        "CfgTRES=" + _node_tres(node["cpus"], node["real_memory"], None,
                                int(node.get("gpus") or 0), cfg=True, gpu=tres_gpu),
        "AllocTRES=" + (_node_tres(node.get("alloc_cpus", 0), node.get("alloc_mem", 0), None,
                                   alloc_gpus, cfg=False, gpu=tres_gpu)
                        if node.get("alloc_cpus") else ""),
        "CapWatts=n/a",
        "CurrentWatts=0 AveWatts=0",
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if node.get("reason"):
        reason = f"Reason={node['reason']}"
        if node.get("reason_user"):
            reason += f" [{node['reason_user']}@{stamp(node.get('reason_time'), now)}]"
        lines.append(reason)
    if node.get("comment"):
        lines.append(f"Comment={node['comment']}")
    sep = " " if one_liner else "\n   "
    lines = [escape(line) for line in lines]  # user-given names, comments, reasons
    return sep.join(lines) + ("\n" if one_liner else "\n\n")


def _node_tres(cpus: int, mem: int, nodes: int | None, gpus: int, *, cfg: bool, gpu: bool) -> str:
    # A node's configured TRES carries billing; its allocated TRES does not.
    return tres_string(cpus, mem, nodes, gpus, billing=cfg, gpu=gpu)


def _allow_or_deny(what: str, allow: str | None, deny: str | None) -> str:
    """AllowAccounts=… or, when only a deny list is set, DenyAccounts=… (Slurm prints one)."""
    allowed = allow if allow and allow.upper() != "ALL" else None
    if allowed is None and deny:
        return f"Deny{what}={deny}"
    return f"Allow{what}={allowed or 'ALL'}"


def format_partition(part: dict[str, Any], nodes: list[dict[str, Any]], *,
                     one_liner: bool = False, tres_gpu: bool = True) -> str:
    """One partition as `scontrol show partition` prints it; `nodes` gives its totals."""
    members = set(part.get("nodes") or [])
    mine = [n for n in nodes if n["name"] in members]
    total_cpus = sum(int(n["cpus"]) for n in mine)
    total_mem = sum(int(n["real_memory"]) for n in mine)
    total_gpus = sum(int(n.get("gpus") or 0) for n in mine)

    def yn(v: Any) -> str:
        return "YES" if v else "NO"

    default_time = part.get("default_time")
    max_nodes = part.get("max_nodes")
    def_mem = (f"DefMemPerCPU={part['def_mem_per_cpu']}" if part.get("def_mem_per_cpu")
               else "DefMemPerNode=UNLIMITED")
    max_mem = (f"MaxMemPerNode={part['max_mem_per_node']}" if part.get("max_mem_per_node")
               else "MaxMemPerNode=UNLIMITED")
    max_cpus = part.get("max_cpus_per_node")
    job_defaults = ",".join(f"{key}={part[name]}" for key, name in (
        ("DefCpuPerGPU", "def_cpu_per_gpu"), ("DefMemPerGPU", "def_mem_per_gpu"))
        if part.get(name)) or "(null)"
    lines = [
        f"PartitionName={part['name']}",
        f"AllowGroups={part.get('allow_groups') or 'ALL'} "
        + _allow_or_deny("Accounts", part.get("allow_accounts"), part.get("deny_accounts"))
        + " " + _allow_or_deny("Qos", part.get("allow_qos"), part.get("deny_qos")),
        f"AllocNodes=ALL Default={yn(part.get('default'))} QoS={part.get('qos') or 'N/A'}",
        f"DefaultTime={'NONE' if default_time is None else limit_str(default_time)} "
        f"DisableRootJobs=NO ExclusiveUser={yn(part.get('exclusive_user'))} GraceTime=0 "
        f"Hidden={yn(part.get('hidden'))}",
        f"MaxNodes={'UNLIMITED' if max_nodes is None else max_nodes} "
        f"MaxTime={limit_str(part.get('max_time', -1))} MinNodes={part.get('min_nodes', 0)} "
        f"LLN=NO MaxCPUsPerNode={'UNLIMITED' if max_cpus is None else max_cpus}",
        f"Nodes={hostlists.compress(part.get('nodes') or []) or '(null)'}",
        f"PriorityJobFactor={part.get('priority_job_factor', 1)} "
        f"PriorityTier={part.get('priority_tier', 1)} RootOnly={yn(part.get('root_only'))} "
        "ReqResv=NO "
        f"OverSubscribe={part.get('oversubscribe') or 'NO'}",
        "OverTimeLimit=NONE PreemptMode="
        + _config_value("PreemptMode", str(part.get("preempt_mode_shown") or "OFF")),
        f"State={part.get('state') or 'UP'} TotalCPUs={total_cpus} TotalNodes={len(mine)} "
        "SelectTypeParameters=NONE",
        f"JobDefaults={job_defaults}",
        f"{def_mem} {max_mem}",
        "TRES=" + tres_string(total_cpus, total_mem, len(mine), total_gpus, gpu=tres_gpu),
    ]
    sep = " " if one_liner else "\n   "
    lines = [escape(line) for line in lines]  # user-given names, comments, reasons
    return sep.join(lines) + ("\n" if one_liner else "\n\n")


# Options whose value is a count of seconds: scontrol prints them with a unit.
_SECONDS_KEYS = {"KillWait", "SlurmdTimeout", "MinJobAge", "HealthCheckInterval",
                 "AcctGatherNodeFreq", "ExtSensorsFreq", "GetEnvTimeout", "GroupUpdateTime",
                 "TCPTimeout",
                 "SchedulerInterval", "MessageTimeout", "SlurmctldTimeout", "InactiveLimit",
                 "BatchStartTimeout", "CompleteWait", "ResumeTimeout", "SuspendTimeout",
                 "WaitTime", "UnkillableStepTimeout", "SchedulerTimeSlice"}
# Options in Slurm's time-limit syntax ("7-0") that scontrol prints as D-HH:MM:SS.
_DURATION_KEYS = {"PriorityMaxAge", "PriorityDecayHalfLife", "PriorityCalcPeriod",
                  "PreemptExemptTime"}


def _config_value(key: str, value: str) -> str:
    if value == "":
        return "(null)"
    if key in _SECONDS_KEYS and value.lstrip("-").isdigit():
        return f"{value} sec"
    if key in _DURATION_KEYS:
        from corral.model.timefmt import TimeFormatError, parse_time_limit

        try:
            return limit_str(parse_time_limit(value))  # a bare number is minutes
        except TimeFormatError:
            return value
    if key in ("SlurmUser", "SlurmdUser"):
        try:
            import pwd

            return f"{value}({pwd.getpwnam(value).pw_uid})"
        except KeyError:
            return value
    if key == "SelectTypeParameters":
        return value.upper()
    if key == "PreemptMode":  # Slurm's preempt_mode_string: GANG first ("GANG,SUSPEND")
        modes = [m.strip().upper() for m in value.split(",") if m.strip()]
        return ",".join(sorted(modes, key=lambda m: m != "GANG"))
    return value


# Every key `scontrol show config` of Slurm 22.05 prints, in its order, with the value
# printed when slurm.conf does not set it (Slurm's defaults; None: computed below).
_CONFIG_KEYS: tuple[tuple[str, str | None], ...] = (
    ("AccountingStorageBackupHost", "(null)"), ("AccountingStorageEnforce", "none"),
    ("AccountingStorageHost", "(null)"), ("AccountingStorageExternalHost", "(null)"),
    ("AccountingStorageParameters", "(null)"), ("AccountingStoragePort", "0"),
    ("AccountingStorageTRES", "cpu,mem,energy,node,billing,fs/disk,vmem,pages"),
    ("AccountingStorageType", "accounting_storage/none"), ("AccountingStorageUser", "N/A"),
    ("AccountingStoreFlags", "(null)"), ("AcctGatherEnergyType", "acct_gather_energy/none"),
    ("AcctGatherFilesystemType", "acct_gather_filesystem/none"),
    ("AcctGatherInterconnectType", "acct_gather_interconnect/none"),
    ("AcctGatherNodeFreq", "0 sec"), ("AcctGatherProfileType", "acct_gather_profile/none"),
    ("AllowSpecResourcesUsage", "No"), ("AuthAltTypes", "(null)"),
    ("AuthAltParameters", "(null)"), ("AuthInfo", "(null)"), ("AuthType", "auth/munge"),
    ("BatchStartTimeout", "10 sec"), ("BcastExclude", "/lib,/usr/lib,/lib64,/usr/lib64"),
    ("BcastParameters", "(null)"), ("BOOT_TIME", None), ("BurstBufferType", "(null)"),
    ("CliFilterPlugins", "(null)"), ("ClusterName", None),
    ("CommunicationParameters", "NoInAddrAny,NoCtldInAddrAny"), ("CompleteWait", "0 sec"),
    ("CoreSpecPlugin", "core_spec/none"), ("CpuFreqDef", "Unknown"),
    ("CpuFreqGovernors", "OnDemand,Performance,UserSpace"), ("CredType", "cred/munge"),
    ("DebugFlags", "(null)"), ("DefMemPerCPU", None), ("DependencyParameters", "(null)"),
    ("DisableRootJobs", "No"), ("EioTimeout", "60"), ("EnforcePartLimits", "NO"),
    ("Epilog", "(null)"), ("EpilogMsgTime", "2000 usec"), ("EpilogSlurmctld", "(null)"),
    ("ExtSensorsType", "ext_sensors/none"), ("ExtSensorsFreq", "0 sec"),
    ("FairShareDampeningFactor", "1"), ("FederationParameters", "(null)"), ("FirstJobId", "1"),
    ("GetEnvTimeout", "2 sec"), ("GresTypes", "gpu"), ("GpuFreqDef", "high,memory=high"),
    ("GroupUpdateForce", "1"), ("GroupUpdateTime", "600 sec"), ("HASH_VAL", "Match"),
    ("HealthCheckInterval", "0 sec"), ("HealthCheckNodeState", "ANY"),
    ("HealthCheckProgram", "(null)"), ("InactiveLimit", "0 sec"),
    ("InteractiveStepOptions", "--interactive --preserve-env --pty $SHELL"),
    ("JobAcctGatherFrequency", "30"), ("JobAcctGatherType", "jobacct_gather/none"),
    ("JobAcctGatherParams", "(null)"), ("JobCompHost", "localhost"),
    ("JobCompLoc", "/var/log/slurm_jobcomp.log"), ("JobCompPort", "0"),
    ("JobCompType", "jobcomp/none"), ("JobCompUser", "root"),
    ("JobContainerType", "job_container/none"), ("JobCredentialPrivateKey", "(null)"),
    ("JobCredentialPublicCertificate", "(null)"), ("JobDefaults", "(null)"),
    ("JobFileAppend", "0"), ("JobRequeue", "1"), ("JobSubmitPlugins", "(null)"),
    ("KillOnBadExit", "0"), ("KillWait", "30 sec"), ("LaunchParameters", "(null)"),
    ("LaunchType", "launch/slurm"), ("Licenses", "(null)"), ("LogTimeFormat", "iso8601_ms"),
    ("MailDomain", "(null)"), ("MailProg", "/bin/mail"), ("MaxArraySize", "100001"),
    ("MaxDBDMsgs", "200016"), ("MaxJobCount", "100000"), ("MaxJobId", "67043328"),
    ("MaxMemPerNode", None), ("MaxNodeCount", None), ("MaxStepCount", "40000"),
    ("MaxTasksPerNode", "512"), ("MCSPlugin", "mcs/none"), ("MCSParameters", "(null)"),
    ("MessageTimeout", "10 sec"), ("MinJobAge", "300 sec"), ("MpiDefault", "none"),
    ("MpiParams", "(null)"), ("MULTIPLE_SLURMD", "Yes"), ("NEXT_JOB_ID", None),
    ("NodeFeaturesPlugins", "(null)"), ("OverTimeLimit", "0 min"),
    ("PluginDir", "/usr/local/lib/slurm"), ("PlugStackConfig", "(null)"),
    ("PowerParameters", "(null)"), ("PowerPlugin", ""), ("PreemptMode", "OFF"),
    ("PreemptType", "preempt/none"), ("PreemptExemptTime", "00:00:00"),
    ("PrEpParameters", "(null)"), ("PrEpPlugins", "prep/script"),
    ("PriorityParameters", "(null)"), ("PrioritySiteFactorParameters", "(null)"),
    ("PrioritySiteFactorPlugin", "(null)"), ("PriorityDecayHalfLife", "7-00:00:00"),
    ("PriorityCalcPeriod", "00:05:00"), ("PriorityFavorSmall", "No"), ("PriorityFlags", ""),
    ("PriorityMaxAge", "7-00:00:00"), ("PriorityUsageResetPeriod", "NONE"),
    ("PriorityType", "priority/multifactor"), ("PriorityWeightAge", "0"),
    ("PriorityWeightAssoc", "0"), ("PriorityWeightFairShare", "0"),
    ("PriorityWeightJobSize", "0"), ("PriorityWeightPartition", "0"), ("PriorityWeightQOS", "0"),
    ("PriorityWeightTRES", "(null)"), ("PrivateData", "none"),
    ("ProctrackType", "proctrack/linuxproc"), ("Prolog", "(null)"),
    ("PrologEpilogTimeout", "65534"), ("PrologSlurmctld", "(null)"), ("PrologFlags", "(null)"),
    ("PropagatePrioProcess", "0"), ("PropagateResourceLimits", "ALL"),
    ("PropagateResourceLimitsExcept", "(null)"), ("RebootProgram", "(null)"),
    ("ReconfigFlags", "(null)"), ("RequeueExit", "(null)"), ("RequeueExitHold", "(null)"),
    ("ResumeFailProgram", "(null)"), ("ResumeProgram", "(null)"), ("ResumeRate", "300 nodes/min"),
    ("ResumeTimeout", "60 sec"), ("ResvEpilog", "(null)"), ("ResvOverRun", "0 min"),
    ("ResvProlog", "(null)"), ("ReturnToService", "0"), ("RoutePlugin", "route/default"),
    ("SchedulerParameters", "(null)"), ("SchedulerTimeSlice", "30 sec"),
    ("SchedulerType", "sched/backfill"), ("ScronParameters", "(null)"),
    ("SelectType", "select/cons_tres"), ("SelectTypeParameters", "CR_CORE_MEMORY"),
    ("SlurmUser", "root"), ("SlurmctldAddr", "(null)"), ("SlurmctldDebug", "info"),
    ("SlurmctldHost[0]", None), ("SlurmctldLogFile", "(null)"), ("SlurmctldPort", "16817"),
    ("SlurmctldSyslogDebug", "(null)"), ("SlurmctldPrimaryOffProg", "(null)"),
    ("SlurmctldPrimaryOnProg", "(null)"), ("SlurmctldTimeout", "120 sec"),
    ("SlurmctldParameters", "(null)"), ("SlurmdDebug", "info"), ("SlurmdLogFile", "(null)"),
    ("SlurmdParameters", "config_overrides"), ("SlurmdPidFile", "/var/run/slurmd.pid"),
    ("SlurmdPort", "16818"), ("SlurmdSpoolDir", "/var/spool/slurmd"),
    ("SlurmdSyslogDebug", "(null)"), ("SlurmdTimeout", "300 sec"), ("SlurmdUser", "root"),
    ("SlurmSchedLogFile", "(null)"), ("SlurmSchedLogLevel", "0"),
    ("SlurmctldPidFile", "/var/run/slurmctld.pid"), ("SlurmctldPlugstack", "(null)"),
    ("SLURM_CONF", None), ("SLURM_VERSION", None), ("SrunEpilog", "(null)"),
    ("SrunPortRange", "0-0"), ("SrunProlog", "(null)"), ("StateSaveLocation", "/var/spool"),
    ("SuspendExcNodes", "(null)"), ("SuspendExcParts", "(null)"), ("SuspendProgram", "(null)"),
    ("SuspendRate", "60 nodes/min"), ("SuspendTime", "INFINITE"), ("SuspendTimeout", "30 sec"),
    ("SwitchParameters", "(null)"), ("SwitchType", "switch/none"), ("TaskEpilog", "(null)"),
    ("TaskPlugin", "task/none"), ("TaskPluginParam", "(null type)"), ("TaskProlog", "(null)"),
    ("TCPTimeout", "2 sec"), ("TmpFS", "/tmp"), ("TopologyParam", "(null)"),
    ("TopologyPlugin", "topology/none"), ("TrackWCKey", "No"), ("TreeWidth", "50"),
    ("UsePam", "No"), ("UnkillableStepProgram", "(null)"), ("UnkillableStepTimeout", "60 sec"),
    ("VSizeFactor", "0 percent"), ("WaitTime", "0 sec"), ("X11Parameters", "(null)"),
)

# Keys whose values carry a unit when printed.
_UNIT_KEYS = {"EpilogMsgTime": "usec", "OverTimeLimit": "min", "ResvOverRun": "min",
              "ResumeRate": "nodes/min", "SuspendRate": "nodes/min", "VSizeFactor": "percent"}


def format_config(config: dict[str, Any], now: float, host: str) -> str:
    """`scontrol show config`: every key Slurm prints, in its order; slurm.conf's values
    (keys matched case-insensitively) over Slurm's defaults."""
    given = {str(k).lower(): str(v) for k, v in (config.get("options") or {}).items()}

    def option(key: str) -> str | None:
        value = given.get(key.lower())
        if value is None:
            return None
        if key in _UNIT_KEYS and value.isdigit():
            return f"{value} {_UNIT_KEYS[key]}"
        return _config_value(key, value)

    computed = {
        "BOOT_TIME": stamp(config["started"], now) if config.get("started") else "Unknown",
        "ClusterName": str(config.get("cluster_name") or given.get("clustername") or "(null)"),
        "NEXT_JOB_ID": str(config.get("next_job_id") or "(null)"),
        "MaxNodeCount": str(config.get("node_count") or "(null)"),
        "SLURM_CONF": str(config.get("config_path") or "(null)"),
        "SLURM_VERSION": SLURM_VERSION,
        "SlurmctldHost[0]": given.get("slurmctldhost") or host,
        "MaxMemPerNode": "UNLIMITED",
    }
    out = [f"Configuration data as of {stamp(now, now)}\n"]
    for key, default in _CONFIG_KEYS:
        if key == "DefMemPerCPU":  # DefMemPerCPU or DefMemPerNode, whichever is set
            for name in ("DefMemPerCPU", "DefMemPerNode"):
                if option(name) is not None:
                    key, value = name, str(option(name))
                    break
            else:
                key, value = "DefMemPerNode", "UNLIMITED"
        elif key == "MaxMemPerNode" and option("MaxMemPerCPU") is not None:
            key, value = "MaxMemPerCPU", str(option("MaxMemPerCPU"))
        elif key in ("ClusterName", "SLURM_CONF", "SLURM_VERSION", "BOOT_TIME"):
            value = computed[key]
        else:
            value = option(key.split("[")[0]) or (computed[key] if default is None else default)
            if default is not None and option(key) is None and key in ("SlurmUser", "SlurmdUser"):
                value = _config_value(key, default)
        out.append(f"{key:<23} = {value}\n")
    out.append("\n")
    out.append(f"Slurmctld(primary) at {host} is UP\n")
    return "".join(out)


# ---------------------------------------------------------------------------
# update
# ---------------------------------------------------------------------------

_JOB_UPDATE_KEYS = {"timelimit": "TimeLimit", "partition": "Partition", "numnodes": "NumNodes",
                    "dependency": "Dependency", "name": "Name", "jobname": "Name",
                    "nice": "Nice", "comment": "Comment", "priority": "Priority",
                    "starttime": "StartTime", "begintime": "StartTime",
                    "eligibletime": "StartTime", "arraytaskthrottle": "ArrayTaskThrottle"}
_NODE_STATES = ("drain", "resume", "down", "idle", "undrain")


def _split_kv(args: list[str]) -> list[tuple[str, str | None, str]]:
    """[("key", value or None, original)] from key=value words."""
    out: list[tuple[str, str | None, str]] = []
    for a in args:
        k, eq, v = a.partition("=")
        out.append((k.lower(), v if eq else None, a))
    return out


def parse_update_job(args: list[str], now: float | None = None) -> tuple[list[str], dict[str, Any]]:
    """`update JobId=N key=value …` → (job ids, PATCH body). Raises UsageError.

    StartTime= takes Slurm's time forms (`now`, `now+1hour`, `16:00`, `2026-12-01T08:00`…)
    and is sent as epoch seconds; Priority= as an integer."""
    ids, body, _ = parse_update_job_request(args, now)
    return ids, body


def parse_update_job_request(args: list[str], now: float | None = None,
                             ) -> tuple[list[str], dict[str, Any], int | None]:
    """`parse_update_job`, and the uid of UserId= (None without it).  Without JobId= a
    JobName= names the jobs to update (the ids come back empty): those of that name, of
    that user only with UserId=, as Slurm 22.05's scontrol does."""
    ids: list[str] = []
    body: dict[str, Any] = {}
    uid: int | None = None
    for key, value, orig in _split_kv(args):
        if value is None:
            raise UsageError(f"Invalid input: {orig}\nRequest aborted")
        if key in ("jobid", "job"):
            ids += [i for i in value.split(",") if i]
        elif len(key) >= 3 and "userid".startswith(key):
            uid = _uid_of(value)
            if uid is None:
                raise UsageError(f"Invalid UserID: {value}\nRequest aborted")
        elif key in _JOB_UPDATE_KEYS:
            api_key = _JOB_UPDATE_KEYS[key]
            if api_key == "Nice":
                try:
                    body[api_key] = int(value)
                except ValueError:
                    raise UsageError(f"Invalid nice value: {value}\nRequest aborted") from None
            elif api_key == "NumNodes" and value.isdigit():
                body[api_key] = int(value)
            elif api_key == "Priority":
                if not value.isdigit() or int(value) >= 2**32 - 1:
                    raise UsageError(f"Invalid Priority value: {value}\nRequest aborted")
                body[api_key] = int(value)
            elif api_key == "StartTime":
                from corral.model.timeparse import TimeParseError, parse_time

                try:
                    body[api_key] = parse_time(value, time.time() if now is None else now)
                except TimeParseError as e:
                    raise UsageError(f"{e.message or 'Invalid time specification'}\n"
                                     "Request aborted") from None
            else:
                body[api_key] = value
        else:
            raise UsageError(f"Update of this parameter is not supported: {orig}\nRequest aborted")
    if not ids and "Name" not in body:
        raise UsageError("No job id specified\nRequest aborted")
    if not body:
        raise UsageError("No changes specified\nRequest aborted")
    return ids, body, uid


def _uid_of(text: str) -> int | None:
    """Slurm's uid_from_string: a user name, or a uid number."""
    import pwd

    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        pass
    return int(text) if text.isdigit() and int(text) < 2**32 - 1 else None


def jobs_named(name: str, uid: int | None) -> list[str]:
    """The ids of the jobs called `name` (of `uid` only, when given), as scontrol's
    _job_name2id finds them; UsageError with its message when there are none."""
    jobs = client.get("/v1/jobs", finished=1,
                      fields="job_id,name,uid,array_job_id,array_task_id").get("jobs") or []
    if not jobs:
        raise UsageError(f"scontrol: error: JobName {name} not found")
    ids = [f"{j['array_job_id']}_{j['array_task_id']}" if j.get("array_task_id") is not None
           else str(j["job_id"]) for j in jobs
           if j.get("name") == name and (uid is None or j.get("uid") == uid)]
    if not ids:
        raise UsageError(f"scontrol: error: No jobs with name '{name}'" if uid is None else
                         f"scontrol: error: No jobs with user ID {uid} and name '{name}'")
    return ids


def parse_update_node(args: list[str]) -> tuple[str, dict[str, Any]]:
    """`update NodeName=EXPR State=… Reason=…` → (hostlist, PATCH body). Raises UsageError."""
    names = ""
    body: dict[str, Any] = {}
    for key, value, orig in _split_kv(args):
        if value is None:
            raise UsageError(f"Invalid input: {orig}\nRequest aborted")
        if key in ("nodename", "node"):
            names = value
        elif key == "state":
            state = value.lower()
            if state not in _NODE_STATES:
                raise UsageError(f"Invalid input: {orig}\nRequest aborted\n Valid states are: "
                                 + " ".join(s.upper() for s in _NODE_STATES))
            body["state"] = state
        elif key == "reason":
            body["reason"] = value
        else:
            raise UsageError(f"Update of this parameter is not supported: {orig}\nRequest aborted")
    if not names:
        raise UsageError("No node name specified\nRequest aborted")
    if body.get("state") in ("drain", "down") and not body.get("reason"):
        raise UsageError("You must specify a reason when DOWNING or DRAINING a node. "
                         "Request denied")
    return names, body


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------

_HELP = """\
scontrol [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -a or --all: equivalent to "all" command
     -d or --details: equivalent to "details" command
     -h or --help: equivalent to "help" command
     -o or --oneliner: equivalent to "oneliner" command
     -q or --quiet: equivalent to "quiet" command
     -v or --verbose: equivalent to "verbose" command
     -V or --version: equivalent to "version" command

  <keyword> may be omitted from the execute line and scontrol will execute
  in interactive mode (not supported by Corral).

    Valid <COMMAND> values are:
     create <SPECIFICATIONS>  create a new partition or reservation.
     delete <SPECIFICATIONS>  delete the specified partition or reservation.
     details                  evoke additional details with the "show" command
     hold <job_list>          prevent specified job from starting.
     notify <job_id> msg      send message to specified job
     oneliner                 report output one record per line.
     ping                     print status of slurmctld daemons.
     reconfigure              re-read the configuration file.
     release <job_list>       permit specified job to start (see hold)
     requeue <job_list>       re-queue a batch job
     requeuehold <job_list>   re-queue and hold a batch job
     resume <job_list>        resume previously suspended job (see suspend)
     show <ENTITY> [<ID>]     display state of identified entity, default
                              is all records.
     suspend <job_list>       susend specified job (see resume)
     top <job_list>           Put specified job first in queue for user
     uhold <job_list>         place user hold on specified job (see hold)
     update <SPECIFICATIONS>  update job or node configuration.
     version                  display tool version number.

  <ENTITY> may be "config", "hostnames", "hostlist", "job", "node" or "partition".

  <SPECIFICATIONS> are specified in the same format as the configuration
  file. You may wish to use the "show" keyword then use its output as
  input for the update keyword, editing as needed.

  Corral updates jobs (TimeLimit, Partition, NumNodes, Dependency, Name, Nice,
  Comment, Priority, StartTime), nodes (State=DRAIN|RESUME|DOWN|IDLE|UNDRAIN, Reason,
  Features, Weight, Comment) and partitions (create, update and delete; operators only).
"""

_ACTIONS = ("hold", "uhold", "release", "requeue", "requeuehold", "suspend", "resume")
_ENTITIES = ("jobs", "nodes", "partitions", "config", "hostnames", "hostlist", "hostlistsorted")


def _getopt_error(prog: str, err: getopt.GetoptError) -> str:
    """GNU getopt's own wording for a bad option."""
    opt = err.opt
    msg = err.msg
    is_long = msg.startswith("option --")
    if "requires argument" in msg:
        return (f"{prog}: option '--{opt}' requires an argument" if is_long
                else f"{prog}: option requires an argument -- '{opt}'")
    if "must not have an argument" in msg:
        return f"{prog}: option '--{opt}' doesn't allow an argument"
    if "not a unique prefix" in msg:
        return f"{prog}: option '--{opt}' is ambiguous"
    return (f"{prog}: unrecognized option '--{opt}'" if is_long
            else f"{prog}: invalid option -- '{opt}'")


def _match_entity(word: str) -> str | None:
    w = word.lower()
    if w in ("job", "node", "partition", "hostname"):
        w += "s"
    hits = [e for e in _ENTITIES if e.startswith(w)]
    if len(hits) > 1 and w in hits:
        return w
    return hits[0] if len(hits) == 1 else None


def _tres_gpu(config: dict[str, Any] | None) -> bool:
    """Whether GPUs appear in TRES strings: Corral accounts them unless
    AccountingStorageTRES is set without gres/gpu (Slurm's default behaviour)."""
    if not config:
        return True
    value = (config.get("options") or {}).get("AccountingStorageTRES")
    return value is None or "gres/gpu" in str(value).lower()


def _print_hosts(expr: str | None) -> int:
    """scontrol_print_hosts: an empty or bad list is reported, and the exit code stays 0."""
    if not expr:
        sys.stderr.write("scontrol: error: host list is empty\n")
        return 0
    try:
        names = hostlists.expand(expr)
    except hostlists.HostlistError:
        sys.stderr.write(f"Invalid hostlist: {expr}\n")
        return 0
    sys.stdout.write("".join(f"{n}\n" for n in names))
    return 0


def array_element(jobs: list[dict[str, Any]], ident: str | None) -> list[dict[str, Any]]:
    """For `show job 7_3`: the records of task 3 only, the pending array's record shown as
    that task (ArrayTaskId=3), as scontrol_print_job does."""
    if "_" not in (ident or ""):  # no task named: spares the `re` import
        return jobs
    import re

    m = re.fullmatch(r"(\d+)_(\d+)", ident or "")
    if not m:
        return jobs
    array_id, task = int(m.group(1)), int(m.group(2))
    out: list[dict[str, Any]] = []
    for j in jobs:
        if j.get("array_job_id") not in (None, array_id):
            out.append(j)  # not this array's record: the controller chose it, keep it
        elif j.get("array_tasks") is not None:
            if task in j["array_tasks"]:
                out.append({**j, "array_tasks": None, "array_task_id": task,
                            "array_max_running": None})
        elif j.get("array_task_id") in (None, task):
            out.append(j)
    return out


def _show(entity: str, ident: str | None, one_liner: bool, details: bool = False) -> int:
    out = sys.stdout
    if entity == "hostnames":
        return _print_hosts(ident if ident is not None else os.environ.get("SLURM_JOB_NODELIST"))
    if entity in ("hostlist", "hostlistsorted"):
        if not ident:
            sys.stderr.write("scontrol: error: no list of host names given\n")
            return 1
        try:
            names = hostlists.expand(ident)
        except hostlists.HostlistError:
            sys.stderr.write(f"Invalid hostlist: {ident}\n")
            return 1
        if entity == "hostlistsorted":
            names = sorted(names)
        out.write(hostlists.compress(names) + "\n")
        return 0
    if entity == "config":
        cfg = client.get("/v1/config")
        # uname's node name is gethostname(2) on Linux, without importing socket.
        out.write(format_config(cfg, time.time(), os.uname().nodename.split(".")[0]))
        return 0
    config = client.get("/v1/config")
    if entity == "jobs":
        try:
            ans = client.get("/v1/jobs", ids=ident, finished=1)
        except client.ApiError as e:
            sys.stderr.write(f"slurm_load_jobs error: {e.message}\n")
            return 1
    else:
        ans = client.get("/v1/nodes")
    rc, text, error = show_text(entity, ident, one_liner, details, config, ans)
    out.write(text)
    sys.stderr.write(error)
    return rc


def show_text(entity: str, ident: str | None, one_liner: bool, details: bool,
              config: dict[str, Any], ans: dict[str, Any]) -> tuple[int, str, str]:
    """`scontrol show jobs|nodes|partitions [ident]` from the controller's answers (its
    config, and its jobs or nodes): (exit code, stdout, stderr).  The controller prints
    `show job|node ID` with it too (controller/api_text.py)."""
    tres_gpu = _tres_gpu(config)
    if entity == "jobs":
        jobs = array_element(ans.get("jobs") or [], ident)
        if not jobs:
            if ident:
                return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
            return 0, "No jobs in the system\n", ""
        now = float(ans.get("now") or time.time())
        return 0, "".join(format_job(j, now, one_liner=one_liner, tres_gpu=tres_gpu,
                                     details=details) for j in jobs), ""
    nodes = ans.get("nodes") or []
    if entity == "nodes":
        if ident:
            wanted = set(hostlists.expand(ident))
            nodes = [n for n in nodes if n["name"] in wanted]
            if not nodes:
                return 1, f"Node {ident} not found\n", ""
        if not nodes:
            return 0, "No nodes in the system\n", ""
        return 0, "".join(format_node(n, one_liner=one_liner, tres_gpu=tres_gpu,
                                      now=ans.get("now")) for n in nodes), ""
    parts = ans.get("partitions") or []
    if ident:
        parts = [p for p in parts if p["name"] == ident]
        if not parts:
            return 1, f"Partition {ident} not found\n", ""
    if not parts:
        return 0, "No partitions in the system\n", ""
    return 0, "".join(format_partition(p, nodes, one_liner=one_liner, tres_gpu=tres_gpu)
                      for p in parts), ""


# slurm_errno.h: a job update (hold, release, update) of another user's job fails with
# ESLURM_USER_ID_MISSING, "Invalid user id"; requeue and suspend say ESLURM_ACCESS_DENIED.
ESLURM_ACCESS_DENIED = 2002
ESLURM_USER_ID_MISSING = 2010


def update_error(job_id: str, e: client.ApiError) -> str:
    """The message Slurm prints when a job update is refused.

    The controller answers "Access/permission denied" for both an update Slurm denies as
    such (a user lengthening a time limit) and one of another user's job, which Slurm
    reports as "Invalid user id"; the job's owner tells them apart."""
    if e.status != 403 or e.payload.get("errno") == ESLURM_USER_ID_MISSING:
        return e.message
    try:
        jobs = client.get("/v1/jobs", ids=job_id, fields="job_id,uid").get("jobs") or []
    except client.ApiError:
        return e.message
    if jobs and all(j.get("uid") not in (None, os.getuid()) for j in jobs):
        return "Invalid user id"
    return e.message


def _job_action(action: str, id_args: list[str]) -> int:
    ids = [i for a in id_args for i in a.split(",") if i]
    if not ids:
        sys.stderr.write(f"scontrol: error: too few arguments for keyword:{action}\n")
        return 1
    rc = 0
    perror = "slurm_requeue error" if action.startswith("requeue") else "slurm_suspend error"
    if action.startswith("requeue"):
        # `scontrol requeue $SLURM_JOB_ID` run by the job itself (submitit does) is killed
        # with the job it requeues; the answer and our exit status must survive that.
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for job_id in ids:
        try:
            client.post(f"/v1/jobs/{quote(job_id, safe='')}/{action}")
        except client.ApiError as e:
            msg = update_error(job_id, e) if action in ("hold", "uhold", "release") \
                else e.message
            sys.stderr.write(f"{msg} for job {job_id}\n{perror}: {msg}\n")
            rc = 1
    return rc


def controller_host(answer: dict[str, Any] | None) -> str:
    """The controller's host name as Slurm prints it (SlurmctldHost without its address)."""
    host = str((answer or {}).get("host") or "")
    # Without a host in the answer, the controller is the one whose socket is on this machine.
    return host or os.uname().nodename.split(".")[0]


def _ping() -> int:
    """Slurm's `scontrol ping`: one line per controller, exit 1 when the primary is down."""
    try:
        answer = client.get("/v1/ping")
        up = bool(answer.get("ok", True))
    except (client.NotRunning, client.ApiError, OSError):
        answer, up = None, False
    sys.stdout.write(f"Slurmctld(primary) at {controller_host(answer)} is "
                     f"{'UP' if up else 'DOWN'}\n")
    if up:
        return 0
    if os.getuid() == 0:
        sys.stdout.write("*****************************************\n"
                         "** RESTORE SLURMCTLD DAEMON TO SERVICE **\n"
                         "*****************************************\n")
    return 1


def _notify(args: list[str]) -> int:
    """`scontrol notify JOBID MESSAGE…`: a message to the job's srun/salloc."""
    if len(args) < 2:
        sys.stderr.write("too few arguments for keyword:notify\n")
        return 1
    job_id = args[0]
    import re

    if not re.fullmatch(r"\d+(_\d+)?", job_id):
        sys.stderr.write(f"Invalid job_id {job_id}\n")
        return 1
    try:
        client.post(f"/v1/jobs/{quote(job_id, safe='')}/notify", {"message": " ".join(args[1:])})
    except client.ApiError as e:
        sys.stderr.write(f"notify_job: {e.message}\n")
        return 1
    return 0


def _top(args: list[str]) -> int:
    """`scontrol top JOBLIST`: these pending jobs before the user's other jobs."""
    if not args:
        sys.stderr.write("too few arguments for keyword:top\n")
        return 1
    if len(args) > 1:
        sys.stderr.write("too many arguments for keyword:top\n")
        return 1
    ids = [i for i in args[0].split(",") if i]
    rc = 0
    for job_id in ids:
        try:
            client.post(f"/v1/jobs/{quote(job_id, safe='')}/top")
        except client.ApiError as e:
            sys.stderr.write(f"top_job: {e.message}\n")
            rc = 1
    return rc


def _reconfigure(args: list[str]) -> int:
    """`scontrol reconfigure`: the controller re-reads slurm.conf."""
    if args:
        sys.stderr.write("too many arguments for keyword:reconfigure\n")
        return 1
    try:
        client.post("/v1/reconfigure")
    except client.ApiError as e:
        sys.stderr.write(f"slurm_reconfigure error: {e.message}\n")
        return 1
    except ValueError:  # a controller without the endpoint answers a plain-text 404
        sys.stderr.write("slurm_reconfigure error: this controller cannot re-read its "
                         "configuration (restart it with `corral down` and `corral up`)\n")
        return 1
    return 0


# _update_it's entity tags: each a case-insensitive prefix of at least so many letters.
_UPDATE_TAGS = (("jobid", 3), ("jobname", 3), ("stepid", 4), ("reservationname", 3),
                ("nodename", 3), ("frontendname", 2), ("partitionname", 3),
                ("slurmctlddebug", 2))
# ... and the order it tries them in (a job update may name a partition or reservation)
_UPDATE_ORDER = (("jobid", "jobname"), ("stepid",), ("reservationname",), ("nodename",),
                 ("frontendname",), ("partitionname",), ("slurmctlddebug",))
_CANONICAL_TAG = {"jobid": "JobId", "nodename": "NodeName", "partitionname": "PartitionName"}


def update_tag(word: str) -> str | None:
    """The entity a word of `scontrol update` names (`par=x` → partitionname), or None."""
    tag = word.partition("=")[0].lower()
    for name, least in _UPDATE_TAGS:
        if len(tag) >= least and name.startswith(tag):
            return name
    return None


def update_entity(args: list[str]) -> tuple[str | None, list[str]]:
    """(the entity `scontrol update ARGS` updates, ARGS with its naming word spelled in full
    so that the entity's parser knows it), in _update_it's order."""
    tags = [update_tag(a) for a in args]
    for names in _UPDATE_ORDER:
        if any(t in names for t in tags):
            canonical = _CANONICAL_TAG.get(names[0])
            if canonical is None:
                return names[0], args
            return names[0], [f"{canonical}={a.partition('=')[2]}" if t == names[0] and "=" in a
                              else a for a, t in zip(args, tags, strict=True)]
    return None, args


def _update(args: list[str]) -> int:
    if not args:
        sys.stderr.write("scontrol: error: too few arguments for keyword:update\n")
        return 1
    entity, args = update_entity(args)
    if entity in ("partitionname", "nodename"):
        from corral.cli import scontrol_admin  # partitions and node features: admin only
        if entity == "partitionname":
            return scontrol_admin.partition_command("update", args)
        if scontrol_admin.wants_node_attrs(args):
            return scontrol_admin.node_command(args)
    try:
        if entity in ("jobid", "jobname"):
            ids, body, uid = parse_update_job_request(args)
            if not ids:  # JobName= without JobId=: every job of that name
                ids = jobs_named(str(body["Name"]), uid)
            rc = 0
            for job_id in ids:
                try:
                    client.patch(f"/v1/jobs/{quote(job_id, safe='')}", body)
                except client.ApiError as e:
                    sys.stderr.write(f"slurm_update error: {update_error(job_id, e)}\n")
                    rc = 1
            return rc
        if entity == "nodename":
            names, body = parse_update_node(args)
            try:
                client.patch(f"/v1/nodes/{quote(names, safe='')}", body)
            except client.ApiError as e:
                sys.stderr.write(f"slurm_update error: {e.message}\n")
                return 1
            return 0
    except UsageError as e:
        sys.stderr.write(f"{e}\n")
        return 1
    if entity is not None:
        sys.stderr.write("scontrol: error: Corral can update jobs, nodes and partitions only\n")
        return 1
    sys.stderr.write("No valid entity in update command\n"
                     "Input line must include \"NodeName\", \"PartitionName\", "
                     "\"Reservation\", \"JobId\", or \"SlurmctldDebug\"\n")
    return 1


def _main(argv: list[str]) -> int:
    try:
        opts, words = getopt.gnu_getopt(
            argv, "adhoqvVM:u:",
            ["all", "details", "help", "oneliner", "quiet", "verbose", "version", "hide",
             "usage", "cluster=", "clusters=", "local", "sibling", "federation", "future",
             "json", "yaml"])
    except getopt.GetoptError as e:
        sys.stderr.write(_getopt_error(PROG, e) + "\n")
        sys.stderr.write('Try "scontrol --help" for more information\n')
        return 1
    one_liner = details = False
    for opt, _ in opts:
        if opt in ("-h", "--help", "--usage"):
            sys.stdout.write(_HELP)
            return 0
        if opt in ("-V", "--version"):
            sys.stdout.write(f"slurm {SLURM_VERSION}\n")
            return 0
        if opt in ("-o", "--oneliner"):
            one_liner = True
        elif opt in ("-d", "--details"):
            details = True
        elif opt in ("--json", "--yaml"):
            sys.stderr.write(f"scontrol: error: {opt} output is not supported by Corral yet\n")
            return 1
    if not words:
        sys.stderr.write("scontrol: error: interactive mode is not supported by Corral; "
                         "give a command (see scontrol --help)\n")
        return 1
    command = words[0].lower()
    rest = words[1:]
    while command in ("oneliner", "details"):
        if command == "oneliner":
            one_liner = True
        else:
            details = True
        if not rest:
            return 0
        command, rest = rest[0].lower(), rest[1:]
    if command in ("version", "-v"):
        sys.stdout.write(f"slurm {SLURM_VERSION}\n")
        return 0
    if command == "help":
        sys.stdout.write(_HELP)
        return 0
    if command == "show" and rest and "=" in rest[0]:
        # _show_it: `show job=1` is `show job 1` (the value after '=' wins over a next word)
        tag, _, value = rest[0].partition("=")
        rest = [tag, value]
    # reservations: scontrol_resv.py (imported only when asked: `show job` stays light)
    if command in ("create", "update", "delete") or (command == "show" and rest and (
            "reservations".startswith(rest[0].lower())
            or "reservationname".startswith(rest[0].lower()))):
        from corral.cli import scontrol_resv
        if scontrol_resv.names_reservation(command, rest):
            return scontrol_resv.run(command, rest, one_liner)
    if command == "show":
        if not rest:
            sys.stderr.write("too few arguments for keyword:show\n")
            return 1
        if len(rest[0]) >= 2 and "steps".startswith(rest[0].lower()):
            from corral.cli import scontrol_steps  # only for this command

            return scontrol_steps.show_steps(rest[1] if len(rest) > 1 else None, one_liner)
        entity = _match_entity(rest[0])
        if entity is None:
            sys.stderr.write(f"invalid entity:{rest[0]} for keyword:show \n")
            return 1
        return _show(entity, rest[1] if len(rest) > 1 else None, one_liner, details)
    if command in _ACTIONS:
        return _job_action(command, rest)
    if command == "update":
        return _update(rest)
    if command == "ping":
        return _ping()
    if command == "notify":
        return _notify(rest)
    if command == "top":
        return _top(rest)
    if command in ("reconfigure", "reconfig"):
        return _reconfigure(rest)
    if command in ("create", "delete"):
        from corral.cli import scontrol_admin
        return scontrol_admin.partition_command(command, rest)
    sys.stderr.write(f"invalid keyword: {words[0]}\n")
    return 1


def main(argv: list[str] | None = None) -> int:
    return client.run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
