"""sched/limits_check.py: the pass's short check of a level gives `_check_level`'s answers.

`_StartLevel.check_short` (what check_start runs for each candidate of a pass) checks the common
limits itself; these tests compare it with the general `_check_level` over many random
levels, counters, overrides and jobs, for associations and QoS.
"""

from __future__ import annotations

import random

from corral.model.assoc import Limits
from corral.sched.limits_check import (
    _ASSOC_USER_COUNTS,
    _QOS_USER_COUNTS,
    Counter,
    JobReq,
    _check_level,
    _sorted,
    _StartLevel,
)

TRES = ("cpu", "mem", "node", "gres/gpu")


def random_limits(rng: random.Random, scope: str) -> Limits:
    lim = Limits()
    if rng.random() < 0.3:
        lim.grp_jobs = rng.randint(0, 6)
    if rng.random() < 0.4:
        if scope == "QOS":
            lim.max_jobs_per_user = rng.randint(0, 6)
        else:
            lim.max_jobs = rng.randint(0, 6)
    if rng.random() < 0.2:
        lim.grp_wall = rng.randint(0, 100)
    if rng.random() < 0.3:
        lim.max_wall = rng.randint(1, 120)
    if rng.random() < 0.6:
        lim.grp_tres = {t: rng.randint(0, 40) for t in rng.sample(TRES, rng.randint(1, 3))}
    if rng.random() < 0.3:
        lim.max_tres_per_user = {t: rng.randint(0, 40) for t in rng.sample(TRES, 2)}
    if rng.random() < 0.1:  # a limit of the general path
        lim.max_tres_per_job = {"cpu": rng.randint(1, 16)}
    return lim


def random_counter(rng: random.Random) -> Counter:
    return Counter(jobs=rng.randint(0, 6), submit=rng.randint(0, 9),
                   tres={t: rng.randint(0, 40) for t in TRES if rng.random() < 0.7})


def test_short_check_answers_as_the_general_one() -> None:
    rng = random.Random(7)
    hits = 0
    for i in range(3000):
        scope = rng.choice(("Assoc", "QOS"))
        lim = random_limits(rng, scope)
        grp = random_counter(rng)
        mine = grp if scope == "Assoc" else random_counter(rng)
        skip: dict[str, set[str]] = {}
        if rng.random() < 0.3:
            for name in rng.sample(("grp_jobs", "max_jobs", "grp_wall", "max_wall",
                                    "grp_tres"), 2):
                skip[name] = {"*"} if name != "grp_tres" else {rng.choice(TRES)}
        counts = _QOS_USER_COUNTS if scope == "QOS" else _ASSOC_USER_COUNTS
        used_wall = float(rng.randint(0, 100))
        tres = {t: rng.randint(1, 20) for t in TRES if rng.random() < 0.8}
        job = JobReq(i, "ann", "lab", "gpu", "normal", tres, tres,
                     rng.choice([None, 30, 90]))
        items = _sorted(tres)
        level = _StartLevel(scope, "somewhere", lim, grp, mine, {}, used_wall, counts, skip)
        want = _check_level(scope, "somewhere", lim, job, items, False, grp=grp, mine=mine,
                            used_mins={}, used_wall=used_wall, per_user_counts=counts,
                            skip=skip)
        got = level.check_short(job) if level.short else level.check(job, items)
        assert got == want, (lim, skip, grp, mine, job)
        hits += want is not None
    assert 500 < hits < 2500  # both answers are common
