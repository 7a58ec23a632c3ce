"""The CLI's door on a joined machine: $CORRAL_HOME/agent.sock.

sbatch, squeue, srun… on a machine without the controller connect here (cli/client.py
falls back to this socket). The agent learns the caller's uid and gid from SO_PEERCRED,
signs the request for that uid with this machine's key and forwards it to the controller
over TLS; WebSocket upgrades (srun, salloc: /v1/steps/ws) are relayed frame by frame.

The same limits as the controller's own socket apply here: bodies per route, WebSocket
messages, idle connections, open connections per user (docs/SECURITY.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import struct

import aiohttp
from aiohttp import WSMsgType, web

from corral.agent.remote import RemoteController
from corral.auth import ConnectionGuard

log = logging.getLogger("corral.agent")

_PEERCRED = struct.Struct("3i")
MB = 1024 * 1024
SUBMIT_BODY_LIMIT = 32 * MB  # as the controller's (controller/server.py)
BODY_LIMIT = 1 * MB
CLIENT_MSG_LIMIT = 8 * MB  # srun/salloc → controller: a step request, stdin, signals
CONTROLLER_MSG_LIMIT = 64 * MB  # controller → srun: output
IDLE_TIMEOUT = 10.0
CONNECTIONS_PER_USER = 256


def _error(message: str, status: int) -> web.Response:
    return web.Response(text=json.dumps({"error": message, "errno": 0}), status=status,
                        content_type="application/json")


def _peer(request: web.Request) -> tuple[int, int] | None:
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    _pid, uid, gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      _PEERCRED.size))
    return uid, gid


class Proxy:
    def __init__(self, remote: RemoteController, sock_path: str) -> None:
        self.remote = remote
        self.sock_path = sock_path
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._guard = ConnectionGuard(CONNECTIONS_PER_USER, CONNECTIONS_PER_USER,
                                      exempt={"uid:0", f"uid:{os.geteuid()}"})

    async def start(self) -> None:
        self._session = self.remote.session()
        app = web.Application(client_max_size=SUBMIT_BODY_LIMIT)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     keepalive_timeout=IDLE_TIMEOUT, lingering_time=1.0)
        await self._runner.setup()
        assert self._runner.server is not None
        self._guard.install(self._runner.server)
        if os.path.exists(self.sock_path):
            os.unlink(self.sock_path)
        await web.UnixSite(self._runner, self.sock_path, backlog=1024).start()
        # as the controller's own socket: every user when root (identity from SO_PEERCRED)
        os.chmod(self.sock_path, 0o666 if os.geteuid() == 0 else 0o600)
        log.info("forwarding CLI requests from %s to %s", self.sock_path, self.remote.url)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        try:
            os.unlink(self.sock_path)
        except FileNotFoundError:
            pass

    async def handle(self, request: web.Request) -> web.StreamResponse:
        peer = _peer(request)
        if peer is None:
            return _error("Unauthenticated connection", 401)
        uid, gid = peer
        refusal = self._guard.refusal(request.protocol)
        if refusal:
            return _error(refusal, 503)
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._websocket(request, uid, gid)
        assert self._session is not None
        limit = SUBMIT_BODY_LIMIT if (request.method, request.path) == ("POST", "/v1/jobs") \
            else BODY_LIMIT
        if (request.content_length or 0) > limit:
            return _error(f"Request too large: more than {limit} bytes for {request.method} "
                          f"{request.path}", 413)
        try:
            body = await request.clone(client_max_size=limit).read()
        except web.HTTPRequestEntityTooLarge:
            return _error(f"Request too large: more than {limit} bytes for {request.method} "
                          f"{request.path}", 413)
        raw_path = request.raw_path
        try:
            for attempt in range(2):
                headers = self.remote.sign(request.method, raw_path, body, uid, gid)
                headers["Content-Type"] = request.headers.get("Content-Type", "application/json")
                try:
                    async with self._session.request(request.method, self.remote.target(raw_path),
                                                     data=body, headers=headers) as resp:
                        data = await resp.read()
                        # signed by a clock behind the controller's restart: re-sign, later
                        if resp.status == 401 and attempt == 0 and self.remote.learn(data):
                            continue
                        return web.Response(status=resp.status, body=data, headers={
                            "Content-Type": resp.headers.get("Content-Type", "application/json")})
                except aiohttp.ServerDisconnectedError:
                    # a pooled connection the controller closed as we sent: nothing was
                    # processed (no answer came); once more on a fresh one, signed afresh
                    if attempt == 1:
                        raise
            return _error("the controller refused the signature", 401)
        except aiohttp.ServerFingerprintMismatch:
            log.error("the controller's certificate changed: refusing to forward")
            return _error(f"the certificate of {self.remote.url} no longer matches the "
                          f"fingerprint this machine joined with", 502)
        except (aiohttp.ClientError, OSError) as e:
            return _error(f"cannot reach the Corral controller at {self.remote.url}: {e}", 502)

    async def _websocket(self, request: web.Request, uid: int, gid: int) -> web.StreamResponse:
        assert self._session is not None
        raw_path = request.raw_path
        headers = self.remote.sign("GET", raw_path, b"", uid, gid)
        try:
            upstream = await self._session.ws_connect(self.remote.target(raw_path), headers=headers,
                                                      max_msg_size=CONTROLLER_MSG_LIMIT)
        except aiohttp.WSServerHandshakeError as e:
            return _error(f"the controller refused the connection: HTTP {e.status} {e.message}",
                          e.status if e.status >= 400 else 502)
        except (aiohttp.ClientError, OSError) as e:
            return _error(f"cannot reach the Corral controller at {self.remote.url}: {e}", 502)
        down = web.WebSocketResponse(max_msg_size=CLIENT_MSG_LIMIT)
        try:
            await down.prepare(request)
            to_controller = asyncio.ensure_future(_relay(down, upstream))
            to_client = asyncio.ensure_future(_relay(upstream, down))
            try:
                await asyncio.wait([to_controller, to_client], return_when=asyncio.FIRST_COMPLETED)
            finally:
                to_controller.cancel()
                to_client.cancel()
        finally:
            # whichever side ended, the other learns it with the same close code
            if not upstream.closed:
                await upstream.close(code=down.close_code or 1000)
            if not down.closed:
                await down.close(code=upstream.close_code or 1000)
        return down


async def _relay(src: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
                 dst: web.WebSocketResponse | aiohttp.ClientWebSocketResponse) -> None:
    async for msg in src:
        if msg.type == WSMsgType.TEXT:
            await dst.send_str(msg.data)
        elif msg.type == WSMsgType.BINARY:
            await dst.send_bytes(msg.data)
        elif msg.type == WSMsgType.ERROR:
            break

