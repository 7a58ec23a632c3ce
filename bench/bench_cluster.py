"""Corral's end-to-end figures on this machine (issue #2's list), printed as a table.

    python bench/bench_cluster.py [--quick]

Measures: one `sbatch --wrap true` (median), submissions/s through the API (durable),
submit → job running on an idle cluster, 1,000 trivial jobs drained, `squeue` and `sacct`
wall time with 10,000 jobs queued, controller RSS per job at 10,000 and 100,000 jobs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from _cluster import BenchCluster, bench_cluster, median_ms, submit_body, wait_until  # noqa: E402

QUICK = "--quick" in sys.argv


def bench_sbatch(c: BenchCluster) -> None:
    samples = []
    for _ in range(10 if QUICK else 40):
        t0 = time.perf_counter()
        c.run("sbatch", "-H", "--wrap", "true")
        samples.append(time.perf_counter() - t0)
    print(f"sbatch --wrap true (CLI wall time)        {median_ms(samples)}   target < 40 ms; Slurm 4-5 ms")


def _raw_submit(sock_path: str, body: bytes) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: c\r\nConnection: close\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    if b" 200 " not in data.split(b"\r\n", 1)[0]:
        raise RuntimeError(data[:300])


def bench_api_rate(c: BenchCluster) -> None:
    import json

    body = json.dumps(submit_body(held=True)).encode()
    sock_path = os.path.join(c.home, "corral.sock")
    n_threads, per = 16, (100 if QUICK else 250)
    errors: list[Exception] = []

    def worker() -> None:
        try:
            for _ in range(per):
                _raw_submit(sock_path, body)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        raise errors[0]
    n = n_threads * per
    print(f"submissions through the API (durable)     {n / dt:.0f} jobs/s ({n} jobs, {n_threads} clients)   target >= 2000/s")


def bench_latency(c: BenchCluster) -> None:
    samples = []
    for i in range(5 if QUICK else 20):
        marker = os.path.join(c.work, f"lat{i}")
        body = submit_body(f"date +%s.%N > {marker}")
        t0 = time.time()
        c.api("POST", "/v1/jobs", body)
        wait_until(lambda m=marker: os.path.exists(m) and os.path.getsize(m) > 0, 30)
        with open(marker) as f:
            samples.append(float(f.read()) - t0)
    print(f"submit -> job running (idle cluster)      {median_ms(samples)}   target < 100 ms; Slurm 1-2 s")


def bench_drain(c: BenchCluster, n: int, submitters: int) -> None:
    """Submit n trivial jobs from `submitters` concurrent clients; time until all ended."""
    import json

    before = c.api("GET", "/v1/diag")["stats"]
    done0 = before["completed"] + before["failed"]
    body = json.dumps(submit_body("true")).encode()
    sock_path = os.path.join(c.home, "corral.sock")

    def worker(count: int) -> None:
        for _ in range(count):
            _raw_submit(sock_path, body)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(n // submitters,)) for _ in range(submitters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def drained() -> bool:
        s = c.api("GET", "/v1/diag")["stats"]
        return s["completed"] + s["failed"] - done0 >= n

    wait_until(drained, 300)
    dt = time.perf_counter() - t0
    print(f"{n} trivial jobs drained ({submitters} submitter{'s' if submitters > 1 else ''})  {dt:.2f} s   target < 10 s; Slurm ~20 s")


def fill_held(c: BenchCluster, n: int) -> None:
    import json

    body = json.dumps(submit_body(held=True)).encode()
    sock_path = os.path.join(c.home, "corral.sock")
    per = n // 8

    def worker() -> None:
        for _ in range(per):
            _raw_submit(sock_path, body)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def time_cmd(c: BenchCluster, *args: str, runs: int = 7) -> list[float]:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(list(args), env=c.env, cwd=c.work, stdout=subprocess.DEVNULL, check=True)
        samples.append(time.perf_counter() - t0)
    return samples


def main() -> None:
    # an installed package has bytecode; an editable checkout may not (PYTHONDONTWRITEBYTECODE)
    import compileall

    compileall.compile_dir(os.path.join(os.path.dirname(__file__), "..", "src"), quiet=1)
    print(f"Corral benchmarks on {os.cpu_count()} CPUs{' (quick)' if QUICK else ''}")
    with bench_cluster() as c:
        bench_latency(c)
        bench_drain(c, 200 if QUICK else 1000, 1)
        bench_drain(c, 200 if QUICK else 1000, 4)
        bench_sbatch(c)
        bench_api_rate(c)
    with bench_cluster() as c:
        base = c.rss_mb()
        n = 2000 if QUICK else 10_000
        fill_held(c, n)
        queued = len(c.api("GET", "/v1/jobs", None)["jobs"]) if QUICK else n
        print(f"squeue with {n} jobs queued            {median_ms(time_cmd(c, 'squeue'))}   target < 200 ms; Slurm ~110 ms")
        print(f"sacct (default, today's jobs: {n})     {median_ms(time_cmd(c, 'sacct', runs=3))}")
        print(f"sacct -j <one job>                       {median_ms(time_cmd(c, 'sacct', '-j', '5'))}   target < 90 ms; Slurm ~90 ms")
        rss = c.rss_mb()
        print(f"controller RSS at {n} jobs             {rss:.0f} MB ({(rss - base) * 1024 / n:.2f} KB/job over the empty controller)   target <= 5 KB/job")
        del queued
        if not QUICK:
            fill_held(c, 90_000)
            rss = c.rss_mb()
            print(f"controller RSS at 100000 jobs            {rss:.0f} MB ({(rss - base) * 1024 / 100_000:.2f} KB/job)")


if __name__ == "__main__":
    main()
