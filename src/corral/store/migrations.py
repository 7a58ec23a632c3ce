"""The SQLite store's schema, as numbered forward-only migrations.

Each migration takes a database of the schema before it to the schema named by its number.
`migrate` runs the missing ones on open, all in one transaction with the new version
recorded, so a failure leaves the file as it was.  A database whose version is above the
last number here was written by a newer Corral and is refused.  Never edit a released
migration: add the next number.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.store.base import NewerSchema

log = logging.getLogger("corral.store")


@dataclass(frozen=True, slots=True)
class Migration:
    number: int
    what: str
    apply: Callable[[sqlite3.Connection, str], None]  # (database, its path)


def _run(db: sqlite3.Connection, sql: str) -> None:
    # one statement at a time: executescript would COMMIT the migration's transaction
    for stmt in sql.split(";"):
        if stmt.strip():
            db.execute(stmt)


def _1_jobs(db: sqlite3.Connection, _path: str) -> None:
    # IF NOT EXISTS: files of the first releases had some of these before versions existed
    _run(db, """
    CREATE TABLE IF NOT EXISTS jobs (
        job_id INTEGER PRIMARY KEY,
        array_job_id INTEGER,
        uid INTEGER NOT NULL,
        state TEXT NOT NULL,
        submit_time REAL NOT NULL,
        start_time REAL,
        end_time REAL,
        record TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
    CREATE INDEX IF NOT EXISTS jobs_end ON jobs(end_time);
    CREATE INDEX IF NOT EXISTS jobs_array ON jobs(array_job_id);
    CREATE INDEX IF NOT EXISTS jobs_uid ON jobs(uid);
    CREATE TABLE IF NOT EXISTS payloads (
        job_id INTEGER PRIMARY KEY,
        script TEXT NOT NULL,
        env TEXT NOT NULL,
        argv TEXT NOT NULL,
        open_mode TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS nodes (
        name TEXT PRIMARY KEY,
        admin_state TEXT NOT NULL,
        reason TEXT, reason_user TEXT, reason_uid INTEGER, reason_time REAL
    )""")


def _2_accounting(db: sqlite3.Connection, _path: str) -> None:
    _run(db, """
    CREATE TABLE IF NOT EXISTS acct_records (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (kind, key)
    );
    CREATE TABLE IF NOT EXISTS node_events (
        cluster TEXT NOT NULL,
        node TEXT NOT NULL,
        start REAL NOT NULL,
        end_time REAL,
        state TEXT NOT NULL,
        reason TEXT NOT NULL,
        reason_uid INTEGER,
        PRIMARY KEY (cluster, node, start)
    );
    CREATE TABLE IF NOT EXISTS usage_state (id INTEGER PRIMARY KEY CHECK (id = 1),
                                            state TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS usage_hours (
        cluster TEXT NOT NULL,
        assoc_id INTEGER NOT NULL,
        period_start REAL NOT NULL,
        tres_secs TEXT NOT NULL,
        billing_secs REAL NOT NULL,
        PRIMARY KEY (cluster, period_start, assoc_id)
    )""")


def _5_crontabs(db: sqlite3.Connection, _path: str) -> None:
    """scrontab: each user's crontab file, disabled lines and cron job ids, as JSON."""
    _run(db, """
    CREATE TABLE crontabs (
        uid INTEGER PRIMARY KEY,
        record TEXT NOT NULL
    )""")


LEGACY_REGISTRY = os.path.join("auth", "registry.json")  # beside the database, until schema 3


def _3_auth_and_epoch(db: sqlite3.Connection, path: str) -> None:
    """The token/key registry moves into the store (importing the JSON file of the release
    before, which is then removed: it holds the master secret), and the writer's epoch."""
    _run(db, """
    CREATE TABLE auth_records (
        kind TEXT NOT NULL,
        id TEXT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (kind, id)
    );
    INSERT OR IGNORE INTO meta VALUES ('epoch', '0')""")
    if path == ":memory:":
        return
    legacy = os.path.join(os.path.dirname(os.path.abspath(path)), LEGACY_REGISTRY)
    try:
        with open(legacy) as f:
            data = json.load(f)
    except FileNotFoundError:
        return
    rows = [("master", "master", json.dumps({"secret": data["master"]}))]
    rows += [("token", k, json.dumps(v)) for k, v in dict(data.get("tokens") or {}).items()]
    rows += [("key", k, json.dumps(v)) for k, v in dict(data.get("keys") or {}).items()]
    db.executemany("INSERT OR REPLACE INTO auth_records VALUES (?,?,?)", rows)
    log.info("imported the token/key registry %s into the state database", legacy)


def _4_node_history(db: sqlite3.Connection, _path: str) -> None:
    """Node history: who changed a node (by name, as then) and what (admin, health, prolog,
    …), and an index for one node's events (sacctmgr list event nodes=)."""
    _run(db, """
    ALTER TABLE node_events ADD COLUMN reason_user TEXT;
    ALTER TABLE node_events ADD COLUMN source TEXT NOT NULL DEFAULT '';
    CREATE INDEX IF NOT EXISTS node_events_by_node ON node_events (cluster, node, end_time)""")


# how schema 5 kept them: payload rows of job ids no job has, the record as JSON in `script`
LEGACY_RESERVATIONS = (0, "corral-reservations-v1")
LEGACY_PARTITIONS = (-1, "corral-partitions-v1")


def _legacy_record(db: sqlite3.Connection, job_id: int, tag: str) -> dict[str, Any] | None:
    if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='payloads'") \
            .fetchone() is None:  # some files of the first releases have none
        return None
    row = db.execute("SELECT script, argv FROM payloads WHERE job_id=?", (job_id,)).fetchone()
    if row is None:
        return None
    try:
        if json.loads(row[1])[:1] != [tag]:
            return None
        record = json.loads(row[0])
    except (ValueError, TypeError):
        record = None
    if not isinstance(record, dict):
        log.error("payload row %d (%s) is unreadable; dropped", job_id, tag)
        record = {}
    db.execute("DELETE FROM payloads WHERE job_id=?", (job_id,))
    return record


def _6_reservations_and_partitions(db: sqlite3.Connection, _path: str) -> None:
    """Slurm reservations and the runtime partition table get tables of their own, and
    leave the payload rows 0 and -1 where schema 5 kept them (one JSON document each).
    The records are moved as they are (the JSON of Reservation.to_dict, Partition.to_dict),
    so this migration needs no model code."""
    _run(db, """
    CREATE TABLE reservations (
        name TEXT PRIMARY KEY,
        record TEXT NOT NULL
    );
    CREATE TABLE runtime_partitions (
        position INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        record TEXT NOT NULL
    );
    CREATE TABLE runtime_node_attrs (
        name TEXT PRIMARY KEY,
        features TEXT,
        weight INTEGER,
        comment TEXT NOT NULL
    )""")
    resv = _legacy_record(db, *LEGACY_RESERVATIONS)
    if resv is not None:
        items = resv.get("reservations")
        for r in items if isinstance(items, list) else []:
            if isinstance(r, dict) and r.get("name"):
                db.execute("INSERT OR REPLACE INTO reservations VALUES (?,?)",
                           (str(r["name"]), json.dumps(r, separators=(",", ":"))))
        db.execute("INSERT OR REPLACE INTO meta VALUES ('reservation_next_id', ?)",
                   (str(int(resv.get("next_id", 1))),))
        log.info("moved %d reservations into their table",
                 len(items) if isinstance(items, list) else 0)
    parts = _legacy_record(db, *LEGACY_PARTITIONS)
    if parts is not None:
        table = parts.get("partitions")
        if isinstance(table, list):
            db.executemany("INSERT OR REPLACE INTO runtime_partitions VALUES (?,?,?)",
                           [(i, str(p["name"]), json.dumps(p, separators=(",", ":")))
                            for i, p in enumerate(table) if isinstance(p, dict) and p.get("name")])
            db.execute("INSERT OR REPLACE INTO meta VALUES ('runtime_partitions', '1')")
        nodes = parts.get("nodes")
        for name, attrs in nodes.items() if isinstance(nodes, dict) else ():
            if not isinstance(attrs, dict):
                continue
            features = attrs.get("features") if "features" in attrs else None
            weight = attrs.get("weight")
            db.execute("INSERT OR REPLACE INTO runtime_node_attrs VALUES (?,?,?,?)",
                       (str(name), None if features is None else json.dumps(list(features)),
                        weight if isinstance(weight, int) else None,
                        str(attrs.get("comment") or "")))
        log.info("moved the runtime partition table into its tables")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "jobs, payloads, nodes", _1_jobs),
    Migration(2, "accounting: acct_records, node_events, usage_state, usage_hours", _2_accounting),
    Migration(3, "auth_records (the JSON registry imported), the writer's epoch", _3_auth_and_epoch),
    Migration(4, "node history: node_events.reason_user, .source, an index by node",
              _4_node_history),
    Migration(5, "crontabs (scrontab)", _5_crontabs),
    Migration(6, "reservations, runtime_partitions, runtime_node_attrs (from payload rows 0, -1)",
              _6_reservations_and_partitions),
)
SCHEMA_VERSION = MIGRATIONS[-1].number


def migrate(db: sqlite3.Connection, path: str) -> list[int]:
    """Bring the database to SCHEMA_VERSION in one transaction; the numbers applied."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            # a file of the first release (its jobs table, no version) counts as version 0
            version = 0
        else:
            version = int(row[0])
        if version > SCHEMA_VERSION:
            raise NewerSchema(f"state database {path} has schema {version}, newer than this "
                              f"Corral's {SCHEMA_VERSION}: run the Corral that wrote it")
        applied = []
        for m in MIGRATIONS:
            if m.number > version:
                m.apply(db, path)
                applied.append(m.number)
        if applied:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                       (str(SCHEMA_VERSION),))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    if path != ":memory:" and 3 in applied:
        _remove_legacy_registry(path)
    return applied


def _remove_legacy_registry(path: str) -> None:
    """After the commit that imported it: the old file would be a second copy of the secret."""
    try:
        os.unlink(os.path.join(os.path.dirname(os.path.abspath(path)), LEGACY_REGISTRY))
    except FileNotFoundError:
        pass
