"""Node history (controller/history.py, store schema 4): drains, downs and resumes become
store events through the writer, kept closed after the node is back; a restarted
controller continues the open ones."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from corral.controller.state import Controller
from corral.model.config import parse_config
from corral.store.base import NodeHistoryEntry, WriteBatch
from corral.store.memory import MemoryStore
from corral.store.sqlite import SCHEMA_VERSION, SqliteStore

CONF = """\
ClusterName=lab
NodeName=node-[1-2] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=node-[1-2] Default=YES
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _drain_then_resume(store: object) -> list[NodeHistoryEntry]:
    clock = Clock()

    async def go() -> None:
        ctl = Controller(parse_config(CONF), store, clock=clock)  # type: ignore[arg-type]
        for n in ctl.nodes.values():  # as if their agent had registered
            n.registered = n.responding = True
        admin = ctl.identity(0, 0)
        ctl.update_nodes(admin, ["node-1"], "drain", "fan broken")
        clock.now = 1060.0
        ctl.update_nodes(admin, ["node-1"], "down", "dead")
        clock.now = 1100.0
        ctl.update_nodes(admin, ["node-1"], "resume", None)
        await ctl.durable()

    asyncio.run(go())
    return store.query_events(cluster="lab")  # type: ignore[attr-defined, no-any-return]


def test_a_drain_stays_in_the_history_after_its_resume() -> None:
    events = _drain_then_resume(MemoryStore())
    assert [(e.node, e.start, e.end, e.state, e.reason, e.reason_user, e.source)
            for e in events] == [
        ("node-1", 1000.0, 1060.0, "DRAIN", "fan broken", "root", "admin"),
        ("node-1", 1060.0, 1100.0, "DOWN", "dead", "root", "admin")]


def test_the_sqlite_store_keeps_who_and_what_since_schema_4(tmp_path: Path) -> None:
    assert SCHEMA_VERSION >= 4
    store = SqliteStore(str(tmp_path / "state.db"))
    try:
        events = _drain_then_resume(store)
        assert [(e.start, e.end, e.state, e.reason_user) for e in events] == [
            (1000.0, 1060.0, "DRAIN", "root"), (1060.0, 1100.0, "DOWN", "root")]
        # an open event is read back by a restarted controller, which closes it later
        store.write(WriteBatch(node_events=[NodeHistoryEntry("lab", "node-2", 2000.0, "DRAIN",
                                                       "disk", 0, None, "root", "health")]))
        ctl = Controller(parse_config(CONF), store)
        assert ctl.history.open == {"node-2": 2000.0}
    finally:
        store.close()
    db = sqlite3.connect(tmp_path / "state.db")
    try:
        cols = [r[1] for r in db.execute("PRAGMA table_info(node_events)")]
        assert cols[-2:] == ["reason_user", "source"]
    finally:
        db.close()
