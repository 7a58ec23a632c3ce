"""The launch plan: everything the process that execs a job's batch step needs, typed.

One record from the controller to that process, in place of a dict read with `.get()` at each
hop: the controller builds it (`controller.launch.Launching.launch_message`), the `launch`
message carries it (`model.messages.LaunchJob`), the agent adds what only the node knows
(`LaunchPlan.node_side`: the script's path, the cgroup root, the bound CPUs, the limits from
cgroup.conf) and writes it as `launch.json`, and the step supervisor (`agent.stepd`) reads it
back with `LaunchPlan.from_dict`, which checks every field's type and range, so a bad plan
fails the step before anything runs.

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

TYPE_CHECKING = False  # typing costs srun's start (the commands import model.messages)
if TYPE_CHECKING:
    from typing import Any
OPEN_MODES = ("append", "truncate")
CONTAINER_NAME_FLAGS = ("auto", "create", "exec", "no_exec")
UNSHARE_NAMESPACES = ("net", "ipc", "uts")


def is_step_name(name: str) -> bool:
    """A step name that is safe as a cgroup path component: [A-Za-z0-9_]{1,32}."""
    return 0 < len(name) <= 32 and name.isascii() and name.replace("_", "a").isalnum()


class SignalSpec(Message):
    """--signal=[B:]SIG[@secs]: what to send and how long before the time limit."""

    num: int = field(lo=0, hi=64)
    secs: int = field(default=60, lo=0, hi=1 << 31)
    batch_only: bool = False


class ContainerSpec(Message):
    """Pyxis' options of a job or step (`--container-*`); see docs/CONTAINERS.md."""

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
    script_text: str | None = field(default=None, omit_none=True)
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


# ---- Pyxis' options -----------------------------------------------------------------------
# (option key, PYXIS_* variable that gives it when the option is not on the command line)
PYXIS_VALUE_OPTIONS = ("container-image", "container-mounts", "container-workdir",
                       "container-name", "container-save", "container-env",
                       "container-unshare")
PYXIS_FLAG_OPTIONS = (  # (--X, --no-X or the opposite, ContainerSpec field)
    ("container-mount-home", "no-container-mount-home", "mount_home"),
    ("container-remap-root", "no-container-remap-root", "remap_root"),
    ("container-entrypoint", "no-container-entrypoint", "entrypoint"),
    ("container-writable", "container-readonly", "writable"),
)
PYXIS_OPTION_KEYS = frozenset(
    [*PYXIS_VALUE_OPTIONS, "container-entrypoint-log",
     *(k for on, off, _ in PYXIS_FLAG_OPTIONS for k in (on, off))])
_TRUE = ("1", "true", "yes", "y", "on")
_FALSE = ("0", "false", "no", "n", "off")


def pyxis_variable(key: str) -> str:
    return "PYXIS_" + key.upper().replace("-", "_")


def parse_mount(entry: str) -> tuple[str, str, list[str]]:
    """"SRC:DST[:FLAGS]" (flags joined by '+') as Pyxis reads it; ValueError with its
    wording."""
    parts = entry.split(":")
    if len(parts) == 1 and parts[0]:
        parts = [parts[0], parts[0]]  # "PATH": the same path inside
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise ValueError(f"--container-mounts: invalid format: {entry}")
    source, target = parts[0], parts[1]
    flags = [f for f in parts[2].split("+") if f] if len(parts) == 3 else []
    if source[0] not in "./" and source not in ("tmpfs", "umount"):
        raise ValueError('mount source must be a relative path, an absolute path, "tmpfs" '
                         'or "umount"')
    if target[0] not in "./":
        raise ValueError("mount target must be a relative path or an absolute path")
    for flag in flags:
        if flag not in ("ro", "rw", "rbind", "bind", "private", "rprivate", "slave",
                        "rslave", "nosuid", "nodev", "noexec", "x-create=dir",
                        "x-create=file", "x-create=auto"):
            raise ValueError(f"--container-mounts: unknown flag {flag!r} in {entry}")
    return source, target, flags


def parse_image_ref(ref: str) -> tuple[str | None, str | None, str, str]:
    """"[USER@][REGISTRY#]IMAGE[:TAG]" -> (user, registry, image, tag).  A first path
    component with a dot names a registry ("nvcr.io/nvidia/x" reads as "nvcr.io#nvidia/x"),
    as Docker reads it; ValueError for an empty name."""
    user = None
    if "@" in ref.split("#", 1)[0]:
        user, ref = ref.split("@", 1)
    registry = None
    if "#" in ref:
        registry, ref = ref.split("#", 1)
    elif "/" in ref and ("." in ref.split("/", 1)[0] or ":" in ref.split("/", 1)[0]):
        registry, ref = ref.split("/", 1)
    tag = "latest"
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        ref, tag = ref.rsplit(":", 1)
    if not ref or not tag:
        raise ValueError("--container-image: invalid image name")
    if registry is None and "/" not in ref:
        ref = "library/" + ref  # Docker Hub's official images
    return user, registry, ref, tag


def image_key(ref: str) -> str:
    """The canonical name of an image reference: "REGISTRY/IMAGE:TAG" (the registry
    docker.io when none is named), what the node's image cache is looked up by."""
    _, registry, image, tag = parse_image_ref(ref)
    return f"{registry or 'docker.io'}/{image}:{tag}"


def container_from_options(values: dict[str, object], env: dict[str, str],
                           ) -> ContainerSpec | None:
    """The container of sbatch/srun/salloc's parsed options (`values`, by option key), the
    PYXIS_* variables filling in those not given; None without --container-image or
    --container-name.  ValueError with Pyxis' message (its "pyxis: " prefix left off)."""
    given: dict[str, object] = {k: v for k, v in values.items() if k in PYXIS_OPTION_KEYS}
    for key in PYXIS_VALUE_OPTIONS:
        var = env.get(pyxis_variable(key))
        if key not in given and var is not None:
            given[key] = var
    for on, off, _ in PYXIS_FLAG_OPTIONS:
        if on in given and off in given:
            both = (f"--{on} and --{off}" if on != "container-writable"
                    else "--container-writable and --container-readonly")
            raise ValueError(f"both {both} were specified")
        if on in given or off in given:
            continue
        var = env.get(pyxis_variable(on))
        if var is not None and var.lower() in _TRUE + _FALSE:
            given[on if var.lower() in _TRUE else off] = True
        elif on == "container-writable":
            var = env.get("PYXIS_CONTAINER_READONLY")
            if var is not None and var.lower() in _TRUE + _FALSE:
                given[off if var.lower() in _TRUE else on] = True
    var = env.get("PYXIS_CONTAINER_ENTRYPOINT_LOG")
    if "container-entrypoint-log" not in given and var is not None and var.lower() in _TRUE:
        given["container-entrypoint-log"] = True

    def text(key: str) -> str | None:
        value = given.get(key)
        if value is None:
            return None
        s = str(value)
        if not s:
            raise ValueError(f"--{key}: argument required")
        return s

    image = text("container-image")
    name_arg = text("container-name")
    if text("container-save") is not None:  # (checked before it could be ignored)
        raise ValueError("--container-save is not supported by Corral")
    if image is None and name_arg is None:
        ignored = sorted(k for k in given if k not in ("container-image", "container-name"))
        if ignored:
            raise ValueError(f"ignoring --{ignored[0]} because neither --container-image nor "
                             f"--container-name is set")
        return None
    if image is not None and not image.startswith(("/", "./", "../")) \
            and not image.endswith((".sqsh", ".squashfs")):
        parse_image_ref(image)
    name, flag = None, "auto"
    if name_arg is not None:
        name, _, flag = name_arg.partition(":")
        flag = flag or "auto"
        if not name:
            raise ValueError("--container-name: empty name")
        if flag not in CONTAINER_NAME_FLAGS:
            raise ValueError('--container-name: flag must be "auto", "create", "exec" or '
                             '"no_exec"')
    mounts: list[str] = []
    for entry in (text("container-mounts") or "").split(","):
        if entry:
            parse_mount(entry)
            mounts.append(entry)
    unshare: list[str] = []
    for ns in (text("container-unshare") or "").split(","):
        if not ns:
            if given.get("container-unshare") is not None:
                raise ValueError("--container-unshare: empty namespace argument")
            continue
        if ns not in UNSHARE_NAMESPACES:
            raise ValueError(f"--container-unshare: unknown namespace '{ns}'")
        unshare.append(ns)
    env_names = [n for n in (text("container-env") or "").split(",") if n]
    for n in env_names:
        if not n.replace("_", "a").isalnum():
            raise ValueError(f"--container-env: invalid format: {text('container-env')}")
    flags = {fld: (on in given) for on, off, fld in PYXIS_FLAG_OPTIONS
             if on in given or off in given}
    return ContainerSpec(
        image=image, mounts=mounts, workdir=text("container-workdir"), name=name,
        name_flag=flag, save=text("container-save"),
        mount_home=flags.get("mount_home", False), remap_root=flags.get("remap_root", False),
        entrypoint=flags.get("entrypoint", False),
        entrypoint_log="container-entrypoint-log" in given,
        writable=flags.get("writable", True), env=env_names, unshare=unshare)


def pyxis_environment(spec: ContainerSpec) -> dict[str, str]:
    """PYXIS_* variables that give `spec` to the srun steps of an allocation (salloc)."""
    out: dict[str, str] = {}
    if spec.image:
        out["PYXIS_CONTAINER_IMAGE"] = spec.image
    if spec.mounts:
        out["PYXIS_CONTAINER_MOUNTS"] = ",".join(spec.mounts)
    if spec.workdir:
        out["PYXIS_CONTAINER_WORKDIR"] = spec.workdir
    if spec.name:
        out["PYXIS_CONTAINER_NAME"] = f"{spec.name}:{spec.name_flag}"
    for on, _, fld in PYXIS_FLAG_OPTIONS:
        out[pyxis_variable(on)] = "1" if getattr(spec, fld) else "0"
    if spec.env:
        out["PYXIS_CONTAINER_ENV"] = ",".join(spec.env)
    if spec.unshare:
        out["PYXIS_CONTAINER_UNSHARE"] = ",".join(spec.unshare)
    return out


# What sbatch, srun and salloc --help print for Pyxis' options (Slurm prints a SPANK plugin's
# options under this heading, before "Help options:").
PYXIS_HELP = """\

Options provided by plugins:
      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH
                              [pyxis] the image to use for the container
                              filesystem: an image of this node's cache
                              (corral image import) or a squashfs file
      --container-mounts=SRC:DST[:FLAGS][,SRC:DST...]
                              [pyxis] bind mount[s] inside the container. Mount
                              flags are separated with "+", e.g. "ro+rprivate"
      --container-workdir=PATH
                              [pyxis] working directory inside the container
      --container-name=NAME   [pyxis] name to use for saving and loading the
                              container on the host. Unnamed containers are
                              removed after the slurm task is complete; named
                              containers are not.
      --container-save=PATH   [pyxis] not supported by Corral (refused)
      --container-mount-home  [pyxis] bind mount the user's home directory
      --no-container-mount-home
                              [pyxis] do not bind mount the user's home
                              directory (the default)
      --container-remap-root  [pyxis] ask to be remapped to root inside the
                              container. Does not grant elevated system
                              permissions, despite appearances.
      --no-container-remap-root
                              [pyxis] do not remap to root inside the container
      --container-entrypoint  [pyxis] execute the entrypoint from the container
                              image
      --no-container-entrypoint
                              [pyxis] do not execute the entrypoint from the
                              container image
      --container-entrypoint-log
                              [pyxis] print the output of the entrypoint script
                              (no effect under Corral: it is the task's output)
      --container-writable    [pyxis] make the container filesystem writable
      --container-readonly    [pyxis] make the container filesystem read-only
      --container-env=NAME[,NAME...]
                              [pyxis] names of environment variables to override
                              with the host environment
      --container-unshare=NS[,NS...]
                              [pyxis] create new namespaces for the container.
                              Supported: net, ipc, uts.
"""
