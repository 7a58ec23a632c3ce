"""Advanced reservations (`scontrol create reservation`): the record, scontrol's parsing of
reservation options, and the pure rules the scheduler and the commands apply.

Slurm 22.05's behaviour (scontrol/create_res.c, slurmctld/reservation.c) where Corral has
it; what Corral accepts but does not act on is listed in `NOT_ACTED_ON` and shown by
`docs/POLICY.md`:

* a reservation holds whole nodes from StartTime to EndTime; jobs that name it
  (`--reservation`) run only on its nodes and only while it is active; other jobs stay off
  its nodes during its window (backfill lets them run before it when their time limit
  ends before it starts);
* Users= and Accounts= say who may use it (a leading "-" on the list: everyone but them);
* MAINT marks its nodes `maint` while active and makes jobs it blocks wait with
  "ReqNodeNotAvail, Reserved for maintenance"; IGNORE_JOBS lets it be created over running
  jobs; OVERLAP lets it share nodes with another reservation; DAILY/WEEKLY repeat it;
* FLEX and MAGNETIC are accepted, stored and shown, but not acted on;
* TRES=gres/gpu=N (which Slurm 22.05 itself refuses) reserves enough whole nodes to hold N
  GPUs.

Pure: no clock (`now` is an argument), no I/O.  The commands import this module, so it
imports only the standard library's light modules and `model`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.model.timefmt import TimeFormatError, parse_time_limit
from corral.model.timeparse import TimeParseError, parse_time

# Slurm's flag names in the order reservation_flags_string() prints them.
FLAG_ORDER = ("MAINT", "FLEX", "OVERLAP", "IGNORE_JOBS", "DAILY", "WEEKLY", "SPEC_NODES",
              "ALL_NODES", "MAGNETIC")
# Flags a request may set (SPEC_NODES/ALL_NODES are set by the controller from Nodes=).
REQUEST_FLAGS = ("MAINT", "FLEX", "OVERLAP", "IGNORE_JOBS", "DAILY", "WEEKLY", "MAGNETIC")
# Accepted, stored and shown, but not acted on by the scheduler.
NOT_ACTED_ON = frozenset({"FLEX", "MAGNETIC"})
PERIOD = {"DAILY": 86400, "WEEKLY": 7 * 86400}
YEAR_SECONDS = 365 * 86400  # Duration=UNLIMITED, as slurmctld stores it
# Slurm lets a reservation start up to this long in the past (MAX_RESV_DELAY).
MAX_RESV_DELAY = 600
MAINT_REASON = "ReqNodeNotAvail, Reserved for maintenance"

# scontrol's flag words: (Slurm's name, shortest prefix scontrol takes), parse_resv_flags()
_FLAG_WORDS = (("MAINTENANCE", 3, "MAINT"), ("OVERLAP", 1, "OVERLAP"), ("FLEX", 1, "FLEX"),
               ("IGNORE_JOBS", 1, "IGNORE_JOBS"), ("DAILY", 1, "DAILY"),
               ("WEEKLY", 1, "WEEKLY"), ("MAGNETIC", 3, "MAGNETIC"),
               ("PROMISCUOUS", 2, "MAGNETIC"))
# Slurm flags Corral does not have: refused by name rather than ignored.
_OTHER_FLAGS = ("HOURLY", "WEEKDAY", "WEEKEND", "ANY_NODES", "LICENSE_ONLY", "STATIC_ALLOC",
                "PART_NODES", "PURGE_COMP", "FIRST_CORES", "TIME_FLOAT", "REPLACE",
                "REPLACE_DOWN", "NO_HOLD_JOBS_AFTER_END")


@dataclass(slots=True)
class Reservation:
    name: str
    start: float
    end: float
    nodes: list[str]
    users: list[str] = field(default_factory=list)
    accounts: list[str] = field(default_factory=list)
    users_not: bool = False  # Users=-alice: everyone but alice
    accounts_not: bool = False
    flags: list[str] = field(default_factory=list)  # in FLAG_ORDER
    gpus: int = 0  # TRES=gres/gpu=N as asked
    partition: str | None = None
    cpus: int = 0  # the nodes' CPUs (CoreCnt=, TRES=cpu=)

    # ---- time ---------------------------------------------------------------------
    def window(self, now: float) -> tuple[float, float]:
        """(start, end) of the current or next occurrence: a DAILY/WEEKLY reservation
        that has ended moves on by whole periods (slurmctld's _advance_resv_time)."""
        period = next((PERIOD[f] for f in ("DAILY", "WEEKLY") if f in self.flags), 0)
        if not period or self.end > now:
            return self.start, self.end
        steps = int((now - self.end) // period) + 1
        return self.start + steps * period, self.end + steps * period

    def active(self, now: float) -> bool:
        start, end = self.window(now)
        return start <= now < end

    def over(self, now: float) -> bool:
        """Ended for good (a repeating one never is)."""
        return self.end <= now and not any(f in PERIOD for f in self.flags)

    # ---- access ---------------------------------------------------------------------
    def allows(self, user: str, account: str | None) -> bool:
        """Whether a job of `user` under `account` may use it (slurmctld's
        _valid_job_access_resv: the user list or the account list lets it in)."""
        if self.users:
            if (user in self.users) != self.users_not:
                return True
        if self.accounts and account:
            if (account in self.accounts) != self.accounts_not:
                return True
        return False

    @property
    def maint(self) -> bool:
        return "MAINT" in self.flags

    # ---- records ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "start": self.start, "end": self.end,
                "nodes": list(self.nodes), "users": list(self.users),
                "accounts": list(self.accounts), "users_not": self.users_not,
                "accounts_not": self.accounts_not, "flags": list(self.flags),
                "gpus": self.gpus, "partition": self.partition, "cpus": self.cpus}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Reservation:
        return Reservation(
            str(d["name"]), float(d["start"]), float(d["end"]), [str(n) for n in d["nodes"]],
            [str(u) for u in d.get("users") or []], [str(a) for a in d.get("accounts") or []],
            bool(d.get("users_not")), bool(d.get("accounts_not")),
            [str(f) for f in d.get("flags") or []], int(d.get("gpus") or 0),
            d.get("partition"), int(d.get("cpus") or 0))


def ordered_flags(flags: set[str] | list[str] | tuple[str, ...]) -> list[str]:
    return [f for f in FLAG_ORDER if f in flags]


def name_list(names: list[str], negated: bool) -> str | None:
    """Users=/Accounts= as Slurm prints them: "a,b", "-a,-b" when negated, (null) if none."""
    if not names:
        return None
    return ",".join(f"-{n}" if negated else n for n in names)


def split_names(text: str) -> tuple[list[str], bool]:
    """Users=/Accounts= value: (names, negated).  "-a,-b" means everyone but a and b."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    negated = bool(items) and all(s.startswith("-") for s in items)
    return [s.lstrip("-") for s in items], negated


# ---- scontrol's parsing of reservation options ----------------------------------------
class ResvParseError(ValueError):
    """A request scontrol refuses before sending it: `message` is its error line (printed
    as "scontrol: error: MESSAGE")."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


def _tag_is(tag: str, name: str, shortest: int) -> bool:
    """scontrol's xstrncasecmp(tag, name, MAX(len(tag), shortest)) == 0."""
    return len(tag) >= shortest and name.lower().startswith(tag.lower())


def parse_flags(text: str, msg: str) -> tuple[set[str], set[str]]:
    """Flags=: (flags to set, flags to clear); "-FLAG" clears (parse_resv_flags)."""
    add: set[str] = set()
    remove: set[str] = set()
    for raw in text.split(","):
        word = raw
        removing = False
        while word[:1] in ("+", "-"):
            removing = word[0] == "-"
            word = word[1:]
        hit = next((flag for name, shortest, flag in _FLAG_WORDS
                    if _tag_is(word, name, shortest)), None)
        if hit == "OVERLAP" and removing:
            hit = None  # "-OVERLAP" is refused by Slurm too
        if hit is None:
            other = next((n for n in _OTHER_FLAGS if word and n.startswith(word.upper())), None)
            if other is not None:
                raise ResvParseError(f"Flags={other} is not supported by Corral.  {msg}")
            raise ResvParseError(f"Error parsing flags {text}.  {msg}")
        (remove if removing else add).add(hit)
    return add, remove


def parse_options(args: list[str], now: float, *, update: bool) -> dict[str, Any]:
    """scontrol's _parse_res_options: the request body for the controller.

    Keys: name, start, end, duration (seconds; -1 UNLIMITED), nodes (text as given),
    node_cnt, users/accounts (text; with `users_op`/`accounts_op` "+"/"-" for +=/-=),
    flags_add/flags_remove, gpus, partition.  Raises ResvParseError with Slurm's wording.
    """
    msg = "No reservation update." if update else "No reservation created."
    out: dict[str, Any] = {}
    for arg in args:
        tag, eq, val = arg.partition("=")
        if not eq:
            if arg[:3].lower() == "res":
                continue
            raise ResvParseError(f"Misformatted parameter '{arg}', most options have a "
                                 f"parameter after '='.  {msg}")
        op = ""
        if tag[-1:] in ("+", "-"):
            op, tag = tag[-1], tag[:-1]
        if _tag_is(tag, "Accounts", 1) or _tag_is(tag, "Users", 1):
            key = "accounts" if _tag_is(tag, "Accounts", 1) else "users"
            if key in out:
                raise ResvParseError(f"Parameter {arg} specified more than once")
            out[key] = val
            if op:
                out[f"{key}_op"] = op
                op = ""
        elif _tag_is(tag, "Flags", 2):
            add, remove = parse_flags(f"{op}{val}" if op else val, msg)
            op = ""
            out.setdefault("flags_add", set()).update(add)
            out.setdefault("flags_remove", set()).update(remove)
        elif _tag_is(tag, "Groups", 1):
            raise ResvParseError(f"Groups= is not supported by Corral: name Users= or "
                                 f"Accounts=.  {msg}")
        elif _tag_is(tag, "ReservationName", 1):
            out["name"] = val
        elif _tag_is(tag, "StartTime", 2):
            out["start"] = _time_value(val, now, f"Invalid start time {arg}.  {msg}")
        elif _tag_is(tag, "EndTime", 1):
            out["end"] = _time_value(val, now, f"Invalid end time {arg}.  {msg}")
        elif _tag_is(tag, "Duration", 1):
            try:
                out["duration"] = parse_time_limit(val)
            except TimeFormatError:
                raise ResvParseError(f"Invalid duration {arg}.  {msg}") from None
            if op:
                out["duration_op"] = op
                op = ""
        elif _tag_is(tag, "NodeCnt", 5) or _tag_is(tag, "NodeCount", 5):
            out["node_cnt"] = _count(val, f"Invalid node count {val}")
        elif _tag_is(tag, "Nodes", 5):
            out["nodes"] = val
        elif _tag_is(tag, "PartitionName", 1):
            out["partition"] = val
        elif _tag_is(tag, "TRES", 1):
            _parse_tres(val, out)
        elif any(_tag_is(tag, n, s) for n, s in (
                ("BurstBuffer", 2), ("MaxStartDelay", 2), ("CoreCnt", 5), ("CoreCount", 5),
                ("CPUCnt", 5), ("CPUCount", 5), ("Features", 2), ("Licenses", 2),
                ("Watts", 1))):
            raise ResvParseError(f"{tag}= is not supported by Corral.  {msg}")
        elif tag[:3].lower() == "res":
            continue
        else:
            raise ResvParseError(f"Unknown parameter {arg}.  {msg}")
        if op:
            raise ResvParseError(f"The +=/-= notation is not supported when updating "
                                 f"{tag}.  {msg}")
    return out


def _time_value(val: str, now: float, error: str) -> int:
    try:
        return parse_time(val, now)
    except TimeParseError:
        raise ResvParseError(error) from None


def _count(val: str, error: str) -> int:
    if not val.isdigit() or int(val) <= 0:
        raise ResvParseError(error)
    return int(val)


def _parse_tres(val: str, out: dict[str, Any]) -> None:
    """TRES=node=N,gres/gpu=N (state_control_parse_resv_tres' wording for the rest)."""
    for token in val.split(","):
        name, eq, amount = token.partition("=")
        if not eq or not amount:
            raise ResvParseError(f"invalid TRES '{token}'")
        low = name.lower()
        if low == "node":
            out["node_cnt"] = _count(amount, f"Invalid TRES node count {amount}")
        elif low in ("gres/gpu", "gpu") or low.startswith("gres/gpu:"):
            out["gpus"] = _count(amount, f"invalid TRES '{token}'")
        else:
            raise ResvParseError(f"TRES type '{name}' not supported with reservations")


def check_create(req: dict[str, Any]) -> None:
    """scontrol_create_res's checks before sending, in its order."""
    msg = "No reservation created."
    if "start" not in req:
        raise ResvParseError(f"A start time must be given.  {msg}")
    if "end" not in req and "duration" not in req:
        raise ResvParseError(f"An end time or duration must be given.  {msg}")
    duration = req.get("duration")
    if "end" in req and duration is not None and duration >= 0 \
            and req["start"] + duration != req["end"]:
        raise ResvParseError(f"StartTime + Duration does not equal EndTime.  {msg}")
    if "end" in req and req["start"] > req["end"]:
        raise ResvParseError(f"Start time cannot be after end time.  {msg}")
    if not req.get("nodes") and not req.get("node_cnt") and not req.get("gpus") \
            and not req.get("partition"):
        raise ResvParseError("CoreCnt, Nodes, NodeCnt, BurstBuffer, Licenses or Watts must "
                             f"be specified.  {msg}")
    if not req.get("users") and not req.get("accounts"):
        raise ResvParseError(f"Either Users/Groups and/or Accounts must be specified.  {msg}")


def end_of(start: float, end: float | None, duration: int | None) -> float:
    """EndTime from the request (slurmctld: Duration=UNLIMITED is a year)."""
    if end is not None:
        return float(end)
    if duration is None or duration < 0:
        return float(start + YEAR_SECONDS)
    return float(start + duration)


# ---- what the scheduler reads -----------------------------------------------------------
def blocks_partition(resv: Reservation, partition_nodes: list[str] | tuple[str, ...]) -> bool:
    """Whether a job of a partition with these nodes that overlaps `resv`'s window cannot
    run at all (job_test_resv's ESLURM_RESERVATION_MAINT): the reservation holds every
    node, or it is MAINT and holds every node of the partition."""
    if "ALL_NODES" in resv.flags:
        return True
    return resv.maint and bool(partition_nodes) and set(partition_nodes) <= set(resv.nodes)


def job_overlaps(resv: Reservation, now: float, time_limit: int) -> bool:
    """Whether a job starting now with this time limit (-1: none) would run into the
    reservation's current or next window."""
    start, end = resv.window(now)
    job_end = float("inf") if time_limit < 0 else now + time_limit
    return start < job_end and now < end
