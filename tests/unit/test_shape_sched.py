"""Job shape (issue 9): --tmp (TmpDisk), --mincpus as an allocation (pn_min_cpus), a
--gpus total without -N spread over nodes; node selection, backfill and the submit check
(fits_ever) agree.  Pure scheduler code, then the controller in process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.controller.errors import ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE, SlurmError
from corral.controller.harness import Harness
from corral.model.job import JobState, NodeAlloc
from corral.model.jobspec import mbytes_exact, pn_min_cpus
from corral.model.node import Partition
from corral.sched.backfill import schedule
from corral.sched.select import fits_ever, make_request, select_nodes
from corral.sched.snapshot import NodeView, PendingView, RunningView, Snapshot

NOW = 1_000_000.0


def node(name: str, cpus: int = 16, mem: int = 64_000, gpus: int = 4, tmp: int = 0) -> NodeView:
    return NodeView(name=name, cpus=cpus, mem=mem, gpus=gpus, free_cpus=cpus, free_mem=mem,
                    free_gpus=list(range(gpus)), usable=True, partitions=("debug",),
                    tmp_disk=tmp)


def pend(job_id: int = 1, **kw: object) -> PendingView:
    kw.setdefault("priority", 100)
    kw.setdefault("submit_time", NOW - 100 + job_id)
    kw.setdefault("partition", "debug")
    return PendingView(job_id=job_id, **kw)  # type: ignore[arg-type]


def snap(views: list[NodeView], pending: list[PendingView],
         running: list[RunningView] | None = None) -> Snapshot:
    part = Partition(name="debug", nodes=[v.name for v in views])
    return Snapshot(now=NOW, nodes={v.name: v for v in views}, partitions={"debug": part},
                    running=running or [], pending=pending)


def take(view: NodeView, cpus: int = 0, gpus: int = 0) -> None:
    view.free_cpus -= cpus
    view.free_gpus = view.free_gpus[gpus:]
    view.job_count += 1


# ---- --tmp ----------------------------------------------------------------------------

def test_tmp_lands_only_on_nodes_with_that_much_tmp_disk() -> None:
    views = [node("n1", tmp=1000), node("n2", tmp=50_000)]
    assert [a.node for a in select_nodes(pend(min_tmp_disk=2000), views, 0) or []] == ["n2"]
    assert select_nodes(pend(min_tmp_disk=1000), views, 0) is not None
    assert not fits_ever(pend(min_tmp_disk=50_001), views, 0)
    assert fits_ever(pend(min_tmp_disk=50_000), views, 0)
    # two nodes asked, one has the disk: never
    assert not fits_ever(pend(num_nodes=2, min_tmp_disk=2000), views, 0)


def test_backfill_honours_tmp_and_waits_for_the_right_node() -> None:
    views = [node("n1", tmp=1000), node("n2", tmp=50_000)]
    take(views[1], cpus=16)  # the big-disk node is busy until NOW+100
    run = RunningView(job_id=9, end_time=NOW + 100,
                      alloc=[NodeAlloc("n2", 16, 0, [])])
    p = schedule(snap(views, [pend(1, min_tmp_disk=2000, time_limit=60)], [run]))
    assert p.starts == []
    assert p.planned[1] == (NOW + 100, ["n2"])
    # without --tmp it starts at once on the free node
    p = schedule(snap(views, [pend(2, time_limit=60)], [run]))
    assert [a.node for _, allocs in p.starts for a in allocs] == ["n1"]


def test_backfill_static_reason_for_tmp_no_node_has() -> None:
    views = [node("n1", tmp=1000), node("n2", tmp=1000)]
    p = schedule(snap(views, [pend(1, min_tmp_disk=5000)]))
    assert p.starts == [] and p.reasons[1].text() == "PartitionConfig"


# ---- --mincpus ----------------------------------------------------------------------------

def test_mincpus_is_allocated_on_every_node() -> None:
    views = [node("n1"), node("n2")]
    allocs = select_nodes(pend(num_tasks=2, num_nodes=2, min_cpus=6), views, 0)
    assert allocs is not None and [a.cpus for a in allocs] == [6, 6]
    one = select_nodes(pend(num_tasks=3, min_cpus=8, mem_per_cpu=100), views, 0)
    assert one is not None and [(a.cpus, a.mem_mb) for a in one] == [(8, 800)]
    # more tasks than --mincpus: the tasks' CPUs
    assert [a.cpus for a in select_nodes(pend(num_tasks=10, min_cpus=8), views, 0) or []] == [10]


def test_mincpus_needs_that_many_free_and_memory_for_them() -> None:
    views = [node("n1"), node("n2")]
    take(views[0], cpus=12)
    allocs = select_nodes(pend(num_tasks=1, min_cpus=8), views, 0)
    assert allocs is not None and [(a.node, a.cpus) for a in allocs] == [("n2", 8)]
    # a -n job spreading over nodes: each node gets --mincpus at least
    spread = select_nodes(pend(num_tasks=20, nodes_fixed=False, min_cpus=6,
                               mem_per_cpu=1000), [node("a"), node("b")], 0)
    assert spread is not None and sum(a.cpus for a in spread) >= 20
    assert all(a.cpus >= 6 and a.mem_mb == 1000 * a.cpus for a in spread)
    # memory for --mincpus CPUs that no node has
    assert not fits_ever(pend(min_cpus=16, mem_per_cpu=5000), views, 0)


def test_backfill_reserves_mincpus() -> None:
    views = [node("n1")]
    take(views[0], cpus=10)
    run = RunningView(job_id=9, end_time=NOW + 100, alloc=[NodeAlloc("n1", 10, 0, [])])
    # 12 CPUs asked through --mincpus: 6 free now, so it waits for NOW+100 and reserves
    # 12; a 6-CPU job without a time limit would leave 10 then: it must not start
    p = schedule(snap(views, [pend(1, min_cpus=12, time_limit=60),
                              pend(2, num_tasks=6)], [run]))
    assert p.starts == [] and p.planned[1] == (NOW + 100, ["n1"])
    # 4 CPUs leave the 12: that one starts now
    p = schedule(snap(views, [pend(1, min_cpus=12, time_limit=60),
                              pend(2, num_tasks=4)], [run]))
    assert [j for j, _ in p.starts] == [2]


def test_pn_min_cpus_as_slurm_derives_it() -> None:
    assert pn_min_cpus(1, None, 1, None) == 1
    assert pn_min_cpus(2, 3, 3, None) == 6  # --ntasks-per-node=3 -c2
    assert pn_min_cpus(2, 3, 1, None) == 2  # one task: not raised
    assert pn_min_cpus(1, None, 4, 8) == 8
    assert pn_min_cpus(4, None, 1, 2) == 4


def test_mbytes_exact_as_convert_num_unit() -> None:
    assert [mbytes_exact(x) for x in (0, 100, 1024, 1536, 1100, 2 * 1024 * 1024)] == \
        ["0", "100M", "1G", "1.50G", "1100M", "2T"]


# ---- --gpus total without -N ------------------------------------------------------------

def test_gpu_total_without_nodes_spreads_over_as_many_nodes_as_needed() -> None:
    views = [node(f"n{i}") for i in range(1, 5)]
    job = pend(gpus=8, nodes_fixed=False)
    allocs = select_nodes(job, views, 0)
    assert allocs is not None
    assert [(len(a.gpus), a.cpus) for a in allocs] == [(4, 1), (4, 1)]  # a task on each
    assert fits_ever(pend(gpus=16, nodes_fixed=False), views, 0)
    assert not fits_ever(pend(gpus=17, nodes_fixed=False), views, 0)
    # with -N1 the count is fixed: 8 GPUs never fit one 4-GPU node
    assert not fits_ever(pend(gpus=8, num_nodes=1), views, 0)
    # fits on one node: stays on one
    assert len(select_nodes(pend(gpus=3, nodes_fixed=False), views, 0) or []) == 1


def test_gpu_total_takes_free_gpus_where_they_are() -> None:
    views = [node(f"n{i}") for i in range(1, 4)]
    take(views[0], gpus=3)  # n1: 1 free
    take(views[1], gpus=1)  # n2: 3 free
    allocs = select_nodes(pend(gpus=6, nodes_fixed=False), views, 0)
    assert allocs is not None
    assert sorted((a.node, len(a.gpus)) for a in allocs) == [("n2", 2), ("n3", 4)]
    got = select_nodes(pend(gpus=8, nodes_fixed=False), views, 0)
    assert got is not None and sum(len(a.gpus) for a in got) == 8
    assert len(got) == 3
    assert select_nodes(pend(gpus=9, nodes_fixed=False), views, 0) is None


def test_gpu_total_tasks_spread_with_the_gpus() -> None:
    views = [node(f"n{i}") for i in range(1, 3)]
    allocs = select_nodes(pend(gpus=8, num_tasks=8, nodes_fixed=False, cpus_per_task=2),
                          views, 0)
    assert allocs is not None and [(a.cpus, len(a.gpus)) for a in allocs] == [(8, 4), (8, 4)]


def test_backfill_starts_and_plans_a_gpu_total_spread() -> None:
    views = [node(f"n{i}") for i in range(1, 4)]
    p = schedule(snap(views, [pend(1, gpus=8, nodes_fixed=False, time_limit=60)]))
    (jid, allocs), = p.starts
    assert jid == 1 and [len(a.gpus) for a in allocs] == [4, 4]
    # all GPUs busy until NOW+100: planned on two nodes then, reserving 4 GPUs each
    for v in views:
        take(v, gpus=4)
    run = RunningView(job_id=9, end_time=NOW + 100,
                      alloc=[NodeAlloc(v.name, 0, 0, [0, 1, 2, 3]) for v in views])
    p = schedule(snap(views, [pend(1, gpus=8, nodes_fixed=False, time_limit=60)], [run]))
    assert p.starts == [] and p.planned[1][0] == NOW + 100 and len(p.planned[1][1]) == 2
    assert p.reasons[1].text() == "Resources"


def test_request_spread_keeps_own_gpus_per_node() -> None:
    req = make_request(pend(gpus=8, gpus_per_node=1, nodes_fixed=False), 0)
    assert req.gpu_spread and req.gpus_per_node == 9 and req.min_gpus_per_node() == 2
    two = req.spread_over(2)
    assert (two.num_nodes, two.gpus_per_node, two.tasks) == (2, 5, 2)


# ---- through the controller (submit refusal and starts) -------------------------------------

CONF = """\
ClusterName=t
MinJobAge=60
NodeName=small[1-2] CPUs=16 RealMemory=16000 Gres=gpu:4 TmpDisk=1000
NodeName=big1 CPUs=16 RealMemory=16000 Gres=gpu:4 TmpDisk=100000
PartitionName=debug Nodes=small[1-2],big1 Default=YES
"""


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(CONF) as harness:
        yield harness


def test_submit_refuses_tmp_no_node_has(h: Harness) -> None:
    with pytest.raises(SlurmError) as e:
        h.submit(min_tmp_disk=100_001)
    assert e.value.errno == ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE
    assert str(e.value) == "Requested node configuration is not available"
    j = h.submit(min_tmp_disk=5000)
    h.tick()
    assert h.job(j).state == JobState.RUNNING and h.job(j).nodes == ["big1"]
    assert h.job(j).to_dict()["min_tmp_disk"] == 5000


def test_controller_gpu_total_and_mincpus(h: Harness) -> None:
    j = h.submit(gpus=8)  # no num_nodes: -N not given
    h.tick()
    assert h.job(j).state == JobState.RUNNING
    assert [len(a.gpus) for a in h.job(j).alloc] == [4, 4]
    with pytest.raises(SlurmError):
        h.submit(gpus=13)
    m = h.submit(num_nodes=1, min_cpus=6)
    h.tick()
    assert h.job(m).state == JobState.RUNNING and h.job(m).alloc[0].cpus == 6


def test_gpu_total_with_more_tasks_than_one_node_holds() -> None:
    views = [node(f"n{i}") for i in range(1, 4)]
    allocs = select_nodes(pend(gpus=1, num_tasks=30, nodes_fixed=False), views, 0)
    assert allocs is not None
    assert sum(a.cpus for a in allocs) == 30 and sum(len(a.gpus) for a in allocs) == 1
    assert len(allocs) == 2
    assert not fits_ever(pend(gpus=1, num_tasks=49, nodes_fixed=False), views, 0)


# ---- what the commands send ------------------------------------------------------------------

def test_commands_send_tmp_and_srun_spreads_without_nodes() -> None:
    from corral.cli import salloc, sbatch, srun

    env = {"PATH": "/bin"}
    sub = sbatch.parse_sbatch(["--tmp=2G", "--mincpus=3", "--wrap=true"], env, None,
                              "/home/u", NOW)
    assert sub.spec["min_tmp_disk"] == 2048 and sub.spec["min_cpus"] == 3
    alloc = salloc.parse_salloc(["--tmp=500", "true"], env, "/home/u", NOW)
    assert alloc.spec["min_tmp_disk"] == 500
    req = srun.parse_srun(["--gpus=8", "true"], env, "/home/u", NOW)
    assert req.alloc is not None and req.alloc["num_nodes"] is None  # no -N: may spread
    assert req.alloc["gpus"] == 8 and "min_tmp_disk" not in req.alloc  # not given
    # the step: the job's GPUs of each node, one task on each node
    assert req.step["gpus_per_node"] is None and req.step["ntasks_per_node"] == 1
    assert req.step["gpus"] == 8  # a total: taken from the job's GPUs node by node
    fixed = srun.parse_srun(["-N2", "--gpus=8", "true"], env, "/home/u", NOW)
    assert fixed.alloc is not None and fixed.alloc["num_nodes"] == 2
    assert fixed.step["gpus_per_node"] is None and fixed.step["gpus"] == 8
    assert fixed.step["ntasks_per_node"] is None
    tasks = srun.parse_srun(["-n30", "true"], env, "/home/u", NOW)
    assert tasks.alloc is not None and tasks.alloc["num_nodes"] is None
