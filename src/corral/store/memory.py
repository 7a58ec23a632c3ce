"""An in-memory store with the SQLite store's interface: for the controller harness, tests
and the trace simulator.  Nothing survives the process; commits are immediate (`inline`:
the controller's writer calls `commit` on its loop instead of a thread)."""

from __future__ import annotations

import json
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

_FINISHED = frozenset(s.value for s in JobState if s.finished)


class MemoryStore:
    inline = True

    def __init__(self) -> None:
        self.jobs: dict[int, dict[str, Any]] = {}
        self.payloads: dict[int, JobPayload] = {}
        self.nodes: dict[str, NodeRecord] = {}
        self.meta_next_id: int | None = None
        self.commits = 0
        self.accounting: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in ACCOUNTING_KINDS}
        self.auth: dict[tuple[str, str], dict[str, Any]] = {}
        self.epoch = 0
        self.usage_state: dict[str, Any] | None = None
        self.usage: dict[tuple[str, float, int], UsageRecord] = {}
        self.events: dict[tuple[str, str, float], NodeHistoryEntry] = {}
        self.crontabs: dict[int, dict[str, Any]] = {}
        self.reservations: dict[str, dict[str, Any]] = {}  # records copied in and out
        self.reservation_next_id = 1
        self.partitions: list[dict[str, Any]] | None = None
        self.node_attrs: dict[str, NodeAttributes] = {}

    def take_epoch(self) -> int:
        self.epoch += 1
        return self.epoch

    def write(self, batch: WriteBatch) -> None:
        self.commit(self.prepare(batch))

    @staticmethod
    def prepare(batch: WriteBatch) -> PreparedBatch:
        # records are encoded now, as the SQLite store encodes them now
        return prepare_batch(batch)

    def commit(self, prepared: PreparedBatch) -> None:
        b = prepared.batch
        if b.epoch is not None and b.epoch != self.epoch:
            raise StaleEpoch(f"commit with epoch {b.epoch} refused: the store is at epoch "
                             f"{self.epoch} (another controller took it)")
        for row in prepared.jobs:
            self.jobs[int(row[0])] = jsonio.loads(row[7])
        for jid, p in b.payloads:
            self.payloads[jid] = p
        for n in b.nodes:
            self.nodes[n.name] = n
        for c in b.crontabs:
            if c.record is None:
                self.crontabs.pop(c.uid, None)
            else:
                self.crontabs[c.uid] = json.loads(json.dumps(c.record))
        for change in b.reservations:
            if change.reservation is None:
                self.reservations.pop(change.name, None)
            else:
                self.reservations[change.name] = change.reservation.to_dict()
            self.reservation_next_id = change.next_id
        if b.partitions is not None:
            table = b.partitions
            self.partitions = None if table.partitions is None else \
                [json.loads(json.dumps(p.to_dict())) for p in table.partitions]
            self.node_attrs = {name: NodeAttributes(None if a.features is None
                                                    else list(a.features), a.weight, a.comment)
                               for name, a in table.nodes.items()}
        if b.next_job_id is not None:
            self.meta_next_id = b.next_job_id
        if b.usage_state is not None:
            self.usage_state = json.loads(json.dumps(b.usage_state))
        if b.usage:
            self._add_usage(b.usage)
        for kind, key, rec in b.accounting.upserts:
            self.accounting[kind][key] = json.loads(json.dumps(rec))
        for kind, key in b.accounting.deletes:
            self.accounting[kind].pop(key, None)
        for r in b.auth:
            self.auth[(r.kind, r.id)] = json.loads(json.dumps(r.record))
        for ev in b.node_events:
            if isinstance(ev, NodeHistoryEnd):
                self.end_events(ev.cluster, ev.node, ev.end)
            else:
                self.add_event(ev)
        self.commits += 1

    def load_active_jobs(self) -> list[Job]:
        return [Job.from_dict(d) for _, d in sorted(self.jobs.items()) if d["state"] not in _FINISHED]

    def load_recent_finished(self, since: float) -> list[Job]:
        return [Job.from_dict(d) for _, d in sorted(self.jobs.items())
                if d["state"] in _FINISHED and (d.get("end_time") or 0) >= since]

    def load_payload(self, job_id: int) -> JobPayload | None:
        return self.payloads.get(job_id)

    def load_nodes(self) -> list[NodeRecord]:
        return list(self.nodes.values())

    def next_job_id(self) -> int:
        top = max(self.jobs, default=0)
        return max(self.meta_next_id or 1, top + 1)

    def query_jobs(self, **filters: Any) -> list[Job]:
        return [Job.from_dict(json.loads(text)) for _, text in self.query_records(**filters)]

    def query_records(self, *, ids: list[int] | None = None, array_ids: list[int] | None = None,
                      uids: list[int] | None = None, states: list[str] | None = None,
                      start: float | None = None, end: float | None = None,
                      limit: int | None = None) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        id_set = set(ids or ())
        arr_set = set(array_ids or ())
        for jid, d in sorted(self.jobs.items()):
            if (ids is not None or array_ids is not None) \
                    and jid not in id_set and d.get("array_job_id") not in arr_set:
                continue
            if uids is not None and d["uid"] not in uids:
                continue
            if states is not None and d["state"] not in states:
                continue
            if start is not None and d.get("end_time") is not None and d["end_time"] < start:
                continue
            if end is not None and d["submit_time"] > end:
                continue
            out.append((jid, json.dumps(d, separators=(",", ":"))))
            if limit and len(out) >= limit:
                break
        return out

    # ---- accounting (records copied in and out, as the SQLite store encodes them) ----
    def load_accounting(self) -> dict[str, list[dict[str, Any]]]:
        return {k: sorted(json.loads(json.dumps(list(self.accounting[k].values()))),
                          key=lambda r, k=k: accounting_order(k, r))  # type: ignore[misc]
                for k in ACCOUNTING_KINDS}

    # direct writes, unfenced, for tools and tests (the controller goes through its writer)
    def replace_accounting(self, records: dict[str, list[dict[str, Any]]]) -> None:
        self.write(WriteBatch(accounting=accounting_change(self.load_accounting(), records)))

    def save_usage_state(self, state: dict[str, Any]) -> None:
        self.write(WriteBatch(usage_state=state))

    def add_usage(self, records: list[UsageRecord]) -> None:
        self.write(WriteBatch(usage=records))

    def load_usage_state(self) -> dict[str, Any] | None:
        return json.loads(json.dumps(self.usage_state)) if self.usage_state is not None else None

    def _add_usage(self, records: list[UsageRecord]) -> None:
        for r in records:
            key = (r.cluster, r.period_start, r.assoc_id)
            old = self.usage.get(key)
            tres = dict(r.tres_secs)
            billing = r.billing_secs
            if old is not None:
                for k, v in old.tres_secs.items():
                    tres[k] = tres.get(k, 0.0) + v
                billing += old.billing_secs
            self.usage[key] = UsageRecord(r.cluster, r.assoc_id, r.period_start, tres, billing)

    def query_usage(self, *, cluster: str | None = None, start: float | None = None,
                    end: float | None = None) -> list[UsageRecord]:
        out = []
        for (cl, period, _), r in sorted(self.usage.items(), key=lambda kv: (kv[0][1], kv[0][2])):
            if cluster is not None and cl != cluster:
                continue
            if start is not None and period < start:
                continue
            if end is not None and period >= end:
                continue
            out.append(UsageRecord(r.cluster, r.assoc_id, r.period_start, dict(r.tres_secs),
                                   r.billing_secs))
        return out

    def add_event(self, event: NodeHistoryEntry) -> None:
        self.events[(event.cluster, event.node, event.start)] = NodeHistoryEntry(
            event.cluster, event.node, event.start, event.state, event.reason,
            event.reason_uid, event.end, event.reason_user, event.source)

    def end_events(self, cluster: str, node: str, end: float) -> None:
        for (cl, n, _), ev in self.events.items():
            if cl == cluster and n == node and ev.end is None:
                ev.end = end

    def query_events(self, *, cluster: str | None = None, start: float | None = None,
                     end: float | None = None, nodes: list[str] | None = None
                     ) -> list[NodeHistoryEntry]:
        out = []
        for ev in sorted(self.events.values(), key=lambda e: (e.start, e.node)):
            if cluster is not None and ev.cluster != cluster:
                continue
            if start is not None and ev.end is not None and ev.end < start:
                continue
            if end is not None and ev.start >= end:
                continue
            if nodes is not None and ev.node not in nodes:
                continue
            out.append(NodeHistoryEntry(ev.cluster, ev.node, ev.start, ev.state, ev.reason,
                                 ev.reason_uid, ev.end, ev.reason_user, ev.source))
        return out

    def load_auth(self) -> AuthState:
        state = AuthState()
        for (kind, key), rec in self.auth.items():
            rec = json.loads(json.dumps(rec))
            if kind == "master":
                state.master = str(rec["secret"])
            elif kind == "token":
                state.tokens[key] = rec
            elif kind == "key":
                state.keys[key] = rec
        return state

    def load_crontabs(self) -> dict[int, dict[str, Any]]:
        return {k: json.loads(json.dumps(v)) for k, v in self.crontabs.items()}

    def load_reservations(self) -> StoredReservations:
        return StoredReservations([Reservation.from_dict(self.reservations[name])
                                   for name in sorted(self.reservations)],
                                  self.reservation_next_id)

    def load_runtime_partitions(self) -> RuntimePartitions:
        return RuntimePartitions(
            None if self.partitions is None else
            [partition_from_dict(json.loads(json.dumps(p))) for p in self.partitions],
            {name: NodeAttributes(None if a.features is None else list(a.features), a.weight,
                                  a.comment) for name, a in self.node_attrs.items()})

    def close(self) -> None:
        pass
