"""The CLI's connection to the controller: HTTP/1.1 + JSON over the cluster's Unix socket.

Deliberately built on the `_socket` C module alone: `http.client` and friends
cost tens of milliseconds of imports on every command, `socket.py` ~3 ms.
"""

from __future__ import annotations

import json
import os
import sys

from corral import paths

# `typing` is for the type checker only (tests/unit/test_cli_imports.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

# RFC 3986 unreserved characters: what urllib.parse.quote never escapes.
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


def quote(text: str, safe: str = "/") -> str:
    """Percent-encode `text` (UTF-8) like urllib.parse.quote, without its ~3 ms import."""
    keep = _UNRESERVED.union(safe.encode())
    return "".join(chr(b) if b in keep else f"%{b:02X}" for b in text.encode())


class ApiError(Exception):
    """The controller answered with an error: `message` is Slurm's wording."""

    def __init__(self, status: int, message: str, payload: dict[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.payload = payload or {}


class NotRunning(Exception):
    pass


def _not_running_message() -> str:
    home = paths.corral_home()
    return (f"no Corral controller is running for {home} "
            f"(start one with `corral up`, or set CORRAL_HOME)")


def cli_socket_path() -> str:
    """Where this machine's CLI talks to the cluster: the controller's socket where it
    runs here, else the socket of the agent that joined this machine to a cluster
    (`corral join`), which forwards requests signed for the caller's uid."""
    own = paths.socket_path()
    if os.path.exists(own):
        return own
    agent = paths.agent_socket_path()
    return agent if os.path.exists(agent) else own


def request(method: str, path: str, body: Any = None, *, timeout: float = 60.0) -> Any:
    """Send one request; return the decoded JSON answer or raise ApiError/NotRunning."""
    # The C module under `socket`: socket.py's enums and selectors cost ~3 ms of every
    # command's start, and a plain Unix stream needs none of them.
    import _socket

    sock_path = cli_socket_path()
    payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: corral\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n")
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(sock_path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise NotRunning(_not_running_message()) from e
        s.sendall(head.encode() + payload)
        chunks = []
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        s.close()
    raw = b"".join(chunks)
    header, _, content = raw.partition(b"\r\n\r\n")
    status_line = header.split(b"\r\n", 1)[0]
    try:
        status = int(status_line.split()[1])
    except (IndexError, ValueError):
        raise ApiError(502, "malformed answer from the controller") from None
    if b"transfer-encoding: chunked" in header.lower():
        content = _dechunk(content)
    data: Any = json.loads(content) if content else None
    if status >= 400:
        msg = data.get("error", f"HTTP {status}") if isinstance(data, dict) else f"HTTP {status}"
        raise ApiError(status, msg, data if isinstance(data, dict) else None)
    return data


def _dechunk(body: bytes) -> bytes:
    out = []
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out.append(rest[:size])
        body = rest[size + 2:]
    return b"".join(out)


def get(path: str, **params: Any) -> Any:
    q = "&".join(f"{k}={quote(str(v), safe=',')}" for k, v in params.items() if v is not None)
    return request("GET", f"{path}?{q}" if q else path)


def post(path: str, body: Any = None) -> Any:
    return request("POST", path, body if body is not None else {})


def patch(path: str, body: Any) -> Any:
    return request("PATCH", path, body)


def die(prog: str, message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.exit(code)


def run_cli(prog: str, fn: Any, argv: list[str] | None = None) -> int:
    """Run a command's main, turning connection problems into one clear line."""
    try:
        rc = fn(sys.argv[1:] if argv is None else argv)
        return int(rc or 0)
    except NotRunning as e:
        sys.stderr.write(f"{prog}: error: {e}\n")
        return 1
    except ApiError as e:
        sys.stderr.write(f"{prog}: error: {e.message}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `squeue | head` closes the pipe early: not an error.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        except OSError:
            pass
        return 0
    except Exception as e:  # a bug of ours: one line for the user, never a traceback
        sys.stderr.write(f"{prog}: error: internal error: {type(e).__name__}: {e}\n")
        return 1
