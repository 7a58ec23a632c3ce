"""The node's image cache (agent/images.py): names, digests, least-recently-used eviction,
and what an archive is."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from corral.agent import images
from corral.model.pyxis import image_key


def _plant(cache: Path, hexdigit: str, size: int, names: list[str], used: float) -> str:
    digest = "sha256:" + hexdigit * 64
    stem = digest.replace(":", "-")
    (cache / "names").mkdir(parents=True, exist_ok=True)
    (cache / f"{stem}.sqsh").write_bytes(b"hsqs" + b"\0" * (size - 4))
    keys = [image_key(n) for n in names]
    (cache / f"{stem}.json").write_text(json.dumps({"env": {"A": "1"}, "names": keys}))
    for key in keys:
        Path(images._name_file(str(cache), key)).write_text(digest + "\n")
    os.utime(cache / f"{stem}.sqsh", (used, used))
    return digest


def _touch(cache: Path, digest: str, when: float) -> None:
    path = cache / (digest.replace(":", "-") + ".sqsh")
    os.utime(path, (when, when))


def test_lookup_by_any_spelling_marks_the_image_used(tmp_path: Path) -> None:
    digest = _plant(tmp_path, "a", 100, ["nvcr.io/nvidia/x:1"], used=1000.0)
    for ref in ("nvcr.io/nvidia/x:1", "nvcr.io#nvidia/x:1", digest):
        found = images.lookup(str(tmp_path), ref)
        assert found is not None and found.digest == digest and found.env == {"A": "1"}
    assert os.stat(found.path).st_mtime > 1000.0
    assert images.lookup(str(tmp_path), "nvcr.io/nvidia/x:2") is None
    assert images.lookup(str(tmp_path), "sha256:../../etc/passwd") is None


def test_eviction_removes_the_least_recently_used_first(tmp_path: Path) -> None:
    old = _plant(tmp_path, "a", 400, ["lab/old"], used=1000.0)
    mid = _plant(tmp_path, "b", 400, ["lab/mid"], used=2000.0)
    new = _plant(tmp_path, "c", 400, ["lab/new"], used=3000.0)
    assert images.lookup(str(tmp_path), "lab/mid") is not None
    _touch(tmp_path, mid, 2000.0)
    assert images.evict(str(tmp_path), 900, keep=old) == [mid]
    assert [i.digest for i in images.list_images(str(tmp_path))] == [old, new]
    assert images.lookup(str(tmp_path), "lab/mid") is None
    assert images.remove(str(tmp_path), "lab/new")
    assert [i.digest for i in images.list_images(str(tmp_path))] == [old]


def _tar(path: Path, members: list[str]) -> None:
    with tarfile.open(path, "w") as tar:
        for name in members:
            info = tarfile.TarInfo(name)
            data = b"{}"
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_archive_kinds(tmp_path: Path) -> None:
    _tar(tmp_path / "oci.tar", ["oci-layout", "index.json"])
    _tar(tmp_path / "docker.tar", ["manifest.json", "abc/layer.tar"])
    _tar(tmp_path / "other.tar", ["hello"])
    assert images.archive_transport(str(tmp_path / "oci.tar")).startswith("oci-archive:")
    assert images.archive_transport(str(tmp_path / "docker.tar")).startswith("docker-archive:")
    with pytest.raises(images.ImageError, match="not an OCI archive"):
        images.archive_transport(str(tmp_path / "other.tar"))
    with pytest.raises(images.ImageError, match="no registry"):
        images.archive_transport("docker://ubuntu")
    (tmp_path / "plain").write_text("x")
    with pytest.raises(images.ImageError, match="not an image archive"):
        images.archive_transport(str(tmp_path / "plain"))
