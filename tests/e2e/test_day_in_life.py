"""A new user's and a lab admin's first day, through the real commands, where Corral
differed from Slurm 22.05 (env.c, slurmstepd, sacctmgr's getopt)."""

from __future__ import annotations

import stat

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow


def _env_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_batch_step_environment_as_slurmd_sets_it(cluster: Cluster) -> None:
    """The batch step gets sbatch's umask applied but not SLURM_UMASK (slurmstepd unsets
    it there), no SLURM_RESTART_COUNT before a requeue, and no variables of later Slurms."""
    out = cluster.workdir / "day-env.out"
    made = cluster.workdir / "day-env.made"
    script = (f"env | sort > {out}; umask > {out}.umask; touch {made}; "
              f"srun -n1 env > {out}.srun")
    r = cluster.run("bash", "-c", f"umask 0027; sbatch --parsable -o /dev/null --wrap '{script}'")
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout.strip())
    cluster.wait_state(jid, "COMPLETED")
    env = _env_of(out.read_text())
    assert env["SLURM_JOB_ID"] == str(jid)
    for absent in ("SLURM_UMASK", "SLURM_RESTART_COUNT", "SLURM_JOB_START_TIME",
                   "SLURM_JOB_END_TIME"):
        assert absent not in env, absent
    assert (cluster.workdir / "day-env.out.umask").read_text().strip() == "0027"
    assert stat.S_IMODE(made.stat().st_mode) == 0o640
    # srun passes its caller's umask on to the step's tasks, where it stays
    task = _env_of((cluster.workdir / "day-env.out.srun").read_text())
    assert task["SLURM_UMASK"] == "0027"
    assert task["SLURM_STEP_ID"] == "0"
    assert "SLURM_RESTART_COUNT" not in task


def test_restart_count_appears_with_the_first_requeue(cluster: Cluster) -> None:
    log = cluster.workdir / "day-restarts.log"
    jid = cluster.sbatch("--requeue", "-o", "/dev/null", "--wrap",
                         f"echo run ${{SLURM_RESTART_COUNT-unset}} >> {log}; sleep 60")
    cluster.wait_for(lambda: log.exists() and "run unset" in log.read_text(), what="first run")
    cluster.ok("scontrol", "requeue", str(jid))
    cluster.wait_for(lambda: "run 1" in log.read_text(), timeout=60, what="second run")
    assert log.read_text().splitlines() == ["run unset", "run 1"]
    cluster.ok("scancel", str(jid))
    cluster.wait_state(jid, "CANCELLED")


def test_step_without_gpus_has_no_gpu_variables(cluster: Cluster) -> None:
    """On GPU nodes, a step that holds no GPUs has none of the gres plugin's variables, not
    empty ones; one inside a GPU job run with --gres=none drops those it inherited."""
    task = _env_of(cluster.ok("srun", "-n1", "env", timeout=60))
    gpu_keys = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE",
                "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")
    assert task["SLURM_STEP_ID"] == "0"
    for key in gpu_keys:
        assert key not in task, key
    out = cluster.workdir / "day-gres-none.out"
    jid = cluster.sbatch("--gres=gpu:1", "-o", "/dev/null", "--wrap",
                         f"env > {out}.batch; srun --gres=none env > {out}")
    cluster.wait_state(jid, "COMPLETED", timeout=60)
    batch = _env_of((cluster.workdir / "day-gres-none.out.batch").read_text())
    assert batch["CUDA_VISIBLE_DEVICES"] == batch["SLURM_JOB_GPUS"]
    step = _env_of(out.read_text())
    assert step["SLURM_JOB_ID"] == str(jid)
    for key in gpu_keys:
        assert key not in step, key


def test_sacctmgr_options_after_the_command(cluster: Cluster) -> None:
    """sacctmgr reads its options with GNU getopt, so admins' `sacctmgr show ... -n -P` and
    `sacctmgr add ... -i` work as on Slurm."""
    assert cluster.ok("sacctmgr", "show", "qos", "normal", "format=name,priority", "-n", "-P") \
        == "normal|0\n"
    out = cluster.ok("sacctmgr", "add", "account", "daylab", "Description=day", "-i")
    assert out.startswith(" Adding Account(s)\n  daylab\n")
    assert cluster.ok("sacctmgr", "list", "account", "daylab", "format=account,descr", "-nP") \
        == "daylab|day\n"
    r = cluster.run("sacctmgr", "show", "account", "-x")
    assert r.returncode == 1
    assert r.stderr == ("sacctmgr: invalid option -- 'x'\n"
                        "Try \"sacctmgr --help\" for more information\n")
    cluster.ok("sacctmgr", "delete", "account", "daylab", "-i")
    assert cluster.ok("sacctmgr", "show", "account", "daylab", "-n", "-P") == ""


def test_allocation_refusals_worded_as_salloc_and_srun_word_them(cluster: Cluster) -> None:
    """The controller's own line comes first (`invalid partition specified`, as sbatch
    prints it); salloc says `Job submit/allocate failed` where srun says `Unable to
    allocate resources` (salloc.c keeps srun's words for an --immediate that cannot run)."""
    r = cluster.run("salloc", "-p", "nosuch", "true")
    assert (r.returncode, r.stderr) == (1, (
        "salloc: error: invalid partition specified: nosuch\n"
        "salloc: error: Job submit/allocate failed: Invalid partition name specified\n"))
    r = cluster.run("srun", "-p", "nosuch", "true")
    assert (r.returncode, r.stderr) == (1, (
        "srun: error: invalid partition specified: nosuch\n"
        "srun: error: Unable to allocate resources: Invalid partition name specified\n"))
    r = cluster.run("salloc", "--gres=gpu:99", "true")
    assert (r.returncode, r.stderr) == (1, (
        "salloc: error: Job submit/allocate failed: Requested node configuration is not "
        "available\n"))
    r = cluster.run("salloc", "-I", "-H", "true")
    assert (r.returncode, r.stderr) == (1, (
        "salloc: error: Unable to allocate resources: Immediate execution impossible, "
        "insufficient priority\n"))


def test_resume_only_brings_back_a_drained_or_down_node(cluster: Cluster) -> None:
    """slurmctld refuses a state change that means nothing for the node (RESUME of a node
    in service, IDLE of one running a job) with `Invalid node state specified` and exit 1,
    after changing the other nodes named."""
    refused = "slurm_update error: Invalid node state specified\n"
    r = cluster.run("scontrol", "update", "nodename=node-1", "state=resume")
    assert (r.returncode, r.stderr) == (1, refused)
    cluster.ok("scontrol", "update", "nodename=node-2", "state=drain", "reason=day swap")
    try:
        r = cluster.run("scontrol", "update", "nodename=node-[1-2]", "state=resume")
        assert (r.returncode, r.stderr) == (1, refused)
        assert cluster.ok("sinfo", "-h", "-N", "-n", "node-2", "-p", "debug", "-o", "%t") \
            == "idle\n"  # node-2 came back all the same
    finally:
        cluster.run("scontrol", "update", "nodename=node-2", "state=resume")
    jid = cluster.sbatch("-w", "node-3", "-o", "/dev/null", "--wrap", "sleep 60")
    try:
        cluster.wait_state(jid, "RUNNING")
        r = cluster.run("scontrol", "update", "nodename=node-3", "state=idle")
        assert (r.returncode, r.stderr) == (1, refused)
        cluster.ok("scontrol", "update", "nodename=node-3", "state=undrain")
    finally:
        cluster.ok("scancel", str(jid))


def test_sreport_options_after_the_command(cluster: Cluster) -> None:
    """sreport reads its options with GNU getopt too: `sreport cluster utilization -t
    percent -P` is `sreport -t percent -P cluster utilization`."""
    after = cluster.ok("sreport", "cluster", "utilization", "-t", "percent", "-P")
    before = cluster.ok("sreport", "-t", "percent", "-P", "cluster", "utilization")
    assert after == before
    assert "Usage reported in Percentage of Total\n" in after
    assert "Cluster|Allocated|Down|PLND Down|Idle|Reserved|Reported\n" in after


def test_salloc_shell_has_the_allocation_variables_only(cluster: Cluster) -> None:
    """salloc exports env.c's env_array_for_job to its command; the job's uid, user and gid
    are slurmd's, so only srun's tasks have them."""
    r = cluster.run("salloc", "-n2", "bash", "-c", "env; echo ===; srun -n1 env", timeout=60)
    assert r.returncode == 0, r.stderr
    shell_text, _, task_text = r.stdout.partition("===\n")
    shell, task = _env_of(shell_text), _env_of(task_text)
    assert shell["SLURM_NTASKS"] == "2" and shell["SLURM_JOB_ID"] == task["SLURM_JOB_ID"]
    for key in ("SLURM_JOB_UID", "SLURM_JOB_GID", "SLURM_JOB_USER", "SLURM_PRIO_PROCESS",
                "SLURM_PROCID", "SLURMD_NODENAME"):
        assert key not in shell, key
    assert task["SLURM_JOB_UID"] == "0" and task["SLURM_JOB_USER"] == "root"
    assert task["SLURM_PRIO_PROCESS"] == "0"


def test_sacctmgr_unknown_entity_as_slurm_refuses_it(cluster: Cluster) -> None:
    r = cluster.run("sacctmgr", "show", "bogus")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (
        "No valid entity in list command\nInput line must include \"Account\", "
        "\"Association\", \"Cluster\", \"Configuration\",\n\"Event\", \"Federation\", "
        "\"Problem\", \"QOS\", \"Resource\", \"Reservation\",\n\"RunAwayJobs\", \"Stats\", "
        "\"Transaction\", \"TRES\", \"User\", or \"WCKey\"\n")
    r = cluster.run("sacctmgr", "-i", "add", "bogus", "name=x")
    assert (r.returncode, r.stderr) == (1, (
        "No valid entity in add command\nInput line must include \"Account\", \"Cluster\", "
        "\"Coordinator\", \"Federation\", \"QOS\", \"Resource\", or \"User\"\n"))


def test_srun_jobid_of_no_running_job(cluster: Cluster) -> None:
    """srun's existing_allocation(): the controller's refusal (job_alloc_info_ptr's
    ESLURM_JOB_PENDING or ESLURM_ALREADY_DONE, or an unknown id), then what to check."""
    r = cluster.run("srun", "--jobid=999999", "true")
    assert (r.returncode, r.stderr) == (1, (
        "srun: error: Unable to confirm allocation for job 999999: Invalid job id specified\n"
        "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 999999\n"))
    done = cluster.sbatch("-o", "/dev/null", "--wrap", "true")
    cluster.wait_state(done, "COMPLETED")
    r = cluster.run("srun", "true", env={"SLURM_JOB_ID": str(done)})
    assert (r.returncode, r.stderr) == (1, (
        f"srun: error: Slurm job {done} has expired\n"
        f"srun: Check SLURM_JOB_ID environment variable. Expired or invalid job {done}\n"))
    held = cluster.sbatch("-H", "--wrap", "true")
    try:
        r = cluster.run("srun", f"--jobid={held}", "true")
        assert (r.returncode, r.stderr) == (1, (
            f"srun: error: Unable to confirm allocation for job {held}: Job is pending "
            f"execution\nsrun: Check SLURM_JOB_ID environment variable. Expired or invalid "
            f"job {held}\n"))
    finally:
        cluster.ok("scancel", str(held))


def test_salloc_names_its_job_interactive(cluster: Cluster) -> None:
    """Slurm 22.05's salloc names the job `interactive` (`no-shell` with --no-shell) unless
    -J names it, whatever the command."""
    r = cluster.run("salloc", "-N1", "bash", "-c", "echo $SLURM_JOB_ID $SLURM_JOB_NAME",
                    timeout=60)
    assert r.returncode == 0, r.stderr
    jid, name = r.stdout.split()
    assert name == "interactive"
    assert cluster.ok("sacct", "-X", "-n", "-P", "-j", jid, "-o", "JobName") == "interactive\n"
    r = cluster.run("salloc", "-J", "mine", "true", timeout=60)
    assert r.returncode == 0, r.stderr
    r = cluster.run("salloc", "--no-shell", "-t", "1", timeout=60)
    assert r.returncode == 0, r.stderr
    jid = r.stderr.split("Granted job allocation ")[1].split()[0]
    try:
        assert cluster.ok("squeue", "-h", "-j", jid, "-o", "%j") == "no-shell\n"
    finally:
        cluster.ok("scancel", jid)
