"""Scheduling-quality levers of backfill, each a `SchedulerParameters` item (Corral's own,
spelt `corral_...`: Slurm has none of them).  README, "Comparing policies", measures each
against EASY backfill with `bench/sim_levers.py`.

- `corral_bf_order=priority|limit|predicted|largest`: the order in which backfill tries the jobs
  that no hold protects (those behind the planned ones).  `priority` (the default, as
  Slurm): priority order.  `limit`: shortest time limit first (SJBF).  `predicted`:
  shortest predicted run time first (each user's recent run times, sched/predict.py;
  their limit without history).  `largest`: most GPUs first (then priority), to fill
  idle GPUs with as much work as fits.  Planned jobs are still chosen and planned in priority
  order, with their time limits: an order only changes which job is tried first, never a
  hold, so a misprediction cannot delay a planned job.
- `corral_bf_reserve_min_gpus=G`: behind the first blocked job of a partition, only jobs
  asking for G GPUs or more get a hold (within `bf_job_part_count_reserve`); smaller jobs
  start when they fit and otherwise wait with reason Priority, holding nothing back.
  0 (the default): every blocked job within the budget.

`corral_predict_runtime=N` (sched/predict.py) is separate: it plans with predictions
(EASY++).  `corral_bf_order=predicted` without it keeps the history (the last 2 jobs of
each user) for the order alone.
"""

from __future__ import annotations

from dataclasses import dataclass

ORDERS = ("priority", "limit", "predicted", "largest")
ORDER_HISTORY = 2  # recent jobs per user for `predicted` without corral_predict_runtime


@dataclass(frozen=True, slots=True)
class Levers:
    order: str = "priority"  # corral_bf_order
    reserve_min_gpus: int = 0  # corral_bf_reserve_min_gpus
    # the snapshot's predictions (if any) plan the holds (EASY++, corral_predict_runtime=N);
    # False: they order backfill's candidates only
    plan_predictions: bool = True

    def history_depth(self, predict_runtime: int) -> int:
        """Recent run times to keep per user: the plan's depth, else the order's."""
        if predict_runtime > 0:
            return predict_runtime
        return ORDER_HISTORY if self.order == "predicted" else 0


def parse_levers(scheduler_parameters: str) -> Levers:
    """The levers of a SchedulerParameters value (unknown values: the defaults)."""
    order, min_gpus, predict = "priority", 0, False
    for item in scheduler_parameters.split(","):
        key, _, value = item.strip().partition("=")
        value = value.strip()
        if key == "corral_bf_order" and value in ORDERS:
            order = value
        elif key == "corral_bf_reserve_min_gpus" and value.isdigit():
            min_gpus = int(value)
        elif key == "corral_predict_runtime" and value.isdigit() and int(value) > 0:
            predict = True
    # predictions reach the pass for the plan (corral_predict_runtime) or for the order
    return Levers(order, min_gpus, predict or order != "predicted")
