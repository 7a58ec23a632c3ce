"""Jobs: states, pending reasons, the resource request and the job record.

The job record (`Job`) is what the controller keeps in memory and what the API
returns as JSON (`Job.to_dict()`); the CLI formats those dicts.  Large, rarely
read parts of a job (script, environment) are not held here: the store keeps them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from corral.model.reasons import ReasonCode


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    REQUEUED = "REQUEUED"

    @property
    def code(self) -> str:
        return STATE_CODES[self]

    @property
    def finished(self) -> bool:
        return self in FINISHED_STATES

    @property
    def active(self) -> bool:
        """Holds resources on nodes."""
        return self in ACTIVE_STATES


STATE_CODES: dict[JobState, str] = {
    JobState.PENDING: "PD",
    JobState.RUNNING: "R",
    JobState.SUSPENDED: "S",
    JobState.COMPLETING: "CG",
    JobState.COMPLETED: "CD",
    JobState.CANCELLED: "CA",
    JobState.FAILED: "F",
    JobState.TIMEOUT: "TO",
    JobState.NODE_FAIL: "NF",
    JobState.PREEMPTED: "PR",
    JobState.OUT_OF_MEMORY: "OOM",
    JobState.BOOT_FAIL: "BF",
    JobState.DEADLINE: "DL",
    JobState.REQUEUED: "RQ",
}
CODE_TO_STATE = {v: k for k, v in STATE_CODES.items()}

FINISHED_STATES = frozenset({
    JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED, JobState.TIMEOUT,
    JobState.NODE_FAIL, JobState.PREEMPTED, JobState.OUT_OF_MEMORY, JobState.BOOT_FAIL,
    JobState.DEADLINE,
})
# hold resources on nodes (a set: `active` is asked for every job of every pass)
ACTIVE_STATES = frozenset({JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING})


def parse_state(text: str) -> JobState:
    """Accept a state name or code, any case ("pd", "running", "CA")."""
    t = text.strip().upper()
    if t in CODE_TO_STATE:
        return CODE_TO_STATE[t]
    if t == "CANCELED":
        t = "CANCELLED"
    return JobState(t)


class Reason:
    """Pending reasons, spelled as squeue prints them (the typed ones, with the numbers
    behind them, are `model.reasons.PendingReason`)."""

    NONE = ReasonCode.NONE.value
    RESOURCES = ReasonCode.RESOURCES.value
    PRIORITY = ReasonCode.PRIORITY.value
    DEPENDENCY = ReasonCode.DEPENDENCY.value
    DEPENDENCY_NEVER = ReasonCode.DEPENDENCY_NEVER.value
    BEGIN_TIME = ReasonCode.BEGIN_TIME.value
    HELD_USER = ReasonCode.HELD_USER.value
    HELD_ADMIN = ReasonCode.HELD_ADMIN.value
    PARTITION_TIME_LIMIT = ReasonCode.PARTITION_TIME_LIMIT.value
    PARTITION_NODE_LIMIT = ReasonCode.PARTITION_NODE_LIMIT.value
    PARTITION_DOWN = ReasonCode.PARTITION_DOWN.value
    REQ_NODE_NOT_AVAIL = ReasonCode.REQ_NODE_NOT_AVAIL.value
    NODES_DOWN = ReasonCode.NODES_DOWN.value
    ARRAY_LIMIT = ReasonCode.ARRAY_LIMIT.value
    PARTITION_CONFIG = ReasonCode.PARTITION_CONFIG.value
    PARTITION_INACTIVE = ReasonCode.PARTITION_INACTIVE.value
    BAD_CONSTRAINTS = ReasonCode.BAD_CONSTRAINTS.value
    NODE_FAIL_REQUEUED = ReasonCode.NODE_FAIL_REQUEUED.value
    RESERVATION = ReasonCode.RESERVATION.value
    RESERVATION_DELETED = ReasonCode.RESERVATION_DELETED.value
    RESERVED_FOR_MAINT = ReasonCode.RESERVED_FOR_MAINT.value
    LIMIT = ReasonCode.LIMIT.value


@dataclass(slots=True)
class NodeAlloc:
    """What one job holds on one node."""

    node: str
    cpus: int
    mem_mb: int
    gpus: list[int] = field(default_factory=list)
    # the CPU ids held: the ones the agent bound where it did, else the ledger's indices
    # (`scontrol -d show job` CPU_IDs=); None for records written before they were kept
    cpu_ids: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"node": self.node, "cpus": self.cpus, "mem_mb": self.mem_mb,
                             "gpus": list(self.gpus)}
        if self.cpu_ids is not None:
            d["cpu_ids"] = list(self.cpu_ids)
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> NodeAlloc:
        ids = d.get("cpu_ids")
        return NodeAlloc(d["node"], int(d["cpus"]), int(d["mem_mb"]), list(d.get("gpus", [])),
                         [int(i) for i in ids] if isinstance(ids, list) else None)


@dataclass(slots=True)
class Step:
    """A job step as sacct shows it: J.batch, J.extern, J.0 …"""

    step_id: str  # "batch", "extern", "0", "1" …
    name: str
    state: str = JobState.RUNNING.value
    exit_code: int = 0
    signal: int = 0
    start_time: float | None = None
    end_time: float | None = None
    cpus: int = 0
    nodes: str = ""
    ntasks: int = 1
    # measured use, node -> figures (model.usage): set from the agents' samples
    usage: dict[str, Any] | None = None
    submit_line: str = ""  # an srun step's command line (sacct -o submitline)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Step:
        return Step(**{k: d[k] for k in d if k in _STEP_FIELDS})


_STEP_FIELDS = {f.name for f in fields(Step)}


@dataclass(slots=True)
class Job:
    """A job record.  Times are epoch seconds; sizes MB; time limits seconds (-1 = infinite)."""

    job_id: int
    name: str
    user: str
    uid: int
    gid: int
    group: str = ""
    account: str = ""
    qos: str = "normal"
    partition: str = ""
    state: JobState = JobState.PENDING
    reason: str = Reason.NONE
    priority: int = 0
    nice: int = 0
    held: str | None = None  # None, "user" or "admin"

    # request
    num_nodes: int = 1
    max_nodes: int | None = None
    # -N given (or the node count otherwise fixed); False: -n alone, spread over as many
    # nodes as needed, from num_nodes up to max_nodes (None: the partition's nodes)
    nodes_fixed: bool = True
    min_cpus: int | None = None  # --mincpus: CPUs every node must offer (and allocate)
    min_tmp_disk: int | None = None  # --tmp: MB of TmpDisk every node must have
    num_tasks: int = 1
    ntasks_per_node: int | None = None
    cpus_per_task: int = 1
    mem_per_node: int | None = None  # MB; 0 = all of each node
    mem_per_cpu: int | None = None  # MB
    gpus: int = 0  # --gpus: total for the job
    gpus_per_node: int = 0
    gpus_per_task: int = 0
    gpu_type: str | None = None
    time_limit: int = -1
    time_min: int | None = None
    req_nodes: list[str] = field(default_factory=list)
    exc_nodes: list[str] = field(default_factory=list)
    exclusive: bool = False
    # -O/--overcommit: allocated as if one task per node were asked (cpus_per_task CPUs on
    # each node); its num_tasks tasks share them (SLURM_OVERCOMMIT=1 in the job)
    overcommit: bool = False
    requeue: bool = True
    dependency: str | None = None
    begin_time: float | None = None
    signal: str | None = None  # "[B:]SIG[@secs]" as given
    hint: str | None = None
    # CPUs allocated per CPU asked for: a core's threads, for --hint=nomultithread on
    # nodes with several threads per core under CR_Core (Slurm allocates whole cores)
    core_threads: int = 1
    constraint: str | None = None  # --constraint, as given (features a node must have)
    priority_set: int | None = None  # set by an operator (sbatch --priority, update Priority=)
    mail_type: str | None = None
    mail_user: str | None = None
    comment: str | None = None
    reservation: str | None = None  # --reservation (model/reservation.py)
    acctg_freq: str | None = None  # --acctg-freq: its steps' sampling interval (agent.usage)
    batch: bool = True
    submit_id: str | None = None  # the client's id of the submission (idempotent retries)
    # scrontab (controller/crontab.py): requeued for its next time after each run while
    # cron_job; cron_spec is the entry's times as scontrol shows them (CrontabSpec=)
    cron_job: bool = False
    cron_spec: str | None = None
    container: dict[str, Any] | None = None  # Pyxis' options (model.launchplan.ContainerSpec)

    # where and how
    work_dir: str = "/"
    stdout: str | None = None
    stderr: str | None = None
    stdin: str = "/dev/null"
    command: str | None = None  # script path, or None for stdin/--wrap
    submit_line: str = ""
    submit_host: str = ""  # with alloc_sid, scontrol's AllocNode:Sid= (display only)
    alloc_sid: int = 0  # the session id of the submitting process

    # arrays
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_tasks: list[int] | None = None  # on the pending meta record: tasks not yet split off
    array_max_running: int | None = None  # the % throttle
    array_spec: str | None = None  # as given, for display

    # timeline
    submit_time: float = 0.0
    eligible_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    suspend_time: float | None = None
    suspended_secs: float = 0.0
    # preempted by suspension: the preemptor that runs on this job's resources meanwhile;
    # it resumes when that job ends (controller/core/passes.py)
    suspended_for: int | None = None
    last_sched_eval: float | None = None
    sched_start: float | None = None  # backfill's expected start for a pending job
    sched_nodes: list[str] = field(default_factory=list)
    # a pending job's node count as the submit test placed it on idle nodes (Slurm's
    # node_cnt_wag): -n30 without -N on 16-CPU nodes shows 2 nodes in squeue %D
    node_cnt_wag: int | None = None

    # outcome
    nodes: list[str] = field(default_factory=list)
    alloc: list[NodeAlloc] = field(default_factory=list)
    batch_host: str | None = None
    exit_code: int = 0
    term_signal: int = 0
    restart_count: int = 0
    cancelled_by: int | None = None
    scheduler: str | None = None  # "Main" or "Backfill": which pass started the job
    # set while a running job is being killed: the state it ends in once the agent
    # confirms (CANCELLED, TIMEOUT, NODE_FAIL, REQUEUE, REQUEUE_HOLD, PREEMPTED)
    kill_reason: str | None = None
    steps: list[Step] = field(default_factory=list)
    # `scontrol show job` Dependency=, rendered by the controller with its entries' states
    # (derived: refreshed by each scheduling pass)
    dependency_text: str | None = None
    notices: list[str] = field(default_factory=list)  # `scontrol notify` messages

    # ---- derived values -------------------------------------------------
    @property
    def alloc_cpus(self) -> int:
        return sum(a.cpus for a in self.alloc)

    @property
    def alloc_mem(self) -> int:
        return sum(a.mem_mb for a in self.alloc)

    @property
    def alloc_gpus(self) -> int:
        return sum(len(a.gpus) for a in self.alloc)

    @property
    def is_array_meta(self) -> bool:
        return self.array_tasks is not None

    def display_id(self) -> str:
        """JOBID as squeue prints it: 12, 7_3, 7_[1-10%2]."""
        if self.array_job_id is None:
            return str(self.job_id)
        if self.array_tasks is not None:
            from corral.model.arrays import format_task_ids

            spec = format_task_ids(self.array_tasks)
            if self.array_max_running:
                spec += f"%{self.array_max_running}"
            return f"{self.array_job_id}_[{spec}]"
        return f"{self.array_job_id}_{self.array_task_id}"

    def run_seconds(self, now: float) -> float:
        if self.start_time is None:
            return 0.0
        end = self.end_time if self.end_time is not None else now
        if self.state == JobState.SUSPENDED and self.suspend_time:
            end = self.suspend_time
        return max(0.0, end - self.start_time - self.suspended_secs)

    # ---- serialisation ---------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for name in _JOB_FIELDS:
            v = getattr(self, name)
            if name == "state":
                v = v.value
            elif name == "alloc":
                v = [a.to_dict() for a in v]
            elif name == "steps":
                v = [s.to_dict() for s in v]
            elif isinstance(v, list):
                v = list(v)
            d[name] = v
        d["display_id"] = self.display_id()
        d["alloc_cpus"] = self.alloc_cpus
        d["alloc_mem"] = self.alloc_mem
        d["alloc_gpus"] = self.alloc_gpus
        d["features"] = self.constraint  # squeue %f, scontrol Features=
        if self.dependency_text is None:
            del d["dependency_text"]  # not rendered yet: the client renders it itself
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Job:
        kw: dict[str, Any] = {k: d[k] for k in _JOB_FIELDS if k in d}
        kw["state"] = JobState(kw.get("state", "PENDING"))
        kw["alloc"] = [NodeAlloc.from_dict(a) for a in kw.get("alloc", [])]
        kw["steps"] = [Step.from_dict(s) for s in kw.get("steps", [])]
        return Job(**kw)


_JOB_FIELDS = tuple(f.name for f in fields(Job))


def format_exit_code(exit_code: int, signal: int) -> str:
    return f"{exit_code}:{signal}"
