"""A throw-away cluster for benchmarks: `with bench_cluster(config) as c:`."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

BIN = os.path.dirname(sys.executable)

CONFIG = """\
ClusterName=bench
KillWait=2
MinJobAge=600
NodeName=node-[1-4] CPUs=16 RealMemory=64000 Gres=gpu:4
PartitionName=debug Nodes=node-[1-4] Default=YES MaxTime=INFINITE State=UP
"""


class BenchCluster:
    def __init__(self, home: str) -> None:
        self.home = home
        self.env = dict(os.environ, CORRAL_HOME=home, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
        self.work = os.path.join(home, "work")
        os.makedirs(self.work, exist_ok=True)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(list(args), capture_output=True, text=True, env=self.env, cwd=self.work, timeout=600)
        if check and r.returncode != 0:
            raise RuntimeError(f"{args}: {r.stderr}")
        return r

    def api(self, method: str, path: str, body: Any = None) -> Any:
        os.environ["CORRAL_HOME"] = self.home
        from corral.cli import client

        return client.request(method, path, body)

    def controller_pid(self) -> int:
        with open(os.path.join(self.home, "controller.pid")) as f:
            return int(f.read())

    def rss_mb(self) -> float:
        with open(f"/proc/{self.controller_pid()}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0


@contextlib.contextmanager
def bench_cluster(config: str = CONFIG) -> Iterator[BenchCluster]:
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as home:
        c = BenchCluster(home)
        cfg = os.path.join(home, "in.conf")
        with open(cfg, "w") as f:
            f.write(config)
        c.run("corral", "up", "--config", cfg)
        try:
            yield c
        finally:
            c.run("corral", "down", check=False)


def submit_body(command: str = "true", held: bool = False, work_dir: str = "/tmp") -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "bench", "work_dir": work_dir, "stdout": "/dev/null"}
    if held:
        spec["held"] = "user"
    return {"spec": spec, "script": f"#!/bin/sh\n{command}\n", "env": {"PATH": "/usr/bin:/bin"}, "argv": []}


def median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.1f} ms (median of {len(samples)})"


def wait_until(pred: Any, timeout: float = 120) -> float:
    t0 = time.perf_counter()
    while not pred():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError
        time.sleep(0.02)
    return time.perf_counter() - t0
