"""The association database (Slurm's accounting tree) and sacctmgr's use cases on it:
add, modify, delete and show clusters, accounts, users, QoS, associations and
coordinators; dump and load; with Slurm's authorization.

A change is computed on a copy of the committed `AssocDB`, validated as a whole (unknown
names, limit specs that do not parse, cycles in the account tree, removing an account with
active jobs), then written in one store transaction through the controller's one write
path (the store given here: `persist.AccountingThroughWriter` commits the rows that
differ): durable when acknowledged, and nothing changed when refused.  The answer is data
— a change set (which records and associations were added, modified or deleted) or the
rows of a show; the words sacctmgr prints for it are the command's (cli/sacctmgr_text.py).
A refusal raises `SlurmError` (errno ESLURM_ACCESS_DENIED when the caller may not).

The modules behind it:
- assoc_grammar.py: option names and how values read;
- assoc_authz.py: who may change what;
- assoc_settings.py: applying `set` values to associations and QoS;
- assoc_edit_tree.py, assoc_edit_users.py, assoc_edit_qos.py: the changes, by entity;
- assoc_changes.py: the change set and the outcome;
- assoc_queries.py: show's rows and what PrivateData hides;
- assoc_flatfile.py: dump and load.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from corral.controller import assoc_edit_qos, assoc_edit_tree, assoc_edit_users
from corral.controller.assoc_authz import (
    ACCESS_DENIED,
    NO_DUMP,
    NO_PRIVILEGE,
    NOT_SUPER,
    Authority,
    Caller,
    is_admin,
    is_super,
)
from corral.controller.assoc_changes import ActiveJobs, AssocRef, ChangeSet, EditContext, Outcome
from corral.controller.assoc_edit_tree import add_cluster_records, bootstrap
from corral.controller.assoc_flatfile import dump_text, load_text
from corral.controller.assoc_grammar import ENTITIES, canonical, canonical_options, lower_names
from corral.controller.assoc_queries import assoc_row, mins2time, qos_row, show_rows, visible_rows
from corral.controller.assoc_settings import apply_limits
from corral.controller.errors import SlurmError
from corral.model.assoc import AssocDB

log = logging.getLogger("corral.controller")

# The names this module has always offered (callers and tests import them from here).
AccountsError = SlurmError  # sacctmgr's refusals are SlurmErrors: one error type
__all__ = ["ACCESS_DENIED", "ENTITIES", "NO_DUMP", "NO_PRIVILEGE", "NOT_SUPER", "Accounts",
           "AccountsError", "ActiveJobs", "AssocRef", "Caller", "ChangeSet", "Outcome",
           "add_cluster_records", "apply_limits", "assoc_row", "bootstrap", "canonical",
           "mins2time", "qos_row"]

Options = dict[str, str]
Edit = Callable[[EditContext, Options, Options], ChangeSet]


class AccountingStore(Protocol):
    """Where the tree is read from and its changes go (the controller's writer)."""

    def load_accounting(self) -> dict[str, list[dict[str, Any]]]: ...

    def replace_accounting(self, records: dict[str, list[dict[str, Any]]]) -> None: ...


def _modify_association(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    if "user" in where or "names" in where:
        return assoc_edit_users.modify_user(
            ctx, {**where, "names": where.get("user", where.get("names", ""))}, sets)
    return assoc_edit_tree.modify_account(ctx, {**where, "names": where.get("account", "")},
                                          sets)


def _delete_association(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    if "user" in where:
        return assoc_edit_users.delete_user(ctx, where, sets)
    return assoc_edit_tree.delete_account(ctx, {**where, "names": where.get("account", "")},
                                          sets)


def _add_association(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    if "user" in where:
        return assoc_edit_users.add_user(ctx, {**where, "names": where.pop("user")}, sets)
    return assoc_edit_tree.add_account(ctx, {**where, "names": where.pop("account", "")}, sets)


# (op, entity) → the use case
EDITS: dict[tuple[str, str], Edit] = {
    ("add", "cluster"): assoc_edit_tree.add_cluster,
    ("modify", "cluster"): assoc_edit_tree.modify_cluster,
    ("delete", "cluster"): assoc_edit_tree.delete_cluster,
    ("add", "account"): assoc_edit_tree.add_account,
    ("modify", "account"): assoc_edit_tree.modify_account,
    ("delete", "account"): assoc_edit_tree.delete_account,
    ("add", "user"): assoc_edit_users.add_user,
    ("modify", "user"): assoc_edit_users.modify_user,
    ("delete", "user"): assoc_edit_users.delete_user,
    ("add", "association"): _add_association,
    ("modify", "association"): _modify_association,
    ("delete", "association"): _delete_association,
    ("add", "coordinator"): assoc_edit_users.add_coordinator,
    ("delete", "coordinator"): assoc_edit_users.delete_coordinator,
    ("add", "qos"): assoc_edit_qos.add_qos,
    ("modify", "qos"): assoc_edit_qos.modify_qos,
    ("delete", "qos"): assoc_edit_qos.delete_qos,
}


class Accounts:
    """The accounting entities in memory over a store; `db` is what the scheduler reads
    (replaced, never mutated in place, on each committed change: a pass holding the old
    one sees a consistent tree)."""

    def __init__(self, store: AccountingStore, cluster_name: str, *,
                 active_jobs: ActiveJobs | None = None,
                 on_change: Callable[[AssocDB], None] | None = None) -> None:
        self.store = store
        self.cluster = cluster_name
        self.active_jobs: ActiveJobs = active_jobs or (lambda: ())
        self.on_change = on_change
        self.db = AssocDB.from_records(store.load_accounting())
        bootstrap(self.db, cluster_name)
        # slurm.conf's PrivateData kinds (controller/privacy.py), set by the routes
        self.private_data: frozenset[str] = frozenset()

    # -- authorization
    def is_admin(self, who: Caller) -> bool:
        return is_admin(self.db, who)

    def is_super(self, who: Caller) -> bool:
        """Slurm's super user: only one changes admin levels or dumps the accounting tree."""
        return is_super(self.db, who)

    # -- entry point
    def execute(self, who: Caller, req: dict[str, Any],
                active_jobs: Iterable[tuple[Any, ...]] | None = None) -> Outcome:
        """One sacctmgr request: {"op", "entity", "names", "where", "set", "options",
        "commit"}; `active_jobs` (user, account, job id) as the caller saw them, else
        asked of the controller when a removal needs them.  Without `commit` the change
        is computed and answered, not kept."""
        op = str(req.get("op", ""))
        entity = str(req.get("entity", ""))
        if entity not in ENTITIES:
            raise SlurmError(f" Unknown entity: {entity}")
        names = [str(n) for n in req.get("names", []) if str(n)]
        where = canonical_options({str(k): str(v) for k, v in
                                   dict(req.get("where") or {}).items()}, names)
        sets = canonical_options({str(k): str(v) for k, v in
                                  dict(req.get("set") or {}).items()})
        lower_names(where)
        lower_names(sets)
        if entity == "account" and "names" in where:
            where["names"] = where["names"].lower()
        if op == "show":
            return self.show(entity, where, dict(req.get("options") or {}), who)
        edit = EDITS.get((op, entity))
        if edit is None:
            raise SlurmError(f" Unknown command: {op} {entity}")
        jobs = self.active_jobs if active_jobs is None else (lambda: active_jobs)
        new = self.db.copy()
        changes = edit(EditContext(new, Authority(self.db, self.cluster, who), self.cluster,
                                   jobs), where, sets)
        if changes.changed and bool(req.get("commit", True)):
            self._commit(new)
            log.info("sacctmgr %s %s by %s", op, entity, who.user)
        return Outcome(changes)

    def _commit(self, new: AssocDB) -> None:
        self.store.replace_accounting(new.to_records())
        self.db = new
        if self.on_change is not None:
            self.on_change(new)

    # -- show
    def show(self, entity: str, where: dict[str, str], options: dict[str, Any],
             who: Caller | None = None) -> Outcome:
        db = self.db
        rows = show_rows(db, entity, where, options)
        hide = self.private_data if who is not None and not is_admin(db, who) else frozenset()
        if not hide or who is None:
            return Outcome(rows=rows)
        return Outcome(rows=visible_rows(db, self.cluster, entity, rows, who.user, hide))

    # -- dump and load
    def dump(self, cluster: str) -> str:
        """`sacctmgr dump`: the cluster's associations in Slurm's flat-file format."""
        return dump_text(self.db, cluster)

    def load(self, who: Caller, text: str, commit: bool = True) -> Outcome:
        """`sacctmgr load file`: replace a cluster's associations with the file's (the
        file names the cluster); QoS lines are added or updated."""
        auth = Authority(self.db, self.cluster, who)
        auth.require_admin("Problem loading")
        new = self.db.copy()
        changes = load_text(new, text, auth)
        if commit:
            self._commit(new)
        return Outcome(changes)
