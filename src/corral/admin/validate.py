"""`corral validate [NODES] [--level 1|2] [--drain-failed]`: check nodes with a job.

The suite (admin/validate_job.py) runs as an ordinary batch job, one task per node through
srun, so it takes the path users' jobs take.  This command submits it with sbatch, follows its
output file for a progress line, prints a summary table, exits 1 when a check failed, and with
--drain-failed drains the failing nodes through scontrol.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from corral.admin.validate_job import MARK
from corral.cli import client
from corral.model.hostlists import compress, expand

FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("validate", help="check nodes with a job: GPUs, all-reduce, network, "
                       "disk (see docs/NODES.md)")
    p.add_argument("nodes", nargs="?", help="hostlist of nodes (default: every node that is up "
                   "and not drained)")
    p.add_argument("--level", type=int, choices=(1, 2), default=1,
                   help="1: quick (default); 2: longer runs, larger transfers, dcgmi diag -r 2")
    p.add_argument("--drain-failed", action="store_true",
                   help="drain the nodes whose checks fail (reason 'validate: …')")
    p.add_argument("--partition", "-p", help="partition to run the job in")
    p.add_argument("--disk-dir", metavar="DIR",
                   help="where the disk check writes (default: the job's TMPDIR or /tmp); "
                        "%%n is the node's name")
    p.add_argument("--output", metavar="FILE", default="corral-validate-%j.out",
                   help="the job's output file (default corral-validate-%%j.out here)")
    p.add_argument("--timeout", type=float, default=0,
                   help="give up (and cancel the job) after this many seconds "
                        "(default: 600, 1800 at level 2)")
    p.set_defaults(fn=cmd_validate)


def parse_results(text: str) -> list[dict[str, str]]:
    out = []
    for line in text.splitlines():
        if line.startswith(MARK):
            try:
                out.append(json.loads(line[len(MARK):]))
            except ValueError:
                continue
    return out


def expected_checks(nodes: list[str]) -> int:
    pairs = len(nodes) * (len(nodes) - 1) // 2
    return 2 * len(nodes) + 2 * pairs


def missing_results(nodes: list[str], results: list[dict[str, str]]) -> list[dict[str, str]]:
    """A failure for every check a node never reported (its task died, the job ended early)."""
    have = {(r["check"], r["nodes"]) for r in results}
    out = []
    for n in nodes:
        for check in ("gpu", "disk"):
            if (check, n) not in have:
                out.append({"check": check, "nodes": n, "result": "FAIL",
                            "detail": "no result (the node's task did not report)"})
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            for check in ("network", "allreduce"):
                if (check, f"{a}<>{b}") not in have:
                    out.append({"check": check, "nodes": f"{a}<>{b}", "result": "FAIL",
                                "detail": "no result"})
    return out


def failed_nodes(results: list[dict[str, str]]) -> dict[str, list[str]]:
    """node -> the checks it failed; a failed pair check counts against both its nodes."""
    bad: dict[str, list[str]] = {}
    for r in results:
        if r["result"] == "FAIL":
            for n in r["nodes"].split("<>"):
                bad.setdefault(n, []).append(r["check"])
    return bad


def render_table(results: list[dict[str, str]]) -> str:
    rows = [("CHECK", "NODES", "RESULT", "DETAIL")] + [
        (r["check"], r["nodes"], r["result"], r["detail"]) for r in results]
    w = [max(len(row[i]) for row in rows) for i in range(3)]
    return "".join(f"{a:<{w[0]}}  {b:<{w[1]}}  {c:<{w[2]}}  {d}".rstrip() + "\n"
                   for a, b, c, d in rows)


def _choose_nodes(spec: str | None) -> list[dict[str, Any]]:
    listed = client.get("/v1/nodes").get("nodes", [])
    by_name = {n["name"]: n for n in listed}
    if spec:
        names = expand(spec)
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ValueError(f"Invalid node name specified: {unknown[0]}")
        return [by_name[n] for n in names]
    return [n for n in listed
            if not any(s in str(n.get("state", "")) for s in ("DOWN", "DRAIN", "FAIL"))]


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        chosen = _choose_nodes(args.nodes)
    except ValueError as e:
        print(f"corral validate: error: {e}", file=sys.stderr)
        return 1
    if not chosen:
        print("corral validate: error: no nodes to validate", file=sys.stderr)
        return 1
    names = [n["name"] for n in chosen]
    hostlist = compress(names)
    gpus = min(int(n.get("gpus") or 0) for n in chosen)
    addrs = ",".join(f"{n['name']}={n.get('addr') or n['name']}" for n in chosen)
    job_args = [sys.executable, "-m", "corral.admin.validate_job", "--level", str(args.level),
                "--addrs", addrs]
    if args.disk_dir:
        job_args += ["--disk-dir", args.disk_dir]
    minutes = 10 if args.level == 1 else 30
    output = os.path.abspath(args.output)
    sbatch = ["sbatch", "--parsable", "-J", "corral-validate", "-N", str(len(names)),
              "-w", hostlist, "--ntasks-per-node=1", "-t", str(minutes), "-o", output]
    if args.partition:
        sbatch += ["-p", args.partition]
    if gpus:
        sbatch += [f"--gres=gpu:{gpus}"]
    sbatch += ["--wrap", " ".join(["srun"] + [_quote(a) for a in job_args])]
    r = subprocess.run(sbatch, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr or r.stdout)
        print("corral validate: error: could not submit the validation job", file=sys.stderr)
        return 1
    job_id = r.stdout.strip().split(";")[0]
    output = output.replace("%j", job_id)
    print(f"validate: job {job_id} on {hostlist} (level {args.level}), output in {output}",
          flush=True)
    total = expected_checks(names)
    timeout = args.timeout or (600 if args.level == 1 else 1800)
    try:
        state = _follow(job_id, output, total, timeout)
    except KeyboardInterrupt:
        subprocess.run(["scancel", job_id], capture_output=True)
        raise
    results = parse_results(_read(output))
    results += missing_results(names, results)
    order = {"gpu": 0, "disk": 1, "network": 2, "allreduce": 3}
    results.sort(key=lambda r: (order.get(r["check"], 9), r["nodes"]))
    sys.stdout.write(render_table(results))
    bad = failed_nodes(results)
    if state != "COMPLETED" and not bad:
        print(f"validate: job {job_id} ended {state or 'unknown'}", file=sys.stderr)
        return 1
    if not bad:
        print(f"validate: all {len(results)} checks passed on {hostlist}")
        return 0
    print("validate: FAILED: "
          + "; ".join(f"{n} ({', '.join(sorted(set(c)))})" for n, c in sorted(bad.items())))
    if args.drain_failed:
        for node, checks in sorted(bad.items()):
            reason = f"validate: {', '.join(sorted(set(checks)))} failed (job {job_id})"
            d = subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN",
                                f"Reason={reason}"], capture_output=True, text=True)
            if d.returncode != 0:
                sys.stderr.write(d.stderr or d.stdout)
            else:
                print(f"validate: drained {node}")
    return 1


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _follow(job_id: str, output: str, total: int, timeout: float) -> str:
    """Wait for the job to end, with a progress line on stderr; its final state."""
    tty = sys.stderr.isatty()
    shown = -1
    deadline = time.monotonic() + timeout
    state = ""
    while True:
        jobs = client.get("/v1/jobs", ids=job_id, fields="job_id,state").get("jobs", [])
        state = str(jobs[0].get("state", "")) if jobs else ""
        done = len(parse_results(_read(output)))
        if done != shown:
            shown = done
            bar = "#" * (20 * done // max(total, 1))
            line = f"validate: [{bar:<20}] {done}/{total} checks ({state.lower() or '…'})"
            sys.stderr.write(("\r" + line) if tty else line + "\n")
            sys.stderr.flush()
        if state in FINISHED:
            break
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], capture_output=True)
            state = "TIMEOUT"
            break
        time.sleep(0.5)
    if tty:
        sys.stderr.write("\n")
    return state
