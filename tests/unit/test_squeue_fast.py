"""squeue's column-at-a-time formatter and sort against the cell-at-a-time ones they replace.

The reference below is the formatter squeue had before (fmt.renderer, one fit() per cell,
_sort_value for every -S key); random records and random -o/-O formats must print the same
text, byte for byte.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from corral.cli import squeue
from corral.cli.fmt import Field, Whole, renderer

pytestmark = pytest.mark.usefixtures("utc_tz")  # (tests/unit/conftest.py)

NOW = 1795400000.0
STATES = ["PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "COMPLETED", "FAILED", "TIMEOUT",
          "CANCELLED", "OUT_OF_MEMORY", "REQUEUED"]
NAMES = ["wrap", "a", "", "a-rather-long-job-name", "tab\there", "esc\x1b[2J", "naïve", "日本語",
         "x" * 40]


def _reference(jobs: list[dict[str, Any]], now: float, opts: squeue.Options) -> str:
    """The old format_jobs (without the header and -l date line, unchanged)."""
    letters = opts.letters

    def getter(f: Field) -> Any:
        col = squeue.COLUMNS[letters.get(f.key, f.key)]
        value = col.value
        if col.no_cut:
            return lambda j: _whole(value(j, now))
        return lambda j: value(j, now)

    line = renderer(opts.fmt, getter)
    records = squeue.expand_arrays(jobs, None if opts.array else opts.only_tasks) \
        if (opts.array or opts.only_tasks) else jobs
    return "".join(line(j) + "\n" for j in _reference_sort(records, opts.sort, now))


def _whole(v: str | None) -> str | None:
    return None if v is None else Whole(v)


def _reference_sort(jobs: list[dict[str, Any]], sort: str, now: float) -> list[dict[str, Any]]:
    positions = squeue.list_positions(jobs)
    indexed = list(enumerate(jobs))
    active = [(i, j) for i, j in indexed if not squeue._pending(j)]
    pending = [(i, j) for i, j in indexed if squeue._pending(j)]
    active.sort(key=lambda ij: (-(ij[1].get("start_time") or 0), positions[ij[0]]))
    pending.sort(key=lambda ij: -positions[ij[0]])
    order = active + pending
    for spec in reversed([k for k in sort.split(",") if k]):
        key = spec.lstrip("+-")
        order.sort(key=lambda ij, k=key: squeue._sort_value(k, ij[1], now, positions[ij[0]]),
                   reverse=spec.startswith("-"))
    return [j for _, j in order]


def _random_job(rng: random.Random, job_id: int) -> dict[str, Any]:
    state = rng.choice(STATES)
    started = state != "PENDING" or rng.random() < 0.1
    nodes = [f"node-{n}" for n in rng.sample(range(1, 9), rng.randint(1, 3))] \
        if started else []
    start = NOW - rng.choice([0, 5, 59, 61, 3599, 3601, 86399, 90000, 400000]) \
        if started else None
    job: dict[str, Any] = {
        "job_id": job_id, "display_id": str(job_id), "state": state,
        "name": rng.choice(NAMES), "user": rng.choice(["root", "alice", "a-very-long-user"]),
        "uid": rng.choice([0, 1000]), "gid": 0, "group": "root",
        "partition": rng.choice(["debug", "gpu", "a-long-partition-name"]),
        "priority": rng.choice([0, 1, 7, 4294967295, rng.randint(0, 2**32)]),
        "nodes": nodes, "start_time": start,
        "end_time": start + 10 if start is not None and state in ("COMPLETED", "FAILED")
        else None,
        "submit_time": NOW - 1000, "time_limit": rng.choice([-1, 60, 3600, 90000, None]),
        "num_nodes": rng.choice([1, 2, 4]), "node_cnt_wag": rng.choice([None, 0, 3]),
        "sched_nodes": rng.choice([None, [], ["node-1", "node-2"]]),
        "reason": rng.choice([None, "Priority", "Resources", "BeginTime", "Dependency",
                              "JobHeldUser"]),
        "account": rng.choice([None, "", "physics"]),
        "num_tasks": rng.choice([None, 1, 8]), "cpus_per_task": rng.choice([None, 1, 4]),
        "alloc_cpus": rng.choice([None, 2, 16]), "mem_per_node": rng.choice([None, 4096]),
        "mem_per_cpu": rng.choice([None, 1024, 1536]), "gpus_per_node": rng.choice([0, 2]),
        "gpu_type": rng.choice([None, "a100"]), "comment": rng.choice([None, "", "c\nd"]),
        "sched_start": rng.choice([None, NOW + 100]), "begin_time": rng.choice([None, NOW + 50]),
        "suspend_time": NOW - 3 if state == "SUSPENDED" else None,
        "suspended_secs": rng.choice([None, 0, 7]), "work_dir": "/home/alice",
        "batch_host": nodes[0] if nodes else None, "array_job_id": None,
        "array_task_id": None, "array_tasks": None,
    }
    if rng.random() < 0.1:
        base = job_id
        job.update(array_job_id=base, display_id=f"{base}_[1-3]", state="PENDING",
                   array_tasks=[1, 2, 3], nodes=[], start_time=None, end_time=None)
    return job


def _random_percent_format(rng: random.Random) -> str:
    letters = [k for k in squeue.COLUMNS if len(k) == 1] + ["!", "%"]
    parts = [rng.choice(["", "pre "])]
    for _ in range(rng.randint(0, 9)):
        dot = rng.choice(["", "."])
        width = rng.choice(["", "0", "1", "2", "5", "8", "18", "30"])
        parts.append(f"%{dot}{width}{rng.choice(letters)}{rng.choice(['', ' ', '|', ' %% '])}")
    return "".join(parts)


def _random_long_format(rng: random.Random) -> str:
    names = sorted(squeue.LONG_FIELDS)
    items = []
    for _ in range(rng.randint(1, 6)):
        spec = rng.choice(["", ":", ":5", ":.5", ":12|", ":.1", ":0"])
        items.append(rng.choice(names) + spec)
    return ",".join(items)


@pytest.mark.parametrize("seed", range(40))
def test_new_formatter_prints_what_the_old_one_printed(seed: int) -> None:
    rng = random.Random(seed)
    jobs = [_random_job(rng, 100 + i) for i in range(rng.randint(0, 120))]
    for _ in range(8):
        argv = ["-h", "-t", "all"]
        if rng.random() < 0.5:
            argv += ["-o", _random_percent_format(rng)]
        else:
            argv += ["-O", _random_long_format(rng)]
        if rng.random() < 0.5:
            keys = rng.sample(sorted(squeue.SORT_KEYS), rng.randint(1, 4))
            argv += ["-S", ",".join(rng.choice(["", "-", "+"]) + k for k in keys)]
        if rng.random() < 0.2:
            argv.append("-r")
        parsed = squeue.parse_args(argv)
        assert not isinstance(parsed, int), argv
        opts = parsed[0]
        assert squeue.format_jobs(jobs, NOW, opts) == _reference(jobs, NOW, opts), argv


@pytest.mark.parametrize("fmt", [squeue.DEFAULT_FORMAT, squeue.LONG_FORMAT,
                                 squeue.START_FORMAT])
def test_default_formats_over_many_jobs(fmt: str) -> None:
    rng = random.Random(fmt)
    jobs = [_random_job(rng, 1 + i) for i in range(2000)]
    parsed = squeue.parse_args(["-h", "-o", fmt])
    assert not isinstance(parsed, int)
    opts = parsed[0]
    out = squeue.format_jobs(jobs, NOW, opts)
    assert out == _reference(jobs, NOW, opts)
    assert out.count("\n") == 2000
