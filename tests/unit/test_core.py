"""The controller's core: no I/O in it (its import rule, as test_cli_imports.py has for the
commands), the shape of the controller (one class over composed parts), and the typed
effects its transitions emit, read without any shell."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from corral.controller.cluster import NodeEvent
from corral.controller.core import Core
from corral.controller.core.effects import (
    Control,
    Launch,
    PersistJob,
    PersistNextJobId,
    ScheduleSoon,
)
from corral.controller.jobs import JobEvent, JobEventKind
from corral.controller.state import Controller
from corral.model.config import parse_config
from corral.model.job import Job, JobState

CORE = Path(__file__).resolve().parents[2] / "src" / "corral" / "controller" / "core"

# what the core may not import: I/O, the event loop, the store's implementations, the
# shell, the wall clock, the user database
FORBIDDEN = {"asyncio", "aiohttp", "socket", "os", "pwd", "grp", "time", "datetime",
             "sqlite3", "subprocess", "concurrent", "threading", "select", "selectors",
             "corral.store.sqlite", "corral.store.memory", "corral.controller.shell",
             "corral.controller.persist", "corral.controller.server",
             "corral.controller.state", "corral.controller.usecases"}
CLOCK_CALLS = {"time", "monotonic", "perf_counter", "now", "utcnow", "today"}

CONF = """\
ClusterName=c
NodeName=n[1-2] CPUs=4 RealMemory=1000
PartitionName=p Nodes=n[1-2] Default=YES MaxTime=10
"""


def _imports(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def core_audit() -> dict[str, list[str]]:
    """Per core module: forbidden imports, store calls and wall-clock reads found."""
    found: dict[str, list[str]] = {}
    for path in sorted(CORE.glob("*.py")):
        tree = ast.parse(path.read_text())
        bad = [f"import {m}" for m in sorted(_imports(tree)) if _forbidden(m)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("store", "writer"):
                bad.append(f"line {node.lineno}: .{node.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in CLOCK_CALLS \
                    and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id in ("time", "datetime", "date"):
                bad.append(f"line {node.lineno}: {node.func.value.id}.{node.func.attr}()")
        found[path.name] = bad
    return found


def test_the_core_does_no_io() -> None:
    audit = core_audit()
    assert len(audit) >= 7  # core, effects, lifecycle, passes, reports, settings, usage
    assert {name: bad for name, bad in audit.items() if bad} == {}


def test_importing_the_core_loads_no_io_module() -> None:
    code = ("import sys, corral.controller.core\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('asyncio','aiohttp','sqlite3','socket','uvloop') or m in "
            "('corral.store.sqlite','corral.controller.shell','corral.controller.persist'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == ""


def test_controller_is_one_class_over_composed_parts(capsys: object) -> None:
    assert Controller.__mro__ == (Controller, object)
    assert Core.__mro__ == (Core, object)
    audit = core_audit()
    store_calls = sum(1 for bad in audit.values() for b in bad if ".store" in b or ".writer" in b)
    clock_reads = sum(1 for bad in audit.values() for b in bad if "()" in b)
    print(f"Controller MRO: {' -> '.join(c.__name__ for c in Controller.__mro__)}; "
          f"core modules: {len(audit)}; store calls in the core: {store_calls}; "
          f"wall-clock reads in the core: {clock_reads}")
    assert store_calls == 0 and clock_reads == 0


def _core_with_job(time_limit: int = 60) -> tuple[Core, Job]:
    core = Core(parse_config(CONF))
    for n in core.nodes.values():
        n.registered = n.responding = True
    job = Job(job_id=core.new_job_id(), name="j", user="u", uid=1000, gid=1000,
              partition="p", work_dir="/tmp", time_limit=time_limit)
    job.submit_time = 100.0
    core.set_state(job, JobState.PENDING, 100.0)
    core.out.take()
    return core, job


def test_a_pass_emits_the_start_as_effects_in_order() -> None:
    core, job = _core_with_job()
    with core.collecting() as fx:
        decision = core.passes.run(200.0)
    assert decision is not None and [s.job_id for s in decision.starts] == [job.job_id]
    kinds = [type(e) for e in fx]
    # the record is persisted before the launch that depends on it is asked for
    assert kinds.index(PersistJob) < kinds.index(Launch)
    started = [e for e in fx if isinstance(e, JobEvent)]
    assert [e.kind for e in started] == [JobEventKind.STARTED]
    assert [e.job for e in fx if isinstance(e, Launch)] == [job]
    assert core.out.effects == []  # nothing left behind: the caller has them all


def test_time_limit_is_the_cores_decision() -> None:
    core, job = _core_with_job(time_limit=60)
    core.passes.run(200.0)
    core.out.take()
    with core.collecting() as fx:
        core.lifecycle.check_time_limits(259.0)
    assert fx == []  # one second before the limit: nothing
    with core.collecting() as fx:
        core.lifecycle.check_time_limits(260.0)
    assert job.state == JobState.COMPLETING and job.kill_reason == "TIMEOUT"
    controls = [e for e in fx if isinstance(e, Control)]
    assert controls == [Control(job.job_id, job.batch_host or "",
                                {"op": "time_limit", "seconds": 60})]
    with core.collecting() as fx:
        core.lifecycle.job_ended(job.job_id, "CANCELLED", 0, 15, 261.0, 261.0)
    assert job.state == JobState.TIMEOUT
    assert any(isinstance(e, ScheduleSoon) for e in fx)
    assert core.stats["timeout"] == 1 and core.stats["started"] == 1  # from the events


def test_effects_without_a_sink_are_kept_until_taken() -> None:
    core = Core(parse_config(CONF))
    core.new_job_id()
    node = core.nodes["n1"]
    from corral.controller.cluster import NodeEventKind
    core.node_event(node, NodeEventKind.DRAINED, 5.0)
    taken = core.out.take()
    assert [type(e) for e in taken] == [PersistNextJobId, NodeEvent]
    assert core.out.take() == []
