"""What a job step's process gets on its node before the user's program runs: its identity,
its cgroup, its CPUs and its GPUs, its limits, and the container it runs in.

One `prepare -> exec` pipeline, used by batch steps (`agent.stepd`) and srun tasks
(`agent.tasks`) alike:

- `ExecRequest`: what one process is to exec (argv, environment, working directory, identity,
  CPUs, resource limits, container), built by the caller from its record (a batch step's
  `model.launchplan.LaunchPlan`, an srun task's `LaunchTasks`/`TaskSpec`).
- `prepare()` runs the ordered hooks of `HOOKS` on it: each hook is a function that shapes
  the request (takes the SLURM_RLIMIT_* variables out into limits, wraps the program in the
  container runtime, ...) or refuses it with a `LaunchFailure`.  A hook is written once and
  applies to both kinds of step.
- The exec itself has two back-ends, because the two callers start processes differently
  for good reasons (docs/ARCHITECTURE.md): the batch supervisor forks and, in the child,
  calls `enter()` (binding, limits, identity) then execs `request.command()`; the srun task
  manager posix_spawns `request.command()` behind `setpriv` (no Python in the child, which
  keeps srun fast) and applies binding and limits from outside before the task passes its
  gate.  Both exec the same command line, so a wrapper added by a hook runs in both.

The pieces the hooks and back-ends use:

- `task_identity()` / `as_user()`: whose rights a task runs with, and a context that takes
  them for the agent's own checks (opening files, finding the program) so that root never
  resolves a path for a user.
- `resolve_program()`: slurmstepd's `_build_path` and exec checks, with Slurm's error texts,
  done with the task owner's rights.
- `job_cgroup()`: the cgroup a step's processes join: the batch step's group when the job's
  batch script runs on this node (so the job's memory and CPU limits cover its srun tasks, and
  suspending or ending the job reaches them), else a step group `job_<id>/step_<step>` created
  with the job's limits on this node.
- `job_cpus()`, `task_cpus()`: the CPUs a step and each of its tasks are bound to.
- `gpu_environment()`: the variables that name a process's GPUs (model.jobenv's rule).
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from corral.agent.cgroup import V1_CONTROLLERS, CgroupError, StepCgroup
from corral.model.jobenv import gpu_variables

TYPE_CHECKING = False
if TYPE_CHECKING:
    from corral.model.launchplan import ContainerSpec

CGROUP_ROOT = "/sys/fs/cgroup"


def gpu_environment(step_gpus: list[int] | None, task_gpus: list[int] | None) -> dict[str, str]:
    """GPU variables of one process (see model.jobenv.gpu_variables)."""
    return gpu_variables(step_gpus, task_gpus)


# ---- identity ---------------------------------------------------------------------------

@dataclass
class RunAs:
    """Who a job's process runs as (not the controller's caller identity)."""

    uid: int
    gid: int
    user: str
    switch: bool  # the agent is root and the process belongs to someone else
    groups: list[int] = field(default_factory=list)
    prefix: list[str] = field(default_factory=list)  # setpriv argv, empty when not switching
    error: str | None = None


def task_identity(uid: int, gid: int, user: str, setpriv: str | None,
                  group_cache: dict[tuple[str, int], list[int]] | None = None) -> RunAs:
    """Who a step's processes run as; `error` is set when this agent cannot run them."""
    euid, egid = os.geteuid(), os.getegid()
    if euid != 0 or (uid, gid) == (euid, egid):
        ident = RunAs(uid, gid, user, switch=False)
        if uid != euid:
            ident.error = (f"cannot run tasks of uid {uid}: this agent runs as uid {euid}, "
                           f"not root")
        return ident
    try:
        pw_name: str | None = pwd.getpwuid(uid).pw_name
    except KeyError:
        pw_name = None
    user = user or pw_name or str(uid)
    cache = group_cache if group_cache is not None else {}
    key = (user, gid)
    if key not in cache:
        try:
            cache[key] = os.getgrouplist(user, gid) if pw_name else [gid]
        except OSError:
            cache[key] = [gid]
    ident = RunAs(uid, gid, user, switch=True, groups=cache[key])
    if setpriv:
        ident.prefix = [setpriv, f"--reuid={uid}", f"--regid={gid}",
                        "--init-groups" if pw_name else "--clear-groups", "--"]
    return ident


@contextlib.contextmanager
def as_user(ident: RunAs) -> Iterator[None]:
    """Take the owner's rights (effective ids and groups) for the agent's own file access:
    a root agent must not open, follow or probe a path the user could not."""
    if not ident.switch:
        yield
        return
    groups, egid = os.getgroups(), os.getegid()
    os.setgroups(ident.groups)
    os.setegid(ident.gid)
    os.seteuid(ident.uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(egid)
        os.setgroups(groups)


# ---- the program --------------------------------------------------------------------------

class LaunchFailure(Exception):
    """A process that cannot start: `message` goes to its stderr, `exit_code` (or
    `signal_num`) is reported as its end."""

    def __init__(self, message: str, exit_code: int, signal_num: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.signal_num = signal_num


def _strerror(err: int) -> str:
    return os.strerror(err) if err else "Unknown error"


def resolve_program(name: str, path_env: str | None, cwd: str, ident: RunAs,
                    ) -> tuple[str, None] | tuple[None, LaunchFailure]:
    """The program slurmstepd would exec (its _build_path), or how the exec would fail.

    Every probe runs with the owner's rights (`as_user`): a program in a directory the user
    cannot search fails with "Permission denied" whether it exists or not, as it does under
    Slurm, where the lookup runs in the task after it became the user."""
    try:
        with as_user(ident):
            return _resolve(name, path_env, cwd)
    except OSError as e:  # cannot take the user's rights: refuse rather than look as root
        return None, LaunchFailure(f"slurmstepd: error: cannot become uid {ident.uid}: "
                                   f"{_strerror(e.errno or 0)}\n", 1)


def _resolve(name: str, path_env: str | None, cwd: str,
             ) -> tuple[str, None] | tuple[None, LaunchFailure]:
    def absolute(p: str) -> str:
        return p if p.startswith("/") else os.path.join(cwd, p)

    candidate: str | None = None
    if "/" in name:
        candidate = name
    else:
        for d in (path_env or "").split(":"):
            if not d:
                continue
            p = os.path.join(d, name)
            with contextlib.suppress(OSError):
                if not stat.S_ISDIR(os.stat(absolute(p)).st_mode):
                    candidate = absolute(p)
                    break
    if candidate is None:
        return None, LaunchFailure(f"slurmstepd: error: execve(): {name}: "
                                   f"No such file or directory\n", errno.ENOENT)
    try:
        st = os.stat(absolute(candidate))
    except OSError as e:
        err = e.errno or errno.ENOENT
        return None, LaunchFailure(f"slurmstepd: error: execve(): {candidate}: "
                                   f"{_strerror(err)}\n", err)
    # effective ids: the owner's, taken by as_user (access() alone checks the real ids)
    executable = os.access(absolute(candidate), os.X_OK, effective_ids=True)
    if stat.S_ISDIR(st.st_mode) or not executable:
        return None, LaunchFailure(f"slurmstepd: error: execve(): {candidate}: "
                                   f"{_strerror(errno.EACCES)}\n", errno.EACCES)
    try:
        with open(absolute(candidate), "rb") as f:
            head = f.read(256)
    except OSError:
        head = b""
    if head.startswith(b"#!"):
        interp = head[2:].split(b"\n", 1)[0].strip().split(None, 1)
        if interp and not os.path.exists(interp[0]):
            shown = interp[0].decode(errors="replace")
            return None, LaunchFailure(f"slurmstepd: error: execve(): bad interpreter({shown}): "
                                       f"No such file or directory\n", errno.ENOENT)
    if "=" in candidate:  # env(1) would take it for a variable
        return None, LaunchFailure(f"slurmstepd: error: execve(): {candidate}: not supported: "
                                   f"this agent cannot start a program whose path holds '='\n", 1)
    return candidate, None


# ---- the pipeline -------------------------------------------------------------------------

@dataclass
class ExecRequest:
    """What one process is to exec, as the hooks of `prepare()` shape it."""

    argv: list[str]  # argv[0]: the program (resolved on the host unless in a container)
    env: dict[str, str]
    cwd: str
    ident: RunAs
    job_id: int = 0
    step: str = "batch"
    cpus: list[int] | None = None
    gpus: list[int] | None = None  # its GPUs on this node (None: CUDA_VISIBLE_DEVICES says)
    umask: int | None = None  # the batch step's (sbatch's, no longer in env); None: SLURM_UMASK
    rlimits: dict[str, tuple[int, bool]] = field(default_factory=dict)
    container: ContainerSpec | None = None
    container_dir: str | None = None  # where this node keeps its jobs' containers
    image_cache: str | None = None  # this node's image cache (agent.images)
    # argv[0] is a file of the host's to take into a container (a batch script)
    carry_program: bool = False
    wrapper: list[str] = field(default_factory=list)  # run first, with argv as its arguments
    notes: list[str] = field(default_factory=list)  # for the supervisor's log

    def command(self) -> list[str]:
        """The command line to exec: the wrappers the hooks added, then the program."""
        return [*self.wrapper, *self.argv]

    @property
    def in_container(self) -> bool:
        return self.container is not None


Hook = Callable[[ExecRequest], None]


def take_rlimits(request: ExecRequest) -> None:
    """SLURM_RLIMIT_* (the submitting shell's limits) out of the environment, into limits."""
    limits, request.env = rlimits_from_env(request.env)
    request.rlimits.update(limits)


def wrap_container(request: ExecRequest) -> None:
    """Run the program inside its container (agent.container): the runtime's command line
    comes first, the program is looked up in the image."""
    if request.container is None:
        return
    from corral.agent import container  # only steps that ask for a container pay for it

    container.wrap(request)


HOOKS: tuple[Hook, ...] = (take_rlimits, wrap_container)


def prepare(request: ExecRequest, hooks: Sequence[Hook] = HOOKS) -> ExecRequest:
    """Run the hooks in order; LaunchFailure when one refuses the request."""
    for hook in hooks:
        hook(request)
    return request


def enter(request: ExecRequest, groups: list[int] | None = None) -> None:
    """In the forked child of the exec (the batch back-end): bind CPUs and set the limits
    while still root, then become the owner (`groups`, when given, replace the user's own).
    OSError when the identity cannot be taken; the other problems go to `request.notes`."""
    problem = bind_cpus(0, request.cpus)
    if problem:
        request.notes.append(problem)
    request.notes.extend(apply_rlimits(0, request.rlimits))
    ident = request.ident
    if ident.switch:
        os.setgroups(ident.groups if groups is None else groups)
        os.setgid(ident.gid)
        os.setuid(ident.uid)


# ---- cgroups --------------------------------------------------------------------------------

def cgroup_root() -> str | None:
    """The cgroup hierarchy this agent confines jobs in, or None where it may not write it."""
    if os.geteuid() != 0 or not os.access(CGROUP_ROOT, os.W_OK):
        return None
    return CGROUP_ROOT


def existing_group(root: str, job_id: int, step: str, cluster: str) -> StepCgroup | None:
    """The group of a step that another process made (the batch step's, by its supervisor),
    without touching its limits; None when it does not exist here."""
    try:
        group = StepCgroup(root, job_id, step, cluster)
    except CgroupError:
        return None
    if group.version == 2:
        path = os.path.join(root, group.rel)
        if os.path.isfile(os.path.join(path, "cgroup.procs")):
            group.dirs[""] = path
    else:
        for ctrl in V1_CONTROLLERS:
            path = os.path.join(root, ctrl, group.rel)
            if os.path.isfile(os.path.join(path, "cgroup.procs")):
                group.dirs[ctrl] = path
    return group if group.dirs else None


@dataclass
class JobGroup:
    group: StepCgroup
    created: bool  # made for this step (removed at its end), or the batch step's (kept)


def job_cgroup(root: str | None, cluster: str, job_id: int, step_id: int,
               cpus: list[int] | None, mem_mb: int | None,
               ) -> tuple[JobGroup | None, list[str]]:
    """The group a step's processes join, and notes about limits not applied: a new
    `job_<id>/step_<step_id>` with the job's CPUs and memory on this node.  Where the batch
    step runs here, the step is its sibling under the job's group, which holds the job's
    limits (as Slurm's job_J/step_N), on the batch step's CPUs: a signal to the batch step
    does not reach this step's tasks directly, only through their srun, once.  None where
    cgroups are not usable (the caller falls back to process groups)."""
    if not root:
        return None, []
    batch = existing_group(root, job_id, "batch", cluster)
    if batch is not None:
        cpus = group_cpus(batch) or cpus
    try:
        group = StepCgroup(root, job_id, str(step_id), cluster)
        notes = group.create(cpus or None, mem_mb)
    except OSError as e:
        return None, [f"cgroups not used ({e})"]
    return JobGroup(group, created=True), notes


def group_cpus(group: StepCgroup) -> list[int] | None:
    """The CPUs a group is confined to by its cpuset (None without one)."""
    for ctrl in ("cpuset", ""):
        path = group.dirs.get(ctrl)
        if path is None:
            continue
        try:
            with open(os.path.join(path, "cpuset.cpus")) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text:
            return parse_cpus(text)
    return None


def parse_cpus(text: str) -> list[int]:
    """"0-2,5" -> [0, 1, 2, 5] (the cpuset list format)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


def add_to_group(group: StepCgroup, pid: int) -> str | None:
    """Move `pid` into the group; the reason when it could not be."""
    try:
        group.add_pid(pid)
    except CgroupError as e:
        return str(e)
    return None


# ---- CPUs -----------------------------------------------------------------------------------

def step_cpus(job_cpus: list[int] | None, count: int, busy: set[int]) -> list[int] | None:
    """The CPUs of a step: `count` of the job's CPUs on this node that no other step of the
    job holds (all of them for count 0, an --overlap step); None when unknown."""
    if not job_cpus:
        return None
    if count <= 0:
        return list(job_cpus)
    free = [c for c in job_cpus if c not in busy]
    if len(free) < count:
        return list(job_cpus)  # the controller's count says it fits: never bind tighter than asked
    return free[:count]


def task_cpus(cpus: list[int] | None, local_id: int, cpus_per_task: int,
              local_tasks: int) -> list[int] | None:
    """The CPUs of one task: its block of `cpus_per_task` of the step's CPUs (task/affinity's
    default binding when tasks fit), else all of the step's CPUs."""
    if not cpus:
        return None
    per = max(1, cpus_per_task)
    if local_tasks * per > len(cpus):
        return list(cpus)
    return cpus[local_id * per:(local_id + 1) * per]


def bind_cpus(pid: int, cpus: list[int] | None) -> str | None:
    if not cpus:
        return None
    try:
        os.sched_setaffinity(pid, cpus)
    except OSError as e:
        return f"cannot bind to CPUs {cpus}: {e.strerror}"
    return None


# ---- resource limits (PropagateResourceLimits) -----------------------------------------------

# srun sends the submitting shell's soft limits as SLURM_RLIMIT_<NAME>=<value> ("U" first when
# the user asked for that one with --propagate); slurmstepd sets them before the task runs
# and takes the variables out of its environment.
RLIMIT_NAMES = ("CPU", "FSIZE", "DATA", "STACK", "CORE", "RSS", "NPROC", "NOFILE", "MEMLOCK",
                "AS")
_RLIM_INFINITY_WIRE = (1 << 64) - 1


def rlimits_from_env(env: dict[str, str]) -> tuple[dict[str, tuple[int, bool]], dict[str, str]]:
    """({NAME: (soft limit, asked for explicitly)}, the environment without the variables).
    A malformed value is dropped (the limit stays the node's)."""
    import resource

    limits: dict[str, tuple[int, bool]] = {}
    rest: dict[str, str] = {}
    for k, v in env.items():
        name = k[len("SLURM_RLIMIT_"):] if k.startswith("SLURM_RLIMIT_") else ""
        if name not in RLIMIT_NAMES:
            rest[k] = v
            continue
        explicit = v.startswith("U")
        digits = v[1:] if explicit else v
        if not digits.isdecimal() or not digits.isascii() or len(digits) > 20:
            continue
        value = int(digits)
        limits[name] = (resource.RLIM_INFINITY if value >= _RLIM_INFINITY_WIRE else value,
                        explicit)
    return limits, rest


def apply_rlimits(pid: int, limits: dict[str, tuple[int, bool]]) -> list[str]:
    """Set each soft limit on `pid` (0: this process) as slurmstepd does: the hard limit is
    raised to it where needed (root may); the lines to report for limits that could not be
    set but were asked for explicitly (srun --propagate=NAME)."""
    import resource

    problems: list[str] = []
    for name, (soft, explicit) in limits.items():
        res = getattr(resource, f"RLIMIT_{name}", None)
        if res is None:
            continue
        try:
            _, hard = resource.prlimit(pid, res)
            inf = resource.RLIM_INFINITY
            if hard != inf and (soft == inf or soft > hard):
                hard = soft
            resource.prlimit(pid, res, (soft, hard))
        except (OSError, ValueError) as e:
            if explicit:
                reason = e.strerror if isinstance(e, OSError) else str(e)
                problems.append(f"Can't propagate RLIMIT_{name} of {soft} from submit host: "
                                f"{reason}")
    return problems
