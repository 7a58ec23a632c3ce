"""When scheduling passes run: one policy, pure, with time as a parameter.

The controller's shell (controller/shell.py) runs it in real time on the event loop;
the simulator (corral.sim) runs the same object in virtual time, so a replayed trace sees
the production cadence:

- a trigger (a submission, a job's end, a node coming back) asks for a pass now; triggers
  while one is armed coalesce into it;
- triggers that arrive while a pass runs ask for one more pass after it, delayed by twice
  the pass's duration (at least `MIN_GAP`, at most `MAX_GAP`): under load scheduling takes
  about a third of the loop, so submissions keep flowing while the queue is long;
- passes start at least `SchedulerParameters=sched_min_interval=` (microseconds, as in
  Slurm; default 2) apart: triggers inside that window wait for its end;
- a periodic tick every `tick_interval` runs the controller's periodic duties
  (controller/duties.py) and asks for a pass (priorities age, begin times pass).

Corral's pass always includes backfill, so Slurm's `SchedulerParameters=sched_interval=`
(main loop) and `bf_interval=` (backfill loop) both bound the time between periodic
passes: the tick runs at the smaller of them, or every `SchedulerInterval` (5 s) when
neither is set.  Nothing here reads a clock or touches asyncio.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.model.config import ClusterConfig

MIN_GAP = 0.002  # seconds between a pass and the coalesced one after it, at least
MAX_GAP = 1.0  # and at most
DEFAULT_MIN_INTERVAL = 2e-6  # Slurm's sched_min_interval default, 2 microseconds


def _scheduler_parameter(text: str, key: str) -> float | None:
    for item in text.split(","):
        name, eq, value = item.strip().partition("=")
        if eq and name.strip().lower() == key:
            try:
                seconds = float(value)
            except ValueError:
                return None
            return seconds if seconds > 0 else None
    return None


@dataclass(frozen=True, slots=True)
class CadenceParams:
    tick_interval: float = 5.0  # periodic duties and a pass, in seconds
    min_interval: float = DEFAULT_MIN_INTERVAL  # between the starts of two passes, in seconds

    @classmethod
    def from_config(cls, config: ClusterConfig) -> CadenceParams:
        params = config.options.get("SchedulerParameters", "")
        given = [s for s in (_scheduler_parameter(params, "sched_interval"),
                             _scheduler_parameter(params, "bf_interval")) if s is not None]
        tick = max(1.0, min(given)) if given else float(max(1, config.get_int("SchedulerInterval")))
        micros = _scheduler_parameter(params, "sched_min_interval")
        return cls(tick_interval=tick,
                   min_interval=DEFAULT_MIN_INTERVAL if micros is None else micros / 1e6)


class Cadence:
    """The state of the pass cadence: whether a pass is armed (and for when), running, or
    wanted again after the running one.  The caller arms a timer for the time `request`
    or `finished` returns and calls `started`/`finished` around the pass."""

    __slots__ = ("params", "due", "running", "again", "last_duration", "last_start", "passes")

    def __init__(self, params: CadenceParams | None = None) -> None:
        self.params = params or CadenceParams()
        self.due: float | None = None  # when the armed pass runs
        self.running = False
        self.again = False  # a trigger came during the running pass
        self.last_duration = 0.0
        self.last_start = float("-inf")
        self.passes = 0

    def request(self, now: float, delay: float = 0.0) -> float | None:
        """A trigger at `now`: the time to arm a pass for, or None when it coalesces into
        the pass already armed or running."""
        if self.running:
            self.again = True
            return None
        if self.due is not None:
            return None
        self.due = max(now + max(0.0, delay), self.last_start + self.params.min_interval)
        return self.due

    def started(self, now: float) -> None:
        self.due = None
        self.running = True
        self.last_start = now

    def finished(self, now: float, duration: float) -> float | None:
        """The pass ended at `now` after `duration` seconds: the time of the coalesced pass
        that triggers during it asked for, or None."""
        self.running = False
        self.last_duration = duration
        self.passes += 1
        if not self.again:
            return None
        self.again = False
        return self.request(now, max(MIN_GAP, min(MAX_GAP, 2 * duration)))

    def next_tick(self, now: float) -> float:
        return now + self.params.tick_interval
