"""Per-step cgroups: confine a job step's processes, limit memory and CPUs, freeze, count OOM kills.

One `StepCgroup` per step, at `<hierarchy>/corral/job_<id>/step_<step>`; the memory, CPU and
process-count (pids) limits are set on the step group.  `CgroupConf` reads the limits an
administrator sets in `$CORRAL_HOME/cgroup.conf` (Slurm's keys, plus Corral's own pids limit).  Two layouts are handled:

- cgroup v2: `root` is a unified mount (it has `cgroup.controllers`); one directory holds
  everything.  Freezing (`cgroup.freeze`) and killing (`cgroup.kill`) are core v2 features, so
  they work even when no controller is enabled there.
- cgroup v1: `root` holds one mount per controller (`memory/`, `freezer/`, `cpuset/`, ...); the
  step gets a directory in each controller it uses.

Every method that touches the kernel raises `CgroupError` (an OSError subclass) when the
hierarchy is not writable; callers fall back to process-group handling.  Only the stdlib `os`
is used: the job process calls `add_self()` between fork and exec.
"""

from __future__ import annotations

import errno
import os
import time

# v1 controllers the step uses, in the order their cgroup.procs is trusted for listing pids.
# cpuacct and blkio only count (agent.usage reads them): CPU time and I/O of exited processes
V1_CONTROLLERS = ("freezer", "memory", "cpuset", "pids", "cpuacct", "blkio")
V2_CONTROLLERS = ("memory", "cpuset", "pids")
UNLIMITED_V1 = "-1"


class CgroupError(OSError):
    """The cgroup hierarchy could not be used (not mounted, not writable, bad value)."""


def detect_version(root: str) -> int | None:
    """2 for a unified hierarchy at `root`, 1 for per-controller v1 mounts under it, else None."""
    if os.path.exists(os.path.join(root, "cgroup.controllers")):
        return 2
    for name in ("memory", "freezer", "cpuset", "pids"):
        if os.path.exists(os.path.join(root, name, "cgroup.procs")):
            return 1
    return None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, value: str) -> None:
    # One write() per value: cgroup files take one value per write call.
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def format_cpus(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the cpuset list format)."""
    ranges: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(ranges)


class StepCgroup:
    """The cgroup(s) of one job step."""

    def __init__(self, root: str, job_id: int | str, step: str = "batch",
                 cluster: str = "") -> None:
        version = detect_version(root)
        if version is None:
            raise CgroupError(errno.ENOENT, f"no cgroup hierarchy at {root}")
        self.root = root
        self.version: int = version
        # several clusters may run on one machine (tests, demos): job ids repeat between them
        base = os.path.join("corral", cluster) if cluster else "corral"
        self.job_rel = os.path.join(base, f"job_{job_id}")
        self.rel = os.path.join(self.job_rel, f"step_{step}")
        # controller name ("" for v2) -> absolute step directory, filled by create()
        self.dirs: dict[str, str] = {}
        self.frozen = False

    # -- set-up -------------------------------------------------------------------------
    def create(self, cpus: list[int] | None = None, mem_mb: int | None = None,
               pids_max: int | None = None, job_limits: bool = False) -> list[str]:
        """Make the step group(s) and set limits.  Returns notes about limits that could not
        be applied (the group itself is usable); raises CgroupError if no group could be made.
        `job_limits`: set the CPUs and memory on the job's group as well (the batch step does,
        as Slurm's job-level cgroup), so the job's other steps, siblings of this one, share
        them."""
        if self.version == 2:
            notes = self._create_v2(cpus, mem_mb, job_limits)
            step = self.dirs[""]
            enabled = set(_read(os.path.join(step, "cgroup.controllers")).split())
            pids_dir = step if "pids" in enabled else None
        else:
            notes = self._create_v1(cpus, mem_mb, job_limits)
            pids_dir = self.dirs.get("pids")
        if pids_max is not None and pids_max > 0:
            if pids_dir is None:
                notes.append("pids controller not available: process count not limited")
            else:
                self._try_write(notes, os.path.join(pids_dir, "pids.max"), str(pids_max))
        return notes

    def _mkdirs(self, base: str, rel: str) -> str:
        path = os.path.join(base, rel)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise CgroupError(e.errno, f"cannot create cgroup {path}: {e.strerror}") from None
        return path

    def _create_v2(self, cpus: list[int] | None, mem_mb: int | None,
                   job_limits: bool) -> list[str]:
        notes: list[str] = []
        available = _read(os.path.join(self.root, "cgroup.controllers")).split()
        wanted = [c for c in V2_CONTROLLERS if c in available]
        corral = self._mkdirs(self.root, "corral")
        job = self._mkdirs(self.root, self.job_rel)
        # Controllers must be enabled on every level above the step (no processes live there).
        for parent in (self.root, corral, job):
            for ctrl in wanted:
                try:
                    _write(os.path.join(parent, "cgroup.subtree_control"), f"+{ctrl}")
                except OSError as e:
                    notes.append(f"cannot enable {ctrl} in {parent}: {e.strerror}")
        step = self._mkdirs(self.root, self.rel)
        self.dirs[""] = step
        enabled = set(_read(os.path.join(step, "cgroup.controllers")).split())
        # the job's group first: a step's cpuset must stay within its parent's
        places = ([job] if job_limits else []) + [step]
        if mem_mb is not None:
            if "memory" in enabled:
                for place in places:
                    self._try_write(notes, os.path.join(place, "memory.max"),
                                    str(mem_mb * 1024 * 1024))
                    swap = os.path.join(place, "memory.swap.max")
                    if os.path.exists(swap):
                        self._try_write(notes, swap, "0")
            else:
                notes.append("memory controller not available: memory limit not enforced")
        if cpus:
            if "cpuset" in enabled:
                for place in places:
                    self._try_write(notes, os.path.join(place, "cpuset.cpus"), format_cpus(cpus))
            else:
                notes.append("cpuset controller not available: CPU confinement by affinity only")
        return notes

    def _create_v1(self, cpus: list[int] | None, mem_mb: int | None,
                   job_limits: bool) -> list[str]:
        notes: list[str] = []
        for ctrl in V1_CONTROLLERS:
            base = os.path.join(self.root, ctrl)
            if not os.path.exists(os.path.join(base, "cgroup.procs")):
                continue
            if ctrl == "cpuset" and not cpus:
                continue
            try:
                if ctrl == "cpuset":
                    self.dirs[ctrl] = self._create_v1_cpuset(base, cpus or [], job_limits)
                else:
                    self.dirs[ctrl] = self._mkdirs(base, self.rel)
            except OSError as e:
                notes.append(f"cgroup {ctrl} not usable: {e.strerror}")
        if not self.dirs:
            raise CgroupError(errno.EACCES, "no writable cgroup v1 controller under " + self.root)
        if mem_mb is not None:
            mem = self.dirs.get("memory")
            if mem is None:
                notes.append("memory controller not available: memory limit not enforced")
            else:
                limit = str(mem_mb * 1024 * 1024)
                # the job's group first (limits are hierarchical), then the step's
                for place in ([os.path.dirname(mem)] if job_limits else []) + [mem]:
                    self._try_write(notes, os.path.join(place, "memory.limit_in_bytes"), limit)
                    memsw = os.path.join(place, "memory.memsw.limit_in_bytes")
                    # memsw must be >= the RAM limit: set it second so swap cannot extend it.
                    if os.path.exists(memsw):
                        self._try_write(notes, memsw, limit)
        return notes

    def _create_v1_cpuset(self, base: str, cpus: list[int], job_limits: bool = False) -> str:
        # A fresh v1 cpuset has empty cpus/mems and refuses tasks: copy them down each level.
        parent = base
        for part in self.rel.split(os.sep):
            child = self._mkdirs(parent, part)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not _read(os.path.join(child, name)).strip():
                    _write(os.path.join(child, name), _read(os.path.join(parent, name)).strip())
            if job_limits and child == os.path.join(base, self.job_rel):
                try:
                    _write(os.path.join(child, "cpuset.cpus"), format_cpus(cpus))
                except OSError:
                    pass  # a leftover step's CPUs outside: the step's own cpuset confines it
            parent = child
        _write(os.path.join(parent, "cpuset.cpus"), format_cpus(cpus))
        return parent

    @staticmethod
    def _try_write(notes: list[str], path: str, value: str) -> None:
        try:
            _write(path, value)
        except OSError as e:
            notes.append(f"cannot write {value} to {path}: {e.strerror}")

    # -- membership ---------------------------------------------------------------------
    def pids_max(self) -> int | None:
        """The process-count limit in force (None: none, or no pids controller)."""
        path = self.dirs.get("" if self.version == 2 else "pids")
        try:
            value = _read(os.path.join(path, "pids.max")).strip() if path else "max"
        except OSError:
            return None
        return int(value) if value.isdigit() else None

    def add_pid(self, pid: int) -> None:
        for path in self.dirs.values():
            try:
                _write(os.path.join(path, "cgroup.procs"), str(pid))
            except OSError as e:
                raise CgroupError(e.errno, f"cannot add {pid} to {path}: {e.strerror}") from None

    def add_self(self) -> None:
        self.add_pid(os.getpid())

    def pids(self) -> list[int]:
        """Every process in the step group, including ones that called setsid()."""
        for path in self.dirs.values():
            try:
                text = _read(os.path.join(path, "cgroup.procs"))
            except OSError:
                continue
            return [int(x) for x in text.split()]
        return []

    # -- control ------------------------------------------------------------------------
    @property
    def can_freeze(self) -> bool:
        return "" in self.dirs or "freezer" in self.dirs

    def freeze(self, timeout: float = 2.0) -> bool:
        """Freeze every process; True once the kernel reports the group frozen."""
        if self.version == 2:
            path = self.dirs[""]
            _write(os.path.join(path, "cgroup.freeze"), "1")
            done = lambda: "frozen 1" in _read(os.path.join(path, "cgroup.events"))  # noqa: E731
        else:
            state = os.path.join(self.dirs["freezer"], "freezer.state")
            _write(state, "FROZEN")
            done = lambda: _read(state).strip() == "FROZEN"  # noqa: E731
        self.frozen = True
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def thaw(self) -> None:
        if self.version == 2:
            _write(os.path.join(self.dirs[""], "cgroup.freeze"), "0")
        else:
            _write(os.path.join(self.dirs["freezer"], "freezer.state"), "THAWED")
        self.frozen = False

    def kill_all(self) -> bool:
        """SIGKILL every process at once where the kernel offers it (v2 cgroup.kill)."""
        path = os.path.join(self.dirs.get("", ""), "cgroup.kill")
        if self.version == 2 and os.path.exists(path):
            _write(path, "1")
            return True
        return False

    def oom_kills(self) -> int:
        """How many processes of the step the kernel's OOM killer took (0 if unknown)."""
        try:
            if self.version == 2:
                text = _read(os.path.join(self.dirs[""], "memory.events"))
            elif "memory" in self.dirs:
                text = _read(os.path.join(self.dirs["memory"], "memory.oom_control"))
            else:
                return 0
        except OSError:
            return 0
        counts = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        kills = int(counts.get("oom_kill", "0"))
        # Kernels before 4.13 have no v1 oom_kill counter: a group stuck at its limit counts.
        if kills == 0 and counts.get("under_oom") == "1":
            kills = 1
        return kills

    def remove(self, timeout: float = 2.0) -> bool:
        """Delete the step group (and the job group when no other step uses it).
        Retries while exiting processes still hold it; False if it could not be removed."""
        ok = True
        for path in self.dirs.values():
            deadline = time.monotonic() + timeout
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        ok = False
                        break
                    time.sleep(0.01)
            try:
                os.rmdir(os.path.dirname(path))  # the job group; busy while other steps run
            except OSError:
                pass
        return ok


def cluster_group_name(home: str) -> str:
    """The cgroup subtree (under corral/) of the cluster whose agent lives in `home`."""
    import hashlib

    return "c" + hashlib.sha256(os.path.abspath(home).encode()).hexdigest()[:12]


def remove_cluster_groups(root: str, cluster: str) -> None:
    """Remove the cluster's (empty) corral/<cluster> groups once its agent has stopped."""
    bases = [root] if detect_version(root) == 2 else \
        [os.path.join(root, c) for c in sorted(os.listdir(root)) if os.path.isdir(os.path.join(root, c))]
    for base in bases:
        path = os.path.join(base, "corral", cluster)
        if not os.path.isdir(path):
            continue
        for sub in sorted(os.listdir(path), reverse=True):  # job groups left by a crash
            full = os.path.join(path, sub)
            if os.path.isdir(full):
                for step in os.listdir(full):
                    if os.path.isdir(os.path.join(full, step)):
                        try:
                            os.rmdir(os.path.join(full, step))
                        except OSError:
                            pass
                try:
                    os.rmdir(full)
                except OSError:
                    pass
        try:
            os.rmdir(path)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------
# cgroup.conf
# ---------------------------------------------------------------------------------------

DEFAULT_PIDS_MAX = 4096  # per job step: generous for threads, fatal to a fork bomb


class CgroupConf:
    """The limits of `$CORRAL_HOME/cgroup.conf`, in Slurm's format (`Key=Value` lines, `#`
    comments, keys case-insensitive).  Slurm's keys that Corral applies:

    - ConstrainRAMSpace (yes|no; Corral's default yes, Slurm's no): limit each job's memory
    - AllowedRAMSpace (percent of the job's memory, default 100)
    - MaxRAMPercent (percent of the machine's memory, default 100): upper bound of any limit
    - MinRAMSpace (MB, default 30): lower bound of any limit

    and Corral's own (Slurm 22.05 has no process-count limit):

    - CorralPidsMax (default 4096; 0 or "infinity" for none): processes and threads per job
      step (cgroup pids.max), so a fork bomb is contained.

    Other Slurm keys are accepted and ignored.  A bad value is reported in `notes` and the
    default kept."""

    def __init__(self) -> None:
        self.constrain_ram = True
        self.allowed_ram_percent = 100.0
        self.max_ram_percent = 100.0
        self.min_ram_mb = 30
        self.pids_max: int | None = DEFAULT_PIDS_MAX
        self.notes: list[str] = []

    @classmethod
    def load(cls, path: str) -> CgroupConf:
        conf = cls()
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read(1 << 20)
        except FileNotFoundError:
            return conf
        except OSError as e:
            conf.notes.append(f"{path}: {e.strerror}; defaults used")
            return conf
        conf.parse(text, path)
        return conf

    def parse(self, text: str, where: str = "cgroup.conf") -> None:
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            key, sep, value = line.partition("=")
            key, value = key.strip().lower(), value.strip()
            try:
                if not sep:
                    raise ValueError("not Key=Value")
                if key == "constrainramspace":
                    if value.lower() not in ("yes", "no"):
                        raise ValueError("not yes or no")
                    self.constrain_ram = value.lower() == "yes"
                elif key == "allowedramspace":
                    self.allowed_ram_percent = _percent(value, upper=None)
                elif key == "maxrampercent":
                    self.max_ram_percent = _percent(value, upper=100.0)
                elif key == "minramspace":
                    self.min_ram_mb = _count(value)
                elif key == "corralpidsmax":
                    limit = 0 if value.lower() in ("infinity", "unlimited") else _count(value)
                    self.pids_max = limit or None
            except ValueError as e:
                self.notes.append(f"{where}:{n}: {raw.strip()[:80]}: {e}; default kept")

    def memory_limit_mb(self, mem_mb: int | None, node_mem_mb: int,
                        total_mem_mb: int) -> int | None:
        """The memory limit of a job step: its memory (the node's memory for a job without
        one, as Slurm gives it the whole node) times AllowedRAMSpace, between MinRAMSpace and
        MaxRAMPercent of the machine.  None when ConstrainRAMSpace=no."""
        if not self.constrain_ram:
            return None
        base = mem_mb if mem_mb else node_mem_mb
        limit = int(base * self.allowed_ram_percent / 100)
        cap = int(total_mem_mb * self.max_ram_percent / 100)
        return max(1, max(self.min_ram_mb, min(limit, cap)))


def _percent(value: str, upper: float | None) -> float:
    number = float(value)
    if not number == number or number <= 0 or (upper is not None and number > upper):
        raise ValueError("not a percentage" + (f" in (0, {upper:g}]" if upper else ""))
    return number


def _count(value: str) -> int:
    if not value.isdigit():
        raise ValueError("not a non-negative integer")
    return int(value)
