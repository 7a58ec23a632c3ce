"""GPU options between the environment and the command line (srun), and the GPU variables
sbatch/salloc export and a job's environment gets (Slurm 22.05: srun(1) INPUT ENVIRONMENT
VARIABLES, env.c set_env_from_opts, srun launch.c SLURM_STEP_GRES)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.cli import options, srun
from corral.cli.options import CliExit
from corral.model.job import Job, NodeAlloc
from corral.model.jobenv import batch_environment


def parse(args: list[str], env: dict[str, str]) -> srun.SrunRequest:
    return srun.parse_srun(args, {"PATH": "/bin", **env}, "/home/alice", 1000.0)


IN_JOB = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node-1", "SLURM_JOB_NUM_NODES": "1"}


def test_cli_gpu_option_of_any_kind_drops_the_inherited_ones() -> None:
    v: dict[str, object] = {"gpus-per-node": "4", "gpus": "4", "gres": "gpu:2"}
    options.drop_inherited_gpu_options(v, {"gpus-per-node": "env", "gpus": "env",
                                           "gres": "cli"})
    assert v == {"gres": "gpu:2"}
    v = {"gpus-per-node": "4", "ntasks": 2}
    options.drop_inherited_gpu_options(v, {"gpus-per-node": "env", "ntasks": "env"})
    assert v == {"gpus-per-node": "4", "ntasks": 2}  # nothing on the command line: kept


def test_step_gres_stands_for_the_steps_gres() -> None:
    env_src = {"gpus-per-node": "env"}
    assert options.step_gpu_options({"gpus-per-node": "4"}, env_src, "none") == \
        {"gres": "none"}
    assert options.step_gpu_options({"gpus-per-node": "4"}, env_src, None) == \
        {"gpus-per-node": "4"}
    assert options.step_gpu_options({"gpus-per-node": "4"}, env_src, "") == \
        {"gpus-per-node": "4"}
    # the command line beats it, and so does SLURM_GRES (srun reads that as --gres first)
    assert options.step_gpu_options({"gpus": "1"}, {"gpus": "cli"}, "none") == {"gpus": "1"}
    assert options.step_gpu_options({"gres": "gpu:1"}, {"gres": "env"}, "none") == \
        {"gres": "gpu:1"}


@pytest.mark.parametrize(("args", "env", "per_node", "per_task"), [
    (["--gres=gpu:2"], {"SLURM_GPUS_PER_NODE": "4"}, 2, None),
    (["--gpus-per-task=1"], {"SLURM_GPUS_PER_NODE": "4"}, None, 1),
    (["--gpus-per-node=1"], {"SLURM_GPUS_PER_TASK": "2", "SLURM_GPUS": "8"}, 1, None),
    (["--gres=none"], {"SLURM_GPUS_PER_NODE": "4", "SLURM_GPUS": "4"}, 0, None),
    ([], {"SLURM_GPUS_PER_NODE": "4"}, 4, None),
    ([], {"SLURM_GPUS_PER_NODE": "4", "SLURM_STEP_GRES": "none"}, 0, None),
    ([], {"SLURM_GPUS_PER_NODE": "4", "SLURM_STEP_GRES": "gpu:3"}, 3, None),
    (["--gres=gpu:1"], {"SLURM_STEP_GRES": "gpu:3"}, 1, None),
    ([], {"SLURM_GRES": "gpu:2", "SLURM_STEP_GRES": "none"}, 2, None),
])
def test_srun_step_gpus(args: list[str], env: dict[str, str], per_node: int | None,
                        per_task: int | None) -> None:
    req = parse(["-n1", *args, "true"], {**IN_JOB, **env})
    assert req.step["gpus_per_node"] == per_node
    assert req.step["gpus_per_task"] == per_task


def test_step_gres_is_not_the_allocations() -> None:
    # srun outside a job: SLURM_STEP_GRES shapes the step only
    req = parse(["-N1", "--gres=gpu:2", "true"], {"SLURM_STEP_GRES": "none"})
    assert req.alloc is not None and req.alloc["gpus_per_node"] == 2
    req = parse(["-N1", "true"], {"SLURM_STEP_GRES": "gpu:1", "SLURM_GPUS_PER_NODE": "2"})
    assert req.alloc is not None and req.alloc["gpus_per_node"] == 2
    assert req.step["gpus_per_node"] == 1


def test_bad_step_gres_is_refused() -> None:
    with pytest.raises(CliExit) as e:
        parse(["true"], {**IN_JOB, "SLURM_STEP_GRES": "fpga:1"})
    assert e.value.code == 1
    assert e.value.stderr == "srun: error: Invalid generic resource (gres) specification\n"


def test_gpu_option_environment_is_set_env_from_opts() -> None:
    env = options.gpu_option_environment
    assert env({"gres": "gpu:4"}) == {}
    assert env({"gpus-per-node": "a100:2"}) == {"SLURM_GPUS_PER_NODE": "a100:2"}
    assert env({"gpus": "3", "gpus-per-task": "1", "gres": "gpu:1"}) == \
        {"SLURM_GPUS": "3", "SLURM_GPUS_PER_TASK": "1"}
    assert env({"cpus-per-gpu": "004"}) == {"SLURM_CPUS_PER_GPU": "4"}


def _job(**kw: Any) -> Job:
    job = Job(1, "j", "alice", 1000, 1000, partition="debug", **kw)
    job.alloc = [NodeAlloc("node-1", 4, 1000, [0, 1])]
    job.nodes = ["node-1"]
    return job


def test_batch_environment_has_no_gpu_option_variables() -> None:
    # --gres=gpu:2 and --gpus-per-node=2 are the same record: slurmd sets only the GPU ids
    env = batch_environment(_job(gpus_per_node=2, gpus=2, gpus_per_task=1),
                            cluster_name="lab", submit_host="h")
    assert not {"SLURM_GPUS", "SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_TASK"} & env.keys()
    assert env["SLURM_JOB_GPUS"] == env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["SLURM_GPUS_ON_NODE"] == "2"


def test_sbatch_puts_gpu_options_in_the_job_environment() -> None:
    from corral.cli import sbatch

    def submit(*args: str) -> dict[str, str]:
        sub = sbatch.parse_sbatch(["--export=NONE", *args, "--wrap", "true"],
                                  {"PATH": "/bin", "SLURM_GPUS_PER_NODE": "9"},
                                  lambda: "", "/home/alice", 1000.0)
        return {k: v for k, v in sub.env.items() if k.startswith("SLURM_GPU")}

    assert submit("--gres=gpu:2") == {"SLURM_GPUS_PER_NODE": "9"}  # inherited, as in Slurm
    assert submit("--gpus-per-node=2") == {"SLURM_GPUS_PER_NODE": "2"}
    assert submit("--gpus=gpu:1", "-N1") == {"SLURM_GPUS": "gpu:1", "SLURM_GPUS_PER_NODE": "9"}
    # from SBATCH_* input variables too: Slurm exports the option whatever set it
    sub = sbatch.parse_sbatch(["--wrap", "true"], {"SBATCH_GPUS_PER_NODE": "1"}, lambda: "",
                              "/home/alice", 1000.0)
    assert sub.env["SLURM_GPUS_PER_NODE"] == "1"


def test_salloc_exports_gpu_options_to_its_command() -> None:
    from corral.cli import salloc

    def shell_env(*args: str) -> dict[str, str]:
        return salloc.parse_salloc([*args, "true"], {"PATH": "/bin"}, "/home/alice",
                                   1000.0).shell_env

    assert shell_env("--gres=gpu:4") == {}
    assert shell_env("--gpus-per-node=4") == {"SLURM_GPUS_PER_NODE": "4"}
    assert shell_env("-n2", "--gpus-per-task=1", "--gpus=2") == \
        {"SLURM_GPUS": "2", "SLURM_GPUS_PER_TASK": "1"}
