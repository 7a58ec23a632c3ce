"""What a sacctmgr request did, as data: the change set of an add, modify, delete or load
(which records and associations, which settings) and the rows of a show.

The controller decides and records; the command (`cli/sacctmgr_text.py`) turns a change set
into the lines Slurm 22.05's sacctmgr prints.  A change set crosses the API as `to_dict()`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from corral.controller.assoc_authz import Authority
from corral.model.assoc import AssocDB, Association


@dataclass(slots=True)
class AssocRef:
    """One association a change touched (`parent`: an account association's parent)."""

    cluster: str
    account: str
    user: str | None = None
    partition: str | None = None
    parent: str | None = None

    @classmethod
    def of(cls, a: Association) -> AssocRef:
        return cls(a.cluster, a.account, a.user, a.partition, a.parent)


@dataclass(slots=True)
class ChangeSet:
    """The outcome of one add, modify, delete or load.

    `entity` is what was changed (an association request is answered as the user or
    account change it is); `changed` whether there is anything to commit.
    """

    op: str  # add, modify, delete, load
    entity: str  # cluster, account, user, qos, coordinator
    changed: bool = False
    # the clusters, accounts, users or QoS added, modified or deleted (in Slurm's order)
    names: list[str] = field(default_factory=list)
    # the named records an add left alone because they exist (add cluster says so)
    existing: list[str] = field(default_factory=list)
    # the associations added, modified or deleted
    assocs: list[AssocRef] = field(default_factory=list)
    # modify: a change of the records themselves (users: DefaultAccount, AdminLevel) was
    # asked for, and one of associations (sacctmgr reports when none matched)
    record_change_asked: bool = False
    assoc_change_asked: bool = False
    # (user, account) pairs of coordinators added or removed
    coordinators: list[tuple[str, str]] = field(default_factory=list)
    # add: the records' settings as given (None: left to the default)
    description: str | None = None
    organization: str | None = None
    default_account: str | None = None
    admin_level: str | None = None
    # add: the association settings given, by sacctmgr's names (assoc_settings.py)
    settings: dict[str, str] = field(default_factory=dict)
    # load: how many associations the loaded cluster has
    assoc_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChangeSet:
        c = cls(**{k: v for k, v in d.items() if k not in ("assocs", "coordinators")})
        c.assocs = [AssocRef(**a) for a in d.get("assocs") or ()]
        c.coordinators = [(str(u), str(a)) for u, a in d.get("coordinators") or ()]
        return c


@dataclass(slots=True)
class Outcome:
    """A request's answer: a change set (add, modify, delete, load) or rows (show)."""

    changes: ChangeSet | None = None
    rows: list[dict[str, str]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.changes is not None and self.changes.changed

    @property
    def out(self) -> str:
        """The text sacctmgr prints for this outcome (rendered by the command's module;
        kept for callers that want the text here, such as tests and the harness)."""
        from corral.cli.sacctmgr_text import render_changes

        return render_changes(self.changes.to_dict()) if self.changes is not None else ""

    def to_dict(self) -> dict[str, Any]:
        return {"changes": self.changes.to_dict() if self.changes is not None else None,
                "changed": self.changed, "rows": self.rows}


# (user, account[, job id]) of the active jobs, asked only when a removal needs them
ActiveJobs = Callable[[], Iterable[tuple[Any, ...]]]


@dataclass(slots=True)
class EditContext:
    """One change being computed: on `db`, a copy of the committed tree (thrown away when
    refused), by the caller `auth` checks, on this controller's `cluster`."""

    db: AssocDB
    auth: Authority
    cluster: str
    active_jobs: ActiveJobs
