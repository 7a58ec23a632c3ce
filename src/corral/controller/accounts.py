"""sacctmgr's use cases on the accounting store: add, modify, delete and show clusters,
accounts, users, QoS, associations and coordinators, with authorization.

Who may do what (Slurm's rules): operators (root, SlurmUser, AdminUsers) and users whose
AdminLevel is Operator or Administrator may change anything; an account's coordinators may
add users to that account and its sub-accounts, change and remove those users'
associations, and add sub-accounts under it; everyone may show.  A change is computed on
a copy of the `AssocDB`, validated as a whole (unknown names, limit specs that do not
parse, cycles in the account tree, removing an account with active jobs), then written
in one store transaction: durable when acknowledged, and nothing changed when refused.

Requests come from `cli/sacctmgr.py` (through `api_accounts.py`) already split into
names, `where` conditions and `set` values (lowercased keys as typed); the answers carry
the text sacctmgr prints (Slurm 22.05's wording), so the command only prints it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from corral.model.assoc import (
    ADMIN_LEVELS,
    PREEMPT_MODES,
    QOS_FLAGS,
    ROOT,
    SHARES_PARENT,
    Account,
    AssocDB,
    Association,
    Cluster,
    Coordinator,
    Limits,
    Qos,
    User,
)
from corral.model.timefmt import TimeFormatError, parse_time_limit
from corral.model.tres import TresError, format_tres, merge, parse_tres

log = logging.getLogger("corral.controller")

ENTITIES = ("cluster", "account", "user", "qos", "association", "coordinator")
ACCESS_DENIED = "Access/permission denied"
# slurmdbd's comment on a change the caller may not make, printed before sacctmgr's line
NO_PRIVILEGE = "sacctmgr: error: Your user doesn't have privilege to perform this action"
NOT_SUPER = "sacctmgr: error: You must be a super user to modify a users admin level"
NO_DUMP = " Your user does not have sufficient privileges to dump clusters."
# account names, descriptions and organizations are stored lower-cased (Slurm)
_LOWERED = ("account", "parent", "defaultaccount", "description", "organization")


class AccountsError(Exception):
    """A refused request: `text` is what sacctmgr prints on stderr (lines with Slurm's
    leading space); nothing was changed."""

    def __init__(self, text: str, status: int = 400) -> None:
        super().__init__(text)
        self.text = text
        self.status = status


@dataclass(slots=True)
class Caller:
    user: str
    operator: bool = False
    # signed by a joined machine: its AdminLevel gives no rights (docs/SECURITY.md)
    remote: bool = False


@dataclass(slots=True)
class Outcome:
    out: str = ""  # stdout text
    changed: bool = False
    rows: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"out": self.out, "changed": self.changed, "rows": self.rows}


# ---- option names (sacctmgr(1)); keys are matched case-insensitively -------------
_ALIASES: dict[str, str] = {}
for canon, names in {
    "names": ("name", "names"),
    "cluster": ("cluster", "clusters"),
    "account": ("account", "accounts", "acct", "accts"),
    "user": ("user", "users"),
    "partition": ("partition", "partitions", "part"),
    "parent": ("parent", "parentname"),
    "description": ("description", "descr", "desc"),
    "organization": ("organization", "org", "organizations"),
    "defaultaccount": ("defaultaccount", "defaultacct", "defacct", "defaultaccounts"),
    "adminlevel": ("adminlevel", "admin"),
    "fairshare": ("fairshare", "shares", "share"),
    "priority": ("priority", "prio"),
    "qos": ("qos", "qoslevel", "qosl"),
    "defaultqos": ("defaultqos", "defqos"),
    "grptres": ("grptres",),
    "grptresmins": ("grptresmins",),
    "grptresrunmins": ("grptresrunmins",),
    "grpjobs": ("grpjobs",),
    "grpsubmitjobs": ("grpsubmitjobs", "grpsubmit"),
    "grpwall": ("grpwall",),
    "maxtres": ("maxtres", "maxtresperjob", "maxtrespj"),
    "maxtrespernode": ("maxtrespernode", "maxtrespn"),
    "maxtresmins": ("maxtresmins", "maxtresminsperjob", "maxtresminspj"),
    "maxjobs": ("maxjobs",),
    "maxsubmitjobs": ("maxsubmitjobs", "maxsubmit"),
    "maxwall": ("maxwall", "maxwalldurationperjob"),
    "maxtresperuser": ("maxtresperuser", "maxtrespu"),
    "maxjobsperuser": ("maxjobsperuser", "maxjobspu"),
    "maxsubmitjobsperuser": ("maxsubmitjobsperuser", "maxsubmitjobspu", "maxsubmitpu"),
    "mintresperjob": ("mintresperjob", "mintres"),
    "usagefactor": ("usagefactor",),
    "usagethreshold": ("usagethreshold",),
    "gracetime": ("gracetime",),
    "preempt": ("preempt",),
    "preemptmode": ("preemptmode",),
    "preemptexempttime": ("preemptexempttime",),
    "flags": ("flags",),
}.items():
    for n in names:
        _ALIASES[n] = canon

_TRES_FIELDS = {"grptres": "grp_tres", "grptresmins": "grp_tres_mins",
                "grptresrunmins": "grp_tres_run_mins", "maxtres": "max_tres_per_job",
                "maxtrespernode": "max_tres_per_node", "maxtresmins": "max_tres_mins_per_job",
                "maxtresperuser": "max_tres_per_user", "mintresperjob": "min_tres_per_job"}
_COUNT_FIELDS = {"grpjobs": "grp_jobs", "grpsubmitjobs": "grp_submit_jobs",
                 "maxjobs": "max_jobs", "maxsubmitjobs": "max_submit_jobs",
                 "maxjobsperuser": "max_jobs_per_user",
                 "maxsubmitjobsperuser": "max_submit_jobs_per_user"}
_WALL_FIELDS = {"grpwall": "grp_wall", "maxwall": "max_wall"}
_ASSOC_LIMITS = {"grptres", "grptresmins", "grptresrunmins", "grpjobs", "grpsubmitjobs",
                 "grpwall", "maxtres", "maxtrespernode", "maxtresmins", "maxjobs",
                 "maxsubmitjobs", "maxwall"}
_QOS_LIMITS = (_ASSOC_LIMITS - {"maxjobs", "maxsubmitjobs"}) | {
    "maxtresperuser", "maxjobsperuser", "maxsubmitjobsperuser", "mintresperjob"}
_ASSOC_SETTINGS = _ASSOC_LIMITS | {"fairshare", "priority", "qos", "defaultqos"}


def canonical(key: str) -> str | None:
    return _ALIASES.get(key.lower().replace("_", ""))


def _unknown(key: str, value: str | None = None) -> AccountsError:
    shown = f"{key}={value}" if value is not None else key
    return AccountsError(f" Unknown option: {shown}\n Use keyword 'where' to modify condition")


def _split_list(v: str) -> list[str]:
    return [x for x in (p.strip() for p in v.split(",")) if x]


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


def _count(key: str, v: str) -> int | None:
    t = v.strip()
    if t == "-1" or t.upper() in ("NONE", "UNLIMITED", "INFINITE"):
        return None
    if not t.isdigit():
        raise AccountsError(f" Bad {key} value: {v}")
    return int(t)


def _wall(key: str, v: str) -> int | None:
    t = v.strip()
    if t == "-1":
        return None
    try:
        secs = parse_time_limit(t)
    except TimeFormatError:
        raise AccountsError(f" Bad {key} time format: {v}") from None
    return None if secs < 0 else secs // 60


def _tres(key: str, v: str) -> dict[str, int]:
    try:
        return parse_tres(v)
    except TresError as e:
        raise AccountsError(f" {e}\n Invalid value for {key}: {v}") from None


def apply_limits(lim: Limits, settings: dict[str, str], allowed: set[str]) -> Limits:
    """A copy of `lim` with sacctmgr's limit settings applied (-1 clears)."""
    out = replace(lim)
    for key, v in settings.items():
        if key not in allowed:
            continue
        if key in _TRES_FIELDS:
            attr = _TRES_FIELDS[key]
            setattr(out, attr, merge(getattr(lim, attr), _tres(key, v)))
        elif key in _COUNT_FIELDS:
            setattr(out, _COUNT_FIELDS[key], _count(key, v))
        elif key in _WALL_FIELDS:
            setattr(out, _WALL_FIELDS[key], _wall(key, v))
    return out


def _shares(v: str) -> int:
    if v.strip().lower() == "parent":
        return SHARES_PARENT
    t = v.strip()
    if t == "-1":
        return 1
    if not t.isdigit():
        raise AccountsError(f" Bad Fairshare value: {v}")
    return int(t)


def _qos_list(db: AssocDB, current: tuple[str, ...], v: str) -> tuple[str, ...]:
    """`QOS=a,b`, `QOS+=c`, `QOS-=a` (the operator arrives in the key: see parse)."""
    op = ""
    if v[:1] in ("+", "-") and v[1:2] != "1":
        op, v = v[0], v[1:]
    names = _split_list(v)
    for n in names:
        if n not in db.qos:
            raise AccountsError(f" Unknown QOS name: {n}\n Problem with qos list")
    if op == "+":
        return tuple(dict.fromkeys((*current, *names)))
    if op == "-":
        return tuple(q for q in current if q not in names)
    return tuple(names)


def _limit_lines(lim: Limits, shares: int | None = None, qos: tuple[str, ...] = (),
                 default_qos: str | None = None) -> str:
    """sacctmgr_print_assoc_limits: the settings a change sets, one per line."""
    out = []
    if shares is not None:
        out.append(f"  Fairshare     = {'parent' if shares == SHARES_PARENT else shares}")
    pairs = [("GrpJobs       ", lim.grp_jobs), ("GrpSubmitJobs ", lim.grp_submit_jobs)]
    for label, val in pairs:
        if val is not None:
            out.append(f"  {label}= {val}")
    for label, tres in (("GrpTRES       ", lim.grp_tres), ("GrpTRESMins   ", lim.grp_tres_mins),
                        ("GrpTRESRunMins", lim.grp_tres_run_mins)):
        if tres:
            out.append(f"  {label}= {format_tres(tres)}")
    if lim.grp_wall is not None:
        out.append(f"  GrpWall       = {mins2time(lim.grp_wall)}")
    if lim.max_jobs is not None:
        out.append(f"  MaxJobs       = {lim.max_jobs}")
    if lim.max_submit_jobs is not None:
        out.append(f"  MaxSubmitJobs = {lim.max_submit_jobs}")
    for label, tres in (("MaxTRES       ", lim.max_tres_per_job),
                        ("MaxTRESPerNode", lim.max_tres_per_node),
                        ("MaxTRESMins   ", lim.max_tres_mins_per_job)):
        if tres:
            out.append(f"  {label}= {format_tres(tres)}")
    if lim.max_wall is not None:
        out.append(f"  MaxWall       = {mins2time(lim.max_wall)}")
    if qos:
        out.append(f"  QOS           = {','.join(qos)}")
    if default_qos:
        out.append(f"  DefQOS        = {default_qos}")
    return "".join(line + "\n" for line in out)


# ---- the use cases ----------------------------------------------------------------
# (user, account[, job id]) of active jobs
ActiveJobs = Callable[[], Iterable[tuple[Any, ...]]]


class Accounts:
    """The accounting entities in memory over a store; `db` is what the scheduler reads
    (replaced, never mutated in place, on each committed change: a pass holding the old
    one sees a consistent tree)."""

    def __init__(self, store: Any, cluster_name: str, *, active_jobs: ActiveJobs | None = None,
                 on_change: Callable[[AssocDB], None] | None = None) -> None:
        self.store = store
        self.cluster = cluster_name
        self.active_jobs = active_jobs or (lambda: ())
        self.on_change = on_change
        self.db = AssocDB.from_records(store.load_accounting())
        bootstrap(self.db, cluster_name)
        # slurm.conf's PrivateData kinds (controller/privacy.py), set by the routes
        self.private_data: frozenset[str] = frozenset()

    # -- authorization
    def is_admin(self, who: Caller) -> bool:
        # `who` may be the controller's Identity too (reservations ask): both say `remote`
        return who.operator or (not getattr(who, "remote", False) and self.db.admin_level(
            who.user) in ("Operator", "Administrator"))

    def is_super(self, who: Caller) -> bool:
        """Slurm's super user: root, SlurmUser, AdminUsers or AdminLevel=Administrator;
        only one changes admin levels or dumps the accounting tree."""
        return who.operator or (not getattr(who, "remote", False)
                                and self.db.admin_level(who.user) == "Administrator")

    def _require_admin(self, who: Caller, what: str) -> None:
        if not self.is_admin(who):
            raise AccountsError(f" {what}: {ACCESS_DENIED}", 403)

    def _require_super_for_admin_level(self, who: Caller) -> None:
        if not self.is_super(who):
            raise AccountsError(NOT_SUPER, 403)

    @staticmethod
    def _no_privilege(what: str) -> AccountsError:
        return AccountsError(f"{NO_PRIVILEGE}\n {what}: {ACCESS_DENIED}", 403)

    def _check_coord_qos(self, who: Caller, db: AssocDB, cluster: str, account: str,
                         sets: dict[str, str], what: str) -> None:
        """A coordinator gives out only the QoS the account may already use (slurmdbd's
        get_coord_qos): a QoS list or default QoS naming any other is refused."""
        if self.is_admin(who) or not ("qos" in sets or "defaultqos" in sets):
            return
        acct = db.account_assoc(cluster, account)
        allowed = set(db.effective_qos(acct)) if acct is not None else set()
        wanted = [q.lstrip("+-") for q in _split_list(sets.get("qos", ""))
                  if not q.startswith("-")]
        if sets.get("defaultqos") not in (None, "", "-1"):
            wanted.append(sets["defaultqos"])
        if any(q and q not in allowed for q in wanted):
            raise self._no_privilege(what)

    def _require_coord(self, who: Caller, accounts: Iterable[str], what: str) -> None:
        if self.is_admin(who):
            return
        for a in accounts:
            if not self.db.is_coordinator(who.user, a, self.cluster):
                raise AccountsError(f" {what}: {ACCESS_DENIED}", 403)

    # -- entry point
    def execute(self, who: Caller, req: dict[str, Any]) -> Outcome:
        op = str(req.get("op", ""))
        entity = str(req.get("entity", ""))
        if entity not in ENTITIES:
            raise AccountsError(f" Unknown entity: {entity}")
        names = [str(n) for n in req.get("names", []) if str(n)]
        where = {str(k): str(v) for k, v in dict(req.get("where") or {}).items()}
        sets = {str(k): str(v) for k, v in dict(req.get("set") or {}).items()}
        commit = bool(req.get("commit", True))
        options = dict(req.get("options") or {})
        where = self._canon(where, names)
        sets = self._canon(sets, None)
        for d in (where, sets):
            for k in _LOWERED:
                if k in d:
                    d[k] = d[k].lower()
        if entity == "account" and "names" in where:
            where["names"] = where["names"].lower()
        if op == "show":
            return self.show(entity, where, options, who)
        fn = getattr(self, f"{op}_{entity}", None)
        if op not in ("add", "modify", "delete") or fn is None:
            raise AccountsError(f" Unknown command: {op} {entity}")
        new = self.db.copy()
        outcome: Outcome = fn(who, new, where, sets)
        if outcome.changed and commit:
            self.store.replace_accounting(new.to_records())
            self.db = new
            if self.on_change is not None:
                self.on_change(new)
            log.info("sacctmgr %s %s by %s", op, entity, who.user)
        return outcome

    @staticmethod
    def _canon(d: dict[str, str], names: list[str] | None) -> dict[str, str]:
        out: dict[str, str] = {}
        for k, v in d.items():
            plus = k.endswith("+") or k.endswith("-")
            key = k[:-1] if plus else k
            c = canonical(key)
            if c is None:
                raise _unknown(k, v)
            out[c] = (k[-1] + v) if plus else v
        if names:
            prev = out.get("names")
            out["names"] = ",".join([*([prev] if prev else []), *names])
        return out

    # -- clusters
    def add_cluster(self, who: Caller, db: AssocDB, where: dict[str, str],
                    sets: dict[str, str]) -> Outcome:
        self._require_admin(who, "Problem adding clusters")
        names = _split_list(where.pop("names", ""))
        if not names:
            raise AccountsError(" Need name of cluster to add.")
        self._no_extra(where, _ASSOC_SETTINGS)
        exists = ""
        text = " Adding Cluster(s)\n"
        added = False
        for n in names:
            if n in db.clusters:
                exists += f" This cluster {n} already exists.  Not adding.\n"
                continue
            add_cluster_records(db, n)
            root = db.account_assoc(n, ROOT)
            assert root is not None
            root.limits = apply_limits(Limits(), where, _ASSOC_LIMITS)
            if "qos" in where:
                root.qos = _qos_list(db, (), where["qos"])
            text += f"  Name           = {n}\n"
            added = True
        if not added:
            return Outcome(exists + " Nothing new added.\n")
        return Outcome(exists + text, True)

    def delete_cluster(self, who: Caller, db: AssocDB, where: dict[str, str],
                       sets: dict[str, str]) -> Outcome:
        self._require_admin(who, "Error with request")
        names = _split_list(where.get("names", ""))
        gone = [n for n in names if n in db.clusters]
        if not gone:
            return Outcome(" Nothing deleted\n")
        if self.cluster in gone and any(True for _ in self.active_jobs()):
            raise AccountsError(" Error with request: Job(s) active, cancel job(s) before remove")
        for n in gone:
            del db.clusters[n]
            for aid in [a.id for a in db.assocs.values() if a.cluster == n]:
                del db.assocs[aid]
        return Outcome(" Deleting clusters...\n" + "".join(f"  {n}\n" for n in gone), True)

    def modify_cluster(self, who: Caller, db: AssocDB, where: dict[str, str],
                       sets: dict[str, str]) -> Outcome:
        self._require_admin(who, "Error with request")
        names = _split_list(where.get("names", "")) or list(db.clusters)
        changed = []
        for n in names:
            root = db.account_assoc(n, ROOT)
            if root is None:
                continue
            self._set_assoc(db, root, sets)
            changed.append(n)
        if not changed:
            return Outcome(" Nothing modified\n")
        return Outcome(" Modified cluster...\n" + "".join(f"  {n}\n" for n in changed), True)

    # -- accounts
    def add_account(self, who: Caller, db: AssocDB, where: dict[str, str],
                    sets: dict[str, str]) -> Outcome:
        names = _split_list(where.pop("names", ""))
        if not names:
            raise AccountsError(" Need name of account to add.")
        parent = where.pop("parent", ROOT)
        clusters = _split_list(where.pop("cluster", "")) or [self.cluster]
        descr = where.pop("description", None)
        org = where.pop("organization", None)
        self._no_extra(where, _ASSOC_SETTINGS)
        self._require_coord(who, [parent], "Problem adding accounts")
        for cl in clusters:
            self._check_coord_qos(who, db, cl, parent, where, "Problem adding accounts")
        if not db.clusters:
            raise AccountsError("  Can't add accounts, no cluster defined yet.\n"
                                " Please contact your administrator.")
        acct_str = ""
        assoc_str = ""
        for n in names:
            if n in (ROOT,) or not n.replace("-", "").replace("_", "").replace(".", "").isalnum():
                raise AccountsError(f" Bad account name: {n}")
            if n not in db.accounts:
                db.accounts[n] = Account(n, descr or n, org or (parent if parent != ROOT else n))
                acct_str += f"  {n}\n"
            for cl in clusters:
                if cl not in db.clusters:
                    raise AccountsError(f" The cluster {cl} doesn't exist.  Please add first.")
                if db.account_assoc(cl, n) is not None:
                    continue
                if db.account_assoc(cl, parent) is None:
                    raise AccountsError(f" Parent account '{parent}' doesn't exist on cluster "
                                        f"{cl}\n        Contact your admin to add this account.")
                aid = db.next_assoc_id()
                a = Association(aid, cl, n, parent=parent)
                db.assocs[aid] = self._set_assoc(db, a, where)
                assoc_str += f"  A = {n[:10]:<10} C = {cl[:10]:<10}\n"
        if not acct_str and not assoc_str:
            return Outcome(" Nothing new added.\n")
        text = ""
        if acct_str:
            text += (f" Adding Account(s)\n{acct_str} Settings\n"
                     f"  Description     = {descr if descr is not None else 'Account Name'}\n"
                     f"  Organization    = "
                     f"{org if org is not None else 'Parent/Account Name'}\n")
        text += f" Associations\n{assoc_str}"
        limits = self._settings_text(where)
        if limits:
            text += " Settings\n" + limits
        return Outcome(text, True)

    def modify_account(self, who: Caller, db: AssocDB, where: dict[str, str],
                       sets: dict[str, str]) -> Outcome:
        if not sets:
            raise AccountsError(" You didn't give me anything to set")
        names = _split_list(where.get("names", ""))
        if not names:
            raise AccountsError(" No conditions given")
        for n in names:
            if n not in db.accounts:
                raise AccountsError(f" Error with request: Account {n} does not exist")
        self._require_coord(who, names, "Error with request")
        text = ""
        if "description" in sets or "organization" in sets:
            if not self.is_admin(who):  # slurmdbd: an account's record is the operators'
                raise self._no_privilege("Error with request")
            for n in names:
                a = db.accounts[n]
                db.accounts[n] = Account(n, sets.get("description", a.description),
                                         sets.get("organization", a.organization))
            text += " Modified accounts...\n" + "".join(f"  {n}\n" for n in names)
        rest = {k: v for k, v in sets.items() if k not in ("description", "organization")}
        if rest:
            self._no_extra(rest, _ASSOC_SETTINGS | {"parent"})
            clusters = _split_list(where.get("cluster", "")) or list(db.clusters)
            if not self.is_admin(who):
                # a coordinator changes no account's limits, shares or QoS (not even a
                # sub-account's); it may move an account from one it coordinates to another
                if set(rest) != {"parent"}:
                    raise self._no_privilege("Error with request")
                self._require_coord_of_parents(who, db, clusters, names)
                if not db.is_coordinator(who.user, rest["parent"], self.cluster):
                    raise self._no_privilege("Error with request")
            objs = []
            for cl in clusters:
                for n in names:
                    x = db.account_assoc(cl, n)
                    if x is None:
                        continue
                    if "parent" in rest:
                        p = rest["parent"]
                        if db.account_assoc(cl, p) is None:
                            raise AccountsError(" Error with request: Invalid parent account "
                                                "specified")
                        if n == ROOT or db.would_cycle(cl, n, p):
                            raise AccountsError(f" Error with request: You can't make {n} a "
                                                f"child of {p}: {p} is below it")
                        x.parent = p
                    self._set_assoc(db, x, rest)
                    objs.append(f"  C = {cl:<10} A = {n} of {x.parent}\n" if x.parent
                                else f"  C = {cl:<10} A = {n}\n")
            text += " Modified account associations...\n" + "".join(objs)
        return Outcome(text, True)

    def _require_coord_of_parents(self, who: Caller, db: AssocDB, clusters: Iterable[str],
                                  names: Iterable[str]) -> None:
        """slurmdbd checks an account association's change against the coordinators of
        its parent: the coordinator of an account may not change or remove it itself."""
        for cl in clusters:
            for n in names:
                x = db.account_assoc(cl, n)
                if x is not None and not (x.parent and db.is_coordinator(who.user, x.parent,
                                                                          self.cluster)):
                    raise self._no_privilege("Error with request")

    def delete_account(self, who: Caller, db: AssocDB, where: dict[str, str],
                       sets: dict[str, str]) -> Outcome:
        names = _split_list(where.get("names", ""))
        if not names:
            raise AccountsError(" No conditions given to remove, not executing.")
        self._require_coord(who, names, "Error with request")
        if not self.is_admin(who):
            self._require_coord_of_parents(who, db, list(db.clusters), names)
        gone = [n for n in names if n in db.accounts]
        if not gone:
            return Outcome(" Nothing deleted\n")
        if ROOT in gone:
            raise AccountsError(" You are not allowed to remove the root account.")
        # everything below goes too (Slurm removes the subtree's associations)
        below: set[str] = set()
        for cl in db.clusters:
            for n in gone:
                below |= db.subaccounts(cl, n)
        busy = sorted({f"  JobID = {(rest or ['?'])[0]:<10} C = {self.cluster:<9} "
                       f"A = {a:<10} U = {u:<9}"
                       for u, a, *rest in self.active_jobs() if a in below})
        if busy:
            raise AccountsError(" Error with request: Job(s) active, cancel job(s) before "
                                "remove\n" + "\n".join(busy))
        for u in db.users.values():
            if u.default_account in below:
                rest = [a.account for a in db.assocs.values()
                        if a.user == u.name and a.account not in below]
                if not rest:
                    raise AccountsError(
                        " Error with request: You can not remove the default account of a "
                        f"user\n  User {u.name} has {u.default_account} as default account")
                u.default_account = sorted(rest)[0]
        objs = []
        for aid in sorted(db.assocs):
            a = db.assocs[aid]
            if a.account in below:
                if a.user is None:
                    objs.append(f"  C = {a.cluster:<10} A = {a.account:<10}\n")
                del db.assocs[aid]
        for n in below:
            db.accounts.pop(n, None)
        db.coords = {c for c in db.coords if c.account not in below}
        return Outcome(" Deleting accounts...\n" + "".join(f"  {n}\n" for n in sorted(below)),
                       True)

    # -- users
    def add_user(self, who: Caller, db: AssocDB, where: dict[str, str],
                 sets: dict[str, str]) -> Outcome:
        names = _split_list(where.pop("names", ""))
        if not names:
            raise AccountsError(" Need name of user to add.")
        accounts = _split_list(where.pop("account", ""))
        default = where.pop("defaultaccount", None)
        admin = where.pop("adminlevel", None)
        clusters = _split_list(where.pop("cluster", "")) or [self.cluster]
        partitions = _split_list(where.pop("partition", "")) or [None]  # type: ignore[list-item]
        self._no_extra(where, _ASSOC_SETTINGS)
        if admin is not None:
            self._require_super_for_admin_level(who)
            admin = self._admin_level(admin)
        if not accounts and default:
            accounts = [default]
        if not accounts and not all(n in db.users for n in names):
            raise AccountsError(" Need a default account for these users to add.")
        self._require_coord(who, accounts, "Problem adding users")
        for cl in clusters:
            for a in accounts:
                self._check_coord_qos(who, db, cl, a, where, "Problem adding users")
        for a in accounts:
            if a not in db.accounts:
                raise AccountsError(f" This account '{a}' doesn't exist.\n"
                                    "        Contact your admin to add this account.")
        if default and default not in accounts and not any(
                db.find(cl, default, n) for n in names for cl in clusters):
            raise AccountsError(f" Default account '{default}' must be one of the accounts "
                                "the user is added to")
        user_str = ""
        assoc_str = ""
        for n in names:
            if n not in db.users:
                db.users[n] = User(n, default or accounts[0], admin or "None")
                user_str += f"  {n}\n"
            elif admin is not None:
                db.users[n].admin_level = admin
            for cl in clusters:
                if cl not in db.clusters:
                    raise AccountsError(f" The cluster {cl} doesn't exist.  Please add first.")
                for acct in accounts:
                    if db.account_assoc(cl, acct) is None:
                        raise AccountsError(f" Account '{acct}' doesn't exist on cluster {cl}")
                    for part in partitions:
                        if db.find(cl, acct, n, part) is not None:
                            continue
                        aid = db.next_assoc_id()
                        db.assocs[aid] = self._set_assoc(
                            db, Association(aid, cl, acct, n, part), where)
                        if part:
                            assoc_str += (f"  U = {n[:9]:<9} A = {acct[:10]:<10} "
                                          f"C = {cl[:10]:<10} P = {part[:10]:<10}\n")
                        else:
                            assoc_str += f"  U = {n[:9]:<9} A = {acct[:10]:<10} C = {cl[:10]:<10}\n"
        if not user_str and not assoc_str:
            return Outcome(" Nothing new added.\n")
        text = ""
        if user_str:
            text += f" Adding User(s)\n{user_str}"
            if default or accounts or admin:
                text += " Settings =\n"
            if default or accounts:
                text += f"  Default Account = {default or accounts[0]}\n"
            if admin:
                text += f"  Admin Level     = {admin}\n"
        if assoc_str:
            text += f" Associations =\n{assoc_str}"
        limits = self._settings_text(where)
        if limits:
            text += " Non Default Settings\n" + limits
        return Outcome(text, True)

    def _user_assocs(self, db: AssocDB, where: dict[str, str]) -> list[Association]:
        names = set(_split_list(where.get("names", "") or where.get("user", "")))
        accts = set(_split_list(where.get("account", "")))
        clusters = set(_split_list(where.get("cluster", "")))
        parts = set(_split_list(where.get("partition", "")))
        return [a for a in db.assocs.values() if a.user is not None
                and (not names or a.user in names) and (not accts or a.account in accts)
                and (not clusters or a.cluster in clusters)
                and (not parts or (a.partition or "") in parts)]

    def modify_user(self, who: Caller, db: AssocDB, where: dict[str, str],
                    sets: dict[str, str]) -> Outcome:
        if not sets:
            raise AccountsError(" You didn't give me anything to set")
        names = _split_list(where.get("names", "") or where.get("user", ""))
        if not names:
            # `where account=students` alone names every user with an association there
            if not any(where.get(k) for k in ("account", "cluster", "partition")):
                raise AccountsError(" No conditions given")
            names = sorted({a.user for a in self._user_assocs(db, where) if a.user})
        for n in names:
            if n not in db.users:
                raise AccountsError(f" Error with request: User {n} does not exist")
        text = ""
        user_sets = {k: sets[k] for k in ("defaultaccount", "adminlevel") if k in sets}
        if user_sets:
            if "adminlevel" in user_sets:
                self._require_super_for_admin_level(who)
            else:
                self._require_coord(who, {a.account for a in self._user_assocs(db, where)},
                                    "Error with request")
            for n in names:
                u = db.users[n]
                if "defaultaccount" in user_sets:
                    d = user_sets["defaultaccount"]
                    if not any(a.user == n and a.account == d for a in db.assocs.values()):
                        raise AccountsError(
                            f" Error with request: User {n} does not have an association with "
                            f"account {d}; it can not be the default account")
                    u.default_account = d
                if "adminlevel" in user_sets:
                    u.admin_level = self._admin_level(user_sets["adminlevel"])
            text += " Modified users...\n" + "".join(f"  {n}\n" for n in names)
        rest = {k: v for k, v in sets.items() if k not in user_sets}
        if rest:
            self._no_extra(rest, _ASSOC_SETTINGS)
            assocs = self._user_assocs(db, where)
            self._require_coord(who, {a.account for a in assocs}, "Error with request")
            for a in assocs:
                self._check_coord_qos(who, db, a.cluster, a.account, rest, "Error with request")
            if not assocs:
                return Outcome(text + " Nothing modified\n", bool(text))
            text += " Modified user associations...\n"
            for a in sorted(assocs, key=lambda x: (x.cluster, x.account, x.user or "")):
                self._set_assoc(db, a, rest)
                text += f"  {_assoc_object(a)}\n"
        return Outcome(text, True)

    def delete_user(self, who: Caller, db: AssocDB, where: dict[str, str],
                    sets: dict[str, str]) -> Outcome:
        names = _split_list(where.get("names", "") or where.get("user", ""))
        if not names:
            raise AccountsError(" No conditions given to remove, not executing.")
        assocs = self._user_assocs(db, where)
        self._require_coord(who, {a.account for a in assocs}, "Error with request")
        if not assocs and not any(n in db.users for n in names):
            return Outcome(" Nothing deleted\n")
        gone = {a.id for a in assocs}
        busy = sorted({f"  C = {self.cluster:<9} A = {a:<10} U = {u:<9}"
                       for u, a, *_ in self.active_jobs()
                       if any(x.user == u and x.account == a for x in assocs)})
        if busy:
            raise AccountsError(" Error with request: Job(s) active, cancel job(s) before "
                                "remove\n" + "\n".join(busy))
        whole = "account" not in where and "partition" not in where
        for a in assocs:
            del db.assocs[a.id]
        if whole:
            for n in names:
                db.users.pop(n, None)
            db.coords = {c for c in db.coords if c.user not in names}
            return Outcome(" Deleting users...\n" + "".join(f"  {n}\n" for n in names), True)
        for n in names:
            u = db.users.get(n)
            left = [a for a in db.assocs.values() if a.user == n and a.id not in gone]
            if u is not None and u.default_account not in {a.account for a in left}:
                if left:
                    raise AccountsError(" Error with request: You can not remove the default "
                                        f"account of a user\n  U = {n} A = {u.default_account}")
        return Outcome(" Deleting user associations...\n"
                       + "".join(f"  {_assoc_object(a)}\n" for a in assocs), True)

    # -- associations (modify/delete by conditions)
    def modify_association(self, who: Caller, db: AssocDB, where: dict[str, str],
                           sets: dict[str, str]) -> Outcome:
        if "user" in where or "names" in where:
            return self.modify_user(who, db, {**where, "names": where.get("user",
                                                                          where.get("names", ""))},
                                    sets)
        return self.modify_account(who, db, {**where, "names": where.get("account", "")}, sets)

    def delete_association(self, who: Caller, db: AssocDB, where: dict[str, str],
                           sets: dict[str, str]) -> Outcome:
        if "user" in where:
            return self.delete_user(who, db, where, sets)
        return self.delete_account(who, db, {**where, "names": where.get("account", "")}, sets)

    def add_association(self, who: Caller, db: AssocDB, where: dict[str, str],
                        sets: dict[str, str]) -> Outcome:
        if "user" in where:
            return self.add_user(who, db, {**where, "names": where.pop("user")}, sets)
        return self.add_account(who, db, {**where, "names": where.pop("account", "")}, sets)

    # -- QoS
    def add_qos(self, who: Caller, db: AssocDB, where: dict[str, str],
                sets: dict[str, str]) -> Outcome:
        self._require_admin(who, "Problem adding QOS")
        names = _split_list(where.pop("names", ""))
        if not names:
            raise AccountsError(" Need name of qos to add.")
        descr = where.get("description")
        added = []
        for n in names:
            if n in db.qos:
                continue
            q = Qos(n, db.next_qos_id(), descr or n)
            db.qos[n] = self._set_qos(db, q, where)
            added.append(n)
        if not added:
            return Outcome(" Nothing new added.\n")
        text = (" Adding QOS(s)\n" + "".join(f"  {n}\n" for n in added) + " Settings\n"
                + f"  Description    = {descr if descr is not None else 'QOS Name'}\n")
        return Outcome(text, True)

    def modify_qos(self, who: Caller, db: AssocDB, where: dict[str, str],
                   sets: dict[str, str]) -> Outcome:
        self._require_admin(who, "Error with request")
        if not sets:
            raise AccountsError(" You didn't give me anything to set")
        names = _split_list(where.get("names", "")) or sorted(db.qos)
        done = []
        for n in names:
            if n not in db.qos:
                continue
            db.qos[n] = self._set_qos(db, db.qos[n], sets)
            done.append(n)
        if not done:
            return Outcome(" Nothing modified\n")
        return Outcome(" Modified qos...\n" + "".join(f"  {n}\n" for n in done), True)

    def delete_qos(self, who: Caller, db: AssocDB, where: dict[str, str],
                   sets: dict[str, str]) -> Outcome:
        self._require_admin(who, "Error with request")
        names = [n for n in _split_list(where.get("names", "")) if n in db.qos]
        if not names:
            return Outcome(" Nothing deleted\n")
        for a in db.assocs.values():
            if a.default_qos in names:
                raise AccountsError(" Error with request: This request would make it so some "
                                    "associations would not have access to their default qos.")
        for n in names:
            del db.qos[n]
        for a in db.assocs.values():
            a.qos = tuple(q for q in a.qos if q not in names)
        return Outcome(" Deleting QOS(s)...\n" + "".join(f"  {n}\n" for n in names), True)

    # -- coordinators
    def add_coordinator(self, who: Caller, db: AssocDB, where: dict[str, str],
                        sets: dict[str, str]) -> Outcome:
        self._require_admin(who, "Error with request")
        users = _split_list(where.get("names", "") or where.get("user", ""))
        accts = _split_list(where.get("account", ""))
        if not users or not accts:
            raise AccountsError(" You need to specify a user list and account list here.")
        for u in users:
            if u not in db.users:
                raise AccountsError(f" User {u} doesn't exist.")
        for a in accts:
            if a not in db.accounts:
                raise AccountsError(f" Account {a} doesn't exist.")
        for u in users:
            for a in accts:
                db.coords.add(Coordinator(a, u))
        return Outcome(" Adding Coordinator User(s)\n" + "".join(f"  {u}\n" for u in users)
                       + " To Account(s) and all sub-accounts\n"
                       + "".join(f"  {a}\n" for a in accts), True)

    def delete_coordinator(self, who: Caller, db: AssocDB, where: dict[str, str],
                           sets: dict[str, str]) -> Outcome:
        self._require_admin(who, "Error with request")
        users = set(_split_list(where.get("names", "") or where.get("user", "")))
        accts = set(_split_list(where.get("account", "")))
        if not users and not accts:
            raise AccountsError(" You need to specify a user list or account list here.")
        gone = {c for c in db.coords if (not users or c.user in users)
                and (not accts or c.account in accts)}
        if not gone:
            return Outcome(" Nothing removed\n")
        db.coords -= gone
        return Outcome(" Removed Coordinators (sub accounts not listed)...\n"
                       + "".join(f"  U = {c.user:<9} A = {c.account:<10}\n"
                                 for c in sorted(gone, key=lambda c: (c.user, c.account))),
                       True)

    # -- helpers
    @staticmethod
    def _no_extra(d: dict[str, str], allowed: set[str]) -> None:
        for k, v in d.items():
            if k not in allowed:
                raise _unknown(k, v)

    @staticmethod
    def _admin_level(v: str) -> str:
        for lvl in ADMIN_LEVELS:
            if lvl.lower().startswith(v.lower()) and v:
                return lvl
        raise AccountsError(f" Unknown AdminLevel: {v}")

    def _set_assoc(self, db: AssocDB, a: Association, sets: dict[str, str]) -> Association:
        a.limits = apply_limits(a.limits, sets, _ASSOC_LIMITS)
        if "fairshare" in sets:
            a.shares = _shares(sets["fairshare"])
        if "priority" in sets:
            a.priority = None if sets["priority"] == "-1" else _count("Priority", sets["priority"])
        if "qos" in sets:
            a.qos = _qos_list(db, a.qos or db.effective_qos(a), sets["qos"])
        if "defaultqos" in sets:
            d = sets["defaultqos"]
            if d == "-1" or d == "":
                a.default_qos = None
            else:
                if d not in db.qos:
                    raise AccountsError(f" Unknown QOS name: {d}")
                allowed = a.qos or db.effective_qos(a)
                if allowed and d not in allowed:
                    raise AccountsError(" Error with request: DefaultQOS must be in the "
                                        "association's QOS list")
                a.default_qos = d
        return a

    def _settings_text(self, sets: dict[str, str]) -> str:
        lim = apply_limits(Limits(), sets, _ASSOC_LIMITS)
        shares = _shares(sets["fairshare"]) if "fairshare" in sets else None
        qos = tuple(_split_list(sets["qos"].lstrip("+-"))) if "qos" in sets else ()
        return _limit_lines(lim, shares, qos, sets.get("defaultqos"))

    def _set_qos(self, db: AssocDB, q: Qos, sets: dict[str, str]) -> Qos:
        self._no_extra(sets, _QOS_LIMITS | {"description", "priority", "usagefactor",
                                            "usagethreshold", "gracetime", "preempt",
                                            "preemptmode", "preemptexempttime", "flags"})
        q = replace(q, limits=apply_limits(q.limits, sets, _QOS_LIMITS))
        if "description" in sets:
            q.description = sets["description"]
        if "priority" in sets:
            q.priority = _count("Priority", sets["priority"]) or 0
        if "usagefactor" in sets:
            try:
                q.usage_factor = float(sets["usagefactor"])
            except ValueError:
                raise AccountsError(f" Bad UsageFactor value: {sets['usagefactor']}") from None
        if "usagethreshold" in sets:
            try:
                thres = float(sets["usagethreshold"])
            except ValueError:
                raise AccountsError(" Bad UsageThreshold value: "
                                    f"{sets['usagethreshold']}") from None
            q.usage_threshold = None if thres < 0 else thres
        if "gracetime" in sets:
            g = sets["gracetime"].strip()
            if g.isdigit():  # sacctmgr's GraceTime is in seconds (get_uint)
                q.grace_time = int(g)
            else:
                w = _wall("GraceTime", g)
                q.grace_time = 0 if w is None else w * 60
        if "preemptexempttime" in sets:
            w = _wall("PreemptExemptTime", sets["preemptexempttime"])
            q.preempt_exempt_time = None if w is None else w * 60
        if "preempt" in sets:
            v = sets["preempt"]
            cur = q.preempt
            q.preempt = _qos_list(db, cur, v) if v not in ("", "''") else ()
        if "preemptmode" in sets:
            modes = [m.lower() for m in _split_list(sets["preemptmode"])]
            for m in modes:
                if m not in PREEMPT_MODES and m not in ("gang", "within"):
                    raise AccountsError(f" Unknown PreemptMode: {sets['preemptmode']}")
            q.preempt_mode = ",".join(modes)
        if "flags" in sets:
            v = sets["flags"]
            op = ""
            if v[:1] in ("+", "-"):
                op, v = v[0], v[1:]
            flags = []
            for f in _split_list(v):
                match = next((x for x in QOS_FLAGS if x.lower() == f.lower()), None)
                if match is None:
                    raise AccountsError(f" Unknown QOS flag used in:\n  '{sets['flags']}'\n"
                                        " Valid QOS flags are\n  " + ",".join(QOS_FLAGS))
                flags.append(match)
            if op == "+":
                q.flags = tuple(dict.fromkeys((*q.flags, *flags)))
            elif op == "-":
                q.flags = tuple(f for f in q.flags if f not in flags)
            else:
                q.flags = tuple(flags) if flags or v.strip() in ("", "-1") else q.flags
        return q

    # -- show
    def show(self, entity: str, where: dict[str, str], options: dict[str, Any],
             who: Caller | None = None) -> Outcome:
        rows = self._show(entity, where, options)
        hide = self.private_data if who is not None and not self.is_admin(who) else ()
        if not hide or who is None:
            return Outcome(rows=rows)
        # PrivateData=accounts: account definitions only to their coordinators;
        # PrivateData=users: other users' records only to their accounts' coordinators
        db = self.db

        def coordinates(account: str) -> bool:
            return bool(account) and db.is_coordinator(who.user, account.strip(),
                                                       self.cluster)

        def visible(row: dict[str, str]) -> bool:
            user = row.get("User", "")
            account = row.get("Account", "").strip()
            if entity == "account" and "accounts" in hide and not coordinates(account):
                return False
            if entity == "user" and "users" in hide and user != who.user:
                return account != "" and coordinates(account)
            if entity == "association":
                if user and "users" in hide and user != who.user:
                    return coordinates(account)
                if not user and "accounts" in hide:
                    return coordinates(account)
            return True

        return Outcome(rows=[r for r in rows if visible(r)])

    def _show(self, entity: str, where: dict[str, str],
              options: dict[str, Any]) -> list[dict[str, str]]:
        db = self.db
        rows: list[dict[str, str]] = []
        names = set(_split_list(where.get("names", "")))
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
                        if x.account == a.name and _cond_ok(x, where):
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
                        if x.user == u.name and _cond_ok(x, where):
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
            cl = _split_list(where.get("cluster", "")) or sorted(db.clusters)
            order: list[tuple[int, Association]] = []
            for cname in cl:
                order.extend(db.iter_tree(cname))
            for depth, x in order:
                if not _cond_ok(x, where):
                    continue
                row = assoc_row(db, x)
                if options.get("tree"):
                    row["Account"] = " " * depth + x.account
                rows.append(row)
        return rows

    def dump(self, cluster: str) -> str:
        """`sacctmgr dump`: the cluster's associations in Slurm's flat-file format."""
        db = self.db
        if cluster not in db.clusters:
            raise AccountsError(f" Cluster {cluster} doesn't exist.")
        lines = ["# To edit this file start with a cluster line for the new cluster",
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
                 "MaxWallDurationPerJob=1"]
        root = db.account_assoc(cluster, ROOT)
        lines.append(f"Cluster - '{cluster}'" + (_dump_opts(root) if root else ""))
        for q in sorted(db.qos.values(), key=lambda q: q.id):
            lines.append(f"QOS - '{q.name}'" + _dump_qos(q))
        for parent in _dump_parents(db, cluster):
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
                    lines.append(f"User - '{k.user}'" + extra + _dump_opts(k))
                else:
                    a = db.accounts.get(k.account, Account(k.account))
                    lines.append(f"Account - '{k.account}':Description='{a.description}'"
                                 f":Organization='{a.organization}'" + _dump_opts(k))
        return "\n".join(lines) + "\n"

    def load(self, who: Caller, text: str, commit: bool = True) -> Outcome:
        """`sacctmgr load file`: replace a cluster's associations with the file's (the
        file names the cluster); QoS lines are added or updated."""
        self._require_admin(who, "Problem loading")
        new = self.db.copy()
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
                raise AccountsError(f" Bad line {no}: {raw}")
            name, opts = _parse_dump_entry(rest, no)
            kind = head.strip().lower()
            if kind == "cluster":
                cluster = name
                if cluster not in new.clusters:
                    new.clusters[cluster] = Cluster(cluster)
                for aid in [a.id for a in new.assocs.values() if a.cluster == cluster]:
                    del new.assocs[aid]
                rid = new.next_assoc_id()
                new.assocs[rid] = Association(rid, cluster, ROOT)
                new.accounts.setdefault(ROOT, Account(ROOT, "default root account", "root"))
                self._set_assoc(new, new.assocs[rid], self._canon(opts, None))
            elif kind == "qos":
                q = new.qos.get(name) or Qos(name, new.next_qos_id(), name)
                new.qos[name] = self._set_qos(new, q, self._canon(opts, None))
            elif cluster is None:
                raise AccountsError(f" No cluster specified before line {no}: {raw}")
            elif kind == "parent":
                if new.account_assoc(cluster, name) is None:
                    raise AccountsError(f" Parent '{name}' on line {no} has not been added yet")
                parent = name
            elif kind == "account":
                descr = opts.pop("Description", opts.pop("description", name))
                org = opts.pop("Organization", opts.pop("organization", name))
                new.accounts[name] = Account(name, descr, org)
                aid = new.next_assoc_id()
                new.assocs[aid] = self._set_assoc(
                    new, Association(aid, cluster, name, parent=parent), self._canon(opts, None))
            elif kind == "user":
                info = {k.lower(): v for k, v in opts.items()}
                user_opts = {k: v for k, v in opts.items() if k.lower() not in
                             ("defaultaccount", "adminlevel", "coordinator", "partition")}
                users.setdefault(name, {}).update(info)
                if "coordinator" in info:
                    coords.extend((a, name) for a in _split_list(info["coordinator"]))
                aid = new.next_assoc_id()
                new.assocs[aid] = self._set_assoc(
                    new, Association(aid, cluster, parent, name, info.get("partition") or None),
                    self._canon(user_opts, None))
            else:
                raise AccountsError(f" Unknown type '{head.strip()}' on line {no}")
        if cluster is None:
            raise AccountsError(" No cluster specified in the file.")
        if not self.is_super(who) and any(
                self._admin_level(info["adminlevel"]) != self.db.admin_level(name)
                for name, info in users.items() if "adminlevel" in info):
            raise AccountsError(NOT_SUPER, 403)
        for name, info in users.items():
            u = new.users.get(name) or User(name)
            mine = sorted(a.account for a in new.assocs.values() if a.user == name)
            u.default_account = info.get("defaultaccount") or u.default_account or mine[0]
            if "adminlevel" in info:
                u.admin_level = self._admin_level(info["adminlevel"])
            new.users[name] = u
        for acct_name, user_name in coords:
            new.coords.add(Coordinator(acct_name, user_name))
        if commit:
            self.store.replace_accounting(new.to_records())
            self.db = new
            if self.on_change is not None:
                self.on_change(new)
        return Outcome(f" Loaded cluster {cluster}: {sum(1 for a in new.assocs.values() if a.cluster == cluster)} "
                       "associations\n", True)


def add_cluster_records(db: AssocDB, name: str) -> None:
    """A cluster with its root account association and root's user association (what
    slurmdbd creates with a cluster)."""
    db.clusters[name] = Cluster(name)
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


def _parse_dump_entry(rest: str, no: int) -> tuple[str, dict[str, str]]:
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
        raise AccountsError(f" Unbalanced quotes on line {no}")
    parts.append(cur)
    name = parts[0].strip()
    if not name:
        raise AccountsError(f" No name on line {no}")
    opts: dict[str, str] = {}
    for p in parts[1:]:
        k, sep, v = p.partition("=")
        if not sep:
            raise AccountsError(f" Bad option '{p}' on line {no}")
        opts[k.strip()] = v.strip()
    return name, opts


def _dump_parents(db: AssocDB, cluster: str) -> list[str]:
    """Accounts that have children, parents before children (the file adds in order)."""
    out = []
    for _, a in db.iter_tree(cluster):
        if a.user is None and db.children(cluster, a.account):
            out.append(a.account)
    return out


def _dump_opts(a: Association) -> str:
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


def _dump_qos(q: Qos) -> str:
    parts = [f"Description='{q.description}'"]
    if q.priority:
        parts.append(f"Priority={q.priority}")
    if q.usage_factor != 1.0:
        parts.append(f"UsageFactor={q.usage_factor:g}")
    if q.flags:
        parts.append(f"Flags={','.join(q.flags)}")
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


def _assoc_order(a: Association) -> tuple[str, str, str, str]:
    return (a.cluster, a.account, a.user or "", a.partition or "")


def _cond_ok(a: Association, where: dict[str, str]) -> bool:
    for key, attr in (("cluster", a.cluster), ("account", a.account), ("user", a.user or ""),
                      ("partition", a.partition or "")):
        if key in where and attr not in _split_list(where[key]):
            return False
    if "names" in where and (a.user or a.account) not in _split_list(where["names"]):
        return False
    return True


def _assoc_object(a: Association) -> str:
    if a.partition:
        return f"C = {a.cluster:<10} A = {a.account:<20} U = {a.user or '':<9} P = {a.partition}"
    return f"C = {a.cluster:<10} A = {a.account:<20} U = {a.user or '':<9}"


def assoc_row(db: AssocDB, a: Association) -> dict[str, str]:
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


def qos_row(q: Qos) -> dict[str, str]:
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
