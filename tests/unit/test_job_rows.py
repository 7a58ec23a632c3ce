"""GET /v1/jobs's rows kept per job (answers.JobRows), against the same answer built from
scratch, after each of a random run of changes to the real controller (controller/harness):
submissions (arrays too), passes, ends, holds, releases, requeues, suspensions, updates of
priority, QoS, partition and name, cancels, node failures, partitions hidden and shown, time
passing."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from corral.cli.hot import SQUEUE_PATH
from corral.controller import answers, server
from corral.controller.state import SlurmError
from tests.unit.random_changes import SHARED, RandomChanges

pytestmark = pytest.mark.usefixtures("utc_tz")  # (tests/unit/conftest.py)

CONF = """\
ClusterName=t
SlurmdTimeout=30
KillWait=7
NodeName=n[1-4] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=n[1-3] Default=YES MaxTime=60
PartitionName=gpu Nodes=n[3-4]
PartitionName=secret Nodes=n4 Hidden=YES
"""

FIELDS = ",".join(sorted(answers.MARKED_FIELDS))
QUERIES = [
    SQUEUE_PATH,  # a plain squeue's text
    SQUEUE_PATH + "&all=1",
    SQUEUE_PATH.replace("&render=squeue", ""),  # its rows, as JSON
    f"/v1/jobs?fields={FIELDS}&rows=1",
    f"/v1/jobs?fields={FIELDS}&rows=1&finished=1",
    "/v1/jobs?fields=job_id,state,reason,priority&rows=1&states=PENDING&users=user1001",
    "/v1/jobs?fields=display_id,nodes,partition&rows=1&partitions=gpu,secret&states=all",
    "/v1/jobs?fields=job_id,name,state&rows=1&names=a,b&nodes=n[2-3]&states=RUNNING",
]


class Scene(RandomChanges):
    def __init__(self, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(seed, CONF)
        self.api = server.Api(self.h.ctl, lambda: None)
        self.who = self.h.who(1000)
        monkeypatch.setattr(server, "peer_identity", lambda request, ctl: self.who)
        # the answers' "now" (a running job's TIME) is the harness's
        clock = types.SimpleNamespace(**{k: getattr(server.time, k) for k in dir(server.time)
                                         if not k.startswith("_")})
        clock.time = self.h.clock
        monkeypatch.setattr(server, "time", clock)
        self.monkeypatch = monkeypatch

    def answer(self, api: server.Api, path: str) -> tuple[int, bytes]:
        response = self.h.loop.run_until_complete(api.list_jobs(make_mocked_request("GET", path)))
        return response.status, response.body  # type: ignore[return-value]

    def from_scratch(self, path: str) -> tuple[int, bytes]:
        """What the controller answered before JobRows: every row built for this answer."""
        with self.monkeypatch.context() as m:
            m.setattr(answers, "MARKED_FIELDS", frozenset())
            return self.answer(server.Api(self.h.ctl, lambda: None), path)

    def request(self, change: Callable[[], Any]) -> None:
        """A change through the API, counted as the middleware counts it (change_counter)."""
        cache = self.api.rows_cache
        cache.requests += 1
        try:
            super().request(change)
        finally:
            cache.requests += 1

    def step(self) -> str:
        rng, h, ctl = self.rng, self.h, self.h.ctl
        op = rng.choice(["submit", "submit", "submit", "array", "tick", "tick", "end", "hold",
                         "release", "update", "cancel", "requeue", "suspend", "advance",
                         "node_fails", "top", "hide"])
        root = h.who(0, True)
        if op in SHARED:
            self.shared_step(op, root)
        elif op in ("submit", "array"):
            uid = rng.choice([1000, 1001, 1002])
            spec: dict[str, Any] = {"name": rng.choice(["a", "b", "c\tx", "long-job-name"]),
                                    "num_nodes": rng.choice([1, 1, 2]),
                                    "cpus_per_task": rng.choice([1, 2, 4]),
                                    "time_limit": rng.choice([30, 600, 3600])}
            if rng.random() < 0.3:
                spec["partition"] = rng.choice(["gpu", "secret", "debug,gpu"])
            if rng.random() < 0.2:
                spec["held"] = "user"
            try:
                h.submit(uid=uid, array=rng.choice(["1-4", "1-6%2", "3,5"])
                         if op == "array" else None, **spec)
            except SlurmError:
                pass
        elif op == "end":
            for job in self.some_jobs("RUNNING"):
                h.end(job.job_id, rng.choice(["COMPLETED", "FAILED"]))
        elif op == "hold":
            self.request(lambda: ctl.hold(root, self.some_jobs("PENDING"),
                                          rng.choice(["hold", "uhold"])))
        elif op == "update":
            for job in self.some_jobs("PENDING", "RUNNING"):
                change = rng.choice([{"priority": rng.randint(1, 10**6)}, {"qos": "normal"},
                                     {"partition": rng.choice(["debug", "gpu"])},
                                     {"name": rng.choice(["renamed", "b"])}, {"nice": 50}])
                self.request(lambda j=job, c=change: ctl.update_job(root, j, c))
        elif op == "top":
            self.request(lambda: ctl.top(root, self.some_jobs("PENDING")))
        elif op == "hide":  # scontrol update PartitionName=… Hidden=…
            from corral.controller.partitions import update_partition

            self.request(lambda: update_partition(ctl, root, rng.choice(["debug", "gpu",
                                                                         "secret"]),
                                                  [["Hidden", rng.choice(["YES", "NO"])]]))
        elif op == "advance":
            h.advance(rng.choice([1, 5, 40, 700]))
        return op


@pytest.fixture
def scene_for(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], Scene]]:
    scenes: list[Scene] = []

    def make(seed: int) -> Scene:
        scenes.append(Scene(seed, monkeypatch))
        return scenes[-1]

    yield make
    for s in scenes:
        s.api.rows_cache._thread().shutdown()
        s.h.close()


@pytest.mark.parametrize("seed", range(12))
def test_kept_rows_answer_what_a_build_from_scratch_answers(
        seed: int, scene_for: Callable[[int], Scene], monkeypatch: pytest.MonkeyPatch) -> None:
    scene = scene_for(seed)
    if seed % 3 == 0:  # the squeue texts printed on the answers' thread
        monkeypatch.setattr(answers, "PRINT_ON_LOOP", 0)
    done = []
    states: set[str] = set()
    for _ in range(60):
        done.append(scene.step())
        states.update(j.state.value for j in scene.h.ctl.jobs.values())
        for path in scene.rng.sample(QUERIES, 4):
            kept = scene.answer(scene.api, path)
            assert kept == scene.from_scratch(path), (done, path)
        # answers kept since a change: asked again, still the build from scratch's
        path = scene.rng.choice(QUERIES)
        assert scene.answer(scene.api, path) == scene.from_scratch(path), (done, path)
    assert len(states) >= 3, states  # the run went through more than submissions


def test_a_pass_that_changes_nothing_shown_keeps_the_answer(
        scene_for: Callable[[int], Scene]) -> None:
    scene = scene_for(0)
    for _ in range(5):
        scene.h.submit(held="user")
    scene.h.tick()
    first = scene.answer(scene.api, SQUEUE_PATH)
    rows = scene.api.rows_cache.job_rows("?" + SQUEUE_PATH.partition("?")[2],
                                         lambda: pytest.fail("no JobRows"))  # type: ignore
    version = rows.version
    scene.h.ctl.request_schedule()
    scene.h.tick()
    assert scene.answer(scene.api, SQUEUE_PATH) == first
    assert rows.version == version
    scene.h.submit()
    assert scene.answer(scene.api, SQUEUE_PATH) != first and rows.version > version


def test_only_requests_other_than_submissions_start_the_rows_afresh() -> None:
    import asyncio

    async def scenario() -> list[int]:
        counted = types.SimpleNamespace(changes=0)
        cache = answers.RowsCache()
        middleware = answers.change_counter(counted, cache)  # type: ignore[arg-type]
        seen = []

        async def handler(request: Any) -> Any:
            seen.append(cache.requests)
            return "ok"
        for method, path in [("GET", "/v1/jobs"), ("POST", "/v1/jobs"),
                             ("POST", "/v1/jobs/3/hold"), ("PATCH", "/v1/jobs/3")]:
            await middleware(make_mocked_request(method, path), handler)
        return [*seen, cache.requests, counted.changes]

    assert asyncio.run(scenario()) == [0, 0, 1, 3, 4, 3]


def test_a_plain_squeue_asks_for_marked_fields_only() -> None:
    """Its rows are kept per job (a field outside MARKED_FIELDS would build them whole)."""
    assert set(answers.squeue_fields()) <= answers.MARKED_FIELDS
