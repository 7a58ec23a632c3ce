"""The CLI's connection to the controller: HTTP/1.1 + JSON over the cluster's Unix socket.

Deliberately built on the `_socket` C module alone: `http.client` and friends
cost tens of milliseconds of imports on every command, `socket.py` ~3 ms.  JSON goes
through `_json`, the C codec under the `json` package, driven directly: `json` itself
imports `re` (and with it `enum`, `functools`, `collections`) for its pure-Python
fallbacks, a quarter of a command's start; orjson costs more still to load.
"""

from __future__ import annotations

import _json
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


class _DecodeOptions:
    """What `_json.make_scanner` reads from a json.JSONDecoder: json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo: dict[str, str] = {}

    @staticmethod
    def parse_constant(name: str) -> float:  # NaN, Infinity, -Infinity, as json.loads
        return float(name)


_scan = _json.make_scanner(_DecodeOptions())  # type: ignore[arg-type]  # duck-typed: reads attributes


def _not_serializable(obj: Any) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def json_loads(data: bytes | str) -> Any:
    """json.loads for one document (UTF-8 bytes or str); ValueError on what is not JSON."""
    text = data.decode() if isinstance(data, bytes) else data
    start = len(text) - len(text.lstrip(" \t\n\r"))
    try:
        obj, end = _scan(text, start)
    except StopIteration as e:
        raise ValueError(f"Expecting value: char {e.value}") from None
    except SystemError:
        # the C scanner reports a malformed document through json.decoder, which this
        # light path has not imported (it then fails without an exception): the standard
        # parser says what is wrong
        import json

        return json.loads(text)
    if text[end:].strip(" \t\n\r"):
        raise ValueError(f"Extra data: char {end}")
    return obj


def json_dumps(obj: Any) -> str:
    """json.dumps(obj, separators=(",", ":")), the same text."""
    if isinstance(obj, str):
        return _json.encode_basestring_ascii(obj)  # type: ignore[no-any-return]
    # As json.dumps(obj, separators=(",", ":")) builds it: circular check, ensure_ascii,
    # allow_nan, no sorting, no indent.
    encode = _json.make_encoder({}, _not_serializable, _json.encode_basestring_ascii, None,
                                ":", ",", False, False, True)
    return "".join(encode(obj, 0))


class ApiError(Exception):
    """The controller answered with an error: `message` is Slurm's wording."""

    def __init__(self, status: int, message: str, payload: dict[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.payload = payload or {}


class NotRunning(Exception):
    """No controller answered.  `timed_out`: one was expected and did not come back
    within the retry window (Slurm's "Unable to contact slurm controller")."""

    def __init__(self, message: str, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


CONNECT_FAILURE = "Unable to contact slurm controller (connect failure)"


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


# Riding out a controller restart, as Slurm's clients do (slurm_open_controller_conn
# retries for MessageTimeout seconds, 10 by default).  Only the Slurm commands retry
# (run_cli turns it on): `corral up` must learn at once that nothing runs.  A request is
# sent again only when the connection itself failed, so nothing was received: a
# submission is never duplicated.  GETs, which change nothing, are also retried when
# the controller closed the connection without answering, and so is a request marked
# idempotent: a submission carrying the client's `submit_id`, which the controller
# answers with the job it already created when it sees that id again.
DEFAULT_MESSAGE_TIMEOUT = 10.0
_retry_prog: str | None = None  # the command that retries (and names itself in the notice)
_announced = False


def enable_retry(prog: str) -> None:
    """Let this process's requests wait for a controller that is restarting."""
    global _retry_prog
    _retry_prog = prog


def _controller_expected() -> bool:
    """A controller is meant to run here: its socket is left over (refusing), or
    `corral up` recorded one that has not been taken down with `corral down`."""
    home = paths.corral_home()
    return (os.path.exists(paths.socket_path(home))
            or os.path.exists(paths.pid_file("controller", home))
            or os.path.exists(paths.agent_socket_path(home)))


def retry_window() -> float:
    """Seconds to keep trying: $CORRAL_MESSAGE_TIMEOUT, else the cluster's MessageTimeout,
    else Slurm's default (10); 0 when this process does not retry."""
    if _retry_prog is None or not _controller_expected():
        return 0.0
    env = os.environ.get("CORRAL_MESSAGE_TIMEOUT")
    if env is not None:
        try:
            return max(0.0, float(env))
        except ValueError:
            return DEFAULT_MESSAGE_TIMEOUT
    try:
        with open(paths.config_path(), encoding="utf-8", errors="replace") as f:
            for line in f:
                key, eq, value = line.partition("=")
                if eq and key.strip().lower() == "messagetimeout":
                    return max(0.0, float(value.split("#", 1)[0].strip()))
    except (OSError, ValueError):
        pass
    return DEFAULT_MESSAGE_TIMEOUT


class _Waiter:
    """The retry loop's clock: one notice on the first failure, a bounded wait."""

    def __init__(self) -> None:
        self.deadline: float | None = None

    def again(self) -> bool:
        """After a failed attempt: sleep and return True to try again, or False."""
        global _announced
        import time

        now = time.monotonic()
        if self.deadline is None:
            window = retry_window()
            if window <= 0:
                return False
            self.deadline = now + window
            if not _announced and _retry_prog is not None:
                _announced = True
                sys.stderr.write(f"{_retry_prog}: error: Slurm controller not responding, "
                                 "sleeping and retrying.\n")
                sys.stderr.flush()
        if now >= self.deadline:
            return False
        time.sleep(min(0.25, self.deadline - now))
        return True

    @property
    def waited(self) -> bool:
        return self.deadline is not None


def call_with_retry(connect: Any) -> Any:
    """Run `connect()` (which opens a connection and may send on it), again while it
    fails to connect at all (FileNotFoundError, ConnectionRefusedError), within the
    retry window.  Raises NotRunning when no controller answers."""
    waiter = _Waiter()
    while True:
        try:
            return connect()
        except (FileNotFoundError, ConnectionRefusedError) as e:
            if not waiter.again():
                if waiter.waited:
                    raise NotRunning(CONNECT_FAILURE, timed_out=True) from e
                raise NotRunning(_not_running_message()) from e


def request(method: str, path: str, body: Any = None, *, timeout: float = 60.0,
            idempotent: bool = False) -> Any:
    """Send one request; return the decoded JSON answer (a str for a text/plain one) or
    raise ApiError/NotRunning.

    `idempotent`: sending it twice does no harm, so it is sent again when the
    connection is lost before the answer (as a GET is)."""
    payload = b"" if body is None else json_dumps(body).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: corral\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n")
    data = head.encode() + payload
    waiter = _Waiter()
    while True:
        s = call_with_retry(lambda: _open(timeout))
        try:
            raw = _exchange(s, data)
        except (ConnectionResetError, BrokenPipeError):
            raw = b""
        finally:
            s.close()
        # A controller going down may accept and then close without an answer: only a
        # GET or an idempotent request is asked again (a POST may have been acted on).
        if raw or not (method == "GET" or idempotent) or not waiter.again():
            break
    header, _, content = raw.partition(b"\r\n\r\n")
    status_line = header.split(b"\r\n", 1)[0]
    try:
        status = int(status_line.split()[1])
    except (IndexError, ValueError):
        raise ApiError(502, "malformed answer from the controller") from None
    lowered = header.lower()
    if b"transfer-encoding: chunked" in lowered:
        content = _dechunk(content)
    if status < 400 and b"content-type: text/plain" in lowered:
        return content.decode()  # an answer the controller printed (squeue's)
    answer: Any = json_loads(content) if content else None
    if status >= 400:
        msg = answer.get("error", f"HTTP {status}") if isinstance(answer, dict) \
            else f"HTTP {status}"
        raise ApiError(status, msg, answer if isinstance(answer, dict) else None)
    return answer


def _open(timeout: float) -> Any:
    # The C module under `socket`: socket.py's enums and selectors cost ~3 ms of every
    # command's start, and a plain Unix stream needs none of them.
    import _socket

    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(cli_socket_path())
    except BaseException:
        s.close()
        raise
    return s


def _exchange(s: Any, data: bytes) -> bytes:
    s.sendall(data)
    chunks = []
    while True:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


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


def post(path: str, body: Any = None, *, idempotent: bool = False) -> Any:
    return request("POST", path, body if body is not None else {}, idempotent=idempotent)


def patch(path: str, body: Any) -> Any:
    return request("PATCH", path, body)


def die(prog: str, message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.exit(code)


def run_cli(prog: str, fn: Any, argv: list[str] | None = None) -> int:
    """Run a command's main, turning connection problems into one clear line.

    Its requests ride out a controller restart (see retry_window)."""
    enable_retry(prog)
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
