"""The random changes to the real controller (controller/harness) that the randomized tests
of what the controller keeps between requests share (test_job_rows.py: squeue's rows;
test_kept_views.py: the passes' views and the tick's heaps): each test picks its own mix of
operations and adds its own, and runs these through `shared_step`."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from corral.controller.harness import Harness
from corral.controller.identity import Identity
from corral.controller.state import SlurmError

# the operations `shared_step` knows
SHARED = frozenset({"tick", "release", "cancel", "requeue", "suspend", "node_fails"})


class RandomChanges:
    def __init__(self, seed: int, conf: str) -> None:
        self.rng = random.Random(seed)
        self.h = Harness(conf)

    def request(self, change: Callable[[], Any]) -> None:
        """A change as a user asks it: one the controller refuses changes nothing."""
        try:
            self.h.call(change)
        except SlurmError:
            pass  # refused (a finished job, a state not suitable, not its owner…)

    def some_jobs(self, *states: str) -> list[Any]:
        """One to three jobs, of the given states (any if none given)."""
        jobs = [j for j in self.h.ctl.jobs.values() if not states or j.state.value in states]
        return self.rng.sample(jobs, min(len(jobs), self.rng.randint(1, 3)))

    def shared_step(self, op: str, root: Identity) -> None:
        """One of the operations in SHARED, as `root` asks it."""
        rng, h, ctl = self.rng, self.h, self.h.ctl
        if op == "tick":
            h.tick()
        elif op == "release":
            self.request(lambda: ctl.release(root, self.some_jobs("PENDING")))
        elif op == "cancel":
            self.request(lambda: ctl.signal_jobs(root, self.some_jobs(), 9, batch_only=False,
                                                 cancel=True))
        elif op == "requeue":
            self.request(lambda: ctl.requeue(root, self.some_jobs("RUNNING"),
                                             rng.random() < 0.3))
        elif op == "suspend":
            self.request(lambda: ctl.suspend(root, self.some_jobs("RUNNING", "SUSPENDED"),
                                             rng.random() < 0.5))
        elif op == "node_fails":  # silent past SlurmdTimeout, then back
            h.silent.add(rng.choice(sorted(ctl.nodes)))
            h.advance(40)
            h.silent.clear()
            h.register(list(ctl.nodes))
        else:
            raise ValueError(f"not a shared operation: {op}")
