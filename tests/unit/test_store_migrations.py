"""The state database across releases: numbered migrations from the schema-2 fixture
(tests/fixtures/state-v2, made by the release before migrations), a newer schema refused,
and the epoch that fences a second writer."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from corral.auth import derive_machine_key
from corral.controller.auth import Registry
from corral.controller.state import Controller
from corral.model.assoc import AssocDB
from corral.model.config import parse_config
from corral.model.job import JobState
from corral.store import migrations
from corral.store.base import NewerSchema, StaleEpoch, WriteBatch
from corral.store.sqlite import SCHEMA_VERSION, SqliteStore

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "state-v2"
CONF = """\
ClusterName=lab
MinJobAge=300
NodeName=node-[1-2] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=node-[1-2] Default=YES
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A copy of the fixture (the migration changes the file and removes the JSON registry)."""
    shutil.copytree(FIXTURE, tmp_path / "home")
    return tmp_path / "home"


def _version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
    finally:
        db.close()


def test_the_fixture_is_the_previous_schema() -> None:
    assert _version(FIXTURE / "state.db") == 2 < SCHEMA_VERSION
    assert (FIXTURE / "auth" / "registry.json").exists()


def test_the_current_code_finds_every_job_account_and_token(home: Path) -> None:
    legacy = json.loads((home / "auth" / "registry.json").read_text())
    store = SqliteStore(str(home / "state.db"))
    try:
        assert _version(home / "state.db") == SCHEMA_VERSION
        # the controller starts on it
        ctl = Controller(parse_config(CONF), store)
        ctl.recover()
        assert {j.job_id: j.state for j in ctl.jobs.values() if not j.state.finished} == \
            {2: JobState.RUNNING, 3: JobState.PENDING}
        assert ctl.next_id == 5
        assert ctl.nodes["node-2"].reason == "bad fan"
        # every job, finished ones too, with its script
        assert {j.job_id: j.state for j in store.query_jobs()} == {
            1: JobState.COMPLETED, 2: JobState.RUNNING, 3: JobState.PENDING,
            4: JobState.FAILED}
        payload = store.load_payload(3)
        assert payload is not None and payload.script == "#!/bin/sh\necho waiting\n"
        # accounts, users, QoS and associations, as sacctmgr left them
        db: AssocDB = ctl.accounts.db
        assert set(db.accounts) == {"root", "theory", "lab"}
        assert {u: db.users[u].default_account for u in db.users} == \
            {"root": "root", "alice": "theory", "bob": "lab"}
        assert set(db.qos) == {"normal", "high"} and db.qos["high"].priority == 100
        assert sorted(db.assocs) == [1, 2, 3, 4, 5, 6]
        assert ctl.usage.assoc[5].raw == 120.0
        assert [(r.assoc_id, r.tres_secs) for r in store.query_usage()] == [(5, {"cpu": 120.0})]
        # every token and key, and the master secret they derive from
        reg = Registry(store.load_auth(), lambda recs: store.write(WriteBatch(auth=recs)))
        assert reg.master == bytes.fromhex(legacy["master"])
        assert reg.tokens == legacy["tokens"] and reg.keys == legacy["keys"]
        key_id = next(iter(legacy["keys"]))
        assert reg.key_for(key_id) == derive_machine_key(bytes.fromhex(legacy["master"]), key_id)
    finally:
        store.close()
    # imported: the second copy of the secret is gone, and a reopen migrates nothing
    assert not (home / "auth" / "registry.json").exists()
    db_conn = sqlite3.connect(home / "state.db")
    before = db_conn.execute("SELECT COUNT(*) FROM auth_records").fetchone()[0]
    db_conn.close()
    again = SqliteStore(str(home / "state.db"))
    assert len(again.load_auth().tokens) == 2 and before == 4  # master, 2 tokens, 1 key
    again.close()


def test_a_failed_migration_leaves_the_database_as_it_was(home: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(db: sqlite3.Connection, path: str) -> None:
        db.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(migrations, "MIGRATIONS", (*migrations.MIGRATIONS,
                                                   migrations.Migration(99, "broken", broken)))
    with pytest.raises(RuntimeError, match="disk on fire"):
        SqliteStore(str(home / "state.db"))
    assert _version(home / "state.db") == 2
    db = sqlite3.connect(home / "state.db")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    assert "half_done" not in tables and "auth_records" not in tables
    assert (home / "auth" / "registry.json").exists()


def test_a_database_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SqliteStore(str(path)).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(NewerSchema, match=f"schema {SCHEMA_VERSION + 1}, newer than"):
        SqliteStore(str(path))


def test_a_new_database_records_every_migration(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SqliteStore(str(path)).close()
    assert _version(path) == SCHEMA_VERSION == migrations.MIGRATIONS[-1].number
    assert [m.number for m in migrations.MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))


def test_a_commit_with_a_stale_epoch_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    first, second = SqliteStore(path), SqliteStore(path)
    try:
        mine = first.take_epoch()
        first.write(WriteBatch(next_job_id=10, epoch=mine))
        theirs = second.take_epoch()  # a standby takes over
        assert theirs > mine
        with pytest.raises(StaleEpoch, match=f"epoch {mine} refused"):
            first.write(WriteBatch(next_job_id=99, epoch=mine))
        assert second.next_job_id() == 10  # nothing of the refused commit was written
        second.write(WriteBatch(next_job_id=20, epoch=theirs))
        assert first.next_job_id() == 20
    finally:
        first.close()
        second.close()


# ---- schema 5 -> 6: reservations and runtime partitions out of the payload rows 0 and -1 ----
FIXTURE_V5 = Path(__file__).resolve().parent.parent / "fixtures" / "state-v5"
T0_V5 = 1_790_000_000.0  # tests/fixtures/make_state_v5.py's
CONF_V5 = """\
ClusterName=testcluster
NodeName=node-[1-4] CPUs=16 RealMemory=64000 Gres=gpu:4
PartitionName=debug Nodes=node-[1-4] Default=YES MaxTime=INFINITE State=UP
PartitionName=short Nodes=node-[1-2] MaxTime=10:00 State=UP
"""


def _payload_ids(path: Path) -> list[int]:
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute("SELECT job_id FROM payloads ORDER BY job_id")]
    finally:
        db.close()


def test_the_v5_fixture_keeps_reservations_and_partitions_as_payloads() -> None:
    assert _version(FIXTURE_V5 / "state.db") == 5 < SCHEMA_VERSION
    assert _payload_ids(FIXTURE_V5 / "state.db") == [-1, 0]


def test_reservations_and_runtime_partitions_are_moved_to_their_tables(tmp_path: Path) -> None:
    from corral.controller import partitions
    from corral.controller import reservations as resv_ctl
    from corral.controller.harness import Harness

    path = tmp_path / "state.db"
    shutil.copy(FIXTURE_V5 / "state.db", path)
    store = SqliteStore(str(path))
    try:
        assert _version(path) == SCHEMA_VERSION
        assert _payload_ids(path) == []  # the fake job ids are gone from the payloads
        stored = store.load_reservations()
        assert [r.name for r in stored.reservations] == ["maint", "root_1", "weekly"]
        assert stored.next_id == 2
        table = store.load_runtime_partitions()
        assert table.partitions is not None
        assert [p.name for p in table.partitions] == ["debug", "short", "extra"]
        # the controller restarts on it: every reservation, partition and node attribute
        with Harness(CONF_V5, store=store, now=T0_V5 + 100) as h:  # type: ignore[arg-type]
            partitions.restore(h.ctl)
            extra = h.ctl.partitions["extra"]
            assert (extra.nodes, extra.state, extra.max_time) == (["node-3", "node-4"],
                                                                  "DRAIN", 300)
            assert h.ctl.partitions["short"].max_time == 1200
            assert h.ctl.nodes["node-3"].partitions == ["debug", "extra"]
            assert h.ctl.nodes["node-2"].comment == "new disks"
            assert (h.ctl.nodes["node-3"].features, h.ctl.nodes["node-3"].weight) == \
                (["fast", "nvme"], 5)
            book = resv_ctl.book_of(h.ctl)
            assert book.by_name["maint"].flags == ["MAINT", "IGNORE_JOBS", "SPEC_NODES"]
            assert book.by_name["maint"].nodes == ["node-1"]
            assert book.by_name["weekly"].flags == ["WEEKLY", "SPEC_NODES"]
            assert resv_ctl.node_marks(h.ctl, T0_V5 + 100) == {"node-1": "maint"}
            # the counter of generated names came along
            r = h.call(resv_ctl.create, h.ctl, h.who(0),
                       {"start": T0_V5 + 3 * 86400, "duration": 60, "nodes": "node-3",
                        "users": "root"})
            assert r.name == "root_2"
            h.call(resv_ctl.delete, h.ctl, h.who(0), "weekly")
            h.call(partitions.delete_partition, h.ctl, h.who(0), "extra")
    finally:
        store.close()
    again = SqliteStore(str(path))
    try:
        stored = again.load_reservations()
        assert [r.name for r in stored.reservations] == ["maint", "root_1", "root_2"]
        assert stored.next_id == 3
        table = again.load_runtime_partitions()
        assert table.partitions is not None
        assert [p.name for p in table.partitions] == ["debug", "short"]
        assert table.nodes["node-2"].comment == "new disks"
    finally:
        again.close()


def test_a_reconfigured_partition_table_is_moved_as_node_comments_only(tmp_path: Path) -> None:
    """`scontrol reconfigure` left schema 5 a record of node comments and no partitions."""
    path = tmp_path / "state.db"
    shutil.copy(FIXTURE_V5 / "state.db", path)
    db = sqlite3.connect(path)
    db.execute("UPDATE payloads SET script=? WHERE job_id=-1",
               (json.dumps({"nodes": {"node-2": {"comment": "new disks"}}}),))
    db.execute("UPDATE payloads SET script='not json' WHERE job_id=0")
    db.commit()
    db.close()
    store = SqliteStore(str(path))
    try:
        table = store.load_runtime_partitions()
        assert table.partitions is None  # slurm.conf's
        assert list(table.nodes) == ["node-2"]
        attrs = table.nodes["node-2"]
        assert (attrs.features, attrs.weight, attrs.comment) == (None, None, "new disks")
        # an unreadable book is dropped (logged), not a controller that cannot start
        assert store.load_reservations().reservations == []
        assert _payload_ids(path) == []
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_reservations_and_partitions_round_trip_as_records(kind: str, tmp_path: Path) -> None:
    from corral.model.node import Partition
    from corral.model.reservation import Reservation
    from corral.store.base import (
        NodeAttributes,
        ReservationChange,
        RuntimePartitions,
        StoredReservations,
    )
    from corral.store.memory import MemoryStore

    store = MemoryStore() if kind == "memory" else SqliteStore(str(tmp_path / "state.db"))
    try:
        assert store.load_reservations() == StoredReservations([], 1)
        assert store.load_runtime_partitions() == RuntimePartitions(None, {})
        a = Reservation("a", 10.0, 20.0, ["n1"], users=["root"], flags=["MAINT"])
        b = Reservation("b", 30.0, 40.0, ["n2"], accounts=["lab"], accounts_not=True)
        store.write(WriteBatch(reservations=[ReservationChange("a", a, 1),
                                             ReservationChange("b", b, 5)]))
        store.write(WriteBatch(reservations=[ReservationChange("a", None, 6)]))
        assert store.load_reservations() == StoredReservations([b], 6)
        parts = [Partition("z", ["n1"], default=True), Partition("a", ["n2"], max_time=60)]
        attrs = {"n1": NodeAttributes(["x"], 3, "c"), "n2": NodeAttributes(comment="d")}
        store.write(WriteBatch(partitions=RuntimePartitions(parts, attrs)))
        assert store.load_runtime_partitions() == RuntimePartitions(parts, attrs)
        store.write(WriteBatch(partitions=RuntimePartitions(None, {"n2": attrs["n2"]})))
        assert store.load_runtime_partitions() == RuntimePartitions(None, {"n2": attrs["n2"]})
    finally:
        store.close()
