"""End-to-end: `--container-save=PATH` (Pyxis' semantics, docs/CONTAINERS.md) as an ordinary
user: the container's file system is saved as a squashfs image at PATH after the step, written
as the user; a later step runs from it; a PATH the user may not write is refused before the
step runs.  The test image and cluster are test_containers.py's."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.test_containers import (  # noqa: F401 (the module's fixtures)
    _as,
    _mounts_of,
    images,
    user_cluster,
)

pytestmark = pytest.mark.slow


def _wait_for_file(path: Path, replacing: int | None = None,
                   timeout: float = 60) -> os.stat_result:
    """The image appears under its name once whole (it is renamed into place) after the step's
    end, as with Pyxis (whose own tests sleep after a saving srun)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            st = path.stat()
        except FileNotFoundError:
            st = None
        if st is not None and st.st_ino != replacing:
            return st
        time.sleep(0.1)
    raise AssertionError(f"{path} was not saved")


def test_a_saved_container_runs_again_with_its_files(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:  # noqa: F811
    c, user = user_cluster
    out_dir = Path(user.pw_dir) / "saved"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir()
    os.chown(out_dir, user.pw_uid, user.pw_gid)
    saved = out_dir / "mine.sqsh"
    r = _as(c, user, "srun", "-N1", f"--container-image={images / 'test.sqsh'}",
            f"--container-save={saved}", "sh", "-c", "echo first > /tmp/note")
    assert r.returncode == 0, r.stderr
    st = _wait_for_file(saved)
    assert st.st_uid == user.pw_uid  # written as the user
    with open(saved, "rb") as f:
        assert f.read(4) == b"hsqs"
    # the image's files keep their owner (root), the user's their own
    listing = subprocess.run(["unsquashfs", "-ll", "-n", str(saved)], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    owners = {line.split()[-1]: line.split()[1] for line in listing.splitlines()
              if line.startswith(("-", "d"))}
    assert owners["squashfs-root/tmp/note"].split("/")[0] in (user.pw_name, str(user.pw_uid))
    assert owners["squashfs-root/etc/os-release"] == "root/root"
    r = _as(c, user, "srun", "-N1", f"--container-image={saved}", "cat", "/tmp/note",
            "/etc/os-release")
    assert r.returncode == 0 and r.stdout.startswith("first\nID=corraltest"), r.stderr
    # saved over the image it runs from, by a relative path (from the working directory)
    first = saved.stat().st_ino
    r = _as(c, user, "srun", "-N1", "-D", str(out_dir), "--container-image=./mine.sqsh",
            "--container-save=mine.sqsh", "sh", "-c", "echo second > /tmp/more")
    assert r.returncode == 0, r.stderr
    _wait_for_file(saved, replacing=first)
    c.wait_for(lambda: sorted(p.name for p in out_dir.iterdir()) == ["mine.sqsh"], 30,
               "the temporary copy to be renamed")
    r = _as(c, user, "srun", "-N1", f"--container-image={saved}", "cat", "/tmp/note",
            "/tmp/more")
    assert r.returncode == 0 and r.stdout == "first\nsecond\n", r.stderr
    c.wait_for(lambda: not _mounts_of(c), 30, "the containers' mounts to go")


def test_saving_where_the_user_cannot_write_is_refused(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:  # noqa: F811
    c, user = user_cluster
    marker = Path(user.pw_dir) / "ran"
    marker.unlink(missing_ok=True)
    closed = Path(user.pw_dir) / "closed"  # the user's own directory, made read-only
    closed.mkdir(exist_ok=True)
    os.chown(closed, user.pw_uid, user.pw_gid)
    closed.chmod(0o555)
    link = Path(user.pw_dir) / "to-root"
    if link.is_symlink():
        link.unlink()
    link.symlink_to("/root")
    try:
        for target in ("/root/x.sqsh", "/x.sqsh", f"{link}/x.sqsh", f"{closed}/x.sqsh"):
            r = _as(c, user, "srun", "-N1", f"--container-image={images / 'test.sqsh'}",
                    f"--container-save={target}", "sh", "-c", f"touch {marker}",
                    env={"PYXIS_CONTAINER_MOUNT_HOME": "1"})
            assert r.returncode != 0, (target, r.stdout)
            assert f"pyxis: --container-save: cannot write {target}: Permission denied" \
                in r.stderr, (target, r.stderr)
            assert "Traceback" not in r.stderr
            assert not marker.exists()  # refused before the step ran
            assert not Path(target).exists()
        r = _as(c, user, "srun", "-N1", f"--container-image={images / 'test.sqsh'}",
                f"--container-save={user.pw_dir}/no-such-dir/x.sqsh", "true")
        assert r.returncode != 0 and "No such file or directory" in r.stderr, r.stderr
        r = _as(c, user, "srun", "-N1", f"--container-image={images / 'test.sqsh'}",
                f"--container-save={user.pw_dir}/", "true")
        assert r.returncode != 0
        assert "pyxis: --container-save: target is a directory" in r.stderr, r.stderr
    finally:
        link.unlink()
        closed.chmod(0o755)
    # the node stays usable
    r = _as(c, user, "srun", "-N1", "true")
    assert r.returncode == 0, r.stderr


def test_a_batch_script_in_a_container_is_saved_at_its_end(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:  # noqa: F811
    c, user = user_cluster
    saved = Path(user.pw_dir) / "batch-saved.sqsh"
    saved.unlink(missing_ok=True)
    script = ("#!/bin/sh\n"
              f"#SBATCH --container-image={images / 'test.sqsh'}\n"
              f"#SBATCH --container-save={saved}\n"
              "#SBATCH -o /dev/null\n"
              "echo from-batch > /tmp/batch-note\n")
    path = Path(user.pw_dir) / "save.sbatch"
    path.write_text(script)
    os.chown(path, user.pw_uid, user.pw_gid)
    # submitted under umask 027: the image is made with sbatch's umask, as the step's files
    r = _as(c, user, "sh", "-c", f"umask 027; exec sbatch --parsable {path}")
    assert r.returncode == 0, r.stderr
    c.wait_state(int(r.stdout.strip().split(";")[0]), "COMPLETED", timeout=60)
    st = _wait_for_file(saved)
    assert st.st_uid == user.pw_uid and st.st_mode & 0o777 == 0o640, oct(st.st_mode)
    r = _as(c, user, "srun", "-N1", f"--container-image={saved}", "cat", "/tmp/batch-note")
    assert r.returncode == 0 and r.stdout == "from-batch\n", r.stderr
    c.wait_for(lambda: not _mounts_of(c), 30, "the containers' mounts to go")
