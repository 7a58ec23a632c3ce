"""Pyxis' options (`--container-*`, their PYXIS_* variables and #SBATCH forms), as sbatch,
srun and salloc read them: pure, and importing nothing, since the commands import it at start
(model.launchplan.ContainerSpec is what the controller and agents check them as)."""

from __future__ import annotations

CONTAINER_NAME_FLAGS = ("auto", "create", "exec", "no_exec")
UNSHARE_NAMESPACES = ("net", "ipc", "uts")

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
                           ) -> dict[str, object] | None:
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
    save = text("container-save")
    if save is not None and save.endswith("/"):  # (checked before it could be ignored)
        raise ValueError("--container-save: target is a directory")
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
    spec: dict[str, object] = {
        "image": image, "mounts": mounts, "workdir": text("container-workdir"), "name": name,
        "save": save,
        "name_flag": flag, "mount_home": flags.get("mount_home", False),
        "remap_root": flags.get("remap_root", False),
        "entrypoint": flags.get("entrypoint", False),
        "entrypoint_log": "container-entrypoint-log" in given,
        "writable": flags.get("writable", True), "env": env_names, "unshare": unshare}
    return {k: v for k, v in spec.items() if v is not None}


def pyxis_environment(spec: dict[str, object]) -> dict[str, str]:
    """PYXIS_* variables that give `spec` (container_from_options') to the srun steps of an
    allocation (salloc)."""
    out: dict[str, str] = {}

    def joined(key: str) -> str:
        value = spec.get(key)
        return ",".join(str(x) for x in value) if isinstance(value, list) else ""

    if spec.get("image"):
        out["PYXIS_CONTAINER_IMAGE"] = str(spec["image"])
    if joined("mounts"):
        out["PYXIS_CONTAINER_MOUNTS"] = joined("mounts")
    if spec.get("workdir"):
        out["PYXIS_CONTAINER_WORKDIR"] = str(spec["workdir"])
    if spec.get("name"):
        out["PYXIS_CONTAINER_NAME"] = f"{spec['name']}:{spec.get('name_flag', 'auto')}"
    if spec.get("save"):
        out["PYXIS_CONTAINER_SAVE"] = str(spec["save"])
    for on, _, fld in PYXIS_FLAG_OPTIONS:
        out[pyxis_variable(on)] = "1" if spec.get(fld) else "0"
    if joined("env"):
        out["PYXIS_CONTAINER_ENV"] = joined("env")
    if joined("unshare"):
        out["PYXIS_CONTAINER_UNSHARE"] = joined("unshare")
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
      --container-save=PATH   [pyxis] Save the container state to a squashfs
                              file on the remote host filesystem.
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
