"""HTTP routes of sacctmgr (controller/accounts.py behind them).

    POST /v1/accounts        {"op", "entity", "names", "where", "set", "options", "commit"}
                             → {"out": text, "changed": bool, "rows": [...]}
    GET  /v1/accounts/dump?cluster=NAME → {"text": the flat file}
    POST /v1/accounts/load   {"text", "commit"} → {"out", "changed"}

A refusal answers {"error": sacctmgr's text, "errno": 0} with 400 (403 when not allowed).
`add_routes(router, ctl)` is the one call the server makes; the `Accounts` object is kept
as `ctl.accounts` (made here from the controller's store when the controller has none),
which is what the scheduling pass and submission read.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from corral.controller.accounts import Accounts, AccountsError, Caller


def accounts_of(ctl: Any) -> Accounts:
    acc = getattr(ctl, "accounts", None)
    if isinstance(acc, Accounts):
        return acc
    acc = Accounts(ctl.store, ctl.cluster_name)
    ctl.accounts = acc
    return acc


def _active_jobs(ctl: Any) -> list[tuple[str, str]]:
    return [(j.user, j.account) for j in list(ctl.jobs.values()) if not j.state.finished]


def add_routes(router: web.UrlDispatcher, ctl: Any) -> None:
    from corral.controller.server import json_response, peer_identity

    lock = asyncio.Lock()
    acc = accounts_of(ctl)

    async def run(fn: Any) -> Any:
        # SQLite commits (an fsync) leave the event loop free; the in-memory store is inline
        if getattr(acc.store, "inline", False):
            return fn()
        return await asyncio.to_thread(fn)

    async def body(request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        data = json.loads(raw) if raw else {}
        if not isinstance(data, dict):
            raise AccountsError(" Malformed request")
        return data

    def refused(e: AccountsError) -> web.Response:
        return json_response({"error": e.text, "errno": 0}, e.status)

    async def handle(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        try:
            req = await body(request)
            caller = Caller(who.user, who.operator)
            async with lock:
                active = _active_jobs(ctl)
                acc.active_jobs = lambda: active
                out = await run(lambda: acc.execute(caller, req))
        except AccountsError as e:
            return refused(e)
        return json_response(out.to_dict())

    async def dump(request: web.Request) -> web.Response:
        peer_identity(request, ctl)
        try:
            text = acc.dump(request.query.get("cluster") or ctl.cluster_name)
        except AccountsError as e:
            return refused(e)
        return json_response({"text": text})

    async def load(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        try:
            req = await body(request)
            text = str(req.get("text", ""))
            commit = bool(req.get("commit", True))
            caller = Caller(who.user, who.operator)
            async with lock:
                out = await run(lambda: acc.load(caller, text, commit))
        except AccountsError as e:
            return refused(e)
        return json_response(out.to_dict())

    router.add_post("/v1/accounts", handle)
    router.add_get("/v1/accounts/dump", dump)
    router.add_post("/v1/accounts/load", load)
