"""Check the NVML GPU backend (agent/gpu.py) on a machine with NVIDIA GPUs.

    PYTHONPATH=src python3 bench/nvml_check.py

Prints what NvmlBackend samples for each GPU, idle and (where torch with CUDA is there)
while a matrix-multiply load runs on GPU 0, and the cost of one sample.  Exits non-zero
when a check fails: the backend must see every GPU NVML inventories (agent/hw.py), report
memory within the total, and, under load, utilisation above zero and the load's process.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from corral.agent import gpu, hw

LOAD = """
import torch, time
a = torch.randn(8192, 8192, device="cuda")
t = time.time()
while time.time() - t < 20:
    a = (a @ a).clamp_(-1, 1)
torch.cuda.synchronize()
"""


def main() -> int:
    inventory, note = hw.detect_gpus()
    print(f"hw.detect_gpus: {len(inventory)} GPU(s) {note}")
    for g in inventory:
        print(f"  {g.index}: {g.name} {g.uuid} {g.memory_mb} MB")
    backend = gpu.backend_for("/nonexistent")
    print(f"backend: {backend.name}")
    failures = []
    samples = backend.sample()
    if len(samples) != len(inventory) or not samples:
        failures.append(f"{len(samples)} samples for {len(inventory)} GPUs")
    for s in samples:
        print(f"  idle {s}")
        if not 0 <= s.memory_used <= s.memory_total or s.memory_total == 0:
            failures.append(f"GPU {s.index}: memory {s.memory_used}/{s.memory_total}")
        if not 0 <= s.util <= 100:
            failures.append(f"GPU {s.index}: utilisation {s.util}")
    if not samples:
        print("FAILED: no GPU to sample")
        return 1
    times = []
    for _ in range(50):
        t = time.perf_counter()
        backend.sample()
        times.append(time.perf_counter() - t)
    print(f"one sample of all GPUs: median {statistics.median(times) * 1e3:.2f} ms")
    load = None
    try:
        load = subprocess.Popen([sys.executable, "-c", LOAD], stderr=subprocess.PIPE)
        seen_util, seen_pid = 0.0, False
        deadline = time.time() + 25
        while time.time() < deadline and load.poll() is None:
            s = backend.sample()[0]
            seen_util = max(seen_util, s.util)
            seen_pid = seen_pid or any(p.pid == load.pid for p in s.processes)
            if seen_util > 0 and seen_pid:
                print(f"  busy {s}")
                break
            time.sleep(0.5)
        if load.poll() not in (None, 0):
            print("no load run (torch with CUDA unavailable):",
                  (load.stderr.read() if load.stderr else b"").decode()[-300:])
        else:
            print(f"under load: utilisation up to {seen_util}%, load's pid {load.pid} "
                  f"{'listed' if seen_pid else 'NOT listed'}")
            if seen_util <= 0:
                failures.append("utilisation stayed 0 under load")
            if not seen_pid and os.path.exists("/proc/1/ns/pid"):
                print("  (a process may be hidden in a container's PID namespace)")
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait()
    backend.close()
    for f in failures:
        print("FAIL:", f)
    print("OK" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
