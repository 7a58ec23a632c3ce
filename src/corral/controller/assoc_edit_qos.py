"""sacctmgr's add, modify and delete of QoS (administrators only)."""

from __future__ import annotations

from corral.controller.assoc_changes import ChangeSet, EditContext
from corral.controller.assoc_grammar import split_list
from corral.controller.assoc_queries import qos_row
from corral.controller.assoc_settings import set_qos
from corral.controller.errors import SlurmError
from corral.model.assoc import Qos

# sacctmgr_print_qos_limits' order: (the setting's canonical key, its label, qos_row's
# column for its value); GraceTime (seconds), Priority and the usage numbers are printed
# as numbers, not as `show qos` prints them
_ADDED_QOS_SETTINGS = (
    ("flags", "Flags", "Flags"), ("gracetime", "GraceTime", None),
    ("grpjobs", "GrpJobs", "GrpJobs"), ("grpsubmitjobs", "GrpSubmitJobs", "GrpSubmit"),
    ("grptres", "GrpTRES", "GrpTRES"), ("grptresmins", "GrpTRESMins", "GrpTRESMins"),
    ("grptresrunmins", "GrpTRESRunMins", "GrpTRESRunMins"), ("grpwall", "GrpWall", "GrpWall"),
    ("maxjobsperuser", "MaxJobsPerUser", "MaxJobsPU"),
    ("maxsubmitjobsperuser", "MaxSubmitJobsPerUser", "MaxSubmitPU"),
    ("maxtres", "MaxTRESPerJob", "MaxTRES"), ("maxtrespernode", "MaxTRESPerNode", "MaxTRESPerNode"),
    ("maxtresperuser", "MaxTRESPerUser", "MaxTRESPU"), ("mintresperjob", "MinTRESPerJob", "MinTRES"),
    ("maxtresmins", "MaxTRESMins", "MaxTRESMins"), ("maxwall", "MaxWall", "MaxWall"),
    ("preempt", "Preempt", "Preempt"), ("preemptmode", "PreemptMode", None),
    ("preemptexempttime", "PreemptExemptTime", "PreemptExemptTime"),
    ("priority", "Priority", None), ("usagefactor", "UsageFactor", None),
    ("usagethreshold", "UsageThreshold", None),
)


def added_qos_settings(q: Qos, given: Options) -> dict[str, str]:
    """The settings `sacctmgr add qos` lists under `Settings`, by Slurm's labels: those
    given, NONE for a limit given as -1."""
    row = qos_row(q)
    out: dict[str, str] = {}
    for key, label, column in _ADDED_QOS_SETTINGS:
        if key not in given:
            continue
        if key == "gracetime":
            value = str(q.grace_time)
        elif key == "priority":
            value = str(q.priority)
        elif key == "usagefactor":
            value = f"{q.usage_factor:.4f}"
        elif key == "usagethreshold":
            value = "NONE" if q.usage_threshold is None else f"{q.usage_threshold:.4f}"
        elif key == "preemptmode":
            if q.preempt_mode in ("", "cluster", "off"):
                continue  # PREEMPT_MODE_OFF (0) is not printed
            value = q.preempt_mode.upper()
        else:
            assert column is not None
            value = row[column]
            if key == "flags" and not value:
                continue
            if not value and key != "preempt":
                value = "NONE"
            elif not value:
                continue
        out[label] = value
    return out

Options = dict[str, str]


def add_qos(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    db = ctx.db
    ctx.auth.require_admin("Problem adding QOS")
    names = split_list(where.pop("names", ""))
    if not names:
        raise SlurmError(" Need name of qos to add.")
    descr = where.get("description")
    out = ChangeSet("add", "qos", description=descr)
    for n in names:
        if n in db.qos:
            continue
        db.qos[n] = set_qos(db, Qos(n, db.next_qos_id(), descr or n), where)
        out.names.append(n)
        out.settings = added_qos_settings(db.qos[n], where)
    out.changed = bool(out.names)
    return out


def modify_qos(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    db = ctx.db
    ctx.auth.require_admin("Error with request")
    if not sets:
        raise SlurmError(" You didn't give me anything to set")
    out = ChangeSet("modify", "qos")
    for n in split_list(where.get("names", "")) or sorted(db.qos):
        if n not in db.qos:
            continue
        db.qos[n] = set_qos(db, db.qos[n], sets)
        out.names.append(n)
    out.changed = bool(out.names)
    return out


def delete_qos(ctx: EditContext, where: Options, sets: Options) -> ChangeSet:
    db = ctx.db
    ctx.auth.require_admin("Error with request")
    names = [n for n in split_list(where.get("names", "")) if n in db.qos]
    if not names:
        return ChangeSet("delete", "qos")
    for a in db.assocs.values():
        if a.default_qos in names:
            raise SlurmError(" Error with request: This request would make it so some "
                             "associations would not have access to their default qos.")
    for n in names:
        del db.qos[n]
    for a in db.assocs.values():
        a.qos = tuple(q for q in a.qos if q not in names)
    return ChangeSet("delete", "qos", True, names=names)
