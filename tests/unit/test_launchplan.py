"""The typed launch plan and Pyxis' options (model/launchplan.py), and the pure parts of the
container hook (agent/container.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.agent import container
from corral.agent.launch import ExecRequest, LaunchFailure, RunAs, prepare
from corral.model import messages as m
from corral.model.launchplan import ContainerSpec, LaunchPlan, PlanHead
from corral.model.pyxis import (
    container_from_options,
    image_key,
    parse_image_ref,
    parse_mount,
    pyxis_environment,
)


def test_plan_round_trips_and_the_node_side_drops_the_script_text() -> None:
    plan = LaunchPlan(job_id=7, uid=1000, gid=1000, script_text="#!/bin/sh\n", env={"A": "1"},
                      container=ContainerSpec(image="/x.sqsh", mounts=["/a:/b:ro"]))
    wire = m.LaunchJob(node="n1", launch=plan).to_dict()
    back = m.decode(wire, m.TO_AGENT)
    assert isinstance(back, m.LaunchJob) and back.launch == plan
    node = plan.node_side(script="/spool/job7/script", cpus=[0, 1])
    assert node.script_text is None and node.cpus == [0, 1] and node.env == {"A": "1"}
    assert "script_text" not in node.to_dict()
    # a plan whose body is bad still has a head: whose step, where its errors go
    data = dict(node.to_dict(), time_limit="soon")
    with pytest.raises(m.MessageError, match="time_limit: expected a number"):
        LaunchPlan.from_dict(data)
    head = PlanHead.from_dict(data)
    assert (head.job_id, head.uid) == (7, 1000)


@pytest.mark.parametrize(("ref", "parsed"), [
    ("ubuntu", (None, None, "library/ubuntu", "latest")),
    ("ubuntu:22.04", (None, None, "library/ubuntu", "22.04")),
    ("nvcr.io#nvidia/pytorch:24.01-py3", (None, "nvcr.io", "nvidia/pytorch", "24.01-py3")),
    # a dot in the first component names a registry, as Docker reads it
    ("nvcr.io/nvidia/pytorch:24.01-py3", (None, "nvcr.io", "nvidia/pytorch", "24.01-py3")),
    ("localhost:5000/lab/x", (None, "localhost:5000", "lab/x", "latest")),
    ("alice@gitlab.example.org#lab/train:v2", ("alice", "gitlab.example.org", "lab/train", "v2")),
    ("lab/train", (None, None, "lab/train", "latest")),
])
def test_image_references(ref: str, parsed: tuple[str | None, str | None, str, str]) -> None:
    assert parse_image_ref(ref) == parsed


def test_image_keys_agree_across_spellings() -> None:
    assert image_key("nvcr.io/nvidia/x:1") == image_key("nvcr.io#nvidia/x:1") == "nvcr.io/nvidia/x:1"
    assert image_key("ubuntu") == "docker.io/library/ubuntu:latest"


@pytest.mark.parametrize(("entry", "result"), [
    ("/data:/data", ("/data", "/data", [])),
    ("/data", ("/data", "/data", [])),
    ("./rel:/x:ro+rprivate", ("./rel", "/x", ["ro", "rprivate"])),
    ("tmpfs:/scratch", ("tmpfs", "/scratch", [])),
])
def test_mount_specs(entry: str, result: tuple[str, str, list[str]]) -> None:
    assert parse_mount(entry) == result


@pytest.mark.parametrize(("entry", "problem"), [
    ("a:b:c:d", "invalid format: a:b:c:d"),
    (":/x", "invalid format"),
    ("data:/x", 'mount source must be a relative path, an absolute path, "tmpfs" or "umount"'),
    ("/data:x", "mount target must be a relative path or an absolute path"),
    ("/data:/x:suid", "unknown flag 'suid'"),
])
def test_bad_mount_specs(entry: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("(", r"\(")):
        parse_mount(entry)


def test_options_and_their_pyxis_variables() -> None:
    assert container_from_options({}, {}) is None
    found = container_from_options(
        {"container-image": "nvcr.io/nvidia/x", "container-mounts": "/a:/a,/b:/c:ro",
         "container-name": "train:exec", "no-container-remap-root": "",
         "container-readonly": "", "container-unshare": "net,uts",
         "container-save": "out/saved.sqsh"}, {})
    assert found is not None
    spec = ContainerSpec.from_dict(found)  # what the controller checks it as
    assert (spec.mounts, spec.name, spec.name_flag, spec.remap_root, spec.writable,
            spec.unshare, spec.save) == (["/a:/a", "/b:/c:ro"], "train", "exec", False, False,
                                         ["net", "uts"], "out/saved.sqsh")
    # the variables fill in what the command line left out; the command line wins
    env = {"PYXIS_CONTAINER_IMAGE": "/img.sqsh", "PYXIS_CONTAINER_MOUNT_HOME": "1",
           "PYXIS_CONTAINER_READONLY": "yes", "PYXIS_CONTAINER_WORKDIR": "/w"}
    found = container_from_options({"container-writable": ""}, env)
    assert found is not None
    spec = ContainerSpec.from_dict(found)
    assert (spec.image, spec.mount_home, spec.writable, spec.workdir) \
        == ("/img.sqsh", True, True, "/w")
    # salloc hands its options to the allocation's steps through the same variables
    again = container_from_options({}, pyxis_environment(found))
    assert again == found


@pytest.mark.parametrize(("values", "problem"), [
    ({"container-mounts": "/a:/a"}, "ignoring --container-mounts because neither"),
    ({"container-image": "x", "container-name": ":auto"}, "--container-name: empty name"),
    ({"container-image": "x", "container-name": "n:later"}, "flag must be"),
    ({"container-image": "x", "container-mount-home": "", "no-container-mount-home": ""},
     "both --container-mount-home and --no-container-mount-home were specified"),
    ({"container-image": "x", "container-unshare": "pid"}, "unknown namespace 'pid'"),
    ({"container-image": "x", "container-env": "A,B-C"}, "--container-env: invalid format"),
    ({"container-image": "x", "container-save": "/tmp/"},
     "--container-save: target is a directory"),
    ({"container-image": "x", "container-save": ""}, "--container-save: argument required"),
])
def test_bad_options(values: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        container_from_options(values, {})


def test_container_environment_follows_pyxis_precedence_and_sets_ranks() -> None:
    spec = ContainerSpec(image="x", env=["LANG"])
    job = {"PATH": "/host/bin", "LANG": "C", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
           "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "gpu[07-08]",
           "SLURM_JOB_ID": "20000"}
    image = {"PATH": "/usr/local/bin:/bin", "LANG": "en_US.UTF-8", ":workdir": "/w"}
    env = container.container_environment(job, image, spec)
    assert env["PATH"] == "/usr/local/bin:/bin"  # the image's value wins...
    assert env["LANG"] == "C"  # ...except for --container-env's names
    assert ":workdir" not in env
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) \
        == ("3", "1", "4", "gpu07")
    assert env["MASTER_PORT"] == str(49152 + 20000 % 16384)


def test_mount_points_are_made_without_following_the_images_links(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (rootfs / "escape").symlink_to(outside)
    container.make_mountpoint(str(rootfs), "/data/inner", directory=True)
    container.make_mountpoint(str(rootfs), "/etc/conf", directory=False)
    assert (rootfs / "data" / "inner").is_dir() and (rootfs / "etc" / "conf").is_file()
    with pytest.raises(LaunchFailure, match="a symbolic link in the image"):
        container.make_mountpoint(str(rootfs), "/escape/x", directory=True)
    assert os.listdir(outside) == []


def test_the_pipeline_runs_its_hooks_in_order() -> None:
    seen: list[str] = []
    request = ExecRequest(argv=["/bin/true"], env={"SLURM_RLIMIT_NOFILE": "U64", "A": "1"},
                          cwd="/", ident=RunAs(0, 0, "root", switch=False))
    prepare(request, (lambda r: seen.append("first"), lambda r: seen.append("second")))
    assert seen == ["first", "second"]
    prepare(request)  # the default hooks: limits out of the environment, no container
    assert request.env == {"A": "1"} and request.rlimits["NOFILE"] == (64, True)
    assert request.command() == ["/bin/true"]
