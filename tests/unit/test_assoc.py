"""model/tres.py, model/assoc.py and the stores' accounting tables."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from corral.model.assoc import (
    ROOT,
    Account,
    AssocDB,
    Association,
    ClusterRecord,
    Coordinator,
    Limits,
    Qos,
    User,
)
from corral.model.tres import TresError, format_tres, merge, parse_tres
from corral.store.base import UsageRecord
from corral.store.memory import MemoryStore
from corral.store.sqlite import SCHEMA_VERSION, SqliteStore


def test_tres_parse_and_print_like_slurm() -> None:
    t = parse_tres("gres/gpu=16,cpu=256,mem=1T")
    assert t == {"gres/gpu": 16, "cpu": 256, "mem": 1024 * 1024}
    assert format_tres(t) == "cpu=256,mem=1T,gres/gpu=16"
    assert format_tres(parse_tres("Mem=1000,NODE=2,billing=5")) == "mem=1000M,node=2,billing=5"
    assert format_tres(parse_tres("mem=1536G")) == "mem=1536G"
    assert parse_tres("GRES/gpu:a100=4") == {"gres/gpu:a100": 4}
    assert parse_tres("") == {}


@pytest.mark.parametrize("bad", ["gpu", "cpu=abc", "bogus=1", "cpu=1,,mem=2", "mem=-3G", "=4"])
def test_tres_bad_strings_refused(bad: str) -> None:
    with pytest.raises(TresError):
        parse_tres(bad)


def test_tres_merge_minus_one_clears() -> None:
    assert merge({"cpu": 4, "gres/gpu": 2}, parse_tres("gres/gpu=-1,mem=2G")) == \
        {"cpu": 4, "mem": 2048}


def tree() -> AssocDB:
    db = AssocDB()
    db.clusters["c"] = ClusterRecord("c")
    for name in ("physics", "theory", "chem"):
        db.accounts[name] = Account(name, name, name)
    db.assocs[1] = Association(1, "c", ROOT)
    db.assocs[2] = Association(2, "c", "physics", parent=ROOT, shares=40)
    db.assocs[3] = Association(3, "c", "theory", parent="physics")
    db.assocs[4] = Association(4, "c", "chem", parent=ROOT)
    db.assocs[5] = Association(5, "c", "theory", user="alice", limits=Limits(max_jobs=2))
    db.assocs[6] = Association(6, "c", "physics", user="bob")
    db.users["alice"] = User("alice", "theory")
    db.users["bob"] = User("bob", "physics")
    db.coords.add(Coordinator("physics", "pi"))
    db.qos["normal"] = Qos("normal", 1)
    return db


def test_chain_children_and_cycles() -> None:
    db = tree()
    alice = db.job_assoc("c", "alice", "theory")
    assert alice is not None
    assert [a.id for a in db.chain(alice)] == [5, 3, 2, 1]
    assert [(a.user, a.account) for a in db.children("c", "physics")] == \
        [("bob", "physics"), (None, "theory")]
    assert db.subaccounts("c", "physics") == {"physics", "theory"}
    assert db.would_cycle("c", "physics", "theory")
    assert not db.would_cycle("c", "theory", "chem")
    # coordinators of physics coordinate theory (a sub-account) but not chem
    assert db.is_coordinator("pi", "theory", "c")
    assert not db.is_coordinator("pi", "chem", "c")
    assert [(d, a.user or a.account) for d, a in db.iter_tree("c")] == \
        [(0, "root"), (1, "chem"), (1, "physics"), (2, "bob"), (2, "theory"), (3, "alice")]


def test_records_round_trip() -> None:
    db = tree()
    db.assocs[5].limits.grp_tres = {"gres/gpu": 16}
    again = AssocDB.from_records(db.to_records())
    assert again.to_records() == db.to_records()
    assert again.assocs[5].limits.grp_tres == {"gres/gpu": 16}


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    s = SqliteStore(str(tmp_path / "state.db")) if request.param == "sqlite" else MemoryStore()
    yield s
    s.close()


def test_store_accounting_tables(store) -> None:  # type: ignore[no-untyped-def]
    assert store.load_accounting()["assocs"] == []
    recs = tree().to_records()
    store.replace_accounting(recs)
    got = store.load_accounting()
    assert AssocDB.from_records(got).to_records() == recs
    # a later replace drops what is gone
    db = tree()
    del db.assocs[6]
    store.replace_accounting(db.to_records())
    assert {a["id"] for a in store.load_accounting()["assocs"]} == {1, 2, 3, 4, 5}
    store.save_usage_state({"assoc": {"5": {"raw": 1.5}}})
    assert store.load_usage_state() == {"assoc": {"5": {"raw": 1.5}}}
    store.add_usage([UsageRecord("c", 5, 3600.0, {"gres/gpu": 7200.0}, 100.0)])
    store.add_usage([UsageRecord("c", 5, 3600.0, {"gres/gpu": 100.0, "cpu": 5.0}, 1.0),
                     UsageRecord("c", 6, 7200.0, {"cpu": 1.0}, 1.0)])
    rows = store.query_usage(cluster="c", start=0, end=7200)
    assert [(r.assoc_id, r.tres_secs, r.billing_secs) for r in rows] == \
        [(5, {"gres/gpu": 7300.0, "cpu": 5.0}, 101.0)]
    assert len(store.query_usage()) == 2


def test_sqlite_accounting_survives_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    s = SqliteStore(path)
    s.replace_accounting(tree().to_records())
    s.close()
    s = SqliteStore(path)
    assert AssocDB.from_records(s.load_accounting()).users["alice"].default_account == "theory"
    s.close()


def test_version_1_state_db_is_migrated(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema_version', '1'), ('next_job_id', '42');
        CREATE TABLE jobs (job_id INTEGER PRIMARY KEY, array_job_id INTEGER, uid INTEGER NOT NULL,
            state TEXT NOT NULL, submit_time REAL NOT NULL, start_time REAL, end_time REAL,
            record TEXT NOT NULL);
        CREATE TABLE nodes (name TEXT PRIMARY KEY, admin_state TEXT NOT NULL, reason TEXT,
            reason_user TEXT, reason_uid INTEGER, reason_time REAL);
        INSERT INTO nodes VALUES ('node-1', 'DRAIN', 'fan', 'root', 0, 1.0);
    """)
    old.commit()
    old.close()
    s = SqliteStore(path)
    assert s.next_job_id() == 42
    assert [n.name for n in s.load_nodes()] == ["node-1"]
    s.replace_accounting(tree().to_records())
    assert len(s.load_accounting()["assocs"]) == 6
    s.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == \
        str(SCHEMA_VERSION)
    db.close()


def test_store_node_events(store) -> None:  # type: ignore[no-untyped-def]
    from corral.store.base import NodeHistoryEntry

    store.add_event(NodeHistoryEntry("c", "node-1", 100.0, "DRAIN", "fan", 0))
    store.add_event(NodeHistoryEntry("c", "node-2", 150.0, "DOWN", "power", 0, end=160.0))
    store.end_events("c", "node-1", 300.0)
    store.add_event(NodeHistoryEntry("c", "node-1", 400.0, "DOWN*", "not responding", None))
    got = [(e.node, e.start, e.end, e.state) for e in store.query_events(cluster="c")]
    assert got == [("node-1", 100.0, 300.0, "DRAIN"), ("node-2", 150.0, 160.0, "DOWN"),
                   ("node-1", 400.0, None, "DOWN*")]
    assert [e.start for e in store.query_events(start=200.0)] == [100.0, 400.0]
    assert [e.start for e in store.query_events(end=120.0, nodes=["node-1"])] == [100.0]
