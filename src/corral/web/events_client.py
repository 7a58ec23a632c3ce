"""A Python client of the controller's event stream, `GET /v1/events` (docs/API.md).

    from corral.web.events_client import events

    for ev in events(job=42):            # this job's transitions, as they happen
        print(ev["event"], ev["state"])  # submitted PENDING, started RUNNING, ended COMPLETED
        if ev["event"] == "ended":
            break

It talks to the cluster's Unix socket as every command does (the kernel names the caller,
who sees the events of their own jobs, or every job's as an operator or coordinator) and
needs nothing outside the standard library.  The first record is `{"type": "hello", ...}`:
from then on nothing is missed.  A client too slow to keep up gets a last
`{"type": "dropped"}` and the stream ends; reconnect and re-read the state (squeue) then.
A stopping controller ends every stream with `{"type": "shutdown"}`.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

from corral.cli.client import ApiError, cli_socket_path


def events(job: int | None = None, nodes: bool = True, *, hello: bool = False,
           socket_path: str | None = None, timeout: float | None = None
           ) -> Iterator[dict[str, Any]]:
    """Yield the stream's records (dicts) until it ends or the caller stops iterating.

    `job`: only that job's events; `nodes=False`: no node events; `hello`: yield the first
    `hello` record too (the moment the subscription is in place); `timeout`: seconds to
    wait for any data (the controller sends a keep-alive every 15 s), else TimeoutError."""
    params = []
    if job is not None:
        params.append(f"job={int(job)}")
    if not nodes:
        params.append("nodes=0")
    path = "/v1/events" + ("?" + "&".join(params) if params else "")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(socket_path or cli_socket_path())
        # HTTP/1.0: the answer is the bare stream, ended by closing the connection
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: corral\r\n\r\n".encode())
        f = s.makefile("rb")
        status = f.readline().split()
        headers = []
        while (line := f.readline()) not in (b"\r\n", b"\n", b""):
            headers.append(line)
        if len(status) < 2 or status[1] != b"200":
            body = f.read()
            try:
                msg = json.loads(body).get("error", body.decode())
            except ValueError:
                msg = body.decode(errors="replace")
            raise ApiError(int(status[1]) if len(status) > 1 else 502, msg)
        data: list[bytes] = []
        for line in f:
            line = line.rstrip(b"\r\n")
            if line.startswith(b"data:"):
                data.append(line[5:].lstrip())
            elif not line and data:
                rec = json.loads(b"\n".join(data))
                data = []
                if rec.get("type") != "hello" or hello:
                    yield rec
                if rec.get("type") in ("dropped", "shutdown"):
                    return
    finally:
        s.close()
