"""Which entity `scontrol update WORDS` updates: _update_it's tags, each a case-insensitive
prefix of a minimum length, tried in its order."""

from __future__ import annotations

import pytest

from corral.cli.scontrol import update_entity, update_tag


@pytest.mark.parametrize(("word", "tag"), [
    ("JobId=5", "jobid"), ("job=5", "jobid"), ("JOB=5", "jobid"), ("jobn=x", "jobname"),
    ("par=short", "partitionname"), ("Partition=short", "partitionname"),
    ("nod=n1", "nodename"), ("node", "nodename"), ("res=r", "reservationname"),
    ("step=5.0", "stepid"), ("fr=f", "frontendname"), ("sl=3", "slurmctlddebug"),
    ("pa=short", None), ("no=n1", None), ("jo=5", None), ("ste=5.0", None),
    ("partitions=x", None), ("nodes=n1", None), ("state=up", None),
])
def test_tags(word: str, tag: str | None) -> None:
    assert update_tag(word) == tag


def test_a_job_update_naming_a_partition_is_the_job_s() -> None:
    assert update_entity(["partition=short", "job=5"]) == \
        ("jobid", ["partition=short", "JobId=5"])
    assert update_entity(["nod=n1", "par=p"]) == ("nodename", ["NodeName=n1", "par=p"])
    assert update_entity(["par=p", "state=down"]) == \
        ("partitionname", ["PartitionName=p", "state=down"])
    assert update_entity(["pa=p", "state=down"]) == (None, ["pa=p", "state=down"])
