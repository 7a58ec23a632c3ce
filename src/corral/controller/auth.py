"""Authentication on the controller's two doors (docs/ARCHITECTURE.md, "Who is who").

- The Unix socket: the peer's uid from SO_PEERCRED.
- TCP+TLS (`corral up --listen`): agents open their WebSocket with the join token;
  every other request must be signed by an agent with the cluster key (`corral.auth`),
  which vouches for the uid of the local user it forwards.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from corral.auth import (
    H_JOIN_HW,
    H_JOIN_NODE,
    AuthError,
    Verifier,
    check_token,
    is_signed,
)
from corral.controller.state import Controller, SlurmError

log = logging.getLogger("corral.controller")

_PEERCRED = struct.Struct("3i")
AGENT_WS_PATH = "/v1/agent/ws"

JOIN_TOKEN = web.AppKey("corral_join_token", str)
VERIFIER = web.AppKey("corral_verifier", Verifier)
SIGNED_IDENTITY = "corral_signed_identity"  # request key: (uid, gid) a valid signature vouches for


def unix_peer(request: web.Request) -> tuple[int, int] | None:
    """(uid, gid) of a Unix-socket peer; None for any other transport."""
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    _pid, uid, gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      _PEERCRED.size))
    return uid, gid


def _remote(request: web.Request) -> str:
    return request.remote or "?"


def _refuse(request: web.Request, why: str) -> SlurmError:
    log.warning("refused %s %s from %s: %s", request.method, request.path, _remote(request), why)
    return SlurmError(f"Authentication failed: {why}", 0, 401)


@web.middleware
async def signed_requests(request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                          ) -> web.StreamResponse:
    """Over TCP, only signed requests pass (and the agent WebSocket, which checks its token)."""
    if unix_peer(request) is not None:
        return await handler(request)
    if request.path == AGENT_WS_PATH and not is_signed(request.headers):
        return await handler(request)
    verifier = request.app.get(VERIFIER)
    if verifier is None:
        raise _refuse(request, "this controller accepts no signed requests")
    body = await request.read()  # cached: the handler reads it again
    try:
        request[SIGNED_IDENTITY] = verifier.verify(request.method, request.raw_path, body,
                                                   request.headers, time.time())
    except AuthError as e:
        raise _refuse(request, str(e)) from None
    return await handler(request)


def request_uid_gid(request: web.Request) -> tuple[int, int]:
    """Who makes this request: SO_PEERCRED on the Unix socket, else a verified signature."""
    peer = unix_peer(request)
    if peer is not None:
        return peer
    signed = request.get(SIGNED_IDENTITY)
    if signed is None:
        raise SlurmError("Unauthenticated connection", 0, 401)
    return signed  # type: ignore[no-any-return]


def admit_agent(request: web.Request, ctl: Controller) -> None:
    """May this connection act as an agent? Admit the node it declares if it is new.

    Over the Unix socket the peer must be an operator; over TCP it must present the join
    token (a signed user request is never an agent).
    """
    peer = unix_peer(request)
    if peer is not None:
        if not ctl.identity(*peer).operator:
            raise SlurmError("Access/permission denied", 2002, 403)
        return
    if request.get(SIGNED_IDENTITY) is not None:
        raise _refuse(request, "an agent connects with the join token, not a user's signature")
    token = request.app.get(JOIN_TOKEN)
    if token is None or not check_token(token, request.headers.get("Authorization")):
        raise _refuse(request, "agent connection with a missing or wrong join token")
    name = request.headers.get(H_JOIN_NODE)
    if name and name not in ctl.nodes:
        try:
            hw = json.loads(request.headers.get(H_JOIN_HW) or "{}")
        except ValueError:
            hw = None
        if not isinstance(hw, dict):
            raise SlurmError(f"Malformed {H_JOIN_HW} header", 0, 400)
        try:
            ctl.add_dynamic_node(name, hw)
        except ValueError as e:
            raise SlurmError(str(e), 0, 400) from None
        log.info("node %s joined from %s (%s CPUs, %s MB, %s GPUs)", name, _remote(request),
                 hw.get("cpus"), hw.get("memory_mb"), hw.get("gpus"))
