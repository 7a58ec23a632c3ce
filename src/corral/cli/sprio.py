"""sprio: the priority factors of pending jobs, in Slurm 22.05's columns.

Default columns are JOBID PARTITION PRIORITY SITE and one column per factor whose
PriorityWeight* is not zero (AGE, ASSOC, FAIRSHARE, JOBSIZE, PARTITION, QOS, TRES), plus
NICE when a job has a nice value; -l adds USER and ACCOUNT, -n prints the normalised
factors, -w the weights, -o a format of Slurm's %-letters.
"""

from __future__ import annotations

import sys

from corral.cli import client
from corral.cli import gnugetopt as getopt
from corral.cli.common_opts import answer_info_option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROG = "sprio"

# letter -> (header, key, normalised?)
FIELDS: dict[str, tuple[str, str, bool]] = {
    "a": ("AGE", "age", True), "A": ("AGE", "age", False),
    "b": ("ASSOC", "assoc", True), "B": ("ASSOC", "assoc", False),
    "c": ("CLUSTER", "cluster", False),
    "f": ("FAIRSHARE", "fairshare", True), "F": ("FAIRSHARE", "fairshare", False),
    "i": ("JOBID", "display_id", False),
    "j": ("JOBSIZE", "job_size", True), "J": ("JOBSIZE", "job_size", False),
    "N": ("NICE", "nice", False),
    "o": ("ACCOUNT", "account", False),
    "p": ("PARTITION", "partition_factor", True), "P": ("PARTITION", "partition_factor", False),
    "q": ("QOS", "qos_factor", True), "Q": ("QOS", "qos_factor", False),
    "r": ("PARTITION", "partition", False),
    "S": ("SITE", "site", False),
    "t": ("TRES", "tres", True), "T": ("TRES", "tres", False),
    "u": ("USER", "user", False),
    "y": ("PRIORITY", "priority", True), "Y": ("PRIORITY", "priority", False),
}
WEIGHT_OF = {"age": "age", "assoc": "assoc", "fairshare": "fairshare", "job_size": "job_size",
             "partition_factor": "partition", "qos_factor": "qos", "tres": "tres"}
# the factor columns, in Slurm's order, with their default widths
FACTORS = (("A", 10), ("B", 10), ("F", 10), ("J", 10), ("P", 10), ("Q", 10))

# Slurm 22.05's texts (src/sprio/opts.c)
USAGE = ("Usage: sprio [-j jid[s]] [-u user_name[s]] [-o format] [-p partitions]\n"
         "   [--federation] [--local] [--sibling] [--usage] [-hlnvVw]\n")
HELP = """\
Usage: sprio [OPTIONS]
      --federation                display jobs in federation if a member of one
  -h, --noheader                  no headers on output
  -j, --jobs                      comma separated list of jobs
                                  to view, default is all
      --local                     display jobs on local cluster only
  -l, --long                      long report
  -M, --cluster=cluster_name      cluster to issue commands to.  Default is
                                  current cluster.  cluster with no name will
                                  reset to default.
                                  NOTE: SlurmDBD must be up.
  -n, --norm                      display normalized values
  -o, --format=format             format specification
      --sibling                   display job records separately for each federation cluster
  -p, --partition=partition_name  comma separated list of partitions
  -u, --user=user_name            comma separated list of users to view
  -v, --verbose                   verbosity level
  -V, --version                   output version information and exit
  -w, --weights                   show the weights for each priority factor

Help options:
  --help                          show this help message
  --usage                         display a brief summary of sprio options
"""


def parse_format(fmt: str) -> list[tuple[str, int | None, bool]]:
    """"%.15i %9r" -> [(letter, width, right-aligned)]; unknown letters raise ValueError."""
    out: list[tuple[str, int | None, bool]] = []
    i = 0
    while i < len(fmt):
        if fmt[i] != "%":
            i += 1
            continue
        i += 1
        right = False
        if i < len(fmt) and fmt[i] == ".":
            right = True
            i += 1
        digits = ""
        while i < len(fmt) and fmt[i].isdigit():
            digits += fmt[i]
            i += 1
        if i >= len(fmt):
            break
        letter = fmt[i]
        i += 1
        if letter not in FIELDS:
            raise ValueError(f"Invalid job format specification: {letter}")
        out.append((letter, int(digits) if digits else None, right))
    return out


def default_format(weights: dict[str, Any], jobs: list[dict[str, Any]], long: bool,
                   norm: bool) -> str:
    parts = ["%.15i", "%9r"]
    if long:
        parts += ["%.8u", "%10o"]
    parts += ["%.10Y", "%.10S"]
    for letter, width in FACTORS:
        key = FIELDS[letter][1]
        if weights.get(WEIGHT_OF[key]):
            parts.append(f"%.{width}{letter}")
    if any(j.get("nice") for j in jobs):
        parts.append("%.6N")
    if weights.get("tres"):
        parts.append("%.20T")
    fmt = " ".join(parts)
    if norm:  # the same columns, normalised
        for letter in "YABFJPQT":
            fmt = fmt.replace(letter, letter.lower())
    return fmt


def _tres_text(tres: dict[str, float], weights: dict[str, float], norm: bool) -> str:
    items = []
    for name in sorted(tres):
        v = tres[name] if norm else tres[name] * float(weights.get(name, 0))
        items.append(f"{name}={v:.2f}" if norm else f"{name}={int(v)}")
    return ",".join(items)


def cell(letter: str, job: dict[str, Any], weights: dict[str, Any]) -> str:
    _, key, norm = FIELDS[letter]
    if key == "tres":
        return _tres_text(job.get("tres", {}), weights.get("tres", {}), norm)
    value = job.get(key, "")
    if key in WEIGHT_OF:
        f = float(value or 0)
        return f"{f:.7f}" if norm else str(int(f * float(weights.get(WEIGHT_OF[key], 0) or 0)))
    if key == "priority" and norm:
        return f"{float(value) / 4294967295:.10f}"
    return str(value)


def weight_cell(letter: str, weights: dict[str, Any]) -> str:
    _, key, _ = FIELDS[letter]
    if key == "display_id":
        return "Weights"
    if key == "tres":
        return ",".join(f"{k}={int(v)}" for k, v in sorted(weights.get("tres", {}).items()))
    if key in WEIGHT_OF:
        return str(int(weights.get(WEIGHT_OF[key], 0) or 0))
    if key == "site":
        return "1"
    return ""


def render(spec: list[tuple[str, int | None, bool]], rows: list[list[str]]) -> str:
    out = []
    for row in rows:
        cells = []
        for (_letter, width, right), text in zip(spec, row, strict=True):
            if width is None:
                cells.append(text)
            elif right:
                cells.append(text[:width].rjust(width))
            else:
                cells.append(text[:width].ljust(width))
        out.append(" ".join(cells))
    return "".join(line + "\n" for line in out)


def main(argv: list[str] | None = None) -> int:
    return client.run_cli(PROG, _run, argv)


def _run(args: list[str]) -> int:
    try:
        opts, rest = getopt.gnu_getopt(args, "hj:lM:no:p:u:vVw", [
            "noheader", "jobs=", "long", "norm", "format=", "partition=", "user=",
            "verbose", "version", "weights", "help", "usage", "clusters=", "local",
            "federation", "sibling"])
    except getopt.GetoptError as e:
        sys.stderr.write(f"{PROG}: {e.msg}\n" + "Try \"sprio --help\" for more information\n")
        return 1
    header, long, norm, weights_only = True, False, False, False
    fmt: str | None = None
    jobs: set[str] | None = None
    users: set[str] | None = None
    parts: set[str] | None = None
    for o, v in opts:
        if o in ("-h", "--noheader"):
            header = False
        elif o in ("-j", "--jobs"):
            jobs = {x for x in v.split(",") if x}
        elif o in ("-l", "--long"):
            long = True
        elif o in ("-n", "--norm"):
            norm = True
        elif o in ("-o", "--format"):
            fmt = v
        elif o in ("-p", "--partition"):
            parts = {x for x in v.split(",") if x}
        elif o in ("-u", "--user"):
            users = {x for x in v.split(",") if x}
        elif o in ("-w", "--weights"):
            weights_only = True
        elif answer_info_option(o, HELP, USAGE):
            return 0
    if rest:
        sys.stderr.write(f"{PROG}: error: Unrecognized option: {rest[0]}\n{USAGE}")
        return 1
    if jobs is not None:
        for j in jobs:
            if not j.replace("_", "").isdigit():
                sys.stderr.write(f"{PROG}: error: Invalid job id: {j}\n")
                return 1
    data = client.get("/v1/sprio")
    weights: dict[str, Any] = data.get("weights", {})
    rows_in: list[dict[str, Any]] = data.get("jobs", [])
    selected = [j for j in rows_in
                if (jobs is None or str(j["job_id"]) in jobs or j["display_id"] in jobs)
                and (users is None or j["user"] in users)
                and (parts is None or j["partition"] in parts)]
    try:
        spec = parse_format(fmt if fmt is not None else
                            default_format(weights, rows_in, long, norm))
    except ValueError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 1
    rows: list[list[str]] = []
    if header:
        rows.append([FIELDS[letter][0] for letter, _, _ in spec])
    if weights_only:
        rows.append([weight_cell(letter, weights) for letter, _, _ in spec])
    else:
        if jobs is not None and not selected:
            sys.stderr.write("Unable to find jobs matching user/id(s) specified\n")
            return 0 if rows_in else 1
        rows += [[cell(letter, j, weights) for letter, _, _ in spec] for j in selected]
    sys.stdout.write(render(spec, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
