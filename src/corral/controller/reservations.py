"""Advanced reservations in the controller: the book of reservations, its API routes
(`scontrol create|update|delete|show reservation`), the submit check of `--reservation`,
and what the scheduling pass and sinfo read of it.

Persistence: each reservation is a row of the store's `reservations` table (store
migration 6; schema 5 kept the whole book as the payload row of job id 0), written
through the core's effects (`PersistReservation`) and the shell's group-commit writer
with the counter of generated names.  A change answers only once it is durable, so
reservations survive a controller restart.  Slurm's rules (slurmctld/reservation.c) and
messages (slurm_errno.c) are followed; see model/reservation.py for what is acted on.
"""

from __future__ import annotations

import logging
import pwd
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the routes' types only: the simulator imports this module without a server
    from aiohttp import web

from corral.controller.core.effects import PersistReservation
from corral.controller.errors import (
    ESLURM_INVALID_ACCOUNT,
    ESLURM_INVALID_NODE_NAME,
    ESLURM_INVALID_PARTITION_NAME,
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
    ESLURM_USER_ID_MISSING,
    SlurmError,
)
from corral.model import hostlists
from corral.model.reservation import (
    MAX_RESV_DELAY,
    REQUEST_FLAGS,
    Reservation,
    end_of,
    ordered_flags,
    split_names,
)
from corral.store.base import ReservationChange, StoredReservations

log = logging.getLogger("corral.controller")

# slurm_errno.h (22.05)
ESLURM_NODES_BUSY = 2016
ESLURM_RESERVATION_ACCESS = 2052
ESLURM_RESERVATION_INVALID = 2053
ESLURM_INVALID_TIME_VALUE = 2054
ESLURM_RESERVATION_BUSY = 2055
ESLURM_RESERVATION_OVERLAP = 2058
ESLURM_RESERVATION_EMPTY = 2080
ESLURM_RESERVATION_NAME_DUP = 2082


def _err(message: str, errno: int, status: int = 400) -> SlurmError:
    return SlurmError(message, errno, status)


def invalid_resv() -> SlurmError:
    return _err("Requested reservation is invalid", ESLURM_RESERVATION_INVALID, 404)


class ReservationBook:
    """Every reservation by name, and the counter of generated names."""

    def __init__(self, ctl: Any) -> None:
        self.ctl = ctl
        try:
            stored = ctl.store.load_reservations()
        except Exception:
            log.exception("could not load the reservations")
            stored = StoredReservations()
        self.by_name: dict[str, Reservation] = {r.name: r for r in stored.reservations}
        self.next_id = stored.next_id

    def save(self, *names: str) -> None:
        """Persist the named reservations as they are now (removed when gone)."""
        for name in names:
            r = self.by_name.get(name)
            copy = None if r is None else Reservation.from_dict(r.to_dict())
            self.ctl.core.out.emit(PersistReservation(ReservationChange(name, copy,
                                                                        self.next_id)))

    def live(self, now: float) -> list[Reservation]:
        """The reservations not over, oldest start first; ended ones are dropped (Slurm
        purges a reservation at its end)."""
        gone = [name for name, r in self.by_name.items() if r.over(now)]
        if gone:
            for name in gone:
                del self.by_name[name]
            log.info("reservations ended: %s", ", ".join(gone))
            self.save(*gone)
        return sorted(self.by_name.values(), key=lambda r: (r.window(now)[0], r.name))


def book_of(ctl: Any) -> ReservationBook:
    book = getattr(ctl, "resv_book", None)
    if isinstance(book, ReservationBook):
        return book
    book = ReservationBook(ctl)
    ctl.resv_book = book
    return book


# ---- what others read ---------------------------------------------------------------
def scheduling_reservations(ctl: Any, now: float) -> tuple[Reservation, ...]:
    """The pass's reservations (an input of the snapshot)."""
    return tuple(book_of(ctl).live(now))


def node_marks(ctl: Any, now: float) -> dict[str, str]:
    """Nodes in an active reservation: "maint" (MAINT) or "resv", for sinfo."""
    out: dict[str, str] = {}
    for r in book_of(ctl).live(now):
        if r.active(now):
            for n in r.nodes:
                if out.get(n) != "maint":
                    out[n] = "maint" if r.maint else "resv"
    return out


def _is_operator(ctl: Any, who: Any) -> bool:
    acc = getattr(ctl, "accounts", None)
    return bool(who.operator or (acc is not None and acc.is_admin(who)))


def check_job_reservation(ctl: Any, who: Any, job: Any) -> None:
    """At submission: the reservation exists and the job may use it."""
    r = book_of(ctl).by_name.get(job.reservation)
    if r is None or r.over(ctl.clock()):
        raise invalid_resv()
    if not _is_operator(ctl, who) and not r.allows(job.user, job.account):
        raise _err("Access denied to requested reservation", ESLURM_RESERVATION_ACCESS, 403)


# ---- create / update / delete ------------------------------------------------------
def _check_users(text: str) -> tuple[list[str], bool]:
    names, negated = split_names(text)
    for name in names:
        try:
            pwd.getpwnam(name)
        except KeyError:
            raise _err("Invalid user id", ESLURM_USER_ID_MISSING) from None
    return names, negated


def _check_accounts(ctl: Any, text: str) -> tuple[list[str], bool]:
    names, negated = split_names(text)
    acc = getattr(ctl, "accounts", None)
    if acc is not None and "associations" in getattr(ctl, "enforce", ()):
        for name in names:
            if name not in acc.db.accounts:
                raise _err("Invalid account or account/partition combination specified",
                           ESLURM_INVALID_ACCOUNT)
    return names, negated


def _merge(old: list[str], text: str, op: str | None) -> list[str]:
    names, _ = split_names(text)
    if op == "+":
        return old + [n for n in names if n not in old]
    if op == "-":
        return [n for n in old if n not in names]
    return names


def _node_order(ctl: Any) -> list[str]:
    from corral.sched.select import natural_key

    return sorted(ctl.nodes, key=natural_key)


def _busy_until(ctl: Any, name: str, now: float) -> float:
    """When the jobs running on node `name` end (start + time limit; inf without one)."""
    end = 0.0
    for j in ctl.running.values():
        if any(a.node == name for a in j.alloc):
            if j.time_limit is None or j.time_limit < 0:
                return float("inf")
            end = max(end, (j.start_time or now) + j.time_limit)
    return end


def _overlaps(book: ReservationBook, r: Reservation, nodes: list[str], now: float) -> bool:
    start, end = r.window(now)
    for other in book.by_name.values():
        if other.name == r.name or "OVERLAP" in other.flags:
            continue
        o_start, o_end = other.window(now)
        if o_start < end and start < o_end and set(other.nodes) & set(nodes):
            return True
    return False


def _resolve_nodes(ctl: Any, book: ReservationBook, r: Reservation, req: dict[str, Any],
                   now: float) -> None:
    """Nodes=, NodeCnt= or TRES=gres/gpu=N into the node list (slurmctld picks nodes for a
    count: usable ones, not in another reservation then, idle first, in name order)."""
    flags = [f for f in r.flags if f not in ("SPEC_NODES", "ALL_NODES")]
    part = ctl.partitions.get(r.partition) if r.partition else None
    text = req.get("nodes")
    if text:
        if str(text).upper() == "ALL":
            names = list(part.nodes) if part is not None else _node_order(ctl)
            flags += ["SPEC_NODES"] + ([] if part is not None else ["ALL_NODES"])
        else:
            try:
                names = hostlists.expand(str(text))
            except hostlists.HostlistError:
                raise _err("Invalid node name specified", ESLURM_INVALID_NODE_NAME) from None
            if not names or any(n not in ctl.nodes for n in names):
                raise _err("Invalid node name specified", ESLURM_INVALID_NODE_NAME)
            flags.append("SPEC_NODES")
        r.nodes = sorted(dict.fromkeys(names), key=_node_order(ctl).index)
    elif req.get("node_cnt") or req.get("gpus"):
        pool = [n for n in (part.nodes if part is not None else _node_order(ctl))
                if n in ctl.nodes]
        want_nodes = int(req.get("node_cnt") or 0)
        want_gpus = int(req.get("gpus") or 0)
        start, _ = r.window(now)
        shared = "OVERLAP" in flags
        free = [n for n in pool if ctl.nodes[n].usable
                and (shared or not _overlaps(book, r, [n], now))
                and ("IGNORE_JOBS" in flags or _busy_until(ctl, n, now) <= start)]
        free.sort(key=lambda n: (ctl.nodes[n].job_count > 0, pool.index(n)))
        chosen: list[str] = []
        gpus = 0
        for n in free:
            if len(chosen) >= want_nodes and gpus >= want_gpus:
                break
            if want_gpus and not want_nodes and not ctl.nodes[n].gpus:
                continue
            chosen.append(n)
            gpus += ctl.nodes[n].gpus
        if len(chosen) < want_nodes or gpus < want_gpus:
            total_gpus = sum(ctl.nodes[n].gpus for n in pool)
            if len(pool) < want_nodes or total_gpus < want_gpus:
                raise _err("Requested node configuration is not available",
                           ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
            raise _err("Requested nodes are busy", ESLURM_NODES_BUSY)
        r.nodes = sorted(chosen, key=pool.index)
    elif part is not None and not r.nodes:
        r.nodes = list(part.nodes)
    r.flags = ordered_flags(set(flags))
    r.cpus = sum(ctl.nodes[n].cpus for n in r.nodes if n in ctl.nodes)


def _check_nodes_free(ctl: Any, book: ReservationBook, r: Reservation, now: float) -> None:
    if "OVERLAP" not in r.flags and _overlaps(book, r, r.nodes, now):
        raise _err("Requested reservation overlaps with another reservation",
                   ESLURM_RESERVATION_OVERLAP)
    if "IGNORE_JOBS" not in r.flags:
        start, _ = r.window(now)
        if any(_busy_until(ctl, n, now) > start for n in r.nodes):
            raise _err("Requested nodes are busy", ESLURM_NODES_BUSY)


def _flags_of(req: dict[str, Any], old: list[str]) -> list[str]:
    add = set(req.get("flags_add") or ()) & set(REQUEST_FLAGS)
    remove = set(req.get("flags_remove") or ())
    return ordered_flags((set(old) | add) - remove)


def create(ctl: Any, who: Any, req: dict[str, Any]) -> Reservation:
    if not _is_operator(ctl, who):
        raise _err("Invalid user id", ESLURM_USER_ID_MISSING, 403)
    book = book_of(ctl)
    now = ctl.clock()
    book.live(now)
    start = float(req.get("start", now))
    if start < now - MAX_RESV_DELAY:
        raise _err("Invalid time specified", ESLURM_INVALID_TIME_VALUE)
    end = end_of(start, req.get("end"), req.get("duration"))
    if end < now - MAX_RESV_DELAY or end < start:
        raise _err("Invalid time specified", ESLURM_INVALID_TIME_VALUE)
    partition = req.get("partition") or None
    if partition is not None and partition not in ctl.partitions:
        raise _err("Invalid partition name specified", ESLURM_INVALID_PARTITION_NAME)
    users, users_not = _check_users(str(req.get("users") or ""))
    accounts, accounts_not = _check_accounts(ctl, str(req.get("accounts") or ""))
    if not users and not accounts:
        raise _err("Reservation request lacks users, groups or accounts",
                   ESLURM_RESERVATION_EMPTY)
    r = Reservation(name="", start=start, end=end, nodes=[], users=users, accounts=accounts,
                    users_not=users_not, accounts_not=accounts_not,
                    flags=_flags_of(req, []), gpus=int(req.get("gpus") or 0),
                    partition=partition)
    if not (req.get("nodes") or req.get("node_cnt") or req.get("gpus") or partition):
        raise _err("Invalid node name specified", ESLURM_INVALID_NODE_NAME)
    _resolve_nodes(ctl, book, r, req, now)
    if req.get("nodes"):
        _check_nodes_free(ctl, book, r, now)
    name = str(req.get("name") or "")
    if name:
        if name in book.by_name:
            raise _err("Duplicate reservation name", ESLURM_RESERVATION_NAME_DUP)
    else:  # slurmctld's _generate_resv_name: first account, else first user, and an id
        key = (accounts or users)[0]
        while True:
            name = f"{key}_{book.next_id}"
            book.next_id += 1
            if name not in book.by_name:
                break
    r.name = name
    book.by_name[name] = r
    book.save(name)
    ctl.request_schedule()
    log.info("reservation %s created by %s: %s", name, who.user, r.to_dict())
    return r


def update(ctl: Any, who: Any, name: str, req: dict[str, Any]) -> Reservation:
    if not _is_operator(ctl, who):
        raise _err("Invalid user id", ESLURM_USER_ID_MISSING, 403)
    book = book_of(ctl)
    now = ctl.clock()
    book.live(now)
    old = book.by_name.get(name)
    if old is None:
        raise invalid_resv()
    r = Reservation.from_dict(old.to_dict())
    if "start" in req:
        if req["start"] < now - MAX_RESV_DELAY:
            raise _err("Invalid time specified", ESLURM_INVALID_TIME_VALUE)
        length = r.end - r.start
        r.start = float(req["start"])
        if "end" not in req and "duration" not in req:
            r.end = r.start + length  # slurmctld keeps the duration when StartTime moves
    if "end" in req:
        r.end = float(req["end"])
    if "duration" in req:
        d = int(req["duration"])
        op = req.get("duration_op")
        if op == "+":
            r.end += d
        elif op == "-":
            r.end -= d
        else:
            r.end = end_of(r.start, None, d)
    if r.end <= r.start or r.end < now:
        raise _err("Invalid time specified", ESLURM_INVALID_TIME_VALUE)
    if "users" in req:
        _check_users(str(req["users"]))
        r.users = _merge(r.users, str(req["users"]), req.get("users_op"))
        if not req.get("users_op"):
            r.users_not = split_names(str(req["users"]))[1]
    if "accounts" in req:
        _check_accounts(ctl, str(req["accounts"]))
        r.accounts = _merge(r.accounts, str(req["accounts"]), req.get("accounts_op"))
        if not req.get("accounts_op"):
            r.accounts_not = split_names(str(req["accounts"]))[1]
    if not r.users and not r.accounts:
        raise _err("Reservation request lacks users, groups or accounts",
                   ESLURM_RESERVATION_EMPTY)
    if "partition" in req:
        if req["partition"] not in ctl.partitions:
            raise _err("Invalid partition name specified", ESLURM_INVALID_PARTITION_NAME)
        r.partition = req["partition"]
    if "gpus" in req:
        r.gpus = int(req["gpus"])
    r.flags = _flags_of(req, r.flags)
    if req.get("nodes") or req.get("node_cnt") or "gpus" in req:
        _resolve_nodes(ctl, book, r, req, now)
    if req.get("nodes") or "start" in req or "end" in req or "duration" in req:
        if "OVERLAP" not in r.flags and _overlaps(book, r, r.nodes, now):
            raise _err("Requested reservation overlaps with another reservation",
                       ESLURM_RESERVATION_OVERLAP)
    book.by_name[name] = r
    book.save(name)
    ctl.request_schedule()
    log.info("reservation %s updated by %s: %s", name, who.user, r.to_dict())
    return r


def delete(ctl: Any, who: Any, name: str) -> None:
    if not _is_operator(ctl, who):
        raise _err("Invalid user id", ESLURM_USER_ID_MISSING, 403)
    book = book_of(ctl)
    book.live(ctl.clock())
    if name not in book.by_name:
        raise invalid_resv()
    if any(getattr(j, "reservation", None) == name for j in ctl.running.values()):
        raise _err("Requested reservation is in use", ESLURM_RESERVATION_BUSY)
    del book.by_name[name]
    book.save(name)
    ctl.request_schedule()
    log.info("reservation %s deleted by %s", name, who.user)


# ---- the API --------------------------------------------------------------------------
def add_routes(router: web.UrlDispatcher, ctl: Any) -> None:
    from corral.controller.server import json_body as body
    from corral.controller.server import json_response, peer_identity

    book_of(ctl)  # loaded at startup: the first pass after a restart sees them


    async def list_all(request: web.Request) -> web.Response:
        peer_identity(request, ctl)
        now = ctl.clock()
        out = []
        for r in book_of(ctl).live(now):
            d = r.to_dict()
            d["start"], d["end"] = r.window(now)
            d["active"] = r.active(now)
            out.append(d)
        return json_response({"reservations": out, "now": now})

    async def create_route(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        r = create(ctl, who, await body(request))
        await ctl.durable()
        return json_response({"name": r.name})

    async def update_route(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        update(ctl, who, request.match_info["name"], await body(request))
        await ctl.durable()
        return json_response({"ok": True})

    async def delete_route(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        delete(ctl, who, request.match_info["name"])
        await ctl.durable()
        return json_response({"ok": True})

    router.add_get("/v1/reservations", list_all)
    router.add_post("/v1/reservations", create_route)
    router.add_patch("/v1/reservations/{name}", update_route)
    router.add_delete("/v1/reservations/{name}", delete_route)
