"""scrontab through the real commands on a running cluster (ScronParameters=enable)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.e2e.cluster import DEFAULT_CONFIG, Cluster, needs_test_users
from tests.e2e.test_users import grant_traverse

ENABLED = DEFAULT_CONFIG + "ScronParameters=enable\n"
USER = "corral-scron-ann"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    home = Path(tempfile.mkdtemp(prefix="corral-scron-"))
    home.chmod(0o755)  # the test user runs commands against it too
    c = Cluster(home / "c", ENABLED)
    c.start()
    try:
        yield c
    finally:
        c.run("scrontab", "-r")
        c.stop()
        shutil.rmtree(home, ignore_errors=True)


def job_of_crontab(c: Cluster) -> list[str]:
    return c.squeue_ids("-h", "-u", "root", "-t", "PD,R,CG")


def show_job(c: Cluster, job: str) -> str:
    return c.ok("scontrol", "show", "job", job)


def squeue_fields(c: Cluster, job: str) -> list[str]:
    return c.ok("squeue", "-h", "-j", job, "-o", "%T|%r|%S").strip().split("|")


def next_minute_text(now: float) -> str:
    t = datetime.fromtimestamp(now).replace(second=0, microsecond=0)
    return datetime.fromtimestamp(t.timestamp() + 60).strftime("%Y-%m-%dT%H:%M:%S")


def test_every_minute_runs_and_is_requeued(cluster: Cluster) -> None:
    c = cluster
    out = c.workdir / "cron.out"
    text = (f"# runs every minute\n#SCRON --time=1\n#SCRON -J tick\n"
            f"* * * * * date +%s >> {out}\n")
    before = time.time()
    r = c.run("scrontab", "-", input=text)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert c.ok("scrontab", "-l") == text
    [job] = job_of_crontab(c)
    state, reason, start = squeue_fields(c, job)
    assert (state, reason) == ("PENDING", "BeginTime")
    assert start in (next_minute_text(before), next_minute_text(time.time()))
    shown = show_job(c, job)
    assert 'CronJob=Yes CrontabSpec="* * * * *"' in shown
    assert "JobName=tick" in shown and "TimeLimit=00:01:00" in shown
    assert f"Command=date +%s >> {out}\n" in shown
    # it runs at the minute boundary (at most ~60 s away), then waits for the next one
    c.wait_for(lambda: out.exists() and out.read_text().strip() != "", timeout=100,
               what="the cron job's first run")
    ran_at = int(out.read_text().split()[0])
    assert ran_at % 60 < 30  # started at (or just after) a minute boundary
    c.wait_for(lambda: squeue_fields(c, job)[:2] == ["PENDING", "BeginTime"], timeout=30,
               what="the cron job requeued")
    assert job_of_crontab(c) == [job]  # the same job id, as Slurm requeues it
    assert squeue_fields(c, job)[2] == next_minute_text(ran_at)
    assert "Restarts=1" in show_job(c, job)


def test_bad_lines_change_nothing(cluster: Cluster) -> None:
    c = cluster
    c.ok("scrontab", "-", input="@hourly true\n")
    good = c.ok("scrontab", "-l")
    [job] = job_of_crontab(c)
    for text, err in (
            ("* * * \n", "scrontab: error: cronspec_to_bitstring: unexpected end of line\n"
                          "scrontab: error: something is broken\n"),
            ("0 0 * * xyz true\n", "scrontab: error: bad day specification\n"
                                   "scrontab: error: something is broken\n"),
            ("*/1 * * * * true\n", "scrontab: error: bad step value\n"
                                   "scrontab: error: something is broken\n"),
            ("@often true\n", "scrontab: error: invalid @ line\n"
                              "scrontab: error: something is broken\n"),
            ("0 0 31 feb * true\n", "scrontab: error: something is broken\n"),
            ("* * * *\n", "scrontab: error: something is broken\n")):
        r = c.run("scrontab", "-", input=text)
        assert (r.returncode, r.stdout, r.stderr) == (1, "There are errors in your crontab.\n",
                                                      err), text
    r = c.run("scrontab", "-", input="#SCRON --bogus\n* * * * * true\n")
    assert r.returncode == 1 and r.stdout == "There are errors in your crontab.\n"
    assert "--bogus" in r.stderr and "Traceback" not in r.stderr
    # refused by the controller: the entry's lines are named
    r = c.run("scrontab", "-", input="# x\n@daily true\n#SCRON -p nosuch\n@daily true\n")
    assert r.returncode == 1
    assert r.stdout == ("There was an issue with the job submission on lines 3-4\n"
                        "The error code return was: Invalid partition name specified\n"
                        "The error message was: (null)\n")
    assert c.ok("scrontab", "-l") == good
    assert job_of_crontab(c) == [job]


def test_remove_cancels_and_list_says_none(cluster: Cluster) -> None:
    c = cluster
    c.ok("scrontab", "-", input="0 5 * * * true\n")
    [job] = job_of_crontab(c)
    assert squeue_fields(c, job)[:2] == ["PENDING", "BeginTime"]
    c.ok("scrontab", "-r")
    assert c.state(job) == "CANCELLED"
    assert job_of_crontab(c) == []
    r = c.run("scrontab", "-l")
    assert (r.returncode, r.stdout) == (1, "no crontab for root\n")


def test_replacing_the_crontab_replaces_its_jobs(cluster: Cluster) -> None:
    c = cluster
    c.ok("scrontab", "-", input="0 5 * * * true\n")
    [old] = job_of_crontab(c)
    c.ok("scrontab", "-", input="0 6 * * * true\n30 7 1 jan mon true\n")
    new = job_of_crontab(c)
    assert len(new) == 2 and old not in new
    assert c.state(old) == "CANCELLED"
    specs = sorted(show_job(c, j).split("CrontabSpec=")[1].split("\n")[0] for j in new)
    assert specs == ['"0 6 * * *"', '"30 7 1 1 1"']
    # scancel of one entry's job stops it; -l shows its line disabled, as Slurm does
    c.ok("scancel", new[0])
    c.wait_for(lambda: c.state(new[0]) == "CANCELLED", what="cancelled")
    listed = c.ok("scrontab", "-l")
    assert listed.count("#DISABLED: ") == 1
    c.ok("scrontab", "-r")


def test_edit_through_the_editor_retries_a_bad_line(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    editor = tmp_path / "editor.sh"
    count = tmp_path / "count"
    # first edit: a bad line; second: check it came back marked #BAD:, then a good entry
    editor.write_text(f"""#!/bin/sh
n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}
if [ $n = 1 ]; then grep -q "Welcome to scrontab" "$1" || exit 3; echo "1 2 3" >> "$1"; exit 0; fi
grep -q '^#BAD: 1 2 3$' "$1" || exit 4
printf '0 4 * * * echo edited\\n' > "$1"
""")
    editor.chmod(0o755)
    master, slave = os.openpty()
    try:
        env = dict(c.env, EDITOR=str(editor), VISUAL="")
        p = subprocess.Popen(["scrontab", "-e"], stdin=slave, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=c.workdir)
        os.write(master, b"y\n")  # a terminal hands the answer over at the newline
        out, err = p.communicate(timeout=30)
    finally:
        os.close(master)
        os.close(slave)
    assert p.returncode == 0, out + err
    assert out == ("There are errors in your crontab.\n"
                   "The failed line(s) is commented out with #BAD:\n"
                   "Do you want to retry the edit? (y/n) ")
    assert count.read_text() == "2\n"
    assert c.ok("scrontab", "-l") == "0 4 * * * echo edited\n"
    [job] = job_of_crontab(c)
    assert "JobName=echo" in show_job(c, job)
    # an editor that fails changes nothing
    env = dict(c.env, EDITOR="false", VISUAL="")
    master, slave = os.openpty()
    try:
        p2 = subprocess.run(["scrontab", "-e"], stdin=slave, capture_output=True, text=True,
                            env=env, timeout=30)
    finally:
        os.close(master)
        os.close(slave)
    assert (p2.returncode, p2.stderr) == (1, "scrontab: fatal: editor returned non-zero exit code\n")
    r = c.run("scrontab", "-e")  # not a TTY
    assert (r.returncode, r.stderr) == (1, "scrontab: fatal: Standard input is not a TTY\n")
    assert job_of_crontab(c) == [job]
    c.ok("scrontab", "-r")


def test_crontab_survives_a_controller_restart(cluster: Cluster) -> None:
    c = cluster
    text = "#SCRON -J kept\n15 3 * * * true\n"
    c.ok("scrontab", "-", input=text)
    [job] = job_of_crontab(c)
    os.kill(int((c.home / "controller.pid").read_text()), signal.SIGKILL)
    time.sleep(0.5)
    c.ok("corral", "up", timeout=60)
    assert c.ok("scrontab", "-l") == text
    assert job_of_crontab(c) == [job]
    assert 'CronJob=Yes CrontabSpec="15 3 * * *"' in show_job(c, job)
    c.ok("scrontab", "-r")
    assert c.state(job) == "CANCELLED"


@pytest.fixture(scope="module")
def user() -> Iterator[pwd.struct_passwd]:
    restore = grant_traverse(os.path.realpath(sys.executable))
    made = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", USER], check=True)
        made = True
    try:
        yield pwd.getpwnam(USER)
    finally:
        if made:
            subprocess.run(["userdel", "--remove", USER], capture_output=True)
        for d, mode in restore:
            os.chmod(d, mode)


def run_as(c: Cluster, user: pwd.struct_passwd, *args: str,
           input: str | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(c.env, HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, env=e,
                          input=input, cwd=user.pw_dir, user=user.pw_uid, group=user.pw_gid,
                          extra_groups=[])


@needs_test_users
def test_users_own_their_crontabs(cluster: Cluster, user: pwd.struct_passwd) -> None:
    c = cluster
    c.ok("scrontab", "-", input="0 5 * * * true\n")
    [root_job] = job_of_crontab(c)
    r = run_as(c, user, "scrontab", "-l")
    assert (r.returncode, r.stdout) == (1, f"no crontab for {USER}\n")
    for args, call in ((("-u", "root", "-l"), "request"), (("-u", "root", "-r"), "remove")):
        r = run_as(c, user, "scrontab", *args)
        assert (r.returncode, r.stderr) == (
            1, f"scrontab: fatal: slurm_{call}_crontab failed: Invalid user id\n")
    r = run_as(c, user, "scrontab", "-u", "root", "-", input="* * * * * true\n")
    assert (r.returncode, r.stdout) == (
        1, "There was an issue with the job submission on lines (null)\n"
           "The error code return was: Invalid user id\n"
           "The error message was: (null)\n")
    assert c.ok("scrontab", "-l") == "0 5 * * * true\n"
    assert job_of_crontab(c) == [root_job]
    # root manages the user's crontab with -u; the job is the user's
    c.ok("scrontab", "-u", USER, "-", input="0 6 * * * true\n")
    assert run_as(c, user, "scrontab", "-l").stdout == "0 6 * * * true\n"
    [theirs] = c.squeue_ids("-h", "-u", USER)
    r = run_as(c, user, "scrontab", "-r")
    assert r.returncode == 0, r.stderr
    assert c.state(theirs) == "CANCELLED"
    c.ok("scrontab", "-r")


def test_disabled_scrontab_is_refused(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "off")
    c.start()
    try:
        for args in (("-l",), ("-r",), ("-",)):
            r = c.run("scrontab", *args, input="* * * * * true\n")
            assert (r.returncode, r.stdout, r.stderr) == (
                1, "", "scrontab: fatal: scrontab is disabled on this cluster\n"), args
        assert c.squeue_ids("-h") == []
    finally:
        c.stop()
