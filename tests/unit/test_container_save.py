"""--container-save's sandbox (agent/container.py): mksquashfs runs as root to read the image's
files, so it runs where nothing private of the host can be reached, even by a link the user
swaps into the container's file system while it reads."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from corral.agent.container import _sandbox_system

needs_root_bwrap = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None or shutil.which("mksquashfs") is None,
    reason="needs root, bwrap and mksquashfs")


@needs_root_bwrap
def test_the_sandbox_reads_the_users_files_but_no_private_file_of_the_host(
        tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir(mode=0o700)
    (src / "theirs").write_text("a user's private file\n")
    os.chown(src / "theirs", 4242, 4242)
    (src / "theirs").chmod(0o600)
    (src / "escape").symlink_to("/etc/shadow")
    (src / "up").symlink_to("/root")
    script = ("cat /src/theirs; cat /src/escape /etc/shadow /proc/1/root/etc/shadow "
              "2>/dev/null || echo no-shadow; ls /root /src/up/ 2>/dev/null || echo no-root; "
              "ls /proc | grep -c '^[0-9]'")
    r = subprocess.run(["bwrap", *_sandbox_system(), "--ro-bind", str(src), "/src",
                        "--bind", str(out), "/out", "--", "/bin/sh", "-c", script],
                       capture_output=True, text=True, timeout=60)
    lines = r.stdout.splitlines()
    assert lines[:3] == ["a user's private file", "no-shadow", "no-root"], r.stdout + r.stderr
    assert int(lines[3]) <= 8  # its own pid namespace: the host's processes are not there
    r = subprocess.run(["bwrap", *_sandbox_system(), "--ro-bind", str(src), "/src",
                        "--bind", str(out), "/out", "--", shutil.which("mksquashfs") or "",
                        "/src", "/out/i.sqsh", "-noappend", "-quiet", "-no-progress",
                        "-no-xattrs"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    listing = subprocess.run(["unsquashfs", "-ll", str(out / "i.sqsh")], capture_output=True,
                             text=True, timeout=60).stdout
    assert "4242/4242" in listing and "escape -> /etc/shadow" in listing, listing
