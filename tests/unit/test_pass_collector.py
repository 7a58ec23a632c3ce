"""The scheduling pass pauses the cyclic collector while it runs, and leaves it as it found
it (controller/core/passes.py `Passes.run`)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from corral.controller.core import Core
from corral.controller.core import passes as passes_mod
from corral.model.config import parse_config
from corral.model.job import Job, JobState

CONF = """\
ClusterName=c
NodeName=n[1-2] CPUs=4 RealMemory=1000
PartitionName=p Nodes=n[1-2] Default=YES MaxTime=10
"""


def _core_with_job() -> Core:
    core = Core(parse_config(CONF))
    for n in core.nodes.values():
        n.registered = n.responding = True
    job = Job(job_id=core.new_job_id(), name="j", user="u", uid=1000, gid=1000,
              partition="p", work_dir="/tmp", time_limit=60)
    job.submit_time = 100.0
    core.set_state(job, JobState.PENDING, 100.0)
    core.out.take()
    return core


def _seen_during_pass(monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> list[bool]:
    seen: list[bool] = []
    plain = passes_mod.run_pass

    def run_pass(*args: Any, **kw: Any) -> Any:
        seen.append(gc.isenabled())
        if fail:
            raise RuntimeError("boom")
        return plain(*args, **kw)

    monkeypatch.setattr(passes_mod, "run_pass", run_pass)
    return seen


def test_the_collector_is_paused_during_a_pass_and_enabled_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    core = _core_with_job()
    seen = _seen_during_pass(monkeypatch)
    assert gc.isenabled()
    decision = core.passes.run(200.0)
    assert decision is not None and len(decision.starts) == 1
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_caller_stays_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    core = _core_with_job()
    seen = _seen_during_pass(monkeypatch)
    gc.disable()
    try:
        core.passes.run(200.0)
        assert seen == [False]
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_failing_pass_enables_the_collector_again(monkeypatch: pytest.MonkeyPatch) -> None:
    core = _core_with_job()
    seen = _seen_during_pass(monkeypatch, fail=True)
    with pytest.raises(RuntimeError):
        core.passes.run(200.0)
    assert seen == [False]
    assert gc.isenabled()
