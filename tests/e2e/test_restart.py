"""Restart safety: SIGKILL the controller mid-stream; nothing acknowledged is lost."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


@pytest.fixture()
def own_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "home")
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _controller_pid(c: Cluster) -> int:
    return int((c.home / "controller.pid").read_text())


def test_sigkill_controller_keeps_acknowledged_jobs_and_running_job_finishes(own_cluster: Cluster) -> None:
    c = own_cluster
    marker = c.workdir / "survivor.done"
    running = c.sbatch("-J", "survivor", "--wrap", f"sleep 4; echo finished > {marker}")
    c.wait_state(running, "RUNNING")

    acknowledged: list[int] = []
    stop = threading.Event()

    def submitter() -> None:
        while not stop.is_set():
            r = c.run("sbatch", "--parsable", "-H", "-J", "acked", "--wrap", "true")
            if r.returncode == 0:
                acknowledged.append(int(r.stdout.strip()))

    t = threading.Thread(target=submitter)
    t.start()
    try:
        c.wait_for(lambda: len(acknowledged) >= 10, timeout=30, what="some submissions")
        os.kill(_controller_pid(c), signal.SIGKILL)
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(timeout=30)
    # the dead controller refuses cleanly, then a new one starts and the agent reconnects
    r = c.run("squeue")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    c.ok("corral", "up", timeout=60)

    listed = set(int(x) for x in c.squeue_ids("-t", "PD", "-n", "acked"))
    missing = [j for j in acknowledged if j not in listed]
    assert not missing, f"acknowledged jobs lost after SIGKILL: {missing}"
    # ids are never reused after a restart
    new = c.sbatch("-H", "--wrap", "true")
    assert new > max(acknowledged)

    c.wait_state(running, "COMPLETED", timeout=30)
    assert marker.read_text() == "finished\n"
    c.ok("scancel", "-n", "acked")


def test_agent_restart_keeps_a_running_job(own_cluster: Cluster) -> None:
    c = own_cluster
    marker = c.workdir / "agent-survivor.done"
    jid = c.sbatch("--wrap", f"sleep 4; echo finished > {marker}")
    c.wait_state(jid, "RUNNING")
    agent_pid = int((c.home / "agent.pid").read_text())
    os.kill(agent_pid, signal.SIGKILL)
    c.wait_for(lambda: "*" in c.ok("sinfo", "-h", "-N", "-n", "node-1", "-o", "%t"),
               timeout=20, what="node-1 not responding")
    assert c.state(jid) == "RUNNING"  # the job's supervisor does not depend on the agent
    c.ok("corral", "up", timeout=60)  # starts a new agent, which re-syncs the job
    c.wait_state(jid, "COMPLETED", timeout=30)
    assert marker.read_text() == "finished\n"
    assert "*" not in c.ok("sinfo", "-h", "-N", "-n", "node-1", "-o", "%t")
