"""sinfo: partitions and nodes, printed as Slurm 22.05 prints them.

`format_sinfo()` is the pure part (node and partition dicts + `now` → text).

State suffixes: Corral's node records can say "not responding" (`*`) and
drained/draining; Slurm's other suffixes (`~` powered off, `#` powering up,
`!`/`%` powering down, `$` maintenance, `@` pending reboot, `^` rebooting,
`-` planned) describe power saving, reservations and reboots, which Corral's
nodes do not have, so they never appear.
"""

from __future__ import annotations

import os
import sys
import time

from corral.cli import client
from corral.cli.fmt import (
    ClusterRefused,
    Field,
    Format,
    UsageError,
    asked_cluster,
    getopt_long,
    parse_long,
    parse_percent,
    renderer,
    stamp,
)
from corral.model.hostlists import HostlistError, compress, expand
from corral.model.timefmt import format_duration

# Annotations only: `typing` would cost every sinfo start ~3 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from corral.cli.fmt import Getter

    Node = dict[str, Any]
    Part = dict[str, Any]

Value = str | None

_LONG_STATE = {"idle": "idle", "mix": "mixed", "alloc": "allocated", "drain": "drained",
               "drng": "draining", "down": "down", "unk": "unknown", "resv": "reserved",
               "maint": "maint"}
# slurm.h's node state numbers and flags: sinfo orders lines by them, highest first.
_STATE_NUM = {"unk": 0, "down": 1, "idle": 2, "alloc": 3, "mix": 5, "drain": 0x200 | 2,
              "drng": 0x200 | 5, "resv": 0x20 | 2, "maint": 0x8000 | 2}
_NO_RESPOND = 0x800


def _short(n: Node) -> str:
    return str(n.get("state_short") or "unk")


def _base(n: Node) -> str:
    return _short(n).rstrip("*")


def _long(n: Node) -> str:
    s = _short(n)
    star = "*" if s.endswith("*") else ""
    return _LONG_STATE.get(s.rstrip("*"), s.rstrip("*")) + star


def _state_num(n: Node) -> int:
    return _STATE_NUM.get(_base(n), 0) | (_NO_RESPOND if _short(n).endswith("*") else 0)


def mark_reserved(nodes: list[Node], marks: dict[str, str]) -> None:
    """Nodes in an active reservation: "maint" unless allocated, mixed, drained or down,
    "resv" only when idle (node_state_string_compact's MAINT and RESERVED flags)."""
    for n in nodes:
        mark = marks.get(n.get("name", ""))
        if not mark:
            continue
        short = _short(n)
        base, star = short.rstrip("*"), short[len(short.rstrip("*")):]
        if mark == "resv" and short == "idle":
            n["state_short"] = "resv"
        elif mark == "maint" and base not in ("alloc", "mix", "drain", "drng", "down"):
            n["state_short"] = "maint" + star


def _node_class(n: Node) -> str:
    """A/I/O: allocated (some job on it), idle, other (drained, down)."""
    b = _base(n)
    if b in ("alloc", "mix"):
        return "A"
    if b in ("idle", "resv", "maint") and not _short(n).endswith("*"):
        return "I"
    return "O"


def _part_name(p: Part, width: int) -> str:
    name = str(p.get("name", ""))
    if p.get("default"):
        if width == 0 or len(name) < width:
            name += "*"
        else:
            name = name[:width - 1] + "*"
    return name


def _timelimit(seconds: int | None, none: str = "infinite") -> str:
    if seconds is None:
        return "n/a"
    if seconds < 0:
        return none
    return format_duration(seconds)


def _range(values: list[Any]) -> str:
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def min_plus(values: list[int]) -> str:
    """A size over a line's nodes as Slurm prints it: the value, or "min+" when they differ."""
    if not values:
        return "0"
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}+"


def _sizes(g: Group, key: str, default: int = 0) -> str:
    return min_plus([int(n.get(key, default) or 0) for n in g.nodes])


def _sct(g: Group) -> str:
    return ":".join(_sizes(g, k, 1) for k in ("sockets", "cores_per_socket",
                                               "threads_per_core"))


# Corral's agents listen on no port (each connects to the controller), and Corral has no
# NodeName Port= or SlurmdPort= setting: a node prints what Slurm prints for a node
# without Port= on a cluster with the default SlurmdPort.
SLURMD_PORT = 6818


class Group:
    # Plain classes here, not dataclasses: `dataclasses` costs ~10 ms of start time.
    __slots__ = ("part", "nodes", "cluster")

    def __init__(self, part: Part | None, nodes: list[Node]) -> None:
        self.part = part
        self.nodes = nodes
        self.cluster: str | None = None  # named only when -M asked for clusters


EXACT = "exact"


class Column:
    """A value of a field for a group of nodes: (header, function of the group)."""

    __slots__ = ("header", "value", "per_node")

    def __init__(self, header: str, value: Callable[[Group, int], Value],
                 per_node: bool | str) -> None:
        self.header = header
        self.value = value  # (group, field width) → text
        # What separates one line from the next (Slurm's _match_node_data): True, always;
        # EXACT, only with -e (sizes, loads, port, version: otherwise shown as "min+").
        self.per_node = per_node


def _first(g: Group) -> Node:
    return g.nodes[0] if g.nodes else {}


def _p(g: Group, key: str, default: Any = None) -> Any:
    return (g.part or {}).get(key, default)


def _ai(g: Group) -> tuple[int, int, int, int]:
    cls = [_node_class(n) for n in g.nodes]
    return cls.count("A"), cls.count("I"), cls.count("O"), len(cls)


def _root(g: Group) -> str:
    if g.part is None:
        return "n/a"
    return "yes" if g.part.get("root_only") else "no"


def _cpu_aiot(g: Group) -> str:
    a = i = o = t = 0
    for n in g.nodes:
        cpus = int(n.get("cpus") or 0)
        used = int(n.get("alloc_cpus") or 0)
        t += cpus
        if _node_class(n) == "O":
            o += cpus
        else:
            a += used
            i += cpus - used
    return f"{a}/{i}/{o}/{t}"


def _gres(n: Node) -> Value:
    if not n.get("gpus"):
        return None
    kind = f"gpu:{n['gpu_type']}" if n.get("gpu_type") else "gpu"
    return f"{kind}:{n['gpus']}"


def _ranges(ids: list[int]) -> str:
    spans: list[list[int]] = []
    for i in sorted(ids):
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _gres_used(n: Node) -> Value:
    """GresUsed: the GPUs in use on the node and their indexes ("gpu:2(IDX:0-1)")."""
    if not n.get("gpus"):
        return None
    kind = f"gpu:{n['gpu_type']}" if n.get("gpu_type") else "gpu"
    used = [int(i) for i in n.get("alloc_gpus") or []]
    return f"{kind}:{len(used)}(IDX:{_ranges(used) if used else 'N/A'})"


def _state_complete(g: Group) -> str:
    """StateComplete: the node's state with all its flags, lower case ("idle+drain")."""
    if not g.nodes:
        return "n/a"
    state = str(g.nodes[0].get("state") or _long(g.nodes[0]))
    return state.lower().rstrip("*")


def _state_text(g: Group, long: bool) -> str:
    if not g.nodes:
        return "n/a"
    return _long(g.nodes[0]) if long else _short(g.nodes[0])


def _names(g: Group, key: str) -> str:
    vals = [str(n.get(key) or n.get("name", "")) for n in g.nodes]
    return compress(vals) if vals else ""


def _reason_user(n: Node, with_uid: bool) -> str:
    user = n.get("reason_user")
    if not user:
        return "Unknown"
    return f"{user}({n.get('reason_uid', 0)})" if with_uid else str(user)


def _cpu_load(g: Group) -> str:
    loads = [float(n.get("cpu_load") or 0.0) for n in g.nodes]
    if not loads:
        return "N/A"
    lo, hi = min(loads), max(loads)
    return f"{lo:.2f}" if lo == hi else f"{lo:.2f}-{hi:.2f}"


def _free_mem(g: Group) -> str:
    vals = [n.get("free_mem") for n in g.nodes]
    if not vals or any(v is None for v in vals):
        return "N/A"
    return _range(vals)


_C = Column
COLUMNS: dict[str, Column] = {
    "a": _C("AVAIL", lambda g, w: str(_p(g, "state", "UP")).lower().replace("inactive", "inact"),
            False),
    "A": _C("NODES(A/I)", lambda g, w: "{}/{}".format(*_ai(g)[:2]), False),
    "b": _C("ACTIVE_FEATURES", lambda g, w: ",".join(_first(g).get("features") or []) or None,
            True),
    "B": _C("MAX_CPUS_PER_NODE", lambda g, w: str(_p(g, "max_cpus_per_node") or "UNLIMITED"),
            False),
    "c": _C("CPUS", lambda g, w: _sizes(g, "cpus"), EXACT),
    "C": _C("CPUS(A/I/O/T)", lambda g, w: _cpu_aiot(g), False),
    "d": _C("TMP_DISK", lambda g, w: _sizes(g, "tmp_disk"), EXACT),
    "D": _C("NODES", lambda g, w: str(len(g.nodes)), False),
    "e": _C("FREE_MEM", lambda g, w: _free_mem(g), EXACT),
    "E": _C("REASON", lambda g, w: _first(g).get("reason") or "none", True),
    "f": _C("AVAIL_FEATURES", lambda g, w: ",".join(_first(g).get("features") or []) or None,
            True),
    "F": _C("NODES(A/I/O/T)", lambda g, w: "{}/{}/{}/{}".format(*_ai(g)), False),
    "g": _C("GROUPS", lambda g, w: str(_p(g, "allow_groups", "ALL")).replace("ALL", "all"),
            False),
    "G": _C("GRES", lambda g, w: _gres(_first(g)), True),
    "h": _C("OVERSUBSCRIBE", lambda g, w: str(_p(g, "oversubscribe", "NO")), False),
    "H": _C("TIMESTAMP", lambda g, w: stamp(_first(g).get("reason_time")), True),
    "I": _C("PRIO_JOB_FACTOR", lambda g, w: str(_p(g, "priority_job_factor", 1)), False),
    "l": _C("TIMELIMIT", lambda g, w: _timelimit(_p(g, "max_time", -1)), False),
    "L": _C("DEFAULTTIME", lambda g, w: _timelimit(_p(g, "default_time")), False),
    "m": _C("MEMORY", lambda g, w: _sizes(g, "real_memory"), EXACT),
    "M": _C("PREEMPT_MODE", lambda g, w: "OFF", False),
    "n": _C("HOSTNAMES", lambda g, w: _names(g, "hostname"), True),
    "N": _C("NODELIST", lambda g, w: compress([n["name"] for n in g.nodes]), False),
    "o": _C("NODE_ADDR", lambda g, w: _names(g, "addr"), True),
    "O": _C("CPU_LOAD", lambda g, w: _cpu_load(g), EXACT),
    "p": _C("PRIO_TIER", lambda g, w: str(_p(g, "priority_tier", 1)), False),
    "P": _C("PARTITION", lambda g, w: _part_name(g.part, w) if g.part else "", False),
    "r": _C("ROOT", lambda g, w: _root(g), False),
    "R": _C("PARTITION", lambda g, w: str(_p(g, "name", "")), False),
    "s": _C("JOB_SIZE", lambda g, w: "{}-{}".format(
        max(1, _p(g, "min_nodes", 1) or 1), _p(g, "max_nodes") or "infinite"), False),
    "S": _C("ALLOCNODES", lambda g, w: "all", False),
    "t": _C("STATE", lambda g, w: _state_text(g, False), True),
    "T": _C("STATE", lambda g, w: _state_text(g, True), True),
    "u": _C("USER", lambda g, w: _reason_user(_first(g), False), True),
    "U": _C("USER", lambda g, w: _reason_user(_first(g), True), True),
    "v": _C("VERSION", lambda g, w: "22.05.8" if _first(g).get("registered") else "N/A",
            EXACT),
    "V": _C("CLUSTER", lambda g, w: g.cluster or "N/A", False),
    "w": _C("WEIGHT", lambda g, w: _sizes(g, "weight", 1), EXACT),
    "X": _C("SOCKETS", lambda g, w: _sizes(g, "sockets", 1), EXACT),
    "Y": _C("CORES", lambda g, w: _sizes(g, "cores_per_socket", 1), EXACT),
    "Z": _C("THREADS", lambda g, w: _sizes(g, "threads_per_core", 1), EXACT),
    "z": _C("S:C:T", lambda g, w: _sct(g), EXACT),
}
# Fields only -O names (no %-letter); keys are the -O names themselves.  (Reservation came
# with Slurm 23.02: 22.05 reports it as an invalid name.)
COLUMNS.update({
    "gresused": _C("GRES_USED", lambda g, w: _gres_used(_first(g)), True),
    "allocmem": _C("ALLOCMEM", lambda g, w: str(_first(g).get("alloc_mem") or 0), True),
    "statecomplete": _C("STATECOMPLETE", lambda g, w: _state_complete(g), True),
    "comment": _C("COMMENT", lambda g, w: None, False),
    "extra": _C("EXTRA", lambda g, w: None, False),
    "port": _C("PORT", lambda g, w: str(SLURMD_PORT) if g.nodes else "0", EXACT),
})

LONG_FIELDS: dict[str, str] = {
    "allocnodes": "S", "available": "a", "cluster": "V", "cores": "Y", "cpus": "c",
    "cpusload": "O", "cpusstate": "C", "defaulttime": "L", "disk": "d", "features": "f",
    "features_act": "b", "freemem": "e", "gres": "G", "groups": "g", "maxcpuspernode": "B",
    "memory": "m", "nodeaddr": "o", "nodeai": "A", "nodeaiot": "F", "nodehost": "n",
    "nodelist": "N", "nodes": "D", "oversubscribe": "h", "partition": "P",
    "partitionname": "R", "preemptmode": "M", "priorityjobfactor": "I", "prioritytier": "p",
    "reason": "E", "root": "r", "size": "s", "socketcorethread": "z", "sockets": "X",
    "statecompact": "t", "statelong": "T", "threads": "Z", "time": "l", "timestamp": "H",
    "user": "u", "userlong": "U", "version": "v", "weight": "w",
}
LONG_FIELDS.update({name: name for name in COLUMNS if len(name) > 1})
LONG_FIELDS["share"] = "h"  # Slurm's older name of oversubscribe


def all_format() -> Format:
    """Slurm's "%all" (`-o %all`, `-O All`): every letter, lower case ones followed by "|",
    upper case ones by " |" (the last by " "), whole; letters sinfo does not know are left
    out with their separators (sinfo/opts.c builds the same spec and skips them)."""
    spec = ("%a" + "".join(f"|%{c}" for c in "bcdefghijklmnopqrstuvwxyz")
            + "".join(f"|%{c} " for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    fmt = parse_percent(spec, COLUMNS)
    return Format("", [f for f in fmt.fields if f.literal is None], [])


def parse_long_format(text: str) -> Format:
    """A -O spec: Slurm's names, "All" standing for every %-letter (see all_format)."""
    fields: list[Field] = []
    invalid: list[str] = []
    for item in text.split(","):
        if item.partition(":")[0].strip().lower() == "all":
            fields.extend(all_format().fields)
            continue
        fmt = parse_long(item, LONG_FIELDS)
        fields.extend(fmt.fields)
        invalid.extend(fmt.invalid)
    return Format("", fields, invalid)


class Options:
    __slots__ = ("fmt", "letters", "header", "long_listing", "node_oriented", "summarize",
                 "reasons", "partitions", "nodes", "states", "show_hidden", "spec", "clusters",
                 "clusters_env", "exact", "cluster_name", "reservations")

    def __init__(self, fmt: Format, letters: dict[str, str], header: bool = True,
                 long_listing: bool = False, node_oriented: bool = False,
                 summarize: bool = False, reasons: bool = False,
                 partitions: list[str] | None = None, nodes: list[str] | None = None,
                 states: list[str] | None = None, show_hidden: bool = False,
                 spec: str | None = None) -> None:
        self.fmt = fmt
        self.letters = letters  # field key → letter (identity for -o)
        self.header = header
        self.long_listing = long_listing
        self.node_oriented = node_oriented
        self.summarize = summarize
        self.reasons = reasons
        self.partitions = partitions
        self.nodes = nodes
        self.states = states
        self.show_hidden = show_hidden
        self.spec = spec  # a %-spec still to parse once '#' widths are known
        self.reservations = False  # -T: the reservations instead (cli/scontrol_resv.py)
        self.clusters: str | None = None  # -M/--clusters or SLURM_CLUSTERS
        self.clusters_env = False
        self.exact = False  # -e: sizes, loads, port and version separate lines too
        self.cluster_name: str | None = None  # the cluster -M reached (%V prints it)


def default_format(opts_long: bool, node_oriented: bool, summarize: bool, reasons: bool) -> str:
    """Slurm's built-in formats; `#` stands for a width computed from the data."""
    if summarize:
        return "%#P %.5a %.10l %.16F %N"
    if reasons:
        return "%20E %12U %19H %6t %N" if opts_long else "%20E %9u %19H %N"
    if node_oriented:
        if opts_long:
            return "%#N %.6D %.#P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"
        return "%#N %.6D %.#P %6t"
    if opts_long:
        return "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
    return "%#P %.5a %.10l %.6D %.6t %N"


def _fill_widths(spec: str, parts: list[Part], nodes: list[Node]) -> str:
    part_w = max([9] + [len(str(p.get("name", ""))) + (1 if p.get("default") else 0)
                        for p in parts])
    node_w = max([9] + [len(str(n.get("name", ""))) for n in nodes])
    return spec.replace("#P", f"{part_w}P").replace("#N", f"{node_w}N")


def _matches_state(n: Node, states: list[str]) -> bool:
    base, star = _base(n), _short(n).endswith("*")
    for s in states:
        if s in ("no_respond",) and star:
            return True
        if s == "responding" and not star:
            return True
        if s in ("drain",) and base in ("drain", "drng"):
            return True
        if s in ("drained", "drain") and base == "drain":
            return True
        if s == "draining" and base == "drng":
            return True
        if s in ("idle", "down", "maint") and base == s:
            return True
        if s in ("resv", "reserved") and base == "resv":
            return True
        if s in ("mix", "mixed") and base == "mix":
            return True
        if s in ("alloc", "allocated") and base == "alloc":
            return True
        if s == "all":
            return True
    return False


def _part_node_names(p: Part) -> list[str]:
    names: list[str] = []
    for item in p.get("nodes") or []:
        names.extend(expand(item) if "[" in item or "," in item else [item])
    return names


# Partition fields that tell lines apart (Slurm's partition-level MATCH_FLAGs).
_PART_MATCH = frozenset("aghIlLMprsB")


def _groups(nodes: list[Node], parts: list[Part], opts: Options) -> list[Group]:
    by_name = {n["name"]: n for n in nodes}
    keys = [opts.letters.get(f.key, f.key) for f in opts.fmt.fields if f.literal is None]
    per_node = [k for k in keys if COLUMNS[k].per_node is True
                or (opts.exact and COLUMNS[k].per_node == EXACT)]
    wanted_nodes = set(opts.nodes) if opts.nodes is not None else None
    # Slurm keeps partitions apart only when the format shows one (%P, %R); otherwise a
    # line gathers alike nodes of every partition, each node once (_match_part_data), and
    # only the partition fields shown (_PART_MATCH) still separate lines.
    by_partition = "P" in keys or "R" in keys
    part_fields = [k for k in keys if k in _PART_MATCH]
    shared: dict[tuple[Any, ...], tuple[Group, set[str]]] = {}
    groups: list[Group] = []
    node_lines: list[tuple[str, int, Group]] = []
    for pi, p in enumerate(parts):
        if opts.partitions is not None and p.get("name") not in opts.partitions:
            continue
        if p.get("hidden") and not opts.show_hidden and opts.partitions is None:
            continue
        members = [by_name[name] for name in _part_node_names(p) if name in by_name]
        if wanted_nodes is not None:
            members = [n for n in members if n["name"] in wanted_nodes]
        if opts.states is not None:
            members = [n for n in members if _matches_state(n, opts.states)]
        if opts.reasons:
            members = [n for n in members if n.get("reason")]
        if opts.node_oriented:
            for n in members:
                node_lines.append((n["name"], pi, Group(p, [n])))
            continue
        if opts.summarize:
            groups.append(Group(p, members))
            continue
        # Nodes that print alike share one line; lines are ordered by state, highest first.
        lines: dict[tuple[Any, ...], tuple[Group, set[str]]] = {} if by_partition else shared
        created: list[Group] = []
        for n in members:
            key = tuple(COLUMNS[k].value(Group(p, [n]), 0) for k in part_fields + per_node)
            line = lines.get(key)
            if line is None:
                line = lines[key] = (Group(p, []), set())
                created.append(line[0])
            if n["name"] not in line[1]:
                line[1].add(n["name"])
                line[0].nodes.append(n)
        ordered = sorted(created, key=lambda g: -_state_num(g.nodes[0]))
        if not ordered and not opts.reasons and (opts.states is not None
                                                 or wanted_nodes is not None):
            ordered = [Group(p, [])]  # Slurm still lists the partition, with no nodes
        groups.extend(ordered)
    if opts.node_oriented:
        node_lines.sort(key=lambda t: (_natural(t[0]), t[1]))
        return [g for _, _, g in node_lines]
    if opts.reasons:
        merged: dict[tuple[Any, ...], Group] = {}
        for g in groups:
            for n in g.nodes:
                key = (n.get("reason"), n.get("reason_user"), n.get("reason_time"))
                grp = merged.setdefault(key, Group(None, []))
                if all(m["name"] != n["name"] for m in grp.nodes):
                    grp.nodes.append(n)
        return list(merged.values())
    return groups


def _natural(name: str) -> tuple[Any, ...]:
    import re

    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def format_sinfo(nodes: list[Node], parts: list[Part], now: float, opts: Options) -> str:
    """The whole sinfo output for these node and partition records."""
    lines: list[str] = []
    if opts.long_listing and opts.header:  # -h drops the date line too (sinfo.c)
        lines.append(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)))

    def letter(f: Field) -> str:
        return opts.letters.get(f.key, f.key)

    if opts.header:
        def header_of(f: Field) -> Getter:
            text = COLUMNS[letter(f)].header
            return lambda _group: text
        lines.append(renderer(opts.fmt, header_of)(None))

    def getter(f: Field) -> Getter:
        value, width = COLUMNS[letter(f)].value, f.width
        return lambda g: value(g, width)

    line = renderer(opts.fmt, getter)
    for g in _groups(nodes, parts, opts):
        g.cluster = opts.cluster_name
        lines.append(line(g))
    return "".join(line + "\n" for line in lines)


# ---- options --------------------------------------------------------------

SHORT = "abdehi:lM:n:No:O:p:rRsS:t:TvV"
LONG = ["all", "bg", "dead", "exact", "federation", "future", "help", "hide", "iterate=",
        "local", "long", "cluster=", "clusters=", "nodes=", "Node", "noconvert", "noheader",
        "format=", "Format=", "partition=", "responding", "list-reasons", "summarize",
        "sort=", "states=", "reservation", "usage", "verbose", "version", "json", "yaml"]

USAGE = """\
Usage: sinfo [-abdelNRrsTv] [-i seconds] [-t states] [-p partition] [-n nodes]
             [-S fields] [-o format] [-O Format] [--federation] [--local]
             [--sibling]
"""

_VALID_STATES = ("unknown,down,idle,allocated,?,mixed,future,drain,drained,draining,"
                 "no_respond,reserved,perfctrs,cloud,completing,powering_down,powered_down,"
                 "power_down,powering_up,fail,maint,reboot,reboot^,unknown")
_STATE_WORDS = {"unknown", "unk", "down", "idle", "allocated", "alloc", "mixed", "mix",
                "drain", "drained", "draining", "drng", "no_respond", "responding", "all",
                "future", "fail", "maint", "completing", "cloud", "reserved", "resv",
                "powered_down", "power_down", "powering_down", "powering_up", "reboot",
                "reboot^", "perfctrs", "planned", "inval", "comp"}


def _help_text() -> str:
    return USAGE.replace("Usage: sinfo", "Usage: sinfo [OPTIONS]", 1).split("\n")[0] + """
  -a, --all                  show all partitions (including hidden and those
                             not accessible)
  -d, --dead                 show only non-responding nodes
  -e, --exact                group nodes only on exact match of configuration
  -h, --noheader             no headers on output
  --hide                     do not show hidden or non-accessible partitions
  -i, --iterate=seconds      specify an iteration period
  -l, --long                 long output - displays more information
      --local                show only local cluster in a federation.
  -M, --clusters=names       clusters to issue commands to (Corral: its own
                             cluster name or "all").
  -n, --nodes=NODES          report on specific node(s)
  -N, --Node                 Node-centric format
  -o, --format=format        format specification
  -O, --Format=format        long format specification
  -p, --partition=PARTITION  report on specific partition
  -r, --responding           report only responding nodes
  -R, --list-reasons         list reason nodes are down or drained
  -s, --summarize            report state summary only
  -S, --sort=fields          comma separated list of fields to sort on
  -t, --states=node_state    specify the what states of nodes to view
  -T, --reservation          show only reservation information
  -v, --verbose              verbosity level
  -V, --version              output version information and exit

Help options:
  --help                     show this help message
  --usage                    display brief usage message
"""


def parse_args(argv: Sequence[str]) -> Options | int:
    try:
        opts_list, _rest = getopt_long(argv, SHORT, LONG)  # Slurm ignores extra words
    except UsageError as e:
        sys.stderr.write(f"sinfo: {e}\nTry \"sinfo --help\" for more information\n")
        return 1
    fmt_text: str | None = None
    long_text: str | None = None
    o = Options(fmt=Format("", [], []), letters={})
    o.clusters = os.environ.get("SLURM_CLUSTERS") or None
    o.clusters_env = o.clusters is not None
    for opt, val in opts_list:
        if opt == "--help":
            sys.stdout.write(_help_text())
            return 0
        if opt == "--usage":
            sys.stdout.write(USAGE)
            return 0
        if opt in ("-V", "--version"):
            sys.stdout.write("slurm 22.05.8\n")
            return 0
        if opt in ("-h", "--noheader"):
            o.header = False
        elif opt in ("-l", "--long"):
            o.long_listing = True
        elif opt in ("-N", "--Node"):
            o.node_oriented = True
        elif opt in ("-s", "--summarize"):
            o.summarize = True
        elif opt in ("-R", "--list-reasons"):
            o.reasons = True
        elif opt in ("-a", "--all"):
            o.show_hidden = True
        elif opt in ("-e", "--exact"):
            o.exact = True
        elif opt in ("-o", "--format"):
            fmt_text = val
        elif opt in ("-O", "--Format"):
            long_text = val
        elif opt in ("-p", "--partition"):
            o.partitions = [p for p in val.split(",") if p]
        elif opt in ("-n", "--nodes"):
            try:
                o.nodes = expand(val)
            except HostlistError:
                sys.stderr.write(f"sinfo: error: Invalid node name specified: {val}\n")
                return 1
        elif opt in ("-d", "--dead"):
            o.states = (o.states or []) + ["no_respond"]
        elif opt in ("-r", "--responding"):
            o.states = (o.states or []) + ["responding"]
        elif opt in ("-t", "--states"):
            states = [s.strip().lower() for s in val.split(",") if s.strip()]
            for s in states:
                if s not in _STATE_WORDS:
                    sys.stderr.write(f"sinfo: error: Bad state string: \"{val}\"\n"
                                     f"sinfo: error: valid states: {_VALID_STATES}\n")
                    return 1
            o.states = (o.states or []) + states
        elif opt in ("-i", "--iterate"):
            if not val.isdigit() or int(val) <= 0:
                sys.stderr.write(f"sinfo: error: --iterate={val}\n")
                return 1
        elif opt in ("-M", "--clusters", "--cluster"):
            o.clusters, o.clusters_env = val, False
        elif opt in ("-T", "--reservation"):
            o.reservations = True
        elif opt in ("--json", "--yaml"):
            sys.stderr.write(f"sinfo: error: {opt} is not supported by Corral\n")
            return 1
        # -v, -S, --hide, --local, --federation, -M: accepted, nothing to change here.
    if long_text is not None:
        o.fmt = parse_long_format(long_text)
        o.letters = dict(LONG_FIELDS)
        for name in o.fmt.invalid:
            # Slurm's own wording for -O (its -o error says "node")
            sys.stderr.write(f"sinfo: error: Invalid job format specification: {name}\n")
    else:
        o.spec = fmt_text if fmt_text is not None else default_format(
            o.long_listing, o.node_oriented, o.summarize, o.reasons)
    return o


def prepare(o: Options, nodes: list[Node], parts: list[Part]) -> None:
    """Parse a -o spec now that '#' widths can be computed from the data."""
    if o.spec is not None:
        # "%all" is the whole spec after any prefix text, as sinfo/opts.c checks it
        prefix, sep, rest = o.spec.partition("%")
        if sep and rest.lower() == "all":
            o.fmt = all_format()
            o.fmt.prefix = prefix
            o.spec = None
    if o.spec is not None:
        o.fmt = parse_percent(_fill_widths(o.spec, parts, nodes), COLUMNS)
        o.spec = None
        for letter in o.fmt.invalid:
            sys.stderr.write(f"Invalid node format specification: {letter}\n")


def _main(argv: list[str]) -> int:
    parsed = parse_args(argv)
    if isinstance(parsed, int):
        return parsed
    cluster_line = ""
    try:
        mine = asked_cluster("sinfo", parsed.clusters, parsed.clusters_env)
    except ClusterRefused:
        return 1
    if mine is not None:
        parsed.cluster_name = mine
        if parsed.header:  # Slurm names the cluster only above a header
            cluster_line = f"CLUSTER: {mine}\n"
    if parsed.reservations:
        from corral.cli.scontrol_resv import sinfo_reservations
        return sinfo_reservations(parsed.header)
    answer = client.get("/v1/nodes")
    sys.stdout.write(cluster_line)
    sys.stdout.write(sinfo_text(parsed, answer))
    sys.stdout.flush()
    return 0


def sinfo_text(o: Options, answer: dict[str, Any]) -> str:
    """What sinfo prints with options `o` from the controller's GET /v1/nodes answer (the
    controller prints a plain `sinfo` with it too: controller/api_text.py)."""
    nodes = answer.get("nodes", [])
    mark_reserved(nodes, answer.get("reserved") or {})
    parts = answer.get("partitions", [])
    now = float(answer.get("now") or time.time())
    prepare(o, nodes, parts)
    return format_sinfo(nodes, parts, now, o)


def main(argv: list[str] | None = None) -> int:
    return client.run_cli("sinfo", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
