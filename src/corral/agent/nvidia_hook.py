"""The job's GPUs inside its container, as Enroot's NVIDIA hook gives them (98-nvidia.sh).

Enroot's hook runs `nvidia-container-cli configure` inside the container's namespaces before
the program starts.  Corral's runtime (bubblewrap, agent.container) has no such point between
its namespaces and the exec, and the container's file system is shared by the job's steps, so
the driver is not mounted into it; instead bubblewrap binds, for this one process:

- the device files: `/dev/nvidiaN` of each GPU the task holds (and no other), `/dev/nvidiactl`,
  `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools` (`/dev/nvidia-modeset` for display/graphics,
  `/dev/gdrdrv` and the IMEX channels for compute, as Enroot), into a /dev of the container's
  own (agent.container);
- the driver's user-space libraries and programs of the capabilities asked for
  (NVIDIA_DRIVER_CAPABILITIES), read-only, under `/run/corral-nvidia/{lib,lib32,bin}`, which
  come first in the container's LD_LIBRARY_PATH and PATH (the host's driver must win over
  anything of the image's: it has to match the kernel's module);
- the persistence daemon's socket.

What the driver consists of comes from `nvidia-container-cli list` where NVIDIA's toolkit is
installed (its own knowledge of the driver's files), else from `ldconfig -p`, the host's
/dev and PATH (the lists below are libnvidia-container's, by capability).

When: only for a task that holds GPUs on this node, and unless NVIDIA_VISIBLE_DEVICES says
`void` (nothing at all) or `none` (the driver's files, no GPU) — the user's value first, else
the image's, as Enroot.  `all` (NGC images set it), unset or empty: the task's GPUs; a list of
indexes: those of the task's GPUs.  Inside, CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL count
the visible GPUs from 0 (the others' device files are not there, so CUDA numbers only these,
as under Slurm with ConstrainDevices); NVIDIA_VISIBLE_DEVICES names them by host index.

Not done: NVIDIA_REQUIRE_* (not checked: accepted, no effect), MIG devices, UUIDs in
NVIDIA_VISIBLE_DEVICES (refused), ldconfig's cache inside the image (the libraries are found
through LD_LIBRARY_PATH only).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

CAPABILITIES = ("compute", "compat32", "display", "graphics", "utility", "video")
# NVIDIA's container toolkit's default (Enroot's hook defaults to utility alone, which gives
# nvidia-smi but no CUDA: Corral's users mostly run CUDA in images that do not say)
DEFAULT_CAPABILITIES = ("compute", "utility")

# the driver's files by capability (as libnvidia-container lists them; names without version)
LIBRARIES: dict[str, tuple[str, ...]] = {
    "utility": ("libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so"),
    "compute": ("libcuda.so", "libcudadebugger.so", "libnvidia-opencl.so",
                "libnvidia-gpucomp.so", "libnvidia-ptxjitcompiler.so",
                "libnvidia-fatbinaryloader.so", "libnvidia-allocator.so",
                "libnvidia-compiler.so", "libnvidia-pkcs11.so", "libnvidia-pkcs11-openssl3.so",
                "libnvidia-nvvm.so"),
    "video": ("libvdpau_nvidia.so", "libnvidia-encode.so", "libnvidia-opticalflow.so",
              "libnvcuvid.so"),
    "graphics": ("libnvidia-eglcore.so", "libnvidia-glcore.so", "libnvidia-tls.so",
                 "libnvidia-glsi.so", "libnvidia-rtcore.so", "libnvoptix.so",
                 "libGLX_nvidia.so", "libEGL_nvidia.so", "libGLESv2_nvidia.so",
                 "libGLESv1_CM_nvidia.so", "libnvidia-glvkspirv.so", "libnvidia-cbl.so"),
    "display": ("libnvidia-fbc.so", "libnvidia-ifr.so"),
}
BINARIES: dict[str, tuple[str, ...]] = {
    "utility": ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"),
    "compute": ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"),
}
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
GRAPHICS_DEVICES = ("nvidia-modeset",)
COMPUTE_EXTRAS = ("gdrdrv", "nvidia-caps-imex-channels")  # GDRCopy, IMEX (Enroot's hook)
PERSISTENCED_SOCKET = "/run/nvidia-persistenced/socket"

INSIDE = "/run/corral-nvidia"  # where the driver's files are seen in the container
_GPU_NODE = re.compile(r"nvidia(\d+)")
_BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin", "/sbin")


class HookError(ValueError):
    """A request the hook cannot honour (its text is shown to the user)."""


# ---- what is asked --------------------------------------------------------------------------

@dataclass
class Request:
    gpus: list[int]  # host indexes of the GPUs to show (empty: `none`)
    capabilities: set[str]


def parse_gpu_list(value: str | None) -> list[int]:
    """"0,2" -> [0, 2] (CUDA_VISIBLE_DEVICES as the agent sets it); [] for unset or empty."""
    out: list[int] = []
    for part in (value or "").split(","):
        part = part.strip()
        if part.isdecimal() and part.isascii():
            out.append(int(part))
    return out


def parse_capabilities(value: str | None) -> set[str]:
    """NVIDIA_DRIVER_CAPABILITIES ("compute,utility", "all"; unset or empty: the default)."""
    words = [w.strip() for w in (value or "").replace(" ", ",").split(",") if w.strip()]
    if not words:
        return set(DEFAULT_CAPABILITIES)
    caps: set[str] = set()
    for w in words:
        if w == "all":
            return set(CAPABILITIES)
        if w not in CAPABILITIES:
            raise HookError(f"unknown NVIDIA driver capability: {w}")
        caps.add(w)
    return caps


def request_for(task_gpus: list[int], job_env: dict[str, str], image_env: dict[str, str],
                ) -> Request | None:
    """What to show the task (None: nothing).  The NVIDIA_* variables are the user's where
    set, else the image's (Enroot's hook reads them so)."""
    if not task_gpus:
        return None  # a task without GPUs gets nothing of the driver's

    def var(name: str) -> str | None:
        return job_env[name] if name in job_env else image_env.get(name)

    visible = (var("NVIDIA_VISIBLE_DEVICES") or "all").strip()
    if visible == "void":
        return None
    caps = parse_capabilities(var("NVIDIA_DRIVER_CAPABILITIES"))
    if visible == "none":
        return Request([], caps)
    if visible == "all":
        return Request(list(task_gpus), caps)
    asked: list[int] = []
    for part in visible.split(","):
        part = part.strip()
        if not (part.isdecimal() and part.isascii()):
            raise HookError(f"NVIDIA_VISIBLE_DEVICES={visible}: only all, none, void or GPU "
                            f"indexes are understood")
        asked.append(int(part))
    gpus = [g for g in task_gpus if g in asked]  # of the task's own, never another's
    return Request(gpus, caps)


# ---- what the host has ------------------------------------------------------------------------

@dataclass
class Driver:
    """The host's driver: device files (by name under /dev), libraries (soname -> host path),
    32-bit libraries, programs (name -> host path), IPC sockets."""

    devices: set[str] = field(default_factory=set)
    libraries: dict[str, str] = field(default_factory=dict)
    libraries32: dict[str, str] = field(default_factory=dict)
    binaries: dict[str, str] = field(default_factory=dict)
    ipcs: list[str] = field(default_factory=list)
    minors: dict[int, int] = field(default_factory=dict)  # GPU index -> /dev/nvidiaN's N
    source: str = "ldconfig"

    @property
    def present(self) -> bool:
        return "nvidiactl" in self.devices


def parse_ldconfig(text: str) -> list[tuple[str, bool, str]]:
    """`ldconfig -p`'s lines -> (name, 64-bit, path), in its order (the first of a name wins
    for the loader too)."""
    out: list[tuple[str, bool, str]] = []
    for line in text.splitlines():
        if "=>" not in line:
            continue
        left, path = line.split("=>", 1)
        left, path = left.strip(), path.strip()
        m = re.match(r"(\S+)\s+\((.*)\)", left)
        if not m or not path.startswith("/"):
            continue
        flags = m.group(2)
        is64 = "64" in flags  # x86-64, AArch64, 64bit, ... ("libc6" alone: 32-bit)
        out.append((m.group(1), is64, path))
    return out


def _stem_of(name: str) -> str | None:
    """The capability list's entry a library's file name belongs to ("libcuda.so.1" ->
    "libcuda.so"), or None."""
    for names in LIBRARIES.values():
        for stem in names:
            if name == stem or name.startswith(stem + "."):
                return stem
    return None


def bin_dirs(ldconfig_text: str) -> list[str]:
    """Where the driver's programs are looked for: beside the driver's own libraries first
    (`/usr/local/nvidia/lib64` -> `/usr/local/nvidia/bin`, as container images of NVIDIA's
    lay the driver out), then the system's directories."""
    out: list[str] = []
    for name, is64, path in parse_ldconfig(ldconfig_text):
        lib_dir = os.path.dirname(path)
        if is64 and _stem_of(name) in ("libcuda.so", "libnvidia-ml.so") \
                and os.path.basename(lib_dir) in ("lib64", "lib"):
            d = os.path.join(os.path.dirname(lib_dir), "bin")
            if d not in out and d not in _BIN_DIRS:
                out.append(d)
    return out + list(_BIN_DIRS)


def _is_elf(path: str) -> bool:
    """A program, not a wrapper script: a script that execs the real program by its host
    path (`/usr/bin/nvidia-smi` on some hosts) finds nothing inside the container."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def driver_from_ldconfig(ldconfig_text: str, dev_names: set[str],
                         binaries: dict[str, str], minors: dict[int, int]) -> Driver:
    libs: dict[str, str] = {}
    libs32: dict[str, str] = {}
    for name, is64, path in parse_ldconfig(ldconfig_text):
        if _stem_of(name) is None:
            continue
        (libs if is64 else libs32).setdefault(name, path)
    devices = {d for d in dev_names
               if d in CONTROL_DEVICES + GRAPHICS_DEVICES + COMPUTE_EXTRAS or _GPU_NODE.fullmatch(d)}
    return Driver(devices, libs, libs32, dict(binaries), [], dict(minors), "ldconfig")


def driver_from_cli(listing: str, ldconfig_text: str,
                    realpath: Callable[[str], str] = os.path.realpath) -> Driver:
    """`nvidia-container-cli list --libraries --binaries --ipcs --device=…`'s output (one
    host path a line: device files, programs, libraries, sockets).  It names each library's
    file (libcuda.so.550.54.15); the names programs load it by (libcuda.so.1, libcuda.so)
    are those of `ldconfig -p` that lead to that file."""
    drv = Driver(source="nvidia-container-cli")
    names_of: dict[str, list[tuple[str, bool]]] = {}
    for name, is64, path in parse_ldconfig(ldconfig_text):
        if _stem_of(name) is not None:
            names_of.setdefault(realpath(path), []).append((name, is64))
    for line in listing.splitlines():
        path = line.strip()
        if not path.startswith("/"):
            continue
        name = os.path.basename(path)
        if path.startswith("/dev/"):
            drv.devices.add(path[len("/dev/"):])
        elif ".so" in name:
            is32 = any(part in path for part in ("/lib32/", "/i386-linux-gnu/", "/lib/i386"))
            (drv.libraries32 if is32 else drv.libraries).setdefault(name, path)
            for alias, alias64 in names_of.get(realpath(path), []):
                (drv.libraries if alias64 else drv.libraries32).setdefault(alias, path)
        elif any(path.startswith(d + "/") for d in _BIN_DIRS):
            drv.binaries[name] = path
        else:
            drv.ipcs.append(path)
    return drv


def gpu_minors(information: dict[str, str]) -> dict[int, int]:
    """GPU index -> device minor, from /proc/driver/nvidia/gpus/<PCI address>/information
    (NVML numbers GPUs in PCI order, the device files by the driver's minor)."""
    out: dict[int, int] = {}
    for index, pci in enumerate(sorted(information)):
        m = re.search(r"Device Minor:\s*(\d+)", information[pci])
        if m:
            out[index] = int(m.group(1))
    return out


# ---- what the task gets ----------------------------------------------------------------------

@dataclass
class GpuMounts:
    devices: list[str]  # host device files, bound at the same place
    files: list[tuple[str, str]]  # (host path, path inside), read-only
    env: dict[str, str]  # set in the container (after the image's)
    path_prepend: list[str]  # directories put first in PATH
    library_prepend: list[str]  # ... in LD_LIBRARY_PATH

    def bwrap_args(self) -> list[str]:
        args: list[str] = []
        for dev in self.devices:
            args += ["--dev-bind", dev, dev]
        for src, dst in self.files:
            args += ["--ro-bind", src, dst]
        return args

    def apply_env(self, env: dict[str, str]) -> None:
        env.update(self.env)
        for var, dirs in (("PATH", self.path_prepend), ("LD_LIBRARY_PATH", self.library_prepend)):
            if dirs:
                old = env.get(var, "")
                env[var] = ":".join(dirs + ([old] if old else []))


def plan(request: Request, driver: Driver, dev_dir: str = "/dev") -> GpuMounts:
    """The mounts and variables that show `request`'s GPUs and capabilities."""
    caps = request.capabilities
    devices: list[str] = []
    names = [*CONTROL_DEVICES]
    if caps & {"display", "graphics"}:
        names += GRAPHICS_DEVICES
    if "compute" in caps:
        names += COMPUTE_EXTRAS
    for gpu in request.gpus:
        names.append(f"nvidia{driver.minors.get(gpu, gpu)}")
    for name in names:
        if name in driver.devices and os.path.join(dev_dir, name) not in devices:
            devices.append(os.path.join(dev_dir, name))
    wanted = {stem for cap in caps for stem in LIBRARIES.get(cap, ())}
    files: list[tuple[str, str]] = []
    lib_dirs: list[str] = []
    for sub, libs, on in (("lib", driver.libraries, True),
                          ("lib32", driver.libraries32, "compat32" in caps)):
        chosen = sorted(n for n in libs if _stem_of(n) in wanted) if on else []
        for name in chosen:
            files.append((libs[name], f"{INSIDE}/{sub}/{name}"))
        if chosen:
            lib_dirs.append(f"{INSIDE}/{sub}")
    bins = sorted(b for cap in caps for b in BINARIES.get(cap, ()) if b in driver.binaries)
    for name in bins:
        files.append((driver.binaries[name], f"{INSIDE}/bin/{name}"))
    for ipc in driver.ipcs:
        if "persistenced" in ipc:
            files.append((ipc, ipc))
    ids = ",".join(str(g) for g in request.gpus)
    ordinals = ",".join(str(i) for i in range(len(request.gpus)))
    env = {"NVIDIA_VISIBLE_DEVICES": ids or "none",
           "NVIDIA_DRIVER_CAPABILITIES": ",".join(c for c in CAPABILITIES if c in caps),
           "CUDA_VISIBLE_DEVICES": ordinals, "GPU_DEVICE_ORDINAL": ordinals}
    return GpuMounts(devices, files, env, [f"{INSIDE}/bin"] if bins else [], lib_dirs)


# ---- the host (I/O) ------------------------------------------------------------------------

def _run(argv: list[str], timeout: float = 30.0) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _ldconfig() -> str | None:
    for name in ("ldconfig.real", "ldconfig"):  # (Ubuntu's ldconfig is a script around .real)
        found = shutil.which(name) or next(
            (p for d in ("/sbin", "/usr/sbin") if os.access(p := os.path.join(d, name), os.X_OK)),
            None)
        if found:
            return found
    return None


_cache: dict[tuple[object, ...], Driver] = {}


def host_driver(gpus: list[int], dev_dir: str = "/dev") -> Driver:
    """The host's driver (cached while the loader's cache and /dev stay the same)."""
    key: tuple[object, ...] = (tuple(gpus), dev_dir, _mtime("/etc/ld.so.cache"),
                               _mtime(dev_dir))
    found = _cache.get(key)
    if found is None:
        found = _discover(gpus, dev_dir)
        _cache.clear()
        _cache[key] = found
    return found


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _discover(gpus: list[int], dev_dir: str) -> Driver:
    try:
        dev_names = set(os.listdir(dev_dir))
    except OSError:
        dev_names = set()
    if "nvidiactl" not in dev_names:
        return Driver()  # no driver loaded: nothing to show (simulated GPUs, a CPU node)
    ldconfig = _ldconfig()
    ld_text = (_run([ldconfig, "-p"]) if ldconfig else None) or ""
    cli = shutil.which("nvidia-container-cli")
    if cli and dev_dir == "/dev":
        out = _run([cli, "list", "--libraries", "--binaries", "--ipcs", "--compat32",
                    "--device=" + ",".join(str(g) for g in gpus)])
        if out is not None:
            drv = driver_from_cli(out, ld_text)
            if drv.present:
                # its GPU device lines are the task's GPUs, in index order
                nodes = sorted(int(d[6:]) for d in drv.devices if _GPU_NODE.fullmatch(d))
                drv.minors = dict(zip(sorted(gpus), nodes, strict=False))
                drv.devices |= dev_names & set(COMPUTE_EXTRAS)  # (not the toolkit's)
                return drv
    info: dict[str, str] = {}
    base = "/proc/driver/nvidia/gpus"
    try:
        for pci in os.listdir(base):
            try:
                with open(os.path.join(base, pci, "information")) as f:
                    info[pci] = f.read()
            except OSError:
                continue
    except OSError:
        pass
    binaries: dict[str, str] = {}
    for name in {b for names in BINARIES.values() for b in names}:
        for d in bin_dirs(ld_text):
            p = os.path.join(d, name)
            if os.access(p, os.X_OK) and _is_elf(p):
                binaries[name] = p
                break
    drv = driver_from_ldconfig(ld_text, dev_names, binaries, gpu_minors(info))
    if os.path.exists(PERSISTENCED_SOCKET):
        drv.ipcs.append(PERSISTENCED_SOCKET)
    return drv


def mounts_for(task_gpus: list[int], job_env: dict[str, str], image_env: dict[str, str],
               dev_dir: str = "/dev") -> GpuMounts | None:
    """The GPU mounts of one task, or None (no GPUs, opted out, or no driver on this host).
    HookError for NVIDIA_* values it cannot honour."""
    request = request_for(task_gpus, job_env, image_env)
    if request is None:
        return None
    driver = host_driver(task_gpus, dev_dir)
    if not driver.present:
        return None
    return plan(request, driver, dev_dir)
