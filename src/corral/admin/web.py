"""`corral web`: a link to the controller's dashboard, logged in as the caller.

The controller mints a single-use login token for whoever asks on its socket (the kernel
names the caller), good for two minutes; the link carries it after `#`, so it is never sent
in a request line or logged.  docs/DASHBOARD.md."""

from __future__ import annotations

import argparse
from typing import Any

from corral.cli import client


def cmd_web(args: argparse.Namespace) -> int:
    answer = client.post("/v1/web/login")
    print(answer["url"])
    if not args.quiet:
        print(f"(for {answer['user']}; open it within {answer['expires_in']:.0f} s, once; "
              "from another machine, tunnel the port first: ssh -L PORT:127.0.0.1:PORT HOST)")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("web", help="print a one-time link to the cluster's web dashboard")
    p.add_argument("-q", "--quiet", action="store_true", help="print the link alone")
    p.set_defaults(fn=cmd_web)
