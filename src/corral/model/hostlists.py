"""Hostlist expressions (node-[1-4,7]) via python-hostlist, with Slurm's error type.

Plain node names (letters, digits, '.', '_', '-') take a path of their own that gives
python-hostlist's results without importing it: it imports `re`, a quarter of a Slurm
command's start (sinfo, scontrol show node).  tests/unit/test_hostlists_plain.py compares the
two on many random lists.
"""

from __future__ import annotations

# python-hostlist is imported where it is used: it imports `re`, which a Slurm command's
# start pays for only when it has a host list to expand or compress.


class HostlistError(ValueError):
    pass


_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_DIGITS = frozenset("0123456789")


def _plain(name: str) -> bool:
    return bool(name) and _PLAIN.issuperset(name)


def expand(expr: str) -> list[str]:
    """Expand "node-[1-3],gpu01" into names, keeping order and dropping duplicates."""
    if not expr or expr in ("(null)", "None"):
        return []
    if _PLAIN.issuperset(expr.replace(",", "")):  # no brackets: the names themselves
        return list(dict.fromkeys(name for name in expr.split(",") if name))
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
    if all(_plain(n) for n in names):
        return _collect_plain(list(names))
    import hostlist as _hl

    return str(_hl.collect_hostlist(list(names)))


def _split_number(left: str) -> tuple[str, str | None, str]:
    """(prefix, last run of digits or None, the non-digits after it), as python-hostlist's
    r'^(.*?)([0-9]+)?([^0-9]*)$' splits a plain name."""
    end = len(left)
    while end and left[end - 1] not in _DIGITS:
        end -= 1
    start = end
    while start and left[start - 1] in _DIGITS:
        start -= 1
    if start == end:
        return "", None, left
    return left[:start], left[start:end], left[end:]


def _collect_plain(hosts: list[str]) -> str:
    """python-hostlist's collect_hostlist for plain names: numbers grouped into ranges
    from the rightmost numeric part leftwards, duplicates dropped, sorted as it sorts."""
    left_right = [(h, "") for h in hosts]
    looping = True
    while looping:
        left_right, looping = _collect_once(left_right)
    return ",".join(left + right for left, right in left_right)


def _collect_once(left_right: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], bool]:
    entries: list[tuple[tuple[str, str], int, int, str, bool]] = []
    remaining: set[str] = set()
    for left, right in left_right:
        host = left + right
        remaining.add(host)
        prefix, num, suffix = _split_number(left)
        if num is None:
            entries.append(((host, ""), -1, -1, host, False))
        else:
            entries.append(((prefix, suffix + right), int(num), len(num), host, True))
    entries.sort(key=lambda e: (e[0], e[1], e[2], e[3]))
    results: list[tuple[str, str]] = []
    again = False
    i = 0
    while i < len(entries):
        key, has_num = entries[i][0], entries[i][4]
        j = i
        while j < len(entries) and entries[j][0] == key and entries[j][4] == has_num:
            j += 1
        group, i = entries[i:j], j
        if not has_num:  # a name without a number (all its copies): kept whole, once
            results.append(("", key[0]))
            remaining.discard(key[0])
            continue
        prefix, suffix = key
        ranges: list[tuple[int, int, int]] = []
        for _key, num_int, width, host, _has in group:
            if host not in remaining:
                continue
            low = num_int
            while f"{prefix}{num_int:0{width}d}{suffix}" in remaining:
                remaining.remove(f"{prefix}{num_int:0{width}d}{suffix}")
                num_int += 1
            ranges.append((low, num_int - 1, width))
        again = True
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            results.append((prefix, f"{ranges[0][0]:0{ranges[0][2]}d}{suffix}"))
        else:
            results.append((prefix, "[" + ",".join(
                f"{lo:0{w}d}" if lo == hi else f"{lo:0{w}d}-{hi:0{w}d}" for lo, hi, w in ranges)
                + "]" + suffix))
    return results, again
