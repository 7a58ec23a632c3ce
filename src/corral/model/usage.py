"""A step's resource use as sacct, sstat and seff print it (Slurm's formats).

A step's usage is a dict node name -> that node's figures (agent.usage): cpu_user, cpu_sys
(seconds), rss, rss_max, read, write (bytes), ntasks, and where the step had GPUs
gpuutil_ave, gpuutil_max (percent, summed over the step's GPUs on the node), gpumem_max
(bytes).  Corral measures a step per node (its cgroup), not per task: AveRSS and AveCPU are
means over the step's nodes, and MaxRSSTask is given for a one-node step only (task 0).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

UNITS = "KMGTPE"


def convert_exact(value: float) -> str:
    """Slurm's convert_num_unit with CONVERT_NUM_UNIT_EXACT: 204800*1024 -> "200M"."""
    n = int(value)
    if n == 0:
        return "0"
    unit = -1
    while n >= 1024 and n % 1024 == 0 and unit < len(UNITS) - 1:
        n //= 1024
        unit += 1
    return f"{n}{UNITS[unit] if unit >= 0 else ''}"


def small_mega(value_bytes: float) -> str:
    """sacct's MaxDiskRead and friends: MiB, "0.12M" below one, else exact units of M."""
    mib = value_bytes / (1 << 20)
    if mib > 1:
        if mib == int(mib):
            return convert_exact(int(mib) * (1 << 20))
        return f"{mib:.2f}M"
    if mib > 0:
        return f"{mib:.2f}M"
    return "0"


def elapsed(seconds: float, with_ms: bool = False) -> str:
    """sacct's CPU times: [D-]HH:MM:SS, or MM:SS.mmm under an hour when milliseconds count."""
    secs = int(seconds)
    ms = int(round((seconds - secs) * 1000)) if with_ms else 0
    if ms >= 1000:
        secs, ms = secs + 1, 0
    days, rem = divmod(secs, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, s = divmod(rem, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{s:02d}"
    if hours:
        return f"{hours:02d}:{minutes:02d}:{s:02d}"
    if ms:
        return f"{minutes:02d}:{s:02d}.{ms:03d}"
    return f"00:{minutes:02d}:{s:02d}"


def _nodes(usage: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(usage, dict):
        return {}
    return {n: f for n, f in usage.items() if isinstance(f, dict)}


def _num(f: dict[str, Any], key: str) -> float:
    v = f.get(key, 0)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def cpu_seconds(f: dict[str, Any]) -> float:
    return _num(f, "cpu_user") + _num(f, "cpu_sys")


class StepUsage:
    """The figures sacct/sstat derive from one step's per-node usage."""

    def __init__(self, usage: Any) -> None:
        self.nodes = _nodes(usage)

    def __bool__(self) -> bool:
        return bool(self.nodes)

    def _max(self, key: str) -> tuple[float, str]:
        node = max(self.nodes, key=lambda n: (_num(self.nodes[n], key), n))
        return _num(self.nodes[node], key), node

    def _ave(self, key: str) -> float:
        return sum(_num(f, key) for f in self.nodes.values()) / len(self.nodes)

    def _tot(self, key: str) -> float:
        return sum(_num(f, key) for f in self.nodes.values())

    def _task(self) -> str:
        return "0" if len(self.nodes) == 1 else ""

    def user(self) -> float:
        return self._tot("cpu_user")

    def system(self) -> float:
        return self._tot("cpu_sys")

    def total_cpu(self) -> float:
        return self.user() + self.system()

    def field(self, name: str) -> str:
        if not self.nodes:
            return ""
        if name in ("MaxRSS", "MaxRSSNode"):
            value, node = self._max("rss_max")
            return convert_exact(value) if name == "MaxRSS" else node
        if name == "MaxRSSTask":
            return self._task()
        if name == "AveRSS":
            return convert_exact(self._ave("rss_max"))
        if name in ("MaxDiskRead", "MaxDiskReadNode", "MaxDiskWrite", "MaxDiskWriteNode"):
            value, node = self._max("read" if "Read" in name else "write")
            return node if name.endswith("Node") else small_mega(value)
        if name in ("MaxDiskReadTask", "MaxDiskWriteTask", "MinCPUTask"):
            return self._task()
        if name == "AveDiskRead":
            return small_mega(self._ave("read"))
        if name == "AveDiskWrite":
            return small_mega(self._ave("write"))
        cpus = {n: cpu_seconds(f) for n, f in self.nodes.items()}
        if name == "AveCPU":
            return elapsed(sum(cpus.values()) / len(cpus))
        if name == "MinCPU":
            return elapsed(min(cpus.values()))
        if name == "MinCPUNode":
            return min(cpus, key=lambda n: (cpus[n], n))
        if name == "TRESUsageInAve":
            return self.tres("ave")
        if name == "TRESUsageInMax":
            return self.tres("max")
        if name == "TRESUsageInTot":
            return self.tres("tot")
        if name == "TRESUsageOutTot":
            return f"fs/disk={int(self._tot('write'))}"
        if name in ("TRESUsageOutMax", "TRESUsageOutAve"):
            how = self._max("write")[0] if name.endswith("Max") else self._ave("write")
            return f"fs/disk={int(how)}"
        return ""

    def tres(self, how: str) -> str:
        """TRESUsageIn{Ave,Max,Tot}: cpu time, disk read, GPU memory and utilisation,
        memory; in Slurm's order and units (what Corral does not measure is left out)."""
        def pick(key: str) -> float:
            if how == "max":
                return self._max(key)[0]
            if how == "ave":
                return self._ave(key)
            return self._tot(key)

        cpus = [cpu_seconds(f) for f in self.nodes.values()]
        cpu = max(cpus) if how == "max" else sum(cpus) / len(cpus) if how == "ave" else sum(cpus)
        parts = [f"cpu={elapsed(cpu)}", f"fs/disk={int(pick('read'))}"]
        if any("gpumem_max" in f for f in self.nodes.values()):
            parts.append(f"gres/gpumem={convert_exact(pick('gpumem_max'))}")
            util = pick("gpuutil_max" if how == "max" else "gpuutil_ave")
            parts.append(f"gres/gpuutil={int(round(util))}")
        parts.append(f"mem={convert_exact(pick('rss_max'))}")
        return ",".join(parts)


def job_cpu(steps: list[dict[str, Any]]) -> tuple[float, float] | None:
    """(user, system) seconds of a job: the sum over its steps (sacct's job line)."""
    found = False
    user = sys_ = 0.0
    for s in steps:
        u = StepUsage(s.get("usage"))
        if u:
            found = True
            user += u.user()
            sys_ += u.system()
    return (user, sys_) if found else None
