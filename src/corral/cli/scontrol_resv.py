"""scontrol's reservation commands: `create | update | delete | show reservation`, and
the listing `sinfo -T` prints.  scontrol.py hands these over (imported only for them).

Parsing and the checks scontrol makes before sending follow scontrol/create_res.c (Slurm
22.05); the controller's refusals are printed as slurm_perror does ("Error creating the
reservation: Requested nodes are busy"), and every refusal exits 1.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any
from urllib.parse import quote

from corral.cli import client

# Imported by every scontrol run (to ask `names_reservation`): what the commands below
# need is imported when they run.
NULL = "(null)"


def is_reservation_tag(word: str) -> bool:
    """A word scontrol takes as naming a reservation: ReservationName[=…] abbreviated to
    at least three letters (`res`, `reservation`, `ReservationName=x`)."""
    tag = word.partition("=")[0].lower()
    return len(tag) >= 3 and "reservationname".startswith(tag)


def names_reservation(command: str, rest: list[str]) -> bool:
    """Whether `scontrol COMMAND REST…` is about a reservation, as scontrol.c decides:
    show's entity, delete's first word, or for create and update any word naming one
    (an update naming a job is the job's)."""
    if not rest:
        return False
    if command == "show":
        word = rest[0].lower()
        return "reservations".startswith(word) or "reservationname".startswith(word)
    if command == "delete":
        return is_reservation_tag(rest[0])
    if command == "update" and any(w.partition("=")[0].lower() in ("jobid", "job", "jobname")
                                   for w in rest):
        return False
    return command in ("create", "update") and any(map(is_reservation_tag, rest))


def _error(text: str) -> int:
    sys.stderr.write(f"scontrol: error: {text}\n")
    return 1


def _time_spec() -> str | None:
    return os.environ.get("SLURM_TIME_FORMAT")


# ---- show ---------------------------------------------------------------------------
def format_reservation(r: dict[str, Any], now: float, *, one_liner: bool = False,
                       spec: str | None = None) -> str:
    """slurm_sprint_reservation_info: one reservation as `scontrol show reservation`
    prints it.  Flags Corral accepts but does not act on are marked after the record
    (on stderr by the caller), never inside Slurm's fields."""
    from corral.model.reservation import name_list
    from corral.model.timefmt import format_hms, format_timestamp

    start, end = float(r["start"]), float(r["end"])
    duration = format_hms(end - start) if end >= start else "N/A"
    sep = " " if one_liner else "\n   "
    nodes = r.get("nodes") or []
    from corral.model.hostlists import compress

    tres = f"cpu={int(r.get('cpus') or 0)}"
    if r.get("gpus"):
        tres += f",gres/gpu={int(r['gpus'])}"
    state = "ACTIVE" if start <= now <= end else "INACTIVE"
    lines = [
        f"ReservationName={r['name']} StartTime={format_timestamp(start, spec=spec, now=now)} "
        f"EndTime={format_timestamp(end, spec=spec, now=now)} Duration={duration}",
        f"Nodes={compress(nodes) if nodes else NULL} NodeCnt={len(nodes)} "
        f"CoreCnt={int(r.get('cpus') or 0)} Features={NULL} "
        f"PartitionName={r.get('partition') or NULL} Flags={','.join(r.get('flags') or [])}",
        f"TRES={tres}",
        f"Users={name_list(r.get('users') or [], bool(r.get('users_not'))) or NULL} "
        f"Groups={NULL} "
        f"Accounts={name_list(r.get('accounts') or [], bool(r.get('accounts_not'))) or NULL} "
        f"Licenses={NULL} State={state} BurstBuffer={NULL} Watts=n/a",
        f"MaxStartDelay={NULL}",
    ]
    return sep.join(lines) + ("\n" if one_liner else "\n\n")


def _load() -> tuple[list[dict[str, Any]], float]:
    ans = client.get("/v1/reservations")
    return list(ans.get("reservations") or []), float(ans.get("now") or time.time())


def show(name: str | None, one_liner: bool) -> int:
    try:
        resvs, now = _load()
    except client.ApiError as e:
        sys.stderr.write(f"slurm_load_reservations error: {e.message}\n")
        return 1
    if name:
        resvs = [r for r in resvs if r["name"] == name]
        if not resvs:
            sys.stdout.write(f"Reservation {name} not found\n")
            return 1
    if not resvs:
        sys.stdout.write("No reservations in the system\n")
        return 0
    from corral.model.reservation import NOT_ACTED_ON

    spec = _time_spec()
    sys.stdout.write("".join(format_reservation(r, now, one_liner=one_liner, spec=spec)
                             for r in resvs))
    ignored = sorted({f for r in resvs for f in r.get("flags") or [] if f in NOT_ACTED_ON})
    if ignored:
        sys.stderr.write(f"scontrol: note: Flags={','.join(ignored)} accepted but not acted "
                         "on by Corral\n")
    return 0


def format_sinfo_reservations(resvs: list[dict[str, Any]], now: float, *,
                              header: bool = True, spec: str | None = None) -> str:
    """sinfo -T (print_sinfo_reservation)."""
    if not resvs:
        return "No reservations in the system\n"
    from corral.model.hostlists import compress
    from corral.model.timefmt import format_hms, format_timestamp

    width = max([9] + [len(str(r["name"])) for r in resvs])
    out = []
    if header:
        out.append(f"{'RESV_NAME':<{width}}  {'STATE':>8}  {'START_TIME':>19}  "
                   f"{'END_TIME':>19}  {'DURATION':>11}  NODELIST\n")
    for r in resvs:
        start, end = float(r["start"]), float(r["end"])
        state = "ACTIVE" if start <= now <= end else "INACTIVE"
        out.append(f"{r['name']:<{width}}  {state:>8}  "
                   f"{format_timestamp(start, spec=spec, now=now):>19}  "
                   f"{format_timestamp(end, spec=spec, now=now):>19}  "
                   f"{format_hms(end - start):>11}  {compress(r.get('nodes') or [])}\n")
    return "".join(out)


def sinfo_reservations(header: bool) -> int:
    resvs, now = _load()
    sys.stdout.write(format_sinfo_reservations(resvs, now, header=header, spec=_time_spec()))
    return 0


# ---- create / update / delete -------------------------------------------------------
def _body(req: dict[str, Any]) -> dict[str, Any]:
    out = dict(req)
    for key in ("flags_add", "flags_remove"):
        if key in out:
            out[key] = sorted(out[key])
    return out


def create(args: list[str]) -> int:
    from corral.model.reservation import NOT_ACTED_ON, ResvParseError, check_create, parse_options

    try:
        req = parse_options(args, time.time(), update=False)
        check_create(req)
    except ResvParseError as e:
        return _error(e.message)
    try:
        ans = client.post("/v1/reservations", _body(req))
    except client.ApiError as e:
        sys.stderr.write(f"Error creating the reservation: {e.message}\n")
        if e.message in ("Requested node configuration is not available",
                         "Requested nodes are busy"):
            sys.stdout.write("Note, unless nodes are directly requested a reservation must "
                             "exist in a single partition.\n"
                             "If no partition is requested the default partition is "
                             "assumed.\n")
        return 1
    sys.stdout.write(f"Reservation created: {ans['name']}\n")
    ignored = sorted(set(req.get("flags_add") or ()) & NOT_ACTED_ON)
    if ignored:
        sys.stderr.write(f"scontrol: note: Flags={','.join(ignored)} accepted but not acted "
                         "on by Corral\n")
    return 0


def update(args: list[str]) -> int:
    from corral.model.reservation import ResvParseError, parse_options

    try:
        req = parse_options(args, time.time(), update=True)
    except ResvParseError as e:
        return _error(e.message)
    name = req.pop("name", None)
    if not name:
        return _error("Reservation must be given.  No reservation update.")
    try:
        client.patch(f"/v1/reservations/{quote(name, safe='')}", _body(req))
    except client.ApiError as e:
        sys.stderr.write(f"Error updating the reservation: {e.message}\n")
        return 1
    sys.stdout.write("Reservation updated.\n")
    return 0


def delete(args: list[str]) -> int:
    """`delete ReservationName=NAME` or `delete reservation NAME` (_delete_it)."""
    if len(args) == 1 and "=" in args[0]:
        label, name = args[0], args[0].partition("=")[2]
    elif len(args) == 2:
        label, name = args[0], args[1]
    else:
        return _error("Proper format is 'delete <ENTITY>=<ID>' or 'delete <ENTITY> <ID>'")
    try:
        client.request("DELETE", f"/v1/reservations/{quote(name, safe='')}")
    except client.ApiError as e:
        sys.stderr.write(f"delete_reservation {label}: {e.message}\n")
        return 1
    return 0


def run(command: str, rest: list[str], one_liner: bool) -> int:
    """scontrol COMMAND … for a reservation (scontrol.py decided it names one)."""
    if command == "show":
        return show(rest[1] if len(rest) > 1 else None, one_liner)
    if command == "create":
        return create(rest)
    if command == "update":
        return update(rest)
    return delete(rest)
