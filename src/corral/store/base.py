"""The store interface: what the controller persists, independent of the database."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from corral.model.job import Job


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
class WriteBatch:
    jobs: list[dict[str, Any]] = field(default_factory=list)  # Job.to_dict()
    payloads: list[tuple[int, JobPayload]] = field(default_factory=list)
    nodes: list[NodeRecord] = field(default_factory=list)
    next_job_id: int | None = None

    def __bool__(self) -> bool:
        return bool(self.jobs or self.payloads or self.nodes or self.next_job_id is not None)


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
class NodeEvent:
    """A node down/drain period (sacctmgr list event): open while `end` is None."""

    cluster: str
    node: str
    start: float
    state: str  # compact node state when it began: DOWN, DRAIN, DOWN*, …
    reason: str = ""
    reason_uid: int | None = None
    end: float | None = None


# the accounting record kinds (model/assoc.py AssocDB.to_records), in load order
ACCOUNTING_KINDS = ("clusters", "accounts", "users", "qos", "assocs", "coords")


class Store(Protocol):
    def write(self, batch: WriteBatch) -> None:
        """Persist the whole batch in one transaction; durable when it returns."""

    def prepare(self, batch: WriteBatch) -> Any:
        """Encode a batch (CPU only) for `commit`; the controller does this on its loop."""

    def commit(self, prepared: Any) -> None:
        """Write what `prepare` returned in one transaction; durable when it returns."""

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

    def replace_accounting(self, records: dict[str, list[dict[str, Any]]]) -> None:
        """Replace all accounting records in one transaction; durable when it returns (the
        set is small: a whole sacctmgr change is written atomically)."""

    def load_usage_state(self) -> dict[str, Any] | None:
        """The fairshare usage state (decayed usage per association, last decay/reset)."""

    def save_usage_state(self, state: dict[str, Any]) -> None: ...

    def add_usage(self, records: list[UsageRecord]) -> None:
        """Add usage to the per-period records (summed when a period already has some)."""

    def query_usage(self, *, cluster: str | None = None, start: float | None = None,
                    end: float | None = None) -> list[UsageRecord]:
        """Usage records with start <= period_start < end, by period then association."""

    def add_event(self, event: NodeEvent) -> None:
        """Record a node event (replaces one of the same node and start)."""

    def end_events(self, cluster: str, node: str, end: float) -> None:
        """Close the node's open events (it came back)."""

    def query_events(self, *, cluster: str | None = None, start: float | None = None,
                     end: float | None = None, nodes: list[str] | None = None
                     ) -> list[NodeEvent]:
        """Events overlapping [start, end) (open ones overlap everything after their start),
        by start time."""

    def close(self) -> None: ...
