"""Authorization findings N1-N9 (issue 18), tried as real unprivileged users through the
real commands and the real API on running clusters: each test makes the attack and checks
that it is refused with Slurm's words, and that what is allowed still works
(docs/SECURITY.md, "Accounting and privacy")."""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, needs_test_users
from tests.e2e.test_limits import as_user
from tests.e2e.test_users import users  # noqa: F401  (the fixture: real unprivileged users)

pytestmark = [pytest.mark.slow, needs_test_users]

CONFIG = """\
ClusterName=lab
KillWait=2
MinJobAge=600
SchedulerInterval=1
AccountingStorageEnforce=associations,limits
NodeName=node-1 CPUs=4 RealMemory=4000
PartitionName=debug Nodes=node-1 Default=YES MaxTime=INFINITE State=UP
"""
PRIVATE_CONFIG = CONFIG.replace("ClusterName=lab", "ClusterName=lab\n"
                                "PrivateData=jobs,usage,accounts,users")
NO_PRIVILEGE = "sacctmgr: error: Your user doesn't have privilege to perform this action\n"


def _start(users: dict[str, pwd.struct_passwd], config: str) -> tuple[Cluster, Path]:  # noqa: F811
    home = Path(tempfile.mkdtemp(prefix="corral-findings-"))
    home.chmod(0o755)  # the users must reach the socket
    cl = Cluster(home / "c", config)
    cl.start()
    (home / "c").chmod(0o755)
    alice, bob = users["corral-alice"].pw_name, users["corral-bob"].pw_name
    # alice coordinates phys; bob is in theory, a sub-account of phys; chem is apart
    cl.ok("sacctmgr", "-i", "add", "qos", "high")
    cl.ok("sacctmgr", "-i", "add", "account", "phys")
    cl.ok("sacctmgr", "-i", "add", "account", "theory", "parent=phys")
    cl.ok("sacctmgr", "-i", "add", "account", "chem")
    cl.ok("sacctmgr", "-i", "add", "user", alice, "account=phys")
    cl.ok("sacctmgr", "-i", "add", "user", bob, "account=theory")
    cl.ok("sacctmgr", "-i", "add", "user", "root", "account=chem")
    cl.ok("sacctmgr", "-i", "add", "coordinator", alice, "account=phys")
    return cl, home


@pytest.fixture(scope="module")
def c(users: dict[str, pwd.struct_passwd]) -> Iterator[Cluster]:  # noqa: F811
    cl, home = _start(users, CONFIG)
    try:
        yield cl
    finally:
        cl.stop()
        shutil.rmtree(home, ignore_errors=True)


def _api(c: Cluster, user: pwd.struct_passwd, code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` (which may use `client` and `json`) as `user` with Corral's own client."""
    prog = "import json, sys\nfrom corral.cli import client\n" + textwrap.dedent(code)
    return as_user(c, user, sys.executable, "-c", prog)


def _assoc(c: Cluster, account: str, user: str = "") -> str:
    out = c.ok("sacctmgr", "-n", "-P", "show", "association", f"account={account}",
               "format=user,grpjobs,fairshare,maxjobs,qos")
    return next(ln for ln in out.splitlines() if ln.split("|")[0] == user)


# -- N1 ---------------------------------------------------------------------------------
SUBMIT_BODY = {"spec": {"held": "user", "time_limit": 60, "name": "flood"},
               "script": "#!/bin/sh\ntrue\n", "env": {"PATH": "/usr/bin:/bin"}, "argv": []}


def test_n1_concurrent_submissions_cannot_pass_max_submit_jobs(
        c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    bob = users["corral-bob"]
    c.ok("sacctmgr", "-i", "modify", "user", "where", f"name={bob.pw_name}", "account=theory",
         "set", "MaxSubmitJobs=6")
    try:
        # 20 sbatch at once: six get in, each of the others gets Slurm's two lines
        with ThreadPoolExecutor(20) as ex:
            runs = list(ex.map(lambda _: as_user(c, bob, "sbatch", "-H", "-o", "/dev/null",
                                                 "--wrap", "true"), range(20)))
        ok = [r for r in runs if r.returncode == 0]
        assert len(ok) == 6, [r.stderr for r in runs]
        for r in runs:
            if r.returncode != 0:
                assert r.stderr == (
                    "sbatch: error: AssocMaxSubmitJobLimit\n"
                    "sbatch: error: Batch job submission failed: Job violates accounting/QOS "
                    "policy (job submit limit, user's size and/or time limits)\n"), r.stderr
        assert len(c.squeue_ids("-u", bob.pw_name)) == 6
        c.ok("scancel", "-u", bob.pw_name)
        c.wait_for(lambda: not c.squeue_ids("-u", bob.pw_name), what="bob's jobs gone")
        # 150 POST /v1/jobs at once through the API: six again
        r = _api(c, bob, f"""
            from concurrent.futures import ThreadPoolExecutor
            body = json.loads({json.dumps(json.dumps(SUBMIT_BODY))})
            def one(_):
                try:
                    return client.post("/v1/jobs", body)["job_id"]
                except client.ApiError as e:
                    return e.message
            with ThreadPoolExecutor(150) as ex:
                print(json.dumps(list(ex.map(one, range(150)))))
            """)
        assert r.returncode == 0, r.stderr
        answers = json.loads(r.stdout)
        assert sum(isinstance(a, int) for a in answers) == 6, answers
        assert len(c.squeue_ids("-u", bob.pw_name)) == 6
    finally:
        c.ok("scancel", "-u", bob.pw_name)
        c.ok("sacctmgr", "-i", "modify", "user", "where", f"name={bob.pw_name}",
             "account=theory", "set", "MaxSubmitJobs=-1")


# -- N2, N3 -------------------------------------------------------------------------------
def test_n2_a_coordinator_cannot_raise_its_accounts_limits(
        c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice, bob = users["corral-alice"], users["corral-bob"]
    before = (_assoc(c, "phys"), _assoc(c, "theory"))
    for account in ("phys", "theory"):  # the account it coordinates, and a sub-account
        r = as_user(c, alice, "sacctmgr", "-i", "modify", "account", account, "set",
                    "GrpJobs=1000", "fairshare=1000")
        assert r.returncode == 1, r
        assert r.stderr == NO_PRIVILEGE + " Error with request: Access/permission denied\n"
    r = as_user(c, alice, "sacctmgr", "-i", "delete", "account", "phys")
    assert r.returncode == 1 and "Access/permission denied" in r.stderr, r
    assert (_assoc(c, "phys"), _assoc(c, "theory")) == before
    try:
        # what a coordinator may do: its users' limits, sub-accounts and users, moves
        r = as_user(c, alice, "sacctmgr", "-i", "modify", "user", bob.pw_name, "where",
                    "account=theory", "set", "MaxJobs=5")
        assert r.returncode == 0, r.stderr
        assert _assoc(c, "theory", bob.pw_name).split("|")[3] == "5"
        for args in (("add", "account", "optics", "parent=phys"),
                     ("add", "account", "lasers", "parent=phys"),
                     ("add", "user", bob.pw_name, "account=optics"),
                     ("modify", "account", "lasers", "set", "parent=optics")):
            r = as_user(c, alice, "sacctmgr", "-i", *args)
            assert r.returncode == 0, (args, r.stderr)
        out = c.ok("sacctmgr", "-n", "-P", "show", "association", "account=lasers",
                   "format=account,parentname")
        assert out.splitlines() == ["lasers|optics"]
        # but not out of its tree
        r = as_user(c, alice, "sacctmgr", "-i", "modify", "account", "lasers", "set",
                    "parent=chem")
        assert r.returncode == 1 and "Access/permission denied" in r.stderr, r
    finally:
        c.ok("sacctmgr", "-i", "delete", "account", "lasers")
        c.ok("sacctmgr", "-i", "delete", "user", bob.pw_name, "where", "account=optics")
        c.ok("sacctmgr", "-i", "delete", "account", "optics")
        c.ok("sacctmgr", "-i", "modify", "user", bob.pw_name, "where", "account=theory",
             "set", "MaxJobs=-1")


def test_n3_a_coordinator_cannot_grant_a_qos(
        c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice, bob = users["corral-alice"], users["corral-bob"]
    for args in (("modify", "user", bob.pw_name, "where", "account=theory", "set", "QOS+=high"),
                 ("modify", "user", alice.pw_name, "where", "account=phys", "set", "QOS=high"),
                 ("modify", "user", bob.pw_name, "where", "account=theory", "set",
                  "DefaultQOS=high")):
        r = as_user(c, alice, "sacctmgr", "-i", *args)
        assert r.returncode == 1, (args, r)
        assert r.stderr == NO_PRIVILEGE + " Error with request: Access/permission denied\n"
    r = as_user(c, alice, "sacctmgr", "-i", "add", "user", "root", "account=theory", "qos=high")
    assert r.returncode == 1, r
    assert r.stderr == NO_PRIVILEGE + " Problem adding users: Access/permission denied\n"
    assert "high" not in c.ok("sacctmgr", "-n", "-P", "show", "association",
                              "format=account,user,qos")
    # a QoS the account already has may be given
    r = as_user(c, alice, "sacctmgr", "-i", "modify", "user", bob.pw_name, "where",
                "account=theory", "set", "QOS=normal")
    assert r.returncode == 0, r.stderr


# -- N4, N8 -------------------------------------------------------------------------------
def test_n4_only_an_administrator_changes_admin_levels_and_n8_dumps(
        c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice, bob = users["corral-alice"], users["corral-bob"]
    c.ok("sacctmgr", "-i", "modify", "user", alice.pw_name, "set", "AdminLevel=Operator")
    try:
        for level in ("Administrator", "Operator", "None"):
            r = as_user(c, alice, "sacctmgr", "-i", "modify", "user", bob.pw_name, "set",
                        f"AdminLevel={level}")
            assert (r.returncode, r.stdout, r.stderr) == (
                1, "", "sacctmgr: error: You must be a super user to modify a users admin "
                       "level\n"), r
        r = as_user(c, alice, "sacctmgr", "-i", "add", "user", "nobody", "account=chem",
                    "AdminLevel=Administrator")
        assert r.returncode == 1 and "must be a super user" in r.stderr, r
        out = c.ok("sacctmgr", "-n", "-P", "show", "user", "format=user,admin")
        assert f"{bob.pw_name}|None" in out.splitlines()
        assert "nobody" not in out
        # an Operator still does an operator's work
        r = as_user(c, alice, "sacctmgr", "-i", "add", "account", "opsacct")
        assert r.returncode == 0, r.stderr
        c.ok("sacctmgr", "-i", "delete", "account", "opsacct")
    finally:
        c.ok("sacctmgr", "-i", "modify", "user", alice.pw_name, "set", "AdminLevel=None")
    # N8: the whole accounting tree is the administrators'
    r = as_user(c, bob, "sacctmgr", "dump", "lab", f"file={bob.pw_dir}/lab.cfg")
    assert (r.returncode, r.stderr) == (
        1, " Your user does not have sufficient privileges to dump clusters.\n"), r
    assert not Path(bob.pw_dir, "lab.cfg").exists()
    r = _api(c, bob, """
        try:
            client.get("/v1/accounts/dump", cluster="lab")
            print("answered")
        except client.ApiError as e:
            print(e.status, e.message)
        """)
    assert r.stdout.strip() == "403  Your user does not have sufficient privileges to dump " \
                               "clusters.", r
    c.ok("sacctmgr", "dump", "lab", f"file={c.home}/lab.cfg")
    assert "Cluster - 'lab'" in Path(c.home, "lab.cfg").read_text()


# -- N6 -----------------------------------------------------------------------------------
def test_n6_notify_text_cannot_forge_log_lines(
        c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    bob = users["corral-bob"]
    r = as_user(c, bob, "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 60")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    try:
        c.wait_state(job, "RUNNING")
        forged = "2026-01-01 00:00:00,000 corral.controller WARNING FORGED root logged in"
        for _ in range(30):
            r = as_user(c, bob, "scontrol", "notify", job, f"hi\n{forged}\x1b[2J" + "x" * 3000)
            assert r.returncode == 0, r.stderr
        log = (c.home / "log" / "controller.log").read_text(errors="replace")
        lines = log.splitlines()
        assert not any(ln.startswith("2026-01-01") for ln in lines)
        assert "\x1b" not in log
        noted = [ln for ln in lines if f"job {job} notified by" in ln]
        # escaped, bounded, and at most 10 a minute
        assert noted and all("hi\\x0a2026-01-01" in ln and len(ln) < 400 for ln in noted)
        assert len(noted) <= 10
    finally:
        c.ok("scancel", job)


# -- N7 -----------------------------------------------------------------------------------
def _secret_job(c: Cluster, owner: pwd.struct_passwd) -> str:
    # running: sacct lists it (a held job is not eligible, and sacct leaves it out)
    r = as_user(c, owner, "sbatch", "--parsable", "--export=ALL,TOKEN=s3cr3t-token",
                "-o", "/dev/null", "--wrap", "echo s3cr3t-wrap; sleep 60")
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_n7_submit_lines_are_private_to_owner_operators_and_coordinators(
        c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice, bob = users["corral-alice"], users["corral-bob"]
    job = _secret_job(c, alice)  # in phys: bob neither owns it nor coordinates phys
    try:
        c.wait_state(job, "RUNNING")
        r = as_user(c, bob, "sacct", "-a", "-X", "-n", "-P", "-o", "jobid,submitline")
        assert r.returncode == 0, r.stderr
        assert f"{job}|" in r.stdout and "s3cr3t" not in r.stdout, r.stdout
        r = _api(c, bob, f"""
            print(json.dumps(client.get("/v1/jobs", ids="{job}")["jobs"]))
            print(json.dumps(client.get("/v1/jobs", fields="job_id,submit_line", rows=1)))
            """)
        assert r.returncode == 0, r.stderr
        assert job in r.stdout and "s3cr3t" not in r.stdout, r.stdout
        # without PrivateData=jobs the job itself stays visible
        assert job in as_user(c, bob, "squeue", "-h", "-o", "%i").stdout
        # its owner and root see the submit line; so does bob as a coordinator of phys
        query = ("sacct", "-j", job, "-X", "-n", "-P", "-o", "submitline")
        for out in (as_user(c, alice, *query).stdout, c.ok(*query)):
            assert "TOKEN=s3cr3t-token" in out and "s3cr3t-wrap" in out, out
        c.ok("sacctmgr", "-i", "add", "coordinator", bob.pw_name, "account=phys")
        try:
            out = as_user(c, bob, "sacct", "-j", job, "-X", "-n", "-P", "-o", "submitline")
            assert "TOKEN=s3cr3t-token" in out.stdout, out
        finally:
            c.ok("sacctmgr", "-i", "delete", "coordinator", bob.pw_name, "account=phys")
    finally:
        c.ok("scancel", job)


def test_n7_private_data_hides_other_users_jobs_usage_accounts_and_users(
        users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    alice, bob = users["corral-alice"], users["corral-bob"]
    c, home = _start(users, PRIVATE_CONFIG)
    try:
        job = _secret_job(c, alice)
        mine = as_user(c, bob, "sbatch", "--parsable", "-o", "/dev/null",
                       "--wrap", "sleep 60").stdout.strip()
        c.wait_state(job, "RUNNING")
        c.wait_state(mine, "RUNNING")
        # jobs: bob sees his own job only, in squeue, scontrol and sacct
        assert as_user(c, bob, "squeue", "-h", "-o", "%i").stdout.split() == [mine]
        r = as_user(c, bob, "scontrol", "show", "job", job)
        assert r.returncode == 1 and "Invalid job id specified" in r.stderr, r
        out = as_user(c, bob, "sacct", "-a", "-X", "-n", "-P", "-o", "jobid").stdout
        assert out.split() == [mine], out
        # alice, coordinator of phys, sees bob's job (theory is below phys) and her own
        out = as_user(c, alice, "squeue", "-h", "-o", "%i").stdout.split()
        assert sorted(out) == sorted([job, mine]), out
        assert sorted(c.ok("squeue", "-h", "-o", "%i").split()) == sorted([job, mine])
        # usage: bob's sshare has no other user's row
        out = as_user(c, bob, "sshare", "-a", "-n", "-P", "-o", "account,user").stdout
        assert alice.pw_name not in out and bob.pw_name in out, out
        # users and accounts: bob sees himself, no one else, no account definitions
        out = as_user(c, bob, "sacctmgr", "-n", "-P", "show", "user", "format=user").stdout
        assert out.split() == [bob.pw_name], out
        out = as_user(c, bob, "sacctmgr", "-n", "-P", "show", "account",
                      "format=account").stdout
        assert out.split() == [], out
        out = as_user(c, alice, "sacctmgr", "-n", "-P", "show", "account",
                      "format=account").stdout
        assert sorted(out.split()) == ["phys", "theory"], out
        assert "chem" in c.ok("sacctmgr", "-n", "-P", "show", "account", "format=account")
        # an AdminLevel=Operator user sees everything, submit lines included
        c.ok("sacctmgr", "-i", "modify", "user", bob.pw_name, "set", "AdminLevel=Operator")
        out = as_user(c, bob, "sacct", "-a", "-X", "-n", "-P", "-o", "jobid,submitline").stdout
        assert f"{job}|" in out and "TOKEN=s3cr3t-token" in out, out
    finally:
        c.stop()
        shutil.rmtree(home, ignore_errors=True)


# -- N9 -----------------------------------------------------------------------------------
def test_n9_corral_down_and_status_say_one_line(
        c: Cluster, users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    bob = users["corral-bob"]
    r = as_user(c, bob, "corral", "down")  # CORRAL_HOME names root's cluster
    assert r.returncode == 1, r
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("corral: error: ") and str(c.home) in r.stderr, r.stderr
    c.ok("sinfo")  # still up
    # a reader that leaves at once (`corral status | head -3`): no traceback
    p = subprocess.Popen(["corral", "status"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=c.env)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait(timeout=30)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


# -- item 3: names, descriptions and organizations lower-cased -----------------------------
def test_account_names_descriptions_and_organizations_are_lower_cased(c: Cluster) -> None:
    c.ok("sacctmgr", "-i", "add", "account", "LabX", "Description=LabA", "Organization=OrgA")
    try:
        out = c.ok("sacctmgr", "-n", "-P", "show", "account", "labx",
                   "format=account,descr,org")
        assert out == "labx|laba|orga\n"
        c.ok("sacctmgr", "-i", "modify", "account", "LABX", "set", "Description=BigLab")
        out = c.ok("sacctmgr", "-n", "-P", "show", "account", "LabX", "format=descr")
        assert out == "biglab\n"
    finally:
        c.ok("sacctmgr", "-i", "delete", "account", "labx")
