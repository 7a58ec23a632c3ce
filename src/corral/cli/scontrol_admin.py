"""scontrol's administrator commands on partitions and node attributes:

    scontrol create PartitionName=NAME [KEY=VALUE…]
    scontrol update PartitionName=NAME KEY=VALUE…
    scontrol delete PartitionName=NAME
    scontrol update NodeName=NODES Features=|AvailableFeatures=|ActiveFeatures=|Weight=|Comment=

Imported by scontrol only for these commands.  Input is checked here with scontrol's
messages before it is sent; the controller checks it again."""

from __future__ import annotations

import sys

from corral.cli import client
from corral.cli.client import quote
from corral.model.partspec import PartSpecError, parse_fields

NODE_ATTR_KEYS = frozenset({"features", "availablefeatures", "activefeatures", "weight",
                            "comment"})
_PARTITION_WORDS = ("partitionname", "partition")


def _pairs(args: list[str]) -> tuple[list[tuple[str, str]], str | None]:
    """(KEY, VALUE) pairs, or the first word without `=` (scontrol refuses it)."""
    out: list[tuple[str, str]] = []
    for a in args:
        key, eq, value = a.partition("=")
        if not eq:
            return out, a
        out.append((key, value))
    return out, None


def _error(*lines: str) -> int:
    for line in lines:
        sys.stderr.write(f"scontrol: error: {line}\n")
    return 1


def _split_name(pairs: list[tuple[str, str]]) -> tuple[str, str, list[tuple[str, str]]]:
    """(the PartitionName=… word as given, the name, the other pairs)."""
    word, name, rest = "", "", []
    for key, value in pairs:
        if key.lower() in _PARTITION_WORDS and not word:
            word, name = f"{key}={value}", value
        else:
            rest.append((key, value))
    return word, name, rest


def partition_command(action: str, args: list[str]) -> int:
    """create / update / delete of a partition; the exit status."""
    pairs, bad = _pairs(args)
    if bad is not None:
        return _error(f"Invalid input: {bad}", "Request aborted")
    word, name, rest = _split_name(pairs)
    if not name:
        return _error("No PartitionName specified" if action != "delete"
                      else "Invalid deletion entity: " + (args[0] if args else ""))
    path = f"/v1/partitions/{quote(name, safe='')}"
    try:
        if action == "delete":
            if rest:
                return _error(f"Invalid input: {rest[0][0]}={rest[0][1]}", "Request aborted")
            client.request("DELETE", path)
            return 0
        try:
            parse_fields(rest)
        except PartSpecError as e:
            return _error(*e.lines)
        fields = [[k, v] for k, v in rest]
        if action == "create":
            client.post("/v1/partitions", {"name": name, "fields": fields})
        else:
            if not fields:
                return _error("No changes specified", "Request aborted")
            client.patch(path, {"fields": fields})
    except client.ApiError as e:
        if action == "delete":
            sys.stderr.write(f"delete_partition {word}: {e.message}\n")
        elif action == "create":
            sys.stderr.write(f"Error creating the partition: {e.message}\n")
        else:
            sys.stderr.write(f"slurm_update error: {e.message}\n")
        return 1
    return 0


def wants_node_attrs(args: list[str]) -> bool:
    return any(a.partition("=")[0].lower() in NODE_ATTR_KEYS for a in args)


def node_command(args: list[str]) -> int:
    """`update NodeName=… Features=… Weight=… Comment=…`, with State=/Reason= too."""
    pairs, bad = _pairs(args)
    if bad is not None:
        return _error(f"Invalid input: {bad}", "Request aborted")
    names = ""
    attrs: dict[str, str] = {}
    state_args: list[str] = []
    for key, value in pairs:
        k = key.lower()
        if k in ("nodename", "node"):
            names = value
            state_args.append(f"{key}={value}")
        elif k in NODE_ATTR_KEYS:
            if k == "weight" and not value.isdigit():
                sys.stderr.write(f"Invalid weight input: {value}\nRequest aborted\n")
                return 1
            attrs[k] = value
        else:
            state_args.append(f"{key}={value}")
    if not names:
        sys.stderr.write("No node name specified\nRequest aborted\n")
        return 1
    if len(state_args) > 1:  # State=/Reason= go the usual way
        from corral.cli.scontrol import UsageError, parse_update_node

        try:
            _, body = parse_update_node(state_args)
        except UsageError as e:
            sys.stderr.write(f"{e}\n")
            return 1
    try:
        client.patch(f"/v1/node-attributes/{quote(names, safe='')}", attrs)
        if len(state_args) > 1:
            client.patch(f"/v1/nodes/{quote(names, safe='')}", body)
    except client.ApiError as e:
        sys.stderr.write(f"slurm_update error: {e.message}\n")
        return 1
    return 0
