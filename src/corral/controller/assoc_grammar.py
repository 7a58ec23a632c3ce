"""sacctmgr's option grammar (sacctmgr(1)): the names a `where` or `set` key may take, and
how each value is read (counts, wall times, TRES lists, shares, QoS lists, admin levels).

Keys are matched case-insensitively, `_` ignored; `QOS+=x` and `QOS-=x` arrive with the
operator on the key (the command does not interpret them) and leave here with it on the
value.  A value that does not read raises `SlurmError` with the line sacctmgr prints.
"""

from __future__ import annotations

from corral.controller.errors import SlurmError
from corral.model.assoc import ADMIN_LEVELS, SHARES_PARENT, AssocDB
from corral.model.timefmt import TimeFormatError, parse_time_limit
from corral.model.tres import TresError, parse_tres

ENTITIES = ("cluster", "account", "user", "qos", "association", "coordinator")
# account names, descriptions and organizations are stored lower-cased (Slurm)
LOWERED = ("account", "parent", "defaultaccount", "description", "organization")

_ALIASES: dict[str, str] = {}
for _canon, _names in {
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
    for _n in _names:
        _ALIASES[_n] = _canon

# canonical limit key -> the Limits field it sets
TRES_FIELDS = {"grptres": "grp_tres", "grptresmins": "grp_tres_mins",
               "grptresrunmins": "grp_tres_run_mins", "maxtres": "max_tres_per_job",
               "maxtrespernode": "max_tres_per_node", "maxtresmins": "max_tres_mins_per_job",
               "maxtresperuser": "max_tres_per_user", "mintresperjob": "min_tres_per_job"}
COUNT_FIELDS = {"grpjobs": "grp_jobs", "grpsubmitjobs": "grp_submit_jobs",
                "maxjobs": "max_jobs", "maxsubmitjobs": "max_submit_jobs",
                "maxjobsperuser": "max_jobs_per_user",
                "maxsubmitjobsperuser": "max_submit_jobs_per_user"}
WALL_FIELDS = {"grpwall": "grp_wall", "maxwall": "max_wall"}
# which limits an association takes, which a QoS, and what else an association's `set` takes
ASSOC_LIMITS = {"grptres", "grptresmins", "grptresrunmins", "grpjobs", "grpsubmitjobs",
                "grpwall", "maxtres", "maxtrespernode", "maxtresmins", "maxjobs",
                "maxsubmitjobs", "maxwall"}
QOS_LIMITS = (ASSOC_LIMITS - {"maxjobs", "maxsubmitjobs"}) | {
    "maxtresperuser", "maxjobsperuser", "maxsubmitjobsperuser", "mintresperjob"}
ASSOC_SETTINGS = ASSOC_LIMITS | {"fairshare", "priority", "qos", "defaultqos"}
QOS_SETTINGS = QOS_LIMITS | {"description", "priority", "usagefactor", "usagethreshold",
                             "gracetime", "preempt", "preemptmode", "preemptexempttime", "flags"}


def canonical(key: str) -> str | None:
    """The canonical name of an option key, None when sacctmgr knows no such option."""
    return _ALIASES.get(key.lower().replace("_", ""))


def unknown_option(key: str, value: str | None = None) -> SlurmError:
    shown = f"{key}={value}" if value is not None else key
    return SlurmError(f" Unknown option: {shown}\n Use keyword 'where' to modify condition")


def canonical_options(d: dict[str, str], names: list[str] | None = None) -> dict[str, str]:
    """`d`'s keys by their canonical names (`QOS+=` → {"qos": "+…"}); bare `names` of the
    command line join `names`.  An unknown key is refused."""
    out: dict[str, str] = {}
    for k, v in d.items():
        signed = k.endswith("+") or k.endswith("-")
        key = k[:-1] if signed else k
        c = canonical(key)
        if c is None:
            raise unknown_option(k, v)
        out[c] = (k[-1] + v) if signed else v
    if names:
        prev = out.get("names")
        out["names"] = ",".join([*([prev] if prev else []), *names])
    return out


def lower_names(d: dict[str, str]) -> None:
    """Account names, descriptions and organizations as Slurm stores them: lower-cased."""
    for k in LOWERED:
        if k in d:
            d[k] = d[k].lower()


def only(d: dict[str, str], allowed: set[str]) -> None:
    """Refuse the first option of `d` not in `allowed`."""
    for k, v in d.items():
        if k not in allowed:
            raise unknown_option(k, v)


def split_list(v: str) -> list[str]:
    return [x for x in (p.strip() for p in v.split(",")) if x]


def read_count(key: str, v: str) -> int | None:
    """A count limit; -1, NONE, UNLIMITED and INFINITE clear it (None)."""
    t = v.strip()
    if t == "-1" or t.upper() in ("NONE", "UNLIMITED", "INFINITE"):
        return None
    if not t.isdigit():
        raise SlurmError(f" Bad {key} value: {v}")
    return int(t)


def read_wall(key: str, v: str) -> int | None:
    """A wall-time limit in minutes (Slurm's time formats); -1 or a negative time clears it."""
    t = v.strip()
    if t == "-1":
        return None
    try:
        secs = parse_time_limit(t)
    except TimeFormatError:
        raise SlurmError(f" Bad {key} time format: {v}") from None
    return None if secs < 0 else secs // 60


def read_tres(key: str, v: str) -> dict[str, int]:
    try:
        return parse_tres(v)
    except TresError as e:
        raise SlurmError(f" {e}\n Invalid value for {key}: {v}") from None


def read_shares(v: str) -> int:
    """Fairshare=N, `parent`, or -1 (back to 1)."""
    if v.strip().lower() == "parent":
        return SHARES_PARENT
    t = v.strip()
    if t == "-1":
        return 1
    if not t.isdigit():
        raise SlurmError(f" Bad Fairshare value: {v}")
    return int(t)


def read_qos_list(db: AssocDB, current: tuple[str, ...], v: str) -> tuple[str, ...]:
    """`QOS=a,b` replaces `current`, `QOS+=c` adds, `QOS-=a` removes; every name must be a
    QoS of `db`."""
    op = ""
    if v[:1] in ("+", "-") and v[1:2] != "1":
        op, v = v[0], v[1:]
    names = split_list(v)
    for n in names:
        if n not in db.qos:
            raise SlurmError(f" Unknown QOS name: {n}\n Problem with qos list")
    if op == "+":
        return tuple(dict.fromkeys((*current, *names)))
    if op == "-":
        return tuple(q for q in current if q not in names)
    return tuple(names)


def read_admin_level(v: str) -> str:
    """An AdminLevel by any prefix of its name (None, Operator, Administrator)."""
    for lvl in ADMIN_LEVELS:
        if lvl.lower().startswith(v.lower()) and v:
            return lvl
    raise SlurmError(f" Unknown AdminLevel: {v}")
