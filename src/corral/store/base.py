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

    def close(self) -> None: ...
