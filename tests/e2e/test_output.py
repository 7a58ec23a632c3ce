"""End-to-end: what squeue, sinfo, scontrol and sacct print, through the real commands.

Bounded field widths, escaped control characters, -M/--clusters, SLURM_TIME_FORMAT and the
fields and scontrol details of issue 9.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

MAX_WIDTH = 1024  # corral.cli.fmt.MAX_WIDTH


def test_huge_widths_are_bounded(cluster: Cluster) -> None:
    jid = cluster.sbatch("-H", "-J", "wide", "--wrap", "true")
    out = cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%999999999i", timeout=10)
    assert out == str(jid).ljust(MAX_WIDTH) + "\n"
    out = cluster.ok("squeue", "-j", str(jid), "-O", "jobid:.99999999999999999999999", timeout=10)
    assert [len(line) for line in out.splitlines()] == [MAX_WIDTH, MAX_WIDTH]
    out = cluster.ok("sinfo", "-h", "-p", "short", "-o", "%999999999N", timeout=10)
    assert out == "node-[1-2]".ljust(MAX_WIDTH) + "\n"
    out = cluster.ok("sacct", "-n", "-X", "-j", str(jid), "-o", "jobid%999999999", timeout=10)
    assert out == str(jid).rjust(MAX_WIDTH) + " \n"
    cluster.ok("scancel", str(jid))


def test_control_characters_are_escaped(cluster: Cluster) -> None:
    name = "evil\x1b]0;owned\x07\x1b[2J"
    jid = cluster.sbatch("-H", "-J", name, "--comment", "two\nlines\r", "--wrap", "true")
    shown = "evil\\x1b]0;owned\\x07\\x1b[2J"
    out = cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%j|%k")
    assert out == f"{shown}|two\\nlines\\r\n"
    out = cluster.ok("scontrol", "show", "job", str(jid))
    assert f"JobName={shown}\n" in out and "Comment=two\\nlines\\r \n" in out
    assert "\x1b" not in out and "\x07" not in out
    out = cluster.ok("sacct", "-n", "-X", "-P", "-j", str(jid), "-o", "JobName,Comment")
    assert out == f"{shown}|two\\nlines\\r\n"
    cluster.ok("scancel", str(jid))
    reason = "fan\x1b[8mhidden"
    cluster.ok("scontrol", "update", "NodeName=node-4", "State=DRAIN", f"Reason={reason}")
    try:
        out = cluster.ok("sinfo", "-R", "-h", "-o", "%E|%N")
        assert out == "fan\\x1b[8mhidden|node-4\n"
        out = cluster.ok("scontrol", "show", "node", "node-4")
        assert "Reason=fan\\x1b[8mhidden" in out and "\x1b" not in out
    finally:
        cluster.ok("scontrol", "update", "NodeName=node-4", "State=RESUME")


def test_unknown_cluster_refused(cluster: Cluster) -> None:
    for cmd in ("squeue", "sinfo"):
        r = cluster.run(cmd, "--clusters=elsewhere")
        assert r.returncode == 1 and r.stdout == ""
        assert r.stderr == (f"{cmd}: error: 'elsewhere' can't be reached now, or it is an "
                            "invalid entry for --cluster.  Use 'sacctmgr list clusters' to see "
                            "available clusters.\n")
    out = cluster.ok("squeue", "-M", "testcluster", "-h", "-n", "no-such-name")
    assert out == "CLUSTER: testcluster\n"


def test_slurm_time_format(cluster: Cluster) -> None:
    jid = cluster.sbatch("-H", "--wrap", "true")
    env = {"SLURM_TIME_FORMAT": "%s"}
    submit = int(cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%V", env=env))
    assert abs(submit - time.time()) < 60
    out = cluster.ok("scontrol", "show", "job", str(jid), env=env)
    assert f"SubmitTime={submit} " in out
    out = cluster.ok("sacct", "-n", "-X", "-P", "-j", str(jid), "-o", "Submit", env=env)
    assert out == f"{submit}\n"
    out = cluster.ok("sacct", "-n", "-X", "-P", "-j", str(jid), "-o", "Submit",
                     env={"SLURM_TIME_FORMAT": "relative"})
    assert out == time.strftime("%H:%M:%S\n", time.localtime(submit)) or out.startswith("Ystday")
    r = cluster.run("squeue", "-h", "-j", str(jid), "-o", "%V",
                    env={"SLURM_TIME_FORMAT": "nonsense"})
    assert r.returncode == 0
    assert r.stderr == "squeue: error: invalid SLURM_TIME_FORMAT = 'nonsense'\n"
    assert r.stdout == time.strftime("%Y-%m-%dT%H:%M:%S\n", time.localtime(submit))
    cluster.ok("scontrol", "update", "NodeName=node-3", "State=DRAIN", "Reason=tf")
    try:
        out = cluster.ok("sinfo", "-R", "-h", "-o", "%H", env=env)
        assert abs(int(out) - time.time()) < 60
    finally:
        cluster.ok("scontrol", "update", "NodeName=node-3", "State=RESUME")
    cluster.ok("scancel", str(jid))
