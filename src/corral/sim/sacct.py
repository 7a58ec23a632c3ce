"""Corral's (or Slurm's) accounting history as a trace, so last month's jobs can be
replayed under another setting.  The export it reads:

    sacct --allusers --allocations --parsable2 --starttime 2026-10-01 --endtime 2026-11-01 \\
        --format JobID,Submit,Start,End,Timelimit,AllocTRES,User,Account,Partition,QOS,State

(`--parsable2`: `|`-separated with a header row; extra columns are ignored, and the order
is free).  A job that never started (no Start, or Start `Unknown`/`None`) is skipped: it has
no run time to replay.  Run time is End - Start; the time limit is Timelimit (`UNLIMITED`
or `Partition_Limit`: the run time); GPUs, CPUs and memory come from AllocTRES
(`gres/gpu=`, `cpu=`, `mem=` with K/M/G/T suffixes).  Job steps (`123.batch`) are skipped.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

from corral.model.timefmt import parse_time_limit
from corral.sim.trace import TraceError, TraceJob, _open_text

NEEDED = ("jobid", "submit", "start", "end", "alloctres")
_MEM = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def is_sacct(first_line: str) -> bool:
    return "|" in first_line and first_line.split("|", 1)[0].strip().lower() == "jobid"


def _time(text: str) -> float | None:
    text = text.strip()
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _tres(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(","):
        k, sep, v = item.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def _mem_mb(text: str) -> int:
    if not text:
        return 0
    unit = text[-1].upper()
    try:
        if unit in _MEM:
            return math.ceil(float(text[:-1]) * _MEM[unit])
        return math.ceil(float(text))
    except ValueError:
        return 0


def read_sacct(path: Path) -> list[TraceJob]:
    raw: list[tuple[float, TraceJob]] = []
    with _open_text(path) as f:
        try:
            lines = iter(enumerate(f, 1))
            _, head = next(lines, (0, ""))
            names = [h.strip().lower() for h in head.rstrip("\n").split("|")]
            missing = [n for n in NEEDED if n not in names]
            if missing:
                raise TraceError(f"{path}: not a sacct --parsable2 export with "
                                 f"{','.join(missing)} (header: {head.strip()})")
            col = {n: i for i, n in enumerate(names)}
            for lineno, line in lines:
                cells = line.rstrip("\n").split("|")
                if len(cells) < len(names):
                    if line.strip():
                        raise TraceError(f"{path}:{lineno}: expected {len(names)} fields, "
                                         f"found {len(cells)}")
                    continue

                def cell(name: str, cells: list[str] = cells) -> str:
                    i = col.get(name)
                    return cells[i].strip() if i is not None else ""

                if "." in cell("jobid"):
                    continue
                submit, start, end = _time(cell("submit")), _time(cell("start")), \
                    _time(cell("end"))
                if submit is None or start is None or end is None:
                    continue
                run = max(0.0, end - start)
                limit_text = cell("timelimit")
                try:
                    seconds = parse_time_limit(limit_text) if limit_text else -1
                except ValueError:  # Partition_Limit and the like
                    seconds = -1
                limit = float(seconds) if seconds > 0 else run
                tres = _tres(cell("alloctres"))
                gpu_text = tres.get("gres/gpu", "0")
                gpus = int(gpu_text) if gpu_text.isdigit() else 0
                cpus = int(tres["cpu"]) if tres.get("cpu", "").isdigit() else 1
                raw.append((submit, TraceJob(
                    submit=submit, run_time=run, time_limit=max(1.0, limit), cpus=max(1, cpus),
                    gpus=gpus, mem_mb=_mem_mb(tres.get("mem", "")),
                    user=cell("user") or "user", account=cell("account"),
                    partition=cell("partition"), qos=cell("qos"))))
        except (OSError, EOFError, UnicodeError) as e:
            raise TraceError(f"{path}: cannot read: {e}") from None
    if not raw:
        return []
    first = min(s for s, _ in raw)
    jobs = [TraceJob(s - first, j.run_time, j.time_limit, j.cpus, j.gpus, j.mem_mb, j.user,
                     j.account, j.partition, j.qos) for s, j in raw]
    jobs.sort(key=lambda j: j.submit)
    return jobs
