"""The PMI key-value exchange across agents: the controller's merge (model/pmi.py), an agent's
session that hands its fence up and is released by the merged table (agent/pmi2.py), and the
two messages between them."""

from __future__ import annotations

import pytest

from corral.agent.pmi2 import Pmi2Session, decode2, encode2
from corral.model import messages as m
from corral.model.pmi import FenceError, FenceGather, node_of_rank, parse_tasks_per_node


def test_tasks_per_node_and_rank_layout() -> None:
    assert parse_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert parse_tasks_per_node("4") == [4]
    assert node_of_rank([2, 1, 3]) == [0, 0, 1, 2, 2, 2]
    for bad in ("", "x", "2(x", "2(x2", "-1"):
        with pytest.raises(ValueError):
            parse_tasks_per_node(bad)


def test_the_fence_completes_when_every_rank_is_in() -> None:
    g = FenceGather(4)
    assert g.add(0, [2, 3], {"bc-2": "b", "bc-3": "c"}) is None
    assert g.add(0, [0, 1], {"bc-0": "a"}) == {"bc-0": "a", "bc-2": "b", "bc-3": "c"}
    # the next fence starts empty: only its own puts
    assert g.epoch == 1
    assert g.add(1, [0, 1, 2, 3], {"x": "1"}) == {"x": "1"}


def test_a_key_put_twice_takes_the_higher_ranks_value_whatever_the_order() -> None:
    for order in ([([0], "low"), ([1], "high")], [([1], "high"), ([0], "low")]):
        g = FenceGather(2)
        out = None
        for ranks, value in order:
            out = g.add(0, ranks, {"k": value})
        assert out == {"k": "high"}


def test_parts_that_do_not_fit_the_fence_are_refused() -> None:
    g = FenceGather(3)
    g.add(0, [0], {})
    with pytest.raises(FenceError, match="twice"):
        g.add(0, [0, 1], {})
    with pytest.raises(FenceError, match="twice"):
        g.add(0, [1, 1], {})
    with pytest.raises(FenceError, match="out of range"):
        g.add(0, [3], {})
    with pytest.raises(FenceError, match="under way"):
        g.add(1, [1, 2], {})
    with pytest.raises(FenceError, match="without ranks"):
        g.add(0, [], {})
    # nothing refused was counted: the fence still completes with ranks 1 and 2
    assert g.add(0, [1, 2], {"k": "v"}) == {"k": "v"}


def msg2(**kv: str) -> bytes:
    return encode2([(k.replace("_", "-") if k != "cmd" else k, v) for k, v in kv.items()])


def answers(out: list[tuple[int, bytes]]) -> dict[int, dict[str, str]]:
    return {rank: decode2(data[6:].decode()) for rank, data in out}


def test_two_agents_sessions_meet_through_the_merge() -> None:
    """Ranks 0,1 on one agent (node 0), rank 2 on another (node 1)."""
    layout = node_of_rank([2, 1])
    a = Pmi2Session("9.0", layout, local_ranks=frozenset({0, 1}))
    b = Pmi2Session("9.0", layout, local_ranks=frozenset({2}))
    gather = FenceGather(3)
    for session, ranks in ((a, (0, 1)), (b, (2,))):
        for r in ranks:
            session.feed(r, b"cmd=init pmi_version=2 pmi_subversion=0\n")
            session.feed(r, msg2(cmd="fullinit", pmirank=str(r)))
            # the job's layout is known on each agent before any fence
            got = answers(session.feed(r, msg2(cmd="info-getjobattr", key="PMI_process_mapping")))
            assert got[r]["value"] == "(vector,(0,1,2),(1,1,1))"
            session.feed(r, msg2(cmd="kvs-put", key=f"bc-{r}", value=f"addr;{r}"))
    assert a.feed(0, msg2(cmd="kvs-fence")) == [] and a.outbox == []
    assert a.feed(1, msg2(cmd="kvs-fence")) == []  # all of a's ranks: its part goes up
    assert a.outbox == [(0, [0, 1], {"bc-0": "addr;0", "bc-1": "addr;1"})]
    assert b.feed(2, msg2(cmd="kvs-fence")) == []
    assert b.outbox == [(0, [2], {"bc-2": "addr;2"})]
    assert gather.add(*a.outbox.pop()) is None
    merged = gather.add(*b.outbox.pop())
    assert merged is not None
    # a stale or repeated answer releases nothing
    assert a.fence_done(1, merged) == []
    released = answers(a.fence_done(0, merged))
    assert sorted(released) == [0, 1]
    assert all(r["cmd"] == "kvs-fence-response" for r in released.values())
    assert a.fence_done(0, merged) == []
    assert answers(b.fence_done(0, merged))[2]["cmd"] == "kvs-fence-response"
    got = answers(b.feed(2, msg2(cmd="kvs-get", jobid="9.0", key="bc-0")))
    assert got[2]["found"] == "TRUE" and got[2]["value"] == "addr;0"
    # node attributes stay on their node
    a.feed(0, msg2(cmd="info-putnodeattr", key="shm", value="seg0"))
    assert answers(a.feed(1, msg2(cmd="info-getnodeattr", key="shm")))[1]["value"] == "seg0"
    assert answers(b.feed(2, msg2(cmd="info-getnodeattr", key="shm")))[2]["found"] == "FALSE"


def test_one_agent_with_every_rank_settles_the_fence_itself() -> None:
    s = Pmi2Session("9.1", [0, 1])
    for r in (0, 1):
        s.feed(r, b"cmd=init pmi_version=1 pmi_subversion=1\n")
        s.feed(r, f"cmd=put kvsname=9.1 key=k{r} value={r}\n".encode())
    assert s.feed(0, b"cmd=barrier_in\n") == []
    out = s.feed(1, b"cmd=barrier_in\n")
    assert sorted(rank for rank, _ in out) == [0, 1] and s.outbox == []
    assert s.feed(0, b"cmd=get kvsname=9.1 key=k1\n") == \
        [(0, b"cmd=get_result rc=0 value=1\n")]


def test_the_fence_messages_round_trip_and_are_checked() -> None:
    up = m.PmiFence(job_id=5, step_id=0, epoch=2, ranks=[3, 4], puts={"k": "v;w"})
    assert m.decode(m.encode(up), m.TO_CONTROLLER_FROM_AGENT) == up
    down = m.PmiKvs(job_id=5, step_id=0, epoch=2, kvs={"k": "v"})
    assert m.decode(m.encode(down), m.TO_AGENT) == down
    with pytest.raises(m.MessageError, match="ranks"):
        m.decode({"type": "pmi_fence", "job_id": 5, "step_id": 0, "epoch": 0,
                  "ranks": [-1]}, m.TO_CONTROLLER_FROM_AGENT)
    with pytest.raises(m.MessageError, match="puts"):
        m.decode({"type": "pmi_fence", "job_id": 5, "step_id": 0, "epoch": 0,
                  "puts": {"k": 1}}, m.TO_CONTROLLER_FROM_AGENT)
