"""What every route module of the API shares: who the caller is, JSON answers, times in
queries.  Route modules (api_accounts.py, …) import it rather than server.py, which imports
them: no import cycle."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from aiohttp import web

from corral import jsonio
from corral.controller import auth as door
from corral.controller.auth import request_uid_gid
from corral.controller.errors import SlurmError

if TYPE_CHECKING:
    from corral.controller.state import Controller, Identity

# What root on a joined machine may ask through its agent: reading, nothing else.
REMOTE_ROOT_READS = frozenset({"/v1/ping", "/v1/whoami", "/v1/jobs", "/v1/nodes",
                               "/v1/partitions", "/v1/config", "/v1/accounting", "/v1/diag",
                               "/v1/sdiag", "/v1/usage"})


def query_epoch(text: str) -> float:
    """A time in a query (seconds since the epoch); ValueError for inf, nan or junk."""
    t = float(text)
    if not math.isfinite(t):
        raise ValueError(text)
    return t


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=jsonio.dumps_bytes(obj), status=status,
                        content_type="application/json", charset="utf-8")


def peer_identity(request: web.Request, ctl: Controller) -> Identity:
    """The caller: SO_PEERCRED on the Unix socket, or the uid an agent signed for over TCP.

    A joined machine's key vouches for that machine's users, not for the cluster: root
    there (who holds the key) could sign for any uid, so no signed request gets operator
    rights, and one signed for uid 0 may only read — a job as root would run as root on
    every node, and a compromised node would act for all of them (docs/SECURITY.md).
    """
    from corral.controller.state import Identity

    uid, gid = request_uid_gid(request)
    if ctl.own_uid != 0 and uid != ctl.own_uid:
        # a controller run by an ordinary user runs every job as that user: refuse others
        raise SlurmError("Access/permission denied: this cluster is private to its owner", 0, 403)
    who = ctl.identity(uid, gid)
    if door.unix_peer(request) is None:
        if uid == 0 and not (request.method == "GET" and request.path in REMOTE_ROOT_READS):
            raise SlurmError("Access/permission denied: root on a joined machine is not root of "
                             "the cluster (run this on the controller's machine)", 2002, 403)
        who = Identity(who.uid, who.gid, who.user, False, remote=True)
    return who
