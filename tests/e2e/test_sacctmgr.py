"""sacctmgr through the real command on a running cluster: changes, tables, refusals,
dump/load, durability across a controller SIGKILL."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.test_users import grant_traverse

pytestmark = pytest.mark.slow

SACCTMGR = ["sacctmgr"]  # the real command


@pytest.fixture(scope="module")
def c() -> Iterator[Cluster]:
    # reachable by other users (pytest's tmp dirs are root's only): the refusal test needs it
    home = Path(tempfile.mkdtemp(prefix="corral-sacctmgr-"))
    home.chmod(0o755)
    cl = Cluster(home / "c")
    cl.start()
    (home / "c").chmod(0o755)
    try:
        yield cl
    finally:
        cl.stop()
        shutil.rmtree(home, ignore_errors=True)


def mgr(c: Cluster, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return c.run(*SACCTMGR, *args, input=input)


def ok(c: Cluster, *args: str) -> str:
    r = mgr(c, *args)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    return r.stdout


def test_lab_setup_and_tables(c: Cluster) -> None:
    # a new cluster starts with the normal QoS and itself (as slurmdbd makes them)
    assert ok(c, "-nP", "show", "qos", "format=name,descr") == "normal|Normal QOS default\n"
    r = mgr(c, "-i", "add", "cluster", "testcluster")
    assert (r.returncode, r.stdout) == \
        (1, " This cluster testcluster already exists.  Not adding.\n Nothing new added.\n")
    out = ok(c, "-i", "add", "cluster", "other")
    assert out == " Adding Cluster(s)\n  Name           = other\n"
    ok(c, "-i", "delete", "cluster", "other")
    out = ok(c, "-i", "add", "account", "lab", "Description=Smith lab", "Organization=bio",
             "GrpTRES=gres/gpu=16,cpu=256,mem=1T")
    assert out == (" Adding Account(s)\n  lab\n Settings\n  Description     = smith lab\n"
                   "  Organization    = bio\n Associations\n"
                   "  A = lab        C = testcluste\n"
                   " Settings\n  GrpTRES       = cpu=256,mem=1T,gres/gpu=16\n")
    ok(c, "-i", "add", "account", "students", "parent=lab", "MaxJobs=2")
    r = mgr(c, "-i", "add", "account", "lab")
    assert (r.returncode, r.stdout) == (1, " Nothing new added.\n")
    out = ok(c, "-i", "add", "user", "ann,ben", "account=students")
    assert " Adding User(s)\n  ann\n  ben\n Settings =\n  Default Account = students\n" in out
    out = ok(c, "-i", "modify", "user", "where", "name=ann", "set", "GrpTRES=gres/gpu=2",
             "MaxWall=1-00:00:00")
    assert out == (" Modified user associations...\n"
                   "  C = testcluster A = students             U = ann      \n")

    out = ok(c, "-nP", "show", "assoc", "format=account,user,grptres,maxjobs,maxwall")
    assert out.splitlines() == [
        "root||||", "root|root|||", "lab||cpu=256,mem=1T,gres/gpu=16||",
        "students|||2|", "students|ann|gres/gpu=2||1-00:00:00", "students|ben|||"]
    out = ok(c, "show", "assoc", "tree", "format=account,user%8")
    assert out.splitlines()[:4] == [
        "Account                  User ", "-------------------- -------- ",
        "root                          ", " root                    root "]
    out = ok(c, "-p", "list", "account", "format=acc,descr,org")
    assert "lab|smith lab|bio|\n" in out and out.startswith("Account|Descr|Org|\n")
    out = ok(c, "show", "user", "ann", "withassoc", "format=user,acc%12,grptres")
    assert out.splitlines()[2] == "       ann     students    gres/gpu=2 "
    assert ok(c, "-s", "show", "user", "ann", "format=user,acc%12,grptres") == out


def test_bad_input_is_refused_and_changes_nothing(c: Cluster) -> None:
    before = ok(c, "-nP", "show", "assoc")
    for args, msg in [
        (("modify", "user", "where", "name=ann", "set", "GrpTRES=gres/gpu=many"),
         "Invalid TRES value"),
        (("modify", "user", "where", "name=ann", "set", "Bogus=1"), "Unknown option: Bogus=1"),
        (("modify", "account", "where", "name=lab", "set", "parent=students"), "below it"),
        (("add", "account", "x", "parent=nosuch"), "Parent account 'nosuch' doesn't exist"),
        (("modify", "user", "ann"), "You didn't give me anything to set"),
        (("show", "assoc", "format=nonsense"), "Unknown field 'nonsense'"),
    ]:
        r = mgr(c, "-i", *args)
        assert r.returncode == 1, (args, r.stdout)
        assert msg in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert ok(c, "-nP", "show", "assoc") == before


def test_without_immediate_it_asks_and_no_discards(c: Cluster) -> None:
    r = mgr(c, "add", "account", "chem", input="n\n")
    assert r.returncode == 0
    assert r.stdout.endswith("Would you like to commit changes? (You have 30 seconds to "
                             "decide)\n(N/y): \n Changes Discarded\n")
    assert "chem" not in ok(c, "-nP", "show", "account")
    r = mgr(c, "add", "account", "chem", input="y\n")
    assert r.returncode == 0 and "chem|" in ok(c, "-nP", "show", "account")


def test_dump_and_load_round_trip(c: Cluster) -> None:
    path = c.workdir / "tc.cfg"
    ok(c, "dump", "testcluster", f"file={path}")
    text = path.read_text()
    assert "Cluster - 'testcluster'" in text and "User - 'ann'" in text
    before = ok(c, "-nP", "show", "assoc")
    ok(c, "-i", "delete", "user", "ben")
    assert "ben" not in ok(c, "-nP", "show", "assoc")
    ok(c, "-i", "load", str(path))
    assert ok(c, "-nP", "show", "assoc") == before


def test_changes_survive_a_controller_sigkill(c: Cluster) -> None:
    ok(c, "-i", "add", "user", "dora", "account=lab", "MaxSubmitJobs=3")
    os.kill(int((c.home / "controller.pid").read_text()), signal.SIGKILL)
    time.sleep(0.5)
    c.ok("corral", "up", timeout=60)
    assert "lab|dora|3\n" in ok(c, "-nP", "show", "assoc", "format=acc,user,maxsubmit")


@pytest.fixture()
def others_may_run_python() -> Iterator[None]:
    """o+x on the interpreter's directories (it may live under root's 0700 home), undone
    afterwards (as tests/e2e/test_users.py does)."""
    changed = grant_traverse(sys.executable)
    try:
        yield
    finally:
        for path, mode in changed:
            os.chmod(path, mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as another user")
@pytest.mark.usefixtures("others_may_run_python")
def test_only_operators_change(c: Cluster) -> None:
    nobody = 65534

    def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SACCTMGR, *args], capture_output=True, text=True, env=c.env,
                              cwd="/", timeout=30, user=nobody, group=nobody, extra_groups=[])
    r = as_nobody("-nP", "show", "qos", "format=name")
    assert r.returncode == 0 and r.stdout == "normal\n", r.stderr  # anyone may look
    r = as_nobody("-i", "add", "qos", "fast")
    assert (r.returncode, r.stdout, r.stderr) == \
        (1, "", " Problem adding QOS: Access/permission denied\n")
    r = as_nobody("-i", "modify", "user", "where", "name=ann", "set", "MaxJobs=9")
    assert r.returncode == 1 and r.stderr == " Error with request: Access/permission denied\n"
    assert ok(c, "-nP", "show", "qos", "format=name") == "normal\n"


def test_list_event_shows_drained_nodes(c: Cluster) -> None:
    c.ok("scontrol", "update", "nodename=node-4", "state=drain", "reason=fan broken")
    try:
        out = ok(c, "-nP", "list", "event", "format=cluster,nodename,state,reason,user,end")
        assert out == "testcluster|node-4|DRAIN|fan broken|root(0)|Unknown\n"
        out = ok(c, "list", "event", "nodes=node-4")
        lines = out.splitlines()
        assert lines[0] == ("   Cluster NodeName                  TimeStart             TimeEnd "
                            " State                         Reason       User ")
        assert lines[2].startswith("testclust+ node-4          20")  # cut with "+"
        assert ok(c, "-nP", "list", "event", "nodes=node-1") == ""
    finally:
        c.ok("scontrol", "update", "nodename=node-4", "state=resume")


def test_every_bad_line_is_refused_with_slurms_message_and_changes_nothing(c: Cluster) -> None:
    """Malformed lines, unknown account/user/QoS, limits that do not parse, cycles and the
    deletion of an account whose users run jobs: Slurm's message, exit 1, nothing changed."""
    ok(c, "-i", "add", "account", "badlab")
    ok(c, "-i", "add", "account", "badsub", "parent=badlab")
    ok(c, "-i", "add", "user", "root", "account=badsub")
    job = c.sbatch("-A", "badsub", "-o", "/dev/null", "--wrap", "sleep 120")
    c.wait_state(job, "RUNNING")
    before = ok(c, "-nP", "show", "assoc") + ok(c, "-nP", "show", "qos")
    try:
        for args, msg in [
            (("add",), "Need an entity to add"),
            (("frobnicate", "user", "x"), "invalid keyword: frobnicate"),
            (("add", "widget", "x"), "No valid entity in add command"),
            (("add", "user"), "Need name of user to add."),
            (("add", "user", "nobody1"), "Need a default account for these users to add."),
            (("add", "user", "nobody1", "account=nosuch"), "This account 'nosuch' doesn't exist."),
            (("add", "user", "nobody1", "account=badlab", "qos=nosuch"), "Unknown QOS name: nosuch"),
            (("modify", "user", "where", "name=nosuch", "set", "MaxJobs=2"),
             "User nosuch does not exist"),
            (("delete", "user", "nosuch"), "Nothing deleted"),
            (("delete", "account", "nosuch"), "Nothing deleted"),
            (("modify", "qos", "nosuch", "set", "priority=3"), "Nothing modified"),
            (("modify", "user", "where", "name=root", "set", "MaxJobs=abc"),
             "Bad maxjobs value: abc"),
            (("modify", "user", "where", "name=root", "set", "MaxWall=forever"),
             "Bad maxwall time format: forever"),
            (("modify", "user", "where", "name=root", "set", "GrpTRES=cpu"),
             "Invalid TRES string 'cpu'"),
            (("modify", "user", "where", "name=root", "set", "GrpTRES=bogus=3"),
             "Invalid TRES name 'bogus'"),
            (("modify", "user", "where", "name=root", "set", "QOS=nosuch"),
             "Unknown QOS name: nosuch"),
            (("modify", "user", "where", "set", "MaxJobs=1"), "No conditions given"),
            (("modify", "account", "where", "name=badlab", "set", "parent=badlab"),
             "You can't make badlab a child of badlab"),
            (("modify", "account", "where", "name=badlab", "set", "parent=badsub"),
             "badsub is below it"),
            (("delete", "account", "badsub"), "Job(s) active, cancel job(s) before remove"),
            (("delete", "account", "badlab"), "Job(s) active, cancel job(s) before remove"),
            (("add", "qos", "q2", "Flags=Nonsense"), "Unknown QOS flag used in:"),
            (("add", "qos", "q3", "Preempt=nosuch"), "Unknown QOS name: nosuch"),
            (("add", "qos", "q4", "UsageFactor=x"), "Bad UsageFactor value: x"),
            (("add", "coordinator", "nosuch", "account=badlab"), "User nosuch doesn't exist."),
            (("add", "account", "x", "Fairshare=abc"), "Bad Fairshare value: abc"),
        ]:
            r = mgr(c, "-i", *args)
            assert r.returncode == 1, (args, r.stdout, r.stderr)
            assert msg in r.stdout + r.stderr, (args, r.stdout, r.stderr)
            assert "Traceback" not in r.stderr
        r = mgr(c, "-i", "delete", "account", "badlab")
        assert f"  JobID = {job:<10} C = " in r.stderr + r.stdout, r  # which job holds it
        assert ok(c, "-nP", "show", "assoc") + ok(c, "-nP", "show", "qos") == before
    finally:
        c.ok("scancel", str(job))
