"""A minimal RFC 6455 WebSocket client over the controller's Unix socket.

srun and salloc keep one WebSocket open to the controller (docs/STEPS.md).  aiohttp
or asyncio would cost every srun tens of milliseconds of imports, so this speaks the
protocol directly on the `_socket` C module: the HTTP/1.1 Upgrade handshake, masked
text frames out, and unmasked frames in (fragmented messages, ping, close).

Two ways to read: `recv_json(timeout)` blocks for one message; a poll loop waits on
`fileno()` and then calls `read_messages()`, which reads once and returns every complete
message (a frame may already sit in the buffer: check `has_buffered()` before polling).
"""

from __future__ import annotations

import binascii
import json
import os

TYPE_CHECKING = False  # `typing` would cost every srun ~3 ms
if TYPE_CHECKING:
    from typing import Any

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

_MAX_MESSAGE = 256 * 1024 * 1024  # a sanity bound: the controller sends far smaller frames


class WebSocketError(Exception):
    """The handshake failed or the peer broke the protocol."""


class ConnectionClosed(WebSocketError):
    """The connection ended: a close frame (with its code) or the socket closing."""

    def __init__(self, code: int | None = None, reason: str = ""):
        super().__init__(f"connection closed (code {code}): {reason}" if code else
                         "connection closed")
        self.code = code
        self.reason = reason


def accept_key(key: bytes) -> bytes:
    """The Sec-WebSocket-Accept value the server must answer for `key` (RFC 6455 §4.2.2)."""
    try:
        from _sha1 import sha1  # the C module alone: hashlib pulls in OpenSSL (~3 ms)
    except ImportError:  # pragma: no cover - every CPython build has _sha1
        from hashlib import sha1
    return binascii.b2a_base64(sha1(key + _GUID).digest(), newline=False)


def mask_payload(mask: bytes, data: bytes) -> bytes:
    """XOR `data` with the 4-byte `mask`, as one big integer: fast for any length."""
    n = len(data)
    if n == 0:
        return b""
    repeated = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(repeated, "little")).to_bytes(
        n, "little")


def encode_frame(opcode: int, payload: bytes, *, mask: bytes | None = None,
                 fin: bool = True) -> bytes:
    """One frame; masked when `mask` is given (a client must mask every frame)."""
    head = bytearray([(0x80 if fin else 0) | opcode])
    bit = 0x80 if mask is not None else 0
    n = len(payload)
    if n < 126:
        head.append(bit | n)
    elif n < 1 << 16:
        head.append(bit | 126)
        head += n.to_bytes(2, "big")
    else:
        head.append(bit | 127)
        head += n.to_bytes(8, "big")
    if mask is None:
        return bytes(head) + payload
    return bytes(head) + mask + mask_payload(mask, payload)


class WebSocket:
    """A connected client WebSocket.  Not thread-safe."""

    def __init__(self, sock: Any, buffered: bytes = b""):
        self.sock = sock
        self._buf = bytearray(buffered)
        self._fragments: list[bytes] = []
        self._frag_opcode = 0
        self.closed = False        # the connection is gone (no more reads or writes)
        self._close_sent = False
        self.close_code: int | None = None
        self._pending: list[Any] = []  # complete messages not handed out yet

    def fileno(self) -> int:
        return int(self.sock.fileno())

    # ---- sending -----------------------------------------------------------------
    def _send_frame(self, opcode: int, payload: bytes) -> None:
        if self.closed or self._close_sent:
            raise ConnectionClosed(self.close_code)
        frame = encode_frame(opcode, payload, mask=os.urandom(4))
        try:
            self.sock.sendall(frame)
        except OSError as e:
            self.closed = True
            raise ConnectionClosed(None, str(e)) from None

    def send_text(self, text: str) -> None:
        self._send_frame(OP_TEXT, text.encode("utf-8", "surrogateescape"))

    def send_json(self, obj: Any) -> None:
        self.send_text(json.dumps(obj, separators=(",", ":")))

    def close(self, code: int = 1000) -> None:
        """Send a close frame (once) and close the socket."""
        if not self.closed and not self._close_sent:
            try:
                self.sock.sendall(encode_frame(OP_CLOSE, code.to_bytes(2, "big"),
                                               mask=os.urandom(4)))
            except OSError:
                pass
            self._close_sent = True
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    # ---- receiving ---------------------------------------------------------------
    def has_buffered(self) -> bool:
        """A complete frame is already buffered: process it before waiting on fileno()."""
        return bool(self._pending) or self._frame_length() is not None

    def _frame_length(self) -> int | None:
        """The total length of the first buffered frame when it is complete, else None."""
        buf = self._buf
        if len(buf) < 2:
            return None
        n = buf[1] & 0x7F
        pos = 2
        if n == 126:
            if len(buf) < 4:
                return None
            n = int.from_bytes(buf[2:4], "big")
            pos = 4
        elif n == 127:
            if len(buf) < 10:
                return None
            n = int.from_bytes(buf[2:10], "big")
            pos = 10
        if n > _MAX_MESSAGE:
            raise WebSocketError("frame too large")
        if buf[1] & 0x80:
            pos += 4
        total = pos + n
        return total if len(buf) >= total else None

    def _next_frame(self) -> tuple[bool, int, bytes] | None:
        total = self._frame_length()
        if total is None:
            return None
        buf = self._buf
        fin = bool(buf[0] & 0x80)
        opcode = buf[0] & 0x0F
        masked = bool(buf[1] & 0x80)
        n = buf[1] & 0x7F
        pos = 2 if n < 126 else (4 if n == 126 else 10)
        if masked:
            mask = bytes(buf[pos:pos + 4])
            payload = mask_payload(mask, bytes(buf[pos + 4:total]))
        else:
            payload = bytes(buf[pos:total])
        del buf[:total]
        return fin, opcode, payload

    def _read_some(self) -> bool:
        """One recv() into the buffer; False when the peer closed the socket."""
        try:
            chunk = self.sock.recv(1 << 16)
        except BlockingIOError:
            return True
        except InterruptedError:
            return True
        except OSError:
            chunk = b""
        if not chunk:
            self.closed = True
            return False
        self._buf += chunk
        return True

    def _messages_from_buffer(self) -> list[Any]:
        out: list[Any] = []
        while True:
            frame = self._next_frame()
            if frame is None:
                return out
            fin, opcode, payload = frame
            if opcode == OP_PING:
                if not self._close_sent:
                    self._send_frame(OP_PONG, payload)
                continue
            if opcode == OP_PONG:
                continue
            if opcode == OP_CLOSE:
                code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
                reason = payload[2:].decode("utf-8", "replace")
                self.close_code = code
                if not self._close_sent:
                    try:
                        self.sock.sendall(encode_frame(OP_CLOSE, payload[:2],
                                                       mask=os.urandom(4)))
                    except OSError:
                        pass
                    self._close_sent = True
                self.closed = True
                try:
                    self.sock.close()
                except OSError:
                    pass
                if out:  # hand over what arrived before the close; report it next time
                    return out
                raise ConnectionClosed(code, reason)
            if opcode in (OP_TEXT, OP_BINARY):
                if self._fragments:
                    raise WebSocketError("new message inside a fragmented one")
                if fin:
                    out.append(self._decode(opcode, payload))
                else:
                    self._frag_opcode = opcode
                    self._fragments.append(payload)
            elif opcode == OP_CONT:
                if not self._fragments:
                    raise WebSocketError("continuation frame without a message")
                self._fragments.append(payload)
                if fin:
                    data = b"".join(self._fragments)
                    self._fragments = []
                    out.append(self._decode(self._frag_opcode, data))
            else:
                raise WebSocketError(f"unknown opcode {opcode}")

    @staticmethod
    def _decode(opcode: int, payload: bytes) -> Any:
        try:
            return json.loads(payload)
        except ValueError:
            raise WebSocketError("malformed JSON message") from None

    def push_back(self, messages: list[Any]) -> None:
        """Hand `messages` out again first: a reader that stopped midway keeps the rest."""
        self._pending[:0] = messages

    def read_messages(self) -> list[Any]:
        """Read what the socket has now (one recv) and return the complete messages.

        Raises ConnectionClosed when the connection ended and nothing is left to return.
        """
        if self._pending:
            out, self._pending = self._pending, []
            return out
        if self.closed:
            raise ConnectionClosed(self.close_code)
        if not self.has_buffered() and not self._read_some():
            msgs = self._messages_from_buffer()
            if msgs:
                return msgs
            raise ConnectionClosed(self.close_code)
        return self._messages_from_buffer()

    def recv_json(self, timeout: float | None = None) -> Any:
        """The next message; None when `timeout` seconds pass without one."""
        import time
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._pending:
            if self.has_buffered() or self.closed:
                self._pending = self.read_messages()
                continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if _wait_readable(self.fileno(), left):
                self._pending = self.read_messages()
        return self._pending.pop(0)


def _wait_readable(fd: int, timeout: float | None) -> bool:
    import select
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    ms = -1 if timeout is None else max(0, int(timeout * 1000))
    return bool(poller.poll(ms))


def connect(path: str, resource: str, *, timeout: float = 30.0) -> WebSocket:
    """Open `resource` on the Unix socket `path` and upgrade it to a WebSocket.

    Raises FileNotFoundError/ConnectionRefusedError when nothing listens there, and
    WebSocketError when the server refuses the upgrade.
    """
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        key = binascii.b2a_base64(os.urandom(16), newline=False)
        request = (f"GET {resource} HTTP/1.1\r\nHost: corral\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key.decode()}\r\n"
                   f"Sec-WebSocket-Version: 13\r\n\r\n")
        sock.sendall(request.encode())
        raw = b""
        while b"\r\n\r\n" not in raw:
            chunk = sock.recv(4096)
            if not chunk:
                raise WebSocketError("the server closed the connection during the handshake")
            raw += chunk
            if len(raw) > 65536:
                raise WebSocketError("handshake answer too long")
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if status != 101:
            raise WebSocketError(_refusal_text(status, parts, rest))
        if headers.get("upgrade", "").lower() != "websocket":
            raise WebSocketError("the server did not upgrade to a WebSocket")
        if headers.get("sec-websocket-accept", "").encode() != accept_key(key):
            raise WebSocketError("bad Sec-WebSocket-Accept in the handshake")
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return WebSocket(sock, rest)


def _refusal_text(status: int, parts: list[str], body: bytes) -> str:
    """The error the server gave when it refused the upgrade (its JSON `error` if any)."""
    try:
        data = json.loads(body) if body.strip() else None
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("error"):
        return str(data["error"])
    reason = parts[2] if len(parts) > 2 else ""
    return f"HTTP {status} {reason}".strip()
