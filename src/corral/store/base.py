"""The store interface: what the controller persists, independent of the database."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from corral.model.job import Job
from corral.model.node import Partition
from corral.model.reservation import Reservation


@dataclass(slots=True)
class JobPayload:
    """The large, write-once part of a submission, read again only at launch."""

    script: str
    env: dict[str, str]
    argv: list[str] = field(default_factory=list)
    open_mode: str = "truncate"


@dataclass(slots=True)
class NodeRecord:
    """Node state that must survive a controller restart (admin decisions)."""

    name: str
    admin_state: str
    reason: str | None = None
    reason_user: str | None = None
    reason_uid: int | None = None
    reason_time: float | None = None


@dataclass(slots=True)
class UsageRecord:
    """Usage of one association over one period (an hour): TRES-seconds per TRES, for
    sreport; `billing` is the TRESBillingWeights sum, QoS UsageFactor applied."""

    cluster: str
    assoc_id: int
    period_start: float
    tres_secs: dict[str, float] = field(default_factory=dict)
    billing_secs: float = 0.0


@dataclass(slots=True)
class NodeHistoryEntry:
    """A node down/drain period (sacctmgr list event): open while `end` is None."""

    cluster: str
    node: str
    start: float
    state: str  # compact node state when it began: DOWN, DRAIN, DOWN*, …
    reason: str = ""
    reason_uid: int | None = None
    end: float | None = None
    reason_user: str | None = None  # who, by name as it was then (schema 4)
    source: str = ""  # what: "admin", "health", "prolog", "epilog", "controller" (schema 4)


@dataclass(frozen=True, slots=True)
class NodeHistoryEnd:
    """Close the node's open event (the node is back in service)."""

    cluster: str
    node: str
    end: float


# the accounting record kinds (model/assoc.py AssocDB.to_records), in load order
ACCOUNTING_KINDS = ("clusters", "accounts", "users", "qos", "assocs", "coords")


def accounting_key(kind: str, rec: dict[str, Any]) -> str:
    """The key of an accounting record within its kind."""
    if kind == "assocs":
        return str(rec["id"])
    if kind == "coords":
        return f"{rec['account']}\0{rec['user']}"
    return str(rec["name"])


def accounting_order(kind: str, rec: dict[str, Any]) -> tuple[Any, ...]:
    """The order AssocDB.to_records gives a kind's records in (a load returns them so)."""
    if kind == "assocs":
        return (int(rec["id"]),)
    if kind == "coords":
        return (rec["account"], rec["user"])
    return (str(rec["name"]),)


@dataclass(slots=True)
class AccountingChange:
    """Rows of the accounting tables to write or remove: what one sacctmgr change did."""

    upserts: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # kind, key, rec
    deletes: list[tuple[str, str]] = field(default_factory=list)  # kind, key

    def __bool__(self) -> bool:
        return bool(self.upserts or self.deletes)


def accounting_change(old: dict[str, list[dict[str, Any]]],
                      new: dict[str, list[dict[str, Any]]]) -> AccountingChange:
    """The row changes that turn the records `old` into `new` (AssocDB.to_records shapes)."""
    change = AccountingChange()
    for kind in ACCOUNTING_KINDS:
        before = {accounting_key(kind, r): r for r in old.get(kind, ())}
        after = {accounting_key(kind, r): r for r in new.get(kind, ())}
        change.upserts.extend((kind, k, r) for k, r in after.items() if before.get(k) != r)
        change.deletes.extend((kind, k) for k in before if k not in after)
    return change


AUTH_KINDS = ("master", "token", "key")


@dataclass(slots=True)
class AuthRecord:
    """One entry of the join-token and machine-key registry (controller/auth.py): the
    master secret (id "master", record {"secret": hex}), a token or a key by its id."""

    kind: str  # one of AUTH_KINDS
    id: str
    record: dict[str, Any]


@dataclass(slots=True)
class AuthState:
    master: str | None = None  # hex; None until a listening controller makes one
    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(slots=True)
class CrontabRecord:
    """One user's scrontab (controller/crontab.py): the file, its disabled lines, its jobs;
    `record` None removes it."""

    uid: int
    record: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class ReservationChange:
    """One reservation written (`reservation`) or removed (None), with the counter of
    generated names (`next_id`) as it stands after the change."""

    name: str
    reservation: Reservation | None
    next_id: int


@dataclass(slots=True)
class StoredReservations:
    reservations: list[Reservation] = field(default_factory=list)  # by name
    next_id: int = 1


@dataclass(slots=True)
class NodeAttributes:
    """A node's attributes as changed at runtime (scontrol update NodeName=…): None keeps
    slurm.conf's features or weight."""

    features: list[str] | None = None
    weight: int | None = None
    comment: str = ""


@dataclass(slots=True)
class RuntimePartitions:
    """The partition table and node attributes changed at runtime (controller/partitions.py),
    written whole: `partitions` None means slurm.conf's table (never changed, or reset by
    `scontrol reconfigure`)."""

    partitions: list[Partition] | None = None  # in the controller's order
    nodes: dict[str, NodeAttributes] = field(default_factory=dict)


_PARTITION_FIELDS = frozenset(f.name for f in fields(Partition))


def partition_from_dict(d: dict[str, Any]) -> Partition:
    """A stored partition record (Partition.to_dict); keys this release lacks are dropped."""
    return Partition(**{k: v for k, v in d.items() if k in _PARTITION_FIELDS})


@dataclass(slots=True)
class WriteBatch:
    """Everything one commit writes, in one transaction."""

    jobs: list[Job] = field(default_factory=list)  # encoded by `prepare`, on the caller's thread
    payloads: list[tuple[int, JobPayload]] = field(default_factory=list)
    nodes: list[NodeRecord] = field(default_factory=list)
    next_job_id: int | None = None
    usage_state: dict[str, Any] | None = None  # fairshare state (UsageState.to_dict), replaced
    usage: list[UsageRecord] = field(default_factory=list)  # added to the hourly records
    accounting: AccountingChange = field(default_factory=AccountingChange)
    crontabs: list[CrontabRecord] = field(default_factory=list)  # scrontab's, by user
    reservations: list[ReservationChange] = field(default_factory=list)  # in order
    partitions: RuntimePartitions | None = None  # replaces the stored runtime table
    auth: list[AuthRecord] = field(default_factory=list)
    # node history, in order: an event opened, or a node's open event closed
    node_events: list[NodeHistoryEntry | NodeHistoryEnd] = field(default_factory=list)
    # the writer's epoch (Store.take_epoch); a commit with another is refused. None: a
    # tool's or test's direct write, unfenced
    epoch: int | None = None

    def __bool__(self) -> bool:
        if self.crontabs or self.reservations or self.partitions is not None:
            return True
        return bool(self.jobs or self.payloads or self.nodes or self.next_job_id is not None
                    or self.usage_state is not None or self.usage or self.accounting
                    or self.auth or self.node_events)


# (job id, array job id, uid, state, submit, start, end, the record as JSON)
JobRow = tuple[int, "int | None", int, str, float, "float | None", "float | None", str]


@dataclass(slots=True)
class PreparedBatch:
    """A batch encoded for `commit` (CPU only, done on the caller's thread): the jobs as
    rows, everything else as it was."""

    jobs: list[JobRow]
    batch: WriteBatch  # the rest (its `jobs` emptied)


def prepare_batch(batch: WriteBatch) -> PreparedBatch:
    from corral import jsonio

    rows: list[JobRow] = []
    for job in batch.jobs:
        j = job.to_dict()
        rows.append((j["job_id"], j.get("array_job_id"), j["uid"], j["state"], j["submit_time"],
                     j.get("start_time"), j.get("end_time"), jsonio.dumps(j)))
    rest = WriteBatch(payloads=batch.payloads, nodes=batch.nodes, next_job_id=batch.next_job_id,
                      crontabs=batch.crontabs, reservations=batch.reservations,
                      partitions=batch.partitions,
                      usage_state=batch.usage_state, usage=batch.usage,
                      accounting=batch.accounting, auth=batch.auth,
                      node_events=batch.node_events, epoch=batch.epoch)
    return PreparedBatch(rows, rest)


class StaleEpoch(RuntimeError):
    """A commit carried an epoch the store has moved past: another controller holds it."""


class NewerSchema(RuntimeError):
    """The state database was written by a newer Corral than this one."""


class Store(Protocol):
    """What a controller persists.  Writes go through `prepare` + `commit` (the controller's
    group-commit writer, controller/persist.py) or `write`; reads are typed records.  Small
    enough for a PostgreSQL implementation: one transaction per commit, an epoch row."""

    def take_epoch(self) -> int:
        """Become the store's writer: raise the stored epoch and return it.  Commits that
        carry an older epoch are refused from then on (StaleEpoch)."""

    def write(self, batch: WriteBatch) -> None:
        """Persist the whole batch in one transaction; durable when it returns."""

    def prepare(self, batch: WriteBatch) -> PreparedBatch:
        """Encode a batch (CPU only) for `commit`; the controller does this on its loop."""

    def commit(self, prepared: PreparedBatch) -> None:
        """Write what `prepare` returned in one transaction, durable when it returns;
        StaleEpoch if its epoch is not the store's."""

    def load_active_jobs(self) -> list[Job]:
        """Jobs not yet finished, for a restarting controller."""

    def load_recent_finished(self, since: float) -> list[Job]: ...

    def load_payload(self, job_id: int) -> JobPayload | None: ...

    def load_nodes(self) -> list[NodeRecord]: ...

    def next_job_id(self) -> int: ...

    def query_jobs(self, **filters: Any) -> list[Job]:
        """Accounting query (sacct): filters as query_records."""

    def query_records(self, *, ids: list[int] | None = None, array_ids: list[int] | None = None,
                      uids: list[int] | None = None, states: list[str] | None = None,
                      start: float | None = None, end: float | None = None,
                      limit: int | None = None) -> list[tuple[int, str]]:
        """(job id, stored JSON record) of the matching jobs, oldest first, undecoded."""

    # ---- accounting (sacctmgr's entities, fairshare usage, usage reports) -------
    def load_accounting(self) -> dict[str, list[dict[str, Any]]]:
        """Every accounting record by kind (ACCOUNTING_KINDS); empty lists when none."""

    def load_usage_state(self) -> dict[str, Any] | None:
        """The fairshare usage state (decayed usage per association, last decay/reset)."""

    def query_usage(self, *, cluster: str | None = None, start: float | None = None,
                    end: float | None = None) -> list[UsageRecord]:
        """Usage records with start <= period_start < end, by period then association."""

    def query_events(self, *, cluster: str | None = None, start: float | None = None,
                     end: float | None = None, nodes: list[str] | None = None
                     ) -> list[NodeHistoryEntry]:
        """Events overlapping [start, end) (open ones overlap everything after their start),
        by start time."""

    # ---- the join-token and machine-key registry ----------------------------------
    def load_auth(self) -> AuthState: ...

    def load_crontabs(self) -> dict[int, dict[str, Any]]:
        """Every user's scrontab record by uid."""

    # ---- Slurm reservations, the runtime partition table ---------------------------
    def load_reservations(self) -> StoredReservations: ...

    def load_runtime_partitions(self) -> RuntimePartitions:
        """What `scontrol create|update|delete PartitionName=` and `scontrol update
        NodeName=` left; an empty RuntimePartitions when nothing was changed."""

    def close(self) -> None: ...
