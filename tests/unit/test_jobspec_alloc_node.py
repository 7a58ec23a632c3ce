"""The submitting host and session a job spec carries (scontrol's AllocNode:Sid=): shown in
one-line records, so only a host name's letters and a uint32 session id are accepted."""

from __future__ import annotations

import pytest

from corral.model.jobspec import JobSpecError, validate_spec


def test_host_and_session_are_kept() -> None:
    assert validate_spec({"submit_host": "login-1.lab_a", "alloc_sid": 2452}) == \
        {"submit_host": "login-1.lab_a", "alloc_sid": 2452}


@pytest.mark.parametrize("spec", [
    {"submit_host": "login1\nUserId=root(0)"}, {"submit_host": "a b"},
    {"submit_host": "héte"}, {"submit_host": 5}, {"submit_host": "x" * 1025},
    {"alloc_sid": -1}, {"alloc_sid": 1 << 32}, {"alloc_sid": "12"}, {"alloc_sid": True},
])
def test_anything_else_is_refused(spec: dict[str, object]) -> None:
    with pytest.raises(JobSpecError):
        validate_spec(spec)
