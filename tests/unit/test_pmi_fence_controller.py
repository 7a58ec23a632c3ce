"""The controller's side of an --mpi=pmi2 step served by two agents (controller/steps.py
`_pmi_fence`): the real step manager in the in-process controller (Harness), each node's
agent a list that records what it is sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from corral.controller.harness import Harness
from corral.controller.steps import LiveStep, StepManager
from corral.model import messages as m
from corral.model.job import JobState, Step

CONF = """\
ClusterName=t
NodeName=n[1-2] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=n[1-2] Default=YES
"""


@pytest.fixture
def two() -> Iterator[tuple[Harness, LiveStep, dict[str, list[dict[str, Any]]]]]:
    with Harness(CONF) as h:
        sm = StepManager(h.ctl)
        a = h.submit(batch=False, num_nodes=2, num_tasks=4)
        h.tick()
        job = h.job(a)
        assert job.state == JobState.RUNNING and len(job.nodes) == 2
        record = Step("0", "mpi", JobState.RUNNING.value, start_time=h.clock())
        job.steps.append(record)
        st = LiveStep(a, 0, [].append, ["n1", "n2"], [2, 2], {"n1": 2, "n2": 2}, {}, record)
        sm.live[(a, 0)] = st
        sent: dict[str, list[dict[str, Any]]] = {"n1": [], "n2": []}
        for node, box in sent.items():  # one agent per node
            h.ctl.agent_senders[node] = box.append
        h.pmi = sm  # type: ignore[attr-defined]
        yield h, st, sent


def fence(h: Harness, st: LiveStep, node: str, ranks: list[int], puts: dict[str, str],
          epoch: int = 0) -> None:
    h.call(h.pmi.agent_message,  # type: ignore[attr-defined]
           m.PmiFence(job_id=st.job_id, step_id=st.step_id, epoch=epoch, ranks=ranks,
                      puts=puts).to_dict(), [node])


def kvs_sent(box: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [msg for msg in box if msg.get("type") == "pmi_kvs"]


def test_each_agent_gets_every_ranks_puts_once_all_are_in(two: Any) -> None:
    h, st, sent = two
    fence(h, st, "n2", [2, 3], {"bc-2": "c", "bc-3": "d"})
    assert kvs_sent(sent["n1"]) == kvs_sent(sent["n2"]) == []
    fence(h, st, "n1", [0, 1], {"bc-0": "a", "bc-1": "b"})
    want = {"type": "pmi_kvs", "job_id": st.job_id, "step_id": 0, "epoch": 0,
            "kvs": {"bc-0": "a", "bc-1": "b", "bc-2": "c", "bc-3": "d"}}
    assert kvs_sent(sent["n1"]) == kvs_sent(sent["n2"]) == [want]
    # the next fence is gathered afresh
    fence(h, st, "n1", [0, 1], {}, epoch=1)
    fence(h, st, "n2", [2, 3], {"x": "1"}, epoch=1)
    assert kvs_sent(sent["n1"])[-1]["kvs"] == {"x": "1"} and kvs_sent(sent["n1"])[-1]["epoch"] == 1


def test_an_agent_cannot_speak_for_another_nodes_ranks_or_twice(two: Any) -> None:
    h, st, sent = two
    fence(h, st, "n1", [0, 1, 2, 3], {"forged": "x"})  # ranks 2, 3 run on n2
    fence(h, st, "n1", [0, 1, 7], {})  # no rank 7
    assert st.pmi is None  # both refused before anything was counted
    fence(h, st, "n1", [0, 1], {"k": "a"})
    fence(h, st, "n1", [0, 1], {"k": "again"})  # a repeat is refused
    fence(h, st, "n2", [2, 3], {}, epoch=5)  # not the fence under way
    assert kvs_sent(sent["n1"]) == []
    fence(h, st, "n2", [2, 3], {})
    assert [msg["kvs"] for msg in kvs_sent(sent["n2"])] == [{"k": "a"}]
