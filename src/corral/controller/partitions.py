"""Partitions and node attributes changed at runtime: `scontrol create|update|delete
PartitionName=…` and `scontrol update NodeName=… Features=|Weight=|Comment=`.

Operators only.  A change acts at once (the next scheduling pass sees it) and is durable:
the whole runtime table (every partition, and the node attributes changed by hand) is one
record, kept through the group-commit writer as the payload of job id `RECORD_ID` tagged
`RECORD_TAG` (as reservations keep theirs under id 0), committed before the caller is
answered and applied after the controller's recovery on the next start.  `scontrol reconfigure` returns partitions and
nodes to slurm.conf's definitions and forgets the record, as Slurm does."""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web

from corral.controller.errors import (
    ESLURM_INVALID_NODE_NAME,
    ESLURM_INVALID_PARTITION_NAME,
    ESLURM_USER_ID_MISSING,
    SlurmError,
)
from corral.model import hostlists
from corral.model.node import Node, Partition
from corral.model.partspec import PartSpecError, parse_fields
from corral.store.base import JobPayload

log = logging.getLogger("corral.controller")

RECORD_ID = -1  # no job has it; reservations use 0
RECORD_TAG = "corral-partitions-v1"
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
    """Queue the runtime table for the writer (the caller awaits durability)."""
    nodes = {name: {"features": list(n.features), "weight": n.weight, "comment": n.comment}
             for name, n in ctl.nodes.items()}
    _write(ctl, {"partitions": [p.to_dict() for p in ctl.partitions.values()], "nodes": nodes})


def _write(ctl: Any, record: dict[str, Any]) -> None:
    """Queue the record for the writer; `await ctl.durable()` makes it durable."""
    text = json.dumps(record, separators=(",", ":"))
    ctl.writer.payload(RECORD_ID, JobPayload(text, {}, [RECORD_TAG]))
    ctl.writer.kick()


def forget(ctl: Any) -> None:
    """`scontrol reconfigure`: slurm.conf's partitions, features and weights win again;
    node comments stay (they are not slurm.conf's)."""
    comments = {name: {"comment": n.comment} for name, n in ctl.nodes.items() if n.comment}
    _write(ctl, {"nodes": comments})


def restore(ctl: Any) -> None:
    """After recovery: the partition table and node attributes as last changed at runtime."""
    try:
        payload = ctl.store.load_payload(RECORD_ID)
    except Exception:  # a store that refuses an id no job has: nothing was saved
        payload = None
    if payload is None or payload.argv[:1] != [RECORD_TAG]:
        return
    try:
        record = json.loads(payload.script)
        parts = None if "partitions" not in record else \
            [Partition(**p) for p in record["partitions"]]
        node_attrs = dict(record.get("nodes") or {})
    except (ValueError, TypeError, KeyError, AttributeError):
        log.error("the runtime partition table in the store is unreadable; slurm.conf's is used")
        return
    if parts is not None:
        ctl.partitions.clear()
        for p in parts:
            p.nodes = [x for x in p.nodes if x in ctl.nodes]
            ctl.partitions[p.name] = p
    for name, attrs in node_attrs.items():
        n = ctl.nodes.get(name)
        if n is None or not isinstance(attrs, dict):
            continue
        if "features" in attrs:
            n.features = [str(f) for f in attrs["features"] or []]
        if isinstance(attrs.get("weight"), int):
            n.weight = attrs["weight"]
        n.comment = str(attrs.get("comment") or "")
    _relink(ctl)
    if parts is not None:
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
