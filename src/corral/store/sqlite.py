"""The embedded store: one SQLite file in WAL mode, synchronous=FULL.

Each `write()` is one transaction; the controller batches concurrent changes into
one write (group commit), so durability costs one fsync per batch, not per job.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from typing import Any

from corral import jsonio
from corral.model.job import Job, JobState
from corral.model.reservation import Reservation
from corral.store.base import (
    ACCOUNTING_KINDS,
    AuthState,
    JobPayload,
    NodeAttributes,
    NodeHistoryEnd,
    NodeHistoryEntry,
    NodeRecord,
    PreparedBatch,
    ReservationChange,
    RuntimePartitions,
    StaleEpoch,
    StoredReservations,
    UsageRecord,
    WriteBatch,
    accounting_change,
    accounting_order,
    partition_from_dict,
    prepare_batch,
)
from corral.store.migrations import SCHEMA_VERSION, migrate

__all__ = ["SCHEMA_VERSION", "SqliteStore"]

_FINISHED = tuple(s.value for s in JobState if s.finished)


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
        migrate(self._db, path)
        if path != ":memory:":
            _private(path)  # SQLite creates -wal and -shm with the database's mode; make sure

    # ---- writes ----------------------------------------------------------
    def take_epoch(self) -> int:
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                epoch = self._epoch() + 1
                db.execute("INSERT OR REPLACE INTO meta VALUES ('epoch', ?)", (str(epoch),))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return epoch

    def _epoch(self) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key='epoch'").fetchone()
        return int(row[0]) if row else 0

    def write(self, batch: WriteBatch) -> None:
        self.commit(self.prepare(batch))

    @staticmethod
    def prepare(batch: WriteBatch) -> PreparedBatch:
        """Encode the jobs into rows: pure CPU, done on the caller's (event loop) thread so
        the writer thread holds the GIL as little as possible."""
        return prepare_batch(batch)

    def commit(self, prepared: PreparedBatch) -> None:
        """Write prepared rows in one transaction; durable when it returns."""
        b = prepared.batch
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                if b.epoch is not None and b.epoch != (held := self._epoch()):
                    raise StaleEpoch(f"commit with epoch {b.epoch} refused: the store is at "
                                     f"epoch {held} (another controller took it)")
                if prepared.jobs:
                    db.executemany("INSERT OR REPLACE INTO jobs VALUES (?,?,?,?,?,?,?,?)",
                                   prepared.jobs)
                if b.payloads:
                    db.executemany("INSERT OR REPLACE INTO payloads VALUES (?,?,?,?,?)",
                                   [(jid, p.script, jsonio.dumps(p.env), jsonio.dumps(p.argv),
                                     p.open_mode) for jid, p in b.payloads])
                if b.nodes:
                    db.executemany("INSERT OR REPLACE INTO nodes VALUES (?,?,?,?,?,?)",
                                   [(n.name, n.admin_state, n.reason, n.reason_user,
                                     n.reason_uid, n.reason_time) for n in b.nodes])
                if b.next_job_id is not None:
                    db.execute("INSERT OR REPLACE INTO meta VALUES ('next_job_id', ?)",
                               (str(b.next_job_id),))
                if b.usage_state is not None:
                    db.execute("INSERT OR REPLACE INTO usage_state VALUES (1, ?)",
                               (json.dumps(b.usage_state, separators=(",", ":")),))
                if b.usage:
                    self._add_usage(b.usage)
                if b.accounting.upserts:
                    db.executemany("INSERT OR REPLACE INTO acct_records VALUES (?,?,?)",
                                   [(kind, key, json.dumps(rec, separators=(",", ":")))
                                    for kind, key, rec in b.accounting.upserts])
                if b.accounting.deletes:
                    db.executemany("DELETE FROM acct_records WHERE kind=? AND key=?",
                                   b.accounting.deletes)
                if b.node_events:
                    self._write_events(b.node_events)
                if b.auth:
                    db.executemany("INSERT OR REPLACE INTO auth_records VALUES (?,?,?)",
                                   [(r.kind, r.id, json.dumps(r.record, separators=(",", ":")))
                                    for r in b.auth])
                if b.reservations:
                    self._write_reservations(b.reservations)
                if b.partitions is not None:
                    self._write_partitions(b.partitions)
                for c in b.crontabs:
                    if c.record is None:
                        db.execute("DELETE FROM crontabs WHERE uid=?", (c.uid,))
                    else:
                        db.execute("INSERT OR REPLACE INTO crontabs VALUES (?,?)",
                                   (c.uid, json.dumps(c.record, separators=(",", ":"))))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _add_usage(self, records: list[UsageRecord]) -> None:
        db = self._db
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

    def _write_reservations(self, changes: list[ReservationChange]) -> None:
        db = self._db
        for c in changes:
            if c.reservation is None:
                db.execute("DELETE FROM reservations WHERE name=?", (c.name,))
            else:
                db.execute("INSERT OR REPLACE INTO reservations VALUES (?,?)",
                           (c.name, _dumps(c.reservation.to_dict())))
        db.execute("INSERT OR REPLACE INTO meta VALUES ('reservation_next_id', ?)",
                   (str(changes[-1].next_id),))

    def _write_partitions(self, table: RuntimePartitions) -> None:
        db = self._db
        db.execute("DELETE FROM runtime_partitions")
        db.execute("DELETE FROM runtime_node_attrs")
        if table.partitions is None:
            db.execute("DELETE FROM meta WHERE key='runtime_partitions'")
        else:
            db.executemany("INSERT INTO runtime_partitions VALUES (?,?,?)",
                           [(i, p.name, _dumps(p.to_dict()))
                            for i, p in enumerate(table.partitions)])
            db.execute("INSERT OR REPLACE INTO meta VALUES ('runtime_partitions', '1')")
        db.executemany("INSERT INTO runtime_node_attrs VALUES (?,?,?,?)",
                       [(name, None if a.features is None else _dumps(a.features), a.weight,
                         a.comment) for name, a in table.nodes.items()])

    # direct writes, unfenced, for tools and tests (the controller goes through its writer)
    def replace_accounting(self, records: dict[str, list[dict[str, Any]]]) -> None:
        self.write(WriteBatch(accounting=accounting_change(self.load_accounting(), records)))

    def save_usage_state(self, state: dict[str, Any]) -> None:
        self.write(WriteBatch(usage_state=state))

    def add_usage(self, records: list[UsageRecord]) -> None:
        self.write(WriteBatch(usage=records))

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
        for kind, recs in out.items():
            recs.sort(key=lambda r, k=kind: accounting_order(k, r))  # type: ignore[misc]
        return out

    def load_usage_state(self) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT state FROM usage_state WHERE id=1").fetchone()
        return json.loads(row[0]) if row else None

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

    def add_event(self, event: NodeHistoryEntry) -> None:
        with self._lock:
            self._write_events([event])

    def end_events(self, cluster: str, node: str, end: float) -> None:
        with self._lock:
            self._write_events([NodeHistoryEnd(cluster, node, end)])

    def _write_events(self, events: list[NodeHistoryEntry | NodeHistoryEnd]) -> None:
        for ev in events:
            if isinstance(ev, NodeHistoryEnd):
                self._db.execute("UPDATE node_events SET end_time=? WHERE cluster=? AND node=? "
                                 "AND end_time IS NULL", (ev.end, ev.cluster, ev.node))
            else:
                self._db.execute(
                    "INSERT OR REPLACE INTO node_events (cluster, node, start, end_time, state, "
                    "reason, reason_uid, reason_user, source) VALUES (?,?,?,?,?,?,?,?,?)",
                    (ev.cluster, ev.node, ev.start, ev.end, ev.state, ev.reason,
                     ev.reason_uid, ev.reason_user, ev.source))

    def query_events(self, *, cluster: str | None = None, start: float | None = None,
                     end: float | None = None, nodes: list[str] | None = None
                     ) -> list[NodeHistoryEntry]:
        where, args = _where(("cluster=?", cluster), ("(end_time IS NULL OR end_time>=?)", start),
                             ("start<?", end), ("node IN ({})", nodes))
        sql = ("SELECT cluster, node, start, state, reason, reason_uid, end_time, reason_user, "
               "source FROM node_events" + where + " ORDER BY start, node")
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [NodeHistoryEntry(r[0], r[1], float(r[2]), r[3], r[4], r[5],
                          None if r[6] is None else float(r[6]), r[7], r[8] or "")
                for r in rows]

    def load_auth(self) -> AuthState:
        with self._lock:
            rows = self._db.execute("SELECT kind, id, record FROM auth_records").fetchall()
        state = AuthState()
        for kind, key, text in rows:
            rec = json.loads(text)
            if kind == "master":
                state.master = str(rec["secret"])
            elif kind == "token":
                state.tokens[key] = rec
            elif kind == "key":
                state.keys[key] = rec
        return state

    def load_crontabs(self) -> dict[int, dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT uid, record FROM crontabs").fetchall()
        return {int(uid): json.loads(text) for uid, text in rows}

    def load_reservations(self) -> StoredReservations:
        with self._lock:
            rows = self._db.execute("SELECT record FROM reservations ORDER BY name").fetchall()
            row = self._db.execute(
                "SELECT value FROM meta WHERE key='reservation_next_id'").fetchone()
        return StoredReservations([Reservation.from_dict(json.loads(r[0])) for r in rows],
                                  int(row[0]) if row else 1)

    def load_runtime_partitions(self) -> RuntimePartitions:
        with self._lock:
            db = self._db
            present = db.execute(
                "SELECT 1 FROM meta WHERE key='runtime_partitions'").fetchone() is not None
            parts = db.execute("SELECT record FROM runtime_partitions ORDER BY position") \
                .fetchall()
            attrs = db.execute("SELECT name, features, weight, comment FROM runtime_node_attrs "
                               "ORDER BY rowid").fetchall()
        return RuntimePartitions(
            [partition_from_dict(json.loads(r[0])) for r in parts] if present else None,
            {str(name): NodeAttributes(None if features is None else
                                       [str(f) for f in json.loads(features)],
                                       None if weight is None else int(weight), str(comment))
             for name, features, weight, comment in attrs})

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


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
