"""The link from a joined machine (`corral join`) to a controller over TCP+TLS.

The controller's self-signed certificate is pinned by its SHA-256 fingerprint; the
agent proves itself with the join token, and signs the requests of local users with
the cluster key derived from it (`corral.auth`).
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
from corral.auth import H_JOIN_HW, H_JOIN_NODE, derive_cluster_key, sign_request

JOIN_ERROR_FILE = "join.error"


class JoinError(Exception):
    """Joining cannot work as asked (wrong token or fingerprint): retrying will not help."""


def join_error_path(home: str) -> str:
    return os.path.join(home, JOIN_ERROR_FILE)


class RemoteController:
    def __init__(self, url: str, fingerprint: bytes, token: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname or not parts.port:
            raise ValueError(f"the controller URL must be https://HOST:PORT, not {url!r}")
        self.url = f"https://{parts.netloc}"
        self.host, self.port = parts.hostname, parts.port
        self.fingerprint = fingerprint
        self.token = token
        self.key = derive_cluster_key(token)

    def session(self) -> aiohttp.ClientSession:
        # the pinned fingerprint replaces CA verification (the certificate is self-signed)
        conn = aiohttp.TCPConnector(ssl=aiohttp.Fingerprint(self.fingerprint))
        return aiohttp.ClientSession(connector=conn, auto_decompress=False,
                                     timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))

    def target(self, raw_path: str) -> URL:
        """The controller's URL for a request-target, byte for byte (the signature covers it)."""
        return URL(self.url + raw_path, encoded=True)

    def sign(self, method: str, raw_path: str, body: bytes, uid: int, gid: int) -> dict[str, str]:
        return sign_request(self.key, method, raw_path, body, uid, gid, time.time())

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
        headers = {"Authorization": f"Bearer {self.token}"}
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
        """One signed ping: proves the fingerprint and the token before anything else.

        Raises JoinError when retrying cannot help; aiohttp.ClientError/OSError otherwise.
        """
        path = "/v1/ping"
        headers = self.sign("GET", path, b"", os.geteuid(), os.getegid())
        try:
            async with session.get(self.target(path), headers=headers) as resp:
                body = await resp.read()
                if resp.status == 401:
                    raise JoinError(f"the controller at {self.url} refused the join token "
                                    f"({_error_text(body)})")
                if resp.status != 200:
                    raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status,
                                                      message=_error_text(body))
        except aiohttp.ServerFingerprintMismatch as e:
            raise JoinError(fingerprint_mismatch(self.url, e)) from None


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
