"""Resource use of the job steps running here (Slurm's jobacct_gather), sampled from cgroups.

Each step has a group `corral/<cluster>/job_<id>/step_<step>` (agent.cgroup).  At every
`JobAcctGatherFrequency` seconds the agent reads, per step: CPU time (user, system), memory
(resident now, and the most seen), and bytes read and written; and every GPU of the machine
(agent.gpu).  It sends them in one `usage` message; a step's last figures go with its end
(`final`).  Where a kernel file is missing (cgroup v1 without cpuacct/blkio, old kernels),
the figures come from `/proc` of the step's processes instead.

The figures, per step and node (bytes and seconds):
cpu_user, cpu_sys, rss (now), rss_max, read, write, ntasks (processes seen), time.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from corral.agent.gpu import GpuBackend

DEFAULT_FREQUENCY = 30.0
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def parse_frequency(value: str | None) -> float | None:
    """JobAcctGatherFrequency / --acctg-freq: "30" or "task=30,energy=0" -> 30 (task
    sampling seconds); 0 turns periodic sampling off (None); a bad value gives the default."""
    if value is None or not str(value).strip():
        return DEFAULT_FREQUENCY
    for item in str(value).split(","):
        key, sep, num = item.strip().partition("=")
        if not sep:
            key, num = "task", key
        if key.strip().lower() == "task":
            try:
                n = float(num)
            except ValueError:
                return DEFAULT_FREQUENCY
            return None if n <= 0 else max(0.2, n)
    return DEFAULT_FREQUENCY


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _keyed(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def step_groups(root: str, cluster: str) -> dict[tuple[int, str], dict[str, str]]:
    """(job id, step name) -> {controller ("" on v2): step directory} of every step group."""
    v2 = os.path.exists(os.path.join(root, "cgroup.controllers"))
    bases = {"": root} if v2 else {c: os.path.join(root, c) for c in
                                   ("memory", "cpuacct", "blkio", "pids", "freezer")}
    out: dict[tuple[int, str], dict[str, str]] = {}
    for ctrl, base in bases.items():
        top = os.path.join(base, "corral", cluster)
        try:
            jobs = os.listdir(top)
        except OSError:
            continue
        for jname in jobs:
            if not jname.startswith("job_") or not jname[4:].isdigit():
                continue
            try:
                steps = os.listdir(os.path.join(top, jname))
            except OSError:
                continue
            for sname in steps:
                if sname.startswith("step_"):
                    out.setdefault((int(jname[4:]), sname[5:]), {})[ctrl] = \
                        os.path.join(top, jname, sname)
    return out


def _pids(dirs: dict[str, str]) -> list[int]:
    for path in dirs.values():
        text = _read(os.path.join(path, "cgroup.procs"))
        if text is not None:
            return [int(x) for x in text.split()]
    return []


def _proc_figures(pids: list[int]) -> dict[str, int | float]:
    """CPU (with reaped children's), resident memory and I/O of live processes."""
    user = sys_ = 0.0
    rss = read = write = 0
    for pid in pids:
        stat = _read(f"/proc/{pid}/stat")
        if stat is None:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        try:
            # utime, stime, cutime, cstime are fields 14-17 (11-14 after the comm)
            user += (int(fields[11]) + int(fields[13])) / CLK_TCK
            sys_ += (int(fields[12]) + int(fields[14])) / CLK_TCK
            rss += int(fields[21]) * PAGE
        except (IndexError, ValueError):
            continue
        io = _keyed((_read(f"/proc/{pid}/io") or "").replace(":", ""))
        read += io.get("read_bytes", 0)
        write += io.get("write_bytes", 0)
    return {"cpu_user": user, "cpu_sys": sys_, "rss": rss, "read": read, "write": write}


def read_group(dirs: dict[str, str]) -> dict[str, Any]:
    """One sample of a step's group: the cgroup's own counters where the kernel keeps
    them (they include processes that have exited), else /proc of its processes."""
    pids = _pids(dirs)
    proc = _proc_figures(pids)
    out: dict[str, Any] = {**proc, "ntasks": len(pids)}
    if "" in dirs:  # v2
        d = dirs[""]
        cpu = _keyed(_read(os.path.join(d, "cpu.stat")))
        if "user_usec" in cpu:
            out["cpu_user"] = cpu["user_usec"] / 1e6
            out["cpu_sys"] = cpu.get("system_usec", 0) / 1e6
        mem = _keyed(_read(os.path.join(d, "memory.stat")))
        if "anon" in mem:
            out["rss"] = mem["anon"]
        io = _read(os.path.join(d, "io.stat"))
        if io:
            rd = wr = 0
            for word in io.split():
                k, _, v = word.partition("=")
                if k == "rbytes" and v.isdigit():
                    rd += int(v)
                elif k == "wbytes" and v.isdigit():
                    wr += int(v)
            out["read"], out["write"] = max(rd, proc["read"]), max(wr, proc["write"])
    else:
        acct = dirs.get("cpuacct")
        cpu = _keyed(_read(os.path.join(acct, "cpuacct.stat"))) if acct else {}
        if "user" in cpu:
            out["cpu_user"] = cpu["user"] / CLK_TCK
            out["cpu_sys"] = cpu.get("system", 0) / CLK_TCK
        memdir = dirs.get("memory")
        mem = _keyed(_read(os.path.join(memdir, "memory.stat"))) if memdir else {}
        if "total_rss" in mem:
            out["rss"] = mem["total_rss"]
        blk = dirs.get("blkio")
        text = _read(os.path.join(blk, "blkio.throttle.io_service_bytes")) if blk else None
        if text:
            rd = sum(int(p[2]) for p in (ln.split() for ln in text.splitlines())
                     if len(p) == 3 and p[1] == "Read" and p[2].isdigit())
            wr = sum(int(p[2]) for p in (ln.split() for ln in text.splitlines())
                     if len(p) == 3 and p[1] == "Write" and p[2].isdigit())
            out["read"], out["write"] = max(rd, proc["read"]), max(wr, proc["write"])
    return out


def _num(d: dict[str, Any], key: str) -> float:
    """A figure, or 0 for anything that is not a finite non-negative number."""
    v = d.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e18:
        return 0.0
    return float(v)


class StepFigures:
    """What a step has used so far: counters keep their highest value (they only grow;
    a process that exits takes its /proc figures with it), memory its peak."""

    __slots__ = ("cpu_user", "cpu_sys", "rss", "rss_max", "read", "write", "ntasks", "time")

    def __init__(self) -> None:
        self.cpu_user = self.cpu_sys = 0.0
        self.rss = self.rss_max = self.read = self.write = self.ntasks = 0
        self.time = 0.0

    def add(self, s: dict[str, Any], now: float) -> None:
        self.cpu_user = max(self.cpu_user, _num(s, "cpu_user"))
        self.cpu_sys = max(self.cpu_sys, _num(s, "cpu_sys"))
        self.rss = int(_num(s, "rss"))
        self.rss_max = max(self.rss_max, self.rss, int(_num(s, "rss_max")))
        self.read = max(self.read, int(_num(s, "read")))
        self.write = max(self.write, int(_num(s, "write")))
        self.ntasks = max(self.ntasks, int(_num(s, "ntasks")))
        self.time = now

    def to_dict(self) -> dict[str, Any]:
        return {"cpu_user": round(self.cpu_user, 3), "cpu_sys": round(self.cpu_sys, 3),
                "rss": self.rss, "rss_max": self.rss_max, "read": self.read,
                "write": self.write, "ntasks": self.ntasks, "time": round(self.time, 3)}


def rusage_figures(ru: Any) -> dict[str, Any]:
    """A step's figures from getrusage(RUSAGE_CHILDREN) of its supervisor: every process
    of the step it reaped (ru_maxrss is the largest one's peak, in KiB on Linux)."""
    return {"cpu_user": ru.ru_utime, "cpu_sys": ru.ru_stime, "rss_max": ru.ru_maxrss * 1024,
            "read": ru.ru_inblock * 512, "write": ru.ru_oublock * 512}


class UsageSampler:
    """The agent's sampler: figures per running step, GPU samples per interval."""

    def __init__(self, root: str | None, cluster: str, gpus: GpuBackend) -> None:
        self.root, self.cluster, self.gpus = root, cluster, gpus
        self.steps: dict[tuple[int, str], StepFigures] = {}
        # sbatch --acctg-freq of the jobs launched here (None: no periodic sampling)
        self.job_freq: dict[int, float | None] = {}
        # sample() runs in a worker thread, final() on the agent's loop
        self._lock = threading.Lock()

    def set_job_frequency(self, job_id: int, value: str | None) -> None:
        if value:
            self.job_freq[job_id] = parse_frequency(value)

    def forget_job(self, job_id: int) -> None:
        self.job_freq.pop(job_id, None)

    def tick(self, default: float | None) -> float | None:
        """How often to wake: the shortest interval any job here asks for (None: never)."""
        freqs = [f for f in (default, *self.job_freq.values()) if f]
        return min(freqs) if freqs else None

    def _due(self, key: tuple[int, str], now: float, default: float | None) -> bool:
        freq = self.job_freq.get(key[0], default) if key[0] in self.job_freq else default
        fig = self.steps.get(key)
        if freq is None:
            return False
        # a new step at once (as Slurm's first poll), then every `freq` seconds
        return fig is None or now - fig.time >= freq - 0.05

    def sample(self, now: float | None = None,
               default: float | None = DEFAULT_FREQUENCY) -> dict[str, Any]:
        """One `usage` message: the figures of every running step due for a sample (its
        job's --acctg-freq, else `default`) and every GPU's sample."""
        now = time.time() if now is None else now
        seen = step_groups(self.root, self.cluster) if self.root else {}
        with self._lock:
            due = [key for key in seen if self._due(key, now, default)]
        figures = {key: read_group(seen[key]) for key in due}
        with self._lock:
            for key, fig in figures.items():
                self.steps.setdefault(key, StepFigures()).add(fig, now)
            for key in [k for k in self.steps if k not in seen]:
                del self.steps[key]  # its group is gone: the step has ended (its end was sent)
            steps = [{"job_id": j, "step": s, **self.steps[(j, s)].to_dict()}
                     for (j, s) in sorted(figures)]
        try:
            gpus = [g.to_dict() for g in self.gpus.sample()]
        except Exception:  # a GPU that stops answering must not stop step sampling
            gpus = []
        return {"type": "usage", "time": now, "gpus": gpus, "steps": steps}

    def final(self, job_id: int, step: str, dirs: dict[str, str] | None,
              extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """A step's last figures (its group still there, its processes gone), merged with
        what sampling saw while it ran: one `usage` message marked final.  None when
        nothing measured the step (no cgroup, no sample): sacct then shows nothing rather
        than zeros."""
        now = time.time()
        with self._lock:
            sampled = self.steps.pop((job_id, step), None)
        if sampled is None and not dirs and not extra:
            return None
        fig = sampled or StepFigures()
        if dirs:
            last = read_group(dirs)
            last["rss_max"] = max(last.get("rss", 0), fig.rss_max)
            last["rss"] = 0
            fig.add(last, now)
        if extra:
            fig.add({**extra, "rss": 0}, now)
        fig.rss = 0
        return {"type": "usage", "time": now, "gpus": [],
                "steps": [{"job_id": job_id, "step": step, "final": True, **fig.to_dict()}]}
