"""The controller's HTTP API (see docs/API.md) and the agents' WebSocket endpoint."""

from __future__ import annotations

import asyncio
import json
import logging
import operator
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import WSMsgType, web

from corral.controller.auth import admit_agent, request_uid_gid
from corral.controller.state import Controller, Identity, SlurmError, _invalid_job
from corral.controller.steps import StepManager
from corral.model import hostlists
from corral.model.job import Job, parse_state

log = logging.getLogger("corral.controller")

_DERIVED = {"display_id", "alloc_cpus", "alloc_mem", "alloc_gpus"}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=_dumps(obj), status=status, content_type="application/json")


def peer_identity(request: web.Request, ctl: Controller) -> Identity:
    """The caller: SO_PEERCRED on the Unix socket, or the uid an agent signed for over TCP."""
    uid, gid = request_uid_gid(request)
    if ctl.own_uid != 0 and uid != ctl.own_uid:
        # a controller run by an ordinary user runs every job as that user: refuse others
        raise SlurmError("Access/permission denied: this cluster is private to its owner", 0, 403)
    return ctl.identity(uid, gid)


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
        return json_response(body, e.status)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return json_response({"error": "Malformed request: body is not JSON", "errno": 0}, 400)
    except web.HTTPException:
        raise
    except Exception as e:  # never a traceback to the client; the log has it
        log.exception("internal error on %s %s", request.method, request.path)
        return json_response({"error": f"internal error: {e}", "errno": 0}, 500)


class Api:
    def __init__(self, ctl: Controller, on_shutdown: Callable[[], None]) -> None:
        self.ctl = ctl
        self.on_shutdown = on_shutdown
        self.steps = StepManager(ctl)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[errors_middleware], client_max_size=64 * 1024 * 1024)
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
        r.add_get("/v1/accounting", self.accounting)
        r.add_get("/v1/diag", self.diag)
        r.add_post("/v1/shutdown", self.shutdown)
        r.add_get("/v1/agent/ws", self.agent_ws)
        r.add_get("/v1/steps/ws", self.steps_ws)
        return app

    async def _body(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        if not raw:
            return {}
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise SlurmError("Malformed request: expected a JSON object", 0)
        return data

    # ---- read endpoints -------------------------------------------------
    async def ping(self, request: web.Request) -> web.Response:
        return json_response({"ok": True, "cluster": self.ctl.cluster_name, "now": time.time()})

    async def whoami(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        return json_response({"uid": who.uid, "gid": who.gid, "user": who.user, "operator": who.operator})

    async def list_jobs(self, request: web.Request) -> web.Response:
        peer_identity(request, self.ctl)
        q = request.query
        fields = _split(q.get("fields"))
        ids = _split(q.get("ids"))
        users = _split(q.get("users"))
        states = _split(q.get("states"))
        parts = _split(q.get("partitions"))
        names = _split(q.get("names"))
        nodes_q = q.get("nodes")
        include_finished = q.get("finished") == "1" or bool(ids)
        ctl = self.ctl
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
        out = []
        for j in jobs:
            if state_set is not None:
                if j.state not in state_set:
                    continue
            elif not include_finished and j.state.finished:
                continue
            if user_set is not None and j.user not in user_set and str(j.uid) not in user_set:
                continue
            if part_set is not None and j.partition not in part_set:
                continue
            if name_set is not None and j.name not in name_set:
                continue
            if node_set is not None and not node_set.intersection(j.nodes):
                continue
            out.append(j)
        if q.get("rows") == "1" and fields is not None:
            # compact form for big listings (squeue): one list per job, in `fields` order
            getters = [_field_getter(f) for f in fields]
            rows = [[g(j) for g in getters] for j in out]
            return json_response({"fields": fields, "rows": rows, "now": time.time()})
        return json_response({"jobs": [job_view(j, fields) for j in out], "now": time.time()})

    async def list_nodes(self, request: web.Request) -> web.Response:
        names_q = request.query.get("names")
        nodes = self.ctl.nodes.values()
        if names_q:
            wanted = set(hostlists.expand(names_q))
            nodes = [n for n in nodes if n.name in wanted]  # type: ignore[assignment]
        return json_response({
            "nodes": [n.to_dict() for n in nodes],
            "partitions": [p.to_dict() for p in self.ctl.partitions.values()],
            "now": time.time(),
        })

    async def list_partitions(self, request: web.Request) -> web.Response:
        return json_response({"partitions": [p.to_dict() for p in self.ctl.partitions.values()]})

    async def get_config(self, request: web.Request) -> web.Response:
        return json_response({"cluster_name": self.ctl.cluster_name, "options": self.ctl.config.options,
                              "config_path": self.ctl.config_path, "started": self.ctl.started,
                              "home": self.ctl.home})

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
        start = float(q["start"]) if q.get("start") else None
        end = float(q["end"]) if q.get("end") else None
        loop = asyncio.get_running_loop()
        records = await loop.run_in_executor(None, lambda: self.ctl.store.query_records(
            ids=wanted_ids, array_ids=wanted_ids, uids=uids, states=states, start=start, end=end))
        # The in-memory record is newer than the stored one while a write is in flight.
        # Stored records of finished jobs go out as stored: no decoding, no re-encoding.
        live = self.ctl.jobs
        parts: list[str] = []
        for job_id, text in records:
            job = live.get(job_id)
            if fields is None and not tasks and (job is None or job.state.finished):
                parts.append(text)
                continue
            if job is None:
                job = Job.from_dict(json.loads(text))
            if selected(job):
                parts.append(_dumps(job_view(job, fields)))
        body = '{"jobs":[' + ",".join(parts) + '],"now":' + repr(time.time()) + "}"
        return web.Response(text=body, content_type="application/json")

    # ---- write endpoints -------------------------------------------------
    async def submit(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        body = await self._body(request)
        job = await self.ctl.submit(
            who, body.get("spec", {}), body.get("script", ""), body.get("env", {}),
            body.get("argv", []), body.get("array"), body.get("open_mode", "truncate"))
        return json_response({"job_id": job.job_id})

    def _jobs_for(self, spec: str) -> list[Job]:
        jobs = self.ctl.find_jobs(spec, split=True)
        if not jobs:
            raise _invalid_job()
        return jobs

    async def signal(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        body = await self._body(request)
        spec = request.match_info["id"]
        head, dot, step_part = spec.partition(".")
        if dot:
            if not (head.isdigit() and step_part.isdigit()):
                raise _invalid_job()
            signum = body.get("signal", 15)
            self.steps.signal_step(who, int(head), int(step_part),
                                   None if body.get("cancel") else int(signum))
            return json_response({"ok": True})
        jobs = self._jobs_for(spec)
        signum = body.get("signal", 15)
        if not isinstance(signum, int) or not 0 < signum < 65:
            raise SlurmError("Invalid signal", 0)
        cancel = bool(body.get("cancel", False))
        if all(j.state.finished for j in jobs):
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
        jobs = self._jobs_for(request.match_info["id"])
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
        else:
            raise SlurmError(f"Unknown job action {action}", 0, 404)
        await ctl.durable()
        return json_response({"ok": True})

    async def update_job(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        body = await self._body(request)
        for job in self._jobs_for(request.match_info["id"]):
            self.ctl.update_job(who, job, body)
        await self.ctl.durable()
        return json_response({"ok": True})

    async def update_nodes(self, request: web.Request) -> web.Response:
        who = peer_identity(request, self.ctl)
        body = await self._body(request)
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

    # ---- agents ------------------------------------------------------------
    async def agent_ws(self, request: web.Request) -> web.WebSocketResponse:
        admit_agent(request, self.ctl)  # operator on the Unix socket, join token over TCP
        ws = web.WebSocketResponse(heartbeat=30)
        await ws.prepare(request)
        ctl = self.ctl
        node_names: list[str] = []
        send_queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def send(msg: dict[str, Any]) -> None:
            send_queue.put_nowait(msg)

        async def sender() -> None:
            while True:
                msg = await send_queue.get()
                batch = [msg]
                while not send_queue.empty():
                    batch.append(send_queue.get_nowait())
                await ws.send_str(_dumps({"type": "batch", "messages": batch}))

        sender_task = asyncio.get_running_loop().create_task(sender())
        try:
            async for raw in ws:
                if raw.type != WSMsgType.TEXT:
                    if raw.type == WSMsgType.ERROR:
                        break
                    continue
                msg = json.loads(raw.data)
                mtype = msg.get("type")
                if node_names:
                    ctl.agent_contact(node_names)
                if mtype == "register":
                    node_names = [n for n in msg.get("nodes", []) if n in ctl.nodes]
                    unknown = [n for n in msg.get("nodes", []) if n not in ctl.nodes]
                    if unknown:
                        log.warning("agent offers unknown nodes %s; ignored", unknown)
                    # finished jobs the agent reports first, then what still runs
                    for ev in msg.get("ended", []):
                        self._agent_ended(ev, node_names)
                    ctl.agent_registered(node_names, send, msg.get("hw", {}), msg.get("running", []))
                    await ctl.durable()
                    send({"type": "registered", "nodes": node_names,
                          "ack": [ev["job_id"] for ev in msg.get("ended", [])],
                          "heartbeat": ctl.heartbeat_interval(),
                          "config": {"cluster_name": ctl.cluster_name, "kill_wait": ctl.kill_wait}})
                    log.info("agent registered nodes %s", hostlists.compress(node_names))
                elif mtype == "ended":
                    self._agent_ended(msg, node_names)
                    await ctl.durable()
                    send({"type": "ack", "job_id": msg["job_id"]})
                elif mtype in ("task_output", "task_exit"):
                    self.steps.agent_message(msg)
                elif mtype == "launch_failed":
                    self._agent_ended({"job_id": msg["job_id"], "state": "FAILED", "exit_code": 1},
                                      node_names)
                elif mtype == "heartbeat":
                    for name in node_names:
                        n = ctl.nodes[name]
                        n.cpu_load = msg.get("load", 0.0)
                        n.free_mem = msg.get("free_mem")
        finally:
            sender_task.cancel()
            ctl.agent_lost(node_names, send)
            log.warning("agent for %s disconnected", hostlists.compress(node_names) or "(none)")
        return ws

    def _agent_ended(self, ev: dict[str, Any], node_names: list[str]) -> None:
        job = self.ctl.jobs.get(int(ev["job_id"]))
        if job is not None and job.batch_host not in node_names:
            # a stale copy: the job was given up on this node (NODE_FAIL, requeued elsewhere)
            log.info("ignoring the end of job %s reported by %s: it runs on %s", ev["job_id"],
                     hostlists.compress(node_names), job.batch_host)
            return
        self.ctl.job_ended(int(ev["job_id"]), str(ev.get("state", "FAILED")), int(ev.get("exit_code", 0)),
                           int(ev.get("signal", 0)), float(ev.get("end_time") or time.time()))

