"""End-to-end: the GPU variables a job's environment gets, and how srun inside an allocation
reads them back, on the demo lab cluster (examples/lab.conf: 4 GPUs a node).

Slurm 22.05: sbatch and salloc export SLURM_GPUS, SLURM_GPUS_PER_NODE, SLURM_GPUS_PER_TASK for
--gpus, --gpus-per-node, --gpus-per-task (set_env_from_opts), nothing of the kind for
--gres=gpu:N; srun reads them back as options, its own command line beats them (a GPU request
of any kind replaces the inherited ones), and SLURM_STEP_GRES stands for --gres of a step."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cluster import LAB_CONFIG, Cluster, running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


SHOW = "printenv | grep -E '^(SLURM_GPUS|SLURM_JOB_GPUS|SLURM_STEP_GPUS|CUDA_VISIBLE|GPU_DEV)' " \
       "| sort; echo ."


def gpu_env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, LAB_CONFIG.read_text() + "KillWait=2\n") as c:
        yield c


def batch_env(cluster: Cluster, *opts: str) -> dict[str, str]:
    out = cluster.workdir / f"gpuenv-{len(list(cluster.workdir.glob('gpuenv-*')))}.out"
    job = cluster.sbatch("-N1", f"-o{out}", *opts, "--wrap", SHOW)
    assert cluster.wait_state(job, "COMPLETED") == "COMPLETED", out.read_text()
    return gpu_env(out.read_text())


def test_batch_gres_exports_no_gpu_count(cluster: Cluster) -> None:
    env = batch_env(cluster, "--gres=gpu:2")
    assert "SLURM_GPUS_PER_NODE" not in env and "SLURM_GPUS" not in env, env
    assert "SLURM_GPUS_PER_TASK" not in env, env
    assert len(env["SLURM_JOB_GPUS"].split(",")) == 2, env
    assert env["CUDA_VISIBLE_DEVICES"] == env["GPU_DEVICE_ORDINAL"] == env["SLURM_JOB_GPUS"]
    assert env["SLURM_GPUS_ON_NODE"] == "2", env


def test_batch_gpu_options_export_their_text(cluster: Cluster) -> None:
    env = batch_env(cluster, "--gpus-per-node=2")
    assert env["SLURM_GPUS_PER_NODE"] == "2" and "SLURM_GPUS" not in env, env
    env = batch_env(cluster, "--gpus=3")
    assert env["SLURM_GPUS"] == "3" and "SLURM_GPUS_PER_NODE" not in env, env
    env = batch_env(cluster, "-n2", "--gpus-per-task=1")
    assert env["SLURM_GPUS_PER_TASK"] == "1" and "SLURM_GPUS_PER_NODE" not in env, env
    # --export=NONE keeps them (sbatch writes them after the export list)
    env = batch_env(cluster, "--export=NONE", "--gpus-per-node=1")
    assert env["SLURM_GPUS_PER_NODE"] == "1", env


GRES_ALLOC = """\
set -u
echo "shell ${SLURM_GPUS_PER_NODE-unset}"
srun -n1 bash -c 'echo all $CUDA_VISIBLE_DEVICES ${SLURM_GPUS_PER_NODE-unset}'
srun -n1 --gres=gpu:1 bash -c 'echo one $CUDA_VISIBLE_DEVICES'
SLURM_STEP_GRES=none srun -n1 bash -c 'echo none ${CUDA_VISIBLE_DEVICES-unset}'
"""

GPN_ALLOC = """\
set -u
echo "shell $SLURM_GPUS_PER_NODE"
srun -n1 bash -c 'echo all $CUDA_VISIBLE_DEVICES'
srun -n1 --gres=gpu:1 bash -c 'echo gres $CUDA_VISIBLE_DEVICES'
srun -n1 --gpus-per-task=2 bash -c 'echo gpt $CUDA_VISIBLE_DEVICES'
srun -n1 --gres=none bash -c 'echo none ${CUDA_VISIBLE_DEVICES-unset}'
SLURM_STEP_GRES=gpu:3 srun -n1 bash -c 'echo step $CUDA_VISIBLE_DEVICES'
SLURM_STEP_GRES=none srun -n1 --gpus-per-node=1 bash -c 'echo cli $CUDA_VISIBLE_DEVICES'
"""


def lines(text: str) -> dict[str, list[str]]:
    return {ln.split()[0]: ln.split()[1:] for ln in text.splitlines() if ln.strip()}


def test_gres_allocation_exports_no_gpu_count(cluster: Cluster) -> None:
    r = cluster.run("salloc", "--gres=gpu:4", "-N1", "bash", "-c", GRES_ALLOC, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    got = lines(r.stdout)
    assert got["shell"] == ["unset"], r.stdout
    assert len(got["all"][0].split(",")) == 4 and got["all"][1] == "unset", r.stdout
    assert len(got["one"][0].split(",")) == 1, r.stdout
    assert got["none"] in ([], ["unset"]), r.stdout  # no GPU ids


def test_srun_command_line_beats_inherited_gpus_per_node(cluster: Cluster) -> None:
    r = cluster.run("salloc", "--gpus-per-node=4", "-N1", "-n2", "bash", "-c", GPN_ALLOC,
                    timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    got = lines(r.stdout)
    assert got["shell"] == ["4"], r.stdout
    count = {k: len(v[0].split(",")) for k, v in got.items() if k != "shell" and v}
    # without GPU options the step takes the inherited SLURM_GPUS_PER_NODE=4
    assert count["all"] == 4, r.stdout
    # any GPU option of srun's own replaces it, whatever its kind
    assert count["gres"] == 1 and count["gpt"] == 2, r.stdout
    assert got["none"] in ([], ["unset"]), r.stdout  # no GPU ids
    # SLURM_STEP_GRES stands for --gres of the step; the command line beats it too
    assert count["step"] == 3 and count["cli"] == 1, r.stdout


def test_srun_allocation_tasks_see_no_gpu_count(cluster: Cluster) -> None:
    # srun's own allocation: Slurm's srun exports none of the GPU option variables
    r = cluster.run("srun", "-N1", "--gpus-per-node=2", "bash", "-c", SHOW, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    env = gpu_env(r.stdout)
    assert "SLURM_GPUS_PER_NODE" not in env and len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 2
