"""Partitions and node attributes changed at runtime: `scontrol create|update|delete
PartitionName=…` and `scontrol update NodeName=… Features=|Weight=|Comment=`.

Operators only.  A change acts at once (the next scheduling pass sees it) and is durable:
the whole runtime table (every partition, and the node attributes changed by hand) is
written, as the core's `PersistPartitions` effect through the shell's group-commit
writer, to the store's runtime_partitions and runtime_node_attrs tables (store migration
6; schema 5 kept it as the payload row of job id -1), committed before the caller is
answered and applied after the controller's recovery on the next start.  `scontrol
reconfigure` returns partitions and nodes to slurm.conf's definitions and forgets the
table, as Slurm does."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from aiohttp import web

from corral.controller.core.effects import PersistPartitions
from corral.controller.errors import (
    ESLURM_INVALID_NODE_NAME,
    ESLURM_INVALID_PARTITION_NAME,
    ESLURM_USER_ID_MISSING,
    SlurmError,
)
from corral.model import hostlists
from corral.model.node import Node, Partition
from corral.model.partspec import PartSpecError, parse_fields
from corral.store.base import NodeAttributes, RuntimePartitions

log = logging.getLogger("corral.controller")

ESLURM_PARTITION_IN_USE = 2046  # slurm_errno.h: "Partition is in use"
NODE_KEYS = {"features": "features", "availablefeatures": "features",
             "activefeatures": "features", "weight": "weight", "comment": "comment"}


def _refuse_non_operator(who: Any) -> None:
    if not who.operator:  # Slurm answers a plain user's partition update so
        raise SlurmError("Invalid user id", ESLURM_USER_ID_MISSING, 403)


def _fields(pairs: Any) -> dict[str, Any]:
    if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
            for p in pairs):
        raise SlurmError("Malformed request: expected [[KEY, VALUE], …]", 0)
    try:
        return parse_fields([(k, v) for k, v in pairs])
    except PartSpecError as e:
        raise SlurmError("; ".join(e.lines), 0) from None


def _apply(ctl: Any, part: Partition, fields: dict[str, Any]) -> None:
    if "nodes" in fields:
        names = [n for n in ctl.nodes] if fields["nodes"] == "ALL" else fields["nodes"]
        if any(n not in ctl.nodes for n in names):
            raise SlurmError("Invalid node name specified", ESLURM_INVALID_NODE_NAME)
        fields = {**fields, "nodes": list(names)}
    for name, value in fields.items():
        setattr(part, name, value)


def _relink(ctl: Any) -> None:
    """Node -> partition membership, the default partition and the scheduler's caches
    after the partition table changed."""
    for n in ctl.nodes.values():
        n.partitions = []
    for p in ctl.partitions.values():
        for x in p.nodes:
            if x in ctl.nodes:
                ctl.nodes[x].partitions.append(p.name)
    ctl.config.partitions = list(ctl.partitions.values())
    ctl._idle_views.clear()
    ctl._fits_cache.clear()


def _one_default(ctl: Any, chosen: Partition) -> None:
    if chosen.default:  # Slurm keeps one default partition: the last one named
        for p in ctl.partitions.values():
            if p is not chosen:
                p.default = False


def create_partition(ctl: Any, who: Any, name: str, pairs: Any) -> None:
    _refuse_non_operator(who)
    if not name or name in ctl.partitions or not _valid_name(name):
        raise SlurmError("Invalid partition name specified", ESLURM_INVALID_PARTITION_NAME)
    part = Partition(name=name)
    _apply(ctl, part, _fields(pairs))
    ctl.partitions[name] = part
    _one_default(ctl, part)
    _changed(ctl, who, f"partition {name} created")


def update_partition(ctl: Any, who: Any, name: str, pairs: Any) -> None:
    _refuse_non_operator(who)
    part = ctl.partitions.get(name)
    if part is None:
        raise SlurmError("Invalid partition name specified", ESLURM_INVALID_PARTITION_NAME, 404)
    fields = _fields(pairs)
    trial = Partition(**part.to_dict())
    _apply(ctl, trial, fields)  # all or nothing
    _apply(ctl, part, fields)
    _one_default(ctl, part)
    _changed(ctl, who, f"partition {name} updated: {', '.join(sorted(fields))}")


def delete_partition(ctl: Any, who: Any, name: str) -> None:
    _refuse_non_operator(who)
    if name not in ctl.partitions:
        raise SlurmError("Invalid partition name specified", ESLURM_INVALID_PARTITION_NAME, 404)
    if any(not j.state.finished and name in j.partition.split(",") for j in ctl.jobs.values()):
        raise SlurmError("Partition is in use", ESLURM_PARTITION_IN_USE)
    del ctl.partitions[name]
    _changed(ctl, who, f"partition {name} deleted")


def update_node_attrs(ctl: Any, who: Any, names: list[str], body: dict[str, Any]) -> None:
    _refuse_non_operator(who)
    nodes: list[Node] = []
    for name in names:
        n = ctl.nodes.get(name)
        if n is None:
            raise SlurmError("Invalid node name specified", ESLURM_INVALID_NODE_NAME, 404)
        nodes.append(n)
    changes: dict[str, Any] = {}
    for key, value in body.items():
        field = NODE_KEYS.get(str(key).lower())
        if field is None or not isinstance(value, str):
            raise SlurmError(f"Update of this parameter is not supported: {key}", 0)
        if field == "features":
            changes[field] = [f for f in value.split(",") if f.strip()]
        elif field == "weight":
            if not value.isdigit() or int(value) >= 2**32 - 1:
                raise SlurmError(f"Invalid weight: {value}", 0)
            changes[field] = int(value)
        else:
            changes[field] = value
    for n in nodes:
        for field, value in changes.items():
            setattr(n, field, list(value) if isinstance(value, list) else value)
    _changed(ctl, who, f"nodes {hostlists.compress(names)} updated: {', '.join(sorted(changes))}")


def _valid_name(name: str) -> bool:
    return len(name) <= 64 and all(c.isalnum() or c in "-_." for c in name)


def _changed(ctl: Any, who: Any, what: str) -> None:
    _relink(ctl)
    save(ctl)
    log.info("%s by %s", what, who.user)
    ctl.request_schedule()


# ---- the durable record ---------------------------------------------------------------
def save(ctl: Any) -> None:
    """Queue the runtime table for the writer (the caller awaits durability): copies, as
    they are now."""
    _write(ctl, RuntimePartitions(
        [dataclasses.replace(p, nodes=list(p.nodes)) for p in ctl.partitions.values()],
        {name: NodeAttributes(list(n.features), n.weight, n.comment)
         for name, n in ctl.nodes.items()}))


def _write(ctl: Any, table: RuntimePartitions) -> None:
    """Queue the table for the writer; `await ctl.durable()` makes it durable."""
    ctl.core.out.emit(PersistPartitions(table))


def forget(ctl: Any) -> None:
    """`scontrol reconfigure`: slurm.conf's partitions, features and weights win again;
    node comments stay (they are not slurm.conf's)."""
    _write(ctl, RuntimePartitions(None, {name: NodeAttributes(comment=n.comment)
                                         for name, n in ctl.nodes.items() if n.comment}))


def restore(ctl: Any) -> None:
    """After recovery: the partition table and node attributes as last changed at runtime."""
    try:
        table = ctl.store.load_runtime_partitions()
    except Exception:
        log.exception("the runtime partition table in the store is unreadable; slurm.conf's "
                      "is used")
        return
    if table.partitions is not None:
        ctl.partitions.clear()
        for p in table.partitions:
            p.nodes = [x for x in p.nodes if x in ctl.nodes]
            ctl.partitions[p.name] = p
    for name, attrs in table.nodes.items():
        n = ctl.nodes.get(name)
        if n is None:
            continue
        if attrs.features is not None:
            n.features = list(attrs.features)
        if attrs.weight is not None:
            n.weight = attrs.weight
        n.comment = attrs.comment
    _relink(ctl)
    if table.partitions is not None:
        log.info("runtime partition table restored: %s", ", ".join(ctl.partitions) or "none")


# ---- API ----------------------------------------------------------------------------------
def add_routes(router: web.UrlDispatcher, ctl: Any) -> None:
    from corral.controller.server import json_body as body_of
    from corral.controller.server import json_response, peer_identity

    async def create(request: web.Request) -> web.Response:
        body = await body_of(request)
        create_partition(ctl, peer_identity(request, ctl), str(body.get("name") or ""),
                         body.get("fields", []))
        await ctl.durable()
        return json_response({"ok": True})

    async def update(request: web.Request) -> web.Response:
        body = await body_of(request)
        update_partition(ctl, peer_identity(request, ctl), request.match_info["name"],
                         body.get("fields", []))
        await ctl.durable()
        return json_response({"ok": True})

    async def delete(request: web.Request) -> web.Response:
        delete_partition(ctl, peer_identity(request, ctl), request.match_info["name"])
        await ctl.durable()
        return json_response({"ok": True})

    async def node_attrs(request: web.Request) -> web.Response:
        body = await body_of(request)
        try:
            names = hostlists.expand(request.match_info["names"])
        except hostlists.HostlistError:
            raise SlurmError("Invalid node name specified", ESLURM_INVALID_NODE_NAME) from None
        update_node_attrs(ctl, peer_identity(request, ctl), names, body)
        await ctl.durable()
        return json_response({"ok": True})

    router.add_post("/v1/partitions", create)
    router.add_patch("/v1/partitions/{name}", update)
    router.add_delete("/v1/partitions/{name}", delete)
    router.add_patch("/v1/node-attributes/{names}", node_attrs)
