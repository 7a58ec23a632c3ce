"""A real Corral cluster for tests: controller + agent processes in a temporary $CORRAL_HOME."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corral import paths

BIN = os.path.dirname(sys.executable)
# Tests that run commands as real unprivileged users create them (useradd), as root.
CAN_CREATE_USERS = os.geteuid() == 0 and shutil.which("useradd") is not None
needs_test_users = pytest.mark.skipif(not CAN_CREATE_USERS,
                                      reason="needs root and useradd to create test users")
# The demo cluster of the README: four declared nodes with four GPUs each.
LAB_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "lab.conf"

DEFAULT_CONFIG = """\
ClusterName=testcluster
KillWait=2
MinJobAge=600
SchedulerInterval=1
NodeName=node-[1-4] CPUs=16 RealMemory=64000 Gres=gpu:4
PartitionName=debug Nodes=node-[1-4] Default=YES MaxTime=INFINITE State=UP
PartitionName=short Nodes=node-[1-2] MaxTime=10:00 State=UP
"""


class Cluster:
    def __init__(self, home: Path, config: str = DEFAULT_CONFIG) -> None:
        self.home = home
        self.config = config
        self.env = dict(os.environ)
        self.env["CORRAL_HOME"] = str(home)
        self.env["PATH"] = BIN + os.pathsep + self.env.get("PATH", "")
        for k in list(self.env):
            if k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SACCT_", "SINFO_")):
                del self.env[k]
        self.workdir = home / "work"

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(exist_ok=True)
        cfg = self.home / "input.conf"
        cfg.write_text(self.config)
        r = self.run("corral", "up", "--config", str(cfg), timeout=60)
        if r.returncode != 0:
            self.stop()  # whatever did start must not outlive the test
            raise AssertionError(r.stdout + r.stderr)

    def stop(self) -> None:
        self.run("corral", "down", timeout=60)

    def run(self, *args: str, input: str | None = None, timeout: float = 30,
            cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        e = dict(self.env)
        if env:
            e.update(env)
        return subprocess.run(list(args), input=input, capture_output=True, text=True,
                              timeout=timeout, cwd=str(cwd or self.workdir), env=e)

    def ok(self, *args: str, **kw: object) -> str:
        r = self.run(*args, **kw)  # type: ignore[arg-type]
        assert r.returncode == 0, f"{args} failed ({r.returncode}): {r.stdout}{r.stderr}"
        return r.stdout

    def sbatch(self, *args: str, **kw: object) -> int:
        out = self.ok("sbatch", "--parsable", *args, **kw)
        return int(out.strip().split(";")[0])

    def state(self, job: int | str) -> str:
        out = self.ok("sacct", "-j", str(job), "-X", "-n", "-P", "-o", "State")
        lines = [ln for ln in out.splitlines() if ln.strip()]
        return lines[0].split()[0] if lines else ""

    def restarts(self, job: int | str) -> int:
        """The job's requeue count, as `scontrol show job` prints it (Restarts=; Slurm 22.05's
        sacct has no Restarts field)."""
        out = self.ok("scontrol", "show", "job", str(job))
        m = re.search(r" Restarts=(\d+) ", out)
        assert m, out
        return int(m.group(1))

    def wait_state(self, job: int | str, states: set[str] | str, timeout: float = 30) -> str:
        want = {states} if isinstance(states, str) else states
        deadline = time.monotonic() + timeout
        st = ""
        while time.monotonic() < deadline:
            st = self.state(job)
            if st in want:
                return st
            time.sleep(0.1)
        raise AssertionError(f"job {job} is {st!r}, wanted {want}")

    def wait_for(self, pred: Callable[[], bool], timeout: float = 30, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    def reconfigure(self, config: str) -> None:
        """Replace the cluster's slurm.conf with `config` and `scontrol reconfigure`."""
        Path(paths.config_path(str(self.home))).write_text(config)
        self.ok("scontrol", "reconfigure")

    def squeue_ids(self, *args: str) -> list[str]:
        out = self.ok("squeue", "-h", "-o", "%i", *args)
        return [x.strip() for x in out.splitlines() if x.strip()]


def job_id_from(text: str) -> int:
    m = re.search(r"(\d+)", text)
    assert m, text
    return int(m.group(1))


@contextlib.contextmanager
def running(tmp_path_factory: pytest.TempPathFactory, config: str = DEFAULT_CONFIG,
            name: str = "corral") -> Iterator[Cluster]:
    """A cluster started in a fresh temporary home (a module fixture's), stopped after,
    whatever happens."""
    c = Cluster(Path(tmp_path_factory.mktemp(name)), config)
    try:
        c.start()
        yield c
    finally:
        c.stop()
