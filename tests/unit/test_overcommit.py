"""-O/--overcommit (Slurm 22.05): the commands send it, the scheduler allocates one task's CPUs
per node, the job's environment says SLURM_OVERCOMMIT=1, and scontrol shows the request as
slurmctld records it (NumCPUs the node count times -c, NumTasks as asked)."""

from __future__ import annotations

from corral.cli import salloc, scontrol, srun
from corral.cli.sbatch import parse_sbatch
from corral.model.job import Job, JobState, NodeAlloc
from corral.model.jobenv import batch_environment
from corral.sched.eligibility import view_of
from corral.sched.select import make_request

ENV = {"HOME": "/home/alice", "PATH": "/usr/bin:/bin"}


def test_the_commands_send_it_and_keep_the_task_count() -> None:
    sub = parse_sbatch(["-O", "-n30", "--wrap=true"], dict(ENV), None, "/tmp", 0.0)
    assert (sub.spec["overcommit"], sub.spec["num_tasks"]) == (True, 30)
    sub = parse_sbatch(["-n30", "--wrap=true"], {**ENV, "SBATCH_OVERCOMMIT": "1"}, None, "/tmp",
                       0.0)
    assert sub.spec["overcommit"] is True
    assert "overcommit" not in parse_sbatch(["--wrap=true"], dict(ENV), None, "/tmp", 0.0).spec
    req = srun.parse_srun(["-O", "-N1", "-n20", "true"], dict(ENV), "/tmp", 0.0)
    assert req.alloc is not None
    assert (req.alloc["overcommit"], req.alloc["num_tasks"]) == (True, 20)
    assert req.step is not None and req.step["overcommit"] is True
    sreq = salloc.parse_salloc(["--overcommit", "-n20", "true"], dict(ENV), "/tmp", 0.0)
    assert (sreq.spec["overcommit"], sreq.spec["num_tasks"]) == (True, 20)


def _job(**kw: object) -> Job:
    return Job(job_id=5, name="oc", user="alice", uid=1000, gid=1000, **kw)  # type: ignore[arg-type]


def test_the_scheduler_asks_one_task_per_node() -> None:
    plain = make_request(view_of(_job(num_tasks=30, cpus_per_task=2, nodes_fixed=False)), 0)
    assert plain.tasks == 30
    over = make_request(view_of(_job(num_tasks=30, cpus_per_task=2, nodes_fixed=False,
                                     overcommit=True)), 0)
    assert (over.num_nodes, over.tasks, over.cpus_per_task, over.most_nodes()) == (1, 1, 2, 1)
    two = make_request(view_of(_job(num_nodes=2, num_tasks=30, ntasks_per_node=15,
                                    overcommit=True)), 0)
    assert (two.num_nodes, two.tasks, two.tasks_per_node) == (2, 2, 1)


def test_environment_and_layout_of_the_batch_step() -> None:
    job = _job(num_tasks=30, overcommit=True, state=JobState.RUNNING, nodes=["n1"],
               alloc=[NodeAlloc("n1", 1, 0, [])])
    env = batch_environment(job, cluster_name="c", submit_host="h")
    assert (env["SLURM_OVERCOMMIT"], env["SLURM_NTASKS"], env["SLURM_TASKS_PER_NODE"],
            env["SLURM_JOB_CPUS_PER_NODE"]) == ("1", "30", "30", "1")
    job.overcommit = False
    assert "SLURM_OVERCOMMIT" not in batch_environment(job, cluster_name="c", submit_host="h")


def test_scontrol_shows_the_pending_request() -> None:
    pending = {"num_nodes": 2, "num_tasks": 30, "cpus_per_task": 2, "overcommit": True}
    res = scontrol.job_resources(pending)
    assert (res["cpus"], res["ntasks"]) == (4, 30)
    assert scontrol.job_resources({**pending, "overcommit": False})["cpus"] == 60


def test_limits_count_the_cpus_it_asks_for() -> None:
    from corral.sched.limits_check import job_request

    assert job_request(_job(num_tasks=30, cpus_per_task=2)).tres["cpu"] == 60
    assert job_request(_job(num_tasks=30, cpus_per_task=2, overcommit=True)).tres["cpu"] == 2


def test_not_with_gpus_per_task() -> None:
    # cons_tres's dist_tasks: one task per node only for a job without per-task TRES
    req = make_request(view_of(_job(num_tasks=4, gpus_per_task=1, overcommit=True)), 0)
    assert (req.tasks, req.gpus_per_task) == (4, 1)
