"""End-to-end: a real cluster (controller + agent, 4 nodes × 4 declared GPUs) and the real commands."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from corral.model.hostlists import expand
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


def test_wrap_job_completes_and_sacct_records_it(cluster: Cluster) -> None:
    out = cluster.ok("sbatch", "--wrap", "echo hello from $SLURM_JOB_ID")
    m = re.fullmatch(r"Submitted batch job (\d+)\n", out)
    assert m, out
    jid = int(m.group(1))
    cluster.wait_state(jid, "COMPLETED")
    text = (cluster.workdir / f"slurm-{jid}.out").read_text()
    assert text == f"hello from {jid}\n"
    rows = cluster.ok("sacct", "-j", str(jid), "-P", "-n", "-o", "JobID,JobName,State,ExitCode").splitlines()
    assert f"{jid}|wrap|COMPLETED|0:0" in rows
    assert f"{jid}.batch|batch|COMPLETED|0:0" in rows


def test_exit_codes_and_states(cluster: Cluster) -> None:
    failed = cluster.sbatch("-J", "failer", "--wrap", "exit 3")
    ok = cluster.sbatch("-J", "fine", "--wrap", "true")
    cluster.wait_state(failed, "FAILED")
    cluster.wait_state(ok, "COMPLETED")
    row = cluster.ok("sacct", "-j", str(failed), "-X", "-P", "-n", "-o", "JobName,State,ExitCode")
    assert row.strip() == "failer|FAILED|3:0"


def test_gpu_job_sees_exactly_its_gpus(cluster: Cluster) -> None:
    jid = cluster.sbatch("--gres=gpu:2", "-o", "gpu-%j.out", "--wrap",
                         "echo CVD=$CUDA_VISIBLE_DEVICES JOBGPUS=$SLURM_JOB_GPUS N=$SLURM_GPUS_ON_NODE")
    cluster.wait_state(jid, "COMPLETED")
    text = (cluster.workdir / f"gpu-{jid}.out").read_text().strip()
    m = re.fullmatch(r"CVD=(\S+) JOBGPUS=(\S+) N=2", text)
    assert m, text
    ids = m.group(1).split(",")
    assert m.group(1) == m.group(2)
    assert len(ids) == 2 and len(set(ids)) == 2 and all(0 <= int(i) < 4 for i in ids)


def test_one_gpu_jobs_pack_onto_one_node(cluster: Cluster) -> None:
    jobs = [cluster.sbatch("-J", "pack", "--gres=gpu:1", "-o", "pack-%j.out", "--wrap",
                           "echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES; sleep 3") for _ in range(4)]
    for j in jobs:
        cluster.wait_state(j, "COMPLETED", timeout=60)
    seen = [(cluster.workdir / f"pack-{j}.out").read_text().split() for j in jobs]
    nodes = {s[0] for s in seen}
    gpus = {s[1] for s in seen}
    assert len(nodes) == 1, seen
    assert gpus == {"0", "1", "2", "3"}, seen


def test_array_throttle_is_respected(cluster: Cluster) -> None:
    log = cluster.workdir / "throttle.log"
    jid = cluster.sbatch("-J", "thr", "--array=1-6%2", "-o", "/dev/null", "--wrap",
                         f"echo start $SLURM_ARRAY_TASK_ID $(date +%s.%N) >> {log}; sleep 1.5; "
                         f"echo end $SLURM_ARRAY_TASK_ID $(date +%s.%N) >> {log}")
    seen_max = 0

    def done() -> bool:
        nonlocal seen_max
        running = cluster.squeue_ids("-r", "-t", "R", "-j", str(jid)) if _any(cluster, jid) else []
        seen_max = max(seen_max, len(running))
        return log.exists() and log.read_text().count("end ") == 6

    cluster.wait_for(done, timeout=60, what="array to finish")
    events = []
    for line in log.read_text().splitlines():
        kind, task, ts = line.split()
        events.append((float(ts), 1 if kind == "start" else -1, int(task)))
    events.sort(key=lambda e: (e[0], e[1]))
    cur = peak = 0
    for _, delta, _ in events:
        cur += delta
        peak = max(peak, cur)
    assert peak <= 2, events
    assert seen_max <= 2
    assert sorted(e[2] for e in events if e[1] == 1) == [1, 2, 3, 4, 5, 6]
    rows = cluster.ok("sacct", "-j", str(jid), "-X", "-P", "-n", "-o", "JobID,State").split()
    assert sorted(rows) == sorted(f"{jid}_{i}|COMPLETED" for i in range(1, 7))


def _any(cluster: Cluster, jid: int) -> bool:
    r = cluster.run("squeue", "-h", "-j", str(jid))
    return r.returncode == 0


def test_dependencies(cluster: Cluster) -> None:
    a = cluster.sbatch("-J", "depA", "--wrap", "sleep 1")
    b = cluster.sbatch("-J", "depB", f"--dependency=afterok:{a}", "--wrap", "true")
    c = cluster.sbatch("-J", "depC", f"--dependency=afternotok:{a}", "--wrap", "true")
    out = cluster.ok("squeue", "-h", "-j", str(b), "-o", "%T %r")
    assert out.split() in (["PENDING", "Dependency"], ["RUNNING", "None"], ["COMPLETED", "None"]) or \
        out.strip() == "", out
    cluster.wait_state(b, "COMPLETED")
    a_end = cluster.ok("sacct", "-j", str(a), "-X", "-n", "-P", "-o", "End").strip()
    b_start = cluster.ok("sacct", "-j", str(b), "-X", "-n", "-P", "-o", "Start").strip()
    assert b_start >= a_end
    cluster.wait_for(lambda: "DependencyNeverSatisfied" in cluster.ok("squeue", "-h", "-j", str(c), "-o", "%r"),
                     what="afternotok to be never satisfied")
    cluster.ok("scancel", str(c))


def test_hold_and_release(cluster: Cluster) -> None:
    jid = cluster.sbatch("-H", "-J", "held", "--wrap", "true")
    assert cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%T %r").split() == ["PENDING", "JobHeldUser"]
    time.sleep(1.5)  # a scheduling pass or more: still held
    assert cluster.ok("squeue", "-h", "-j", str(jid), "-o", "%T").strip() == "PENDING"
    cluster.ok("scontrol", "release", str(jid))
    cluster.wait_state(jid, "COMPLETED")
    jid2 = cluster.sbatch("--begin=now+1hour", "--wrap", "true")
    cluster.ok("scontrol", "hold", str(jid2))
    assert "JobHeld" in cluster.ok("squeue", "-h", "-j", str(jid2), "-o", "%r")
    cluster.ok("scancel", str(jid2))
    cluster.wait_state(jid2, "CANCELLED")


def test_cancel_kills_the_whole_tree(cluster: Cluster, tmp_path: Path) -> None:
    pids = cluster.workdir / "tree.pids"
    script = cluster.workdir / "tree.sh"
    script.write_text(
        "#!/bin/bash\n"
        "sleep 300 & echo $! >> " + str(pids) + "\n"
        "setsid sleep 301 & echo $! >> " + str(pids) + "\n"
        "bash -c 'sleep 302 & echo $! >> " + str(pids) + "; wait' &\n"
        "wait\n")
    jid = cluster.sbatch(str(script))
    cluster.wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 3, what="children")
    children = [int(p) for p in pids.read_text().split()]
    cluster.ok("scancel", str(jid))
    cluster.wait_state(jid, "CANCELLED")

    def all_gone() -> bool:
        for p in children:
            try:
                os.kill(p, 0)
            except ProcessLookupError:
                continue
            return False
        return True

    cluster.wait_for(all_gone, timeout=20, what="job children to die")


def test_output_patterns_expand(cluster: Cluster) -> None:
    jid = cluster.sbatch("-J", "pat", "-o", "out-%x-%j-%u-%N.txt", "-e", "err-%j-%%.txt",
                         "--wrap", "echo out; echo err >&2")
    cluster.wait_state(jid, "COMPLETED")
    user = cluster.ok("whoami").strip()
    node = cluster.ok("sacct", "-j", str(jid), "-X", "-n", "-P", "-o", "NodeList").strip()
    assert (cluster.workdir / f"out-pat-{jid}-{user}-{node}.txt").read_text() == "out\n"
    assert (cluster.workdir / f"err-{jid}-%.txt").read_text() == "err\n"
    arr = cluster.sbatch("--array=3-4", "-o", "arr-%A_%a.out", "--wrap", "echo $SLURM_ARRAY_TASK_ID")
    for t in (3, 4):
        cluster.wait_state(f"{arr}_{t}", "COMPLETED")
        assert (cluster.workdir / f"arr-{arr}_{t}.out").read_text() == f"{t}\n"


def test_drained_node_gets_no_jobs(cluster: Cluster) -> None:
    cluster.ok("scontrol", "update", "nodename=node-4", "state=drain", "reason=disk check")
    try:
        out = cluster.ok("sinfo", "-R")
        assert re.search(r"^disk check\s+\S+\s+\S+\s+node-4$", out, re.M), out
        pinned = cluster.sbatch("-w", "node-4", "--wrap", "true")
        jobs = [cluster.sbatch("-N1", "--exclusive", "--wrap", "sleep 1") for _ in range(4)]
        for j in jobs:
            cluster.wait_state(j, "COMPLETED", timeout=60)
            assert cluster.ok("sacct", "-j", str(j), "-X", "-n", "-P", "-o", "NodeList").strip() != "node-4"
        assert cluster.ok("squeue", "-h", "-j", str(pinned), "-o", "%T").strip() == "PENDING"
    finally:
        cluster.ok("scontrol", "update", "nodename=node-4", "state=resume")
    cluster.wait_state(pinned, "COMPLETED")
    assert "node-4" not in cluster.ok("sinfo", "-R").splitlines()[-1]


def test_job_environment(cluster: Cluster) -> None:
    jid = cluster.sbatch("-J", "envjob", "-N2", "-n4", "-c2", "-p", "debug", "-o", "env-%j.out",
                         "--wrap", "env | grep -E '^(SLURM|SLURMD)_' | sort")
    cluster.wait_state(jid, "COMPLETED")
    env = dict(line.split("=", 1) for line in (cluster.workdir / f"env-{jid}.out").read_text().splitlines())
    assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == str(jid)
    assert env["SLURM_JOB_NAME"] == "envjob"
    assert env["SLURM_NNODES"] == env["SLURM_JOB_NUM_NODES"] == "2"
    assert env["SLURM_NTASKS"] == env["SLURM_NPROCS"] == "4"
    assert env["SLURM_CPUS_PER_TASK"] == "2"
    assert env["SLURM_TASKS_PER_NODE"] == "2(x2)"
    assert env["SLURM_JOB_PARTITION"] == "debug"
    assert env["SLURM_CLUSTER_NAME"] == "testcluster"
    assert env["SLURM_SUBMIT_DIR"] == str(cluster.workdir)
    assert env["SLURMD_NODENAME"] == expand(env["SLURM_JOB_NODELIST"])[0]
    for k in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID"):
        assert env[k] == "0"
    assert "SLURM_RESTART_COUNT" not in env  # slurmd sets it from the first requeue on


def test_time_limit_signal_then_timeout(cluster: Cluster) -> None:
    marker = cluster.workdir / "usr1.marker"
    script = cluster.workdir / "limited.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"trap 'echo got USR1 > {marker}' USR1\n"
        "for i in $(seq 200); do sleep 1; done\n")
    t0 = time.monotonic()
    jid = cluster.sbatch("-t", "1", "--signal=B:USR1@55", str(script))
    cluster.wait_for(marker.exists, timeout=30, what="USR1 before the limit")
    assert time.monotonic() - t0 < 20
    cluster.wait_state(jid, "TIMEOUT", timeout=90)
    rows = cluster.ok("sacct", "-j", str(jid), "-P", "-n", "-o", "JobID,State,ExitCode").splitlines()
    assert rows[0] == f"{jid}|TIMEOUT|0:0"


def test_bad_input_gets_slurm_errors(cluster: Cluster) -> None:
    r = cluster.run("sbatch", "-p", "nosuch", "--wrap=true")
    assert r.returncode == 1
    assert r.stderr == ("sbatch: error: invalid partition specified: nosuch\n"
                        "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    r = cluster.run("sbatch", "--gres=gpu:5", "--wrap=true")
    assert r.returncode == 1
    assert r.stderr == "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"
    r = cluster.run("sbatch", "--time=abc", "--wrap=true")
    assert r.returncode == 255 and r.stderr == "sbatch: error: Invalid --time specification\n"
    r = cluster.run("scancel", "abc")
    assert r.returncode == 1 and "Invalid job id abc" in r.stderr
    r = cluster.run("scontrol", "show", "job", "999999")
    assert r.returncode == 1 and r.stderr == "slurm_load_jobs error: Invalid job id specified\n"
    for r in (cluster.run("sbatch", "--mem=1000G", "--wrap=true"), cluster.run("sbatch", "--array=abc", "--wrap=true")):
        assert r.returncode == 1 and "Traceback" not in r.stderr


def test_no_controller_gives_one_clear_line(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "nothing")
    c.workdir.mkdir(parents=True)
    for cmd in (["squeue"], ["sbatch", "--wrap=true"], ["sinfo"], ["sacct"], ["scontrol", "show", "job"]):
        r = c.run(*cmd)
        assert r.returncode != 0
        assert "corral up" in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_signal_reaches_job(cluster: Cluster) -> None:
    marker = cluster.workdir / "hup.marker"
    script = cluster.workdir / "hup.sh"
    script.write_text(f"#!/bin/bash\ntrap 'echo hup > {marker}; exit 0' HUP\nwhile true; do sleep 0.2; done\n")
    jid = cluster.sbatch(str(script))
    cluster.wait_state(jid, "RUNNING")
    time.sleep(0.5)
    cluster.ok("scancel", "--signal=HUP", "-b", str(jid))
    cluster.wait_state(jid, "COMPLETED")
    assert marker.read_text() == "hup\n"
