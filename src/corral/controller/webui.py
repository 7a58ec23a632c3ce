"""The dashboard built into the controller (docs/DASHBOARD.md; rules in docs/SECURITY.md).

On the controller's socket (the caller known by SO_PEERCRED, as for every command):
    POST /v1/web/login   a single-use login token for the caller, and the dashboard's URL
    GET  /v1/why?job=ID  `corral why`: a pending job's typed reason with its numbers
    GET  /v1/events      the event stream (controller/events.py)

On `CorralWebListen=[HOST:]PORT` (plain HTTP; 127.0.0.1 on an ephemeral port when unset;
`off` for none), the dashboard itself:
    GET  /, /login, /static/…      the page, its script and its style (no data in them)
    POST /login, POST /logout      spend a login token for a session cookie; end it
    GET  /api/{me,cluster,queue,idle,users}, /api/job/ID, /api/node/NAME, /api/events

Every /api request needs the session cookie; a POST needs the page's own Origin and, once
logged in, the session's CSRF token; a request a browser marks as coming from another site
(Sec-Fetch-Site) is refused; while bound to loopback only a loopback Host header is served
(DNS rebinding).  Nothing here changes state on a GET.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from corral import jsonio
from corral.controller.events import EventHub, stream
from corral.controller.events import add_routes as add_event_routes
from corral.controller.state import Controller, Identity, SlurmError, _invalid_job
from corral.web import views
from corral.web.sessions import Logins, Session, csrf_ok

if TYPE_CHECKING:
    from corral.controller.server import Api

log = logging.getLogger("corral.controller")

STATIC = os.path.join(os.path.dirname(views.__file__), "static")
ASSETS = {"app.js": "text/javascript", "style.css": "text/css"}
QUEUE_ROWS = 1000  # the queue page's rows unless the whole queue is asked for (?all=1)
LISTEN_KEY = "CorralWebListen"
DEFAULT_LISTEN = "127.0.0.1:0"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=jsonio.dumps_bytes(obj), status=status,
                        content_type="application/json", charset="utf-8")


def parse_listen(spec: str) -> tuple[str, int] | None:
    """`[HOST:]PORT` (`off`: no dashboard); ValueError for junk."""
    spec = spec.strip()
    if spec.lower() in ("off", "no", "none"):
        return None
    host, _, port = spec.rpartition(":")
    n = int(port)
    if not 0 <= n < 65536:
        raise ValueError(f"bad port in {LISTEN_KEY}={spec}")
    return (host.strip("[]") or "127.0.0.1"), n


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Dashboard:
    def __init__(self, ctl: Controller, hub: EventHub, api: Api) -> None:
        self.ctl = ctl
        self.hub = hub
        self.api = api
        self.logins = Logins()
        self.host = "127.0.0.1"
        self.port = 0  # the bound port, once started
        self.runner: web.AppRunner | None = None

    @property
    def book(self) -> Any:
        """The agents' usage samples (GPU utilisation), where the controller keeps them."""
        return getattr(self.api, "usage_book", None)

    # ---- the URL `corral web` prints --------------------------------------------------
    def url_host(self) -> str:
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"[{host}]" if ":" in host else host

    @property
    def cookie_name(self) -> str:
        # cookies are shared by every port of a host: one name per dashboard
        return f"corral_session_{self.port}"

    # ---- the checks every request passes ----------------------------------------------
    def _host_ok(self, request: web.Request) -> bool:
        if not _loopback(self.host):
            return True
        host = request.host.rsplit(":", 1)[0].strip("[]") if request.host else ""
        return _loopback(host)

    def _origin_ok(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        return origin is not None and origin == f"http://{request.host}"

    @web.middleware
    async def guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if not self._host_ok(request):
                raise SlurmError("Refused: unexpected Host", 0, 421)
            site = request.headers.get("Sec-Fetch-Site")
            api = request.path.startswith("/api/")
            if (api or request.method != "GET") and site not in (None, "same-origin"):
                raise SlurmError("Refused: cross-site request", 0, 403)
            if request.method not in ("GET", "HEAD") and not self._origin_ok(request):
                raise SlurmError("Refused: cross-site request (Origin)", 0, 403)
            resp = await handler(request)
        except SlurmError as e:
            resp = web.json_response({"error": e.message}, status=e.status)
        except web.HTTPException as e:
            resp = web.json_response({"error": e.reason}, status=e.status)
        except Exception as e:
            log.exception("dashboard: internal error on %s %s", request.method, request.path)
            resp = web.json_response({"error": f"internal error: {type(e).__name__}"},
                                     status=500)
        if not resp.prepared:
            resp.headers.update(SECURITY_HEADERS)
        return resp

    def session(self, request: web.Request) -> tuple[Session, Identity]:
        s = self.logins.session(request.cookies.get(self.cookie_name), time.time())
        if s is None:
            raise SlurmError("Not logged in: run `corral web` for a new link", 0, 401)
        if request.method == "POST" and not csrf_ok(s, request.headers.get("X-CSRF-Token")):
            raise SlurmError("Refused: missing or wrong CSRF token", 0, 403)
        return s, self.ctl.identity(s.uid, s.gid)

    # ---- pages ---------------------------------------------------------------------------
    async def page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(os.path.join(STATIC, "index.html"),
                                headers={"Content-Type": "text/html; charset=utf-8"})

    async def asset(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in ASSETS:
            raise web.HTTPNotFound()
        return web.FileResponse(os.path.join(STATIC, name),
                                headers={"Content-Type": ASSETS[name] + "; charset=utf-8"})

    async def login(self, request: web.Request) -> web.Response:
        try:
            body = jsonio.loads(await request.read())
        except ValueError:
            raise SlurmError("Malformed request: body is not JSON", 0, 400) from None
        token = body.get("token") if isinstance(body, dict) else None
        spent = self.logins.spend(token, time.time()) if isinstance(token, str) else None
        if spent is None:
            raise SlurmError("This login link is spent or expired: run `corral web` again",
                             0, 401)
        cookie, s = spent
        who = self.ctl.identity(s.uid, s.gid)
        log.info("dashboard: %s (uid %d) logged in", who.user, who.uid)
        resp = web.json_response({"ok": True, "user": who.user})
        resp.set_cookie(self.cookie_name, cookie, httponly=True, samesite="Strict", path="/",
                        max_age=int(self.logins.session_ttl))
        return resp

    async def logout(self, request: web.Request) -> web.Response:
        self.session(request)  # a POST: checks the CSRF token
        self.logins.end(request.cookies.get(self.cookie_name, ""))
        resp = web.json_response({"ok": True})
        resp.del_cookie(self.cookie_name, path="/")
        return resp

    # ---- data ------------------------------------------------------------------------------
    async def me(self, request: web.Request) -> web.Response:
        s, who = self.session(request)
        return json_response({**views.me(self.ctl, who), "csrf": s.csrf})

    async def cluster(self, request: web.Request) -> web.Response:
        _, who = self.session(request)
        return json_response(views.cluster(self.ctl, time.time(), self.book, who))

    async def queue(self, request: web.Request) -> web.Response:
        _, who = self.session(request)
        limit = None if request.query.get("all") == "1" else QUEUE_ROWS
        return json_response(views.queue(self.ctl, who, time.time(), limit))

    async def idle(self, request: web.Request) -> web.Response:
        _, who = self.session(request)
        return json_response(views.idle_gpus(self.ctl, time.time(), self.book, who))

    async def users(self, request: web.Request) -> web.Response:
        _, who = self.session(request)
        return json_response(views.users(self.ctl, who, time.time()))

    async def job(self, request: web.Request) -> web.Response:
        _, who = self.session(request)
        job = self._job(request.match_info["id"])
        if not views.may_see_details(self.ctl, who, job):
            raise SlurmError("Access/permission denied: this job is another user's", 2002, 403)
        history = self.hub.history.get(job.job_id, [])
        d = views.job_page(self.ctl, job, list(history), time.time(), self.book, tail=False)
        # reading the output file may block (a network file system): off the loop
        d["output_tail"] = await asyncio.to_thread(views.read_tail, d["stdout"], job.uid) \
            if d["stdout"] else None
        return json_response(d)

    def _job(self, spec: str) -> Any:
        if not spec.isdigit():
            raise _invalid_job()
        job = self.ctl.jobs.get(int(spec))
        if job is None:
            raise _invalid_job()
        return job

    async def node(self, request: web.Request) -> web.Response:
        _, who = self.session(request)
        n = self.ctl.nodes.get(request.match_info["name"])
        if n is None:
            raise SlurmError("Invalid node name specified", 0, 404)
        from corral.controller.api_accounts import node_events

        ctl = self.ctl
        history = await asyncio.to_thread(node_events, ctl, None, None, [n.name]) \
            if not getattr(ctl.store, "inline", False) else node_events(ctl, None, None, [n.name])
        return json_response(views.node_page(ctl, n, history[-50:], time.time(), self.book, who))

    async def events(self, request: web.Request) -> web.StreamResponse:
        _, who = self.session(request)
        return await stream(request, self.hub, who)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard], client_max_size=64 * 1024)
        app.on_shutdown.append(self.hub.close_all)
        r = app.router
        r.add_get("/", self.page)
        r.add_get("/login", self.page)
        r.add_get("/static/{name}", self.asset)
        r.add_post("/login", self.login)
        r.add_post("/logout", self.logout)
        r.add_get("/api/me", self.me)
        r.add_get("/api/cluster", self.cluster)
        r.add_get("/api/queue", self.queue)
        r.add_get("/api/idle", self.idle)
        r.add_get("/api/users", self.users)
        r.add_get("/api/job/{id}", self.job)
        r.add_get("/api/node/{name}", self.node)
        r.add_get("/api/events", self.events)
        return app

    async def start(self, host: str, port: int) -> None:
        self.host = host
        self.runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port)
        await site.start()
        server = getattr(site, "_server", None)
        socks = getattr(server, "sockets", None) or []
        self.port = socks[0].getsockname()[1] if socks else port
        log.info("dashboard on http://%s:%d/", self.url_host(), self.port)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def add_routes(app: web.Application, api: Api) -> None:
    """The socket's routes (/v1/web/login, /v1/why, /v1/events) and the dashboard's listener."""
    from corral.controller.server import peer_identity

    ctl = api.ctl
    hub = add_event_routes(app, ctl)
    dash = Dashboard(ctl, hub, api)
    try:
        where = parse_listen(ctl.config.options.get(LISTEN_KEY, DEFAULT_LISTEN))
    except ValueError as e:
        log.error("dashboard off: %s", e)
        where = None

    async def web_login(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        if where is None or not dash.port:
            raise SlurmError(f"The dashboard is off ({LISTEN_KEY}=off in slurm.conf)", 0, 404)
        token = dash.logins.mint(who.uid, who.gid, time.time())
        url = f"http://{dash.url_host()}:{dash.port}/login#token={token}"
        return json_response({"url": url, "expires_in": dash.logins.login_ttl,
                              "user": who.user})

    async def why(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        spec = request.query.get("job", "")
        try:
            found = ctl.find_jobs(spec) if spec else []
        except ValueError:  # a malformed id
            raise _invalid_job() from None
        if views.jobs_hidden(ctl):  # PrivateData=jobs: as scontrol show job answers
            found = [j for j in found if views.may_see_details(ctl, who, j)]
        if not found:
            raise _invalid_job()
        # what squeue shows the caller: a job's state, reason and size, not its details
        return json_response(views.why(ctl, found[0], time.time()))

    app.router.add_post("/v1/web/login", web_login)
    app.router.add_get("/v1/why", why)
    if where is not None:
        host, port = where

        async def start(_app: web.Application) -> None:
            try:
                await dash.start(host, port)
            except OSError as e:
                log.error("dashboard off: cannot listen on %s:%d: %s", host, port, e)

        async def stop(_app: web.Application) -> None:
            await dash.stop()

        app.on_startup.append(start)
        app.on_cleanup.append(stop)
