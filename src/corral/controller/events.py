"""`GET /v1/events`: job and node transitions as server-sent events (docs/API.md).

One `EventHub` subscribes to the job table's typed events and the cluster's node events and
fans them out to its clients.  Each event is turned into a plain record once, at the moment
it happens (a copy: later changes to the job do not reach a queued record), and offered to
each client whose caller may see it:

- a job's events go to its owner, operators (AdminLevel too) and its account's coordinators;
- node events go to everyone (the cluster's shape, as `sinfo` shows it).

Each client has a bounded queue.  The controller only ever puts into it without waiting: a
client whose queue is full is dropped (it gets a last `dropped` event and the stream ends),
so a slow or stalled reader never holds up the controller or other readers.  When the
controller stops, every stream gets a last `shutdown` event and ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from corral import jsonio
from corral.controller import privacy
from corral.controller.cluster import NodeEvent
from corral.controller.jobs import JobEvent
from corral.model.hostlists import compress
from corral.model.node import node_state_short

if TYPE_CHECKING:
    from corral.controller.state import Controller, Identity

log = logging.getLogger("corral.controller")

QUEUE_LIMIT = 1024  # records waiting for one client before it is dropped
KEEPALIVE = 15.0  # seconds between comment lines on a quiet stream
HISTORY_JOBS = 100_000  # jobs whose transitions are remembered (the dashboard's timeline)
HISTORY_PER_JOB = 32


def job_record(ev: JobEvent) -> dict[str, Any]:
    j = ev.job
    return {"type": "job", "event": ev.kind.value, "job_id": j.job_id, "id": j.display_id(),
            "user": j.user, "uid": j.uid, "account": j.account, "partition": j.partition,
            "old": ev.old.value if ev.old is not None else None, "state": ev.new.value,
            "nodes": compress(j.nodes), "reason": j.reason if ev.new.value == "PENDING" else "",
            "exit_code": f"{j.exit_code}:{j.term_signal}", "time": ev.time}


def node_record(ev: NodeEvent) -> dict[str, Any]:
    return {"type": "node", "event": ev.kind.value, "node": ev.node.name,
            "state": node_state_short(ev.node), "reason": ev.reason or "", "time": ev.time}


@dataclass(eq=False)
class Client:
    who: Identity
    may_see_job: Callable[[dict[str, Any]], bool]
    job: int | None = None  # only this job's events
    nodes: bool = True  # node events too
    queue: asyncio.Queue[dict[str, Any]] = field(
        default_factory=lambda: asyncio.Queue(QUEUE_LIMIT))
    dropped: bool = False


class EventHub:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.clients: set[Client] = set()
        self.seq = 0
        self.dropped = 0  # clients dropped for not keeping up
        # job id -> [(time, event, state)]: the dashboard's state timeline
        self.history: dict[int, list[tuple[float, str, str]]] = {}
        ctl.table.subscribe(self.on_job)
        ctl.cluster.subscribers.append(self.on_node)

    def client(self, who: Identity, job: int | None = None, nodes: bool = True) -> Client:
        ctl = self.ctl

        def may_see(rec: dict[str, Any]) -> bool:
            # the owner, operators (AdminLevel too), the account's coordinators
            return privacy.sees_job_of(ctl, who, rec["uid"], rec["account"])

        c = Client(who, may_see, job, nodes)
        self.clients.add(c)
        return c

    def leave(self, c: Client) -> None:
        self.clients.discard(c)

    async def close_all(self, _app: web.Application | None = None) -> None:
        """End every stream (the controller is stopping: an open stream must not hold up
        its shutdown)."""
        for c in list(self.clients):
            c.dropped = True
            while not c.queue.empty():
                c.queue.get_nowait()
            c.queue.put_nowait({"type": "shutdown", "reason": "the controller is stopping"})

    def _offer(self, c: Client, rec: dict[str, Any]) -> None:
        if c.dropped:
            return
        try:
            c.queue.put_nowait(rec)
        except asyncio.QueueFull:
            c.dropped = True
            self.dropped += 1
            log.warning("event stream of %s dropped: %d events unread", c.who.user, QUEUE_LIMIT)
            while not c.queue.empty():
                c.queue.get_nowait()
            c.queue.put_nowait({"type": "dropped", "reason": "too slow: events were lost"})

    def on_job(self, ev: JobEvent) -> None:
        hist = self.history.get(ev.job.job_id)
        if hist is None:
            if len(self.history) >= HISTORY_JOBS:
                del self.history[next(iter(self.history))]
            hist = self.history[ev.job.job_id] = []
        if len(hist) < HISTORY_PER_JOB:
            hist.append((ev.time, ev.kind.value, ev.new.value))
        if not self.clients:
            return
        rec = job_record(ev)
        self.seq += 1
        rec["seq"] = self.seq
        for c in list(self.clients):
            if (c.job is None or c.job == rec["job_id"]) and c.may_see_job(rec):
                self._offer(c, rec)

    def on_node(self, ev: NodeEvent) -> None:
        if not self.clients:
            return
        rec = node_record(ev)
        self.seq += 1
        rec["seq"] = self.seq
        for c in list(self.clients):
            if c.nodes and c.job is None:
                self._offer(c, rec)


def sse(rec: dict[str, Any]) -> bytes:
    head = f"id: {rec['seq']}\n" if "seq" in rec else ""
    return f"{head}event: {rec['type']}\ndata: ".encode() + jsonio.dumps_bytes(rec) + b"\n\n"


async def stream(request: web.Request, hub: EventHub, who: Identity) -> web.StreamResponse:
    """Serve one client: `?job=ID` for one job's events, `?nodes=0` without node events."""
    from corral.controller.state import SlurmError

    q = request.query
    job: int | None = None
    if q.get("job"):
        try:
            job = int(q["job"])
        except ValueError:
            raise SlurmError("Invalid job id specified", 2017) from None
    c = hub.client(who, job, q.get("nodes", "1") != "0")
    try:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-store",
                                           "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        await resp.write(sse({"type": "hello", "user": who.user, "operator": who.operator,
                              "job": job, "time": hub.ctl.clock()}))
        while True:
            try:
                rec = await asyncio.wait_for(c.queue.get(), KEEPALIVE)
            except TimeoutError:
                await resp.write(b": keepalive\n\n")
                continue
            await resp.write(sse(rec))
            if rec["type"] in ("dropped", "shutdown"):
                break
        await resp.write_eof()
        return resp
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    finally:
        hub.leave(c)


def add_routes(app: web.Application, ctl: Controller) -> EventHub:
    """/v1/events on the controller's socket (identity from SO_PEERCRED or a signature)."""
    from corral.controller.server import peer_identity

    hub = EventHub(ctl)

    async def events(request: web.Request) -> web.StreamResponse:
        return await stream(request, hub, peer_identity(request, ctl))

    app.router.add_get("/v1/events", events)
    app.on_shutdown.append(hub.close_all)
    return hub
