"""`sacctmgr dump` and `sacctmgr load`: a cluster's associations in Slurm's flat-file format
(`Cluster - 'name':Opt=…`, then `Parent - 'acct'` lines each followed by the `Account -` and
`User -` lines under it; QoS lines anywhere)."""

from __future__ import annotations

from corral.controller.assoc_authz import NOT_SUPER, Authority, denied, is_super
from corral.controller.assoc_changes import ChangeSet
from corral.controller.assoc_grammar import canonical_options, read_admin_level, split_list
from corral.controller.assoc_settings import set_assoc, set_qos
from corral.controller.errors import SlurmError
from corral.model.assoc import (
    ROOT,
    SHARES_PARENT,
    Account,
    AssocDB,
    Association,
    ClusterRecord,
    Coordinator,
    Qos,
    User,
)
from corral.model.tres import format_tres

_HEADER = [
    "# To edit this file start with a cluster line for the new cluster",
    "# Cluster - 'cluster_name':MaxNodesPerJob=50",
    "# Followed by Accounts you want in this fashion (root is created by default)...",
    "# Parent - 'root'",
    "# Account - 'cs':MaxNodesPerJob=5:MaxJobs=4:MaxTRESMins=cpu=20:FairShare=399:"
    "MaxWallDuration=40:Description='Computer Science':Organization='LC'",
    "# Any of the options after a ':' can be left out and they can be in any order.",
    "# If you want to add any sub accounts just list the Parent THAT HAS ALREADY "
    "BEEN CREATED before the account line in this fashion...",
    "# Parent - 'cs'",
    "# Account - 'test':MaxNodesPerJob=1:MaxJobs=1:MaxTRESMins=cpu=1:FairShare=1:"
    "MaxWallDuration=1:Description='Test Account':Organization='Test'",
    "# To add users to a account add a line like this after a Parent - 'line'",
    "# User - 'lipari':MaxNodesPerJob=2:MaxJobs=3:MaxTRESMins=cpu=4:FairShare=1:"
    "MaxWallDurationPerJob=1",
]


def dump_text(db: AssocDB, cluster: str) -> str:
    """The cluster's associations (and every QoS) as the flat file."""
    if cluster not in db.clusters:
        raise SlurmError(f" Cluster {cluster} doesn't exist.")
    lines = list(_HEADER)
    root = db.account_assoc(cluster, ROOT)
    lines.append(f"Cluster - '{cluster}'" + (_assoc_opts(root) if root else ""))
    for q in sorted(db.qos.values(), key=lambda q: q.id):
        lines.append(f"QOS - '{q.name}'" + _qos_opts(q))
    for parent in _parents(db, cluster):
        lines.append(f"Parent - '{parent}'")
        for k in db.children(cluster, parent):
            if k.user is not None:
                u = db.users.get(k.user)
                extra = ""
                if u is not None and u.default_account:
                    extra += f":DefaultAccount='{u.default_account}'"
                if u is not None and u.admin_level != "None":
                    extra += f":AdminLevel='{u.admin_level}'"
                coords = sorted(c.account for c in db.coords if c.user == k.user)
                if coords:
                    extra += f":Coordinator='{','.join(coords)}'"
                if k.partition:
                    extra += f":Partition='{k.partition}'"
                lines.append(f"User - '{k.user}'" + extra + _assoc_opts(k))
            else:
                a = db.accounts.get(k.account, Account(k.account))
                lines.append(f"Account - '{k.account}':Description='{a.description}'"
                             f":Organization='{a.organization}'" + _assoc_opts(k))
    return "\n".join(lines) + "\n"


def load_text(new: AssocDB, text: str, auth: Authority) -> ChangeSet:
    """Apply the flat file to `new` (a copy of the committed tree): the file's cluster's
    associations are replaced by the file's; QoS lines are added or updated.  Changing an
    admin level takes a super user (checked against `auth`'s committed tree)."""
    cluster: str | None = None
    parent = ROOT
    users: dict[str, dict[str, str]] = {}
    coords: list[tuple[str, str]] = []
    # QoS first: association lines name them wherever they stand in the file
    lines = sorted(enumerate(text.splitlines(), 1),
                   key=lambda x: not x[1].strip().lower().startswith("qos"))
    for no, raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        head, sep, rest = line.partition(" - ")
        if not sep:
            raise SlurmError(f" Bad line {no}: {raw}")
        name, opts = _parse_entry(rest, no)
        kind = head.strip().lower()
        if kind == "cluster":
            cluster = name
            if cluster not in new.clusters:
                new.clusters[cluster] = ClusterRecord(cluster)
            for aid in [a.id for a in new.assocs.values() if a.cluster == cluster]:
                del new.assocs[aid]
            rid = new.next_assoc_id()
            new.assocs[rid] = Association(rid, cluster, ROOT)
            new.accounts.setdefault(ROOT, Account(ROOT, "default root account", "root"))
            set_assoc(new, new.assocs[rid], canonical_options(opts))
        elif kind == "qos":
            q = new.qos.get(name) or Qos(name, new.next_qos_id(), name)
            new.qos[name] = set_qos(new, q, canonical_options(opts))
        elif cluster is None:
            raise SlurmError(f" No cluster specified before line {no}: {raw}")
        elif kind == "parent":
            if new.account_assoc(cluster, name) is None:
                raise SlurmError(f" Parent '{name}' on line {no} has not been added yet")
            parent = name
        elif kind == "account":
            descr = opts.pop("Description", opts.pop("description", name))
            org = opts.pop("Organization", opts.pop("organization", name))
            new.accounts[name] = Account(name, descr, org)
            aid = new.next_assoc_id()
            new.assocs[aid] = set_assoc(new, Association(aid, cluster, name, parent=parent),
                                        canonical_options(opts))
        elif kind == "user":
            info = {k.lower(): v for k, v in opts.items()}
            user_opts = {k: v for k, v in opts.items() if k.lower() not in
                         ("defaultaccount", "adminlevel", "coordinator", "partition")}
            users.setdefault(name, {}).update(info)
            if "coordinator" in info:
                coords.extend((a, name) for a in split_list(info["coordinator"]))
            aid = new.next_assoc_id()
            new.assocs[aid] = set_assoc(
                new, Association(aid, cluster, parent, name, info.get("partition") or None),
                canonical_options(user_opts))
        else:
            raise SlurmError(f" Unknown type '{head.strip()}' on line {no}")
    if cluster is None:
        raise SlurmError(" No cluster specified in the file.")
    if not is_super(auth.db, auth.who) and any(
            read_admin_level(info["adminlevel"]) != auth.db.admin_level(name)
            for name, info in users.items() if "adminlevel" in info):
        raise denied(NOT_SUPER)
    for name, info in users.items():
        u = new.users.get(name) or User(name)
        mine = sorted(a.account for a in new.assocs.values() if a.user == name)
        u.default_account = info.get("defaultaccount") or u.default_account or mine[0]
        if "adminlevel" in info:
            u.admin_level = read_admin_level(info["adminlevel"])
        new.users[name] = u
    for acct_name, user_name in coords:
        new.coords.add(Coordinator(acct_name, user_name))
    return ChangeSet("load", "cluster", True, names=[cluster], assoc_count=sum(
        1 for a in new.assocs.values() if a.cluster == cluster))


def _parse_entry(rest: str, no: int) -> tuple[str, dict[str, str]]:
    """`'name':Key=value:Key='quoted: value'` → (name, {Key: value})."""
    parts: list[str] = []
    cur = ""
    quote = False
    for ch in rest:
        if ch == "'":
            quote = not quote
            continue
        if ch == ":" and not quote:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    if quote:
        raise SlurmError(f" Unbalanced quotes on line {no}")
    parts.append(cur)
    name = parts[0].strip()
    if not name:
        raise SlurmError(f" No name on line {no}")
    opts: dict[str, str] = {}
    for p in parts[1:]:
        k, sep, v = p.partition("=")
        if not sep:
            raise SlurmError(f" Bad option '{p}' on line {no}")
        opts[k.strip()] = v.strip()
    return name, opts


def _parents(db: AssocDB, cluster: str) -> list[str]:
    """Accounts that have children, parents before children (the file adds in order)."""
    return [a.account for _, a in db.iter_tree(cluster)
            if a.user is None and db.children(cluster, a.account)]


def _assoc_opts(a: Association) -> str:
    parts = []
    lim = a.limits
    if a.shares != 1:
        parts.append(f"Fairshare={'parent' if a.shares == SHARES_PARENT else a.shares}")
    for label, tres in (("GrpTRES", lim.grp_tres), ("GrpTRESMins", lim.grp_tres_mins),
                        ("GrpTRESRunMins", lim.grp_tres_run_mins),
                        ("MaxTRES", lim.max_tres_per_job), ("MaxTRESPerNode", lim.max_tres_per_node),
                        ("MaxTRESMins", lim.max_tres_mins_per_job)):
        if tres:
            parts.append(f"{label}={format_tres(tres)}")
    for label, val in (("GrpJobs", lim.grp_jobs), ("GrpSubmitJobs", lim.grp_submit_jobs),
                       ("MaxJobs", lim.max_jobs), ("MaxSubmitJobs", lim.max_submit_jobs)):
        if val is not None:
            parts.append(f"{label}={val}")
    if lim.grp_wall is not None:
        parts.append(f"GrpWall={lim.grp_wall}")
    if lim.max_wall is not None:
        parts.append(f"MaxWallDurationPerJob={lim.max_wall}")
    if a.priority is not None:
        parts.append(f"Priority={a.priority}")
    if a.qos:
        parts.append(f"QOS='{','.join(a.qos)}'")
    if a.default_qos:
        parts.append(f"DefaultQOS='{a.default_qos}'")
    return "".join(":" + p for p in parts)


def _qos_opts(q: Qos) -> str:
    parts = [f"Description='{q.description}'"]
    if q.priority:
        parts.append(f"Priority={q.priority}")
    if q.usage_factor != 1.0:
        parts.append(f"UsageFactor={q.usage_factor:g}")
    if q.flags:
        parts.append(f"Flags={','.join(q.flags)}")
    # preemption, so that a dump loaded elsewhere (another cluster, `corral sim --accounts`)
    # preempts as this one does
    if q.preempt:
        parts.append(f"Preempt='{','.join(q.preempt)}'")
    if q.preempt_mode != "cluster":
        parts.append(f"PreemptMode={q.preempt_mode}")
    if q.grace_time:
        parts.append(f"GraceTime={q.grace_time}")
    if q.preempt_exempt_time is not None:
        parts.append(f"PreemptExemptTime={q.preempt_exempt_time // 60}")
    lim = q.limits
    for label, tres in (("GrpTRES", lim.grp_tres), ("MaxTRESPerJob", lim.max_tres_per_job),
                        ("MaxTRESPerNode", lim.max_tres_per_node),
                        ("MaxTRESPerUser", lim.max_tres_per_user),
                        ("MinTRESPerJob", lim.min_tres_per_job),
                        ("GrpTRESMins", lim.grp_tres_mins),
                        ("GrpTRESRunMins", lim.grp_tres_run_mins),
                        ("MaxTRESMins", lim.max_tres_mins_per_job)):
        if tres:
            parts.append(f"{label}={format_tres(tres)}")
    for label, val in (("GrpJobs", lim.grp_jobs), ("GrpSubmitJobs", lim.grp_submit_jobs),
                       ("MaxJobsPerUser", lim.max_jobs_per_user),
                       ("MaxSubmitJobsPerUser", lim.max_submit_jobs_per_user),
                       ("GrpWall", lim.grp_wall), ("MaxWall", lim.max_wall)):
        if val is not None:
            parts.append(f"{label}={val}")
    return "".join(":" + p for p in parts)
