"""A controller killed during a flood of submissions from several users loses nothing, and
the submitters' sbatch calls ride out the restart (issue: safe as root, availability)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, needs_test_users
from tests.e2e.test_users import users  # noqa: F401  (the fixture: real unprivileged users)

pytestmark = [
    pytest.mark.slow,
    needs_test_users,
]

PER_SUBMITTER = 15


@pytest.fixture()
def flood_cluster(users: dict[str, pwd.struct_passwd]) -> Iterator[Cluster]:  # noqa: F811
    home = Path(tempfile.mkdtemp(prefix="corral-flood-"))
    home.chmod(0o755)  # the users must reach the socket
    c = Cluster(home / "c")
    c.start()
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_sigkill_during_a_flood_from_several_users_loses_nothing(
        flood_cluster: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    c = flood_cluster
    submitters = [(u, k) for u in users.values() for k in range(2)] + [(None, 0)]
    results: dict[str, tuple[int, str, str]] = {}
    owner: dict[str, str] = {}
    lock = threading.Lock()
    started = threading.Event()

    def submit(user: pwd.struct_passwd | None, k: int) -> None:
        who = user.pw_name if user else "root"
        env = dict(c.env, CORRAL_MESSAGE_TIMEOUT="60")
        kw: dict[str, object] = {}
        if user is not None:
            env.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
            kw = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        cwd = user.pw_dir if user else str(c.workdir)
        for i in range(PER_SUBMITTER):
            name = f"flood-{who}-{k}-{i}"
            r = subprocess.run(["sbatch", "--parsable", "-H", "-J", name, "-o", "/dev/null",
                                "--wrap", "true"], capture_output=True, text=True, timeout=90,
                               env=env, cwd=cwd, **kw)  # type: ignore[call-overload]
            with lock:
                results[name] = (r.returncode, r.stdout.strip(), r.stderr)
                owner[name] = who
            started.set()

    threads = [threading.Thread(target=submit, args=s) for s in submitters]
    for t in threads:
        t.start()
    try:
        assert started.wait(30), "no submission went through"
        time.sleep(0.3)
        os.kill(int((c.home / "controller.pid").read_text()), signal.SIGKILL)
        time.sleep(1.5)  # submitters now wait on a dead controller
        c.ok("corral", "up", timeout=60)
    finally:
        for t in threads:
            t.join(timeout=180)
    assert len(results) == len(submitters) * PER_SUBMITTER
    failed = {n: r for n, r in results.items() if r[0] != 0}
    assert not failed, f"sbatch calls that did not ride out the restart: {failed}"
    noticed = [n for n, r in results.items() if "not responding" in r[2]]
    assert noticed, "no submission met the dead controller: the test proved nothing"

    # every acknowledged job is there, exactly once, owned by its submitter
    out = c.ok("squeue", "-h", "-t", "PD", "-o", "%i|%j|%u")
    listed: dict[str, list[tuple[str, str]]] = {}
    for line in out.splitlines():
        jid, name, user = line.split("|")
        listed.setdefault(name, []).append((jid, user))
    for name, (_, jid, _) in results.items():
        assert listed.get(name) == [(jid.split(";")[0], owner[name])], name
    # the cluster is healthy: a normal job runs
    c.ok("scancel", "-u", "root", "-n", ",".join(n for n in results if "-root-" in n))
    for user in users.values():
        subprocess.run(["scancel", "-u", user.pw_name], env=c.env, capture_output=True)
    done = c.sbatch("--wrap", "true")
    c.wait_state(done, "COMPLETED", timeout=30)
