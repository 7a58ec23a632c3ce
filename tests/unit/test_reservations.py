"""Advanced reservations, the pure parts and the controller in process: scontrol's parsing,
the record's rules (window, access, what blocks a partition), eligibility, the backfill
timeline blocking, `scontrol show reservation`'s format, and the controller's book
(create/update/delete, scheduling around a reservation, surviving a restart)."""

from __future__ import annotations

import pwd
from typing import Any

import pytest

from corral.cli.scontrol_resv import (
    format_reservation,
    format_sinfo_reservations,
    names_reservation,
)
from corral.controller import reservations as resv_ctl
from corral.controller.errors import SlurmError
from corral.controller.harness import Harness
from corral.model.job import JobState
from corral.model.node import Partition
from corral.model.reasons import ReasonCode
from corral.model.reservation import (
    Reservation,
    ResvParseError,
    blocks_partition,
    check_create,
    job_overlaps,
    parse_options,
)
from corral.sched.backfill import schedule
from corral.sched.eligibility import reservation_reason
from corral.sched.snapshot import NodeView, PendingView, Snapshot
from corral.store.memory import MemoryStore

NOW = 1_700_000_000.0


# ---- scontrol's parsing ------------------------------------------------------------------
def test_parse_create_request() -> None:
    req = parse_options(["reservation", "ReservationName=maint", "StartTime=now+1hour",
                         "Duration=120", "Nodes=ALL", "Flags=MAINT,IGNORE_JOBS", "Users=root",
                         "TRES=gres/gpu=4"], NOW, update=False)
    assert req["name"] == "maint" and req["start"] == NOW + 3600
    assert req["duration"] == 7200 and req["nodes"] == "ALL" and req["users"] == "root"
    assert req["flags_add"] == {"MAINT", "IGNORE_JOBS"} and req["gpus"] == 4
    check_create(req)  # complete: no error


def test_parse_abbreviations_and_plus_minus() -> None:
    req = parse_options(["Res=x", "Users+=alice", "Flags=-MAINT,FLEX", "EndTime=now+10minutes",
                         "NodeCnt=2"], NOW, update=True)
    assert req["name"] == "x" and req["users"] == "alice" and req["users_op"] == "+"
    assert req["flags_add"] == {"FLEX"} and req["flags_remove"] == {"MAINT"}
    assert req["end"] == NOW + 600 and req["node_cnt"] == 2


@pytest.mark.parametrize(("args", "message"), [
    (["StartTime"], "Misformatted parameter 'StartTime', most options have a parameter "
                    "after '='.  No reservation created."),
    (["Bogus=1"], "Unknown parameter Bogus=1.  No reservation created."),
    (["StartTime=yesterdayish"], "Invalid start time StartTime=yesterdayish.  "
                                 "No reservation created."),
    (["Duration=abc"], "Invalid duration Duration=abc.  No reservation created."),
    (["Flags=MAINT,BOGUS"], "Error parsing flags MAINT,BOGUS.  No reservation created."),
    (["TRES=license/x=1"], "TRES type 'license/x' not supported with reservations"),
    (["Users=a", "Users=b"], "Parameter Users=b specified more than once"),
    (["NodeCnt=0"], "Invalid node count 0"),
    (["StartTime+=now"], "The +=/-= notation is not supported when updating StartTime.  "
                         "No reservation created."),
])
def test_parse_errors(args: list[str], message: str) -> None:
    with pytest.raises(ResvParseError) as err:
        parse_options(args, NOW, update=False)
    assert err.value.message == message


@pytest.mark.parametrize(("args", "message"), [
    (["Duration=60", "Nodes=n1", "Users=root"], "A start time must be given.  "
                                                 "No reservation created."),
    (["StartTime=now", "Nodes=n1", "Users=root"], "An end time or duration must be given.  "
                                                   "No reservation created."),
    (["StartTime=now", "Duration=60", "Users=root"],
     "CoreCnt, Nodes, NodeCnt, BurstBuffer, Licenses or Watts must be specified.  "
     "No reservation created."),
    (["StartTime=now", "Duration=60", "Nodes=n1"],
     "Either Users/Groups and/or Accounts must be specified.  No reservation created."),
    (["StartTime=now+1hour", "EndTime=now", "Nodes=n1", "Users=root"],
     "Start time cannot be after end time.  No reservation created."),
])
def test_create_needs(args: list[str], message: str) -> None:
    with pytest.raises(ResvParseError) as err:
        check_create(parse_options(args, NOW, update=False))
    assert err.value.message == message


def test_which_scontrol_commands_are_about_reservations() -> None:
    assert names_reservation("show", ["reservation"]) and names_reservation("show", ["res"])
    assert not names_reservation("show", ["job"]) and not names_reservation("show", [])
    assert names_reservation("create", ["reservation", "Nodes=n1"])
    assert names_reservation("create", ["StartTime=now", "ReservationName=x"])
    assert not names_reservation("create", ["PartitionName=p"])
    assert names_reservation("update", ["ReservationName=x", "Duration=10"])
    assert not names_reservation("update", ["JobId=5", "Reservation=x"])
    assert names_reservation("delete", ["reservation", "x"])
    assert not names_reservation("delete", ["PartitionName=p"])


# ---- the record's rules ----------------------------------------------------------------
def resv(**kw: Any) -> Reservation:
    base: dict[str, Any] = {"name": "r", "start": NOW + 3600, "end": NOW + 7200,
                            "nodes": ["n1", "n2"], "users": ["alice"]}
    base.update(kw)
    return Reservation(**base)


def test_window_repeats_daily() -> None:
    r = resv(start=NOW - 7200, end=NOW - 3600, flags=["DAILY"])
    assert r.window(NOW) == (NOW - 7200 + 86400, NOW - 3600 + 86400)
    assert not r.over(NOW) and not r.active(NOW)
    assert resv(start=NOW - 7200, end=NOW - 3600).over(NOW)


def test_access_by_user_or_account_and_negation() -> None:
    assert resv().allows("alice", None) and not resv().allows("bob", None)
    assert resv(users=[], accounts=["physics"]).allows("bob", "physics")
    everyone_but = resv(users=["alice"], users_not=True)
    assert everyone_but.allows("bob", None) and not everyone_but.allows("alice", None)


def test_what_blocks_a_partition() -> None:
    assert blocks_partition(resv(flags=["ALL_NODES"]), ["n1", "n2", "n3"])
    assert blocks_partition(resv(flags=["MAINT"]), ["n1", "n2"])
    assert not blocks_partition(resv(flags=["MAINT"]), ["n1", "n2", "n3"])  # n3 is free
    assert not blocks_partition(resv(), ["n1", "n2"])  # not MAINT: other nodes' business
    assert job_overlaps(resv(), NOW, 3601) and not job_overlaps(resv(), NOW, 3600)
    assert job_overlaps(resv(), NOW, -1)  # no time limit: runs into everything


class _Job:
    """What eligibility reads of a job."""

    def __init__(self, partition: str = "debug", time_limit: int = 600,
                 reservation: str | None = None) -> None:
        self.partition = partition
        self.time_limit = time_limit
        self.reservation = reservation


def test_eligibility_rule() -> None:
    parts = {"debug": Partition("debug", nodes=["n1", "n2"])}
    maint = resv(name="maint", flags=["MAINT", "SPEC_NODES", "ALL_NODES"])
    book = {"maint": maint}
    why = reservation_reason(_Job(time_limit=7200), NOW, book, parts)  # type: ignore[arg-type]
    assert why is not None and why.text() == "ReqNodeNotAvail, Reserved for maintenance"
    assert reservation_reason(_Job(time_limit=1800), NOW, book, parts) is None  # type: ignore[arg-type]
    waiting = reservation_reason(_Job(reservation="maint"), NOW, book, parts)  # type: ignore[arg-type]
    assert waiting is not None and waiting.code is ReasonCode.RESERVATION
    assert reservation_reason(_Job(reservation="maint"), NOW + 3600, book, parts) is None  # type: ignore[arg-type]
    gone = reservation_reason(_Job(reservation="nope"), NOW, book, parts)  # type: ignore[arg-type]
    assert gone is not None and gone.text() == "ReservationDeleted"


# ---- the backfill timeline --------------------------------------------------------------
def node(name: str) -> NodeView:
    return NodeView(name=name, cpus=8, mem=8000, gpus=2, free_cpus=8, free_mem=8000,
                    free_gpus=[0, 1], usable=True, partitions=("debug",))


def test_blocked_window_lets_only_jobs_that_end_before_it() -> None:
    nodes = {"n1": node("n1")}
    short = PendingView(1, 100, NOW, "debug", time_limit=1800)
    long = PendingView(2, 90, NOW, "debug", time_limit=7200)
    snap = Snapshot(now=NOW, nodes=nodes, partitions={"debug": Partition("debug", nodes=["n1"])},
                    running=[], pending=[long, short], blocked=(("n1", NOW + 3600, NOW + 5400),))
    placed = schedule(snap)
    assert [cid for cid, _ in placed.starts] == [1]
    assert placed.planned[2][0] == NOW + 5400  # after the window
    free = schedule(Snapshot(now=NOW, nodes={"n1": node("n1")}, partitions=snap.partitions,
                             running=[], pending=[long]))
    assert [cid for cid, _ in free.starts] == [2]  # the window alone held it back


# ---- output ----------------------------------------------------------------------------
def test_show_reservation_format(utc_tz: None) -> None:
    r = resv(name="maint", start=NOW, end=NOW + 4 * 3600, nodes=["node-1", "node-2"],
             users=["root"], flags=["MAINT", "IGNORE_JOBS", "SPEC_NODES", "ALL_NODES"], cpus=16)
    text = format_reservation(r.to_dict(), NOW + 1)
    assert text == (
        "ReservationName=maint StartTime=2023-11-14T22:13:20 EndTime=2023-11-15T02:13:20 "
        "Duration=04:00:00\n"
        "   Nodes=node-[1-2] NodeCnt=2 CoreCnt=16 Features=(null) PartitionName=(null) "
        "Flags=MAINT,IGNORE_JOBS,SPEC_NODES,ALL_NODES\n"
        "   TRES=cpu=16\n"
        "   Users=root Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE "
        "BurstBuffer=(null) Watts=n/a\n"
        "   MaxStartDelay=(null)\n\n")
    listing = format_sinfo_reservations([r.to_dict()], NOW - 10)
    assert listing.splitlines() == [
        "RESV_NAME     STATE           START_TIME             END_TIME     DURATION  NODELIST",
        "maint      INACTIVE  2023-11-14T22:13:20  2023-11-15T02:13:20     04:00:00  node-[1-2]"]
    assert format_sinfo_reservations([], NOW) == "No reservations in the system\n"


# ---- the controller in process ---------------------------------------------------------
CONF = """\
ClusterName=t
NodeName=n[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE
"""


@pytest.fixture
def known_users(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness's users (user1000, …) exist for Users= checks."""
    real = pwd.getpwnam

    def getpwnam(name: str) -> Any:
        if name.startswith("user"):
            return real("root")
        return real(name)
    monkeypatch.setattr(pwd, "getpwnam", getpwnam)


def create(h: Harness, **req: Any) -> Reservation:
    return h.call(resv_ctl.create, h.ctl, h.who(0), req)


def test_controller_create_refusals(known_users: None) -> None:
    with Harness(CONF) as h:
        now = h.clock()
        with pytest.raises(SlurmError, match="^Invalid user id$"):
            h.call(resv_ctl.create, h.ctl, h.who(1000),
                   {"start": now, "duration": 60, "nodes": "n1", "users": "root"})
        with pytest.raises(SlurmError, match="^Invalid node name specified$"):
            create(h, start=now, duration=60, nodes="n9", users="root")
        with pytest.raises(SlurmError, match="^Invalid user id$"):
            create(h, start=now, duration=60, nodes="n1", users="no-such-user-here")
        with pytest.raises(SlurmError, match="^Invalid time specified$"):
            create(h, start=now - 86400, duration=60, nodes="n1", users="root")
        first = create(h, start=now, duration=600, nodes="n1", users="root")
        assert first.name == "root_1" and first.flags == ["SPEC_NODES"]
        with pytest.raises(SlurmError, match="^Requested reservation overlaps with another"):
            create(h, name="b", start=now + 60, duration=60, nodes="n[1-2]", users="root")
        with pytest.raises(SlurmError, match="^Duplicate reservation name$"):
            create(h, name="root_1", start=now, duration=60, nodes="n2", users="root")
        job = h.submit(time_limit=3600)
        h.tick()
        assert h.job(job).state is JobState.RUNNING and h.job(job).alloc[0].node == "n2"
        with pytest.raises(SlurmError, match="^Requested nodes are busy$"):
            create(h, name="c", start=now + 60, duration=60, nodes="n2", users="root")
        ok = create(h, name="c", start=now + 60, duration=60, nodes="n2", users="root",
                    flags_add=["IGNORE_JOBS"])
        assert ok.flags == ["IGNORE_JOBS", "SPEC_NODES"]


def test_controller_schedules_around_and_in_reservations(known_users: None) -> None:
    with Harness(CONF) as h:
        now = h.clock()
        create(h, name="lab", start=now, duration=3600, nodes="n1", users="user1000")
        with pytest.raises(SlurmError, match="^Access denied to requested reservation$"):
            h.submit(uid=1001, reservation="lab", time_limit=60)
        with pytest.raises(SlurmError, match="^Requested reservation is invalid$"):
            h.submit(reservation="nope", time_limit=60)
        mine = h.submit(reservation="lab", time_limit=60, num_nodes=1)
        other = h.submit(uid=1001, time_limit=60, req_nodes=["n1"])
        h.tick()
        assert h.job(mine).state is JobState.RUNNING and h.job(mine).alloc[0].node == "n1"
        assert h.job(other).state is JobState.PENDING
        with pytest.raises(SlurmError, match="^Requested reservation is in use$"):
            h.call(resv_ctl.delete, h.ctl, h.who(0), "lab")
        h.end(mine)
        h.call(resv_ctl.delete, h.ctl, h.who(0), "lab")
        h.tick()
        assert h.job(other).state is JobState.RUNNING


def test_controller_maintenance_and_restart(known_users: None) -> None:
    store = MemoryStore()
    with Harness(CONF, store=store) as h:
        now = h.clock()
        r = create(h, name="maint", start=now + 3600, duration=7200, nodes="ALL",
                   users="root", flags_add=["MAINT", "IGNORE_JOBS"])
        assert r.nodes == ["n1", "n2"] and "ALL_NODES" in r.flags
        short = h.submit(time_limit=1800)
        long = h.submit(time_limit=7200)
        h.tick()
        assert h.job(short).state is JobState.RUNNING
        assert h.job(long).state is JobState.PENDING
        assert h.job(long).reason == "ReqNodeNotAvail, Reserved for maintenance"
        h.call(resv_ctl.update, h.ctl, h.who(0), "maint", {"duration": 600, "duration_op": "+"})
    with Harness(CONF, store=store) as again:  # a restarted controller over the same store
        book = resv_ctl.book_of(again.ctl)
        assert book.by_name["maint"].end == now + 3600 + 7200 + 600
        assert book.by_name["maint"].flags == ["MAINT", "IGNORE_JOBS", "SPEC_NODES", "ALL_NODES"]
        assert resv_ctl.node_marks(again.ctl, now + 3600) == {"n1": "maint", "n2": "maint"}
        again.call(resv_ctl.delete, again.ctl, again.who(0), "maint")
    with Harness(CONF, store=store) as third:
        assert resv_ctl.book_of(third.ctl).by_name == {}


def test_sbatch_reservation_option_and_variable() -> None:
    from corral.cli.sbatch import parse_sbatch

    env = {"HOME": "/home/alice", "PATH": "/usr/bin:/bin"}
    sub = parse_sbatch(["--reservation=maint", "--wrap=true"], env, None, "/tmp", NOW,
                       submit_host="login1", umask=0o022)
    assert sub.spec["reservation"] == "maint"
    sub = parse_sbatch(["--wrap=true"], {**env, "SBATCH_RESERVATION": "lab"}, None, "/tmp",
                       NOW, submit_host="login1", umask=0o022)
    assert sub.spec["reservation"] == "lab"
    sub = parse_sbatch(["--wrap=true"], env, None, "/tmp", NOW, submit_host="login1",
                       umask=0o022)
    assert "reservation" not in sub.spec


def test_controller_gpu_count_picks_whole_nodes_and_repeats(known_users: None) -> None:
    with Harness(CONF) as h:
        now = h.clock()
        r = create(h, name="gpus", start=now + 600, duration=600, gpus=3,
                   users="-user1001", flags_add=["WEEKLY"])
        assert r.nodes == ["n1", "n2"] and r.cpus == 8 and r.users_not
        text = format_reservation({**r.to_dict(), "start": r.start, "end": r.end}, now)
        assert "   TRES=cpu=8,gres/gpu=3\n" in text and "   Users=-user1001 " in text
        assert r.allows("user1000", None) and not r.allows("user1001", None)
        with pytest.raises(SlurmError, match="^Requested node configuration is not available$"):
            create(h, name="more", start=now, duration=60, gpus=5, users="root",
                   flags_add=["OVERLAP"])
        week = resv_ctl.scheduling_reservations(h.ctl, now + 7 * 86400 + 700)
        assert [x.window(now + 7 * 86400 + 700) for x in week] == \
            [(now + 600 + 7 * 86400, now + 1200 + 7 * 86400)]  # the next week's window
        assert resv_ctl.node_marks(h.ctl, now + 7 * 86400 + 700) == {"n1": "resv", "n2": "resv"}
