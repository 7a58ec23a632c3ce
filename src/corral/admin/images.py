"""`corral image`: this node's container image cache (agent.images, docs/CONTAINERS.md)."""

from __future__ import annotations

import argparse
import os
import sys

from corral import paths


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    img = sub.add_parser("image", help="container images in this node's cache: import, list, rm")
    img.add_argument("action", choices=["import", "list", "rm"])
    img.add_argument("source", nargs="?",
                     help="import: an OCI archive or docker/podman save tar "
                          "([oci-archive:|docker-archive:]FILE); rm: a name or sha256:DIGEST")
    img.add_argument("--name", action="append", default=[],
                     help="import: a name to run it by (--container-image=NAME); repeatable")
    img.add_argument("--max-size", type=int, default=None, metavar="GB",
                     help="import: evict the least recently used images past this size (100)")
    img.set_defaults(fn=cmd_image)


def cmd_image(args: argparse.Namespace) -> int:
    from corral.agent import images

    cache = images.cache_dir(paths.corral_home())
    if args.action == "list":
        print(f"{'DIGEST':<20} {'SIZE':>10}  NAMES")
        for image in images.list_images(cache):
            print(f"{image.digest[:19]:<20} {image.size // (1 << 20):>8}MB  "
                  f"{','.join(image.names)}")
        return 0
    if not args.source:
        print(f"corral image {args.action}: an image is required", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("corral image: error: the node's image cache is root's: run this as root "
              "(users can run their own squashfs files: --container-image=PATH.sqsh)",
              file=sys.stderr)
        return 1
    if args.action == "rm":
        if not images.remove(cache, args.source):
            print(f"corral image: error: no image {args.source} in this node's cache",
                  file=sys.stderr)
            return 1
        return 0
    max_bytes = images.DEFAULT_MAX_BYTES if args.max_size is None else args.max_size * 1024**3
    try:
        image = images.import_archive(cache, args.source, args.name, max_bytes)
    except (images.ImageError, ValueError) as e:
        print(f"corral image: error: {e}", file=sys.stderr)
        return 1
    print(f"{image.digest} {image.path}")
    return 0
