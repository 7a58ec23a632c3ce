"""sacctmgr's add, modify and delete of clusters and accounts: the account tree.

Each use case works on `ctx.db` (a copy of the committed tree), checks who may, and
returns the change set; `where` and `sets` are canonical (assoc_grammar.py).  A refusal
raises `SlurmError` before anything is committed.
"""

from __future__ import annotations

from corral.controller.assoc_authz import no_privilege
from corral.controller.assoc_changes import AssocRef, ChangeSet, EditContext
from corral.controller.assoc_grammar import (
    ASSOC_LIMITS,
    ASSOC_SETTINGS,
    only,
    read_qos_list,
    split_list,
)
from corral.controller.assoc_settings import apply_limits, assoc_settings, set_assoc
from corral.controller.errors import SlurmError
from corral.model.assoc import ROOT, Account, AssocDB, Association, ClusterRecord, Limits, Qos, User

Options = dict[str, str]


def add_cluster_records(db: AssocDB, name: str) -> None:
    """A cluster with its root account association and root's user association (what
    slurmdbd creates with a cluster)."""
    db.clusters[name] = ClusterRecord(name)
    rid = db.next_assoc_id()
    db.assocs[rid] = Association(rid, name, ROOT,
                                 qos=("normal",) if "normal" in db.qos else ())
    db.assocs[rid + 1] = Association(rid + 1, name, ROOT, user="root")
    db.accounts.setdefault(ROOT, Account(ROOT, "default root account", "root"))
    db.users.setdefault("root", User("root", ROOT, "Administrator"))


def bootstrap(db: AssocDB, cluster: str) -> None:
    """A store with no accounting yet: the `normal` QoS (slurmdbd creates it) and this
    cluster, so a lab starts with `sacctmgr add account`.  Kept in memory; written with
    the first change."""
    if not db.qos and not db.clusters and not db.assocs:
        db.qos["normal"] = Qos("normal", 1, "Normal QOS default")
    if cluster and cluster not in db.clusters and not any(
            a.cluster == cluster for a in db.assocs.values()):
        add_cluster_records(db, cluster)


# ---- clusters -----------------------------------------------------------------------------

def add_cluster(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    ctx.auth.require_admin("Problem adding clusters")
    db = ctx.db
    names = split_list(where.pop("names", ""))
    if not names:
        raise SlurmError(" Need name of cluster to add.")
    only(where, ASSOC_SETTINGS)
    out = ChangeSet("add", "cluster")
    for n in names:
        if n in db.clusters:
            out.existing.append(n)
            continue
        add_cluster_records(db, n)
        root = db.account_assoc(n, ROOT)
        assert root is not None
        root.limits = apply_limits(Limits(), where, ASSOC_LIMITS)
        if "qos" in where:
            root.qos = read_qos_list(db, (), where["qos"])
        out.names.append(n)
    out.changed = bool(out.names)
    return out


def delete_cluster(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    ctx.auth.require_admin("Error with request")
    db = ctx.db
    gone = [n for n in split_list(where.get("names", "")) if n in db.clusters]
    if not gone:
        return ChangeSet("delete", "cluster")
    if ctx.cluster in gone and any(True for _ in ctx.active_jobs()):
        raise SlurmError(" Error with request: Job(s) active, cancel job(s) before remove")
    out = ChangeSet("delete", "cluster", True, names=gone)
    for n in gone:
        del db.clusters[n]
        for aid in [a.id for a in db.assocs.values() if a.cluster == n]:
            out.assocs.append(AssocRef.of(db.assocs.pop(aid)))
    return out


def modify_cluster(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    ctx.auth.require_admin("Error with request")
    db = ctx.db
    out = ChangeSet("modify", "cluster")
    for n in split_list(where.get("names", "")) or list(db.clusters):
        root = db.account_assoc(n, ROOT)
        if root is None:
            continue
        set_assoc(db, root, sets)
        out.names.append(n)
        out.assocs.append(AssocRef.of(root))
    out.changed = bool(out.names)
    return out


# ---- accounts -----------------------------------------------------------------------------

def _valid_account_name(n: str) -> bool:
    return n != ROOT and n.replace("-", "").replace("_", "").replace(".", "").isalnum()


def add_account(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    db, auth = ctx.db, ctx.auth
    names = split_list(where.pop("names", ""))
    if not names:
        raise SlurmError(" Need name of account to add.")
    parent = where.pop("parent", ROOT)
    clusters = split_list(where.pop("cluster", "")) or [ctx.cluster]
    descr = where.pop("description", None)
    org = where.pop("organization", None)
    only(where, ASSOC_SETTINGS)
    auth.require_coord([parent], "Problem adding accounts")
    for cl in clusters:
        auth.check_coord_qos(db, cl, parent, where, "Problem adding accounts")
    if not db.clusters:
        raise SlurmError("  Can't add accounts, no cluster defined yet.\n"
                         " Please contact your administrator.")
    out = ChangeSet("add", "account", description=descr, organization=org)
    for n in names:
        if not _valid_account_name(n):
            raise SlurmError(f" Bad account name: {n}")
        if n not in db.accounts:
            db.accounts[n] = Account(n, descr or n, org or (parent if parent != ROOT else n))
            out.names.append(n)
        for cl in clusters:
            if cl not in db.clusters:
                raise SlurmError(f" The cluster {cl} doesn't exist.  Please add first.")
            if db.account_assoc(cl, n) is not None:
                continue
            if db.account_assoc(cl, parent) is None:
                raise SlurmError(f" Parent account '{parent}' doesn't exist on cluster "
                                 f"{cl}\n        Contact your admin to add this account.")
            aid = db.next_assoc_id()
            db.assocs[aid] = set_assoc(db, Association(aid, cl, n, parent=parent), where)
            out.assocs.append(AssocRef.of(db.assocs[aid]))
    if not out.names and not out.assocs:
        return out
    out.settings = assoc_settings(where)
    out.changed = True
    return out


def modify_account(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    db, auth = ctx.db, ctx.auth
    if not sets:
        raise SlurmError(" You didn't give me anything to set")
    names = split_list(where.get("names", ""))
    if not names:
        raise SlurmError(" No conditions given")
    for n in names:
        if n not in db.accounts:
            raise SlurmError(f" Error with request: Account {n} does not exist")
    auth.require_coord(names, "Error with request")
    out = ChangeSet("modify", "account", True)
    if "description" in sets or "organization" in sets:
        if not auth.admin:  # slurmdbd: an account's record is the operators'
            raise no_privilege("Error with request")
        for n in names:
            a = db.accounts[n]
            db.accounts[n] = Account(n, sets.get("description", a.description),
                                     sets.get("organization", a.organization))
        out.names = list(names)
        out.record_change_asked = True
    rest = {k: v for k, v in sets.items() if k not in ("description", "organization")}
    if not rest:
        return out
    only(rest, ASSOC_SETTINGS | {"parent"})
    clusters = split_list(where.get("cluster", "")) or list(db.clusters)
    if not auth.admin:
        # a coordinator changes no account's limits, shares or QoS (not even a
        # sub-account's); it may move an account from one it coordinates to another
        if set(rest) != {"parent"}:
            raise no_privilege("Error with request")
        auth.require_coord_of_parents(db, clusters, names)
        if not db.is_coordinator(auth.who.user, rest["parent"], ctx.cluster):
            raise no_privilege("Error with request")
    out.assoc_change_asked = True
    for cl in clusters:
        for n in names:
            x = db.account_assoc(cl, n)
            if x is None:
                continue
            if "parent" in rest:
                p = rest["parent"]
                if db.account_assoc(cl, p) is None:
                    raise SlurmError(" Error with request: Invalid parent account specified")
                if n == ROOT or db.would_cycle(cl, n, p):
                    raise SlurmError(f" Error with request: You can't make {n} a "
                                     f"child of {p}: {p} is below it")
                x.parent = p
            set_assoc(db, x, rest)
            out.assocs.append(AssocRef.of(x))
    return out


def delete_account(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    db, auth = ctx.db, ctx.auth
    names = split_list(where.get("names", ""))
    if not names:
        raise SlurmError(" No conditions given to remove, not executing.")
    auth.require_coord(names, "Error with request")
    if not auth.admin:
        auth.require_coord_of_parents(db, list(db.clusters), names)
    gone = [n for n in names if n in db.accounts]
    if not gone:
        return ChangeSet("delete", "account")
    if ROOT in gone:
        raise SlurmError(" You are not allowed to remove the root account.")
    # everything below goes too (Slurm removes the subtree's associations)
    below: set[str] = set()
    for cl in db.clusters:
        for n in gone:
            below |= db.subaccounts(cl, n)
    busy = sorted({f"  JobID = {(rest or ['?'])[0]:<10} C = {ctx.cluster:<9} "
                   f"A = {a:<10} U = {u:<9}"
                   for u, a, *rest in ctx.active_jobs() if a in below})
    if busy:
        raise SlurmError(" Error with request: Job(s) active, cancel job(s) before "
                         "remove\n" + "\n".join(busy))
    for u in db.users.values():
        if u.default_account in below:
            others = [a.account for a in db.assocs.values()
                      if a.user == u.name and a.account not in below]
            if not others:
                raise SlurmError(
                    " Error with request: You can not remove the default account of a "
                    f"user\n  User {u.name} has {u.default_account} as default account")
            u.default_account = sorted(others)[0]
    out = ChangeSet("delete", "account", True, names=sorted(below))
    for aid in sorted(db.assocs):
        if db.assocs[aid].account in below:
            out.assocs.append(AssocRef.of(db.assocs.pop(aid)))
    for n in below:
        db.accounts.pop(n, None)
    db.coords = {c for c in db.coords if c.account not in below}
    return out
