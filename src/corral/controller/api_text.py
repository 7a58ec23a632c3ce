"""The hot commands' common forms printed by the controller (issue #19).

`GET /v1/text/sinfo` answers what a plain `sinfo` prints, `GET /v1/text/scontrol?show=
job|node&id=ID` what `scontrol show job|node ID` prints, `GET /v1/text/sacct?id=JOBID`
what `sacct -j JOBID` prints, as text/plain: the command's own code (sinfo.sinfo_text,
scontrol.show_text, sacct.job_text) run here on the same answers the command
would ask for (the routes' own handlers, called for this request's caller, so what a
user may see is the same).  The command (cli/hot.py) then only writes the text, without
importing its modules or decoding JSON.

Anything else — an error the command prints (an unknown job, a missing node), an
environment here that would print otherwise than the command's (TZ, SLURM_TIME_FORMAT,
SLURM_CLUSTERS) — answers 409, and the command does the work itself, as before.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from aiohttp import web

from corral import jsonio

if TYPE_CHECKING:
    from corral.controller.server import Api

# What the printing reads from this process's environment: with any of them set here,
# the text could differ from what the command prints in its own.
_ENV = ("TZ", "SLURM_TIME_FORMAT", "SLURM_CLUSTERS")
DECLINED = 409


def _declined(reason: str) -> web.Response:
    return web.Response(status=DECLINED, text=reason, content_type="text/plain")


def _text(text: str) -> web.Response:
    return web.Response(body=text.encode(), content_type="text/plain", charset="utf-8")


def add_routes(router: web.UrlDispatcher, api: Api) -> None:
    async def answer_of(request: web.Request, path: str, handler: Any) -> dict[str, Any]:
        """What `handler` answers this request's caller for GET `path` (decoded)."""
        response = await handler(request.clone(rel_url=path))
        if response.status != 200:
            raise LookupError(path)
        return jsonio.loads(response.body)  # type: ignore[no-any-return]

    async def sinfo(request: web.Request) -> web.Response:
        if any(k in os.environ for k in _ENV):
            return _declined("environment")
        from corral.cli import sinfo as command

        options = command.parse_args([])
        if isinstance(options, int):
            return _declined("options")
        nodes = await answer_of(request, "/v1/nodes", api.list_nodes)
        return _text(command.sinfo_text(options, nodes))

    async def scontrol(request: web.Request) -> web.Response:
        if any(k in os.environ for k in _ENV):
            return _declined("environment")
        show, ident = request.query.get("show"), request.query.get("id")
        if show not in ("job", "node") or not ident:
            return _declined("query")
        from corral.cli import scontrol as command
        from corral.cli.client import quote

        try:
            config = await answer_of(request, "/v1/config", api.get_config)
            if show == "job":
                records = await answer_of(
                    request, f"/v1/jobs?ids={quote(ident, safe=',')}&finished=1", api.list_jobs)
            else:
                records = await answer_of(request, "/v1/nodes", api.list_nodes)
        except Exception:  # an unknown job, a refusal: the command's own path prints it
            return _declined("lookup")
        rc, text, error = command.show_text(f"{show}s", ident, False, False, config, records)
        if rc != 0 or error:
            return _declined("error")
        return _text(text)

    async def sacct(request: web.Request) -> web.Response:
        if any(k in os.environ for k in _ENV):
            return _declined("environment")
        job_id = request.query.get("id", "")
        if not (job_id.isdigit() and job_id.isascii()):
            return _declined("query")
        from corral.cli import sacct as command

        try:
            records = await answer_of(request, f"/v1/accounting?ids={job_id}&all_users=1",
                                      api.accounting)
        except Exception:  # an unknown job, a refusal: the command's own path prints it
            return _declined("lookup")
        return _text(command.job_text(job_id, records))

    router.add_get("/v1/text/sacct", sacct)
    router.add_get("/v1/text/sinfo", sinfo)
    router.add_get("/v1/text/scontrol", scontrol)
