"""Applying sacctmgr's `set` values (already canonical: assoc_grammar.py) to associations and
QoS, and the settings an `add` gives, as the fields sacctmgr reports them."""

from __future__ import annotations

from dataclasses import replace

from corral.controller.assoc_grammar import (
    ASSOC_LIMITS,
    COUNT_FIELDS,
    QOS_LIMITS,
    QOS_SETTINGS,
    TRES_FIELDS,
    WALL_FIELDS,
    only,
    read_count,
    read_qos_list,
    read_shares,
    read_tres,
    read_wall,
    split_list,
)
from corral.controller.assoc_queries import mins2time
from corral.controller.errors import SlurmError
from corral.model.assoc import (
    PREEMPT_MODES,
    QOS_FLAGS,
    SHARES_PARENT,
    AssocDB,
    Association,
    Limits,
    Qos,
)
from corral.model.tres import format_tres, merge


def apply_limits(lim: Limits, settings: dict[str, str], allowed: set[str]) -> Limits:
    """A copy of `lim` with sacctmgr's limit settings applied (-1 clears); keys not in
    `allowed` are left to the caller."""
    out = replace(lim)
    for key, v in settings.items():
        if key not in allowed:
            continue
        if key in TRES_FIELDS:
            attr = TRES_FIELDS[key]
            setattr(out, attr, merge(getattr(lim, attr), read_tres(key, v)))
        elif key in COUNT_FIELDS:
            setattr(out, COUNT_FIELDS[key], read_count(key, v))
        elif key in WALL_FIELDS:
            setattr(out, WALL_FIELDS[key], read_wall(key, v))
    return out


def set_assoc(db: AssocDB, a: Association, sets: dict[str, str]) -> Association:
    """`a` with an association's settings applied (limits, Fairshare, Priority, QOS,
    DefaultQOS), checked against `db`'s QoS."""
    a.limits = apply_limits(a.limits, sets, ASSOC_LIMITS)
    if "fairshare" in sets:
        a.shares = read_shares(sets["fairshare"])
    if "priority" in sets:
        a.priority = None if sets["priority"] == "-1" else read_count("Priority", sets["priority"])
    if "qos" in sets:
        a.qos = read_qos_list(db, a.qos or db.effective_qos(a), sets["qos"])
    if "defaultqos" in sets:
        d = sets["defaultqos"]
        if d == "-1" or d == "":
            a.default_qos = None
        else:
            if d not in db.qos:
                raise SlurmError(f" Unknown QOS name: {d}")
            allowed = a.qos or db.effective_qos(a)
            if allowed and d not in allowed:
                raise SlurmError(" Error with request: DefaultQOS must be in the "
                                 "association's QOS list")
            a.default_qos = d
    return a


def assoc_settings(sets: dict[str, str]) -> dict[str, str]:
    """What an association's `set` sets, by sacctmgr's names (Fairshare, GrpJobs, …, QOS,
    DefQOS) with their values as sacctmgr prints them; unset ones left out."""
    lim = apply_limits(Limits(), sets, ASSOC_LIMITS)
    out: dict[str, str] = {}
    if "fairshare" in sets:
        shares = read_shares(sets["fairshare"])
        out["Fairshare"] = "parent" if shares == SHARES_PARENT else str(shares)
    for name, count in (("GrpJobs", lim.grp_jobs), ("GrpSubmitJobs", lim.grp_submit_jobs),
                        ("MaxJobs", lim.max_jobs), ("MaxSubmitJobs", lim.max_submit_jobs)):
        if count is not None:
            out[name] = str(count)
    for name, tres in (("GrpTRES", lim.grp_tres), ("GrpTRESMins", lim.grp_tres_mins),
                       ("GrpTRESRunMins", lim.grp_tres_run_mins),
                       ("MaxTRES", lim.max_tres_per_job),
                       ("MaxTRESPerNode", lim.max_tres_per_node),
                       ("MaxTRESMins", lim.max_tres_mins_per_job)):
        if tres:
            out[name] = format_tres(tres)
    for name, wall in (("GrpWall", lim.grp_wall), ("MaxWall", lim.max_wall)):
        if wall is not None:
            out[name] = mins2time(wall)
    qos = split_list(sets["qos"].lstrip("+-")) if "qos" in sets else []
    if qos:
        out["QOS"] = ",".join(qos)
    if sets.get("defaultqos"):
        out["DefQOS"] = sets["defaultqos"]
    return out


def set_qos(db: AssocDB, q: Qos, sets: dict[str, str]) -> Qos:
    """A copy of `q` with a QoS's settings applied."""
    only(sets, QOS_SETTINGS)
    q = replace(q, limits=apply_limits(q.limits, sets, QOS_LIMITS))
    if "description" in sets:
        q.description = sets["description"]
    if "priority" in sets:
        q.priority = read_count("Priority", sets["priority"]) or 0
    if "usagefactor" in sets:
        try:
            q.usage_factor = float(sets["usagefactor"])
        except ValueError:
            raise SlurmError(f" Bad UsageFactor value: {sets['usagefactor']}") from None
    if "usagethreshold" in sets:
        try:
            thres = float(sets["usagethreshold"])
        except ValueError:
            raise SlurmError(f" Bad UsageThreshold value: {sets['usagethreshold']}") from None
        q.usage_threshold = None if thres < 0 else thres
    if "gracetime" in sets:
        g = sets["gracetime"].strip()
        if g.isdigit():  # sacctmgr's GraceTime is in seconds (get_uint)
            q.grace_time = int(g)
        else:
            w = read_wall("GraceTime", g)
            q.grace_time = 0 if w is None else w * 60
    if "preemptexempttime" in sets:
        w = read_wall("PreemptExemptTime", sets["preemptexempttime"])
        q.preempt_exempt_time = None if w is None else w * 60
    if "preempt" in sets:
        v = sets["preempt"]
        q.preempt = read_qos_list(db, q.preempt, v) if v not in ("", "''") else ()
    if "preemptmode" in sets:
        modes = [m.lower() for m in split_list(sets["preemptmode"])]
        for m in modes:
            if m not in PREEMPT_MODES and m not in ("gang", "within"):
                raise SlurmError(f" Unknown PreemptMode: {sets['preemptmode']}")
        q.preempt_mode = ",".join(modes)
    if "flags" in sets:
        q.flags = _qos_flags(q.flags, sets["flags"])
    return q


def _qos_flags(current: tuple[str, ...], text: str) -> tuple[str, ...]:
    """Flags=a,b replaces, Flags+=c adds, Flags-=a removes (names as Slurm spells them)."""
    v = text
    op = ""
    if v[:1] in ("+", "-"):
        op, v = v[0], v[1:]
    flags = []
    for f in split_list(v):
        match = next((x for x in QOS_FLAGS if x.lower() == f.lower()), None)
        if match is None:
            raise SlurmError(f" Unknown QOS flag used in:\n  '{text}'\n"
                             " Valid QOS flags are\n  " + ",".join(QOS_FLAGS))
        flags.append(match)
    if op == "+":
        return tuple(dict.fromkeys((*current, *flags)))
    if op == "-":
        return tuple(f for f in current if f not in flags)
    return tuple(flags) if flags or v.strip() in ("", "-1") else current
