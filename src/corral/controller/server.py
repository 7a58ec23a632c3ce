"""The controller's HTTP API (see docs/API.md) and the agents' WebSocket endpoint."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import operator
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import WSMsgType, web

from corral import jsonio
from corral.auth import KIND_LOGIN, KIND_NODE, AuthError, bearer
from corral.controller import answers, privacy
from corral.controller import auth as door
from corral.controller.api_common import json_response, peer_identity, query_epoch
from corral.controller.auth import admit_agent
from corral.controller.health import on_registered as health_on_registered
from corral.controller.identity import Identity
from corral.controller.metrics import add_routes as add_metric_routes
from corral.controller.state import Controller, SlurmError, _invalid_job
from corral.controller.steps import StepManager
from corral.controller.usage import UsageBook
from corral.model import hostlists
from corral.model import messages as m
from corral.model.job import Job, parse_state

log = logging.getLogger("corral.controller")

_DERIVED = {"display_id", "alloc_cpus", "alloc_mem", "alloc_gpus"}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MB = 1024 * 1024
# Request bodies, per route. A submission carries a script (the controller refuses more than
# Slurm's 4 MB itself) JSON-escaped — up to 6 bytes per byte for control characters — plus
# its environment; nothing else comes near 1 MB.
SUBMIT_BODY_LIMIT = 32 * MB
JOIN_BODY_LIMIT = 64 * 1024
BODY_LIMIT = 1 * MB
# WebSocket messages from an agent (registrations, task output, exits), and the most the
# controller packs into one frame to an agent (whose own limit is 64 MB).
AGENT_MSG_LIMIT = 8 * MB
AGENT_FRAME_TARGET = 16 * MB
AGENT_RECEIVE_LIMIT = 64 * MB - 64 * 1024
# Refusals logged per agent link before the log is thinned out (a flooding node).
LOGGED_REFUSALS = 20

def _json_bytes(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json", charset="utf-8")


def job_view(job: Job, fields: list[str] | None) -> dict[str, Any]:
    if fields is None:
        return job.to_dict()
    out: dict[str, Any] = {}
    for f in fields:
        if f == "display_id":
            out[f] = job.display_id()
        elif f in _DERIVED:
            out[f] = getattr(job, f)
        elif f == "state":
            out[f] = job.state.value
        elif f == "alloc":
            out[f] = [a.to_dict() for a in job.alloc]
        elif f == "steps":
            out[f] = [s.to_dict() for s in job.steps]
        elif hasattr(job, f):
            out[f] = getattr(job, f)
    return out


def _field_getter(f: str) -> Callable[[Job], Any]:
    if f == "display_id":
        return Job.display_id
    if f == "state":
        return lambda j: j.state.value
    if f == "alloc":
        return lambda j: [a.to_dict() for a in j.alloc]
    if f == "steps":
        return lambda j: [s.to_dict() for s in j.steps]
    if f in _DERIVED or f in Job.__dataclass_fields__:
        return operator.attrgetter(f)
    return lambda j: None


def _split(q: str | None) -> list[str] | None:
    if q is None or q == "":
        return None
    return [x for x in q.split(",") if x]


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except SlurmError as e:
        body: dict[str, Any] = {"error": e.message, "errno": e.errno}
        if e.user_msg:
            body["user_msg"] = e.user_msg
        body.update(getattr(e, "extra", None) or {})
        return json_response(body, e.status)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return json_response({"error": "Malformed request: body is not JSON", "errno": 0}, 400)
    except web.HTTPRequestEntityTooLarge:
        return json_response({"error": f"Request too large: more than {body_limit(request)} "
                                       f"bytes for {request.method} {request.path}", "errno": 0}, 413)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        # aiohttp's own refusals (unknown route, wrong method) in the API's JSON form
        return json_response({"error": e.reason, "errno": 0}, e.status)
    except Exception as e:  # never a traceback to the client; the log has it
        log.exception("internal error on %s %s", request.method, request.path)
        return json_response({"error": f"internal error: {e}", "errno": 0}, 500)


def body_limit(request: web.Request) -> int:
    if request.method == "POST" and request.path == "/v1/jobs":
        return SUBMIT_BODY_LIMIT
    if request.path == door.JOIN_PATH:
        return JOIN_BODY_LIMIT
    return BODY_LIMIT


@web.middleware
async def limits_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bound the body before anything reads it: refused by its declared length at once,
    and a body sent without one stops being read at the route's limit (413)."""
    guard = request.app.get(door.GUARD)
    refusal = guard.refusal(request.protocol) if guard is not None else None
    if refusal:
        raise SlurmError(refusal, 0, 503)
    limit = body_limit(request)
    length = request.content_length
    if length is not None and length > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=length)
    return await handler(request.clone(client_max_size=limit))


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


class BadMessage(Exception):
    """An agent message refused (logged; the link goes on)."""


def _need(cond: bool, why: str) -> None:
    if not cond:
        raise BadMessage(why)


_HW_STR = ("arch", "os", "hostname", "addr")
_HW_NUM = ("boot_time", "start_time")


def check_hw(hw: Any) -> dict[str, Any]:
    """A registration's hardware description: known fields of the right type only."""
    _need(isinstance(hw, dict), "hw must be an object")
    out: dict[str, Any] = {}
    for k in _HW_STR:
        if isinstance(hw.get(k), str):
            out[k] = hw[k][:256]
    for k in _HW_NUM:
        if _num(hw.get(k)):
            out[k] = float(hw[k])
    return out


async def json_body(request: web.Request) -> dict[str, Any]:
    """A request's JSON object body ({} when empty); anything else is refused."""
    raw = await request.read()
    if not raw:
        return {}
    data = jsonio.loads(raw)
    if not isinstance(data, dict):
        raise SlurmError("Malformed request: expected a JSON object", 0)
    return data


class Api:
    def __init__(self, ctl: Controller, on_shutdown: Callable[[], None]) -> None:
        self.ctl = ctl
        self.on_shutdown = on_shutdown
        self.steps = StepManager(ctl)
        self.usage_book = UsageBook(ctl)  # the agents' resource samples (sstat, metrics)
        # open agent links per machine key, to cut them when the key is revoked
        self.agent_links: dict[str, set[web.WebSocketResponse]] = {}
        self.rows_cache = answers.RowsCache()

    def app(self) -> web.Application:
        app = web.Application(middlewares=[errors_middleware, limits_middleware,
                                           answers.change_counter(self.ctl, self.rows_cache)],
                              client_max_size=SUBMIT_BODY_LIMIT)
        r = app.router
        r.add_get("/v1/ping", self.ping)
        r.add_get("/v1/whoami", self.whoami)
        r.add_get("/v1/jobs", self.list_jobs)
        r.add_post("/v1/jobs", self.submit)
        r.add_post("/v1/jobs/{id}/signal", self.signal)
        r.add_post("/v1/jobs/{id}/{action}", self.action)
        r.add_patch("/v1/jobs/{id}", self.update_job)
        r.add_get("/v1/nodes", self.list_nodes)
        r.add_patch("/v1/nodes/{names}", self.update_nodes)
        r.add_get("/v1/partitions", self.list_partitions)
        r.add_get("/v1/config", self.get_config)
        r.add_post("/v1/reconfigure", self.reconfigure)
        r.add_get("/v1/accounting", self.accounting)
        r.add_get("/v1/diag", self.diag)
        from corral.controller.reservations import add_routes as add_reservation_routes
        add_reservation_routes(r, self.ctl)  # scontrol create|update|delete|show reservation
        r.add_post("/v1/shutdown", self.shutdown)
        r.add_get("/v1/agent/ws", self.agent_ws)
        r.add_get("/v1/steps/ws", self.steps_ws)
        r.add_post(door.JOIN_PATH, self.join)
        r.add_get("/v1/tokens", self.list_tokens)
        r.add_post("/v1/tokens", self.create_token)
        r.add_delete("/v1/tokens/{id}", self.revoke_token)
        r.add_get("/v1/machines", self.list_machines)
        r.add_delete("/v1/machines/{name}", self.revoke_machine)
        from corral.controller.api_accounts import add_routes as add_account_routes
        add_account_routes(r, self.ctl)  # sacctmgr
        from corral.controller.crontab import add_routes as add_crontab_routes
        add_crontab_routes(r, self.ctl)  # scrontab
        add_metric_routes(app, self)  # /metrics/*, sstat's and sdiag's routes
        from corral.controller.webui import add_routes as add_web_routes
        add_web_routes(app, self)  # /v1/events, /v1/why, /v1/web/login and the dashboard
        from corral.controller.partitions import add_routes as add_partition_routes
        add_partition_routes(r, self.ctl)  # scontrol create|update|delete PartitionName=
        from corral.controller.api_text import add_routes as add_text_routes
        add_text_routes(r, self)  # sinfo's and scontrol show's text (cli/hot.py)
        return app

    # ---- read endpoints -------------------------------------------------
    async def ping(self, request: web.Request) -> web.Response:
        return json_response(self.ctl.ping_info())

    async def whoami(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        return json_response({"uid": who.uid, "gid": who.gid, "user": who.user, "operator": who.operator})

    async def list_jobs(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        # what a requester may see depends on who asks (PrivateData): one entry each
        cache_key = (f"{who.uid}/{who.gid}/{who.user}/{int(who.operator)}/"
                     f"{int(who.remote)}?{request.query_string}")
        q = request.query
        ctl = self.ctl
        render = q.get("render") == "squeue" and q.get("rows") == "1"  # a plain squeue's text
        fields = answers.squeue_fields() if render else _split(q.get("fields"))
        ids = _split(q.get("ids"))
        hidden_parts = None if q.get("all") else {p.name for p in ctl.partitions.values()
                                                  if p.hidden}
        marked = None
        if q.get("rows") == "1" and fields is not None and not ids \
                and answers.MARKED_FIELDS.issuperset(fields) and "jobs" not in privacy.hidden(ctl):
            # rows kept per job, each built again when its job is marked (answers.JobRows);
            # nothing private asked for, nor hidden: the same answer whoever asks
            cache_key = "?" + request.query_string
            marked = self.rows_cache.job_rows(cache_key, lambda: (answers.unshared(
                answers.row_builder(fields, _field_getter, _DERIVED | Job.__dataclass_fields__.keys()),
                fields), self._job_filter(q, q.get("finished") == "1")))
            marked.refresh(ctl.core.table, self.rows_cache.requests)
            generation: answers.Generation = (
                marked.version, self.rows_cache.requests,
                None if hidden_parts is None else frozenset(hidden_parts))
        else:
            generation = (ctl.changes, ctl.sched_passes)
        cached = self.rows_cache.get(cache_key, generation,
                                     answers.MAX_AGE_S if marked is None else math.inf) \
            or await self.rows_cache.being_printed(cache_key, generation)
        if cached is not None:  # squeue's table, unchanged since it was built (answers.py)
            return await self.rows_cache.respond(cached, time.time())
        if marked is not None:
            text = marked.squeue_text(fields, q.get("states"), hidden_parts) if render else None  # type: ignore[arg-type]
            if text is not None:
                self.rows_cache.put(cache_key, generation, text)
            elif render:  # printed from all its rows (on the answers' thread)
                text = await self.rows_cache.print_text(
                    cache_key, generation, fields, marked.answer_rows(),  # type: ignore[arg-type]
                    q.get("states"), hidden_parts, copied=True)
            if text is not None:
                return await self.rows_cache.respond(text, time.time())
            prefix = answers.rows_prefix(jsonio.dumps_bytes(fields), marked.rows_json())
            self.rows_cache.put(cache_key, generation, prefix)
            return _json_bytes(answers.with_now(prefix, time.time()))
        include_finished = q.get("finished") == "1" or bool(ids)
        if ids:
            seen: dict[int, Job] = {}
            for spec in ids:
                for j in ctl.find_jobs(spec):
                    seen[j.job_id] = j
            if not seen:
                raise _invalid_job()
            jobs = list(seen.values())
        else:
            jobs = list(ctl.jobs.values())
        keep = self._job_filter(q, include_finished)
        out = [j for j in jobs if keep(j)]
        # PrivateData=jobs hides others' jobs; their submit lines are always private
        hide = privacy.hidden(ctl)
        if "jobs" in hide or fields is None or any(
                f in privacy.PRIVATE_JOB_FIELDS or f == "steps" for f in fields):
            mine = {j.job_id for j in out if privacy.sees_job_of(ctl, who, j.uid, j.account)}
        else:  # nothing private asked for (squeue's usual fields): no check per job
            mine = {j.job_id for j in out}
        if "jobs" in hide:
            out = [j for j in out if j.job_id in mine]
            if ids and not out:
                raise _invalid_job()
        if q.get("rows") == "1" and fields is not None:
            # compact form for big listings (squeue): one list per job, in `fields` order
            build_row = answers.row_builder(fields, _field_getter,
                                            _DERIVED | Job.__dataclass_fields__.keys())
            private = [i for i, f in enumerate(fields) if f in privacy.PRIVATE_JOB_FIELDS]
            steps = fields.index("steps") if "steps" in fields else None
            rows = []
            for j in out:
                row = build_row(j)
                if j.job_id not in mine:
                    for i in private:
                        row[i] = ""
                    if steps is not None:
                        privacy.redact({"steps": row[steps]})
                rows.append(row)
            text = await self.rows_cache.print_text(
                cache_key, generation, fields, rows, q.get("states"), hidden_parts) \
                if render else None
            if text is not None:
                return await self.rows_cache.respond(text, time.time())
            prefix = answers.rows_prefix(jsonio.dumps_bytes(fields), jsonio.dumps_bytes(rows))
            self.rows_cache.put(cache_key, generation, prefix)
            return _json_bytes(answers.with_now(prefix, time.time()))
        return json_response({"jobs": [job_view(j, fields) if j.job_id in mine
                                       else privacy.redact(job_view(j, fields)) for j in out],
                              "now": time.time()})

    @staticmethod
    def _job_filter(q: Any, include_finished: bool) -> Callable[[Job], bool]:
        """Whether GET /v1/jobs with the query `q` answers a job (its states, users,
        partitions, names and nodes; finished jobs only with `include_finished` or
        states asked for)."""
        states = _split(q.get("states"))
        users = _split(q.get("users"))
        parts = _split(q.get("partitions"))
        names = _split(q.get("names"))
        nodes_q = q.get("nodes")
        state_set = None
        if states:
            if any(s.lower() == "all" for s in states):
                state_set = None
                include_finished = True
            else:
                try:
                    state_set = {parse_state(s) for s in states}
                except ValueError:
                    raise SlurmError("Invalid job state specified", 0) from None
                include_finished = True
        user_set = set(users) if users else None
        part_set = set(parts) if parts else None
        name_set = set(names) if names else None
        node_set = set(hostlists.expand(nodes_q)) if nodes_q else None

        def keep(j: Job) -> bool:
            if state_set is not None:
                if j.state not in state_set:
                    return False
            elif not include_finished and j.state.finished:
                return False
            if user_set is not None and j.user not in user_set and str(j.uid) not in user_set:
                return False
            if part_set is not None and j.partition not in part_set:
                return False
            if name_set is not None and j.name not in name_set:
                return False
            return node_set is None or bool(node_set.intersection(j.nodes))
        return keep

    async def list_nodes(self, request: web.Request) -> web.Response:
        from corral.controller.reservations import node_marks

        names_q = request.query.get("names")
        nodes = self.ctl.nodes.values()
        if names_q:
            wanted = set(hostlists.expand(names_q))
            nodes = [n for n in nodes if n.name in wanted]  # type: ignore[assignment]
        return json_response({
            "nodes": [n.to_dict() for n in nodes],
            "partitions": self._partitions(),
            "now": time.time(),
            "reserved": node_marks(self.ctl, self.ctl.clock()),  # sinfo's resv/maint
        })

    def _partitions(self) -> list[dict[str, Any]]:
        # PreemptMode= as scontrol shows it: the partition's own, else slurm.conf's
        cluster_mode = self.ctl.config.options.get("PreemptMode", "") or "OFF"
        return [{**p.to_dict(), "preempt_mode_shown": p.preempt_mode or cluster_mode}
                for p in self.ctl.partitions.values()]

    async def list_partitions(self, request: web.Request) -> web.Response:
        return json_response({"partitions": self._partitions()})

    async def get_config(self, request: web.Request) -> web.Response:
        listen = request.app.get(door.LISTEN)
        return json_response({**self.ctl.config_info(), "listen": listen})

    async def reconfigure(self, request: web.Request) -> web.Response:
        changes = self.ctl.reconfigure(peer_identity(request, self.ctl))
        await self.ctl.durable()
        return json_response({"ok": True, "changes": changes})

    async def diag(self, request: web.Request) -> web.Response:
        ctl = self.ctl
        return json_response({
            "jobs_in_memory": len(ctl.jobs), "pending": len(ctl.pending), "running": len(ctl.running),
            "sched_passes": ctl.sched_passes, "last_sched_seconds": ctl.last_sched_duration,
            "stats": ctl.stats, "started": ctl.started,
        })

    async def accounting(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        q = request.query
        fields = _split(q.get("fields"))
        ids_q = _split(q.get("ids"))
        plain: set[int] = set()  # "7": the job, or every task of array 7
        tasks: dict[int, set[int]] = {}  # "7_2": one task of array 7
        for spec in ids_q or []:
            head, sep, tail = spec.split(".")[0].partition("_")
            if not head.isdigit() or (sep and not tail.isdigit()):
                raise SlurmError("Invalid job id specified", 0)
            if sep:
                tasks.setdefault(int(head), set()).add(int(tail))
            else:
                plain.add(int(head))
        wanted_ids = sorted(plain | set(tasks)) if ids_q else None

        def selected(j: Job) -> bool:
            if not ids_q:
                return True
            if j.job_id in plain or j.array_job_id in plain:
                return True
            named = tasks.get(j.array_job_id or -1)
            if not named:
                return False
            if j.array_tasks is not None:
                return bool(named.intersection(j.array_tasks))
            return j.array_task_id in named

        uids: list[int] | None = None
        users = _split(q.get("users"))
        if users:
            import pwd

            uids = []
            for u in users:
                if u.isdigit():
                    uids.append(int(u))
                else:
                    try:
                        uids.append(pwd.getpwnam(u).pw_uid)
                    except KeyError:
                        continue
        elif q.get("all_users") != "1" and not who.operator:
            uids = [who.uid]
        elif q.get("all_users") != "1" and who.operator and not ids_q:
            uids = [who.uid]
        states = None
        if q.get("states"):
            try:
                states = [parse_state(s).value for s in q["states"].split(",")]
            except ValueError:
                raise SlurmError("Invalid job state specified", 0) from None
        try:
            start = query_epoch(q["start"]) if q.get("start") else None
            end = query_epoch(q["end"]) if q.get("end") else None
        except ValueError:
            raise SlurmError("Invalid time specification", 0) from None
        loop = asyncio.get_running_loop()
        records = await loop.run_in_executor(None, lambda: self.ctl.store.query_records(
            ids=wanted_ids, array_ids=wanted_ids, uids=uids, states=states, start=start, end=end))
        # The in-memory record is newer than the stored one while a write is in flight.
        # Stored records of finished jobs go out as stored: no decoding, no re-encoding.
        live = self.ctl.jobs
        parts: list[str] = []
        ctl = self.ctl
        hide_jobs = "jobs" in privacy.hidden(ctl)
        own_only = uids == [who.uid]  # the store answered the caller's jobs alone
        for job_id, text in records:
            job = live.get(job_id)
            if fields is None and not tasks and (job is None or job.state.finished) \
                    and (who.operator or own_only):
                parts.append(text)
                continue
            if job is None:
                job = Job.from_dict(jsonio.loads(text))
            if not selected(job):
                continue
            # PrivateData=jobs hides others' jobs; their submit lines are always private
            if privacy.sees_job_of(ctl, who, job.uid, job.account):
                parts.append(jsonio.dumps(job_view(job, fields)))
            elif not hide_jobs:
                parts.append(jsonio.dumps(privacy.redact(job_view(job, fields))))
        body = '{"jobs":[' + ",".join(parts) + '],"now":' + repr(time.time()) + "}"
        return web.Response(text=body, content_type="application/json")

    # ---- write endpoints -------------------------------------------------
    async def submit(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        body = await json_body(request)
        array, open_mode = body.get("array"), body.get("open_mode", "truncate")
        if array is not None and not isinstance(array, str):
            raise SlurmError("Invalid job array specification", 0)
        if open_mode not in ("truncate", "append"):
            raise SlurmError("Invalid open mode", 0)
        job = await self.ctl.submit(
            who, body.get("spec", {}), body.get("script", ""), body.get("env", {}),
            body.get("argv", []), array, open_mode)
        return json_response({"job_id": job.job_id})

    def _jobs_for(self, spec: str) -> list[Job]:
        jobs = self.ctl.find_jobs(spec, split=True)
        if not jobs:
            raise _invalid_job()
        return jobs

    def _cancel_targets(self, who: Identity, spec: str) -> list[Job]:
        """What a cancel acts on once the pending array tasks it names are dropped."""
        dropped = self.ctl.drop_pending_tasks(who, spec)
        jobs = self.ctl.find_jobs(spec, split=True)
        if not jobs and not dropped:
            raise _invalid_job()
        return jobs

    async def signal(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        body = await json_body(request)
        spec = request.match_info["id"]
        head, dot, step_part = spec.partition(".")
        signum = body.get("signal", 15)
        if not _int(signum) or not 0 < signum < 65:
            raise SlurmError("Invalid signal", 0)
        if dot:
            if not (head.isdigit() and step_part.isdigit()):
                raise _invalid_job()
            self.steps.signal_step(who, int(head), int(step_part),
                                   None if body.get("cancel") else int(signum))
            return json_response({"ok": True})
        cancel = bool(body.get("cancel", False))
        jobs = self._cancel_targets(who, spec) if cancel else self._jobs_for(spec)
        if jobs and all(j.state.finished for j in jobs):
            raise SlurmError("Job/step already completing or completed", 2021)
        batch_only = bool(body.get("batch_only"))
        self.ctl.signal_jobs(who, jobs, signum, batch_only=batch_only, cancel=cancel,
                             full=bool(body.get("full")))
        if not cancel and not batch_only:
            for job in jobs:
                self.steps.signal_job_steps(job.job_id, signum)
        await self.ctl.durable()
        return json_response({"ok": True})

    async def action(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        action = request.match_info["action"]
        jobs = (self._cancel_targets(who, request.match_info["id"]) if action == "cancel"
                else self._jobs_for(request.match_info["id"]))
        ctl = self.ctl
        if action in ("hold", "uhold"):
            ctl.hold(who, jobs, action)
        elif action == "release":
            ctl.release(who, jobs)
        elif action in ("requeue", "requeuehold"):
            ctl.requeue(who, jobs, hold=(action == "requeuehold"))
        elif action in ("suspend", "resume"):
            ctl.suspend(who, jobs, resume=(action == "resume"))
        elif action == "cancel":
            ctl.signal_jobs(who, jobs, 15, batch_only=False, cancel=True)
        elif action == "top":
            ctl.top(who, jobs)
        elif action == "notify":
            message = (await json_body(request)).get("message")
            if not isinstance(message, str):
                raise SlurmError("No message given", 0)
            for job in jobs:
                ctl.notify_job(who, job, message)
        else:
            raise SlurmError(f"Unknown job action {action}", 0, 404)
        await ctl.durable()
        return json_response({"ok": True})

    async def update_job(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        body = await json_body(request)
        for job in self._jobs_for(request.match_info["id"]):
            self.ctl.update_job(who, job, body)
        await self.ctl.durable()
        return json_response({"ok": True})

    async def update_nodes(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        body = await json_body(request)
        try:
            names = hostlists.expand(request.match_info["names"])
        except hostlists.HostlistError:
            raise SlurmError("Invalid node name specified", 0) from None
        state = body.get("state")
        if not isinstance(state, str):
            raise SlurmError("No node state given", 0)
        reason = body.get("reason")
        self.ctl.update_nodes(who, names, state, reason if isinstance(reason, str) else None)
        await self.ctl.durable()
        return json_response({"ok": True})

    async def shutdown(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        if not who.operator:
            raise SlurmError("Access/permission denied", 2002, 403)
        asyncio.get_running_loop().call_later(0.05, self.on_shutdown)
        return json_response({"ok": True})

    async def steps_ws(self, request: web.Request) -> web.WebSocketResponse:
        who = peer_identity(request, self.ctl)
        return await self.steps.handle(request, who)

    # ---- joining machines (docs/SECURITY.md) ----------------------------------------
    async def join(self, request: web.Request) -> web.Response:
        """A machine spends a join token for its own key (over TLS, unsigned)."""
        reg = door.registry_of(request)
        token = bearer(request.headers.get("Authorization"))
        body = await json_body(request)
        role, name = body.get("role"), body.get("name")
        if role not in (KIND_NODE, KIND_LOGIN) or not isinstance(name, str):
            raise SlurmError("Malformed join request: role must be node or login, name a string", 0)
        ctl = self.ctl

        def busy(n: str) -> str | None:
            if role == KIND_NODE and n in ctl.agent_senders:
                return f"node {n} is served by a connected agent"
            return None

        try:
            cred = reg.enroll(token or "", role, name, request.remote or "", time.time(), busy)
        except AuthError as e:
            raise door._refuse(request, str(e)) from None
        except ValueError as e:
            raise SlurmError(str(e), 0) from None
        await ctl.durable()  # the key and the spent token, before the machine holds the key
        log.info("%s %s joined from %s with token %s: key %s", role, name, request.remote,
                 reg.keys[cred.key_id]["token"], cred.key_id)
        cred.cluster = ctl.cluster_name
        return json_response({"credential": cred.dumps(), "cluster": ctl.cluster_name})

    async def create_token(self, request: web.Request) -> web.Response:
        door.require_local_admin(request, self.ctl)
        reg = door.registry_of(request)
        body = await json_body(request)
        scope = body.get("scope", KIND_NODE)
        ttl, uses, node = body.get("ttl", 3600), body.get("uses", 1), body.get("node")
        if scope not in (KIND_NODE, KIND_LOGIN):
            raise SlurmError("Invalid token scope (node or login)", 0)
        if not _num(ttl) or not 0 < ttl <= door.MAX_TOKEN_TTL:
            raise SlurmError(f"Invalid token lifetime (1 s to {door.MAX_TOKEN_TTL // 86400} days)", 0)
        if not _int(uses) or not 0 < uses <= 10_000:
            raise SlurmError("Invalid number of uses (1-10000)", 0)
        if node is not None and (not isinstance(node, str) or not door.NAME_RE.fullmatch(node)):
            raise SlurmError("Invalid node name specified", 0)
        token, rec = reg.create_token(scope, float(ttl), uses, node, time.time())
        await self.ctl.durable()
        log.info("join token %s created (%s, %d use(s), expires in %.0f s)", rec["id"], scope,
                 uses, ttl)
        return json_response({"token": token, **door.token_view(rec["id"], rec, time.time()),
                              "listen": request.app.get(door.LISTEN)})

    async def list_tokens(self, request: web.Request) -> web.Response:
        door.require_local_admin(request, self.ctl)
        reg = door.registry_of(request)
        now = time.time()
        return json_response({"tokens": [door.token_view(k, r, now) for k, r in reg.tokens.items()],
                              "now": now})

    async def revoke_token(self, request: web.Request) -> web.Response:
        door.require_local_admin(request, self.ctl)
        reg = door.registry_of(request)
        token_id = request.match_info["id"]
        if not reg.revoke_token(token_id, time.time()):
            raise SlurmError(f"No join token {token_id}", 0, 404)
        await self.ctl.durable()
        log.info("join token %s revoked", token_id)
        return json_response({"ok": True})

    async def list_machines(self, request: web.Request) -> web.Response:
        door.require_local_admin(request, self.ctl)
        reg = door.registry_of(request)
        return json_response({"machines": [door.key_view(k, r) for k, r in reg.keys.items()]})

    async def revoke_machine(self, request: web.Request) -> web.Response:
        """Revoke a node's or login host's key alone: its signatures stop passing, its
        agent link is cut, the node stops responding; other machines are untouched."""
        door.require_local_admin(request, self.ctl)
        reg = door.registry_of(request)
        name = request.match_info["name"]
        ids = reg.revoke_machine(name, time.time())
        if not ids:
            raise SlurmError(f"No machine key for {name}", 0, 404)
        await self.ctl.durable()
        for key_id in ids:
            for ws in list(self.agent_links.get(key_id, ())):
                await ws.close(code=4001, message=b"machine key revoked")
        log.warning("machine key(s) %s of %s revoked", ",".join(ids), name)
        return json_response({"ok": True, "revoked": ids})

    # ---- agents ------------------------------------------------------------
    async def agent_ws(self, request: web.Request) -> web.WebSocketResponse:
        # operator on the Unix socket; over TCP signed with a node key, for that node only
        allowed, key_id = admit_agent(request, self.ctl)
        ws = web.WebSocketResponse(heartbeat=30, max_msg_size=AGENT_MSG_LIMIT)
        await ws.prepare(request)
        link = AgentLink(self, ws, allowed, request.remote or "local")
        if key_id is not None:
            self.agent_links.setdefault(key_id, set()).add(ws)
        try:
            await link.run()
        finally:
            if key_id is not None:
                self.agent_links.get(key_id, set()).discard(ws)
        return ws

    def agent_ended(self, ev: m.JobEnded, node_names: list[str]) -> None:
        """Apply an agent's end report; the controller refuses (and logs) one for a job that
        is not running on that agent's nodes."""
        job = self.ctl.jobs.get(ev.job_id)
        if job is None:
            return
        now = time.time()
        end = ev.end_time if ev.end_time is not None else now
        # accounting stays sane whatever a node's clock (or a lying node) says
        end = min(max(end, job.start_time or end), now)
        self.ctl.agent_job_ended({**ev.to_dict(), "end_time": end}, node_names)


class AgentLink:
    """One agent's WebSocket: every message validated, a bad one refused alone."""

    def __init__(self, api: Api, ws: web.WebSocketResponse, allowed: set[str] | None,
                 peer: str) -> None:
        self.api, self.ctl, self.ws = api, api.ctl, ws
        self.allowed = allowed  # node names this agent may serve; None: any (the local agent)
        self.peer = peer
        self.nodes: list[str] = []
        self.registered = False
        self.refusals = 0
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        # one callable for the link's lifetime: the controller tells links apart by identity
        self.send: Callable[[dict[str, Any]], None] = self.queue.put_nowait

    def refuse(self, why: str, msg: Any = None) -> None:
        self.refusals += 1
        if self.refusals <= LOGGED_REFUSALS or self.refusals % 1000 == 0:
            mtype = msg.get("type") if isinstance(msg, dict) else type(msg).__name__
            log.warning("agent %s (%s): refused message %s: %s (%d refused on this link)",
                        self.peer, hostlists.compress(self.nodes) or "unregistered",
                        str(mtype)[:40], why, self.refusals)

    async def sender(self) -> None:
        while True:
            msg = await self.queue.get()
            frame: list[str] = []
            size = 0
            while True:
                text = jsonio.dumps(msg)
                if len(text) > AGENT_RECEIVE_LIMIT:
                    self._undeliverable(msg, len(text))
                elif frame and size + len(text) > AGENT_FRAME_TARGET:
                    await self._send_frame(frame)
                    frame, size = [text], len(text)
                else:
                    frame.append(text)
                    size += len(text)
                if self.queue.empty():
                    break
                msg = self.queue.get_nowait()
            if frame:
                await self._send_frame(frame)

    async def _send_frame(self, frame: list[str]) -> None:
        await self.ws.send_str('{"type":"batch","messages":[' + ",".join(frame) + "]}")

    def _undeliverable(self, msg: dict[str, Any], size: int) -> None:
        """Too big for the agent's link: sending it would break the link again and again."""
        log.error("message %s for job %s to %s is %d bytes, over the agent link's limit: "
                  "not sent", msg.get("type"), msg.get("job_id"), hostlists.compress(self.nodes),
                  size)
        if msg.get("type") == "launch" and _int(msg.get("job_id")):
            self.ctl.job_ended(msg["job_id"], "FAILED", 1, 0, time.time())

    async def run(self) -> None:
        sender_task = asyncio.get_running_loop().create_task(self.sender())
        try:
            async for raw in self.ws:
                if raw.type != WSMsgType.TEXT:
                    if raw.type == WSMsgType.ERROR:
                        break
                    continue
                try:
                    msg = jsonio.loads(raw.data)
                except ValueError:
                    self.refuse("not JSON")
                    continue
                try:
                    await self.handle(msg)
                except BadMessage as e:
                    self.refuse(str(e), msg)
                except Exception:  # a bug of ours: this message fails, the link goes on
                    log.exception("agent %s: cannot process a %s message", self.peer,
                                  str(msg.get("type"))[:40] if isinstance(msg, dict) else "?")
        finally:
            sender_task.cancel()
            self.ctl.agent_lost(self.nodes, self.send)
            log.warning("agent for %s disconnected", hostlists.compress(self.nodes) or "(none)")

    async def handle(self, raw: Any) -> None:
        ended: list[m.JobEnded] = []
        if isinstance(raw, dict) and raw.get("type") == "register" \
                and isinstance(raw.get("ended"), list):
            # a registration is refused only for itself: one bad end report in it (a job that
            # rewrote its status file) is refused alone, or the node could never come back
            for ev in raw["ended"]:
                try:
                    ended.append(m.JobEnded.from_dict(ev, "register.ended"))
                except m.MessageError as e:
                    self.refuse(str(e), raw)
            raw = {**raw, "ended": []}
        try:
            msg = m.decode(raw, m.TO_CONTROLLER_FROM_AGENT)
        except m.MessageError as e:
            raise BadMessage(str(e)) from None
        ctl = self.ctl
        if isinstance(msg, m.Register):
            await self.register(msg, ended)
            return
        _need(self.registered, f"{msg.TYPE!r} before registering")
        if self.nodes:
            ctl.agent_contact(self.nodes)
        if isinstance(msg, m.JobEnded):
            self.api.agent_ended(msg, self.nodes)
            await ctl.durable()
            self.send({"type": "ack", "job_id": msg.job_id})  # ack even a refusal: no resend
        elif isinstance(msg, (m.TaskOutput, m.TaskExit, m.PmiFence)):
            self.api.steps.agent_message(msg, self.nodes)
        elif isinstance(msg, m.LaunchFailed):
            job = ctl.jobs.get(msg.job_id)
            _need(job is not None and job.state.active and job.batch_host in self.nodes,
                  f"job {msg.job_id} is not running on this agent's nodes")
            ctl.job_ended(msg.job_id, "FAILED", 1, 0, time.time(),
                          note=msg.error or "launch failed")
        elif isinstance(msg, m.CpusBound):
            _need(msg.node in self.nodes, f"node {msg.node[:64]!r} is not this agent's")
            job = ctl.jobs.get(msg.job_id)
            _need(job is not None and job.state.active
                  and any(a.node == msg.node for a in job.alloc),
                  f"job {msg.job_id} is not running on node {msg.node[:64]!r}")
            _need(len(set(msg.cpus)) == len(msg.cpus), "cpus: repeated CPU id")
            _need(ctl.agent_bound_cpus(msg.job_id, msg.node, list(msg.cpus)),
                  f"job {msg.job_id} has no {len(msg.cpus)} CPUs on node {msg.node[:64]!r}")
        elif isinstance(msg, m.Usage):
            self.api.usage_book.agent_usage(msg.time, msg.gpus, msg.steps, self.nodes)
        elif isinstance(msg, m.Heartbeat):
            _need(msg.free_mem is None or msg.free_mem >= 0, "free_mem must not be negative")
            for name in self.nodes:
                n = ctl.nodes[name]
                n.cpu_load = msg.load
                n.free_mem = msg.free_mem
            if msg.health:
                ctl.health_verdicts.apply(msg.health, self.nodes)
        elif isinstance(msg, m.PrologResult):
            _need(msg.node in self.nodes, f"node {msg.node[:64]!r} is not this agent's")
            if not msg.ok:
                ctl.prolog.failed(msg)
        else:  # a kind the channel admits that this link has no use for
            raise BadMessage(f"unexpected message type {msg.TYPE!r}")

    async def register(self, msg: m.Register, ended: list[m.JobEnded]) -> None:
        ctl = self.ctl
        hw = check_hw(msg.hw)
        _need(not self.registered or set(msg.nodes) == set(self.nodes), "registered already")
        names = []
        for n in msg.nodes:
            if n not in ctl.nodes:
                self.refuse(f"unknown node {n[:64]!r}", msg.to_dict())
            elif self.allowed is not None and n not in self.allowed:
                self.refuse(f"this agent's key does not serve node {n[:64]!r}", msg.to_dict())
            else:
                names.append(n)
        self.nodes = names
        self.registered = True
        # finished jobs the agent reports first, then what still runs
        for ev in ended:
            self.api.agent_ended(ev, names)
        ctl.agent_registered(names, self.send, hw, msg.running)
        await ctl.durable()
        self.send({"type": "registered", "nodes": names,
                   "ack": [ev.job_id for ev in ended],
                   "heartbeat": ctl.heartbeat_interval(),
                   "config": {"cluster_name": ctl.cluster_name, "kill_wait": ctl.kill_wait,
                              "acct_gather_frequency":
                              ctl.config.options.get("JobAcctGatherFrequency", "30"),
                              # agent.metrics: where the agent serves its GPU series
                              "agent_metrics_listen":
                              ctl.config.options.get("CorralAgentMetricsListen", "")}})
        log.info("agent registered nodes %s", hostlists.compress(names))
        health_on_registered(ctl, names, self.send)
