"""A cluster upgraded in place: `corral up` on the state database and JSON token registry of
the release before migrations (tests/fixtures/state-v2) finds every job, account and token,
and on schema 5's (tests/fixtures/state-v5) every reservation and runtime partition,
through the real commands."""

from __future__ import annotations

import json
import re
import shutil
import socket
import sqlite3
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


FIXTURE_V5 = Path(__file__).resolve().parents[1] / "fixtures" / "state-v5"


def test_reservations_and_runtime_partitions_of_schema_5_survive_the_upgrade(
        tmp_path: Path) -> None:
    """tests/fixtures/state-v5 keeps them as payload rows (job ids 0 and -1): `corral up`
    migrates them into their tables, and every one is found, before and after a restart."""
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(FIXTURE_V5 / "state.db", home / "state.db")
    c = Cluster(home)  # DEFAULT_CONFIG: the fixture's nodes and partitions

    def check() -> None:
        resv = c.ok("scontrol", "show", "reservation")
        names = re.findall(r"^ReservationName=(\S+)", resv, re.M)
        assert sorted(names) == ["maint", "root_1", "weekly"], resv
        maint = c.ok("scontrol", "show", "reservation", "maint")
        assert "Nodes=node-1 " in maint and "Flags=MAINT,IGNORE_JOBS,SPEC_NODES" in maint, maint
        assert "Flags=WEEKLY,SPEC_NODES" in c.ok("scontrol", "show", "reservation", "weekly")
        parts = c.ok("scontrol", "show", "partition")
        assert re.findall(r"^PartitionName=(\S+)", parts, re.M) == ["debug", "short", "extra"]
        extra = c.ok("scontrol", "show", "partition", "extra")
        assert "Nodes=node-[3-4]" in extra and "State=DRAIN" in extra, extra
        assert "MaxTime=00:05:00" in extra, extra
        assert "MaxTime=00:20:00" in c.ok("scontrol", "show", "partition", "short")
        assert "Comment=new disks" in c.ok("scontrol", "show", "node", "node-2")
        node3 = c.ok("scontrol", "show", "node", "node-3")
        assert "AvailableFeatures=fast,nvme" in node3 and "Weight=5 " in node3, node3

    c.start()
    try:
        check()
        db = sqlite3.connect(home / "state.db")
        try:  # moved, not copied: no payload of a fake job id is left
            assert db.execute("SELECT COUNT(*) FROM payloads WHERE job_id <= 0").fetchone() \
                == (0,)
            assert db.execute("SELECT COUNT(*) FROM reservations").fetchone() == (3,)
        finally:
            db.close()
        # the counter of generated names came along: the next is root_2
        r = c.run("scontrol", "create", "reservation", "StartTime=now+1day", "Duration=60",
                  "Nodes=node-3", "Users=root")
        assert (r.returncode, r.stdout) == (0, "Reservation created: root_2\n"), r.stderr
        c.ok("scontrol", "delete", "ReservationName=root_2")
        c.ok("corral", "down", timeout=60)
        c.ok("corral", "up", timeout=60)
        check()  # now from their own tables
    finally:
        c.stop()
