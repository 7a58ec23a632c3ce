"""The controller's side of one HTTP request, for tests that stand in for it on a Unix
socket (the commands' fast and full submission paths)."""

from __future__ import annotations

import socket


def read_request(conn: socket.socket) -> tuple[bytes, bytes]:
    """One request off `conn`: (its head, without the blank line; its body, as long as
    Content-Length says)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += conn.recv(65536)
    return head, body
