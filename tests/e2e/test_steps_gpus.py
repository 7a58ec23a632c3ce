"""End-to-end: GPUs between concurrent steps of one allocation, on the demo lab cluster
(examples/lab.conf, declared GPUs). As in Slurm, a step holds the GPUs it gets from the
job's allocation while it runs: two `srun --gres=gpu:2` steps of a `--gres=gpu:4` allocation
see disjoint CUDA_VISIBLE_DEVICES, a third asking for a GPU waits ("Requested nodes are busy")
until one of them ends, and an `--overlap` step does not wait."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cluster import LAB_CONFIG, Cluster, running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

INSIDE = """\
set -u
srun -n1 --gres=gpu:2 bash -c 'echo A $CUDA_VISIBLE_DEVICES; sleep 4; echo end $(date +%s.%N)' \
    > a.out 2>&1 &
srun -n1 --gres=gpu:2 bash -c 'echo B $CUDA_VISIBLE_DEVICES; sleep 4; echo end $(date +%s.%N)' \
    > b.out 2>&1 &
sleep 1.5
srun -n1 --overlap --gres=gpu:1 bash -c 'echo O $CUDA_VISIBLE_DEVICES $(date +%s.%N)' > o.out 2>&1
srun -n1 --gres=gpu:1 bash -c 'echo C $CUDA_VISIBLE_DEVICES $(date +%s.%N)' > c.out 2>&1
wait
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, LAB_CONFIG.read_text() + "KillWait=2\n") as c:
        yield c


def test_concurrent_steps_hold_disjoint_gpus(cluster: Cluster) -> None:
    r = cluster.run("salloc", "--gres=gpu:4", "-N1", "-n4", "bash", "-c", INSIDE, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    out = {k: (cluster.workdir / f"{k}.out").read_text() for k in "aboc"}
    a = out["a"].split("\n")[0].split()
    b = out["b"].split("\n")[0].split()
    assert a[0] == "A" and b[0] == "B", out
    ga, gb = set(a[1].split(",")), set(b[1].split(","))
    assert len(ga) == len(gb) == 2 and not ga & gb, out
    assert ga | gb == {"0", "1", "2", "3"}, out
    end = {k: float(line.split()[1]) for k in "ab" for line in out[k].splitlines()
           if line.startswith("end ")}
    assert len(end) == 2, out
    first = min(end.values())
    freed = ga if end["a"] <= end["b"] else gb
    # the overlapping step ran at once, on a GPU the others hold
    o = out["o"].split()
    assert o[0] == "O" and o[1] in ga | gb and float(o[2]) < first, out
    # the third waited until a step gave its GPUs back, and got one of those
    assert f"srun: Job {a_job(out)} step creation temporarily disabled, retrying " \
        "(Requested nodes are busy)" in out["c"], out
    c_line = next(line for line in out["c"].splitlines() if line.startswith("C "))
    _, gc, when = c_line.split()
    assert float(when) >= first - 0.05, out
    assert gc in freed, out


def a_job(out: dict[str, str]) -> str:
    """The allocation's job id, from srun's "Step created for StepId=J.S" line."""
    line = next(ln for ln in out["c"].splitlines() if "StepId=" in ln)
    return line.split("StepId=")[1].split(".")[0]


GPU_TOTAL = """\
srun -l bash -c 'echo $CUDA_VISIBLE_DEVICES' | sort
echo ---
srun -l --gpus=5 bash -c 'echo $CUDA_VISIBLE_DEVICES' | sort
echo ---
srun --gpus=7 true
"""


def test_step_gpus_total_is_taken_node_by_node(cluster: Cluster) -> None:
    # --gpus=6 over 4-GPU nodes: the job holds 4 + 2; a step's --gpus total (inherited
    # through SLURM_GPUS, or its own) takes the job's GPUs node by node, not an even share
    r = cluster.run("salloc", "--gpus=6", "bash", "-c", GPU_TOTAL, timeout=90)
    plain, five, _ = r.stdout.split("---\n")
    assert plain == "0: 0,1,2,3\n1: 0,1\n", r.stdout + r.stderr
    assert five == "0: 0,1,2,3\n1: 0\n", r.stdout + r.stderr
    assert "srun: error: Unable to create step for job" in r.stderr
    assert "Requested node configuration is not available" in r.stderr
    # a new allocation's step: -N2 --gpus=3 is 2 + 1
    out = cluster.ok("srun", "-N2", "--gpus=3", "-l", "bash", "-c", "echo $CUDA_VISIBLE_DEVICES",
                     timeout=60)
    assert sorted(out.splitlines()) == ["0: 0,1", "1: 0"], out
