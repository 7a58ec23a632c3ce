"""Who is who across machines: join tokens, per-machine keys, signed requests, fingerprints.

Shared by the controller (which verifies) and the agents (which sign what a local user
asks), with the connection limits both doors apply.  Stdlib only; the signing and
verifying code does no I/O and has no clock of its own (callers pass `now`).
docs/SECURITY.md has the trust model.

A machine joins with a *join token* (`corral token create`): used once, over TLS with the
controller's pinned certificate, to obtain the machine's own *key* — a node key (the
machine serves one node, by the name it joined as) or a login key (it only forwards its
users' commands).  The token is then spent; the key is stored root-only on the machine.

A joined agent forwards a CLI request with these headers::

    X-Corral-Key                  the id of the machine's key (which node or login host)
    X-Corral-Uid, X-Corral-Gid    the caller, as SO_PEERCRED told the agent
    X-Corral-Time                 epoch seconds when the agent signed
    X-Corral-Nonce                random, never reused
    X-Corral-Signature            hex HMAC-SHA256(the machine's key, canonical request)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

H_KEY = "X-Corral-Key"
H_UID = "X-Corral-Uid"
H_GID = "X-Corral-Gid"
H_TIME = "X-Corral-Time"
H_NONCE = "X-Corral-Nonce"
H_SIGNATURE = "X-Corral-Signature"
# A joining agent declares the node it serves on the WebSocket upgrade, so the controller
# can admit a node that is not in its configuration before the agent registers it.
H_JOIN_NODE = "X-Corral-Node"
H_JOIN_HW = "X-Corral-Hw"

CREDENTIAL_FILE = "auth/machine.key"  # in a joined machine's $CORRAL_HOME (dir 0700, file 0600)
CERT_FILE = "tls/cert.pem"  # in the controller's $CORRAL_HOME

MAX_SKEW = 60.0  # seconds a signature stays valid either side of the controller's clock

KIND_NODE = "node"
KIND_LOGIN = "login"


def credential_path(home: str) -> str:
    return os.path.join(home, CREDENTIAL_FILE)


def join_token_path(home: str) -> str:
    """What a joined agent reads at start (its --token-file default): the machine's key."""
    return credential_path(home)


def cert_path(home: str) -> str:
    return os.path.join(home, CERT_FILE)


class AuthError(Exception):
    """A request that must be refused; the message says why (for the log and the client)."""


# ---- keys ---------------------------------------------------------------------------

def derive_cluster_key(token: str) -> bytes:
    """A key from a secret string (tests; the controller derives machine keys from its master)."""
    return hmac.new(token.encode(), b"corral cluster key v1", hashlib.sha256).digest()


def derive_machine_key(master: bytes, key_id: str) -> bytes:
    """The controller keeps one master secret; each machine's key follows from its id."""
    return hmac.new(master, b"corral machine key v2\n" + key_id.encode(), hashlib.sha256).digest()


class Credential:
    """A joined machine's key: what it is (node or login host), its name, the secret."""

    __slots__ = ("key_id", "kind", "name", "secret", "cluster")

    def __init__(self, key_id: str, kind: str, name: str, secret: bytes, cluster: str = "") -> None:
        self.key_id, self.kind, self.name, self.secret, self.cluster = key_id, kind, name, secret, cluster

    def dumps(self) -> str:
        return json.dumps({"v": 2, "key_id": self.key_id, "kind": self.kind, "name": self.name,
                           "secret": self.secret.hex(), "cluster": self.cluster})

    @classmethod
    def loads(cls, text: str) -> Credential:
        try:
            d = json.loads(text)
            if not isinstance(d, dict) or d.get("v") != 2:
                raise ValueError
            cred = cls(str(d["key_id"]), str(d["kind"]), str(d["name"]),
                       bytes.fromhex(d["secret"]), str(d.get("cluster", "")))
        except (ValueError, KeyError, TypeError):
            raise ValueError("not a Corral machine key (join again with `corral join`)") from None
        if cred.kind not in (KIND_NODE, KIND_LOGIN) or len(cred.secret) != 32:
            raise ValueError("not a Corral machine key (join again with `corral join`)")
        return cred


def write_private(path: str, data: bytes) -> None:
    """Write a secret: parent directory 0700, file 0600, atomically and durably.

    Opened with O_NOFOLLOW/O_EXCL on a fresh temporary name, so a planted link is never
    followed; only root (or the owner of the directory) can write there anyway.
    """
    d = os.path.dirname(path)
    os.makedirs(d, mode=0o700, exist_ok=True)
    os.chmod(d, 0o700)
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


# ---- join tokens ----------------------------------------------------------------------

def new_token() -> tuple[str, str, str]:
    """(token id, the token to hand out, the digest the controller keeps)."""
    token_id = secrets.token_hex(4)
    secret = secrets.token_urlsafe(24)
    token = f"{token_id}.{secret}"
    return token_id, token, token_digest(token)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.strip().encode()).hexdigest()


def split_token(token: str) -> str:
    """The id part of a join token, or ValueError."""
    token_id, dot, secret = token.strip().partition(".")
    if not dot or len(token_id) != 8 or not secret or not all(c in "0123456789abcdef" for c in token_id):
        raise ValueError("malformed join token")
    return token_id


def bearer(authorization: str | None) -> str | None:
    """The value of an `Authorization: Bearer VALUE` header."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def check_token(expected: str, authorization: str | None) -> bool:
    """Whether an `Authorization: Bearer TOKEN` header carries `expected`."""
    value = bearer(authorization)
    if value is None or not expected:
        return False
    return hmac.compare_digest(value.encode(), expected.encode())


# ---- signed requests --------------------------------------------------------------------

def canonical(method: str, path_qs: str, body: bytes, uid: int, gid: int, timestamp: str,
              nonce: str, key_id: str = "") -> bytes:
    """What the signature covers; the body by its digest so the message stays small."""
    return "\n".join([
        "corral-v2", key_id, method.upper(), path_qs, str(uid), str(gid), timestamp, nonce,
        hashlib.sha256(body).hexdigest(),
    ]).encode()


def sign_request(key: bytes, method: str, path_qs: str, body: bytes, uid: int, gid: int,
                 now: float, nonce: str | None = None, key_id: str = "") -> dict[str, str]:
    """The headers that vouch for `uid` making this request."""
    timestamp = f"{now:.3f}"
    nonce = nonce or secrets.token_hex(16)
    sig = hmac.new(key, canonical(method, path_qs, body, uid, gid, timestamp, nonce, key_id),
                   hashlib.sha256).hexdigest()
    headers = {H_UID: str(uid), H_GID: str(gid), H_TIME: timestamp, H_NONCE: nonce,
               H_SIGNATURE: sig}
    if key_id:
        headers[H_KEY] = key_id
    return headers


def is_signed(headers: Mapping[str, str]) -> bool:
    return H_SIGNATURE in headers


class Signed:
    """What a valid signature vouches for: which key (machine) and which user."""

    __slots__ = ("key_id", "uid", "gid")

    def __init__(self, key_id: str, uid: int, gid: int) -> None:
        self.key_id, self.uid, self.gid = key_id, uid, gid


class Verifier:
    """Checks signed requests: HMAC, clock skew, and that no nonce is accepted twice.

    `keys` gives the key of a key id (None: unknown or revoked), or is one fixed key.
    Nonces are remembered until their signature would be too old anyway. The memory is
    bounded: when full, the oldest entry is forgotten and `floor` rises to its time, so
    every request signed at or before a forgotten nonce is refused as stale — a replay
    can never slip through the eviction.  `not_before` (the controller's start time)
    starts the floor: the nonces of an earlier run are not known, so nothing signed
    before this run began is accepted — a replay cannot survive a restart.
    """

    def __init__(self, keys: bytes | Callable[[str], bytes | None], *, max_skew: float = MAX_SKEW,
                 max_nonces: int = 100_000, not_before: float = float("-inf")) -> None:
        self.keys = keys
        self.max_skew = max_skew
        self.max_nonces = max_nonces
        self.seen: OrderedDict[str, float] = OrderedDict()
        self.not_before = not_before
        self.floor = not_before

    def _key(self, key_id: str) -> bytes | None:
        if isinstance(self.keys, bytes):
            return self.keys
        return self.keys(key_id)

    def verify(self, method: str, path_qs: str, body: bytes, headers: Mapping[str, str],
               now: float) -> tuple[int, int]:
        """(uid, gid) the request is signed for, or AuthError."""
        s = self.verify_signed(method, path_qs, body, headers, now)
        return s.uid, s.gid

    def verify_signed(self, method: str, path_qs: str, body: bytes, headers: Mapping[str, str],
                      now: float) -> Signed:
        try:
            uid_s, gid_s = headers[H_UID], headers[H_GID]
            timestamp, nonce, sig = headers[H_TIME], headers[H_NONCE], headers[H_SIGNATURE]
        except KeyError as e:
            raise AuthError(f"unsigned request (no {e.args[0]} header)") from None
        key_id = headers.get(H_KEY, "")
        try:
            uid, gid, when = int(uid_s), int(gid_s), float(timestamp)
        except ValueError:
            raise AuthError("malformed signature headers") from None
        if not nonce or len(nonce) > 128 or uid < 0 or gid < 0 or len(key_id) > 64 \
                or uid > 0xFFFFFFFE or gid > 0xFFFFFFFE or when != when:
            raise AuthError("malformed signature headers")
        key = self._key(key_id)
        if key is None:
            raise AuthError(f"unknown or revoked machine key {key_id!r}")
        expected = hmac.new(key, canonical(method, path_qs, body, uid, gid, timestamp, nonce, key_id),
                            hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, sig):
            raise AuthError("bad request signature")
        if abs(now - when) > self.max_skew:
            raise AuthError(f"request signed {now - when:+.0f} s from the controller's clock "
                            f"(more than {self.max_skew:.0f} s): check the machines' clocks")
        if when <= self.not_before:
            raise AuthError("request signed before the controller started (replayed, or "
                            "signed by a clock behind the controller's)")
        if nonce in self.seen or when <= self.floor:
            raise AuthError("replayed request (nonce already used)")
        self._forget_before(now - self.max_skew)
        self.seen[nonce] = when
        while len(self.seen) > self.max_nonces:
            _, evicted = self.seen.popitem(last=False)
            self.floor = max(self.floor, evicted)
        return Signed(key_id, uid, gid)

    def _forget_before(self, cutoff: float) -> None:
        """Nonces older than the skew window are refused by time anyway."""
        while self.seen:
            nonce, when = next(iter(self.seen.items()))
            if when >= cutoff:
                break
            del self.seen[nonce]


# ---- certificate fingerprints -------------------------------------------------------

def fingerprint_of_der(der: bytes) -> str:
    """SHA256:<base64, no padding>, as ssh-keygen prints key fingerprints."""
    digest = hashlib.sha256(der).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def fingerprint_of_pem(pem: str) -> str:
    body = pem.split("-----BEGIN CERTIFICATE-----", 1)[1].split("-----END CERTIFICATE-----", 1)[0]
    return fingerprint_of_der(base64.b64decode("".join(body.split())))


def parse_fingerprint(text: str) -> bytes:
    """The 32-byte digest from `SHA256:base64`, `SHA256:hex` or hex with colons."""
    s = text.strip()
    if s.upper().startswith("SHA256:"):
        s = s[7:]
    compact = s.replace(":", "")
    if len(compact) == 64:
        try:
            return binascii.unhexlify(compact)
        except binascii.Error:
            pass
    try:
        raw = base64.b64decode(s + "=" * (-len(s) % 4), validate=True)
    except binascii.Error:
        raw = b""
    if len(raw) != 32:
        raise ValueError(f"not a SHA-256 certificate fingerprint: {text!r}")
    return raw


# ---- connection limits --------------------------------------------------------------------

_PEERCRED = struct.Struct("3i")

TOO_MANY = "Too many connections"


def peer_key(transport: Any) -> str:
    """Whose connection this is: `uid:N` on a Unix socket (SO_PEERCRED), else `addr:IP`."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family == socket.AF_UNIX:
        _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                           _PEERCRED.size))
        return f"uid:{uid}"
    peer = transport.get_extra_info("peername")
    host = peer[0] if isinstance(peer, tuple) and peer else str(peer)
    return f"addr:{host}"


class ConnectionGuard:
    """At most `per_user` open connections per uid on a Unix socket, `per_address` per
    remote address over TCP; `exempt` keys (root, the service's own uid) are never limited.

    One user's connections (idle or not) must not use up the server's descriptors and
    stall everyone else's commands.  A connection over the limit gets a short fuse
    (`REFUSED_FUSE` seconds): its request, if one comes at once, is answered with HTTP 503
    and the reason (`refusal`, called by the server's middleware), then it is closed.
    `install` hooks an aiohttp `web.Server` (its connection_made/lost callbacks, which
    every RequestHandler calls).
    """

    REFUSED_FUSE = 1.0

    def __init__(self, per_user: int, per_address: int, exempt: set[str] | None = None) -> None:
        self.per_user, self.per_address = per_user, per_address
        self.exempt = exempt or set()
        self.open: dict[str, int] = {}
        self._owner: dict[Any, str] = {}
        self._over: dict[Any, str] = {}
        self.refused = 0

    def limit_for(self, key: str) -> int | None:
        if key in self.exempt:
            return None
        return self.per_user if key.startswith("uid:") else self.per_address

    def refusal(self, protocol: Any) -> str | None:
        """Why a request on this connection is refused (it is over its owner's limit)."""
        key = self._over.get(protocol)
        if key is None:
            return None
        return (f"{TOO_MANY} from {key.replace(':', ' ', 1)} (limit {self.limit_for(key)}); "
                "close some and retry")

    def install(self, server: Any) -> None:
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: Any) -> None:
            made(handler, transport)
            try:
                key = peer_key(transport)
            except OSError:
                return
            limit = self.limit_for(key)
            if limit is not None and self.open.get(key, 0) >= limit:
                self.refused += 1
                self._over[handler] = key
                asyncio.get_running_loop().call_later(self.REFUSED_FUSE, transport.close)
                return
            self.open[key] = self.open.get(key, 0) + 1
            self._owner[handler] = key

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            lost(handler, exc)
            self._over.pop(handler, None)
            key = self._owner.pop(handler, None)
            if key is not None:
                n = self.open.get(key, 1) - 1
                if n > 0:
                    self.open[key] = n
                else:
                    self.open.pop(key, None)

        server.connection_made = connection_made
        server.connection_lost = connection_lost
