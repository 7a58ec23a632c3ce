"""Resource use and metrics on a real cluster: sacct's usage fields, sstat, seff, sdiag,
the /metrics routes (parsed by prometheus-client) and a real Prometheus scraping them.

GPUs are simulated (agent.gpu.SimulatedBackend): the test writes their utilisation."""

from __future__ import annotations

import json
import pwd
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.agent.gpu import SIM_FILE, write_simulated
from tests.e2e.cluster import Cluster, needs_test_users
from tests.e2e.test_users import run_as, users  # noqa: F401  (the `users` fixture)

pytestmark = pytest.mark.slow

MB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


METRICS_PORT = _free_port()
CONFIG = f"""\
ClusterName=obscluster
KillWait=2
MinJobAge=600
SchedulerInterval=1
JobAcctGatherFrequency=1
CorralMetricsListen=127.0.0.1:{METRICS_PORT}
NodeName=node-[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=node-[1-2] Default=YES MaxTime=INFINITE State=UP
"""
# Slurm's metric names (src/plugins/metrics/openmetrics/openmetrics.c) that Corral serves
SLURM_NAMES = set("""
node_cpus node_cpus_alloc node_cpus_idle node_gpus node_gpus_alloc node_memory_alloc_bytes
node_memory_bytes node_memory_free_bytes nodes nodes_alloc nodes_down nodes_drain
nodes_drained nodes_draining nodes_idle nodes_mixed nodes_noresp
jobs jobs_bootfail jobs_cancelled jobs_completed jobs_completing jobs_deadline jobs_failed
jobs_node_failed jobs_outofmemory jobs_pending jobs_preempted jobs_running jobs_suspended
jobs_timeout jobs_hold jobs_finished jobs_cpus_alloc jobs_gpus_alloc jobs_memory_alloc
jobs_nodes_alloc partitions
schedule_cycle_cnt schedule_cycle_last schedule_cycle_max schedule_cycle_tot
sched_mean_cycle schedule_queue_len bf_cycle_cnt bf_cycle_last bf_cycle_max backfilled_jobs
sdiag_jobs_submitted sdiag_jobs_started sdiag_jobs_completed sdiag_jobs_canceled
sdiag_jobs_failed sdiag_jobs_pending sdiag_jobs_running sdiag_job_states_ts
sched_stats_timestamp
""".split())
for _p in ("partition", "user", "account"):
    SLURM_NAMES |= {f"{_p}_{n}" for n in ("jobs", "jobs_bootfail", "jobs_cancelled",
                    "jobs_completed", "jobs_completing", "jobs_deadline", "jobs_failed",
                    "jobs_node_failed", "jobs_outofmemory", "jobs_pending", "jobs_preempted",
                    "jobs_running", "jobs_suspended", "jobs_timeout", "jobs_cpus_alloc",
                    "jobs_gpus_alloc", "jobs_memory_alloc", "jobs_hold", "jobs_finished")}
SLURM_NAMES |= {"user_jobs_nodes_alloc", "account_jobs_nodes_alloc"}
SLURM_NAMES |= {"partition_" + n for n in (
    "cpus", "gpus", "nodes", "nodes_cpus_alloc", "nodes_cpus_idle", "nodes_idle",
    "nodes_mixed", "nodes_alloc", "nodes_mem_alloc", "nodes_mem_tot")}


def _gpus(util: float) -> list[dict[str, object]]:
    return [{"node": n, "index": i, "util": util, "memory_used": 512 * MB,
             "memory_total": 16384 * MB, "power_w": 100.0,
             "processes": [{"pid": 1, "used_memory": 512 * MB}]}
            for n in ("node-1", "node-2") for i in range(2)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = Path(tmp_path_factory.mktemp("obs"))
    write_simulated(str(home / SIM_FILE), _gpus(50.0))
    c = Cluster(home, CONFIG)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _sacct(c: Cluster, job: int, fields: str) -> dict[str, list[str]]:
    out = c.ok("sacct", "-j", str(job), "-n", "-P", "-o", "JobID," + fields)
    return {ln.split("|")[0]: ln.split("|")[1:] for ln in out.splitlines() if ln}


def _size(text: str) -> float:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return float(text.rstrip("KMG")) * units[text[-1] if text[-1] in "KMG" else ""]


def _cpu(text: str) -> float:
    """[[D-]HH:]MM:SS[.mmm] -> seconds"""
    parts = text.replace("-", ":").split(":")
    return sum(float(p) * m for p, m in zip(reversed(parts), (1, 60, 3600, 86400), strict=False))


def test_memory_job_shows_its_max_rss(cluster: Cluster) -> None:
    job = cluster.sbatch("--mem=1000", "--wrap",
                         "python3 -c \"import time; b = b'x' * (200 << 20); time.sleep(3)\"")
    cluster.wait_state(job, "COMPLETED", timeout=60)
    row = _sacct(cluster, job, "MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS")[f"{job}.batch"]
    rss = _size(row[0])
    assert 190 * MB <= rss <= 400 * MB, row
    assert row[1] == "node-1" and row[2] == "0" and _size(row[3]) == rss
    assert _sacct(cluster, job, "MaxRSS")[str(job)] == [""]  # the job's line: steps only
    eff = cluster.ok("seff", str(job))
    assert f"Job ID: {job}" in eff and "State: COMPLETED (exit code 0)" in eff
    mem_line = next(ln for ln in eff.splitlines() if ln.startswith("Memory Utilized:"))
    assert mem_line.endswith(" MB") and 190 <= float(mem_line.split()[2]) <= 400, eff
    assert "Memory Efficiency:" in eff and "of 1000.00 MB" in eff


def test_srun_step_has_its_own_figures(cluster: Cluster) -> None:
    job = cluster.sbatch("--mem=1000", "--wrap",
                         "srun python3 -c \"import time; b = b'x' * (120 << 20); time.sleep(2)\"")
    cluster.wait_state(job, "COMPLETED", timeout=60)

    def measured() -> bool:
        return _sacct(cluster, job, "MaxRSS").get(f"{job}.0", [""])[0] != ""
    cluster.wait_for(measured, timeout=20, what="the step's figures")
    rows = _sacct(cluster, job, "MaxRSS,TotalCPU,MaxRSSNode")
    assert 110 * MB <= _size(rows[f"{job}.0"][0]) <= 300 * MB, rows
    assert rows[f"{job}.0"][2] == "node-1"
    # the job's TotalCPU is the sum of its steps'
    assert _cpu(rows[str(job)][1]) == pytest.approx(
        _cpu(rows[f"{job}.0"][1]) + _cpu(rows[f"{job}.batch"][1]), abs=0.01)


def test_cpu_bound_job_shows_total_cpu_near_its_run_time(cluster: Cluster) -> None:
    # busy until it has used 2 s of CPU (the CI machine is shared: wall time says less)
    job = cluster.sbatch("--wrap", "python3 -c \"import time\n"
                                   "while time.process_time() < 2: sum(range(300000))\"")
    cluster.wait_state(job, "COMPLETED", timeout=90)
    rows = _sacct(cluster, job, "TotalCPU,UserCPU,SystemCPU,ElapsedRaw,TRESUsageInTot")
    total = _cpu(rows[f"{job}.batch"][0])
    assert 2.0 <= total <= min(3.5, float(rows[str(job)][3]) + 1.0), rows
    assert _cpu(rows[f"{job}.batch"][1]) >= 1.5  # mostly user time
    assert _cpu(rows[str(job)][0]) == pytest.approx(total, abs=0.01)  # the sum of its steps
    assert rows[f"{job}.batch"][4].startswith("cpu=00:00:0")
    eff = cluster.ok("seff", str(job))
    line = next(ln for ln in eff.splitlines() if ln.startswith("CPU Efficiency:"))
    assert 0 < float(line.split()[2].rstrip("%")) <= 100, eff


def test_sstat_of_a_running_step_and_gpu_figures(cluster: Cluster) -> None:
    job = cluster.sbatch("--gres=gpu:2", "--wrap",
                         "python3 -c \"import time; b = b'x' * (64 << 20); time.sleep(30)\"")
    try:
        cluster.wait_state(job, "RUNNING", timeout=30)
        rows: list[str] = []

        def sampled() -> bool:
            nonlocal rows
            r = cluster.run("sstat", "-j", str(job), "-n", "-p", "-o",
                            "JobID,MaxRSS,NTasks,TRESUsageInMax")
            rows = [ln for ln in r.stdout.splitlines() if ln]
            return r.returncode == 0 and bool(rows) and _size(rows[0].split("|")[1] or "0") > 60 * MB
        cluster.wait_for(sampled, timeout=30, what="sstat figures")
        cols = rows[0].split("|")
        assert cols[0] == f"{job}.batch" and cols[2] == "1" and rows[0].endswith("|")
        assert "gres/gpuutil=100" in cols[3] and "gres/gpumem=1G" in cols[3], cols
        header = cluster.ok("sstat", "-j", f"{job}.batch", "-o", "JobID,MaxRSS")
        assert header.splitlines()[0].split() == ["JobID", "MaxRSS"]
        assert "MaxRSS" in cluster.ok("sstat", "-e")
        bad = cluster.run("sstat", "-j", str(job), "-o", "NoSuchField")
        assert bad.returncode != 0 and "Invalid field requested" in bad.stderr
        missing = cluster.run("sstat")
        assert missing.returncode != 0 and "Traceback" not in missing.stderr
    finally:
        cluster.run("scancel", str(job))
    cluster.wait_state(job, "CANCELLED", timeout=30)
    done = cluster.run("sstat", "-j", str(job))
    assert done.returncode == 0 and "already finished" in done.stderr
    row = _sacct(cluster, job, "TRESUsageInAve")[f"{job}.batch"]
    assert "gres/gpuutil=100" in row[0] and "gres/gpumem=1G" in row[0], row
    eff = cluster.ok("seff", str(job))
    assert "GPU Utilization: 50.00%" in eff, eff


def _http(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 (loopback)
        return r.read().decode()


def _unix_get(sock_path: Path, path: str) -> str:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(sock_path))
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: corral\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0], head
    return body.decode()


def test_metrics_parse_and_carry_slurm_names(cluster: Cluster) -> None:
    job = cluster.sbatch("--gres=gpu:1", "--wrap", "sleep 30")
    try:
        cluster.wait_state(job, "RUNNING", timeout=30)
        names: set[str] = set()
        for section in ("nodes", "jobs", "partitions", "scheduler", "jobs-users-accts"):
            text = _http(f"http://127.0.0.1:{METRICS_PORT}/metrics/{section}")
            fams = list(text_string_to_metric_families(text))
            assert fams, section
            for f in fams:
                assert f.documentation, f.name
                names.add(f.name)
        slurm = {n for n in names if n.startswith("slurm_")}
        assert {n[len("slurm_"):] for n in slurm} <= SLURM_NAMES
        assert names - slurm == {n for n in names if n.startswith("corral_")}
        nodes = {f.name: f for f in text_string_to_metric_families(
            _http(f"http://127.0.0.1:{METRICS_PORT}/metrics/nodes"))}
        alloc = {s.labels["node"]: s.value for s in nodes["slurm_node_gpus_alloc"].samples}
        assert alloc == {"node-1": 1.0, "node-2": 0.0}
        assert {s.labels["node"]: s.value for s in nodes["slurm_node_gpus"].samples} == \
            {"node-1": 2.0, "node-2": 2.0}
        jobs = {f.name: f for f in text_string_to_metric_families(
            _http(f"http://127.0.0.1:{METRICS_PORT}/metrics/jobs"))}
        assert jobs["slurm_jobs_running"].samples[0].value >= 1
        assert jobs["slurm_jobs_gpus_alloc"].samples[0].value >= 1
        gpus: dict[str, Any] = {}

        def gpu_util() -> dict[tuple[str, str], float]:
            nonlocal gpus
            gpus = {f.name: f for f in text_string_to_metric_families(
                _http(f"http://127.0.0.1:{METRICS_PORT}/metrics/gpus"))}
            return {(s.labels["node"], s.labels["gpu"]): s.value
                    for s in gpus["corral_gpu_utilization_percent"].samples}
        # each agent's first GPU sample (run alone, the test can scrape before it came)
        want = {(n, g): 50.0 for n in ("node-1", "node-2") for g in ("0", "1")}
        cluster.wait_for(lambda: gpu_util() == want, timeout=30, what="every GPU's sample")
        # /metrics: every route at once (the routes' kept pieces joined), parsed whole
        whole = {f.name: f for f in text_string_to_metric_families(
            _http(f"http://127.0.0.1:{METRICS_PORT}/metrics"))}
        assert names | set(gpus) <= set(whole)
        assert {s.labels["node"]: s.value for s in whole["slurm_node_gpus_alloc"].samples} == \
            alloc


        def job_gpu_util() -> float | None:
            fams = {f.name: f for f in text_string_to_metric_families(
                _http(f"http://127.0.0.1:{METRICS_PORT}/metrics/gpus"))}
            return {s.labels["jobid"]: s.value for s in
                    fams["corral_job_gpu_utilization_percent"].samples}.get(str(job))
        cluster.wait_for(lambda: job_gpu_util() == 50.0, timeout=20, what="the job's GPU use")
        # the same on the controller's socket
        text = _unix_get(cluster.home / "corral.sock", "/metrics/partitions")
        part = {f.name: f for f in text_string_to_metric_families(text)}
        assert part["slurm_partition_gpus"].samples[0].labels == {"partition": "debug"}
        sdiag = cluster.ok("sdiag")
        submitted = int(next(ln for ln in sdiag.splitlines()
                             if ln.startswith("Jobs submitted:")).split()[-1])
        assert submitted >= 1 and "Main schedule statistics (microseconds):" in sdiag
        sched = {f.name: f for f in text_string_to_metric_families(
            _http(f"http://127.0.0.1:{METRICS_PORT}/metrics/scheduler"))}
        assert sched["slurm_sdiag_jobs_submitted"].samples[0].value == submitted
    finally:
        cluster.run("scancel", str(job))


def _prometheus() -> str | None:
    found = shutil.which("prometheus")
    if found is None and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "prometheus"], capture_output=True,
                       timeout=600, env={"DEBIAN_FRONTEND": "noninteractive",
                                         "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        found = shutil.which("prometheus")
    return found


def test_real_prometheus_scrapes_the_metrics(cluster: Cluster) -> None:
    binary = _prometheus()
    if binary is None:
        pytest.skip("Debian's prometheus is not installed and could not be")
    job = cluster.sbatch("--gres=gpu:2", "--wrap", "sleep 60")
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "prometheus.yml"
        conf.write_text(json.dumps({
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [{"job_name": "corral", "metrics_path": "/metrics/nodes",
                                "static_configs": [
                                    {"targets": [f"127.0.0.1:{METRICS_PORT}"]}]}]}))
        proc = subprocess.Popen(
            [binary, f"--config.file={conf}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            cluster.wait_state(job, "RUNNING", timeout=30)
            query = urllib.parse.quote('slurm_node_gpus_alloc{node="node-1"}')
            result: list[dict[str, object]] = []

            def answered() -> bool:
                nonlocal result
                try:
                    ans = json.loads(_http(f"http://127.0.0.1:{port}/api/v1/query?query={query}"))
                except OSError:
                    return False
                result = ans.get("data", {}).get("result", [])
                return bool(result) and result[0]["value"][1] == "2"  # type: ignore[index]
            cluster.wait_for(answered, timeout=90, what="Prometheus's answer")
            assert result[0]["metric"]["job"] == "corral"  # type: ignore[index]
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            cluster.run("scancel", str(job))


@needs_test_users
def test_sstat_is_for_the_jobs_owner_and_acctg_freq_is_honoured(
        users: dict[str, pwd.struct_passwd]) -> None:  # noqa: F811
    base = Path(tempfile.mkdtemp(prefix="corral-obs-"))
    base.chmod(0o755)  # the users reach the socket
    # a long default interval: only the job's --acctg-freq makes it sampled every second
    c = Cluster(base / "c", CONFIG.replace(f"CorralMetricsListen=127.0.0.1:{METRICS_PORT}\n", "")
                .replace("JobAcctGatherFrequency=1\n", "JobAcctGatherFrequency=300\n"))
    try:
        c.start()
        alice, bob = list(users.values())[:2]
        r = run_as(c, alice, "sbatch", "--parsable", "--acctg-freq=task=1", "--wrap",
                   "python3 -c \"import time; time.sleep(3); b = b'x' * (64 << 20); "
                   "time.sleep(120)\"")
        assert r.returncode == 0, r.stderr
        job = int(r.stdout.strip())
        c.wait_state(job, "RUNNING", timeout=30)

        def grown() -> bool:
            out = run_as(c, alice, "sstat", "-j", str(job), "-n", "-P", "-o", "JobID,MaxRSS")
            cols = out.stdout.strip().split("|")
            return len(cols) == 2 and cols[0] == f"{job}.batch" and _size(cols[1]) > 60 * MB
        c.wait_for(grown, timeout=60, what="a second sample of alice's job")
        other = run_as(c, bob, "sstat", "-j", str(job))
        assert other.returncode != 0 and "Access/permission denied" in other.stderr
        assert other.stdout == ""
        assert c.ok("sstat", "-j", str(job), "-n", "-P", "-o", "JobID").strip() == \
            f"{job}.batch"  # root, an operator
        c.run("scancel", str(job))
    finally:
        c.stop()
        shutil.rmtree(base, ignore_errors=True)
