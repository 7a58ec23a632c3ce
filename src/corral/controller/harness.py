"""The controller in process, with an injected clock and no sockets.

`Harness` runs the real `Controller` (use cases, lifecycle, scheduling pipeline) over an
in-memory store, with fake agents that record what they are sent and report job ends when
told to.  Time moves only when the test (or a trace simulator) moves it, and scheduling
passes run when asked (`tick()`), as the real controller's triggers and periodic tick
would run them.  A test of eligibility, priority, dependencies, requeue, arrays or node
failure runs in milliseconds.

    h = Harness(CONF)
    a = h.submit(num_nodes=1, cpus_per_task=2)
    h.tick()
    assert h.job(a).state == JobState.RUNNING
    h.end(a, "COMPLETED")
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from corral.controller.duties import periodic_duties
from corral.controller.identity import Identity
from corral.controller.state import Controller
from corral.model.config import ClusterConfig, parse_config
from corral.model.job import Job
from corral.sched.pipeline import Decision
from corral.store.base import PreparedBatch, Store
from corral.store.memory import MemoryStore

T = TypeVar("T")

START = 1_700_000_000.0


class FakeClock:
    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FailingStore:
    """A real store (SQLite or in memory) whose commits a test can make fail (`failing`:
    each commit raises OSError, the store unchanged) or wait (`hold()` until `release()`:
    a commit in flight while the loop goes on; for a threaded store).  Everything else is
    the wrapped store's."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.failing = False
        self.failed = 0  # commits refused so far
        self._gate: threading.Event | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def hold(self) -> None:
        self._gate = threading.Event()

    def release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.set()

    def commit(self, prepared: PreparedBatch) -> None:
        gate = self._gate
        if gate is not None:
            gate.wait(30)
        if self.failing:
            self.failed += 1
            raise OSError("injected: the store cannot write")
        self.store.commit(prepared)


class HandPasses:
    """The pass driver of the harness: a pass asked for is only noted (the cadence's
    `due`); `Harness.tick()` runs it, as the controller's loop would."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def now(self) -> float:
        return self.clock()

    def arm(self, at: float, run: Callable[[], None]) -> None:
        pass

    def pass_seconds(self, measured: float) -> float:
        return 0.0


def harness_controller(config: ClusterConfig, store: Store, clock: FakeClock) -> Controller:
    """The real controller, its passes run on demand (`HandPasses`)."""
    return Controller(config, store, clock=clock, pass_driver=HandPasses(clock))


class Harness:
    def __init__(self, conf: str | ClusterConfig, *, now: float = START,
                 store: Store | FailingStore | None = None, register: bool = True) -> None:
        self.clock = FakeClock(now)
        self.store = store or MemoryStore()
        config = parse_config(conf) if isinstance(conf, str) else conf
        self.ctl = harness_controller(config, self.store, self.clock)
        self.loop = asyncio.new_event_loop()
        self.sent: list[dict[str, Any]] = []  # every message to any agent, in order
        self.silent: set[str] = set()  # nodes whose agent stopped heartbeating
        self.ctl.recover()
        if register:
            self.register(list(self.ctl.nodes))

    # ---- running things on the controller's loop ---------------------------------------
    def call(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        async def run() -> T:
            out = fn(*args, **kw)
            if asyncio.iscoroutine(out):
                out = await out
            await self.ctl.durable()
            return out  # type: ignore[no-any-return]

        return self.loop.run_until_complete(run())

    def close(self) -> None:
        self.loop.close()

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- agents -----------------------------------------------------------------------
    def register(self, names: list[str], running: list[int] | None = None) -> None:
        self.call(self.ctl.agent_registered, names, self.sent.append,
                  {"start_time": self.clock()}, running or [])

    def launched(self) -> list[int]:
        return [m["launch"]["job_id"] for m in self.sent if m.get("type") == "launch"]

    def controls(self, job_id: int) -> list[str]:
        return [m["control"]["op"] for m in self.sent
                if m.get("type") == "control" and m.get("job_id") == job_id]

    def end(self, job_id: int, state: str = "COMPLETED", exit_code: int = 0, signal: int = 0,
            node: str | None = None) -> Job | None:
        """The agent of the job's node (or of `node`) reports its batch step over."""
        job = self.ctl.jobs.get(job_id)
        where = node or (job.batch_host if job is not None else None) or ""
        ev = {"job_id": job_id, "state": state, "exit_code": exit_code, "signal": signal,
              "end_time": self.clock()}
        return self.call(self.ctl.agent_job_ended, ev, [where])

    # ---- users --------------------------------------------------------------------------
    def who(self, uid: int = 1000, operator: bool = False) -> Identity:
        return Identity(uid, uid, f"user{uid}" if uid else "root", operator or uid == 0)

    def submit(self, *, uid: int = 1000, script: str = "#!/bin/sh\ntrue\n",
               array: str | None = None, **spec: Any) -> int:
        spec.setdefault("work_dir", "/tmp")
        job = self.loop.run_until_complete(
            self.ctl.submit(self.who(uid), spec, script, {}, [], array))
        return job.job_id

    def job(self, job_id: int) -> Job:
        return self.ctl.jobs[job_id]

    # ---- time and passes ------------------------------------------------------------
    def tick(self, max_passes: int = 100) -> Decision | None:
        """Run scheduling passes until nothing asks for another (the last decision)."""
        last = None
        cadence = self.ctl.cadence
        for _ in range(max_passes):
            cadence.started(self.clock())
            dec = self.call(self.ctl.schedule_pass, self.clock())
            last = dec if dec is not None else last
            cadence.finished(self.clock(), 0.0)
            if cadence.due is None:
                break
        return last

    def advance(self, seconds: float) -> None:
        """Move time; the agents heartbeat (except silent ones) and the controller's
        periodic duties run (controller/duties.py), then a pass, as the cadence's tick does."""
        self.clock.advance(seconds)
        now = self.clock()
        self.ctl.agent_contact([n for n in self.ctl.agent_senders if n not in self.silent])
        self.call(periodic_duties, self.ctl, now)
        self.tick()
