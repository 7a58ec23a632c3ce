"""The dashboard's pure parts: login tokens and sessions, what each caller may see, the
queue's order and reasons, the output tail's refusals, the event hub's filtering, copies
and bounded queues, `corral why`'s rendering (controller/harness.py: no sockets)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.admin.why import render
from corral.controller.events import QUEUE_LIMIT, EventHub
from corral.controller.harness import Harness
from corral.controller.webui import parse_listen
from corral.model.job import JobState
from corral.web import views
from corral.web.sessions import Logins, csrf_ok

CONF = """\
ClusterName=t
NodeName=n[1-2] CPUs=8 RealMemory=8000 Gres=gpu:4
PartitionName=debug Nodes=n[1-2] Default=YES
"""


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(CONF) as harness:
        yield harness


# ---- login tokens and sessions ----------------------------------------------------------------
def test_login_token_is_single_use_and_bound_to_its_user() -> None:
    logins = Logins(login_ttl=60)
    token = logins.mint(1000, 100, now=0.0)
    spent = logins.spend(token, now=1.0)
    assert spent is not None
    cookie, session = spent
    assert (session.uid, session.gid) == (1000, 100)
    assert logins.spend(token, now=2.0) is None  # spent
    assert logins.session(cookie, now=3.0) == session
    assert logins.session("forged", now=3.0) is None
    assert csrf_ok(session, session.csrf) and not csrf_ok(session, "x") \
        and not csrf_ok(session, None)


def test_login_token_expires_and_sessions_end() -> None:
    logins = Logins(login_ttl=60, session_ttl=100)
    token = logins.mint(1000, 100, now=0.0)
    assert logins.spend(token, now=61.0) is None
    cookie, _ = logins.spend(logins.mint(1000, 100, now=0.0), now=1.0) or ("", None)
    assert logins.session(cookie, now=50.0) is not None
    assert logins.session(cookie, now=102.0) is None
    cookie2, _ = logins.spend(logins.mint(7, 7, now=200.0), now=200.0) or ("", None)
    logins.end(cookie2)
    assert logins.session(cookie2, now=201.0) is None


def test_listen_spec() -> None:
    assert parse_listen("8787") == ("127.0.0.1", 8787)
    assert parse_listen("0.0.0.0:80") == ("0.0.0.0", 80)
    assert parse_listen("off") is None
    with pytest.raises(ValueError):
        parse_listen("host:notaport")


# ---- what each caller sees ----------------------------------------------------------------------
def test_queue_shows_reason_in_words_place_and_hides_others_details(h: Harness) -> None:
    big = h.submit(uid=1000, gpus_per_node=4, name="mine")
    h.tick()
    blocked = h.submit(uid=1000, gpus_per_node=4, name="secret-name")
    other = h.submit(uid=2000, gpus_per_node=4)
    h.tick()
    assert h.job(big).state == JobState.RUNNING
    q = views.queue(h.ctl, h.who(2000), h.clock())
    rows = {r["job_id"]: r for r in q["jobs"]}
    assert rows[big]["state"] == "RUNNING" and rows[big]["gpus"] == 4
    # the second 4-GPU job runs on n2; the third waits, for resources, in words
    pending = [r for r in q["jobs"] if r["state"] == "PENDING"]
    assert len(pending) == 1
    p = pending[0]
    assert p["reason"] == "Resources"
    assert "GPU" in p["why"] or "resources" in p["why"]
    assert (p["place"], p["in_line"]) == (1, 1)
    # user 2000 sees user 1000's jobs' rows but not their names
    assert rows[blocked]["name"] == "" and not rows[blocked]["details"]
    assert rows[other]["mine"] and rows[other]["details"]
    assert views.queue(h.ctl, h.who(1000), h.clock())["jobs"][0]["name"] in ("mine",
                                                                                "secret-name", "")
    assert views.may_see_details(h.ctl, h.who(0), h.job(blocked))  # operator


def test_why_has_numbers(h: Harness) -> None:
    h.submit(uid=1000, gpus_per_node=3)
    h.submit(uid=1000, gpus_per_node=3)
    h.tick()
    waiting = h.submit(uid=1000, gpus_per_node=2)
    h.tick()
    w = views.why(h.ctl, h.job(waiting), h.clock())
    assert w["state"] == "PENDING" and w["reason"] == "Resources"
    assert w["requested"].get("gpus") == 2 and w["available"].get("gpus") == 1
    assert w["why"] == "needs 2 GPUs on one node; the most free on any node is 1"
    assert w["place"] == 1 and w["in_line"] == 1
    text = render(w)
    assert "needs 2 GPUs on one node; the most free on any node is 1" in text
    assert "requested per node: " in text and "gpus 2" in text
    assert "1st of 1 pending" in text
    running = views.why(h.ctl, h.job(1), h.clock())
    assert render(running).endswith("it is not waiting.\n")


def test_cluster_grid_names_the_holder_of_each_gpu(h: Harness) -> None:
    a = h.submit(uid=1000, gpus_per_node=2)
    h.tick()
    c = views.cluster(h.ctl, h.clock())
    held = [(n["name"], g["index"], g["job_id"]) for n in c["nodes"] for g in n["gpus"]
            if g["job_id"] is not None]
    gpus = h.job(a).alloc[0].gpus
    assert held == [(h.job(a).alloc[0].node, i, a) for i in gpus]
    assert c["gpus"] == 8 and c["gpus_alloc"] == 2
    idle = views.idle_gpus(h.ctl, h.clock())
    assert len(idle["free"]) == 6 and idle["allocated_idle"] == []


class FakeBook:
    def __init__(self, node: str, util: dict[int, float]) -> None:
        self.gpus = {node: (0.0, [{"index": i, "util": u, "memory_used": 0,
                                   "memory_total": 80000, "processes": 0}
                                  for i, u in util.items()])}


def test_idle_allocated_gpus_come_from_the_samples(h: Harness) -> None:
    a = h.submit(uid=1000, gpus_per_node=2)
    h.tick()
    node, (g0, g1) = h.job(a).alloc[0].node, h.job(a).alloc[0].gpus
    book = FakeBook(node, {g0: 0.0, g1: 93.0})
    idle = views.idle_gpus(h.ctl, h.clock(), book)
    assert [(g["node"], g["index"], g["job_id"]) for g in idle["allocated_idle"]] == \
        [(node, g0, a)]
    grid = views.cluster(h.ctl, h.clock(), book)
    utils = {g["index"]: g["util"] for n in grid["nodes"] if n["name"] == node
             for g in n["gpus"]}
    assert utils[g1] == 93.0


def test_output_tail_only_from_the_owners_regular_file(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_text("".join(f"line {i}\n" for i in range(5000)))
    uid = os.getuid()
    tail = views.read_tail(str(out), uid, limit=100)
    assert tail is not None and tail.endswith("line 4999\n") and tail.startswith("line ")
    assert views.read_tail(str(out), uid + 1) is None  # another user's file
    link = tmp_path / "link"
    link.symlink_to(out)
    assert views.read_tail(str(link), uid) is None  # a link is never followed
    assert views.read_tail(str(tmp_path), uid) is None  # not a regular file
    assert views.read_tail(str(tmp_path / "missing"), uid) is None


def test_output_path_as_launched(h: Harness) -> None:
    a = h.submit(uid=1000, stdout="out-%j.txt", work_dir="/w")
    assert views.output_path(h.job(a)) == f"/w/out-{a}.txt"
    b = h.submit(uid=1000, work_dir="/w")
    assert views.output_path(h.job(b)) == f"/w/slurm-{b}.out"


# ---- the event hub ----------------------------------------------------------------------------
def test_event_hub_filters_copies_and_keeps_order(h: Harness) -> None:
    hub = EventHub(h.ctl)
    alice, bob, op = (hub.client(h.who(1000)), hub.client(h.who(2000)),
                      hub.client(h.who(0, operator=True)))
    a = h.submit(uid=1000)
    h.tick()
    h.end(a)

    def drain(c: object) -> list[dict[str, object]]:
        q = c.queue  # type: ignore[attr-defined]
        return [q.get_nowait() for _ in range(q.qsize())]

    got = [(r["event"], r["state"]) for r in drain(alice) if r["type"] == "job"]
    assert got == [("submitted", "PENDING"), ("started", "RUNNING"), ("ended", "COMPLETED")]
    assert [r for r in drain(bob) if r["type"] == "job"] == []
    recs = [r for r in drain(op) if r["type"] == "job"]
    assert [r["state"] for r in recs] == ["PENDING", "RUNNING", "COMPLETED"]
    assert recs[0]["state"] == "PENDING"  # a copy made when it happened, not the live job
    assert [r["seq"] for r in recs] == sorted(r["seq"] for r in recs)
    assert [e[1] for e in hub.history[a]] == ["submitted", "started", "ended"]


def test_a_slow_client_is_dropped_not_waited_for(h: Harness) -> None:
    hub = EventHub(h.ctl)
    slow = hub.client(h.who(0, operator=True))
    fast = hub.client(h.who(0, operator=True))
    for _ in range(QUEUE_LIMIT // 2 + 1):
        h.submit(uid=1000)
        while not fast.queue.empty():
            fast.queue.get_nowait()
    for _ in range(QUEUE_LIMIT // 2 + 1):
        h.submit(uid=1000)
    assert slow.dropped and not fast.dropped
    assert slow.queue.qsize() == 1 and slow.queue.get_nowait()["type"] == "dropped"
    assert hub.dropped == 1
    asyncio.set_event_loop(None)


def test_node_events_reach_everyone_and_job_filters_hold(h: Harness) -> None:
    hub = EventHub(h.ctl)
    alice, only_one = hub.client(h.who(1000)), hub.client(h.who(1000), job=99)
    quiet = hub.client(h.who(1000), nodes=False)
    h.call(h.ctl.update_nodes, h.who(0), ["n1"], "drain", "disk swap")
    recs = [alice.queue.get_nowait() for _ in range(alice.queue.qsize())]
    assert [(r["type"], r["event"], r["node"], r["reason"]) for r in recs] == \
        [("node", "drained", "n1", "disk swap")]
    assert only_one.queue.empty() and quiet.queue.empty()
    hub.leave(alice)
    h.submit(uid=1000)
    assert alice.queue.empty() and quiet.queue.qsize() == 1 and only_one.queue.empty()


def test_a_stopping_controller_ends_every_stream(h: Harness) -> None:
    hub = EventHub(h.ctl)
    c = hub.client(h.who(1000))
    h.submit(uid=1000)
    h.loop.run_until_complete(hub.close_all())
    assert [c.queue.get_nowait()["type"] for _ in range(c.queue.qsize())] == ["shutdown"]
    h.submit(uid=1000)
    assert c.queue.empty()


def test_users_node_and_job_pages(h: Harness) -> None:
    a = h.submit(uid=1000, gpus_per_node=1, name="mine")
    h.submit(uid=1000, gpus_per_node=4, num_nodes=2)
    h.tick()
    u = views.users(h.ctl, h.who(1000), h.clock())
    assert u["users"] == [{"user": "user1000", "running": 1, "pending": 1, "cpus": 1, "gpus": 1}]
    assert isinstance(views.users(h.ctl, h.who(0), h.clock())["associations"], list)
    node = h.job(a).alloc[0].node
    h.call(h.ctl.update_nodes, h.who(0), [node], "drain", "fan")
    n = views.node_page(h.ctl, h.ctl.nodes[node], [], h.clock())
    assert n["jobs"] == [a] and n["reason"] == "fan" and n["state_long"].endswith("DRAIN")
    assert [g["job_id"] for g in n["gpus"]] == [a, None, None, None]
    page = views.job_page(h.ctl, h.job(a), [], h.clock(), tail=False)
    assert page["name"] == "mine" and page["details"]
    assert page["alloc"] == [{"node": node, "cpus": 1, "mem_mb": h.job(a).alloc[0].mem_mb,
                              "gpus": h.job(a).alloc[0].gpus}]
    assert [e["event"] for e in page["timeline"]] == ["submitted", "started"]


def test_private_data_jobs_hides_other_users_jobs() -> None:
    with Harness("PrivateData=jobs\n" + CONF) as h:
        a = h.submit(uid=1000, gpus_per_node=2)
        h.submit(uid=1000, gpus_per_node=4, num_nodes=2)
        h.tick()
        bob, alice = h.who(2000), h.who(1000)
        assert views.jobs_hidden(h.ctl)
        assert views.queue(h.ctl, bob, h.clock())["jobs"] == []
        assert len(views.queue(h.ctl, alice, h.clock())["jobs"]) == 2
        assert len(views.queue(h.ctl, h.who(0), h.clock())["jobs"]) == 2
        node = h.job(a).alloc[0].node
        gpus = [g for n in views.cluster(h.ctl, h.clock(), None, bob)["nodes"]
                if n["name"] == node for g in n["gpus"]]
        assert [(g["held"], g["job_id"], g["user"]) for g in gpus[:2]] == \
            [(True, None, None)] * 2
        mine = [g for n in views.cluster(h.ctl, h.clock(), None, alice)["nodes"]
                if n["name"] == node for g in n["gpus"]]
        assert [g["job_id"] for g in mine[:2]] == [a, a]
        book = FakeBook(node, {g: 0.0 for g in h.job(a).alloc[0].gpus})
        assert views.idle_gpus(h.ctl, h.clock(), book, bob)["allocated_idle"] == []
        assert len(views.idle_gpus(h.ctl, h.clock(), book, alice)["allocated_idle"]) == 2
        assert views.node_page(h.ctl, h.ctl.nodes[node], [], h.clock(), None, bob)["jobs"] == []
        assert views.users(h.ctl, bob, h.clock())["users"] == []
        assert [u["user"] for u in views.users(h.ctl, h.who(0), h.clock())["users"]] == \
            ["user1000"]


def test_queue_reports_how_right_the_estimated_starts_were(h: Harness) -> None:
    a = h.submit(uid=1000, gpus_per_node=4, num_nodes=2, time_limit=600)
    h.tick()
    waiting = h.submit(uid=1000, gpus_per_node=4, time_limit=600)
    h.tick()
    q = views.queue(h.ctl, h.who(1000), h.clock())
    assert q["estimates"]["starts"] == 0 and q["estimates"]["median_s"] is None
    planned = h.job(waiting).sched_start
    assert planned is not None  # backfill planned it at a's limit
    h.advance(120)  # a ends 480 s before its limit: the waiting job starts that much earlier
    h.end(a)
    h.tick()
    assert h.job(waiting).state == JobState.RUNNING
    est = views.queue(h.ctl, h.who(1000), h.clock())["estimates"]
    assert est["starts"] == 1
    assert est["median_s"] == pytest.approx(abs(h.job(waiting).start_time - planned))
    assert est["bias_s"] < 0  # it started earlier than estimated
