"""cli/hot.py's scancel against a scripted controller: what it prints and returns for each
answer, as scancel itself does (tests/e2e/test_hot_commands.py runs the real one)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from corral.cli import hot

SRC = str(Path(hot.__file__).resolve().parents[2])


HOT = "import sys; from corral.cli import hot; sys.exit(hot.run('scancel', ['12']))"
FULL = "import sys; from corral.cli import scancel; sys.exit(scancel.main(['12']))"


def _scancel_against(home: Path, answer: bytes, code: str) -> tuple[int, str, str, bytes]:
    """`code` (scancel 12, hot or full) in a fresh interpreter, against a socket that
    answers `answer` then closes: (exit code, stdout, stderr, the request it got)."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(home / "corral.sock"))
    server.listen(1)
    server.settimeout(30)
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            data = b""
            while not data.endswith(hot.CANCEL_BODY):
                data += conn.recv(4096)
            got.append(data)
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCANCEL_", "SLURM_"))}
    env.update(CORRAL_HOME=str(home), PYTHONPATH=SRC)
    env.pop("TZ", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=60)
    thread.join(30)
    server.close()
    os.unlink(home / "corral.sock")
    return r.returncode, r.stdout, r.stderr, got[0] if got else b""


def _http(status: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


@pytest.mark.parametrize("answer,rc,error", [
    (_http("200 OK", b'{"ok":true}'), 0, ""),
    (_http("404 Not Found", b'{"error":"Invalid job id specified"}'), 0, ""),
    (_http("400 Bad Request", b'{"error":"Job/step already completing or completed"}'), 0, ""),
    (_http("403 Forbidden", b'{"error":"Access/permission denied"}'), 1,
     "scancel: error: Kill job error on job id 12: Access/permission denied\n"),
    (_http("500 Internal Server Error", b"[1]"), 1,
     "scancel: error: Kill job error on job id 12: HTTP 500\n"),
    (_http("500 Internal Server Error", b"not json"), 1,
     "scancel: error: internal error: ValueError: Expecting value: char 0\n"),
    (b"", 1, "scancel: error: Kill job error on job id 12: malformed answer from the controller\n"),
])
def test_hot_scancel_reports_as_scancel(tmp_path: Path, answer: bytes, rc: int,
                                         error: str) -> None:
    hot_run = _scancel_against(tmp_path, answer, HOT)
    assert hot_run[:3] == (rc, "", error)
    assert hot_run[3].startswith(b"POST /v1/jobs/12/signal HTTP/1.1\r\n")
    assert _scancel_against(tmp_path, answer, FULL) == hot_run  # scancel itself: the same
