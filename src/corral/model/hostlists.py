"""Hostlist expressions (node-[1-4,7]) via python-hostlist, with Slurm's error type."""

from __future__ import annotations

# python-hostlist is imported where it is used: it imports `re`, which a Slurm command's
# start pays for only when it has a host list to expand or compress.


class HostlistError(ValueError):
    pass


def expand(expr: str) -> list[str]:
    """Expand "node-[1-3],gpu01" into names, keeping order and dropping duplicates."""
    if not expr or expr in ("(null)", "None"):
        return []
    import hostlist as _hl

    try:
        names = _hl.expand_hostlist(expr)
    except _hl.BadHostlist as e:
        raise HostlistError(str(e)) from e
    return names


def compress(names: list[str] | tuple[str, ...]) -> str:
    """Compress names into Slurm's ranged form: node-[1-3,42]."""
    if not names:
        return ""
    import hostlist as _hl

    return str(_hl.collect_hostlist(list(names)))
