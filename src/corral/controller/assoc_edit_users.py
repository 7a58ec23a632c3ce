"""sacctmgr's add, modify and delete of users (and their associations) and coordinators.

As in assoc_edit_tree.py: each use case works on `ctx.db`, checks who may, and returns the
change set; a refusal raises `SlurmError` before anything is committed.
"""

from __future__ import annotations

from corral.controller.assoc_changes import AssocRef, ChangeSet, EditContext
from corral.controller.assoc_grammar import ASSOC_SETTINGS, only, read_admin_level, split_list
from corral.controller.assoc_settings import assoc_settings, set_assoc
from corral.controller.errors import SlurmError
from corral.model.assoc import AssocDB, Association, Coordinator, User

Options = dict[str, str]


def add_user(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    db, auth = ctx.db, ctx.auth
    names = split_list(where.pop("names", ""))
    if not names:
        raise SlurmError(" Need name of user to add.")
    accounts = split_list(where.pop("account", ""))
    default = where.pop("defaultaccount", None)
    admin = where.pop("adminlevel", None)
    clusters = split_list(where.pop("cluster", "")) or [ctx.cluster]
    partitions: list[str | None] = [*split_list(where.pop("partition", ""))] or [None]
    only(where, ASSOC_SETTINGS)
    if admin is not None:
        auth.require_super_for_admin_level()
        admin = read_admin_level(admin)
    if not accounts and default:
        accounts = [default]
    if not accounts and not all(n in db.users for n in names):
        raise SlurmError(" Need a default account for these users to add.")
    auth.require_coord(accounts, "Problem adding users")
    for cl in clusters:
        for a in accounts:
            auth.check_coord_qos(db, cl, a, where, "Problem adding users")
    for a in accounts:
        if a not in db.accounts:
            raise SlurmError(f" This account '{a}' doesn't exist.\n"
                             "        Contact your admin to add this account.")
    if default and default not in accounts and not any(
            db.find(cl, default, n) for n in names for cl in clusters):
        raise SlurmError(f" Default account '{default}' must be one of the accounts "
                         "the user is added to")
    out = ChangeSet("add", "user", default_account=default or (accounts[0] if accounts else None),
                    admin_level=admin)
    for n in names:
        if n not in db.users:
            db.users[n] = User(n, default or accounts[0], admin or "None")
            out.names.append(n)
        elif admin is not None:
            db.users[n].admin_level = admin
        for cl in clusters:
            if cl not in db.clusters:
                raise SlurmError(f" The cluster {cl} doesn't exist.  Please add first.")
            for acct in accounts:
                if db.account_assoc(cl, acct) is None:
                    raise SlurmError(f" Account '{acct}' doesn't exist on cluster {cl}")
                for part in partitions:
                    if db.find(cl, acct, n, part) is not None:
                        continue
                    aid = db.next_assoc_id()
                    db.assocs[aid] = set_assoc(db, Association(aid, cl, acct, n, part), where)
                    out.assocs.append(AssocRef.of(db.assocs[aid]))
    if not out.names and not out.assocs:
        return out
    out.settings = assoc_settings(where)
    out.changed = True
    return out


def user_assocs(db: AssocDB, where: Options) -> list[Association]:
    """The user associations `where` names (users, accounts, clusters, partitions)."""
    names = set(split_list(where.get("names", "") or where.get("user", "")))
    accts = set(split_list(where.get("account", "")))
    clusters = set(split_list(where.get("cluster", "")))
    parts = set(split_list(where.get("partition", "")))
    return [a for a in db.assocs.values() if a.user is not None
            and (not names or a.user in names) and (not accts or a.account in accts)
            and (not clusters or a.cluster in clusters)
            and (not parts or (a.partition or "") in parts)]


def modify_user(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    db, auth = ctx.db, ctx.auth
    if not sets:
        raise SlurmError(" You didn't give me anything to set")
    names = split_list(where.get("names", "") or where.get("user", ""))
    if not names:
        # `where account=students` alone names every user with an association there
        if not any(where.get(k) for k in ("account", "cluster", "partition")):
            raise SlurmError(" No conditions given")
        names = sorted({a.user for a in user_assocs(db, where) if a.user})
    for n in names:
        if n not in db.users:
            raise SlurmError(f" Error with request: User {n} does not exist")
    out = ChangeSet("modify", "user")
    user_sets = {k: sets[k] for k in ("defaultaccount", "adminlevel") if k in sets}
    if user_sets:
        if "adminlevel" in user_sets:
            auth.require_super_for_admin_level()
        else:
            auth.require_coord({a.account for a in user_assocs(db, where)}, "Error with request")
        for n in names:
            u = db.users[n]
            if "defaultaccount" in user_sets:
                d = user_sets["defaultaccount"]
                if not any(a.user == n and a.account == d for a in db.assocs.values()):
                    raise SlurmError(
                        f" Error with request: User {n} does not have an association with "
                        f"account {d}; it can not be the default account")
                u.default_account = d
            if "adminlevel" in user_sets:
                u.admin_level = read_admin_level(user_sets["adminlevel"])
        out.names = list(names)
        out.record_change_asked = True
    rest = {k: v for k, v in sets.items() if k not in user_sets}
    if rest:
        only(rest, ASSOC_SETTINGS)
        assocs = user_assocs(db, where)
        auth.require_coord({a.account for a in assocs}, "Error with request")
        for a in assocs:
            auth.check_coord_qos(db, a.cluster, a.account, rest, "Error with request")
        out.assoc_change_asked = True
        for a in sorted(assocs, key=lambda x: (x.cluster, x.account, x.user or "")):
            set_assoc(db, a, rest)
            out.assocs.append(AssocRef.of(a))
    out.changed = out.record_change_asked or bool(out.assocs)
    return out


def delete_user(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    db, auth = ctx.db, ctx.auth
    names = split_list(where.get("names", "") or where.get("user", ""))
    if not names:
        raise SlurmError(" No conditions given to remove, not executing.")
    assocs = user_assocs(db, where)
    auth.require_coord({a.account for a in assocs}, "Error with request")
    if not assocs and not any(n in db.users for n in names):
        return ChangeSet("delete", "user")
    gone = {a.id for a in assocs}
    busy = sorted({f"  C = {ctx.cluster:<9} A = {a:<10} U = {u:<9}"
                   for u, a, *_ in ctx.active_jobs()
                   if any(x.user == u and x.account == a for x in assocs)})
    if busy:
        raise SlurmError(" Error with request: Job(s) active, cancel job(s) before "
                         "remove\n" + "\n".join(busy))
    out = ChangeSet("delete", "user", True, assocs=[AssocRef.of(a) for a in assocs])
    for a in assocs:
        del db.assocs[a.id]
    if "account" not in where and "partition" not in where:  # the users themselves
        for n in names:
            db.users.pop(n, None)
        db.coords = {c for c in db.coords if c.user not in names}
        out.names = list(names)
        return out
    for n in names:
        u = db.users.get(n)
        left = [a for a in db.assocs.values() if a.user == n and a.id not in gone]
        if u is not None and u.default_account not in {a.account for a in left} and left:
            raise SlurmError(" Error with request: You can not remove the default "
                             f"account of a user\n  U = {n} A = {u.default_account}")
    return out


# ---- coordinators -------------------------------------------------------------------------

def add_coordinator(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    db = ctx.db
    ctx.auth.require_admin("Error with request")
    users = split_list(where.get("names", "") or where.get("user", ""))
    accts = split_list(where.get("account", ""))
    if not users or not accts:
        raise SlurmError(" You need to specify a user list and account list here.")
    for u in users:
        if u not in db.users:
            raise SlurmError(f" User {u} doesn't exist.")
    for a in accts:
        if a not in db.accounts:
            raise SlurmError(f" Account {a} doesn't exist.")
    out = ChangeSet("add", "coordinator", True, names=users)
    for u in users:
        for a in accts:
            db.coords.add(Coordinator(a, u))
            out.coordinators.append((u, a))
    return out


def delete_coordinator(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    db = ctx.db
    ctx.auth.require_admin("Error with request")
    users = set(split_list(where.get("names", "") or where.get("user", "")))
    accts = set(split_list(where.get("account", "")))
    if not users and not accts:
        raise SlurmError(" You need to specify a user list or account list here.")
    gone = {c for c in db.coords if (not users or c.user in users)
            and (not accts or c.account in accts)}
    db.coords -= gone
    return ChangeSet("delete", "coordinator", bool(gone), coordinators=[
        (c.user, c.account) for c in sorted(gone, key=lambda c: (c.user, c.account))])
