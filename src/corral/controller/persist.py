"""Persistence: the group-commit writer between the controller's memory and its store.

Changes are marked dirty in memory; one writer task commits everything dirty in one store
transaction (one fsync per batch, however many requests it holds), and a request answers
only once its change is committed (`await durable()`).  Messages that must not go out
before a decision is durable (`after_commit`) are sent once it is."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from corral.controller.errors import SlurmError
from corral.model.job import Job
from corral.store.base import JobPayload, NodeRecord, Store, WriteBatch

log = logging.getLogger("corral.controller")

Send = Callable[[dict[str, Any]], None]


class GroupCommitWriter:
    def __init__(self, store: Store, node_record: Callable[[str], NodeRecord],
                 next_id: Callable[[], int]) -> None:
        self.store = store
        self._node_record = node_record
        self._next_id = next_id
        self.dirty_jobs: dict[int, Job] = {}
        self.dirty_nodes: set[str] = set()
        self.payloads: list[tuple[int, JobPayload]] = []
        self.after: list[tuple[Send, dict[str, Any]]] = []
        self.next_id_dirty = False
        self._flush_waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        # a store that commits in memory needs no thread (the harness's MemoryStore)
        self._inline = bool(getattr(store, "inline", False))
        self._executor = None if self._inline else \
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")

    # ---- marking ---------------------------------------------------------
    def job(self, job: Job) -> None:
        self.dirty_jobs[job.job_id] = job
        self.kick()

    def node(self, name: str) -> None:
        self.dirty_nodes.add(name)
        self.kick()

    def payload(self, job_id: int, payload: JobPayload) -> None:
        self.payloads.append((job_id, payload))

    def next_job_id(self) -> None:
        self.next_id_dirty = True

    def after_commit(self, send: Send, msg: dict[str, Any]) -> None:
        self.after.append((send, msg))
        self.kick()

    def _pending(self) -> bool:
        return bool(self.dirty_jobs or self.dirty_nodes or self.payloads or self.next_id_dirty)

    def kick(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def durable(self) -> None:
        """Return once every change made so far is committed to the store."""
        if not self._pending() and (self._task is None or self._task.done()):
            return
        if self._flush_waiter is None:
            self._flush_waiter = asyncio.get_running_loop().create_future()
        fut = self._flush_waiter
        self.kick()
        await asyncio.shield(fut)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending() or self._flush_waiter is not None or self.after:
            batch = WriteBatch(
                jobs=[j.to_dict() for j in self.dirty_jobs.values()],
                payloads=self.payloads,
                nodes=[self._node_record(n) for n in self.dirty_nodes],
                next_job_id=self._next_id() if self.next_id_dirty else None,
            )
            self.dirty_jobs = {}
            self.dirty_nodes = set()
            self.payloads = []
            self.next_id_dirty = False
            waiter, self._flush_waiter = self._flush_waiter, None
            after, self.after = self.after, []
            try:
                if batch:
                    prepared = self.store.prepare(batch)
                    if self._executor is None:
                        self.store.commit(prepared)
                    else:
                        await loop.run_in_executor(self._executor, self.store.commit, prepared)
            except Exception as e:  # the store failed: nobody may be told "done"
                log.exception("store write failed")
                if waiter is not None and not waiter.done():
                    waiter.set_exception(SlurmError(f"state store write failed: {e}", 0, 500))
                for send, msg in after:  # the cluster must still act on what memory holds
                    send(msg)
                continue
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            if after:
                # let the answers that waited on this commit go out first
                await asyncio.sleep(0)
                for send, msg in after:
                    send(msg)
