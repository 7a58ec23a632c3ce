"""Authentication on the controller's two doors (docs/ARCHITECTURE.md, "Who is who";
docs/SECURITY.md has the trust model).

- The Unix socket: the peer's uid from SO_PEERCRED.
- TCP+TLS (`corral up --listen`): a machine joins once with a join token (POST /v1/join)
  and receives its own key; from then on every request is signed with that key.  A node's
  agent opens its WebSocket signed with its node key and serves only that node; a login
  host's key signs its users' requests and nothing else.  Tokens and keys are kept in
  the state database (root's, 0600; store/migrations.py imported the JSON registry of
  earlier releases), with the master secret the machine keys derive from.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import secrets
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from corral.auth import (
    H_JOIN_HW,
    H_JOIN_NODE,
    KIND_LOGIN,
    KIND_NODE,
    AuthError,
    ConnectionGuard,
    Credential,
    Signed,
    Verifier,
    derive_machine_key,
    is_signed,
    new_token,
    split_token,
    token_digest,
)
from corral.controller.logsafe import RateLimit
from corral.controller.state import Controller, SlurmError
from corral.store.base import AuthRecord, AuthState

log = logging.getLogger("corral.controller")

_PEERCRED = struct.Struct("3i")
AGENT_WS_PATH = "/v1/agent/ws"
JOIN_PATH = "/v1/join"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_TOKEN_TTL = 366 * 86400

SIGNED_IDENTITY = "corral_signed_identity"  # request key: (uid, gid) a valid signature vouches for
SIGNED_KEY = "corral_signed_key"  # request key: the machine key record that signed


class Registry:
    """Join tokens and machine keys, kept durably in the state store (each change an
    `AuthRecord` through the controller's writer; the caller awaits `durable()` before
    answering).

    A token: {scope: node|login, node: a name it is bound to or None, expires, uses_left,
    revoked, used_by: [names]} under its id; only its SHA-256 digest is kept.  A key:
    {kind, name, issued, revoked, token, addr}; its secret follows from the master secret
    and its id, so the store holds one secret, not one per machine.
    """

    def __init__(self, state: AuthState, persist: Callable[[list[AuthRecord]], None]) -> None:
        self._persist = persist
        if state.master is None:
            state.master = secrets.token_hex(32)
            persist([AuthRecord("master", "master", {"secret": state.master})])
        self.master = bytes.fromhex(state.master)
        self.tokens: dict[str, dict[str, Any]] = state.tokens
        self.keys: dict[str, dict[str, Any]] = state.keys

    def _save(self, kind: str, ids: list[str]) -> None:
        table = self.tokens if kind == "token" else self.keys
        # copies: the writer encodes them later, in its thread
        self._persist([AuthRecord(kind, i, copy.deepcopy(table[i])) for i in ids])

    # ---- machine keys ----------------------------------------------------------
    def key_for(self, key_id: str) -> bytes | None:
        rec = self.keys.get(key_id)
        if rec is None or rec.get("revoked"):
            return None
        return derive_machine_key(self.master, key_id)

    def active_key_named(self, name: str) -> str | None:
        for key_id, rec in self.keys.items():
            if rec["name"] == name and not rec.get("revoked"):
                return key_id
        return None

    def revoke_machine(self, name: str, now: float) -> list[str]:
        """Revoke the keys of a node or login host (by name or key id); their ids."""
        ids = [k for k, rec in self.keys.items()
               if (rec["name"] == name or k == name) and not rec.get("revoked")]
        for k in ids:
            self.keys[k]["revoked"] = now
        if ids:
            self._save("key", ids)
        return ids

    # ---- join tokens -----------------------------------------------------------
    def create_token(self, scope: str, ttl: float, uses: int, node: str | None, now: float
                     ) -> tuple[str, dict[str, Any]]:
        token_id, token, digest = new_token()
        rec: dict[str, Any] = {"digest": digest, "scope": scope, "node": node, "created": now,
               "expires": now + ttl, "uses_left": uses, "revoked": None, "used_by": []}
        self.tokens[token_id] = rec
        self._save("token", [token_id])
        return token, dict(rec, id=token_id)

    def revoke_token(self, token_id: str, now: float) -> bool:
        rec = self.tokens.get(token_id)
        if rec is None:
            return False
        rec["revoked"] = rec.get("revoked") or now
        self._save("token", [token_id])
        return True

    def enroll(self, token: str, role: str, name: str, addr: str, now: float,
               busy: Callable[[str], str | None]) -> Credential:
        """Spend one use of `token` for a key of `role` named `name`, or AuthError/ValueError."""
        try:
            token_id = split_token(token)
        except ValueError:
            raise AuthError("missing or wrong join token") from None
        rec = self.tokens.get(token_id)
        if rec is None or not secrets.compare_digest(rec["digest"], token_digest(token)):
            raise AuthError("missing or wrong join token")
        if rec.get("revoked"):
            raise AuthError(f"join token {token_id} was revoked")
        if now > rec["expires"]:
            raise AuthError(f"join token {token_id} expired")
        if rec["uses_left"] <= 0:
            raise AuthError(f"join token {token_id} is used up")
        if role not in (KIND_NODE, KIND_LOGIN):
            raise ValueError(f"unknown role {role!r}")
        if role != rec["scope"]:
            raise AuthError(f"join token {token_id} is for a {_scope_words(rec['scope'])}, "
                            f"not a {_scope_words(role)}")
        if not NAME_RE.fullmatch(name):
            raise ValueError(f"Invalid node name specified: {name!r}")
        if rec.get("node") and rec["node"] != name:
            raise AuthError(f"join token {token_id} is for node {rec['node']}, not {name}")
        holder = self.active_key_named(name)
        if holder is not None:
            raise AuthError(f"{name} already joined (key {holder}); on the controller's machine "
                            f"`corral node revoke {name}` first")
        why = busy(name)
        if why:
            raise AuthError(why)
        rec["uses_left"] -= 1
        rec["used_by"].append(name)
        key_id = secrets.token_hex(8)
        self.keys[key_id] = {"kind": role, "name": name, "issued": now, "revoked": None,
                             "token": token_id, "addr": addr}
        self._save("token", [token_id])
        self._save("key", [key_id])
        return Credential(key_id, role, name, derive_machine_key(self.master, key_id))


def _scope_words(scope: str) -> str:
    return "login host" if scope == KIND_LOGIN else "node"


REGISTRY = web.AppKey("corral_registry", Registry)
VERIFIER = web.AppKey("corral_verifier", Verifier)
LISTEN = web.AppKey("corral_listen", dict)
GUARD = web.AppKey("corral_connection_guard", ConnectionGuard)  # {"url": ..., "fingerprint": ...} when listening


_UNIX_PEER = "corral_unix_peer"


def unix_peer(request: web.Request) -> tuple[int, int] | None:
    """(uid, gid) of a Unix-socket peer; None for any other transport.  Asked several times
    per request (door, identity, limits): the answer is kept on the request."""
    try:
        return request[_UNIX_PEER]
    except KeyError:
        pass
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    peer: tuple[int, int] | None = None
    if sock is not None and sock.family == socket.AF_UNIX:
        _pid, uid, gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          _PEERCRED.size))
        peer = (uid, gid)
    request[_UNIX_PEER] = peer
    return peer


def _remote(request: web.Request) -> str:
    return request.remote or "?"


_REFUSALS_LOGGED = RateLimit(burst=30, window=60.0)  # per peer address


def _refuse(request: web.Request, why: str, **extra: Any) -> SlurmError:
    peer = _remote(request)
    logged, held = _REFUSALS_LOGGED.allow(peer)
    if logged:  # a peer cannot fill the log: 30 lines a minute, then a count
        more = f" ({held} more refused, not logged)" if held else ""
        log.warning("refused %.10s %.200s from %s: %.200s%s", request.method, request.path,
                    peer, why, more)
    err = SlurmError(f"Authentication failed: {why}", 0, 401)
    err.extra = extra  # type: ignore[attr-defined]
    return err


@web.middleware
async def signed_requests(request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                          ) -> web.StreamResponse:
    """Over TCP only signed requests pass, and POST /v1/join, which checks its token."""
    if unix_peer(request) is not None:
        return await handler(request)
    if request.path == JOIN_PATH and request.method == "POST" and not is_signed(request.headers):
        return await handler(request)
    verifier = request.app.get(VERIFIER)
    registry = request.app.get(REGISTRY)
    if verifier is None or registry is None:
        raise _refuse(request, "this controller accepts no signed requests")
    body = await request.read()  # cached: the handler reads it again
    try:
        signed: Signed = verifier.verify_signed(request.method, request.raw_path, body,
                                                request.headers, time.time())
    except AuthError as e:
        raise _refuse(request, str(e), not_before=verifier.not_before) from None
    request[SIGNED_IDENTITY] = (signed.uid, signed.gid)
    request[SIGNED_KEY] = dict(registry.keys[signed.key_id], id=signed.key_id)
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


def admit_agent(request: web.Request, ctl: Controller) -> tuple[set[str] | None, str | None]:
    """May this connection act as an agent, and for which nodes? Admits a new node.

    Returns (the node names it may serve, None for any: the local agent; the id of the key
    it signed with).  Over the Unix socket the peer must be an operator; over TCP the
    upgrade must be signed with a node key, and the agent serves that key's node only.
    """
    peer = unix_peer(request)
    if peer is not None:
        if not ctl.identity(*peer).operator:
            raise SlurmError("Access/permission denied", 2002, 403)
        return None, None
    key = request.get(SIGNED_KEY)
    if key is None:
        raise _refuse(request, "an agent connects signed with its node key")
    if key["kind"] != KIND_NODE:
        raise _refuse(request, f"{key['name']} joined as a login host: it cannot serve a node")
    name = key["name"]
    declared = request.headers.get(H_JOIN_NODE)
    if declared and declared != name:
        raise _refuse(request, f"the key of node {name} cannot serve node {declared}")
    if name not in ctl.nodes:
        try:
            hw = json.loads(request.headers.get(H_JOIN_HW) or "{}")
        except ValueError:
            hw = None
        if not isinstance(hw, dict):
            raise SlurmError(f"Malformed {H_JOIN_HW} header", 0, 400)
        try:
            ctl.add_dynamic_node(name, hw)
        except (ValueError, TypeError) as e:
            raise SlurmError(f"Malformed {H_JOIN_HW} header: {e}", 0, 400) from None
        log.info("node %s joined from %s (%s CPUs, %s MB, %s GPUs)", name, _remote(request),
                 hw.get("cpus"), hw.get("memory_mb"), hw.get("gpus"))
    return {name}, str(key["id"])


# ---- joining and the registry's administration ----------------------------------------------

def require_local_admin(request: web.Request, ctl: Controller) -> None:
    """Tokens and keys are managed on the controller's machine by root (or its own user)."""
    peer = unix_peer(request)
    if peer is None:
        raise SlurmError("Access/permission denied: join tokens and machine keys are managed "
                         "on the controller's machine", 2002, 403)
    if peer[0] not in (0, ctl.own_uid):
        raise SlurmError("Access/permission denied", 2002, 403)


def registry_of(request: web.Request) -> Registry:
    reg = request.app.get(REGISTRY)
    if reg is None:
        raise SlurmError("this controller does not listen for other machines "
                         "(start it with `corral up --listen HOST:PORT`)", 0, 400)
    return reg


def token_view(token_id: str, rec: dict[str, Any], now: float) -> dict[str, Any]:
    if rec.get("revoked"):
        status = "revoked"
    elif now > rec["expires"]:
        status = "expired"
    elif rec["uses_left"] <= 0:
        status = "used"
    else:
        status = "valid"
    return {"id": token_id, "scope": rec["scope"], "node": rec.get("node"),
            "created": rec["created"], "expires": rec["expires"], "uses_left": rec["uses_left"],
            "used_by": list(rec.get("used_by", [])), "status": status}


def key_view(key_id: str, rec: dict[str, Any]) -> dict[str, Any]:
    return {"id": key_id, "kind": rec["kind"], "name": rec["name"], "issued": rec["issued"],
            "revoked": rec.get("revoked"), "token": rec.get("token"), "addr": rec.get("addr")}
