"""Accounting entities, pure: clusters, the account tree, users, associations, QoS, limits.

Slurm's model (sacctmgr(1)): an *association* is (cluster, account, user, partition); an
account's own association (user None) has a parent account, `root` at the top; a user's
association hangs under its account's.  Limits sit on associations (checked up the tree:
user, its account, the account's parents) and on QoS.  Time limits are in minutes, TRES
amounts as model/tres.py parses them (memory in MB).  `AssocDB` is the whole set in memory,
with the lookups the scheduler, the submit checks and sacctmgr need; it does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields, replace
from typing import Any

from corral.model.tres import Tres

ROOT = "root"
ADMIN_LEVELS = ("None", "Operator", "Administrator")
QOS_FLAGS = ("DenyOnLimit", "EnforceUsageThreshold", "NoReserve", "PartitionMaxNodes",
             "PartitionMinNodes", "OverPartQOS", "PartitionTimeLimit", "RequiresReservation",
             "NoDecay", "UsageFactorSafe")
PREEMPT_MODES = ("cluster", "cancel", "requeue", "suspend", "off")

# TRES limit fields (dicts) and scalar limit fields (int or None = no limit)
TRES_LIMITS = ("grp_tres", "grp_tres_mins", "grp_tres_run_mins", "max_tres_per_job",
               "max_tres_per_node", "max_tres_mins_per_job", "max_tres_per_user",
               "min_tres_per_job")
COUNT_LIMITS = ("grp_jobs", "grp_submit_jobs", "grp_wall", "max_jobs", "max_submit_jobs",
                "max_wall", "max_jobs_per_user", "max_submit_jobs_per_user")


@dataclass(slots=True)
class Limits:
    """Association and QoS limits.  Associations use the Grp* and MaxTRES/MaxTRESPerNode/
    MaxTRESMins/MaxJobs/MaxSubmitJobs/MaxWall ones; the Per-User and Min ones are QoS only
    (Slurm's sets).  Wall times in minutes."""

    grp_tres: Tres = field(default_factory=dict)
    grp_tres_mins: Tres = field(default_factory=dict)
    grp_tres_run_mins: Tres = field(default_factory=dict)
    grp_jobs: int | None = None
    grp_submit_jobs: int | None = None
    grp_wall: int | None = None
    max_tres_per_job: Tres = field(default_factory=dict)
    max_tres_per_node: Tres = field(default_factory=dict)
    max_tres_mins_per_job: Tres = field(default_factory=dict)
    max_jobs: int | None = None
    max_submit_jobs: int | None = None
    max_wall: int | None = None
    max_tres_per_user: Tres = field(default_factory=dict)
    max_jobs_per_user: int | None = None
    max_submit_jobs_per_user: int | None = None
    min_tres_per_job: Tres = field(default_factory=dict)

    def empty(self) -> bool:
        return not any(getattr(self, f) for f in TRES_LIMITS) and all(
            getattr(self, f) is None for f in COUNT_LIMITS)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in TRES_LIMITS:
            if getattr(self, f):
                out[f] = dict(getattr(self, f))
        for f in COUNT_LIMITS:
            if getattr(self, f) is not None:
                out[f] = getattr(self, f)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Limits:
        d = d or {}
        kw: dict[str, Any] = {}
        for f in TRES_LIMITS:
            if f in d:
                kw[f] = {str(k): int(v) for k, v in d[f].items()}
        for f in COUNT_LIMITS:
            if d.get(f) is not None:
                kw[f] = int(d[f])
        return cls(**kw)


@dataclass(slots=True)
class ClusterRecord:
    name: str
    control_host: str = ""
    control_port: int = 0
    rpc: int = 0
    flags: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "control_host": self.control_host,
                "control_port": self.control_port, "rpc": self.rpc, "flags": self.flags}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClusterRecord:
        return cls(d["name"], d.get("control_host", ""), int(d.get("control_port", 0)),
                   int(d.get("rpc", 0)), d.get("flags", ""))


@dataclass(slots=True)
class Account:
    name: str
    description: str = ""
    organization: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "organization": self.organization}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Account:
        return cls(d["name"], d.get("description", ""), d.get("organization", ""))


@dataclass(slots=True)
class User:
    name: str
    default_account: str = ""
    admin_level: str = "None"
    default_wckey: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "default_account": self.default_account,
                "admin_level": self.admin_level, "default_wckey": self.default_wckey}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> User:
        return cls(d["name"], d.get("default_account", ""), d.get("admin_level", "None"),
                   d.get("default_wckey", ""))


@dataclass(slots=True)
class Qos:
    name: str
    id: int = 0
    description: str = ""
    priority: int = 0
    usage_factor: float = 1.0
    usage_threshold: float | None = None
    grace_time: int = 0  # seconds
    preempt: tuple[str, ...] = ()
    preempt_mode: str = "cluster"
    preempt_exempt_time: int | None = None
    flags: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)

    @property
    def deny_on_limit(self) -> bool:
        return "DenyOnLimit" in self.flags

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "id": self.id, "description": self.description,
                "priority": self.priority, "usage_factor": self.usage_factor,
                "usage_threshold": self.usage_threshold, "grace_time": self.grace_time,
                "preempt": list(self.preempt), "preempt_mode": self.preempt_mode,
                "preempt_exempt_time": self.preempt_exempt_time, "flags": list(self.flags),
                "limits": self.limits.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Qos:
        return cls(d["name"], int(d.get("id", 0)), d.get("description", ""),
                   int(d.get("priority", 0)), float(d.get("usage_factor", 1.0)),
                   d.get("usage_threshold"), int(d.get("grace_time", 0)),
                   tuple(d.get("preempt", ())), d.get("preempt_mode", "cluster"),
                   d.get("preempt_exempt_time"), tuple(d.get("flags", ())),
                   Limits.from_dict(d.get("limits")))


@dataclass(slots=True)
class Association:
    """(cluster, account, user, partition).  `user` None: the account's own association,
    whose `parent` is its parent account (None only for root)."""

    id: int
    cluster: str
    account: str
    user: str | None = None
    partition: str | None = None
    parent: str | None = None
    shares: int = 1  # Fairshare=; SHARES_PARENT for "parent"
    priority: int | None = None
    qos: tuple[str, ...] = ()  # empty: inherited from the parent
    default_qos: str | None = None
    limits: Limits = field(default_factory=Limits)

    @property
    def is_user(self) -> bool:
        return self.user is not None

    def key(self) -> tuple[str, str, str | None, str | None]:
        return (self.cluster, self.account, self.user, self.partition)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "cluster": self.cluster, "account": self.account,
                "user": self.user, "partition": self.partition, "parent": self.parent,
                "shares": self.shares, "priority": self.priority, "qos": list(self.qos),
                "default_qos": self.default_qos, "limits": self.limits.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Association:
        return cls(int(d["id"]), d["cluster"], d["account"], d.get("user"), d.get("partition"),
                   d.get("parent"), int(d.get("shares", 1)), d.get("priority"),
                   tuple(d.get("qos", ())), d.get("default_qos"),
                   Limits.from_dict(d.get("limits")))


SHARES_PARENT = -1  # Fairshare=parent (SLURMDB_FS_USE_PARENT)


@dataclass(frozen=True, slots=True)
class Coordinator:
    account: str
    user: str


class AssocError(ValueError):
    """A change the account tree refuses; the message is sacctmgr's."""


@dataclass(slots=True)
class AssocDB:
    """Every accounting entity, in memory (the controller holds one; stores persist it)."""

    clusters: dict[str, ClusterRecord] = field(default_factory=dict)
    accounts: dict[str, Account] = field(default_factory=dict)
    users: dict[str, User] = field(default_factory=dict)
    qos: dict[str, Qos] = field(default_factory=dict)
    assocs: dict[int, Association] = field(default_factory=dict)
    coords: set[Coordinator] = field(default_factory=set)

    # ---- (de)serialisation: the store keeps one record per entity -----------
    def to_records(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "clusters": [self.clusters[k].to_dict() for k in sorted(self.clusters)],
            "accounts": [self.accounts[k].to_dict() for k in sorted(self.accounts)],
            "users": [self.users[k].to_dict() for k in sorted(self.users)],
            "qos": [self.qos[k].to_dict() for k in sorted(self.qos)],
            "assocs": [self.assocs[k].to_dict() for k in sorted(self.assocs)],
            "coords": [{"account": c.account, "user": c.user}
                       for c in sorted(self.coords, key=lambda c: (c.account, c.user))],
        }

    @classmethod
    def from_records(cls, recs: dict[str, list[dict[str, Any]]]) -> AssocDB:
        db = cls()
        for d in recs.get("clusters", ()):
            db.clusters[d["name"]] = ClusterRecord.from_dict(d)
        for d in recs.get("accounts", ()):
            db.accounts[d["name"]] = Account.from_dict(d)
        for d in recs.get("users", ()):
            db.users[d["name"]] = User.from_dict(d)
        for d in recs.get("qos", ()):
            db.qos[d["name"]] = Qos.from_dict(d)
        for d in recs.get("assocs", ()):
            a = Association.from_dict(d)
            db.assocs[a.id] = a
        for d in recs.get("coords", ()):
            db.coords.add(Coordinator(d["account"], d["user"]))
        return db

    def copy(self) -> AssocDB:
        """A deep enough copy to change and validate before committing (use cases)."""
        return AssocDB.from_records(self.to_records())

    # ---- lookups ---------------------------------------------------------------
    def next_assoc_id(self) -> int:
        return max(self.assocs, default=1) + 1

    def next_qos_id(self) -> int:
        return max((q.id for q in self.qos.values()), default=0) + 1

    def find(self, cluster: str, account: str, user: str | None = None,
             partition: str | None = None) -> Association | None:
        for a in self.assocs.values():
            if a.key() == (cluster, account, user, partition):
                return a
        return None

    def account_assoc(self, cluster: str, account: str) -> Association | None:
        return self.find(cluster, account)

    def user_assocs(self, cluster: str, user: str) -> list[Association]:
        return sorted((a for a in self.assocs.values() if a.cluster == cluster and a.user == user),
                      key=lambda a: (a.account, a.partition or ""))

    def job_assoc(self, cluster: str, user: str, account: str,
                  partition: str | None = None) -> Association | None:
        """The association a job runs under: the partition-specific one when it exists, else
        the account-wide one (Slurm's order)."""
        if partition:
            hit = self.find(cluster, account, user, partition)
            if hit is not None:
                return hit
        return self.find(cluster, account, user, None)

    def children(self, cluster: str, account: str) -> list[Association]:
        """Associations directly under an account: its users' and its sub-accounts'."""
        out = [a for a in self.assocs.values() if a.cluster == cluster and (
            (a.user is not None and a.account == account)
            or (a.user is None and a.parent == account and a.account != account))]
        return sorted(out, key=lambda a: (a.user is None, a.user or a.account, a.partition or ""))

    def parent_of(self, assoc: Association) -> Association | None:
        if assoc.user is not None:
            return self.account_assoc(assoc.cluster, assoc.account)
        if assoc.parent is None:
            return None
        return self.account_assoc(assoc.cluster, assoc.parent)

    def chain(self, assoc: Association) -> list[Association]:
        """The association and its ancestors up to root: where limits are checked."""
        out = [assoc]
        seen = {assoc.id}
        cur = self.parent_of(assoc)
        while cur is not None and cur.id not in seen:
            out.append(cur)
            seen.add(cur.id)
            cur = self.parent_of(cur)
        return out

    def ancestors(self, cluster: str, account: str) -> list[str]:
        """The account and its parent accounts up to root."""
        a = self.account_assoc(cluster, account)
        return [x.account for x in self.chain(a)] if a is not None else [account]

    def subaccounts(self, cluster: str, account: str) -> set[str]:
        """The account and every account below it."""
        out = {account}
        grew = True
        while grew:
            grew = False
            for a in self.assocs.values():
                if a.cluster == cluster and a.user is None and a.parent in out \
                        and a.account not in out:
                    out.add(a.account)
                    grew = True
        return out

    def effective_qos(self, assoc: Association) -> tuple[str, ...]:
        """QoS an association may use: its own list, else its nearest ancestor's."""
        for a in self.chain(assoc):
            if a.qos:
                return a.qos
        return ()

    def effective_default_qos(self, assoc: Association) -> str | None:
        for a in self.chain(assoc):
            if a.default_qos:
                return a.default_qos
        return None

    def effective_shares(self, assoc: Association) -> int:
        return assoc.shares

    def is_coordinator(self, user: str, account: str, cluster: str | None = None) -> bool:
        """A coordinator of an account coordinates its sub-accounts too (Slurm)."""
        mine = {c.account for c in self.coords if c.user == user}
        if not mine:
            return False
        clusters = [cluster] if cluster else list(self.clusters) or [""]
        for cl in clusters:
            if mine.intersection(self.ancestors(cl, account)):
                return True
        return account in mine

    def coordinators_of(self, account: str) -> list[str]:
        return sorted(c.user for c in self.coords if c.account == account)

    def admin_level(self, user: str) -> str:
        u = self.users.get(user)
        return u.admin_level if u else "None"

    def would_cycle(self, cluster: str, account: str, new_parent: str) -> bool:
        """Moving `account` under `new_parent` makes a cycle when the parent is below it."""
        return new_parent in self.subaccounts(cluster, account)

    def iter_tree(self, cluster: str) -> Iterator[tuple[int, Association]]:
        """Depth-first from root: (depth, association), users before sub-accounts, by name
        (sacctmgr's `show assoc tree` order)."""
        root = self.account_assoc(cluster, ROOT)
        if root is None:
            return
        stack: list[tuple[int, Association]] = [(0, root)]
        seen: set[int] = set()
        while stack:
            depth, a = stack.pop()
            if a.id in seen:
                continue
            seen.add(a.id)
            yield depth, a
            if a.user is None:
                kids = self.children(cluster, a.account)
                for k in reversed(kids):
                    stack.append((depth + 1, k))


class AssocIndex:
    """O(1) lookups over one `AssocDB`, built once per scheduling pass or fairshare run
    (the controller replaces its `AssocDB` on each committed change and never mutates a
    committed one, so an index stays true for the db it was built from)."""

    def __init__(self, db: AssocDB) -> None:
        self.db = db
        self.by_key: dict[tuple[str, str, str | None, str | None], Association] = {}
        self.kids: dict[tuple[str, str], list[Association]] = {}
        for a in db.assocs.values():
            self.by_key[a.key()] = a
        for a in db.assocs.values():
            if a.user is not None:
                self.kids.setdefault((a.cluster, a.account), []).append(a)
            elif a.parent is not None and a.parent != a.account:
                self.kids.setdefault((a.cluster, a.parent), []).append(a)
        for lst in self.kids.values():
            lst.sort(key=lambda a: (a.user is None, a.user or a.account, a.partition or ""))
        self._chains: dict[int, list[Association]] = {}

    def find(self, cluster: str, account: str, user: str | None = None,
             partition: str | None = None) -> Association | None:
        return self.by_key.get((cluster, account, user, partition))

    def job_assoc(self, cluster: str, user: str, account: str,
                  partition: str | None = None) -> Association | None:
        if partition:
            hit = self.by_key.get((cluster, account, user, partition))
            if hit is not None:
                return hit
        return self.by_key.get((cluster, account, user, None))

    def children(self, cluster: str, account: str) -> list[Association]:
        return self.kids.get((cluster, account), [])

    def parent_of(self, a: Association) -> Association | None:
        if a.user is not None:
            return self.by_key.get((a.cluster, a.account, None, None))
        if a.parent is None:
            return None
        return self.by_key.get((a.cluster, a.parent, None, None))

    def chain(self, a: Association) -> list[Association]:
        hit = self._chains.get(a.id)
        if hit is None:
            hit = [a]
            seen = {a.id}
            cur = self.parent_of(a)
            while cur is not None and cur.id not in seen:
                hit.append(cur)
                seen.add(cur.id)
                cur = self.parent_of(cur)
            self._chains[a.id] = hit
        return hit

    def effective_qos(self, a: Association) -> tuple[str, ...]:
        for x in self.chain(a):
            if x.qos:
                return x.qos
        return ()


def with_limits(obj: Association | Qos, **changes: Any) -> Any:
    """A copy of an association or QoS with some limit fields replaced."""
    return replace(obj, limits=replace(obj.limits, **changes))


def limit_field_names() -> list[str]:
    return [f.name for f in fields(Limits)]


def iter_users(db: AssocDB, cluster: str) -> Iterable[Association]:
    return (a for a in db.assocs.values() if a.cluster == cluster and a.user is not None)
