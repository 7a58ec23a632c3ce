"""Partitions in full and array submit counts, in the controller (harness): partition
QOS= whose limits apply to every job of the partition, MaxMemPerNode, MaxCPUsPerNode,
DefMemPerGPU, DefCpuPerGPU, DefaultTime, and each array task counting in MaxSubmitJobs."""

from __future__ import annotations

import pytest

from corral.controller.errors import SlurmError
from corral.controller.harness import Harness
from corral.model.config import ConfigError, parse_config
from corral.model.job import JobState
from tests.unit.test_policy_limits import lab, sacctmgr

CONF = """\
ClusterName=t
PriorityWeightAge=0
PriorityWeightPartition=0
AccountingStorageEnforce=associations,limits
NodeName=n[1-2] CPUs=8 RealMemory=8000 Gres=gpu:4
PartitionName=debug Nodes=n[1-2] Default=YES
PartitionName=gpu Nodes=n[1-2] QOS=gpuq MaxMemPerNode=6000 MaxCPUsPerNode=6 DefMemPerGPU=1500 DefCpuPerGPU=2 DefaultTime=30
"""


def test_partition_fields_parse() -> None:
    gpu = {p.name: p for p in parse_config(CONF).partitions}["gpu"]
    assert (gpu.qos, gpu.max_mem_per_node, gpu.max_cpus_per_node, gpu.def_mem_per_gpu,
            gpu.def_cpu_per_gpu, gpu.default_time) == ("gpuq", 6000, 6, 1500, 2, 1800)
    assert {p.name: p for p in parse_config(CONF).partitions}["debug"].qos == ""
    with pytest.raises(ConfigError):
        parse_config(CONF.replace("MaxCPUsPerNode=6", "MaxCPUsPerNode=six"))


def test_partition_qos_limits_apply_to_its_jobs_only() -> None:
    with Harness(CONF) as h:
        lab(h)
        sacctmgr(h, "add", "qos", ["gpuq"], {"MaxTRESPerUser": "gres/gpu=2"})
        a = [h.submit(uid=1000, partition="gpu", gpus=1) for _ in range(3)]
        other = h.submit(uid=1001, partition="gpu", gpus=1)
        free = [h.submit(uid=1000, partition="debug", gpus=1) for _ in range(2)]
        h.tick()
        assert [h.job(j).state for j in a] == [JobState.RUNNING] * 2 + [JobState.PENDING]
        assert h.job(a[2]).reason == "QOSMaxGRESPerUser"
        assert h.job(other).state == JobState.RUNNING  # per user: another user's job runs
        # the debug partition has no QoS: the same user's jobs there are not limited
        assert all(h.job(j).state == JobState.RUNNING for j in free)
        h.end(a[0])
        h.tick()
        assert h.job(a[2]).state == JobState.RUNNING


def test_partition_qos_submit_limit_refuses() -> None:
    with Harness(CONF) as h:
        lab(h)
        sacctmgr(h, "add", "qos", ["gpuq"], {"MaxSubmitJobsPerUser": "1"})
        h.submit(uid=1000, partition="gpu", held="user")
        with pytest.raises(SlurmError) as e:
            h.submit(uid=1000, partition="gpu")
        assert e.value.errno == 2050
        h.submit(uid=1000, partition="debug")  # not the partition QoS's


def test_partition_memory_cpu_and_gpu_defaults() -> None:
    with Harness(CONF) as h:
        lab(h)
        sacctmgr(h, "add", "qos", ["gpuq"])
        with pytest.raises(SlurmError) as e:
            h.submit(uid=1000, partition="gpu", mem_per_node=7000)
        assert str(e.value) == "Memory required by task is not available"
        h.submit(uid=1000, partition="debug", mem_per_node=7000)  # no MaxMemPerNode there
        with pytest.raises(SlurmError) as e:
            h.submit(uid=1000, partition="gpu", num_nodes=1, cpus_per_task=7)
        assert str(e.value) == "Requested node configuration is not available"
        j = h.job(h.submit(uid=1000, partition="gpu", gpus=2))
        # DefMemPerGPU and DefCpuPerGPU per GPU; DefaultTime as the time limit
        assert (j.mem_per_node, j.cpus_per_task, j.time_limit) == (3000, 4, 1800)
        k = h.job(h.submit(uid=1000, partition="gpu", gpus=2, cpus_per_task=1,
                           mem_per_cpu=100))
        assert (k.mem_per_node, k.cpus_per_task) == (None, 1)  # what the job names wins
        n = h.job(h.submit(uid=1000, partition="debug", gpus=2))
        assert (n.mem_per_node, n.cpus_per_task) == (None, 1)


def test_array_tasks_count_in_submit_limits() -> None:
    with Harness(CONF) as h:
        lab(h)
        sacctmgr(h, "modify", "user", where={"names": "user1000"},
                 sets={"MaxSubmitJobs": "4"})
        with pytest.raises(SlurmError) as e:
            h.submit(uid=1000, array="0-4", held="user")  # five tasks: over 4
        assert e.value.errno == 2050
        h.submit(uid=1000, array="0-2", held="user")  # three of the four
        h.submit(uid=1000, held="user")
        with pytest.raises(SlurmError):
            h.submit(uid=1000, held="user")


def test_a_node_in_two_partitions_is_shared_between_them() -> None:
    conf = ("ClusterName=t\nNodeName=n1 CPUs=4 RealMemory=4000\n"
            "PartitionName=a Nodes=n1 Default=YES\nPartitionName=b Nodes=n1 PriorityTier=2\n")
    with Harness(conf) as h:
        x = h.submit(uid=1000, partition="a", num_tasks=4)
        h.tick()
        y = h.submit(uid=1000, partition="b", num_tasks=1)
        h.tick()
        assert h.job(x).state == JobState.RUNNING and h.job(y).state == JobState.PENDING
        h.end(x)
        h.tick()
        assert h.job(y).state == JobState.RUNNING


def test_coordinators_act_on_their_accounts_jobs() -> None:
    with Harness(CONF) as h:
        lab(h)  # account lab with user1000 and user1001
        sacctmgr(h, "add", "account", ["sub"], {"parent": "lab"})
        sacctmgr(h, "add", "user", ["user1002"], {"account": "sub"})
        sacctmgr(h, "add", "coordinator", ["user1000"], {"account": "lab"})
        j = h.submit(uid=1002, held="user")
        coord, other = h.who(1000), h.who(1001)
        with pytest.raises(SlurmError, match="Invalid user id"):
            h.call(h.ctl.hold, other, [h.job(j)], "hold")
        h.call(h.ctl.hold, coord, [h.job(j)], "hold")
        assert h.job(j).held == "admin"  # the owner cannot release a coordinator's hold
        with pytest.raises(SlurmError, match="Access/permission denied"):
            h.call(h.ctl.release, h.who(1002), [h.job(j)])
        h.call(h.ctl.release, coord, [h.job(j)])
        with pytest.raises(SlurmError, match="Access/permission denied"):
            h.call(h.ctl.signal_jobs, other, [h.job(j)], 15, batch_only=False, cancel=True)
        h.call(h.ctl.signal_jobs, coord, [h.job(j)], 15, batch_only=False, cancel=True)
        assert h.job(j).state == JobState.CANCELLED
        # a coordinator of sub has no say over lab's own jobs
        sacctmgr(h, "add", "coordinator", ["user1001"], {"account": "sub"})
        k = h.submit(uid=1000, held="user")
        with pytest.raises(SlurmError, match="Invalid user id"):
            h.call(h.ctl.release, h.who(1001), [h.job(k)])
