"""sacctmgr's add, modify and delete of QoS (administrators only)."""

from __future__ import annotations

from corral.controller.assoc_changes import ChangeSet, EditContext
from corral.controller.assoc_grammar import split_list
from corral.controller.assoc_settings import set_qos
from corral.controller.errors import SlurmError
from corral.model.assoc import Qos

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
