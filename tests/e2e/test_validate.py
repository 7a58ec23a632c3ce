"""`corral validate` on a two-node cluster: the suite runs as a job through sbatch and srun,
prints its table and exits 0; a disk check that fails on one node exits 1, and with
--drain-failed drains that node (and only that one)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

from corral.admin.validate import failed_nodes, missing_results, parse_results, render_table
from tests.e2e.cluster import Cluster, running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CONFIG = """\
ClusterName=validatetest
KillWait=2
MinJobAge=600
SchedulerInterval=1
NodeName=node-1 CPUs=2 RealMemory=2000 NodeAddr=127.0.0.1
NodeName=node-2 CPUs=2 RealMemory=2000 NodeAddr=127.0.0.1
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory, CONFIG, name="validate") as c:
        yield c


def rows(out: str) -> dict[tuple[str, str], str]:
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in ("gpu", "disk", "network", "allreduce"):
            table[(parts[0], parts[1])] = parts[2]
    return table


def test_validate_passes(cluster: Cluster) -> None:
    r = cluster.run("corral", "validate", "node-[1-2]", timeout=200)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^CHECK +NODES +RESULT +DETAIL$", r.stdout, re.M), r.stdout
    table = rows(r.stdout)
    assert table == {("gpu", "node-1"): "skip", ("gpu", "node-2"): "skip",
                     ("disk", "node-1"): "ok", ("disk", "node-2"): "ok",
                     ("network", "node-1<>node-2"): "ok",
                     ("allreduce", "node-1<>node-2"): "ok"}, r.stdout
    assert "no GPUs" in r.stdout
    # torch.distributed (gloo: no GPUs here) where torch is installed, plain sockets otherwise
    assert re.search(r"allreduce +node-1<>node-2 +ok +busbw \d+ MB/s \(16 MiB, "
                     r"(torch\.distributed gloo|plain sockets)\)", r.stdout), r.stdout
    assert re.search(r"network .* latency \d+ us, bandwidth \d+ MB/s", r.stdout), r.stdout
    assert "validate: all 6 checks passed on node-[1-2]" in r.stdout
    assert "6/6 checks" in r.stderr  # the progress line
    assert "DRAIN" not in cluster.ok("sinfo", "-h", "-N", "-o", "%N %T")


def test_failing_disk_drains_that_node(cluster: Cluster) -> None:
    c = cluster
    base = c.workdir / "disks"
    (base / "node-1").mkdir(parents=True, exist_ok=True)  # node-2's directory is missing
    r = c.run("corral", "validate", "node-[1-2]", "--disk-dir", f"{base}/%n", timeout=200)
    assert r.returncode == 1, r.stdout + r.stderr
    table = rows(r.stdout)
    assert table[("disk", "node-1")] == "ok" and table[("disk", "node-2")] == "FAIL", r.stdout
    assert "validate: FAILED: node-2 (disk)" in r.stdout
    assert "DRAIN" not in c.ok("sinfo", "-h", "-N", "-o", "%N %T")  # not asked to drain
    r = c.run("corral", "validate", "node-[1-2]", "--disk-dir", f"{base}/%n",
              "--drain-failed", timeout=200)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "validate: drained node-2" in r.stdout
    try:
        shown = c.ok("scontrol", "show", "node", "node-2")
        assert "DRAIN" in shown and "Reason=validate: disk failed" in shown, shown
        assert "DRAIN" not in c.ok("scontrol", "show", "node", "node-1")
    finally:
        c.ok("scontrol", "update", "NodeName=node-2", "State=RESUME")


def test_bad_node_name(cluster: Cluster) -> None:
    r = cluster.run("corral", "validate", "node-9")
    assert r.returncode == 1
    assert r.stderr == "corral validate: error: Invalid node name specified: node-9\n"


def test_results_parsing_and_missing_checks() -> None:
    out = ('noise\nCORRAL-VALIDATE {"check": "disk", "nodes": "a", "result": "ok", '
           '"detail": "write 1 MB/s"}\nCORRAL-VALIDATE {broken\n')
    results = parse_results(out)
    assert results == [{"check": "disk", "nodes": "a", "result": "ok", "detail": "write 1 MB/s"}]
    missing = missing_results(["a", "b"], results)
    assert {(m["check"], m["nodes"]) for m in missing} == {
        ("gpu", "a"), ("gpu", "b"), ("disk", "b"), ("network", "a<>b"), ("allreduce", "a<>b")}
    assert failed_nodes(results + missing) == {
        "a": ["gpu", "network", "allreduce"], "b": ["gpu", "disk", "network", "allreduce"]}
    assert render_table(results).splitlines()[0] == "CHECK  NODES  RESULT  DETAIL"


def test_disk_check_reports_an_unwritable_directory(tmp_path: os.PathLike[str]) -> None:
    from corral.admin.validate_job import check_disk

    ok, detail = check_disk(str(tmp_path), 4)
    assert ok and "MB/s" in detail
    ok, detail = check_disk(os.path.join(str(tmp_path), "missing"), 4)
    assert not ok and "cannot write in" in detail


def test_plain_socket_allreduce_and_network() -> None:
    """The all-reduce used where torch is not installed, and the network measurement, between
    two threads of this process."""
    import socket
    import threading

    from corral.admin.validate_job import measure_network, serve_peer, socket_allreduce

    details = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        addr = listener.getsockname()
        for measure in (lambda: socket_allreduce(addr, 0, 1, 1),
                        lambda: measure_network(addr, 4)):
            t = threading.Thread(target=lambda: serve_peer(listener.accept()[0]))
            t.start()
            ok, detail = measure()
            t.join(timeout=30)
            assert ok, detail
            details.append(detail)
    assert re.fullmatch(r"busbw \d+ MB/s \(1 MiB, plain sockets\)", details[0]), details
    assert re.fullmatch(r"latency \d+ us, bandwidth \d+ MB/s", details[1]), details
