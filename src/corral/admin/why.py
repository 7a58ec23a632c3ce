"""`corral why JOBID`: why a job waits, with the numbers behind the reason.

squeue and scontrol print Slurm's reason token (Resources, Priority, AssocGrpGRES, …) and
stay byte-exact; this command adds what the token stands for: what the job asked for, what
is in use, what the limit or the capacity is, its place in line and its estimated start."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from corral.cli import client

UNITS = {"mem": " MB", "seconds": " s"}


def _amounts(d: dict[str, Any]) -> str:
    # no --mem is recorded as 0 (the node's default share), not a request for nothing
    return ", ".join(f"{k} {v}{UNITS.get(k, '')}" for k, v in d.items()
                     if not (k == "mem" and not v))


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def render(w: dict[str, Any]) -> str:
    head = f"Job {w['id']} is {w['state']} in partition {w['partition']}"
    if w["state"] != "PENDING":
        return head + ": it is not waiting.\n"
    lines = [f"{head}: {w['reason']}", f"  {w['why']}"]
    where = " per node" if w.get("per_node") else ""
    if w.get("requested"):
        lines.append(f"  requested{where}: {_amounts(w['requested'])}")
    if w.get("used"):
        lines.append(f"  in use:      {_amounts(w['used'])}")
    if w.get("available"):
        lines.append(f"  available{where if w.get('requested') else ''}: "
                     f"{_amounts(w['available'])}")
    if w.get("unavailable_nodes"):
        lines.append(f"  unavailable nodes: {','.join(w['unavailable_nodes'])}")
    if w.get("note") and w["note"] != w["why"]:
        lines.append(f"  limit: {w['note']}")
    if w.get("place"):
        lines.append(f"  place in line: {_ordinal(w['place'])} of {w['in_line']} pending in "
                     f"partition {w['partition']} (priority {w['priority']})")
    est = w.get("estimated_start")
    lines.append("  estimated start: " + (time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(est))
                                          if est else "not known yet"))
    return "\n".join(lines) + "\n"


def cmd_why(args: argparse.Namespace) -> int:
    try:
        answer = client.get("/v1/why", job=args.job)
    except client.ApiError as e:
        print(f"corral why: error: {e.message}", file=sys.stderr)
        return 1
    sys.stdout.write(render(answer))
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("why", help="why a job is pending: its reason with the numbers")
    p.add_argument("job", metavar="JOBID")
    p.set_defaults(fn=cmd_why)
