"""The job's GPUs in its container (agent/nvidia_hook.py, docs/CONTAINERS.md), through srun and
sbatch on a running cluster, as far as a machine without an NVIDIA driver allows: the
container's /dev of its own, which NVIDIA_* values a step accepts, that only a task with GPUs
is looked at, and that a node without the driver gives its (declared) GPUs' variables but no
driver files.  What the hook mounts from a driver is unit-tested on fake ones
(tests/unit/test_container_nvidia.py) and was tried on a GPU machine (.devnv, not committed)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.test_containers import images, user_cluster  # noqa: F401  (module fixtures)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.path.exists("/dev/nvidiactl"),
                                 reason="this machine has an NVIDIA driver: the test expects none")]

BAD_CAPS = {"NVIDIA_DRIVER_CAPABILITIES": "compute,gpu"}
CAPS_ERROR = "slurmstepd: error: pyxis: unknown NVIDIA driver capability: gpu\n"


def test_a_container_has_a_dev_of_its_own_with_the_hosts_shared_memory(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:  # noqa: F811
    c, _ = user_cluster
    image = f"--container-image={images / 'test.sqsh'}"
    out = c.ok("srun", "-N1", "-w", "node-1", image, "ls", "/dev", timeout=120)
    seen = set(out.split())
    assert {"null", "zero", "urandom", "tty", "pts", "shm"} <= seen, out
    # nothing else of the host's /dev (its disks, fuse, ...): only the shared parts
    assert seen <= {"null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm",
                    "fd", "stdin", "stdout", "stderr", "core", "mqueue", "hugepages",
                    "infiniband"}, out
    # /dev/shm is the host's: what one step leaves there, the next sees (NCCL's intra-node
    # transport and torch's DataLoader share memory between a node's tasks this way)
    name = f"corral-gpu-test-{os.getpid()}"
    try:
        c.ok("srun", "-N1", "-w", "node-1", image, "sh", "-c", f"echo shared > /dev/shm/{name}",
             timeout=120)
        assert Path(f"/dev/shm/{name}").read_text() == "shared\n"
    finally:
        Path(f"/dev/shm/{name}").unlink(missing_ok=True)


def test_a_step_with_gpus_reads_the_nvidia_variables(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:  # noqa: F811
    c, _ = user_cluster
    image = f"--container-image={images / 'test.sqsh'}"
    # a capability the driver does not have: refused, as Enroot's hook refuses it
    r = c.run("srun", "-N1", "-w", "node-1", "--gres=gpu:1", image, "true", env=BAD_CAPS,
              timeout=120)
    assert r.returncode == 1 and r.stderr.startswith(CAPS_ERROR), r.stderr
    r = c.run("srun", "-N1", "-w", "node-1", "--gres=gpu:1", image, "true", timeout=120,
              env={"NVIDIA_VISIBLE_DEVICES": "GPU-8d3f9c2e"})
    assert r.returncode == 1, r.stderr
    assert ("pyxis: NVIDIA_VISIBLE_DEVICES=GPU-8d3f9c2e: only all, none, void or GPU indexes "
            "are understood") in r.stderr
    # void: the hook stays out of it altogether, whatever else is set
    r = c.run("srun", "-N1", "-w", "node-1", "--gres=gpu:1", image, "true", timeout=120,
              env=dict(BAD_CAPS, NVIDIA_VISIBLE_DEVICES="void"))
    assert r.returncode == 0, r.stderr
    # a step without GPUs is not looked at
    r = c.run("srun", "-N1", "-w", "node-1", image, "true", env=BAD_CAPS, timeout=120)
    assert r.returncode == 0, r.stderr
    # no driver on this node: the step runs with its GPUs' variables and no driver files
    out = c.ok("srun", "-N1", "-w", "node-1", "--gres=gpu:2", image, "sh", "-c",
               "echo $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS; "
               "ls /run/corral-nvidia 2>/dev/null || echo none", timeout=120)
    cuda, step, none = out.split()
    assert cuda == step and len(cuda.split(",")) == 2 and none == "none", out
    assert c.ok("srun", "-N1", "-w", "node-1", "echo", "usable") == "usable\n"


def test_a_batch_script_in_a_container_with_gpus_goes_through_the_hook(
        user_cluster: tuple[Cluster, pwd.struct_passwd], images: Path) -> None:  # noqa: F811
    c, _ = user_cluster
    image = f"--container-image={images / 'test.sqsh'}"
    with_gpus = c.sbatch("-N1", "-w", "node-2", "--gres=gpu:1", image, "-o",
                         str(c.workdir / "gpus.out"), "--wrap", "echo ran", env=BAD_CAPS)
    without = c.sbatch("-N1", "-w", "node-2", image, "-o", str(c.workdir / "none.out"),
                       "--wrap", "echo ran", env=BAD_CAPS)
    assert c.wait_state(with_gpus, {"FAILED", "COMPLETED"}, timeout=60) == "FAILED"
    assert c.wait_state(without, {"FAILED", "COMPLETED"}, timeout=60) == "COMPLETED"
    assert (c.workdir / "none.out").read_text() == "ran\n"
    assert "ran" not in (c.workdir / "gpus.out").read_text()
