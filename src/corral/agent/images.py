"""This node's container image cache: squashfs images keyed by digest, shared by all users.

Layout of `<home>/images` (root's, 0755; nothing in it is writable by anyone else, so one user
cannot plant or alter an image another user runs):

- `sha256-<hex>.sqsh`: an image's file system, named by the digest of its OCI manifest
  (verified against the manifest's bytes at import);
- `sha256-<hex>.json`: what the image's config says (environment, working directory,
  entrypoint) and the names it was imported under;
- `names/<sha256 of the name>`: the digest a name ("REGISTRY/IMAGE:TAG") points to.

`import_archive` runs Debian's tools, the way Enroot builds its squashfs files: skopeo copies an
OCI archive or `docker save` / `podman save` tar into an OCI layout, umoci unpacks it into a
root file system, mksquashfs packs it.  Images are used in place (squashfuse, agent.container),
never unpacked per job; the least recently used go first once the cache outgrows its size.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field

from corral.model.pyxis import image_key

DEFAULT_MAX_BYTES = 100 * 1024**3
WORKDIR_KEY = ":workdir"  # the image's WorkingDir, kept with its environment
ENTRYPOINT_KEY = ":entrypoint"  # its Entrypoint (a JSON list)
IMPORT_TIMEOUT = 3600.0
ENV_FILE_MAX = 1 << 20


@dataclass
class CachedImage:
    digest: str  # "sha256:<hex>"
    path: str
    size: int = 0
    env: dict[str, str] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    last_used: float = 0.0


class ImageError(Exception):
    """An import that failed; str() says why."""


def cache_dir(home: str) -> str:
    return os.path.join(home, "images")


def _stem(digest: str) -> str:
    return digest.replace(":", "-")


def _name_file(cache: str, name: str) -> str:
    return os.path.join(cache, "names", hashlib.sha256(name.encode()).hexdigest())


def read_env_file(path: str) -> dict[str, str]:
    """The JSON object of string values in `path` ({} when absent or not one)."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(ENV_FILE_MAX))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if isinstance(v, str)}


def write_env_file(path: str, env: dict[str, str]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(env, f)
    os.replace(tmp, path)


def _meta(cache: str, digest: str) -> dict[str, object]:
    try:
        with open(os.path.join(cache, _stem(digest) + ".json"), "rb") as f:
            data = json.loads(f.read(ENV_FILE_MAX))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _image(cache: str, digest: str) -> CachedImage | None:
    path = os.path.join(cache, _stem(digest) + ".sqsh")
    try:
        st = os.stat(path)
    except OSError:
        return None
    meta = _meta(cache, digest)
    env = meta.get("env")
    names = meta.get("names")
    return CachedImage(digest, path, st.st_size,
                       {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
                       [str(n) for n in names] if isinstance(names, list) else [],
                       st.st_mtime)


def lookup(cache: str, ref: str) -> CachedImage | None:
    """The cached image a reference names (a name or "sha256:<hex>"), marked as used; None
    when this node has none.  ValueError for a reference that is not an image name."""
    if not cache:
        return None
    if ref.startswith("sha256:"):
        digest = ref
    else:
        try:
            with open(_name_file(cache, image_key(ref))) as f:
                digest = f.read(200).strip()
        except OSError:
            return None
    if not digest.startswith("sha256:") or not all(c in "0123456789abcdef" for c in digest[7:]):
        return None
    image = _image(cache, digest)
    if image is not None:
        with contextlib.suppress(OSError):
            os.utime(image.path)  # the LRU's clock
    return image


def list_images(cache: str) -> list[CachedImage]:
    out = []
    with contextlib.suppress(OSError):
        for entry in sorted(os.listdir(cache)):
            if entry.startswith("sha256-") and entry.endswith(".sqsh"):
                image = _image(cache, entry[:-5].replace("-", ":", 1))
                if image is not None:
                    out.append(image)
    return out


def remove(cache: str, ref: str) -> bool:
    image = lookup(cache, ref)
    if image is None:
        return False
    for name in image.names:
        with contextlib.suppress(OSError):
            os.unlink(_name_file(cache, name))
    for suffix in (".sqsh", ".json"):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(cache, _stem(image.digest) + suffix))
    return True


def evict(cache: str, max_bytes: int, keep: str | None = None) -> list[str]:
    """Remove the least recently used images until the cache fits `max_bytes` (never
    `keep`); the digests removed.  A job that has an image mounted keeps using it: the
    mount holds the file open."""
    images = sorted(list_images(cache), key=lambda i: i.last_used)
    total = sum(i.size for i in images)
    removed = []
    for image in images:
        if total <= max_bytes:
            break
        if image.digest == keep:
            continue
        remove(cache, image.digest)
        total -= image.size
        removed.append(image.digest)
    return removed


# ---- import -----------------------------------------------------------------------------------

def _run(argv: list[str], what: str) -> None:
    tool = shutil.which(argv[0])
    if tool is None:
        raise ImageError(f"{argv[0]} is not installed (Debian package "
                         f"{'squashfs-tools' if argv[0] == 'mksquashfs' else argv[0]})")
    try:
        proc = subprocess.run([tool, *argv[1:]], capture_output=True, timeout=IMPORT_TIMEOUT,
                              check=False)
    except subprocess.TimeoutExpired:
        raise ImageError(f"{what}: timed out") from None
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        raise ImageError(f"{what}: {lines[-1] if lines else f'exit {proc.returncode}'}")


def archive_transport(source: str) -> str:
    """The skopeo transport of `source`: as given ("oci-archive:", "docker-archive:"), else
    what the tar holds (an OCI layout, or a `docker save` / `podman save` manifest)."""
    for prefix in ("oci-archive:", "docker-archive:"):
        if source.startswith(prefix):
            return source
    if source.startswith(("docker://", "dockerd://", "podman://")):
        raise ImageError(f"{source}: no registry or image daemon is reachable from Corral's "
                         f"import; save the image to a file (docker save, podman save, skopeo "
                         f"copy ... oci-archive:FILE) and import that")
    try:
        with tarfile.open(source) as tar:
            names = set(tar.getnames())
    except (OSError, tarfile.TarError) as e:
        raise ImageError(f"{source}: not an image archive ({e})") from None
    if "oci-layout" in names or "./oci-layout" in names:
        return f"oci-archive:{source}"
    if "manifest.json" in names or "./manifest.json" in names:
        return f"docker-archive:{source}"
    raise ImageError(f"{source}: not an OCI archive or a docker-archive tar")


def _blob(layout: str, digest: str) -> bytes:
    algo, _, hexdigest = digest.partition(":")
    if algo != "sha256" or not hexdigest.isalnum():
        raise ImageError(f"unsupported digest {digest}")
    with open(os.path.join(layout, "blobs", algo, hexdigest), "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != hexdigest:
        raise ImageError(f"blob {digest} does not match its digest")
    return data


def _image_config(layout: str) -> dict[str, object]:
    """The image config's "config" object (Env, WorkingDir, Entrypoint, ...)."""
    with open(os.path.join(layout, "index.json")) as f:
        manifest = json.loads(_blob(layout, json.load(f)["manifests"][0]["digest"]))
    config = json.loads(_blob(layout, manifest["config"]["digest"])).get("config") or {}
    return config if isinstance(config, dict) else {}


def _verified_digest(layout: str) -> str:
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    digest = str(index["manifests"][0]["digest"])
    algo, _, hexdigest = digest.partition(":")
    with open(os.path.join(layout, "blobs", algo, hexdigest), "rb") as f:
        actual = hashlib.sha256(f.read()).hexdigest()
    if algo != "sha256" or actual != hexdigest:
        raise ImageError(f"manifest digest {digest} does not match its content")
    return digest


def import_archive(cache: str, source: str, names: list[str],
                   max_bytes: int = DEFAULT_MAX_BYTES) -> CachedImage:
    """Import an image archive into the cache under `names`; ImageError when it cannot."""
    transport = archive_transport(source)
    os.makedirs(os.path.join(cache, "names"), mode=0o755, exist_ok=True)
    os.chmod(cache, 0o755)
    work = tempfile.mkdtemp(prefix=".import-", dir=cache)
    try:
        layout = os.path.join(work, "oci")
        _run(["skopeo", "copy", "--quiet", transport, f"oci:{layout}:image"], "skopeo copy")
        digest = _verified_digest(layout)
        bundle = os.path.join(work, "bundle")
        _run(["umoci", "unpack", "--image", f"{layout}:image", bundle], "umoci unpack")
        config = _image_config(layout)
        variables = config.get("Env")
        env: dict[str, str] = {}
        for entry in variables if isinstance(variables, list) else []:
            name, eq, value = str(entry).partition("=")
            if eq:
                env[name] = value
        # (keys no environment variable has: what agent.container reads besides the variables)
        if config.get("WorkingDir"):
            env[WORKDIR_KEY] = str(config["WorkingDir"])
        entrypoint = config.get("Entrypoint")
        if isinstance(entrypoint, list) and entrypoint:
            env[ENTRYPOINT_KEY] = json.dumps([str(a) for a in entrypoint])
        target = os.path.join(cache, _stem(digest) + ".sqsh")
        if not os.path.exists(target):
            tmp = os.path.join(work, "image.sqsh")
            _run(["mksquashfs", os.path.join(bundle, "rootfs"), tmp, "-noappend", "-quiet",
                  "-no-progress"], "mksquashfs")
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        old = _image(cache, digest)
        known = old.names if old is not None else []
        keys = [image_key(n) for n in names]
        meta = {"env": env, "names": sorted(set(known + keys))}
        with open(os.path.join(cache, _stem(digest) + ".json.tmp"), "w") as f:
            json.dump(meta, f)
        os.replace(os.path.join(cache, _stem(digest) + ".json.tmp"),
                   os.path.join(cache, _stem(digest) + ".json"))
        for key in keys:
            name_file = _name_file(cache, key)
            with open(name_file + ".tmp", "w") as f:
                f.write(digest + "\n")
            os.replace(name_file + ".tmp", name_file)
        evict(cache, max_bytes, keep=digest)
    except (OSError, ValueError, KeyError, IndexError) as e:
        raise ImageError(f"cannot import {source}: {e}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    image = _image(cache, digest)
    assert image is not None
    return image
