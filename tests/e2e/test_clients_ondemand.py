"""Open OnDemand's Slurm adapter, unchanged, against a real Corral cluster.

Open OnDemand drives Slurm only through the commands, from ood_core's
lib/ood_core/job/adapters/slurm.rb (OSC/ood_core at commit
86656b3899b825582a3e1dcb36c8b38408692fc0). Ruby is not part of the test image, so this
module runs each command line exactly as that file builds it and parses the output with a
faithful Python port of its parsing (field splitting with Ruby's `split` semantics, the
header skip, STATE_MAP, duration/memory/GPU parsing, `(null)` handling, job-array merging,
and the "Invalid job id specified" → completed rule). The values checked are the ones a
portal user sees in the job list and the cluster's dashboard.
"""

from __future__ import annotations

import os
import pwd
import re
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

UNIT_SEPARATOR = "\x1f"
RECORD_SEPARATOR = "\x1e"

# Batch#all_squeue_fields: the order matters, as the adapter zips keys with the values.
ALL_SQUEUE_FIELDS = {
    "account": "Account", "job_id": "JobID", "exec_host": "BatchHost", "min_cpus": "MinCpus",
    "cpus": "NumCPUs", "min_tmp_disk": "MinTmpDisk", "nodes": "NumNodes",
    "end_time": "EndTime", "dependency": "Dependency", "features": "Feature",
    "array_job_id": "ArrayJobID", "group_name": "GroupName", "group_id": "GroupID",
    "over_subscribe": "OverSubscribe", "sockets_per_node": "Sockets",
    "array_job_task_id": "JobArrayID", "cores_per_socket": "Cores", "job_name": "Name",
    "threads_per_core": "Threads", "comment": "Comment", "array_task_id": "ArrayTaskID",
    "time_limit": "TimeLimit", "time_left": "TimeLeft", "min_memory": "MinMemory",
    "time_used": "TimeUsed", "req_node": "ReqNodes", "node_list": "NodeList",
    "command": "Command", "contiguous": "Contiguous", "qos": "QOS", "partition": "Partition",
    "priority": "PriorityLong", "reason": "Reason", "start_time": "StartTime",
    "state_compact": "StateCompact", "state": "State", "user": "UserName",
    "user_id": "UserID", "reservation": "Reservation", "submit_time": "SubmitTime",
    "wckey": "WCKey", "licenses": "Licenses", "excluded_nodes": "ExcNodes",
    "core_specialization": "CoreSpec", "nice": "Nice", "scheduled_nodes": "SchedNodes",
    "sockets_cores_threads": "SCT", "work_dir": "WorkDir", "tres_alloc": "tres-alloc",
    "gres": "tres-per-node",
}
# The header real Slurm prints for that format (ood_core's spec/fixtures/scripts/squeue.rb,
# captured from a real squeue).
SLURM_HEADER = UNIT_SEPARATOR.join([
    "ACCOUNT", "JOBID", "EXEC_HOST", "MIN_CPUS", "CPUS", "MIN_TMP_DISK", "NODES", "END_TIME",
    "DEPENDENCY", "FEATURES", "ARRAY_JOB_ID", "GROUP", "GROUP", "OVER_SUBSCRIBE",
    "SOCKETS_PER_NODE", "JOBID", "CORES_PER_SOCKET", "NAME", "THREADS_PER_CORE", "COMMENT",
    "ARRAY_TASK_ID", "TIME_LIMIT", "TIME_LEFT", "MIN_MEMORY", "TIME", "REQ_NODES",
    "NODELIST", "COMMAND", "CONTIGUOUS", "QOS", "PARTITION", "PRIORITY", "REASON",
    "START_TIME", "ST", "STATE", "USER", "UID", "RESERVATION", "SUBMIT_TIME", "WCKEY",
    "LICENSES", "EXC_NODES", "CORE_SPEC", "NICE", "SCHEDNODES", "S:C:T", "WORK_DIR",
    "TRES_ALLOC", "TRES_PER_NODE"]) + UNIT_SEPARATOR + "\n"

# Slurm::STATE_MAP (the compact codes the adapter reads from StateCompact).
STATE_MAP = {
    "BF": "completed", "CA": "completed", "CD": "completed", "CF": "queued", "CG": "running",
    "F": "completed", "NF": "completed", "PD": "queued", "PR": "suspended", "RV": "completed",
    "R": "running", "SE": "completed", "ST": "running", "S": "suspended", "TO": "completed",
    "OOM": "completed", "BOOT_FAIL": "completed", "CANCELLED": "completed",
    "COMPLETED": "completed", "DEADLINE": "completed", "FAILED": "completed",
    "NODE_FAIL": "completed", "OUT_OF_MEMORY": "completed", "PENDING": "queued",
    "PREEMPTED": "completed", "RUNNING": "running", "REQUEUED": "queued",
    "REVOKED": "completed", "SUSPENDED": "suspended", "TIMEOUT": "completed",
}
UNIT_FACTORS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
SACCT_INFO_FIELDS = {
    "user": "User", "group_name": "Group", "job_id": "JobId", "job_name": "JobName",
    "elapsed": "Elapsed", "req_mem": "ReqMem", "alloc_cpus": "AllocCPUS",
    "req_cpus": "ReqCPUS", "time_limit": "Timelimit", "state": "State",
    "total_cpu": "TotalCPU", "max_rss": "MaxRSS", "partition": "Partition",
    "submit_time": "Submit", "start_time": "Start", "end": "End", "gres": "ReqTRES",
}
SLEEP_SCRIPT = "echo started $SLURM_JOB_ID ${OOD_VAR:-unset}\nsleep 300\n"


class SlurmError(Exception):
    """Batch::Error: a command that exited non-zero, with its stderr as the message."""


# ---- Ruby semantics the adapter's parsing depends on ------------------------------------

def ruby_split(text: str, sep: str) -> list[str]:
    """String#split(sep): trailing empty fields are dropped."""
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def ruby_zip(keys: list[str], values: list[Any]) -> dict[str, Any]:
    """Hash[keys.zip(values)]: keys without a value get nil."""
    return {k: (values[i] if i < len(values) else None) for i, k in enumerate(keys)}


def ruby_to_i(text: str | None) -> int:
    m = re.match(r"\s*([-+]?\d+)", text or "")
    return int(m.group(1)) if m else 0


def gpus_from_gres(gres: str | None) -> int:
    """Slurm.gpus_from_gres (Ruby's $ is end of line)."""
    return sum(int(n) for n in re.findall(r"gpu[s:]*[\w()-]*[=:]?(\d+)(?:[(,]|$)",
                                          gres or "", re.M))


def memory_from_tres(tres: str | None) -> int | None:
    """Slurm.memory_from_tres."""
    m = re.search(r"(?:^|,)mem=(\w+)(?:,|$)", tres or "", re.M)
    if not m:
        return None
    memory = UNIT_FACTORS.get(m.group(1)[-1], 0) * ruby_to_i(m.group(1))
    return memory or None


def duration_in_seconds(text: str | None) -> int:
    """Slurm#duration_in_seconds: `time, days = time.split("-").reverse`."""
    if text is None:
        return 0
    parts = ruby_split(text, "-")[::-1]
    time_part = parts[0] if parts else ""
    days = parts[1] if len(parts) > 1 else None
    total = 0
    for v in ruby_split(time_part, ":"):
        total = total * 60 + ruby_to_i(v)
    return ruby_to_i(days) * 86400 + total


def parse_time(text: str | None) -> datetime | None:
    """Time.parse, which gives nil (rescued) for "N/A" and "Unknown"."""
    try:
        return datetime.fromisoformat(text or "")
    except ValueError:
        return None


def parse_nodes(node_list: str | None) -> list[str]:
    names: list[str] = []
    for prefix, ranges in re.findall(r"([^,\[]+)(?:\[([^\]]+)\])?", node_list or ""):
        if not ranges:
            names.append(prefix)
            continue
        for x in ranges.split(","):
            m = re.fullmatch(r"(\d+)-(\d+)", x)
            if m:  # Ruby's ("001".."003") keeps the zero padding
                width = len(m.group(1))
                names += [prefix + str(i).zfill(width)
                          for i in range(int(m.group(1)), int(m.group(2)) + 1)]
            else:
                names.append(prefix + x)
    return names


# ---- the adapter (Batch and Slurm), command lines and parsing as ood_core builds them ----

class Adapter:
    def __init__(self, cluster: Cluster, cluster_name: str | None = None) -> None:
        self.cluster = cluster
        self.cluster_name = cluster_name  # the adapter's `cluster:` setting → -M

    def call(self, cmd: str, *args: str, env: dict[str, str] | None = None,
             stdin: str = "") -> str:
        argv = list(args)
        if self.cluster_name and not cmd.endswith("sacctmgr"):
            argv += ["-M", self.cluster_name]
        r = self.cluster.run(cmd, *argv, input=stdin, env=env)
        if r.returncode != 0:
            raise SlurmError(r.stderr)
        if r.stderr and re.search(r"^slurm_load_jobs error: Socket timed out", r.stderr, re.M):
            raise SlurmError(r.stderr)
        return r.stdout

    # Batch
    def get_jobs(self, id: str = "", owner: str | None = None,
                 attrs: list[str] | None = None) -> list[dict[str, str | None]]:
        if attrs is None:
            fields = ALL_SQUEUE_FIELDS
        else:
            fields = {k: ALL_SQUEUE_FIELDS[k] for k in attrs + ["job_id", "state_compact"]}
        args = ["--all", "--states=all", "--noconvert",
                "-O", f":{UNIT_SEPARATOR},".join([*fields.values(), ""])]
        if owner:
            args += ["-u", owner]
        if id:
            args += ["-j", id]
        output = self.call("squeue", *args)
        # advance_past_squeue_header!: gets("\x1F\n")
        end = output.find(UNIT_SEPARATOR + "\n")
        rest = "" if end < 0 else output[end + 2:]
        jobs = []
        for line in rest.splitlines(keepends=True):
            values = ruby_split(line.removesuffix("\n"), UNIT_SEPARATOR)
            if values:
                jobs.append(ruby_zip(list(fields), values))
        return jobs

    def submit_string(self, script: str, args: list[str], env: dict[str, str]) -> str:
        return self.call("sbatch", *args, "--parsable", env=env,
                         stdin=script).strip().split(";")[0]

    # Slurm
    def submit(self, content: str, *, shell_path: str | None = None, hold: bool = False,
               rerunnable: bool | None = None, workdir: str | None = None,
               email_on_started: bool | None = None, email_on_terminated: bool | None = None,
               job_name: str | None = None, output_path: str | None = None,
               queue_name: str | None = None, accounting_id: str | None = None,
               wall_time: int | None = None, array: str | None = None,
               afterok: list[str] | None = None, job_environment: dict[str, str] | None = None,
               copy_environment: bool = False, native: list[str] | None = None) -> str:
        args: list[str] = []
        if hold:
            args += ["-H"]
        if rerunnable is not None:
            args += ["--requeue" if rerunnable else "--no-requeue"]
        if workdir is not None:
            args += ["-D", workdir]
        if email_on_started is False and email_on_terminated is False:
            args += ["--mail-type", "NONE"]
        elif email_on_started and email_on_terminated:
            args += ["--mail-type", "ALL"]
        if job_name is not None:
            args += ["-J", job_name]
        if output_path is not None:
            args += ["-o", output_path]
        if queue_name is not None:
            args += ["-p", queue_name]
        if accounting_id is not None:
            args += ["-A", accounting_id]
        if wall_time is not None:
            args += ["-t", f"{wall_time // 3600:02d}:{wall_time // 60 % 60:02d}:"
                           f"{wall_time % 60:02d}"]
        if array is not None:
            args += ["-a", array]
        if afterok:
            args += ["-d", "afterok:" + ":".join(afterok)]
        env = job_environment or {}
        if env:
            export = ("ALL," if copy_environment else "") + ",".join(env)
        else:
            export = "ALL" if copy_environment else "NONE"
        args += ["--export", export]
        args += native or []
        if shell_path is not None:
            content = f"#!{shell_path}\n{content}"
        return self.submit_string(content, args, env)

    def parse_job_info(self, v: dict[str, str | None]) -> dict[str, Any]:
        nodes = parse_nodes(v.get("node_list"))
        if not nodes:
            sched = v.get("scheduled_nodes")
            nodes = (parse_nodes(sched) if sched and sched != "(null)"
                     else [None] * ruby_to_i(v.get("nodes")))  # type: ignore[list-item]
        return {
            "id": v["job_id"],
            "status": STATE_MAP.get((v.get("state_compact") or "").split()[0]
                                    if (v.get("state_compact") or "").split() else "",
                                    "undetermined"),
            "allocated_nodes": nodes,
            "job_name": v.get("job_name"),
            "job_owner": v.get("user"),
            "accounting_id": None if v.get("account") == "(null)" else v.get("account"),
            "procs": v.get("cpus"),
            "queue_name": v.get("partition"),
            "wallclock_time": duration_in_seconds(v.get("time_used")),
            "wallclock_limit": duration_in_seconds(v.get("time_limit")),
            "submission_time": parse_time(v.get("submit_time")),
            "dispatch_time": parse_time(v.get("start_time")),
            "native": v,
            "total_memory": memory_from_tres(v.get("tres_alloc")),
            "gpus": gpus_from_gres(v.get("gres")),
        }

    def info(self, id: str) -> dict[str, Any]:
        try:
            infos = [self.parse_job_info(v) for v in self.get_jobs(id=id)]
        except SlurmError as e:
            if "Invalid job id specified" in str(e):
                return {"id": id, "status": "completed"}
            raise
        if not infos:
            return {"id": id, "status": "completed"}
        if len(infos) == 1:
            return infos[0]
        parent: dict[str, Any] = {"tasks": []}  # handle_job_array
        for task in infos:
            parent["tasks"].append({"id": task["id"], "status": task["status"]})
            if task["id"] == id or task["native"].get("array_job_task_id") == id:
                parent.update({k: v for k, v in task.items() if k != "tasks"})
        return parent

    def info_where_owner(self, owner: str) -> list[dict[str, Any]]:
        return [self.parse_job_info(v) for v in self.get_jobs(owner=owner)]

    def status(self, id: str) -> str:
        try:
            jobs = self.get_jobs(id=id, attrs=["job_id", "array_job_task_id", "state_compact"])
        except SlurmError as e:
            if "Invalid job id specified" in str(e):
                return "completed"
            raise
        for j in jobs:
            if id in (j["job_id"], j["array_job_task_id"]):
                return STATE_MAP.get((j["state_compact"] or "").split()[0], "undetermined")
        return "completed"

    def _tolerant(self, cmd: str, *args: str) -> None:
        """hold/release/delete: an unknown job id counts as done."""
        try:
            self.call(cmd, *args)
        except SlurmError as e:
            if "Invalid job id specified" not in str(e):
                raise

    def hold(self, id: str) -> None:
        self._tolerant("scontrol", "hold", id)

    def release(self, id: str) -> None:
        self._tolerant("scontrol", "release", id)

    def delete(self, id: str) -> None:
        self._tolerant("scancel", id)

    def cluster_info(self) -> dict[str, int]:
        counts = [ruby_to_i(x) for x in self.call("sinfo", "-aho %F/%C").strip().split("/")]
        names = ["nodes_allocated", "nodes_idle", "nodes_other", "nodes_total",
                 "cpus_allocated", "cpus_idle", "cpus_other", "cpus_total"]
        info = ruby_zip(names, counts)
        lines = self.call("sinfo", "-ahNO", "nodehost:100,gres:512,gresused:512,statelong")
        rows = [ln.split() for ln in dict.fromkeys(lines.splitlines(keepends=True))
                if not re.search(r"maint|drain|down", ln, re.I)]
        return {"active_nodes": info["nodes_allocated"], "total_nodes": info["nodes_total"],
                "active_processors": info["cpus_allocated"],
                "total_processors": info["cpus_total"],
                "active_gpus": sum(gpus_from_gres(r[2]) for r in rows),
                "total_gpus": sum(gpus_from_gres(r[1]) for r in rows)}

    def accounts(self, cluster_id: str) -> dict[str, list[str]]:
        """Batch#accounts (`id` is the portal's cluster id; sacctmgr gets no -M)."""
        found: dict[str, list[str]] = {}
        for line in self.call("sacctmgr", "-nP", "show", "users", "withassoc",
                              "format=account,qos", "where", f"user={_user()}",
                              f"cluster={cluster_id}").splitlines(keepends=True):
            acct, _, qos = line.partition("|")
            if acct.strip():
                found.setdefault(acct, [])
                found[acct] += [q for q in qos.rstrip("\n").split(",") if q not in found[acct]]
        return found

    def queues(self) -> list[dict[str, Any]]:
        out = []
        for line in self.call("scontrol", "show", "part", "-o").splitlines():
            pairs = {}
            for token in line.split():
                m = re.match(r"^(\w+)=(.+)$", token)
                assert m, f"str_to_queue_info would crash (nil match) on {token!r}: {line}"
                pairs[m.group(1)] = m.group(2)
            tres = pairs.get("TRES")
            pairs["tres"] = ({} if tres in (None, "(null)", "") else
                             dict(t.split("=", 1) for t in tres.split(",")))  # type: ignore
            out.append(pairs)
        return out

    def nodes(self) -> list[dict[str, Any]]:
        fields = ["procs", "name", "features"]
        output = self.call("sinfo", "-ho", RECORD_SEPARATOR + UNIT_SEPARATOR.join(
            ["%c", "%n", "%f"]))
        result = []
        for chunk in output.split(RECORD_SEPARATOR):
            values = ruby_split(chunk.strip(), UNIT_SEPARATOR)
            if values:
                d = ruby_zip(fields, values)
                result.append({"procs": ruby_to_i(d.get("procs")),
                               "name": (d.get("name") or "").split(",")[0],
                               "features": (d.get("features") or "").split(",")})
        return result

    def info_historic(self, job_ids: list[str]) -> list[dict[str, Any]]:
        args = ["-P", "--delimiter", UNIT_SEPARATOR, "-n", "--units", "G", "--allocations",
                "-o", ",".join(SACCT_INFO_FIELDS.values()), "-j", ",".join(job_ids)]
        jobs = []
        for line in self.call("sacct", *args).splitlines():
            values = [v or None for v in ruby_split(line.strip(), UNIT_SEPARATOR)]
            if values:
                v = ruby_zip(list(SACCT_INFO_FIELDS), values)
                jobs.append({"id": v["job_id"],
                             "status": STATE_MAP.get((v["state"] or "").split()[0],
                                                     "undetermined"),
                             "job_name": v["job_name"], "job_owner": v["user"],
                             "procs": v["alloc_cpus"], "queue_name": v["partition"],
                             "wallclock_time": duration_in_seconds(v["elapsed"]),
                             "wallclock_limit": duration_in_seconds(v["time_limit"]),
                             "submission_time": parse_time(v["submit_time"]),
                             "dispatch_time": parse_time(v["start_time"]),
                             "gpus": gpus_from_gres(v.get("gres")), "native": v})
        return jobs


# ---- the tests ---------------------------------------------------------------------------

@pytest.fixture
def ood(cluster: Cluster) -> Iterator[Adapter]:
    try:
        yield Adapter(cluster)
    finally:
        cluster.run("scancel", "--me")


def _user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def _wait_status(ood: Adapter, job: str, want: str, timeout: float = 30) -> None:
    ood.cluster.wait_for(lambda: ood.status(job) == want, timeout=timeout,
                         what=f"job {job} to be {want}")


def test_squeue_format_is_unpadded_with_slurms_header(cluster: Cluster, ood: Adapter) -> None:
    """`Field:\\x1F` has no width: Slurm prints each value as is, then the suffix."""
    job = ood.submit(SLEEP_SCRIPT, job_name="ood hdr", wall_time=120, shell_path="/bin/sh")
    fmt = ":\x1f,".join([*ALL_SQUEUE_FIELDS.values(), ""])
    out = cluster.ok("squeue", "--all", "--states=all", "--noconvert", "-O", fmt, "-j", job)
    header, row = out.splitlines(keepends=True)
    assert header == SLURM_HEADER, header
    values = row.removesuffix("\n").split(UNIT_SEPARATOR)
    assert len(values) == len(ALL_SQUEUE_FIELDS) + 1 and values[-1] == "", values
    assert values[1] == job and values[17] == "ood hdr", values
    assert all(v == v.strip() for v in values), values


def test_submit_then_the_job_list_shows_it(cluster: Cluster, ood: Adapter) -> None:
    out = cluster.workdir / "ood-run.out"
    job = ood.submit(
        SLEEP_SCRIPT, shell_path="/bin/bash", job_name="ood-desktop", wall_time=3600 + 120,
        queue_name="debug", accounting_id="lab", workdir=str(cluster.workdir),
        output_path=str(out), rerunnable=False, email_on_started=False,
        email_on_terminated=False, job_environment={"OOD_VAR": "from-portal"},
        native=["-N", "1", "--ntasks-per-node", "2", "--mem", "2G", "--gres", "gpu:2"])
    assert re.fullmatch(r"\d+", job), job
    cluster.wait_for(lambda: out.exists() and out.read_text() == f"started {job} from-portal\n",
                     timeout=30, what="the job to start with the exported variable")
    assert ood.status(job) == "running"

    info = ood.info(job)
    assert info["id"] == job
    assert info["status"] == "running"
    assert info["job_name"] == "ood-desktop"
    assert info["job_owner"] == _user()
    assert info["accounting_id"] == "lab"
    assert info["queue_name"] == "debug"
    assert info["procs"] == "2"
    assert info["wallclock_limit"] == 3720
    assert 0 <= info["wallclock_time"] < 60
    assert len(info["allocated_nodes"]) == 1
    assert re.fullmatch(r"node-[1-4]", info["allocated_nodes"][0]), info["allocated_nodes"]
    assert info["gpus"] == 2
    assert info["total_memory"] == 2 * 1024**3
    assert info["submission_time"] is not None and info["dispatch_time"] is not None
    assert info["native"]["work_dir"] == str(cluster.workdir)
    assert info["native"]["exec_host"] == info["allocated_nodes"][0]
    assert info["native"]["array_job_task_id"] == job

    assert job in [j["id"] for j in ood.info_where_owner(_user())]
    assert ood.info_where_owner("nobody") == []

    ood.delete(job)
    _wait_status(ood, job, "completed")
    assert ood.info(job)["native"]["state_compact"] == "CA"


def test_hold_release_and_array_tasks(cluster: Cluster, ood: Adapter) -> None:
    array = ood.submit("sleep 300\n", shell_path="/bin/sh", hold=True, array="1-3",
                       job_name="ood-arr", wall_time=300)
    info = ood.info(array)
    assert info["status"] == "queued"
    assert info["native"]["array_job_task_id"] == f"{array}_[1-3]"
    assert info["native"]["reason"] == "JobHeldUser"
    assert info["allocated_nodes"] == [None]  # NodeList empty, SchedNodes (null)
    assert info["dispatch_time"] is None  # StartTime N/A

    ood.release(array)
    cluster.wait_for(lambda: len(ood.info(array).get("tasks", [])) == 3, timeout=30,
                     what="the array's three tasks")
    _wait_status(ood, f"{array}_2", "running")
    merged = ood.info(array)
    # The portal's row is the task that kept the array's own JobID: in Slurm, the last one
    # split off the pending record.
    assert merged["id"] == array
    assert merged["native"]["array_job_task_id"] == f"{array}_3", merged["native"]
    assert {t["status"] for t in merged["tasks"]} == {"running"}

    # A job waiting on a dependency: held (priority 0) and released by the portal.
    waiting = ood.submit("true\n", shell_path="/bin/sh", afterok=[array], wall_time=60)
    ood.hold(waiting)
    held = ood.info(waiting)
    # `scontrol hold` by root (an administrator) is an admin hold in Slurm.
    admin_hold = "JobHeldAdmin" if os.getuid() == 0 else "JobHeldUser"
    assert (held["status"], held["native"]["reason"], held["native"]["priority"]) == (
        "queued", admin_hold, "0")
    ood.release(waiting)
    assert ood.info(waiting)["native"]["reason"] == "Dependency"
    assert ood.info(waiting)["native"]["dependency"] == f"afterok:{array}_*(unfulfilled)"

    ood.delete(array)
    _wait_status(ood, f"{array}_1", "completed")


def test_unknown_job_id_reads_as_completed(cluster: Cluster, ood: Adapter) -> None:
    r = cluster.run("squeue", "--all", "--states=all", "--noconvert", "-O",
                    "JobID:\x1f,StateCompact:\x1f,", "-j", "999999")
    assert (r.returncode, r.stdout, r.stderr) == (
        1, "", "slurm_load_jobs error: Invalid job id specified\n")
    assert ood.info("999999") == {"id": "999999", "status": "completed"}
    assert ood.status("999999") == "completed"
    ood.hold("999999")
    ood.release("999999")
    ood.delete("999999")


def test_cluster_dashboard_counts(cluster: Cluster, ood: Adapter) -> None:
    job = ood.submit(SLEEP_SCRIPT, shell_path="/bin/sh", wall_time=120,
                     native=["-N", "1", "-n", "3", "--gres", "gpu:2"])
    _wait_status(ood, job, "running")
    # The adapter reads the first line only: Slurm prints one for the whole cluster, as the
    # format shows no partition (nodes of both partitions counted once).
    assert cluster.ok("sinfo", "-aho %F/%C") == " 1/3/0/4/3/61/0/64\n"
    info = ood.cluster_info()
    assert info == {"active_nodes": 1, "total_nodes": 4, "active_processors": 3,
                    "total_processors": 64, "active_gpus": 2,
                    # The adapter drops repeated lines (`uniq`): the test nodes share one
                    # NodeHostName, so the idle nodes count once, as with Slurm's multiple
                    # slurmd on one host.
                    "total_gpus": 8}, info
    m = re.search(r"NodeHostName=(\S+)", cluster.ok("scontrol", "show", "node", "node-1"))
    assert m
    assert ood.nodes() == [{"procs": 16, "name": m.group(1), "features": ["(null)"]}]
    queues = {q["PartitionName"]: q for q in ood.queues()}
    assert queues["debug"]["tres"]["gres/gpu"] == "16"
    assert queues["short"]["tres"]["node"] == "2"


def test_job_history_from_sacct(cluster: Cluster, ood: Adapter) -> None:
    job = ood.submit("sleep 1\n", shell_path="/bin/sh", job_name="ood-done", wall_time=60,
                     native=["--gres", "gpu:1"])
    deadline = time.monotonic() + 30
    while ood.status(job) != "completed" and time.monotonic() < deadline:
        time.sleep(0.2)
    cluster.wait_state(job, "COMPLETED")
    (hist,) = ood.info_historic([job])
    assert (hist["id"], hist["status"], hist["job_name"], hist["job_owner"]) == (
        job, "completed", "ood-done", _user())
    assert (hist["wallclock_limit"], hist["queue_name"], hist["gpus"]) == (60, "debug", 1)
    assert 1 <= hist["wallclock_time"] < 30
    assert hist["submission_time"] is not None and hist["dispatch_time"] is not None


def test_adapter_with_a_cluster_setting_passes_M(cluster: Cluster) -> None:
    """A portal configured with `cluster: testcluster` adds `-M testcluster` to every command
    but sacctmgr: sbatch answers "id;cluster", squeue prints a CLUSTER: line first."""
    ood = Adapter(cluster, cluster_name="testcluster")
    try:
        r = cluster.run("sbatch", "--parsable", "-M", "testcluster", input="#!/bin/sh\ntrue\n")
        assert r.returncode == 0 and re.fullmatch(r"\d+;testcluster\n", r.stdout), r
        r = cluster.run("sbatch", "-M", "testcluster", input="#!/bin/sh\ntrue\n")
        assert re.fullmatch(r"Submitted batch job \d+ on cluster testcluster\n", r.stdout), r
        job = ood.submit(SLEEP_SCRIPT, shell_path="/bin/sh", job_name="ood-M", wall_time=120)
        assert re.fullmatch(r"\d+", job), job
        _wait_status(ood, job, "running")
        assert ood.info(job)["job_name"] == "ood-M"
        assert ood.cluster_info()["active_nodes"] >= 1
        ood.delete(job)
        _wait_status(ood, job, "completed")
        assert ood.info(job)["native"]["state_compact"] == "CA"
        ood.delete("999999")
        if os.getuid() == 0:  # root's own association, which every cluster starts with
            assert ood.accounts("testcluster") == {"root": ["normal"]}
        assert ood.accounts("unknown") == {}
        for cmd, stdin in (("sbatch", "#!/bin/sh\ntrue\n"), ("scancel", None)):
            r = cluster.run(cmd, "-M", "elsewhere", *(["999999"] if stdin is None else []),
                            input=stdin)
            assert (r.returncode, r.stdout) == (1, ""), r
            assert r.stderr == (f"{cmd}: error: 'elsewhere' can't be reached now, or it is an "
                                "invalid entry for --cluster.  Use 'sacctmgr list clusters' to "
                                "see available clusters.\n")
    finally:
        cluster.run("scancel", "--me")
