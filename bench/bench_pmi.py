"""PMI fences of an `srun --mpi=pmi2` step: one agent serving both nodes (settled in the
agent) next to two agent processes, one per node (gathered by the controller).

    python bench/bench_pmi.py [--fences N] [--runs R]

Each of 4 ranks (2 per node) does N rounds of put + fence (PMI-1's barrier); rank 0 times
each fence.  Prints the median fence and the median whole srun command, per layout.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from _cluster import bench_cluster, median_ms  # noqa: E402

CONFIG = """\
ClusterName=benchpmi
KillWait=2
MinJobAge=600
NodeName=node-1 CPUs=4 RealMemory=4000
NodeName=node-2 {addr}CPUs=4 RealMemory=4000
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""

CLIENT = r"""
import os, socket, sys, time
s = socket.socket(fileno=int(os.environ["PMI_FD"]))
f = s.makefile("rwb", buffering=0)
def ask(line):
    f.write((line + "\n").encode())
    return f.readline()
rank = int(os.environ["PMI_RANK"])
ask("cmd=init pmi_version=1 pmi_subversion=1")
times = []
for n in range(int(sys.argv[1])):
    ask(f"cmd=put kvsname=x key=k{n}-{rank} value={n}")
    t0 = time.perf_counter()
    ask("cmd=barrier_in")
    times.append(time.perf_counter() - t0)
ask("cmd=finalize")
if rank == 0:
    print(" ".join(f"{t:.6f}" for t in times))
"""


def measure(c, script: str, fences: int, runs: int) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    fence: list[float] = []
    whole: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = c.run("srun", "--mpi=pmi2", "-N2", "-n4", sys.executable, script, str(fences))
        whole.append(time.perf_counter() - t0)
        fence += [float(x) for x in r.stdout.split()]
    return fence, whole


def main() -> None:
    fences = int(sys.argv[sys.argv.index("--fences") + 1]) if "--fences" in sys.argv else 50
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    for label, addr in (("one agent, both nodes", ""),
                        ("two agents, one per node", "NodeAddr=node-2.invalid ")):
        with bench_cluster(CONFIG.format(addr=addr)) as c:
            agent = None
            if addr:
                home = os.path.join(c.home, "agent2")
                os.makedirs(home)
                agent = subprocess.Popen(
                    [sys.executable, "-m", "corral.agent", "--home", home, "--nodes", "node-2",
                     "--controller-socket", os.path.join(c.home, "corral.sock")],
                    env=c.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                deadline = time.monotonic() + 30
                while "idle" not in c.run("sinfo", "-h", "-N", "-n", "node-2", "-o",
                                          "%T").stdout:
                    if time.monotonic() > deadline:
                        raise SystemExit("the second agent did not register")
                    time.sleep(0.2)
            try:
                script = os.path.join(c.work, "client.py")
                with open(script, "w") as f:
                    f.write(CLIENT)
                fence, whole = measure(c, script, fences, runs)
            finally:
                if agent is not None:
                    agent.terminate()
                    agent.wait(timeout=30)
        print(f"{label}: fence {statistics.median(fence) * 1e3:.2f} ms "
              f"(median of {len(fence)}), srun with {fences} fences {median_ms(whole)}")


if __name__ == "__main__":
    main()
