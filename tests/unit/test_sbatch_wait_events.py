"""sbatch --wait on the controller's event stream (/v1/events), and its fall-back to polling."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from corral.cli import client, sbatch

RUNNING = {"jobs": [{"state": "RUNNING", "exit_code": 0, "term_signal": 0}]}
FAILED_3 = {"jobs": [{"state": "FAILED", "exit_code": 3, "term_signal": 0}]}


def _no_sleep(_s: float) -> None:
    raise AssertionError("polled although the stream answered")


def _replies(*answers: Any) -> tuple[list[int], Any]:
    calls: list[int] = []
    it = iter(answers)

    def get(path: str, **params: Any) -> Any:
        calls.append(params["ids"])
        ans = next(it)
        if isinstance(ans, Exception):
            raise ans
        return ans
    return calls, get


def test_the_state_is_asked_at_hello_and_at_the_jobs_end() -> None:
    calls, get = _replies(RUNNING, RUNNING, FAILED_3)
    seen: list[int] = []

    def stream(job_id: int) -> Iterator[dict[str, Any]]:
        seen.append(job_id)
        yield {"type": "hello"}
        yield {"type": "job", "event": "started", "job_id": 9}  # no question asked
        yield {"type": "job", "event": "requeued", "job_id": 9}
        yield {"type": "job", "event": "ended", "job_id": 9}
        raise AssertionError("read past the end")

    assert sbatch.wait_for_job(9, sleep=_no_sleep, get=get, stream=stream) == 3
    assert seen == [9] and calls == [9, 9, 9]


def test_a_job_that_ended_before_the_subscription() -> None:
    _calls, get = _replies(FAILED_3)
    assert sbatch.wait_for_job(9, sleep=_no_sleep, get=get,
                               stream=lambda j: iter([{"type": "hello"}])) == 3


@pytest.mark.parametrize("trouble", ["dropped", "shutdown", "ends", "timeout", "refused"])
def test_without_a_stream_it_polls(trouble: str) -> None:
    def stream(job_id: int) -> Iterator[dict[str, Any]]:
        if trouble == "refused":
            raise ConnectionRefusedError
        yield {"type": "hello"}
        if trouble == "timeout":
            raise TimeoutError
        if trouble == "ends":
            return  # the connection closed
        yield {"type": trouble}
        raise AssertionError("read past the stream's last record")

    answers = ([] if trouble == "refused" else [RUNNING]) + [RUNNING, FAILED_3]
    calls, get = _replies(*answers)
    sleeps: list[float] = []
    assert sbatch.wait_for_job(9, sleep=sleeps.append, get=get, stream=stream) == 3
    assert len(sleeps) == 2  # polled twice after the stream failed


def test_a_lost_job_and_an_array(capsys: pytest.CaptureFixture[str]) -> None:
    _calls, get = _replies(client.ApiError(404, "Invalid job id specified"))
    assert sbatch.wait_for_job(9, sleep=_no_sleep, get=get,
                               stream=lambda j: iter([{"type": "hello"}])) == 0
    assert "Job 9 no longer found" in capsys.readouterr().err

    def unused(job_id: int) -> Iterator[dict[str, Any]]:
        raise AssertionError("an array is polled")
    _calls, get = _replies(FAILED_3)
    assert sbatch.wait_for_job(9, sleep=lambda s: None, get=get, stream=unused,
                               follow=False) == 3
