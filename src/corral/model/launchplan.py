"""The launch plan: everything the process that execs a job's batch step needs, typed.

One record from the controller to that process, in place of a dict read with `.get()` at each
hop: the controller builds it (`controller.launch.launch_message`, called by the shell after
the commit), the `launch` message carries it (`model.messages.LaunchJob`), the agent adds what
only the node knows (`LaunchPlan.node_side`: the script's path, the cgroup root, the bound
CPUs, the limits from cgroup.conf) and writes it as `launch.json`, and the step supervisor
(`agent.stepd`) reads it back with `LaunchPlan.from_dict`, which checks every field's type and
range, so a bad plan fails the step before anything runs.

The fields stay flat on the wire (one JSON object, the keys `launch.json` always had); they
fall into these groups:

- identity: `uid`, `gid`, `user`, `home`, `groups`
- program and environment: `script_text` (controller to agent), `script` (agent to
  supervisor), `argv`, `env`, `umask`
- I/O: `work_dir`, `stdout`, `stderr`, `stdin`, `open_mode`
- time: `time_limit`, `kill_wait`, `signal`
- resources the controller allocated: `cpus_count`, `cpu_ids`, `gpus`, `mem_mb`, `node_mem_mb`
- node side (the agent's): `cpus` (bound), `cgroup_root`, `cgroup_cluster`, `mem_limit_mb`,
  `pids_max`, `notify_socket`
- container (`ContainerSpec`, Pyxis' options)
"""

from __future__ import annotations

from corral.model.messages import MAX_UID, Message, MessageError, field
from corral.model.pyxis import CONTAINER_NAME_FLAGS, UNSHARE_NAMESPACES

TYPE_CHECKING = False  # typing costs srun's start (the commands import model.messages)
if TYPE_CHECKING:
    from typing import Any
OPEN_MODES = ("append", "truncate")


def is_step_name(name: str) -> bool:
    """A step name that is safe as a cgroup path component: [A-Za-z0-9_]{1,32}."""
    return 0 < len(name) <= 32 and name.isascii() and name.replace("_", "a").isalnum()


class SignalSpec(Message):
    """--signal=[B:]SIG[@secs]: what to send and how long before the time limit."""

    num: int = field(lo=0, hi=64)
    secs: int = field(default=60, lo=0, hi=1 << 31)
    batch_only: bool = False


class ContainerSpec(Message):
    """Pyxis' options of a job or step (`--container-*`, read by model.pyxis); see
    docs/CONTAINERS.md."""

    image: str | None = field(default=None, omit_none=True, maxlen=4096)
    mounts: list[str] = field(default_factory=list, maxlen=256)
    workdir: str | None = field(default=None, omit_none=True, maxlen=4096)
    name: str | None = field(default=None, omit_none=True, maxlen=256)
    name_flag: str = field(default="auto", choices=CONTAINER_NAME_FLAGS)
    save: str | None = field(default=None, omit_none=True, maxlen=4096)
    mount_home: bool = False
    remap_root: bool = False
    entrypoint: bool = False
    entrypoint_log: bool = False
    writable: bool = True
    env: list[str] = field(default_factory=list, maxlen=1024)
    unshare: list[str] = field(default_factory=list, choices=UNSHARE_NAMESPACES)

    def validate(self, where: str) -> None:
        if self.image is None and self.name is None:
            raise MessageError(f"{where}: a container needs an image or a name")


class PlanHead(Message):
    """The fields that say whose a step is and where its errors go: what the supervisor can
    still use to report a plan that fails its checks (`LaunchPlan` extends it)."""

    job_id: int
    step: str = field(default="batch", maxlen=32)
    node_name: str = ""
    # identity
    uid: int = field(lo=0, hi=MAX_UID)
    gid: int = field(lo=0, hi=MAX_UID)
    user: str = field(default="", maxlen=256)
    home: str = ""
    groups: list[int] | None = field(default=None, omit_none=True, lo=0, hi=MAX_UID)
    stdout: str | None = None
    stderr: str | None = None
    open_mode: str = field(default="truncate", choices=OPEN_MODES)
    notify_socket: str | None = None

    def validate(self, where: str) -> None:
        if not is_step_name(self.step):
            raise MessageError(f"{where}.step: {self.step[:40]!r} is not a step name")


class LaunchPlan(PlanHead):
    """How to start one batch step (see the module docstring for the groups)."""

    restart_count: int = 0
    # program and environment
    # the batch script: as long as SchedulerParameters=max_script_size= lets it be (4 MB by
    # default, at most 512 MB as in Slurm), not the 1 MiB of an ordinary text field
    script_text: str | None = field(default=None, omit_none=True, maxlen=512 << 20)
    script: str | None = None
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    umask: int | None = field(default=None, omit_none=True, lo=0, hi=0o7777)
    # I/O
    work_dir: str | None = None
    stdin: str | None = None
    # time
    time_limit: float | None = field(default=None, lo=-1)
    kill_wait: float | None = field(default=None, lo=0, hi=1e6)
    signal: SignalSpec | None = None
    # what the controller allocated on this node
    cpus_count: int = 0
    cpu_ids: list[int] | None = field(default=None, hi=1 << 24)
    gpus: list[int] = field(default_factory=list, hi=1 << 16)
    mem_mb: int | None = None
    node_mem_mb: int | None = None
    acctg_freq: str | None = field(default=None, maxlen=1024)  # --acctg-freq (agent.usage)
    # the node's side, added by its agent
    cpus: list[int] | None = field(default=None, hi=1 << 24)
    cgroup_root: str | None = None
    cgroup_cluster: str = ""
    mem_limit_mb: int | None = None
    pids_max: int | None = None
    container_dir: str | None = None  # where this node keeps its jobs' containers
    image_cache: str | None = None  # this node's image cache (agent.images)
    # the container the step runs in (Pyxis' options), None for the host's file system
    container: ContainerSpec | None = field(default=None, omit_none=True)

    def node_side(self, **values: Any) -> LaunchPlan:
        """A copy with the node's fields set (and the script's text left out: the agent has
        written it to a file)."""
        data = {s.name: getattr(self, s.name) for s in self.fields()}
        data.update(values)
        data["script_text"] = None
        return LaunchPlan(**data)
