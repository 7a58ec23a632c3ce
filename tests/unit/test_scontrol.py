"""scontrol output against captures of real Slurm 22.05 (../shared/slurm-reference)."""

from __future__ import annotations

import calendar
import os
import time
from pathlib import Path
from typing import Any

import pytest

from corral.cli import client, scontrol
from corral.model.job import Job, JobState, NodeAlloc, Reason
from corral.model.node import Node, Partition
from tests.unit import reference

WORKDIR = "/home/alice/runs/golden"


def ref(name: str) -> str:
    return reference.capture(name)


def ts(text: str) -> float:
    """A reference timestamp (the capture machine ran in UTC)."""
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))


pytestmark = pytest.mark.usefixtures("utc_tz")  # (tests/unit/conftest.py)


T_SUBMIT = "2026-11-23T01:10:49"
T_START = "2026-11-23T01:10:52"


def root_job(job_id: int, name: str, **kw: Any) -> dict[str, Any]:
    """A job submitted as root on the reference cluster, as the API would return it."""
    extra: dict[str, Any] = {k: kw.pop(k) for k in ("scheduler", "alloc_sid") if k in kw}
    defaults: dict[str, Any] = dict(
        group="root", account="root", partition="debug", priority=1, work_dir=WORKDIR,
        submit_host="localhost", submit_time=ts(T_SUBMIT), eligible_time=ts(T_SUBMIT),
        last_sched_eval=ts(T_SUBMIT), mem_per_cpu=1024)
    defaults.update(kw)
    d = Job(job_id=job_id, name=name, user="root", uid=0, gid=0, **defaults).to_dict()
    # Fields the Job model does not carry yet (which scheduler started the job, the
    # submitting session id): the formatter reads them when present.
    d.update({"alloc_sid": 2452, **extra})
    return d


def running(job_id: int, name: str, nodes: list[str], cpus: int, mem: int, **kw: Any):
    gpu_ids = kw.pop("gpu_ids", [])
    return root_job(job_id, name, state=JobState.RUNNING, start_time=ts(T_START),
                    last_sched_eval=ts(T_START), nodes=nodes, batch_host=nodes[0],
                    alloc=[NodeAlloc(n, cpus, mem, list(gpu_ids)) for n in nodes], **kw)


NOW = ts(T_START) + 3


def test_c13_running_gpu_job() -> None:
    job = running(2, "gpujob", ["node-1", "node-2"], 4, 4096, num_nodes=2, cpus_per_task=4,
                  mem_per_cpu=None, mem_per_node=4096, gpus_per_node=2, gpu_ids=[0, 1])
    assert scontrol.format_job(job, NOW, tres_gpu=False) == ref(
        "C13_scontrol_show_job_running_gpu")


def test_c13_gpus_in_tres_when_accounted() -> None:
    job = running(2, "gpujob", ["node-1", "node-2"], 4, 4096, num_nodes=2, cpus_per_task=4,
                  mem_per_node=4096, gpus_per_node=2, gpu_ids=[0, 1])
    assert "TRES=cpu=8,mem=8G,node=2,billing=8,gres/gpu=4\n" in scontrol.format_job(job, NOW)


def test_c14_held_job() -> None:
    job = root_job(5, "heldjob", reason=Reason.HELD_USER, held="user", eligible_time=None)
    assert scontrol.format_job(job, NOW) == ref("C14_scontrol_show_job_held")


def test_c15_pending_resources() -> None:
    job = root_job(4, "bigexcl", reason=Reason.NODES_DOWN, num_nodes=4, max_nodes=4,
                   exclusive=True, last_sched_eval=ts(T_START))
    assert scontrol.format_job(job, NOW) == ref("C15_scontrol_show_job_pending_resources")


def test_c16_pending_array() -> None:
    job = root_job(7, "arr", reason=Reason.PRIORITY, array_job_id=7,
                   array_tasks=list(range(1, 11)), array_max_running=2,
                   array_spec="1-10%2", last_sched_eval=ts(T_START))
    assert scontrol.format_job(job, NOW) == ref("C16_scontrol_show_job_array")


def test_c17_dependency() -> None:
    job = root_job(6, "depjob", reason=Reason.DEPENDENCY, dependency="afterok:1",
                   eligible_time=None)
    assert scontrol.format_job(job, NOW) == ref("C17_scontrol_show_job_dependency")


def test_c20_oneliner() -> None:
    job = running(1, "wrap", ["node-1"], 1, 1024)
    assert scontrol.format_job(job, NOW, one_liner=True) == ref(
        "C20_scontrol_show_job_oneliner")


def test_e11_completed_job() -> None:
    t = ts("2026-11-23T01:11:18")
    job = root_job(8, "failer", state=JobState.FAILED, reason="NonZeroExitCode", exit_code=3,
                   time_limit=365 * 86400, start_time=t, end_time=t, last_sched_eval=t,
                   nodes=["node-1"], batch_host="node-1",
                   alloc=[NodeAlloc("node-1", 1, 1024)], scheduler="Backfill")
    assert scontrol.format_job(job, t + 60) == ref("E11_scontrol_show_job_completed")


def test_array_task_and_dependency_states() -> None:
    task = root_job(12, "arr", array_job_id=7, array_task_id=3, state=JobState.PENDING)
    out = scontrol.format_job(task, NOW)
    assert out.startswith("JobId=12 ArrayJobId=7 ArrayTaskId=3 JobName=arr\n")
    assert f"StdOut={WORKDIR}/slurm-7_3.out\n" in out
    never = root_job(6, "d", reason=Reason.DEPENDENCY_NEVER, dependency="afterok:1:2?afterany:3")
    assert "Dependency=afterok:1(failed),afterok:2(failed)?afterany:3(failed)\n" in \
        scontrol.format_job(never, NOW)
    started = running(6, "d", ["node-1"], 1, 1024, dependency="afterok:1")
    assert "Dependency=(null)\n" in scontrol.format_job(started, NOW)


def ref_node(name: str, n: int, **kw: Any) -> dict[str, Any]:
    node = Node(name=name, cpus=64, real_memory=200000, gpus=8, sockets=2, cores_per_socket=32,
                partitions=["debug"], addr="127.0.0.1", hostname="vm", arch="x86_64",
                os="Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0", responding=True,
                registered=True, cpu_load=6.84, free_mem=23684 - n,
                boot_time=ts("2026-11-23T00:25:46"), agent_start_time=ts(T_SUBMIT),
                last_busy=ts(T_SUBMIT), **kw)
    return node.to_dict()


def without_ports(text: str) -> str:
    # Slurm prints Port= only when a slurmd listens on a port other than SlurmdPort (the
    # reference ran four slurmd on one host); Corral's agents have no port.
    import re

    return re.sub(r" Port=\d+", "", text)


def test_a07_idle_node() -> None:
    out = scontrol.format_node(ref_node("node-1", 1), tres_gpu=False)
    assert out == without_ports(ref("A07_scontrol_show_node_node-1_idle"))


def test_c18_all_nodes() -> None:
    nodes = [
        ref_node("node-1", 1, alloc_cpus=6, alloc_mem=6144, job_count=3),
        ref_node("node-2", 2, alloc_cpus=4, alloc_mem=4096, job_count=1),
        ref_node("node-3", 3),
        ref_node("node-4", 4, admin_state="drain", reason="maintenance test",
                 reason_user="root", reason_time=ts(T_SUBMIT)),
    ]
    out = "".join(scontrol.format_node(n, tres_gpu=False) for n in nodes)
    assert out == without_ports(ref("C18_scontrol_show_node"))


def test_node_gpu_tres() -> None:
    out = scontrol.format_node(ref_node("node-1", 1, alloc_cpus=2, alloc_mem=2048,
                                        alloc_gpus=[0, 1], job_count=1))
    assert "CfgTRES=cpu=64,mem=200000M,billing=64,gres/gpu=8\n" in out
    assert "AllocTRES=cpu=2,mem=2G,gres/gpu=2\n" in out


def test_a08_c19_partition() -> None:
    names = [f"node-{i}" for i in range(1, 5)]
    nodes = [ref_node(n, 1) for n in names]
    part = Partition(name="debug", nodes=names, default=True, min_nodes=0).to_dict()
    out = scontrol.format_partition(part, nodes, tres_gpu=False)
    assert out == ref("A08_scontrol_show_partition")
    assert out == ref("C19_scontrol_show_partition")


def test_partition_policy_fields() -> None:
    """The policy settings replace Slurm's defaults in the C19 layout, line for line."""
    names = [f"node-{i}" for i in range(1, 5)]
    nodes = [ref_node(n, 1) for n in names]
    default = ref("C19_scontrol_show_partition").split("\n")
    part = Partition(name="debug", nodes=names, default=True, qos="gpuqos",
                     allow_qos="normal,gpuqos", max_cpus_per_node=48, def_cpu_per_gpu=8,
                     def_mem_per_gpu=16000, root_only=True).to_dict()
    lines = scontrol.format_partition(part, nodes, tres_gpu=False).split("\n")
    changed = {i: (default[i], lines[i]) for i in range(len(default)) if default[i] != lines[i]}
    assert changed == {
        1: ("   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
            "   AllowGroups=ALL AllowAccounts=ALL AllowQos=normal,gpuqos"),
        2: ("   AllocNodes=ALL Default=YES QoS=N/A", "   AllocNodes=ALL Default=YES QoS=gpuqos"),
        4: ("   MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED",
            "   MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=48"),
        6: ("   PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO",
            "   PriorityJobFactor=1 PriorityTier=1 RootOnly=YES ReqResv=NO OverSubscribe=NO"),
        9: ("   JobDefaults=(null)", "   JobDefaults=DefCpuPerGPU=8,DefMemPerGPU=16000"),
    }


@pytest.mark.parametrize("kw,line,jobdef", [
    # a deny list is printed in place of the allow list only when no allow list is set
    ({"deny_accounts": "guests", "deny_qos": "low"}, "DenyAccounts=guests DenyQos=low", None),
    ({"allow_accounts": "lab", "deny_accounts": "guests", "allow_qos": "ALL",
      "deny_qos": "low"}, "AllowAccounts=lab DenyQos=low", None),
    ({"def_mem_per_gpu": 2048}, "AllowAccounts=ALL AllowQos=ALL", "DefMemPerGPU=2048"),
    ({"def_cpu_per_gpu": 4}, "AllowAccounts=ALL AllowQos=ALL", "DefCpuPerGPU=4"),
])
def test_partition_deny_lists_and_job_defaults(kw: dict[str, Any], line: str,
                                               jobdef: str | None) -> None:
    part = Partition(name="p", nodes=["node-1"], **kw).to_dict()
    out = scontrol.format_partition(part, [ref_node("node-1", 1)])
    assert f"\n   AllowGroups=ALL {line}\n" in out
    assert f"\n   JobDefaults={jobdef or '(null)'}\n" in out
    one = scontrol.format_partition(part, [ref_node("node-1", 1)], one_liner=True)
    assert f" AllowGroups=ALL {line} AllocNodes=ALL " in one


def test_a13_config_layout() -> None:
    """The reference cluster's slurm.conf settings give Slurm's output byte for byte."""
    cfg = {"cluster_name": "anchor", "config_path": "/etc/slurm/slurm.conf",
           "started": ts("2026-11-23T01:10:48"), "next_job_id": 1, "node_count": 4,
           "options": {"ClusterName": "anchor", "KillWait": "30", "PriorityMaxAge": "7-0",
                       "SelectTypeParameters": "CR_Core_Memory", "Prolog": "",
                       "DefMemPerCPU": "1024", "SlurmUser": "root",
                       "SlurmctldHost": "vm(127.0.0.1)", "AccountingStorageHost": "localhost",
                       "AccountingStoragePort": "16819",
                       "accountingstoragetype": "accounting_storage/slurmdbd",
                       "JobCompLoc": "/var/spool/slurm/jobcomp.txt",
                       "JobCompType": "jobcomp/filetxt", "MailProg": "/bin/true",
                       "PluginDir": "/usr/lib/x86_64-linux-gnu/slurm-wlm",
                       "ReturnToService": "2",
                       "SlurmctldLogFile": "/var/spool/slurm/log/slurmctld.log",
                       "SlurmdLogFile": "/var/spool/slurm/log/slurmd-%n.log",
                       "SlurmdPidFile": "/var/spool/slurm/slurmd-%n.pid",
                       "SlurmdSpoolDir": "/var/spool/slurm/spool/%n",
                       "StateSaveLocation": "/var/spool/slurm/state",
                       "SlurmctldPidFile": "/var/spool/slurm/slurmctld.pid"}}
    out = scontrol.format_config(cfg, ts(T_SUBMIT), "vm")
    assert out == ref("A13_scontrol_show_config")


def test_config_defaults_and_units() -> None:
    cfg = {"cluster_name": "c", "options": {"MinJobAge": "600", "DefMemPerNode": "2048",
                                            "OverTimeLimit": "5", "MaxMemPerCPU": "4096",
                                            "PriorityCalcPeriod": "5"}}
    lines = scontrol.format_config(cfg, ts(T_SUBMIT), "h").splitlines()
    assert "MinJobAge               = 600 sec" in lines
    assert "DefMemPerNode           = 2048" in lines
    assert "MaxMemPerCPU            = 4096" in lines
    assert "OverTimeLimit           = 5 min" in lines
    assert "PriorityCalcPeriod      = 00:05:00" in lines
    assert "MaxTasksPerNode         = 512" in lines  # a Slurm default Corral does not set
    assert "SlurmctldHost[0]        = h" in lines and "ClusterName             = c" in lines
    assert len(lines) == len(ref("A13_scontrol_show_config").splitlines())


# ---- the command line, with a fake controller -----------------------------------------


class FakeController:
    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []
        self.nodes: list[dict[str, Any]] = []
        self.partitions: list[dict[str, Any]] = []
        self.config: dict[str, Any] = {"cluster_name": "anchor", "options": {}}
        self.calls: list[tuple[str, str, Any]] = []
        self.fail: dict[str, client.ApiError] = {}

    def get(self, path: str, **params: Any) -> Any:
        self.calls.append(("GET", path, params))
        if path == "/v1/config":
            return self.config
        if path == "/v1/jobs":
            ids = params.get("ids")
            jobs = self.jobs if not ids else [j for j in self.jobs if str(j["job_id"]) == ids]
            if ids and not jobs:
                raise client.ApiError(404, "Invalid job id specified")
            return {"jobs": jobs, "now": NOW}
        if path == "/v1/nodes":
            return {"nodes": self.nodes, "partitions": self.partitions, "now": NOW}
        raise AssertionError(path)

    def _write(self, method: str, path: str, body: Any = None) -> Any:
        self.calls.append((method, path, body))
        if path in self.fail:
            raise self.fail[path]
        return {"ok": True}

    def post(self, path: str, body: Any = None) -> Any:
        return self._write("POST", path, body)

    def patch(self, path: str, body: Any) -> Any:
        return self._write("PATCH", path, body)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeController:
    ctl = FakeController()
    monkeypatch.setattr(client, "get", ctl.get)
    monkeypatch.setattr(client, "post", ctl.post)
    monkeypatch.setattr(client, "patch", ctl.patch)
    return ctl


def test_d15_unknown_job(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert scontrol.main(["show", "job", "999999"]) == 1
    out, err = capsys.readouterr()
    assert out == ref("D15_scontrol_show_job_unknown")
    assert err == ref("D15_scontrol_show_job_unknown.err")


def test_show_job_cli_oneliner_anywhere(fake: FakeController,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    fake.jobs = [running(1, "wrap", ["node-1"], 1, 1024)]
    fake.config["options"]["AccountingStorageTRES"] = "cpu,mem,node,billing"
    assert scontrol.main(["show", "-o", "job", "1"]) == 0
    assert capsys.readouterr().out == ref("C20_scontrol_show_job_oneliner")
    assert ("GET", "/v1/jobs", {"ids": "1", "finished": 1}) in fake.calls


def test_d17_unknown_node(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    fake.nodes = [ref_node("node-1", 1)]
    assert scontrol.main(["show", "node", "nosuch"]) == 1
    out, err = capsys.readouterr()
    assert out == ref("D17_scontrol_show_node_unknown")
    assert err == ""


def test_show_node_by_name(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    fake.nodes = [ref_node("node-1", 1), ref_node("node-2", 2)]
    fake.config["options"]["AccountingStorageTRES"] = "cpu,mem"
    assert scontrol.main(["show", "node", "node-1"]) == 0
    assert capsys.readouterr().out == without_ports(ref("A07_scontrol_show_node_node-1_idle"))


def test_show_partition_unknown(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    fake.partitions = [Partition(name="debug").to_dict()]
    assert scontrol.main(["show", "partition", "gpu"]) == 1
    assert capsys.readouterr().out == "Partition gpu not found\n"


def test_a09_a10_hostnames_hostlist(capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # No controller needed: these must work with nothing running.
    monkeypatch.setenv("CORRAL_HOME", "/nonexistent/corral-home")
    assert scontrol.main(["show", "hostnames", "node-[42,49-51]"]) == 0
    assert capsys.readouterr().out == ref("A09_scontrol_show_hostnames")
    assert scontrol.main(["show", "hostlist", "node-1,node-2,node-3,node-42"]) == 0
    assert capsys.readouterr().out == ref("A10_scontrol_show_hostlist")


def test_d24_release_unknown(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    fake.fail["/v1/jobs/999999/release"] = client.ApiError(404, "Invalid job id specified")
    assert scontrol.main(["release", "999999"]) == 1
    out, err = capsys.readouterr()
    assert out == ref("D24_scontrol_release_unknown")
    assert err == ref("D24_scontrol_release_unknown.err")


def test_c28_hold_release_job_lists(fake: FakeController,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert scontrol.main(["hold", "6"]) == 0
    assert scontrol.main(["release", "6,5", "7_2"]) == 0
    assert scontrol.main(["requeuehold", "3"]) == 0
    assert capsys.readouterr() == (ref("C28_scontrol_hold_release"), "")
    posts = [p for m, p, _ in fake.calls if m == "POST"]
    assert posts == ["/v1/jobs/6/hold", "/v1/jobs/6/release", "/v1/jobs/5/release",
                     "/v1/jobs/7_2/release", "/v1/jobs/3/requeuehold"]


def test_update_job(fake: FakeController) -> None:
    assert scontrol.main(["update", "JobId=5", "timelimit=1:00:00", "PARTITION=gpu",
                          "jobname=x", "Nice=10", "NumNodes=2", "Comment=hi",
                          "Dependency=afterok:3"]) == 0
    assert fake.calls[-1] == ("PATCH", "/v1/jobs/5", {
        "TimeLimit": "1:00:00", "Partition": "gpu", "Name": "x", "Nice": 10, "NumNodes": 2,
        "Comment": "hi", "Dependency": "afterok:3"})


def test_update_job_errors(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert scontrol.main(["update", "jobid=5", "Shared=yes"]) == 1
    assert capsys.readouterr().err == ("Update of this parameter is not supported: Shared=yes\n"
                                       "Request aborted\n")
    fake.fail["/v1/jobs/5"] = client.ApiError(400, "Invalid partition name specified")
    assert scontrol.main(["update", "jobid=5", "partition=nosuch"]) == 1
    assert capsys.readouterr().err == "slurm_update error: Invalid partition name specified\n"


def test_update_node(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    # B12: silent success
    assert scontrol.main(["update", "nodename=node-4", "state=drain",
                          "reason=maintenance test"]) == 0
    assert capsys.readouterr() == (ref("B12_scontrol_update_drain"), "")
    assert fake.calls[-1] == ("PATCH", "/v1/nodes/node-4",
                              {"state": "drain", "reason": "maintenance test"})
    assert scontrol.main(["update", "NodeName=node-[1-2]", "State=RESUME"]) == 0
    assert fake.calls[-1] == ("PATCH", "/v1/nodes/node-%5B1-2%5D", {"state": "resume"})


def test_update_node_drain_needs_reason(fake: FakeController,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert scontrol.main(["update", "nodename=node-4", "state=drain"]) == 1
    assert capsys.readouterr().err == ("You must specify a reason when DOWNING or DRAINING a "
                                       "node. Request denied\n")
    assert not fake.calls
    assert scontrol.main(["update", "nodename=node-4", "state=bogus"]) == 1
    assert capsys.readouterr().err.startswith("Invalid input: state=bogus\nRequest aborted\n")


def test_bad_option_and_keywords(capsys: pytest.CaptureFixture[str]) -> None:
    assert scontrol.main(["--bogus", "show", "job"]) == 1
    assert capsys.readouterr().err == ("scontrol: unrecognized option '--bogus'\n"
                                       'Try "scontrol --help" for more information\n')
    assert scontrol.main(["-z"]) == 1
    assert capsys.readouterr().err.startswith("scontrol: invalid option -- 'z'\n")
    assert scontrol.main(["frobnicate"]) == 1
    assert capsys.readouterr().err == "invalid keyword: frobnicate\n"
    assert scontrol.main(["show", "bogus"]) == 1
    assert capsys.readouterr().err == "invalid entity:bogus for keyword:show \n"


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert scontrol.main(["version"]) == 0
    assert capsys.readouterr().out == f"slurm {scontrol.SLURM_VERSION}\n"
    assert scontrol.main(["--help"]) == 0
    assert "show <ENTITY>" in capsys.readouterr().out


def test_no_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    assert scontrol.main(["show", "job"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("scontrol: error: no Corral controller is running for ")
    assert err.count("\n") == 1


def test_mem_str() -> None:
    assert [scontrol.mem_str(m) for m in (1024, 6144, 200000, 800000, 500, 1024 * 1024)] == \
        ["1G", "6G", "200000M", "800000M", "500M", "1T"]


# ---- issue 9: array elements, end reasons, details, begin times, new commands ---------


def test_show_array_element_of_pending_array(fake: FakeController,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    meta = root_job(7, "arr", array_job_id=7, array_tasks=[2, 3, 4], array_max_running=2)
    done = root_job(8, "arr", array_job_id=7, array_task_id=1, state=JobState.COMPLETED)
    assert scontrol.array_element([meta, done], "7_3")[0]["array_task_id"] == 3
    assert scontrol.array_element([meta, done], "7_1") == [done]
    assert scontrol.array_element([meta, done], "7_9") == []
    monkeypatch.setattr(client, "get", lambda path, **kw: fake.config if path == "/v1/config"
                        else {"jobs": [meta], "now": NOW})
    assert scontrol.main(["show", "job", "7_3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("JobId=7 ArrayJobId=7 ArrayTaskId=3 JobName=arr\n")
    assert "ArrayTaskThrottle" not in out and "StdOut=" + WORKDIR + "/slurm-7_3.out" in out


@pytest.mark.parametrize(("state", "reason", "shown"), [
    (JobState.FAILED, Reason.NONE, "NonZeroExitCode"),
    (JobState.TIMEOUT, Reason.NONE, "TimeLimit"),
    (JobState.TIMEOUT, Reason.PRIORITY, "TimeLimit"),
    (JobState.OUT_OF_MEMORY, Reason.NONE, "OutOfMemory"),
    (JobState.NODE_FAIL, Reason.NONE, "NodeDown"),
    (JobState.COMPLETED, Reason.NONE, "None"),
    (JobState.CANCELLED, Reason.NONE, "None"),
    (JobState.FAILED, "JobLaunchFailure", "JobLaunchFailure"),
])
def test_reason_after_end(state: JobState, reason: str, shown: str) -> None:
    job = root_job(8, "failer", state=state, reason=reason, start_time=ts(T_START),
                   end_time=ts(T_START), nodes=["node-1"])
    assert f"JobState={state.value} Reason={shown} " in scontrol.format_job(job, NOW)


def test_e11_failed_job() -> None:
    job = root_job(8, "failer", state=JobState.FAILED, exit_code=3, time_limit=365 * 86400,
                   start_time=ts("2026-11-23T01:11:18"), end_time=ts("2026-11-23T01:11:18"),
                   last_sched_eval=ts("2026-11-23T01:11:18"), nodes=["node-1"],
                   batch_host="node-1", alloc=[NodeAlloc("node-1", 1, 1024)],
                   scheduler="Backfill")
    assert scontrol.format_job(job, NOW, tres_gpu=False) == ref(
        "E11_scontrol_show_job_completed")


def test_detail_lines() -> None:
    job = running(2, "gpujob", ["node-1", "node-2", "node-3"], 4, 4096, num_nodes=3,
                  gpus_per_node=2, gpu_ids=[0, 1])
    job["alloc"][2]["gpus"] = [2, 3]
    job["alloc"][0]["cpu_ids"] = job["alloc"][1]["cpu_ids"] = [0, 1, 2, 5]
    job["alloc"][2]["cpu_ids"] = [0, 1, 2, 5]
    text = scontrol.format_job(job, NOW, details=True)
    assert ("   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*\n"
            "   JOB_GRES=gpu:6\n"
            "     Nodes=node-[1-2] CPU_IDs=0-2,5 Mem=4096 GRES=gpu:2(IDX:0-1)\n"
            "     Nodes=node-3 CPU_IDs=0-2,5 Mem=4096 GRES=gpu:2(IDX:2-3)\n"
            "   MinCPUsNode=") in text
    assert "JOB_GRES" not in scontrol.format_job(job, NOW)
    plain = running(3, "cpu", ["node-1"], 2, 1024)
    lines = scontrol.detail_lines(plain)
    assert lines == ["JOB_GRES=(null)", "  Nodes=node-1 CPU_IDs=0-1(count) Mem=1024 GRES="]


def test_pending_with_begin_time() -> None:
    begin = NOW + 3600
    job = root_job(4, "later", begin_time=begin, eligible_time=None, reason="BeginTime")
    text = scontrol.format_job(job, NOW)
    shown = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(begin))
    assert f"EligibleTime={shown}\n" in text and f"StartTime={shown} " in text
    assert "Reason=BeginTime" in text


def test_dependency_shown_while_held() -> None:
    job = root_job(5, "dep", dependency="afterok:3", held="user", reason="JobHeldUser")
    assert "Dependency=afterok:3(unfulfilled)" in scontrol.format_job(job, NOW)
    job["dependency_text"] = "afterok:3_*(unfulfilled)"
    assert "Dependency=afterok:3_*(unfulfilled)" in scontrol.format_job(job, NOW)


def test_features_from_constraint() -> None:
    job = root_job(5, "f", constraint="a100&ib")
    assert "   Features=a100&ib DelayBoot=00:00:00\n" in scontrol.format_job(job, NOW)


def test_details_option_and_word(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    fake.jobs = [running(1, "wrap", ["node-1"], 1, 1024)]
    for argv in (["-d", "show", "job", "1"], ["show", "-d", "job", "1"],
                 ["details", "show", "job", "1"]):
        assert scontrol.main(argv) == 0
        assert "\n   JOB_GRES=(null)\n     Nodes=node-1 " in capsys.readouterr().out


def test_ping(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(client, "get", lambda path, **kw: {"ok": True, "host": "ctl1"})
    assert scontrol.main(["ping"]) == 0
    assert capsys.readouterr().out == "Slurmctld(primary) at ctl1 is UP\n"

    def down(path: str, **kw: Any) -> Any:
        raise client.NotRunning("no controller")

    monkeypatch.setattr(client, "get", down)
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    assert scontrol.main(["ping"]) == 1
    host = os.uname().nodename.split(".")[0]
    assert capsys.readouterr().out == f"Slurmctld(primary) at {host} is DOWN\n"


def test_notify_top_reconfigure(fake: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert scontrol.main(["notify", "12", "hello", "there"]) == 0
    assert ("POST", "/v1/jobs/12/notify", {"message": "hello there"}) in fake.calls
    assert scontrol.main(["notify", "12"]) == 1
    assert capsys.readouterr().err == "too few arguments for keyword:notify\n"
    assert scontrol.main(["notify", "x1", "m"]) == 1
    assert capsys.readouterr().err == "Invalid job_id x1\n"
    fake.fail["/v1/jobs/13/notify"] = client.ApiError(404, "Invalid job id specified")
    assert scontrol.main(["notify", "13", "m"]) == 1
    assert capsys.readouterr().err == "notify_job: Invalid job id specified\n"
    assert scontrol.main(["top", "12,14"]) == 0
    assert ("POST", "/v1/jobs/14/top", None) in fake.calls
    assert scontrol.main(["top"]) == 1
    assert scontrol.main(["reconfigure"]) == 0
    assert ("POST", "/v1/reconfigure", None) in fake.calls
    fake.fail["/v1/reconfigure"] = client.ApiError(403, "Invalid user id")
    assert scontrol.main(["reconfig"]) == 1
    assert capsys.readouterr().err.endswith("slurm_reconfigure error: Invalid user id\n")


def test_update_priority_and_start_time() -> None:
    now = ts(T_SUBMIT)
    ids, body = scontrol.parse_update_job(["JobId=5", "Priority=100", "StartTime=now+1hour"],
                                          now=now)
    assert ids == ["5"] and body == {"Priority": 100, "StartTime": int(now) + 3600}
    assert scontrol.parse_update_job(["JobId=5", "StartTime=now"], now=now)[1] == {
        "StartTime": int(now)}
    assert scontrol.parse_update_job(["JobId=5", "StartTime=2026-12-01T08:00:00"], now=now)[1] \
        == {"StartTime": int(ts("2026-12-01T08:00:00"))}
    with pytest.raises(scontrol.UsageError, match="Invalid Priority value: high"):
        scontrol.parse_update_job(["JobId=5", "Priority=high"])
    with pytest.raises(scontrol.UsageError, match="Invalid time specification"):
        scontrol.parse_update_job(["JobId=5", "StartTime=someday"])


@pytest.mark.parametrize(("argv", "env", "err"), [
    (["show", "hostnames"], None, "scontrol: error: host list is empty\n"),
    (["show", "hostnames", ""], None, "scontrol: error: host list is empty\n"),
    (["show", "hostnames", "node-[1-"], None, "Invalid hostlist: node-[1-\n"),
])
def test_hostnames_errors_exit_zero(argv: list[str], env: str | None, err: str,
                                    monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    assert scontrol.main(argv) == 0
    assert capsys.readouterr() == ("", err)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    assert scontrol.main(["show", "hostnames"]) == 0
    assert capsys.readouterr().out == "n1\nn2\n"


def test_refusal_of_another_users_job_says_invalid_user_id(
        fake: FakeController, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake.jobs = [{"job_id": 7, "uid": 4242}]
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    denied = client.ApiError(403, "Access/permission denied", {"errno": 2002})
    fake.fail["/v1/jobs/7/hold"] = denied
    fake.fail["/v1/jobs/7"] = denied
    assert scontrol.main(["hold", "7"]) == 1
    assert capsys.readouterr().err == ("Invalid user id for job 7\n"
                                       "slurm_suspend error: Invalid user id\n")
    assert scontrol.main(["update", "JobId=7", "TimeLimit=5"]) == 1
    assert capsys.readouterr().err == "slurm_update error: Invalid user id\n"
    fake.jobs = [{"job_id": 7, "uid": 1000}]  # own job: a denial for another reason
    assert scontrol.main(["update", "JobId=7", "TimeLimit=500"]) == 1
    assert capsys.readouterr().err == "slurm_update error: Access/permission denied\n"


def test_reconfigure_without_endpoint(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    def post(path: str, body: Any = None) -> Any:
        raise ValueError("Extra data")  # json.loads of aiohttp's plain "404: Not Found"

    monkeypatch.setattr(client, "post", post)
    assert scontrol.main(["reconfigure"]) == 1
    assert capsys.readouterr().err.startswith("slurm_reconfigure error: this controller cannot")


@pytest.mark.parametrize("shown,printed", [
    (None, "PreemptMode=OFF"), ("requeue", "PreemptMode=REQUEUE"),
    ("suspend,gang", "PreemptMode=GANG,SUSPEND")])
def test_partition_preempt_mode_as_scontrol_prints_it(shown: str | None, printed: str) -> None:
    part = Partition(name="p", nodes=["node-1"]).to_dict()
    if shown is not None:  # the controller's effective mode: the partition's, else slurm.conf's
        part["preempt_mode_shown"] = shown
    out = scontrol.format_partition(part, [ref_node("node-1", 1)])
    assert f"\n   OverTimeLimit=NONE {printed}\n" in out
