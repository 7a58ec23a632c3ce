"""Node features and job constraints (`Feature=` on NodeName lines, `--constraint`).

The grammar is Slurm's (sbatch(1) --constraint, slurmctld's build_feature_list):

    gpu                 every node has "gpu"
    a&b   (or a,b)      every node has a and b
    a|b                 every node has a or b (nodes may differ)
    [a|b|c]             matching OR: all nodes have the same one of them
    a*2&b*2             counts: at least 2 nodes with a and 2 with b
    (a|b)&c             grouping

A constraint is compiled once (`parse_constraint`, cached) into alternatives (one per
choice of a [..] set, else one) of a per-node test plus feature counts.  Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass


class ConstraintError(ValueError):
    """A --constraint Slurm refuses: "Invalid feature specification"."""


# A per-node test: ("f", name) | ("and", (a, b)) | ("or", (a, b)) | ("true",)
Expr = tuple


@dataclass(frozen=True, slots=True)
class Alternative:
    expr: Expr  # what every node of the job must have (counted features excluded)
    counts: tuple[tuple[str, int], ...] = ()  # (feature, at least this many nodes)

    def node_ok(self, features: Iterable[str]) -> bool:
        if self.expr == ("true",):
            return True
        fs = features if isinstance(features, frozenset | set) else frozenset(features)
        return _eval(self.expr, fs)

    def names(self) -> set[str]:
        out = set(_names(self.expr))
        out.update(f for f, _ in self.counts)
        return out


@dataclass(frozen=True, slots=True)
class Constraint:
    text: str
    alternatives: tuple[Alternative, ...]

    def names(self) -> set[str]:
        out: set[str] = set()
        for a in self.alternatives:
            out |= a.names()
        return out

    def node_may(self, features: Iterable[str]) -> bool:
        """Whether a node could serve the job under some alternative (a filter)."""
        fs = frozenset(features)
        return any(a.node_ok(fs) for a in self.alternatives)


_TOKEN = re.compile(r"\s*(?:(\*)\s*(\d+)|([&|,\[\]()])|([^&|,\[\]()*\s]+))")


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ConstraintError(text)
        pos = m.end()
        if m.group(1):
            out.append(("count", m.group(2)))
        elif m.group(3):
            out.append(("op", "&" if m.group(3) == "," else m.group(3)))
        else:
            out.append(("name", m.group(4)))
    return out


class _Parser:
    """Recursive descent; & binds tighter than |.  Brackets are recorded as a marker node
    ("set", [alternatives]) and expanded afterwards."""

    def __init__(self, toks: list[tuple[str, str]]) -> None:
        self.toks = toks
        self.i = 0
        self.sets = 0
        self.depth = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        t = self.peek()
        if t is None:
            raise ConstraintError("unexpected end")
        self.i += 1
        return t

    def parse(self) -> Expr:
        e = self.or_expr()
        if self.peek() is not None:
            raise ConstraintError("trailing input")
        return e

    def or_expr(self) -> Expr:
        e = self.and_expr()
        while self.peek() == ("op", "|"):
            self.take()
            e = ("or", (e, self.and_expr()))
        return e

    def and_expr(self) -> Expr:
        e = self.atom()
        while self.peek() == ("op", "&"):
            self.take()
            e = ("and", (e, self.atom()))
        return e

    def atom(self) -> Expr:
        kind, val = self.take()
        if kind == "name":
            if self.peek() is not None and self.peek()[0] == "count":  # type: ignore[index]
                n = int(self.take()[1])
                if n <= 0:
                    raise ConstraintError("bad count")
                return ("count", (val, n))
            return ("f", val)
        if (kind, val) == ("op", "("):
            self.depth += 1
            e = self.or_expr()
            if self.take() != ("op", ")"):
                raise ConstraintError("unbalanced (")
            self.depth -= 1
            return e
        if (kind, val) == ("op", "["):
            if self.sets or self.depth:
                raise ConstraintError("one [..] set, not nested")
            self.sets += 1
            e = self.or_expr()
            if self.take() != ("op", "]"):
                raise ConstraintError("unbalanced [")
            return ("set", e)
        raise ConstraintError(f"unexpected {val}")


def _eval(e: Expr, fs: frozenset[str] | set[str]) -> bool:
    tag = e[0]
    if tag == "f":
        return e[1] in fs
    if tag == "and":
        return _eval(e[1][0], fs) and _eval(e[1][1], fs)
    if tag == "or":
        return _eval(e[1][0], fs) or _eval(e[1][1], fs)
    return True  # "true"


def _names(e: Expr) -> Iterable[str]:
    tag = e[0]
    if tag == "f":
        yield e[1]
    elif tag in ("and", "or"):
        yield from _names(e[1][0])
        yield from _names(e[1][1])


def _split_set(e: Expr) -> list[Expr]:
    """The alternatives of the expression: one per branch of a [a|b] set, else itself."""
    tag = e[0]
    if tag == "set":
        inner = e[1]
        alts: list[Expr] = []

        def ors(x: Expr) -> None:
            if x[0] == "or":
                ors(x[1][0])
                ors(x[1][1])
            else:
                alts.append(x)
        ors(inner)
        return alts
    if tag in ("and", "or"):
        left, right = _split_set(e[1][0]), _split_set(e[1][1])
        if len(left) == 1 and len(right) == 1:
            return [e]
        return [(tag, (a, b)) for a in left for b in right]
    return [e]


def _strip_counts(e: Expr, counts: list[tuple[str, int]]) -> Expr:
    """Counted features leave the per-node test (only `count` nodes need them): `a*2&b`
    means two nodes with a, and b on every node."""
    tag = e[0]
    if tag == "count":
        counts.append(e[1])
        return ("true",)
    if tag in ("and", "or"):
        a = _strip_counts(e[1][0], counts)
        b = _strip_counts(e[1][1], counts)
        if tag == "and":
            if a == ("true",):
                return b
            if b == ("true",):
                return a
        elif a == ("true",) or b == ("true",):
            return ("true",)
        return (tag, (a, b))
    return e


@functools.lru_cache(maxsize=1024)
def parse_constraint(text: str) -> Constraint:
    """Compile a --constraint; ConstraintError when Slurm would refuse it."""
    if not text or not text.strip():
        raise ConstraintError("empty")
    p = _Parser(_tokens(text))
    expr = p.parse()
    alts: list[Alternative] = []
    for a in _split_set(expr):
        counts: list[tuple[str, int]] = []
        plain = _strip_counts(a, counts)
        alts.append(Alternative(plain, tuple(counts)))
    return Constraint(text, tuple(alts))


def satisfiable(c: Constraint, node_features: Iterable[Iterable[str]]) -> bool:
    """Could any node set of the cluster satisfy `c` (features only, not sizes)?  False
    is Slurm's "Invalid feature specification": a feature no node has."""
    sets = [frozenset(f) for f in node_features]
    for alt in c.alternatives:
        ok = [s for s in sets if alt.node_ok(s)]
        if not ok:
            continue
        if all(sum(1 for s in ok if f in s) >= n for f, n in alt.counts):
            return True
    return False


def pick_counted(alt: Alternative, nodes: list, limit: int) -> list | None:  # type: ignore[type-arg]
    """For a counted alternative: the first nodes (in the given order) that give every
    counted feature its count, at most `limit` nodes; None when they cannot."""
    chosen: list = []  # type: ignore[type-arg]
    names: set[str] = set()
    for feat, n in alt.counts:
        have = sum(1 for x in chosen if feat in x.features)
        for node in nodes:
            if have >= n:
                break
            if node.name in names or feat not in node.features:
                continue
            chosen.append(node)
            names.add(node.name)
            have += 1
        if have < n:
            return None
    return chosen if len(chosen) <= limit else None
