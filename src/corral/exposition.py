"""The Prometheus text format (version 0.0.4) of gauges, written directly.

prometheus-client's `generate_latest` costs ~80 µs a sample; these writers give the same
text (tests/unit/test_metrics.py checks they agree) at a fraction of it, for the controller's
routes (controller.metrics) and the agent's per-GPU series (agent.metrics).  No imports
beyond the standard library: the agent and the controller both use it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Family:
    """One gauge: its name, HELP text, label names and rows (label values, value)."""

    __slots__ = ("name", "doc", "labels", "rows")

    def __init__(self, name: str, doc: str, labels: tuple[str, ...] = (),
                 value: float | None = None) -> None:
        self.name, self.doc, self.labels = name, doc, labels
        self.rows: list[tuple[tuple[str, ...], float]] = [] if labels else [((), value or 0)]

    def add(self, values: tuple[str, ...], value: float) -> None:
        self.rows.append((values, value))


def escape_label(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return v


def format_value(x: float) -> str:
    if isinstance(x, int):
        return str(int(x))  # a bool as 0/1
    return repr(float(x)) if math.isfinite(x) else ("NaN" if x != x else ("+Inf" if x > 0 else "-Inf"))


def header(name: str, doc: str) -> str:
    """A gauge's HELP and TYPE lines."""
    doc = doc.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {doc}\n# TYPE {name} gauge\n"


def format_number(x: float) -> str:
    """A sample's value (an int as it is: the common case, the fast path)."""
    return str(x) if type(x) is int else format_value(x)


def expose(families: Iterable[Family]) -> bytes:
    """The families in the Prometheus text format (version 0.0.4), as prometheus-client's
    generate_latest writes gauges."""
    out: list[str] = []
    for f in families:
        name = f.name
        doc = f.doc.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} gauge\n")
        if not f.labels:
            out.append(f"{name} {format_value(f.rows[0][1])}\n")
        elif len(f.labels) == 1:
            pre = f'{name}{{{f.labels[0]}="'
            out.extend([f'{pre}{escape_label(v[0])}"}} {x if type(x) is int else format_value(x)}\n'
                        for v, x in f.rows])
        else:
            keys = f.labels
            out.extend([name + "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in zip(keys, vs, strict=True))
                        + f"}} {format_value(x)}\n" for vs, x in f.rows])
    return "".join(out).encode()
