"""Who is who across machines: the cluster key, signed requests, certificate fingerprints.

Shared by the controller (which verifies) and the agents (which sign what a local user
asks).  Stdlib only, no I/O, no clock of its own: callers pass `now`.

A joined agent forwards a CLI request with these headers::

    X-Corral-Uid, X-Corral-Gid   the caller, as SO_PEERCRED told the agent
    X-Corral-Time                 epoch seconds when the agent signed
    X-Corral-Nonce                random, never reused
    X-Corral-Signature            hex HMAC-SHA256(cluster key, canonical request)

The cluster key is derived from the join token, so an agent needs nothing beyond the
token it joined with, and a login-only machine (which registers no node) can sign too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from collections import OrderedDict
from collections.abc import Mapping

H_UID = "X-Corral-Uid"
H_GID = "X-Corral-Gid"
H_TIME = "X-Corral-Time"
H_NONCE = "X-Corral-Nonce"
H_SIGNATURE = "X-Corral-Signature"
# A joining agent declares the node it serves on the WebSocket upgrade, so the controller
# can admit a node that is not in its configuration before the agent registers it.
H_JOIN_NODE = "X-Corral-Node"
H_JOIN_HW = "X-Corral-Hw"

JOIN_TOKEN_FILE = "join.token"  # in $CORRAL_HOME: the controller's token, or the one a machine joined with
CERT_FILE = "tls/cert.pem"  # in the controller's $CORRAL_HOME

MAX_SKEW = 60.0  # seconds a signature stays valid either side of the controller's clock


def join_token_path(home: str) -> str:
    return os.path.join(home, JOIN_TOKEN_FILE)


def cert_path(home: str) -> str:
    return os.path.join(home, CERT_FILE)


class AuthError(Exception):
    """A request that must be refused; the message says why (for the log and the client)."""


def derive_cluster_key(token: str) -> bytes:
    return hmac.new(token.encode(), b"corral cluster key v1", hashlib.sha256).digest()


def canonical(method: str, path_qs: str, body: bytes, uid: int, gid: int, timestamp: str,
              nonce: str) -> bytes:
    """What the signature covers; the body by its digest so the message stays small."""
    return "\n".join([
        "corral-v1", method.upper(), path_qs, str(uid), str(gid), timestamp, nonce,
        hashlib.sha256(body).hexdigest(),
    ]).encode()


def sign_request(key: bytes, method: str, path_qs: str, body: bytes, uid: int, gid: int,
                 now: float, nonce: str | None = None) -> dict[str, str]:
    """The headers that vouch for `uid` making this request."""
    timestamp = f"{now:.3f}"
    nonce = nonce or secrets.token_hex(16)
    sig = hmac.new(key, canonical(method, path_qs, body, uid, gid, timestamp, nonce),
                   hashlib.sha256).hexdigest()
    return {H_UID: str(uid), H_GID: str(gid), H_TIME: timestamp, H_NONCE: nonce,
            H_SIGNATURE: sig}


def is_signed(headers: Mapping[str, str]) -> bool:
    return H_SIGNATURE in headers


class Verifier:
    """Checks signed requests: HMAC, clock skew, and that no nonce is accepted twice.

    Nonces are remembered until their signature would be too old anyway. The memory is
    bounded: when full, the oldest entry is forgotten and `floor` rises to its time, so
    every request signed at or before a forgotten nonce is refused as stale — a replay
    can never slip through the eviction.
    """

    def __init__(self, key: bytes, *, max_skew: float = MAX_SKEW, max_nonces: int = 100_000) -> None:
        self.key = key
        self.max_skew = max_skew
        self.max_nonces = max_nonces
        self.seen: OrderedDict[str, float] = OrderedDict()
        self.floor = float("-inf")

    def verify(self, method: str, path_qs: str, body: bytes, headers: Mapping[str, str],
               now: float) -> tuple[int, int]:
        """(uid, gid) the request is signed for, or AuthError."""
        try:
            uid_s, gid_s = headers[H_UID], headers[H_GID]
            timestamp, nonce, sig = headers[H_TIME], headers[H_NONCE], headers[H_SIGNATURE]
        except KeyError as e:
            raise AuthError(f"unsigned request (no {e.args[0]} header)") from None
        try:
            uid, gid, when = int(uid_s), int(gid_s), float(timestamp)
        except ValueError:
            raise AuthError("malformed signature headers") from None
        if not nonce or len(nonce) > 128 or uid < 0 or gid < 0:
            raise AuthError("malformed signature headers")
        expected = hmac.new(self.key, canonical(method, path_qs, body, uid, gid, timestamp, nonce),
                            hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, sig):
            raise AuthError("bad request signature")
        if abs(now - when) > self.max_skew:
            raise AuthError(f"request signed {now - when:+.0f} s from the controller's clock "
                            f"(more than {self.max_skew:.0f} s): check the machines' clocks")
        if nonce in self.seen or when <= self.floor:
            raise AuthError("replayed request (nonce already used)")
        self._forget_before(now - self.max_skew)
        self.seen[nonce] = when
        while len(self.seen) > self.max_nonces:
            _, evicted = self.seen.popitem(last=False)
            self.floor = max(self.floor, evicted)
        return uid, gid

    def _forget_before(self, cutoff: float) -> None:
        """Nonces older than the skew window are refused by time anyway."""
        while self.seen:
            nonce, when = next(iter(self.seen.items()))
            if when >= cutoff:
                break
            del self.seen[nonce]


def check_token(expected: str, authorization: str | None) -> bool:
    """Whether an `Authorization: Bearer TOKEN` header carries the join token."""
    if not authorization or not expected:
        return False
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), expected.encode())


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
