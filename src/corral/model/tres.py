"""TRES (trackable resources) strings, parsed and printed as Slurm does.

`cpu=256,mem=1T,gres/gpu=16`: names are case-insensitive (`GRES/gpu`, `Mem`), memory and
burst buffers take unit suffixes and are counted in MB, every other TRES is a plain count.
A value of -1 clears a limit (sacctmgr `GrpTRES=gres/gpu=-1`).  Printing follows Slurm's
TRES ids (cpu, mem, energy, node, billing, fs/disk, vmem, pages, then the rest by name)
and writes memory with the largest exact unit (`1048576` MB → `1T`, `1000` MB → `1000M`),
as `slurmdb_make_tres_string_from_simple` with CONVERT_NUM_UNIT_EXACT does.
"""

from __future__ import annotations

from collections.abc import Mapping

# Slurm's fixed TRES ids 1..8, in id order; gres/license/bb TRES get ids after these.
BASE_ORDER = ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages")
_BASE_RANK = {name: i for i, name in enumerate(BASE_ORDER)}
_TYPED = ("gres", "license", "bb", "fs", "ic")
# memory-like TRES are counted in MB and take unit suffixes
_SIZED = ("mem", "vmem")
_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3, "E": 1024 ** 4}
_UNIT_CHARS = "MGTPE"

CLEAR = -1  # "remove this limit"

Tres = dict[str, int]


class TresError(ValueError):
    """A TRES string that does not parse; the message is what sacctmgr prints."""


def normalize_name(name: str) -> str:
    """`CPU` → `cpu`, `GRES/gpu` → `gres/gpu`, `gpu` → `gres/gpu` (Slurm accepts the bare
    GRES name in limits only with its type; Corral's users type `gpu` anyway)."""
    n = name.strip()
    if not n:
        raise TresError("Invalid TRES name ''")
    low = n.lower()
    if low in _BASE_RANK:
        return low
    kind, sep, rest = n.partition("/")
    if sep:
        if kind.lower() not in _TYPED or not rest:
            raise TresError(f"Invalid TRES name '{n}'")
        return f"{kind.lower()}/{rest}"
    if low == "gpu":
        return "gres/gpu"
    raise TresError(f"Invalid TRES name '{n}'")


def _sized(name: str) -> bool:
    return name in _SIZED or name.startswith("bb/") or name.endswith("gpumem")


def parse_count(name: str, text: str) -> int:
    t = text.strip()
    if t == "-1":
        return CLEAR
    if _sized(name):
        unit = "M"
        if t and t[-1].upper() in _UNITS:
            unit, t = t[-1].upper(), t[:-1]
        try:
            value = float(t)
        except ValueError:
            raise TresError(f"Invalid TRES value '{text}' for {name}") from None
        if value < 0 or value != value:
            raise TresError(f"Invalid TRES value '{text}' for {name}")
        return int(value * _UNITS[unit] + 0.5) if unit != "K" else -(-int(value) // 1024)
    if not t.isdigit():
        raise TresError(f"Invalid TRES value '{text}' for {name}")
    return int(t)


def parse_tres(text: str) -> Tres:
    """`gres/gpu=16,cpu=256,mem=1T` → {'gres/gpu': 16, 'cpu': 256, 'mem': 1048576}."""
    out: Tres = {}
    if text is None or not text.strip():
        return out
    for part in text.split(","):
        if not part.strip():
            raise TresError(f"Invalid TRES string '{text}'")
        name, sep, value = part.partition("=")
        if not sep:
            raise TresError(f"Invalid TRES string '{text}'")
        key = normalize_name(name)
        out[key] = parse_count(key, value)
    return out


def sort_key(name: str) -> tuple[int, str]:
    rank = _BASE_RANK.get(name)
    if rank is not None:
        return (rank, "")
    return (len(BASE_ORDER) + _TYPED.index(name.split("/")[0]) if "/" in name
            and name.split("/")[0] in _TYPED else 99, name)


def format_mb(count: int) -> str:
    """Slurm's convert_num_unit(count, UNIT_MEGA, CONVERT_NUM_UNIT_EXACT)."""
    unit = 0
    num = count
    while num >= 1024 and num % 1024 == 0 and unit < len(_UNIT_CHARS) - 1:
        num //= 1024
        unit += 1
    return f"{num}{_UNIT_CHARS[unit]}"


def format_tres(tres: Mapping[str, int]) -> str:
    """Slurm's order and units; cleared (-1) entries are left out."""
    parts = []
    for name in sorted(tres, key=sort_key):
        v = tres[name]
        if v < 0:
            continue
        parts.append(f"{name}={format_mb(v) if _sized(name) else v}")
    return ",".join(parts)


def merge(base: Mapping[str, int], change: Mapping[str, int]) -> Tres:
    """`modify … set GrpTRES=gres/gpu=8` changes that TRES only; -1 removes it."""
    out = dict(base)
    for k, v in change.items():
        if v == CLEAR:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def gres_short(name: str) -> str:
    """`gres/gpu` → `gpu` (reason names and messages use the GRES name)."""
    return name.split("/", 1)[1] if "/" in name else name
