"""Containers for job steps, as Pyxis runs them: the launch pipeline's container hook.

`wrap(request)` (called by `agent.launch.wrap_container` for batch steps and srun tasks alike)
turns a request whose plan names a container into one that runs the same program inside it:

- the image: a squashfs file (`--container-image=PATH.sqsh`, opened as the job's user, so a
  file the user cannot read is refused) or an image of this node's cache (`corral image
  import`, agent.images), mounted read-only with squashfuse once per job on this node
  (`<home>/containers/<node>/job_<id>/images/<key>`) and shared by the job's tasks;
- the container's file system: a kernel overlay of that mount and a writable layer per
  container (`.../c/<name>`), made once and reused by the job's later steps when named
  (`--container-name`), removed at the step's end when not;
- the runtime: bubblewrap (Debian's `bubblewrap`), started as the job's user after it has
  joined the job's cgroup and taken its CPUs and limits, exactly like a task without a
  container: an unprivileged user namespace and a mount namespace, the user's own uid (or
  0 inside with --container-remap-root, which maps to the user's uid outside and gives no
  host privilege), no new privileges (setuid files in the image do not elevate), a /dev of
  its own with the host's shared memory and the task's GPUs only (their driver's files too,
  agent.nvidia_hook), /proc and /sys;
- the user's mounts (`--container-mounts`): each source checked as the job's user before
  the step starts (a path the user cannot read is refused with Pyxis' wording), and bound
  by bubblewrap running as that user, so the kernel checks it again;
- `--container-save=PATH`: checked before the step starts (the user must be able to write
  PATH's directory), then, once the step has ended on its first node, the container's file
  system is packed by mksquashfs running as root (the image's files are root's) in a
  bubblewrap sandbox that holds only that file system, the system's programs and an output
  directory of root's, so a link the user swaps in while it reads leads nowhere private; the
  image is then copied to PATH by a process running as the job's user (created under a
  temporary name, then renamed over PATH): the kernel decides, as for anything the user
  writes.

Why bubblewrap and not crun: crun 1.8 (Debian 12) refuses to start on a node whose cgroups
are mixed v1/v2 even with its cgroup manager disabled, and a job's processes must stay in
the cgroup the agent put them in; bubblewrap needs no cgroup, no per-task config file and
no daemon, and runs rootless (docs/CONTAINERS.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
import threading
from collections.abc import Iterator

from corral.agent import images, nvidia_hook
from corral.agent.launch import ExecRequest, LaunchFailure, as_user
from corral.model.launchplan import ContainerSpec
from corral.model.pyxis import parse_mount

log = logging.getLogger("corral.agent.container")

SQUASHFS_MAGIC = b"hsqs"
SAVE_TIMEOUT = 3600.0  # seconds to pack and write a saved container
# run as the job's user, with the packed image on stdin: $1 directory, $2 name, $3 mode
_SAVE_SCRIPT = ('t=$(mktemp "$1/.$2.XXXXXX") || exit 1; '
                'if cat >"$t" && chmod "$3" "$t" && mv -fT "$t" "$1/$2"; then exit 0; fi; '
                'rm -f "$t"; exit 1')
BATCH_SCRIPT = "/run/corral-batch-script"  # where a batch script is seen inside
MOUNT_TIMEOUT = 30.0  # seconds for squashfuse to mount an image
ENV_FILE_MAX = 1 << 20
# MASTER_PORT as Enroot's PyTorch hook derives it from the job id
MASTER_PORT_BASE, MASTER_PORT_RANGE = 49152, 16384


def _fail(message: str) -> LaunchFailure:
    return LaunchFailure(f"slurmstepd: error: pyxis: {message}\n", 1)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise _fail(f"{name} is not installed on this node (see docs/CONTAINERS.md)")
    return path


# ---- the job's container directory ----------------------------------------------------------

def job_dir(base: str, job_id: int) -> str:
    return os.path.join(base, f"job_{job_id}")


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    """One set-up at a time per job on this node (the agent's srun tasks and a batch step's
    supervisor are different processes)."""
    while True:
        _mkdir(directory)
        try:
            fd = os.open(os.path.join(directory, ".lock"),
                         os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            continue  # removed by the job's release meanwhile: make it again
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink > 0:
            break
        os.close(fd)  # the directory went while we waited (a release): start again
    try:
        yield
    finally:
        os.close(fd)


def _mkdir(path: str, mode: int = 0o711) -> None:
    os.makedirs(path, mode=mode, exist_ok=True)


# ---- the image ----------------------------------------------------------------------------

def is_image_path(image: str) -> bool:
    """A squashfs file rather than an image name (Pyxis: a path, or a name ending .sqsh)."""
    return image.startswith(("/", "./", "../")) or image.endswith((".sqsh", ".squashfs"))


def _open_image_file(path: str, request: ExecRequest) -> int:
    """The image file opened as the job's user (refused where the user cannot read it)."""
    full = path if os.path.isabs(path) else os.path.join(request.cwd, path)
    try:
        with as_user(request.ident):
            fd = os.open(full, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise _fail(f"image {path}: {e.strerror}") from None
    try:
        if os.pread(fd, 4, 0) != SQUASHFS_MAGIC:
            raise _fail(f"image {path} is not a squashfs file")
    except OSError as e:
        os.close(fd)
        raise _fail(f"image {path}: {e.strerror}") from None
    except LaunchFailure:
        os.close(fd)
        raise
    return fd


def _mount_image(jdir: str, spec: ContainerSpec, request: ExecRequest,
                 cache: str) -> tuple[str, dict[str, str]]:
    """The image's read-only mount for this job (made once) and the image's environment."""
    image = spec.image
    assert image is not None
    fd: int | None = None
    meta: dict[str, str] = {}
    if is_image_path(image):
        fd = _open_image_file(image, request)
        st = os.fstat(fd)
        key = hashlib.sha256(f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"
                             .encode()).hexdigest()[:32]
        source = f"/dev/fd/{fd}"
    else:
        try:
            found = images.lookup(cache, image)
        except ValueError as e:
            raise _fail(str(e)) from None
        if found is None:
            raise _fail(f"image {image} is not in this node's image cache "
                        f"(import it with: corral image import)")
        source, key, meta = found.path, found.digest.replace(":", "-"), found.env
    target = os.path.join(jdir, "images", key)
    try:
        if not os.path.ismount(target):
            _unmount(target)  # a mount whose squashfuse is gone: mounted afresh
            _mkdir(target, 0o755)
            squashfuse = _tool("squashfuse")
            # root's FUSE mount, readable by the job's user; nothing in it may elevate
            proc = subprocess.run(
                [squashfuse, "-o", "allow_other,nosuid,nodev,ro", source, target],
                pass_fds=(fd,) if fd is not None else (), capture_output=True,
                timeout=MOUNT_TIMEOUT, check=False)
            if proc.returncode != 0 or not os.path.ismount(target):
                why = proc.stderr.decode(errors="replace").strip().splitlines()
                raise _fail(f"cannot mount image {image}: {why[-1] if why else 'squashfuse failed'}")
    except subprocess.TimeoutExpired:
        raise _fail(f"cannot mount image {image}: squashfuse timed out") from None
    finally:
        if fd is not None:
            os.close(fd)
    return target, meta


# ---- the container's file system --------------------------------------------------------------

def _container_name(spec: ContainerSpec, request: ExecRequest) -> str:
    if spec.name:
        return "n-" + hashlib.sha256(spec.name.encode()).hexdigest()[:24]
    return f"s-{request.step}"


def _rootfs(jdir: str, spec: ContainerSpec, request: ExecRequest, cache: str,
            ) -> tuple[str, dict[str, str]]:
    cdir = os.path.join(jdir, "c", _container_name(spec, request))
    merged = os.path.join(cdir, "rootfs")
    meta_file = os.path.join(cdir, "image")
    exists = os.path.ismount(merged)
    # Pyxis' flags: auto and no_exec reuse the container if it exists (its image then
    # ignored), create insists on a new one, exec on an existing one (Corral keeps a named
    # container's file system, not running namespaces: exec joins the file system)
    flag = spec.name_flag if spec.name else "auto"
    if flag == "create" and exists:
        raise _fail('error: "create" flag was passed to --container-name but the container '
                    'already exists')
    if flag == "exec" and not exists:
        raise _fail('error: "exec" flag was passed to --container-name but the container is '
                    'not running')
    if exists:
        return merged, images.read_env_file(meta_file)
    if not spec.image:
        raise _fail(f'error: a container with name "{spec.name}" does not exist, and '
                    f'--container-image is not set')
    lower, env = _mount_image(jdir, spec, request, cache)
    if not spec.writable and not spec.name:
        return lower, env  # --container-readonly: the image's own read-only mount
    upper, work = os.path.join(cdir, "upper"), os.path.join(cdir, "work")
    for d in (cdir, upper, work, merged):
        _mkdir(d, 0o755)
    why = _mount_overlay(f"lowerdir={lower},upperdir={upper},workdir={work}", merged)
    if why is not None:
        raise _fail(f"cannot create the container's file system: {why}")
    images.write_env_file(meta_file, env)
    return merged, env


_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount_overlay(options: str, target: str) -> str | None:
    """mount(2) of an overlay, nosuid and nodev (a `mount` process costs more than the
    mount); why it failed, or None."""
    rc = _libc().mount(b"overlay", target.encode(), b"overlay", _MS_NOSUID | _MS_NODEV,
                       options.encode())
    if rc != 0:
        return os.strerror(ctypes.get_errno())
    return None


def _unmount(path: str) -> None:
    """Detach a mount (umount2 MNT_DETACH: it goes once its last user has), a FUSE mount
    whose daemon is gone too (a batch step's squashfuse ends with the step's processes)."""
    if os.path.ismount(path) or _dead_mount(path):
        _libc().umount2(path.encode(), _MNT_DETACH)


def _dead_mount(path: str) -> bool:
    try:
        os.stat(path)
    except OSError as e:
        return e.errno == errno.ENOTCONN
    return False


def remove_container(cdir: str) -> None:
    rootfs = os.path.join(cdir, "rootfs")
    _unmount(rootfs)
    if not os.path.ismount(rootfs):  # never remove files through a live mount
        shutil.rmtree(cdir, ignore_errors=True)


def release_step(base: str, job_id: int, step: str) -> None:
    """The step has ended on this node: its container is saved if --container-save asked,
    then its unnamed container goes (Pyxis removes unnamed containers at the task's end; a
    job's named ones stay for its later steps)."""
    save_pending(job_dir(base, job_id), step)
    cdir = os.path.join(job_dir(base, job_id), "c", f"s-{step}")
    if os.path.isdir(cdir):
        remove_container(cdir)


def release_job_if_idle(base: str, job_id: int) -> bool:
    """The job's image mounts go once it has no container left on this node (its named
    containers and a running batch step's keep them); whether they went."""
    jdir = job_dir(base, job_id)
    if not os.path.isdir(jdir):
        return True
    with _locked(jdir):  # not while another step sets up its container
        with contextlib.suppress(OSError):
            if os.listdir(os.path.join(jdir, "c")):
                return False
        _release(jdir)
    return True


def release_job(base: str, job_id: int) -> None:
    """The job has ended: its containers and image mounts go (once a --container-save of
    this process has finished with them, if one is under way)."""
    jdir = job_dir(base, job_id)
    with _saving_lock:
        if _saving.get(jdir):
            _released_while_saving.add(jdir)
            return
    if os.path.isdir(jdir):
        _release(jdir)


def release_stale(base: str, live: set[int]) -> None:
    """Every job's containers under `base` (one node's) but those of `live` jobs: after an
    agent restart or at its stop, nothing of an ended job stays mounted."""
    with contextlib.suppress(OSError):
        for node in os.listdir(base):
            node_dir = os.path.join(base, node)
            for name in os.listdir(node_dir):
                if name.startswith("job_") and name[4:].isdigit() and int(name[4:]) not in live:
                    release_job(node_dir, int(name[4:]))


def _release(jdir: str) -> None:
    for sub in ("c", "images"):
        d = os.path.join(jdir, sub)
        with contextlib.suppress(OSError):
            for name in os.listdir(d):
                path = os.path.join(d, name)
                if sub == "c":
                    remove_container(path)
                else:
                    _unmount(path)
    with contextlib.suppress(OSError):
        if any(os.path.ismount(os.path.join(jdir, sub, name)) for sub in ("c", "images")
               for name in os.listdir(os.path.join(jdir, sub))):
            return  # something would not unmount: left for the next attempt
    shutil.rmtree(jdir, ignore_errors=True)


# ---- --container-save ---------------------------------------------------------------------

def _save_target(spec: ContainerSpec, request: ExecRequest) -> tuple[str, str]:
    """The directory and name --container-save writes, after checking as the job's user
    that it may write there (Pyxis runs `enroot export` as the user)."""
    assert spec.save is not None
    full = os.path.normpath(os.path.join(request.cwd, spec.save))
    directory, name = os.path.split(full)
    try:
        with as_user(request.ident):
            if not os.path.isdir(directory):
                raise FileNotFoundError(2, "No such file or directory")
            if not os.access(directory, os.W_OK | os.X_OK, effective_ids=True):
                raise PermissionError(13, "Permission denied")
            if os.path.isdir(full):
                raise IsADirectoryError(21, "target is a directory")
    except OSError as e:
        raise _fail(f"--container-save: cannot write {spec.save}: {e.strerror}") from None
    return directory, name


def _note_save(jdir: str, spec: ContainerSpec, request: ExecRequest, rootfs: str) -> None:
    """Record the save for the step's end (release_step): once per step, on its first node
    only (several nodes writing one PATH would clobber each other)."""
    if spec.save is None or request.env.get("SLURM_NODEID", "0") != "0":
        return
    directory, name = _save_target(spec, request)
    if request.umask is not None:  # a batch step's: slurmstepd unsets SLURM_UMASK there
        mode = 0o666 & ~request.umask
    else:
        try:
            mode = 0o666 & ~int(request.env.get("SLURM_UMASK", "0022"), 8)
        except ValueError:
            mode = 0o644
    ident = request.ident
    record = {"rootfs": rootfs, "directory": directory, "name": name, "mode": f"{mode:o}",
              "uid": ident.uid, "gid": ident.gid, "groups": list(ident.groups),
              "switch": ident.switch}
    path = os.path.join(jdir, f"save-{request.step}.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)


# job directories with a save under way in this process (the agent saves in a worker thread
# while its loop may hear of the job's end): their release waits for the save
_saving_lock = threading.Lock()
_saving: dict[str, int] = {}
_released_while_saving: set[str] = set()


def save_pending(jdir: str, step: str) -> bool:
    """Save the step's container if --container-save asked (see `_note_save`); whether it
    was written.  A failure is logged: the step has ended, there is no one to tell."""
    path = os.path.join(jdir, f"save-{step}.json")
    if not os.path.exists(path):
        return False
    with _saving_lock:
        _saving[jdir] = _saving.get(jdir, 0) + 1
    try:
        try:
            with open(path) as f:
                record = json.load(f)
            os.unlink(path)
        except (OSError, ValueError):
            return False
        target = os.path.join(str(record.get("directory")), str(record.get("name")))
        try:
            _save(jdir, record)
        except (OSError, KeyError, TypeError, ValueError, subprocess.SubprocessError) as e:
            log.warning("--container-save %s: not saved: %s", target, e)
            return False
        log.info("--container-save: saved the container of step %s to %s", step, target)
        return True
    finally:
        with _saving_lock:
            left = _saving.pop(jdir) - 1
            if left:
                _saving[jdir] = left
            release = not left and jdir in _released_while_saving
            if release:
                _released_while_saving.discard(jdir)
        if release and os.path.isdir(jdir):
            _release(jdir)


def _save(jdir: str, record: dict[str, object]) -> None:
    rootfs = str(record["rootfs"])
    if not os.path.ismount(rootfs):
        raise OSError(f"the container's file system {rootfs} is gone")
    mksquashfs, bwrap = shutil.which("mksquashfs"), shutil.which("bwrap")
    if mksquashfs is None or bwrap is None:
        raise OSError("mksquashfs (squashfs-tools) and bwrap are needed on this node")
    out_dir = os.path.join(jdir, f".save-{os.getpid()}-{os.urandom(4).hex()}")
    os.mkdir(out_dir, 0o700)
    packed = os.path.join(out_dir, "image.sqsh")
    try:
        proc = subprocess.run(
            [bwrap, *_sandbox_system(), "--ro-bind", rootfs, "/src", "--bind", out_dir, "/out",
             "--", mksquashfs, "/src", "/out/image.sqsh", "-noappend", "-quiet",
             "-no-progress", "-no-xattrs"],
            capture_output=True, timeout=SAVE_TIMEOUT, check=False)
        if proc.returncode != 0:
            why = proc.stderr.decode(errors="replace").strip().splitlines()
            raise OSError(f"mksquashfs failed: {why[-1] if why else proc.returncode}")
        uid = gid = None
        groups: list[int] | None = None
        if record.get("switch"):  # the agent is root and the job someone else's
            uid, gid = int(str(record["uid"])), int(str(record["gid"]))
            listed = record.get("groups")
            groups = [int(g) for g in listed] if isinstance(listed, list) else []
        with open(packed, "rb") as data:
            proc = subprocess.run(
                ["/bin/sh", "-c", _SAVE_SCRIPT, "sh", str(record["directory"]),
                 str(record["name"]), str(record["mode"])],
                stdin=data, capture_output=True, timeout=SAVE_TIMEOUT, check=False,
                user=uid, group=gid, extra_groups=groups)
        if proc.returncode != 0:
            why = proc.stderr.decode(errors="replace").strip().splitlines()
            raise OSError(why[-1] if why else f"the copy as the user failed ({proc.returncode})")
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def _sandbox_system() -> list[str]:
    """bubblewrap's arguments for a root process that reads the user's files: new pid, ipc,
    net and uts namespaces, its own /proc and /dev, only the reading capability, and of the
    host only what runs programs (/usr and its links, the loader's cache)."""
    args = ["--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts",
            "--die-with-parent", "--cap-drop", "ALL", "--cap-add", "CAP_DAC_READ_SEARCH",
            "--ro-bind", "/usr", "/usr", "--ro-bind-try", "/etc/ld.so.cache",
            "/etc/ld.so.cache", "--proc", "/proc", "--dev", "/dev"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args


# ---- mounts ---------------------------------------------------------------------------------

def _check_source(source: str, request: ExecRequest) -> str:
    """The mount source as an absolute path, after checking as the job's user that it may
    read it (a link is followed with the user's rights too)."""
    full = os.path.normpath(os.path.join(request.cwd, source))
    try:
        with as_user(request.ident):
            st = os.stat(full)
            mode = os.R_OK | (os.X_OK if os.path.isdir(full) else 0)
            if not os.access(full, mode, effective_ids=True):
                raise PermissionError(13, "Permission denied")
    except OSError as e:
        raise _fail(f"--container-mounts: {source}: {e.strerror}") from None
    del st
    return full


def make_mountpoint(rootfs: str, target: str, directory: bool) -> None:
    """Create `target` inside the container's file system where it is missing (Pyxis'
    x-create=auto), as root but never through a link of the image: each component is opened
    with O_NOFOLLOW below the root, so a link cannot lead the agent out of it."""
    parts = [p for p in os.path.normpath("/" + target).split("/") if p and p != ".."]
    if not parts:
        return
    fd = os.open(rootfs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if last and not directory:
                    os.close(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                     | os.O_CLOEXEC, 0o644, dir_fd=fd))
                    return
                os.mkdir(part, 0o755, dir_fd=fd)
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise _fail(f"--container-mounts: {target}: a symbolic link in the image")
            if last:
                return
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as e:
        raise _fail(f"--container-mounts: cannot create {target}: {e.strerror}") from None
    finally:
        os.close(fd)


def _mount_args(spec: ContainerSpec, request: ExecRequest, rootfs: str,
                writable: bool) -> list[str]:
    args: list[str] = []

    def target_in(target: str, source: str | None) -> str:
        inside = target if target.startswith("/") else "/" + target
        if writable:
            make_mountpoint(rootfs, inside, source is None or os.path.isdir(source))
        return inside

    if spec.mount_home:
        home = request.env.get("HOME")
        if home and os.path.isabs(home):
            source = _check_source(home, request)
            args += ["--bind", source, target_in(home, source)]
    for entry in spec.mounts:
        try:
            source, target, flags = parse_mount(entry)
        except ValueError as e:
            raise _fail(str(e)) from None
        if source == "tmpfs":
            args += ["--tmpfs", target_in(target, None)]
            continue
        if source == "umount":
            continue  # nothing of the host is mounted unless asked: nothing to detach
        full = _check_source(source, request)
        ro = "ro" in flags
        args += ["--ro-bind" if ro else "--bind", full, target_in(target, full)]
    return args


# ---- the hook -------------------------------------------------------------------------------

def wrap(request: ExecRequest) -> None:
    """Run `request` in its container (see the module docstring); LaunchFailure with Pyxis'
    kind of message when it cannot."""
    spec = request.container
    if spec is None:
        return
    if request.container_dir is None:
        raise _fail("containers are not set up on this node")
    if spec.save is not None:
        _save_target(spec, request)  # refused before anything runs
    bwrap = _tool("bwrap")
    jdir = job_dir(request.container_dir, request.job_id)
    with _locked(jdir):
        _mkdir(os.path.join(jdir, "c"))
        _mkdir(os.path.join(jdir, "images"))
        rootfs, image_env = _rootfs(jdir, spec, request, request.image_cache or "")
        if spec.save is not None:
            _note_save(jdir, spec, request, rootfs)
    ident = request.ident
    inside_uid = 0 if spec.remap_root else ident.uid
    inside_gid = 0 if spec.remap_root else ident.gid
    argv = [bwrap]
    if ident.uid != 0:
        argv += ["--unshare-user", "--uid", str(inside_uid), "--gid", str(inside_gid)]
    for ns in spec.unshare:
        argv.append(f"--unshare-{ns}")
    bind = "--ro-bind" if not spec.writable else "--bind"
    env = container_environment(request.env, image_env, spec)
    gpu = _gpu_mounts(request, image_env)
    # as Enroot (with ENROOT_RESTRICT_DEV): a /dev of the container's own with the host's
    # shared memory and the task's GPUs only, a new /proc, /sys read-only, a private /run
    argv += [bind, rootfs, "/", *dev_args(), "--proc", "/proc", "--ro-bind", "/sys", "/sys",
             "--tmpfs", "/run"]
    if gpu is not None:  # (after /run: the driver's files are seen under it)
        argv += gpu.bwrap_args()
        gpu.apply_env(env)
    if request.carry_program:  # the batch script, from the agent's spool, read-only
        argv += ["--ro-bind", request.argv[0], BATCH_SCRIPT]
        request.argv[0] = BATCH_SCRIPT
    # (an overlay, where missing mount points can be made, unless read-only and unnamed)
    argv += _mount_args(spec, request, rootfs, writable=spec.writable or bool(spec.name))
    workdir = spec.workdir or image_env.get(images.WORKDIR_KEY) or "/"
    argv += ["--chdir", workdir, "--"]
    entrypoint = image_env.get(images.ENTRYPOINT_KEY)
    if spec.entrypoint and entrypoint:  # --container-entrypoint: the image's, then ours
        with contextlib.suppress(ValueError, TypeError):
            request.argv = [str(a) for a in json.loads(entrypoint)] + request.argv
    request.wrapper = argv + request.wrapper
    request.env = env


# the host's parts of /dev a task may need besides bubblewrap's own (null, zero, full,
# random, urandom, tty, a new pts): memory shared between the job's tasks, RDMA devices
SHARED_DEV = ("/dev/shm", "/dev/mqueue", "/dev/hugepages", "/dev/infiniband")


def dev_args() -> list[str]:
    args = ["--dev", "/dev"]
    for path in SHARED_DEV:
        args += ["--dev-bind-try", path, path]
    return args


def _gpu_mounts(request: ExecRequest, image_env: dict[str, str],
                ) -> nvidia_hook.GpuMounts | None:
    """The task's GPUs in its container (agent.nvidia_hook), None where it has none."""
    gpus = (request.gpus if request.gpus is not None
            else nvidia_hook.parse_gpu_list(request.env.get("CUDA_VISIBLE_DEVICES")))
    try:
        return nvidia_hook.mounts_for(gpus, request.env, image_env)
    except nvidia_hook.HookError as e:
        raise _fail(str(e)) from None


def container_environment(job_env: dict[str, str], image_env: dict[str, str],
                          spec: ContainerSpec) -> dict[str, str]:
    """Pyxis' rule: the job's variables, but the image's values take precedence, except for
    those named by --container-env; plus what its PyTorch hook sets from the task's ranks."""
    env = dict(job_env)
    keep = set(spec.env)
    for k, v in image_env.items():
        if k not in keep and not k.startswith(":"):
            env[k] = v
    if "SLURM_PROCID" in env:
        env.setdefault("RANK", env["SLURM_PROCID"])
    if "SLURM_LOCALID" in env:
        env.setdefault("LOCAL_RANK", env["SLURM_LOCALID"])
    ntasks = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS")
    if ntasks:
        env.setdefault("WORLD_SIZE", ntasks)
    nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if nodes:
        env.setdefault("MASTER_ADDR", _first_host(nodes))
    job_id = env.get("SLURM_JOB_ID", "")
    if job_id.isdigit():
        env.setdefault("MASTER_PORT", str(MASTER_PORT_BASE + int(job_id) % MASTER_PORT_RANGE))
    return env


def _first_host(nodelist: str) -> str:
    """The first host of a Slurm node list ("n[3-5],m1" -> "n3")."""
    from corral.model import hostlists

    try:
        hosts = hostlists.expand(nodelist)
    except hostlists.HostlistError:
        return nodelist.split(",")[0]
    return hosts[0] if hosts else nodelist
