"""The link from a joined machine (`corral join`) to a controller over TCP+TLS.

The controller's self-signed certificate is pinned by its SHA-256 fingerprint. Joining
spends a join token once (POST /v1/join) for this machine's own key, which `corral join`
stores root-only; from then on the agent proves itself, and signs the requests of local
users, with that key (`corral.auth`, docs/SECURITY.md).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from corral.agent.hw import Hardware
from corral.auth import H_JOIN_HW, H_JOIN_NODE, Credential, sign_request

JOIN_ERROR_FILE = "join.error"
AGENT_WS_PATH = "/v1/agent/ws"


class JoinError(Exception):
    """Joining cannot work as asked (wrong token or fingerprint): retrying will not help."""


def join_error_path(home: str) -> str:
    return os.path.join(home, JOIN_ERROR_FILE)


def _split_url(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname or not parts.port:
        raise ValueError(f"the controller URL must be https://HOST:PORT, not {url!r}")
    return f"https://{parts.netloc}", parts.hostname, parts.port


def _session(fingerprint: bytes) -> aiohttp.ClientSession:
    # the pinned fingerprint replaces CA verification (the certificate is self-signed)
    # pooled connections are dropped well before the controller closes idle ones (its
    # MessageTimeout, 10 s by default), so a request never goes out on a closing one
    conn = aiohttp.TCPConnector(ssl=aiohttp.Fingerprint(fingerprint), keepalive_timeout=4.0)
    return aiohttp.ClientSession(connector=conn, auto_decompress=False,
                                 timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))


class RemoteController:
    def __init__(self, url: str, fingerprint: bytes, credential: str) -> None:
        """`credential` is the machine key `corral join` stored (Credential.dumps)."""
        self.url, self.host, self.port = _split_url(url)
        self.fingerprint = fingerprint
        self.cred = Credential.loads(credential)
        # the controller refuses signatures older than its start: after a restart, sign no
        # earlier than it even if this machine's clock is a little behind
        self.not_before = 0.0

    @property
    def name(self) -> str:
        return self.cred.name

    def session(self) -> aiohttp.ClientSession:
        return _session(self.fingerprint)

    def target(self, raw_path: str) -> URL:
        """The controller's URL for a request-target, byte for byte (the signature covers it)."""
        return URL(self.url + raw_path, encoded=True)

    def clock(self) -> float:
        return max(time.time(), self.not_before + 0.001)

    def sign(self, method: str, raw_path: str, body: bytes, uid: int, gid: int) -> dict[str, str]:
        return sign_request(self.cred.secret, method, raw_path, body, uid, gid, self.clock(),
                            key_id=self.cred.key_id)

    def learn(self, body: bytes) -> bool:
        """From a refusal: whether it was for signing before the controller's (re)start,
        in which case the next signature is dated after it."""
        try:
            data: Any = json.loads(body)
        except ValueError:
            return False
        nb = data.get("not_before") if isinstance(data, dict) else None
        if isinstance(nb, int | float) and "before the controller started" in str(data.get("error")):
            self.not_before = max(self.not_before, float(nb))
            return True
        return False

    def local_address(self) -> str:
        """This machine's address on the way to the controller (no packet is sent)."""
        try:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((self.host, self.port))
                return str(s.getsockname()[0])
        except OSError:
            return ""

    def agent_headers(self, node: str | None, h: Hardware) -> dict[str, str]:
        """The agent's WebSocket upgrade, signed afresh with the node key (a new nonce)."""
        headers = self.sign("GET", AGENT_WS_PATH, b"", 0, 0)
        if node:
            headers[H_JOIN_NODE] = node
            headers[H_JOIN_HW] = json.dumps({
                "cpus": h.cpus, "memory_mb": h.memory_mb, "gpus": len(h.gpus),
                "gpu_type": h.gpu_type, "sockets": h.sockets,
                "cores_per_socket": h.cores_per_socket, "threads_per_core": h.threads_per_core,
                "hostname": h.hostname, "addr": self.local_address(),
            }, separators=(",", ":"))
        return headers

    async def check(self, session: aiohttp.ClientSession) -> None:
        """One signed ping: proves the fingerprint and the key before anything else.

        Raises JoinError when retrying cannot help; aiohttp.ClientError/OSError otherwise.
        """
        path = "/v1/ping"
        for _attempt in range(2):
            headers = self.sign("GET", path, b"", os.geteuid(), os.getegid())
            try:
                async with session.get(self.target(path), headers=headers) as resp:
                    body = await resp.read()
                    if resp.status == 401 and self.learn(body):
                        continue
                    if resp.status == 401:
                        raise JoinError(f"the controller at {self.url} refused this machine's key "
                                        f"({_error_text(body)})")
                    if resp.status != 200:
                        raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status,
                                                          message=_error_text(body))
                    data = json.loads(body)
                    if isinstance(data, dict) and isinstance(data.get("started"), int | float):
                        self.not_before = max(self.not_before, float(data["started"]))
                    return
            except aiohttp.ServerFingerprintMismatch as e:
                raise JoinError(fingerprint_mismatch(self.url, e)) from None
        raise JoinError(f"the controller at {self.url} keeps refusing this machine's signatures")


async def enroll(url: str, fingerprint: bytes, token: str, role: str, name: str) -> Credential:
    """Spend a join token for this machine's own key (JoinError when refused)."""
    base, _host, _port = _split_url(url)
    async with _session(fingerprint) as session:
        try:
            async with session.post(URL(base + "/v1/join", encoded=True),
                                    json={"role": role, "name": name},
                                    headers={"Authorization": f"Bearer {token.strip()}"}) as resp:
                body = await resp.read()
        except aiohttp.ServerFingerprintMismatch as e:
            raise JoinError(fingerprint_mismatch(base, e)) from None
    if resp.status == 401:
        raise JoinError(f"the controller at {base} refused the join token ({_error_text(body)})")
    if resp.status != 200:
        raise JoinError(f"the controller at {base} refused to join: {_error_text(body)}")
    try:
        return Credential.loads(json.loads(body)["credential"])
    except (ValueError, KeyError, TypeError):
        raise JoinError(f"malformed answer from {base}") from None


def fingerprint_mismatch(url: str, e: aiohttp.ServerFingerprintMismatch) -> str:
    return (f"the certificate of {url} has fingerprint SHA256:{_b64(e.got)}, not the expected "
            f"SHA256:{_b64(e.expected)}: check --fingerprint (as `corral up` printed it) "
            f"— or something is in the way")


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode().rstrip("=")


def _error_text(body: bytes) -> str:
    try:
        data: Any = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("error"):
        return str(data["error"])
    return body.decode("utf-8", "replace").strip()[:200] or "no reason given"
