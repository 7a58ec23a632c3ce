"""Containers as Pyxis runs them (issue 17, docs/CONTAINERS.md), through srun, sbatch and
`corral image` on a running cluster, as root and as an ordinary user: the image's file
system, mounts, rank variables, named containers, batch scripts inside, bad inputs and the
trust rules of docs/SECURITY.md.

The test image is built here from the host's own programs (a shell, cat, id and their
libraries) with an /etc/os-release of its own; it is packed with mksquashfs and, for the
cache, wrapped into an OCI archive with umoci and skopeo.  The Debian packages are installed
when missing (apt-get); the tests skip when they cannot be."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import CAN_CREATE_USERS, Cluster
from tests.e2e.test_users import grant_traverse

pytestmark = pytest.mark.slow

PACKAGES = {"bwrap": "bubblewrap", "squashfuse": "squashfuse", "mksquashfs": "squashfs-tools",
            "umoci": "umoci", "skopeo": "skopeo"}
USER = "corral-ctr1"
PROGRAMS = ("/bin/sh", "/bin/cat", "/bin/ls", "/usr/bin/env", "/usr/bin/id", "/bin/touch",
            "/bin/echo", "/bin/sleep", "/bin/true")
OS_RELEASE = 'ID=corraltest\nNAME="Corral test image"\n'


def _have_tools() -> bool:
    missing = [pkg for tool, pkg in PACKAGES.items() if shutil.which(tool) is None]
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", *missing], capture_output=True,
                       timeout=600, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    return all(shutil.which(tool) for tool in PACKAGES)


def _userns_works() -> bool:
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                        "bwrap", "--unshare-user", "--ro-bind", "/", "/", "true"],
                       capture_output=True, timeout=30)
    return r.returncode == 0


def build_rootfs(root: Path) -> None:
    """A small root file system from the host's programs and libraries."""
    for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "run", "root", "home", "data"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    for prog in PROGRAMS:
        real = shutil.which(os.path.basename(prog)) or prog
        shutil.copy2(real, root / "bin" / os.path.basename(prog))
        out = subprocess.run(["ldd", real], capture_output=True, text=True).stdout
        for word in out.split():
            if word.startswith("/") and os.path.exists(word):
                dest = root / word.lstrip("/")
                dest.parent.mkdir(parents=True, exist_ok=True)
                if not dest.exists():
                    shutil.copy2(word, dest)
    (root / "etc" / "os-release").write_text(OS_RELEASE)
    # a setuid-root copy of id: it must not elevate inside a container
    shutil.copy2(root / "bin" / "id", root / "bin" / "suid-id")
    os.chmod(root / "bin" / "suid-id", 0o4755)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.geteuid() != 0 or not _have_tools():
        pytest.skip("needs root and " + ", ".join(PACKAGES.values()))
    if not _userns_works():
        pytest.skip("unprivileged user namespaces are not available")
    base = Path(tempfile.mkdtemp(prefix="corral-ctr-"))
    base.chmod(0o755)
    rootfs = base / "rootfs"
    build_rootfs(rootfs)
    subprocess.run(["mksquashfs", str(rootfs), str(base / "test.sqsh"), "-all-root",
                    "-noappend", "-quiet", "-no-progress"], check=True, capture_output=True)
    (base / "test.sqsh").chmod(0o644)
    (base / "not-squashfs.sqsh").write_text("hello\n")
    (base / "not-squashfs.sqsh").chmod(0o644)
    # an OCI archive of the same file system, with an environment in its config
    layout = base / "layout"
    subprocess.run(["umoci", "init", "--layout", str(layout)], check=True)
    subprocess.run(["umoci", "new", "--image", f"{layout}:t"], check=True)
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:t", str(base / "bundle")],
                   check=True, capture_output=True)
    shutil.rmtree(base / "bundle" / "rootfs")
    shutil.copytree(rootfs, base / "bundle" / "rootfs", symlinks=True)
    subprocess.run(["umoci", "repack", "--image", f"{layout}:t", str(base / "bundle")],
                   check=True, capture_output=True)
    subprocess.run(["umoci", "config", "--image", f"{layout}:t", "--config.env",
                    "IMAGE_GREETING=from-the-image", "--config.env", "PATH=/bin",
                    "--config.entrypoint", "/bin/env", "--config.entrypoint", "ENTERED=yes"],
                   check=True, capture_output=True)
    subprocess.run(["skopeo", "copy", "--quiet", f"oci:{layout}:t",
                    f"oci-archive:{base / 'image.tar'}"], check=True, capture_output=True)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def user_cluster(images: Path) -> Iterator[tuple[Cluster, pwd.struct_passwd]]:
    if not CAN_CREATE_USERS:
        pytest.skip("needs root and useradd")
    restore = grant_traverse(os.path.realpath(sys.executable))
    made = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", USER], check=True)
        made = True
    home = Path(tempfile.mkdtemp(prefix="corral-ctrc-"))
    home.chmod(0o755)
    c = Cluster(home / "c")
    left: list[str] = []
    try:
        c.start()
        yield c, pwd.getpwnam(USER)
    finally:
        c.stop()
        left = _mounts_of(c)
        for line in reversed(left):  # a leak must not outlive the test
            subprocess.run(["umount", "-l", line.split()[4]], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
        if made:
            subprocess.run(["userdel", "--remove", USER], capture_output=True)
        for d, mode in restore:
            os.chmod(d, mode)
    assert not left, f"mounts left after the cluster stopped: {left}"


def _as(c: Cluster, user: pwd.struct_passwd, *args: str,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(c.env, HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name, **(env or {}))
    return subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                           "--init-groups", "--", *args], capture_output=True, text=True,
                          timeout=120, env=e, cwd=user.pw_dir)


def _mounts_of(c: Cluster) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if str(c.home) in line]


# ---- as root ---------------------------------------------------------------------------------

def test_step_sees_the_image_its_mounts_and_rank_variables(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:
    c, _ = user_cluster
    data = c.workdir / "shared"
    data.mkdir(exist_ok=True)
    (data / "note").write_text("mounted\n")
    out = c.ok("srun", "-N2", "-n2", "-l", f"--container-image={images / 'test.sqsh'}",
               f"--container-mounts={data}:/data:ro",
               "sh", "-c", "cat /etc/os-release /data/note; "
               "echo W=$WORLD_SIZE R=$RANK L=$LOCAL_RANK A=$MASTER_ADDR P=$MASTER_PORT",
               timeout=120)
    lines = sorted(out.splitlines())
    for rank in ("0", "1"):
        mine = [ln.split(": ", 1)[1] for ln in lines if ln.startswith(f"{rank}: ")]
        assert "ID=corraltest" in mine and "mounted" in mine, out
        ranks = [ln for ln in mine if ln.startswith("W=")]
        assert ranks and ranks[0].startswith(f"W=2 R={rank} L=0 A=node-"), out
        assert ranks[0].split(" P=")[1].isdigit(), out
    # the host's file system is not there
    r = c.run("srun", "-N1", f"--container-image={images / 'test.sqsh'}", "cat",
              "/etc/debian_version", timeout=120)
    assert r.returncode != 0 and "No such file" in r.stderr
    # the steps' jobs have ended: nothing of theirs stays mounted
    c.wait_for(lambda: not _mounts_of(c), 30, "the containers' mounts to go")


def test_named_container_keeps_a_file_between_steps(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:
    c, _ = user_cluster
    jid = c.sbatch("-N1", "-w", "node-1", "--wrap", "sleep 60")
    c.wait_state(jid, "RUNNING")
    try:
        image = f"--container-image={images / 'test.sqsh'}"
        c.ok("srun", f"--jobid={jid}", image, "--container-name=keep", "sh", "-c",
             "echo kept > /tmp/state", timeout=120)
        out = c.ok("srun", f"--jobid={jid}", "--container-name=keep", "cat", "/tmp/state",
                   timeout=120)
        assert out == "kept\n"
        # an unnamed container starts from the image every time
        r = c.run("srun", f"--jobid={jid}", image, "cat", "/tmp/state", timeout=120)
        assert r.returncode != 0
        r = c.run("srun", f"--jobid={jid}", "--container-name=never:exec", "true", timeout=120)
        assert r.returncode != 0 and '"exec" flag was passed' in r.stderr
        r = c.run("srun", f"--jobid={jid}", image, "--container-name=keep:create", "true",
                  timeout=120)
        assert r.returncode != 0 and "the container already exists" in r.stderr
        r = c.run("srun", f"--jobid={jid}", "--container-name=other", "true", timeout=120)
        assert r.returncode != 0 and "--container-image is not set" in r.stderr
    finally:
        c.run("scancel", str(jid))
    c.wait_state(jid, {"CANCELLED"})
    c.wait_for(lambda: not any(f"job_{jid}" in m for m in _mounts_of(c)), 30,
               "the job's container mounts to go")


def test_sbatch_runs_the_whole_script_in_the_container(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:
    c, _ = user_cluster
    out = c.workdir / "batch.out"
    script = ("#!/bin/sh\n"
              f"#SBATCH --container-image={images / 'test.sqsh'}\n"
              f"#SBATCH -o {out}\n"
              "cat /etc/os-release\nid -u\n")
    jid = c.sbatch(input=script)
    c.wait_state(jid, "COMPLETED", timeout=60)
    text = out.read_text()
    assert "ID=corraltest" in text and text.endswith("0\n"), text


def test_salloc_gives_its_container_to_the_allocations_steps(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:
    c, _ = user_cluster
    data = c.workdir / "salloc-data"
    data.mkdir(exist_ok=True)
    (data / "note").write_text("from salloc\n")
    out = c.ok("salloc", "-N1", f"--container-image={images / 'test.sqsh'}",
               f"--container-mounts={data}:/data", "srun", "cat", "/etc/os-release",
               "/data/note", timeout=120)
    assert "ID=corraltest" in out and out.endswith("from salloc\n"), out


def test_bad_inputs_get_clear_errors_and_leave_the_node_usable(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:
    c, _ = user_cluster
    cases = [
        ([f"--container-image={images / 'missing.sqsh'}"], "No such file or directory"),
        ([f"--container-image={images / 'not-squashfs.sqsh'}"], "is not a squashfs file"),
        (["--container-image=nvcr.io/nvidia/pytorch:24.01"], "not in this node's image cache"),
        ([f"--container-image={images / 'test.sqsh'}", "--container-mounts=/tmp"],
         None),  # a single path mounts at the same place: accepted
        ([f"--container-image={images / 'test.sqsh'}", "--container-mounts=a:b:c:d"],
         "pyxis: --container-mounts: invalid format: a:b:c:d"),
        (["--container-mounts=/tmp:/x"],
         "pyxis: ignoring --container-mounts because neither --container-image nor "
         "--container-name is set"),
        (["--container-image=x.sqsh", "--container-name=a:sometimes"],
         'pyxis: --container-name: flag must be "auto", "create", "exec" or "no_exec"'),
        (["--container-image=x.sqsh", "--container-writable", "--container-readonly"],
         "pyxis: both --container-writable and --container-readonly were specified"),
        (["--container-image=x.sqsh", "--container-save=/tmp/"],
         "pyxis: --container-save: target is a directory"),
    ]
    for args, problem in cases:
        r = c.run("srun", "-N1", "-w", "node-1", *args, "true", timeout=120)
        if problem is None:
            assert r.returncode == 0, r.stderr
            continue
        assert r.returncode != 0 and problem in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    r = c.run("sbatch", "--container-image=x.sqsh", "--container-unshare=pid", "--wrap", "true")
    assert r.returncode != 0
    assert r.stderr == "sbatch: error: pyxis: --container-unshare: unknown namespace 'pid'\n"
    assert c.ok("srun", "-N1", "-w", "node-1", "echo", "usable") == "usable\n"


def test_image_import_into_the_cache_and_run_by_name(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:
    c, user = user_cluster
    out = c.ok("corral", "image", "import", str(images / "image.tar"), "--name",
               "registry.example.org/lab/test:1", timeout=300)
    digest, path = out.split()
    assert digest.startswith("sha256:") and os.stat(path).st_uid == 0
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert "registry.example.org/lab/test:1" in c.ok("corral", "image", "list")
    run = c.ok("srun", "-N1", "--container-image=registry.example.org#lab/test:1", "sh", "-c",
               "cat /etc/os-release; echo $IMAGE_GREETING", timeout=120)
    assert "ID=corraltest" in run and "from-the-image" in run
    # the image's entrypoint runs only when asked (Pyxis' default)
    for flag, seen in (("--container-entrypoint", "yes"), ("--no-container-entrypoint", "")):
        out = c.ok("srun", "-N1", "--container-image=registry.example.org#lab/test:1", flag,
                   "sh", "-c", "echo entered=$ENTERED", timeout=120)
        assert out == f"entered={seen}\n"
    # a second step on the node uses the cached image as it is: no import, no unpacking
    before = os.stat(path).st_mtime
    c.ok("srun", "-N1", "--container-image=registry.example.org#lab/test:1", "true",
         timeout=120)
    assert os.stat(path).st_mtime >= before and len(c.ok("corral", "image", "list")
                                                       .splitlines()) == 2
    # the same name written Docker's way, and by an ordinary user
    r = _as(c, user, "srun", "-N1", "--container-image=registry.example.org/lab/test:1",
            "cat", "/etc/os-release")
    assert r.returncode == 0 and "ID=corraltest" in r.stdout, r.stderr
    r = _as(c, user, "corral", "image", "import", str(images / "image.tar"))
    assert r.returncode != 0 and "run this as root" in r.stderr


# ---- the trust rules, as an ordinary user (docs/SECURITY.md) ---------------------------------

def test_container_rules_hold_for_an_ordinary_user(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:
    c, user = user_cluster
    image = f"--container-image={images / 'test.sqsh'}"
    r = _as(c, user, "srun", "-N1", image, "id", "-u")
    assert r.returncode == 0 and r.stdout == f"{user.pw_uid}\n", r.stderr
    # mount sources the user cannot read are refused, a link to them too
    link = Path(user.pw_dir) / "to-root"
    if link.is_symlink():
        link.unlink()
    link.symlink_to("/root")
    try:
        for source in ("/root", "/etc/shadow", str(link)):
            r = _as(c, user, "srun", "-N1", image, f"--container-mounts={source}:/x", "true")
            assert r.returncode != 0 and "Permission denied" in r.stderr, (source, r.stderr)
    finally:
        link.unlink()
    # root inside is the user outside: no host file of root's can be written or read
    r = _as(c, user, "srun", "-N1", image, "--container-remap-root",
            f"--container-mounts={user.pw_dir}:/h", "sh", "-c",
            "id -u; touch /h/made-by-root; cat /proc/1/environ >/dev/null 2>&1 || echo denied")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["0", "denied"], r.stdout
    assert os.stat(Path(user.pw_dir) / "made-by-root").st_uid == user.pw_uid
    # a setuid-root program of the image runs as the user
    r = _as(c, user, "srun", "-N1", image, "suid-id", "-u")
    assert r.returncode == 0 and r.stdout == f"{user.pw_uid}\n", (r.stdout, r.stderr)
    # an image file the user cannot read is refused, even though root could
    private = images / "private.sqsh"
    shutil.copy2(images / "test.sqsh", private)
    private.chmod(0o600)
    r = _as(c, user, "srun", "-N1", f"--container-image={private}", "true")
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stderr
    # a user's own squashfs file works
    own = Path(user.pw_dir) / "own.sqsh"
    shutil.copy2(images / "test.sqsh", own)
    os.chown(own, user.pw_uid, user.pw_gid)
    own.chmod(0o600)
    r = _as(c, user, "srun", "-N1", f"--container-image={own}", "cat", "/etc/os-release")
    assert r.returncode == 0 and "ID=corraltest" in r.stdout, r.stderr
