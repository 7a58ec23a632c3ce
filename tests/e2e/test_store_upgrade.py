"""A cluster upgraded in place: `corral up` on the state database and JSON token registry of
the release before migrations (tests/fixtures/state-v2) finds every job, account and token
through the real commands."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "state-v2"
CONFIG = """\
ClusterName=lab
KillWait=2
MinJobAge=600
SchedulerInterval=1
NodeName=node-[1-2] CPUs=4 RealMemory=4000
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_corral_up_on_the_previous_release_state_finds_everything(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(FIXTURE, home)
    legacy = json.loads((home / "auth" / "registry.json").read_text())
    c = Cluster(home, CONFIG)
    home.mkdir(exist_ok=True)
    c.workdir.mkdir(exist_ok=True)
    cfg = home / "input.conf"
    cfg.write_text(CONFIG)
    r = c.run("corral", "up", "--config", str(cfg), "--listen", f"127.0.0.1:{_free_port()}",
              timeout=60)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        jobs = c.ok("sacct", "-X", "-n", "-P", "-a", "-j", "1,2,3,4", "-o", "JobID,JobName,User")
        assert {tuple(line.split("|")) for line in jobs.split()} >= {
            ("1", "done", "alice"), ("2", "running", "alice"), ("3", "waiting", "bob"),
            ("4", "failed", "bob")}, jobs
        users = c.ok("sacctmgr", "-n", "-P", "show", "user", "format=User,DefaultAccount")
        assert set(users.split()) == {"alice|theory", "bob|lab", "root|root"}, users
        qos = c.ok("sacctmgr", "-n", "-P", "show", "qos", "format=Name,Priority")
        assert set(qos.split()) == {"normal|0", "high|100"}, qos
        tokens = c.ok("corral", "token", "list")
        for token_id in legacy["tokens"]:
            assert token_id in tokens, tokens
        machines = c.ok("corral", "node", "list")
        assert "login-1" in machines and next(iter(legacy["keys"])) in machines, machines
        # imported into the store: the JSON copy of the secret is gone
        assert not (home / "auth" / "registry.json").exists()
    finally:
        c.stop()
