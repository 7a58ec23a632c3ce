"""What squeue and scontrol show of a job's shape (issue 9): --tmp (squeue %d,
MinTmpDiskNode=), a node's TmpDisk=, pn_min_cpus (squeue %c, MinCPUsNode=), and a pending
job's node count when its tasks need more nodes than it named (Slurm's node_cnt_wag)."""

from __future__ import annotations

from typing import Any

from corral.cli import scontrol, squeue
from corral.model.job import Job, JobState
from corral.model.node import Node

NOW = 1_800_000_000.0


def job(**kw: Any) -> dict[str, Any]:
    kw.setdefault("submit_time", NOW - 60)
    return Job(job_id=7, name="j", user="root", uid=0, gid=0, partition="debug",
               work_dir="/w", **kw).to_dict()


def sq(spec: str, rec: dict[str, Any], long: bool = False) -> str:
    parsed = squeue.parse_args(["-h", "-O" if long else "-o", spec])
    assert not isinstance(parsed, int)
    return squeue.format_jobs([{**rec, "display_id": str(rec["job_id"])}], NOW,
                              parsed[0]).strip()


def show(rec: dict[str, Any]) -> str:
    return scontrol.format_job(rec, NOW)


def test_tmp_in_squeue_and_scontrol() -> None:
    for mb, text in ((None, "0"), (100, "100M"), (2048, "2G"), (1536, "1.50G")):
        rec = job(min_tmp_disk=mb)
        assert sq("%d", rec) == text
        assert sq("mintmpdisk", rec, long=True) == text
        assert f" MinTmpDiskNode={text}\n" in show(rec)


def test_node_tmp_disk() -> None:
    node = Node(name="n1", cpus=4, real_memory=1000, tmp_disk=250_000).to_dict()
    assert " TmpDisk=250000 Weight=1 " in scontrol.format_node(node)
    assert " TmpDisk=0 " in scontrol.format_node(Node(name="n2", cpus=4,
                                                       real_memory=1000).to_dict())


def test_min_cpus_node() -> None:
    assert "MinCPUsNode=8 " in show(job(min_cpus=8))
    assert sq("%c", job(min_cpus=8)) == "8"
    assert "MinCPUsNode=6 " in show(job(ntasks_per_node=3, cpus_per_task=2, num_tasks=6))
    assert "MinCPUsNode=2 " in show(job(cpus_per_task=2))


def test_pending_node_count_follows_the_submit_test_and_the_plan() -> None:
    rec = job(num_tasks=30, nodes_fixed=False)
    assert sq("%D", rec) == "1" and "NumNodes=1 " in show(rec)
    assert sq("%D", job(num_tasks=30, nodes_fixed=False, node_cnt_wag=2)) == "2"
    assert "NumNodes=2 " in show(job(num_tasks=30, nodes_fixed=False, node_cnt_wag=2))
    planned = job(num_tasks=30, nodes_fixed=False, sched_nodes=["a", "b", "c"])
    assert sq("%D", planned) == "3" and "NumNodes=3 " in show(planned)
    # a running job shows the nodes it has
    running = job(state=JobState.RUNNING, nodes=["a", "b"], node_cnt_wag=3, start_time=NOW)
    assert sq("%D", running) == "2"


def test_corral_up_writes_tmp_disk_as_slurmd_reports_it() -> None:
    import os

    from corral.admin.cluster import default_config_text
    from corral.model.config import parse_config

    st = os.statvfs("/tmp")
    mb = st.f_blocks * st.f_frsize // (1024 * 1024)
    text = default_config_text()
    assert f" TmpDisk={mb}" in text
    (node,) = parse_config(text).nodes
    assert node.tmp_disk == mb
