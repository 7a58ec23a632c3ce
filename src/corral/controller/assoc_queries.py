"""sacctmgr's `show`: the rows of clusters, accounts, users, QoS, coordinators and
associations, keyed by Slurm's column headers with values as sacctmgr prints them (the
command picks the columns and lays them out), and what PrivateData hides of them."""

from __future__ import annotations

from typing import Any

from corral.model.assoc import ROOT, SHARES_PARENT, AssocDB, Association, Qos
from corral.model.tres import format_tres

Row = dict[str, str]


def mins2time(mins: int | None) -> str:
    """Slurm's mins2time_str: 1-00:00:00, 01:00:00."""
    if mins is None:
        return ""
    if mins < 0:
        return "UNLIMITED"
    secs = mins * 60
    d, s = divmod(secs, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def _split(v: str) -> list[str]:
    return [x for x in (p.strip() for p in v.split(",")) if x]


def show_rows(db: AssocDB, entity: str, where: dict[str, str],
              options: dict[str, Any]) -> list[Row]:
    """The rows `sacctmgr show ENTITY` lists, in Slurm's order; `where` is canonical
    (assoc_grammar.py), `options` the show words (withassoc, tree)."""
    rows: list[Row] = []
    names = set(_split(where.get("names", "")))
    if entity == "cluster":
        for c in sorted(db.clusters.values(), key=lambda c: c.name):
            if names and c.name not in names:
                continue
            root = db.account_assoc(c.name, ROOT)
            row = {"Cluster": c.name, "ControlHost": c.control_host,
                   "ControlPort": str(c.control_port), "RPC": str(c.rpc)}
            if root is not None:
                row.update(assoc_row(db, root))
                row["Cluster"] = c.name
            rows.append(row)
    elif entity == "account":
        for a in sorted(db.accounts.values(), key=lambda a: a.name):
            if names and a.name not in names:
                continue
            base = {"Account": a.name, "Descr": a.description, "Org": a.organization,
                    "Coord Accounts": ",".join(db.coordinators_of(a.name))}
            if options.get("withassoc"):
                for x in sorted(db.assocs.values(), key=_assoc_order):
                    if x.account == a.name and matches(x, where):
                        rows.append({**assoc_row(db, x), **base})
            else:
                rows.append(base)
    elif entity == "user":
        for u in sorted(db.users.values(), key=lambda u: u.name):
            if names and u.name not in names:
                continue
            coord = ",".join(sorted(c.account for c in db.coords if c.user == u.name))
            base = {"User": u.name, "Def Acct": u.default_account, "Admin": u.admin_level,
                    "Coord Accounts": coord}
            if options.get("withassoc"):
                for x in sorted(db.assocs.values(), key=_assoc_order):
                    if x.user == u.name and matches(x, where):
                        rows.append({**assoc_row(db, x), **base})
            else:
                rows.append(base)
    elif entity == "qos":
        for q in sorted(db.qos.values(), key=lambda q: q.id):
            if names and q.name not in names:
                continue
            rows.append(qos_row(q))
    elif entity == "coordinator":
        for co in sorted(db.coords, key=lambda c: (c.account, c.user)):
            rows.append({"Account": co.account, "User": co.user})
    else:  # association
        order: list[tuple[int, Association]] = []
        for cname in _split(where.get("cluster", "")) or sorted(db.clusters):
            order.extend(db.iter_tree(cname))
        for depth, x in order:
            if not matches(x, where):
                continue
            row = assoc_row(db, x)
            if options.get("tree"):
                row["Account"] = " " * depth + x.account
            rows.append(row)
    return rows


def visible_rows(db: AssocDB, cluster: str, entity: str, rows: list[Row], user: str,
                 hide: frozenset[str]) -> list[Row]:
    """The rows `user` (no administrator) may see under PrivateData: `accounts` shows
    account definitions only to their coordinators, `users` other users' records only to
    their accounts' coordinators."""
    def coordinates(account: str) -> bool:
        return bool(account) and db.is_coordinator(user, account.strip(), cluster)

    def visible(row: Row) -> bool:
        who = row.get("User", "")
        account = row.get("Account", "").strip()
        if entity == "account" and "accounts" in hide and not coordinates(account):
            return False
        if entity == "user" and "users" in hide and who != user:
            return account != "" and coordinates(account)
        if entity == "association":
            if who and "users" in hide and who != user:
                return coordinates(account)
            if not who and "accounts" in hide:
                return coordinates(account)
        return True

    return [r for r in rows if visible(r)]


def matches(a: Association, where: dict[str, str]) -> bool:
    """Whether an association meets `where`'s cluster, account, user, partition and names."""
    for key, attr in (("cluster", a.cluster), ("account", a.account), ("user", a.user or ""),
                      ("partition", a.partition or "")):
        if key in where and attr not in _split(where[key]):
            return False
    if "names" in where and (a.user or a.account) not in _split(where["names"]):
        return False
    return True


def _assoc_order(a: Association) -> tuple[str, str, str, str]:
    return (a.cluster, a.account, a.user or "", a.partition or "")


def assoc_row(db: AssocDB, a: Association) -> Row:
    """One association as sacctmgr's columns print it (Slurm's column names)."""
    lim = a.limits
    qos = a.qos or db.effective_qos(a)
    parent = db.parent_of(a)

    def n(v: int | None) -> str:
        return "" if v is None else str(v)
    return {
        "Cluster": a.cluster, "Account": a.account, "User": a.user or "",
        "Partition": a.partition or "",
        "Share": "parent" if a.shares == SHARES_PARENT else str(a.shares),
        "Priority": n(a.priority), "GrpJobs": n(lim.grp_jobs),
        "GrpTRES": format_tres(lim.grp_tres), "GrpSubmit": n(lim.grp_submit_jobs),
        "GrpWall": mins2time(lim.grp_wall), "GrpTRESMins": format_tres(lim.grp_tres_mins),
        "MaxJobs": n(lim.max_jobs), "MaxTRES": format_tres(lim.max_tres_per_job),
        "MaxTRESPerNode": format_tres(lim.max_tres_per_node),
        "MaxSubmit": n(lim.max_submit_jobs), "MaxWall": mins2time(lim.max_wall),
        "MaxTRESMins": format_tres(lim.max_tres_mins_per_job),
        "QOS": ",".join(sorted(qos)), "Def QOS": a.default_qos or "",
        "GrpTRESRunMins": format_tres(lim.grp_tres_run_mins),
        "ParentName": (a.parent or "") if a.user is None else "",
        "ParentID": str(parent.id) if parent is not None else "", "ID": str(a.id),
    }


def qos_row(q: Qos) -> Row:
    """One QoS as sacctmgr's columns print it."""
    lim = q.limits

    def n(v: int | None) -> str:
        return "" if v is None else str(v)

    def hms(secs: int | None) -> str:
        if secs is None:
            return ""
        return mins2time(secs // 60)
    return {
        "Name": q.name, "ID": str(q.id), "Descr": q.description, "Priority": str(q.priority),
        "GraceTime": hms(q.grace_time), "Preempt": ",".join(q.preempt),
        "PreemptExemptTime": hms(q.preempt_exempt_time),
        "PreemptMode": q.preempt_mode, "Flags": ",".join(q.flags),
        "UsageThres": "" if q.usage_threshold is None else f"{q.usage_threshold:f}",
        "UsageFactor": f"{q.usage_factor:f}",
        "GrpTRES": format_tres(lim.grp_tres), "GrpTRESMins": format_tres(lim.grp_tres_mins),
        "GrpTRESRunMins": format_tres(lim.grp_tres_run_mins), "GrpJobs": n(lim.grp_jobs),
        "GrpSubmit": n(lim.grp_submit_jobs), "GrpWall": mins2time(lim.grp_wall),
        "MaxTRES": format_tres(lim.max_tres_per_job),
        "MaxTRESPerNode": format_tres(lim.max_tres_per_node),
        "MaxTRESMins": format_tres(lim.max_tres_mins_per_job),
        "MaxWall": mins2time(lim.max_wall), "MaxTRESPU": format_tres(lim.max_tres_per_user),
        "MaxJobsPU": n(lim.max_jobs_per_user), "MaxSubmitPU": n(lim.max_submit_jobs_per_user),
        "MaxTRESPA": "", "MaxJobsPA": "", "MaxSubmitPA": "",
        "MinTRES": format_tres(lim.min_tres_per_job),
    }
