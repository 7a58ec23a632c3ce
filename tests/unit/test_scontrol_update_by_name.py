"""`scontrol update JobName=X …` without JobId=: Slurm 22.05 updates the jobs of that name
(of one user with UserId=); JobId= alone still needs an id."""

from __future__ import annotations

import pytest

from corral.cli import scontrol


def test_a_name_alone_names_the_jobs() -> None:
    assert scontrol.parse_update_job_request(["JobName=x", "TimeLimit=5"]) == \
        ([], {"Name": "x", "TimeLimit": "5"}, None)
    assert scontrol.parse_update_job_request(["JobName=x", "UserId=0"]) == \
        ([], {"Name": "x"}, 0)
    assert scontrol.parse_update_job_request(["JobId=4", "UserID=1234", "Nice=1"]) == \
        (["4"], {"Nice": 1}, 1234)


@pytest.mark.parametrize("args,message", [
    (["JobName=x", "UserId=no-such-user-here"], "Invalid UserID: no-such-user-here"),
    (["JobId=", "TimeLimit=5"], "No job id specified"),
    (["JobId=3"], "No changes specified"),
])
def test_refusals(args: list[str], message: str) -> None:
    with pytest.raises(scontrol.UsageError, match=message):
        scontrol.parse_update_job_request(args)
