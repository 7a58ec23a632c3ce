"""The embedded store: one SQLite file in WAL mode, synchronous=FULL.

Each `write()` is one transaction; the controller batches concurrent changes into
one write (group commit), so durability costs one fsync per batch, not per job.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from typing import Any, NamedTuple

from corral import jsonio
from corral.model.job import Job, JobState
from corral.store.base import (
    ACCOUNTING_KINDS,
    JobPayload,
    NodeEvent,
    NodeRecord,
    UsageRecord,
    WriteBatch,
)

SCHEMA_VERSION = 2
# 2: accounting tables (acct_records, usage_state, usage_hours, node_events); a version-1 file gains them on open

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
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
);
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
CREATE TABLE IF NOT EXISTS usage_state (id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS usage_hours (
    cluster TEXT NOT NULL,
    assoc_id INTEGER NOT NULL,
    period_start REAL NOT NULL,
    tres_secs TEXT NOT NULL,
    billing_secs REAL NOT NULL,
    PRIMARY KEY (cluster, period_start, assoc_id)
);
"""

_FINISHED = tuple(s.value for s in JobState if s.finished)


class PreparedBatch(NamedTuple):
    job_rows: list[tuple[Any, ...]]
    payload_rows: list[tuple[Any, ...]]
    node_rows: list[tuple[Any, ...]]
    next_job_id: int | None


def _private(path: str) -> None:
    """The store and its -wal/-shm files hold every job's script and environment: root's
    (or the cluster owner's) only.  Created 0600, and fixed when an older file is opened."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for extra in (path + "-wal", path + "-shm", path + "-journal"):
        try:
            fd = os.open(extra, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)


class SqliteStore:
    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        if path != ":memory:":
            _private(path)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise RuntimeError(f"state database {path} is from a newer Corral (schema {row[0]})")
        elif int(row[0]) < SCHEMA_VERSION:
            # the new tables were created above (IF NOT EXISTS); nothing old changes shape
            self._db.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                             (str(SCHEMA_VERSION),))
        if path != ":memory:":
            _private(path)  # SQLite creates -wal and -shm with the database's mode; make sure

    # ---- writes ----------------------------------------------------------
    def write(self, batch: WriteBatch) -> None:
        self.commit(self.prepare(batch))

    @staticmethod
    def prepare(batch: WriteBatch) -> PreparedBatch:
        """Encode a batch into rows: pure CPU, done on the caller's (event loop) thread so the
        writer thread holds the GIL as little as possible."""
        job_rows = [
            (j["job_id"], j.get("array_job_id"), j["uid"], j["state"], j["submit_time"],
             j.get("start_time"), j.get("end_time"), jsonio.dumps(j))
            for j in batch.jobs
        ]
        payload_rows = [
            (jid, p.script, jsonio.dumps(p.env), jsonio.dumps(p.argv), p.open_mode)
            for jid, p in batch.payloads
        ]
        node_rows = [(n.name, n.admin_state, n.reason, n.reason_user, n.reason_uid, n.reason_time)
                     for n in batch.nodes]
        return PreparedBatch(job_rows, payload_rows, node_rows, batch.next_job_id)

    def commit(self, prepared: PreparedBatch) -> None:
        """Write prepared rows in one transaction; durable when it returns."""
        job_rows, payload_rows, node_rows = prepared.job_rows, prepared.payload_rows, prepared.node_rows
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                if job_rows:
                    db.executemany("INSERT OR REPLACE INTO jobs VALUES (?,?,?,?,?,?,?,?)", job_rows)
                if payload_rows:
                    db.executemany("INSERT OR REPLACE INTO payloads VALUES (?,?,?,?,?)", payload_rows)
                if node_rows:
                    db.executemany("INSERT OR REPLACE INTO nodes VALUES (?,?,?,?,?,?)", node_rows)
                if prepared.next_job_id is not None:
                    db.execute("INSERT OR REPLACE INTO meta VALUES ('next_job_id', ?)",
                               (str(prepared.next_job_id),))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    # ---- reads -----------------------------------------------------------
    def _jobs(self, sql: str, args: tuple[Any, ...] | list[Any] = ()) -> list[Job]:
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [Job.from_dict(jsonio.loads(r[0])) for r in rows]

    def load_active_jobs(self) -> list[Job]:
        marks = ",".join("?" * len(_FINISHED))
        return self._jobs(f"SELECT record FROM jobs WHERE state NOT IN ({marks}) ORDER BY job_id", _FINISHED)

    def load_recent_finished(self, since: float) -> list[Job]:
        marks = ",".join("?" * len(_FINISHED))
        return self._jobs(
            f"SELECT record FROM jobs WHERE state IN ({marks}) AND end_time >= ? ORDER BY job_id",
            (*_FINISHED, since))

    def load_payload(self, job_id: int) -> JobPayload | None:
        with self._lock:
            row = self._db.execute("SELECT script, env, argv, open_mode FROM payloads WHERE job_id=?",
                                   (job_id,)).fetchone()
        if row is None:
            return None
        return JobPayload(row[0], json.loads(row[1]), json.loads(row[2]), row[3])

    def load_nodes(self) -> list[NodeRecord]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM nodes").fetchall()
        return [NodeRecord(*r) for r in rows]

    def next_job_id(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key='next_job_id'").fetchone()
            top = self._db.execute("SELECT MAX(job_id) FROM jobs").fetchone()[0]
        nxt = int(row[0]) if row else 1
        return max(nxt, (top or 0) + 1)

    def query_jobs(self, **filters: Any) -> list[Job]:
        """Accounting query (sacct): the matching jobs, oldest first."""
        return [Job.from_dict(jsonio.loads(text)) for _, text in self.query_records(**filters)]

    def query_records(self, *, ids: list[int] | None = None, array_ids: list[int] | None = None,
                   uids: list[int] | None = None, states: list[str] | None = None,
                   start: float | None = None, end: float | None = None,
                   limit: int | None = None) -> list[tuple[int, str]]:
        """Like query_jobs, but (job id, stored JSON record) without decoding it."""
        id_match: list[Any] | None = None  # job ids or array ids, either may match
        alts: list[str] = []
        if ids is not None or array_ids is not None:
            id_match = []
            for column, values in (("job_id", ids), ("array_job_id", array_ids)):
                if values:
                    alts.append(f"{column} IN ({','.join('?' * len(values))})")
                    id_match.extend(values)
        where, args = _where(("(" + (" OR ".join(alts) or "0") + ")", id_match),
                             ("uid IN ({})", uids), ("state IN ({})", states),
                             # a job belongs to the window if it was not over before `start`
                             ("(end_time IS NULL OR end_time >= ?)", start),
                             ("submit_time <= ?", end))
        sql = "SELECT job_id, record FROM jobs" + where
        sql += " ORDER BY job_id"
        if limit:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            return [(int(r[0]), str(r[1])) for r in self._db.execute(sql, args).fetchall()]

    # ---- accounting --------------------------------------------------------
    def load_accounting(self) -> dict[str, list[dict[str, Any]]]:
        with self._lock:
            rows = self._db.execute("SELECT kind, record FROM acct_records ORDER BY rowid") \
                .fetchall()
        out: dict[str, list[dict[str, Any]]] = {k: [] for k in ACCOUNTING_KINDS}
        for kind, text in rows:
            if kind in out:
                out[kind].append(json.loads(text))
        return out

    def replace_accounting(self, records: dict[str, list[dict[str, Any]]]) -> None:
        rows = [(kind, _acct_key(kind, rec), json.dumps(rec, separators=(",", ":")))
                for kind in ACCOUNTING_KINDS for rec in records.get(kind, ())]
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM acct_records")
                db.executemany("INSERT INTO acct_records VALUES (?,?,?)", rows)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def load_usage_state(self) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT state FROM usage_state WHERE id=1").fetchone()
        return json.loads(row[0]) if row else None

    def save_usage_state(self, state: dict[str, Any]) -> None:
        text = json.dumps(state, separators=(",", ":"))
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO usage_state VALUES (1, ?)", (text,))

    def add_usage(self, records: list[UsageRecord]) -> None:
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                for r in records:
                    row = db.execute(
                        "SELECT tres_secs, billing_secs FROM usage_hours WHERE cluster=? AND "
                        "period_start=? AND assoc_id=?", (r.cluster, r.period_start, r.assoc_id)
                    ).fetchone()
                    tres = dict(r.tres_secs)
                    billing = r.billing_secs
                    if row is not None:
                        for k, v in json.loads(row[0]).items():
                            tres[k] = tres.get(k, 0.0) + v
                        billing += row[1]
                    db.execute("INSERT OR REPLACE INTO usage_hours VALUES (?,?,?,?,?)",
                               (r.cluster, r.assoc_id, r.period_start,
                                json.dumps(tres, separators=(",", ":")), billing))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def query_usage(self, *, cluster: str | None = None, start: float | None = None,
                    end: float | None = None) -> list[UsageRecord]:
        where, args = _where(("cluster=?", cluster), ("period_start>=?", start),
                             ("period_start<?", end))
        sql = ("SELECT cluster, assoc_id, period_start, tres_secs, billing_secs FROM usage_hours"
               + where + " ORDER BY period_start, assoc_id")
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [UsageRecord(r[0], int(r[1]), float(r[2]), json.loads(r[3]), float(r[4]))
                for r in rows]

    def add_event(self, event: NodeEvent) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO node_events VALUES (?,?,?,?,?,?,?)",
                             (event.cluster, event.node, event.start, event.end, event.state,
                              event.reason, event.reason_uid))

    def end_events(self, cluster: str, node: str, end: float) -> None:
        with self._lock:
            self._db.execute("UPDATE node_events SET end_time=? WHERE cluster=? AND node=? "
                             "AND end_time IS NULL", (end, cluster, node))

    def query_events(self, *, cluster: str | None = None, start: float | None = None,
                     end: float | None = None, nodes: list[str] | None = None
                     ) -> list[NodeEvent]:
        where, args = _where(("cluster=?", cluster), ("(end_time IS NULL OR end_time>=?)", start),
                             ("start<?", end), ("node IN ({})", nodes))
        sql = ("SELECT cluster, node, start, state, reason, reason_uid, end_time "
               "FROM node_events" + where + " ORDER BY start, node")
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [NodeEvent(r[0], r[1], float(r[2]), r[3], r[4], r[5],
                          None if r[6] is None else float(r[6])) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _where(*terms: tuple[str, Any]) -> tuple[str, list[Any]]:
    """The SQL " WHERE c1 AND c2 ..." (or "") and its arguments, from (condition, value) pairs.

    A None value leaves its condition out; a list value gives its items as the arguments,
    filling the condition's "{}" (if it has one; else its "?"s are written already) with one
    "?" per item (an empty list matches nothing, as IN () does).
    """
    clauses: list[str] = []
    args: list[Any] = []
    for clause, value in terms:
        if value is None:
            continue
        if isinstance(value, list):
            clauses.append(clause.format(",".join("?" * len(value))))
            args.extend(value)
        else:
            clauses.append(clause)
            args.append(value)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


def _acct_key(kind: str, rec: dict[str, Any]) -> str:
    if kind == "assocs":
        return str(rec["id"])
    if kind == "coords":
        return f"{rec['account']}\0{rec['user']}"
    return str(rec["name"])
