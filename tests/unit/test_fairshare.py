"""sched/fairshare.py against the worked examples of Slurm's documentation."""

from __future__ import annotations

import calendar

import pytest

from corral.model.assoc import ROOT, AssocDB, Association, ClusterRecord
from corral.sched.fairshare import (
    FairshareParams,
    RunningJob,
    Usage,
    UsageState,
    advance,
    billing,
    charge_ended,
    classic_factors,
    decayed,
    fair_tree_factors,
    fairshare_factors,
    next_reset,
    parse_billing_weights,
    tres_minutes,
)


def classic_tree() -> AssocDB:
    """classic_fair_share.html, figure 3: A(40){B(30){u1}, C(10){u2, u3}},
    D(60){E(25){u4}, F(35){u5}}."""
    db = AssocDB()
    db.clusters["c"] = ClusterRecord("c")
    rows = [(1, ROOT, None, None, 1), (2, "A", None, ROOT, 40), (3, "B", None, "A", 30),
            (4, "C", None, "A", 10), (5, "D", None, ROOT, 60), (6, "E", None, "D", 25),
            (7, "F", None, "D", 35), (11, "B", "u1", None, 1), (12, "C", "u2", None, 1),
            (13, "C", "u3", None, 1), (14, "E", "u4", None, 1), (15, "F", "u5", None, 1)]
    for aid, acct, user, parent, shares in rows:
        db.assocs[aid] = Association(aid, "c", acct, user, parent=parent, shares=shares)
    return db


def test_classic_matches_slurms_worked_example() -> None:
    db = classic_tree()
    # usage as fractions of the machine (the page's root total is the whole machine, 1.0)
    tree = {1: 1.0, 2: 0.45, 3: 0.2, 4: 0.25, 5: 0.25, 6: 0.25, 11: 0.2, 12: 0.25, 14: 0.25}
    info = classic_factors(db, "c", tree)
    assert info[3].effective_usage == pytest.approx(0.3875)
    assert info[4].effective_usage == pytest.approx(0.3)
    assert info[7].effective_usage == pytest.approx(0.1458, abs=1e-4)
    assert info[13].norm_shares == pytest.approx(0.05)
    expected = {11: 0.408479, 12: 0.022097, 13: 0.125, 14: 0.5, 15: 0.749154}
    for aid, f in expected.items():
        assert info[aid].fairshare == pytest.approx(f, abs=2e-4), aid


def test_account_usage_is_the_sum_below_it() -> None:
    db = classic_tree()
    own = {11: Usage(0.2), 12: Usage(0.25), 14: Usage(0.25)}
    info = fairshare_factors(db, "c", own, fair_tree=False)
    assert info[2].raw_usage == pytest.approx(0.45) and info[1].raw_usage == pytest.approx(0.7)
    assert info[11].norm_usage == pytest.approx(0.2 / 0.7)


def test_fair_tree_ranks_whole_accounts_before_their_siblings() -> None:
    db = classic_tree()
    usage = {11: 0.2, 12: 0.25, 14: 0.25}
    # account usage includes everything below (Slurm charges parents)
    tree = {1: 0.7, 2: 0.45, 3: 0.2, 4: 0.25, 5: 0.25, 6: 0.25, 7: 0.0, **usage}
    info = fair_tree_factors(db, "c", tree)
    # Level FS under root: A = .4/(.45/.7) = .622, D = .6/(.25/.7) = 1.68: D's users first.
    assert info[2].level_fs == pytest.approx(0.4 / (0.45 / 0.7))
    assert info[5].level_fs == pytest.approx(0.6 / (0.25 / 0.7))
    # under D: F unused (inf) before E; under A: B = (30/40)/(.2/.45)=1.69 > C = (10/40)/(.25/.45)
    # under C: u3 unused (inf) before u2.  Order: u5, u4, u1, u3, u2 → ranks 5..1 of 5.
    got = {aid: info[aid].fairshare for aid in (11, 12, 13, 14, 15)}
    assert got == {15: 1.0, 14: 0.8, 11: 0.6, 13: 0.4, 12: 0.2}
    assert info[15].level_fs == float("inf")


def test_fair_tree_ties() -> None:
    """Sibling users with equal Level FS share a rank; tied accounts are merged."""
    db = AssocDB()
    rows = [(1, ROOT, None, None, 1), (2, "a", None, ROOT, 1), (3, "b", None, ROOT, 1),
            (10, "a", "x", None, 1), (11, "a", "y", None, 1), (12, "b", "z", None, 1),
            (13, ROOT, "w", None, 1)]
    for aid, acct, user, parent, shares in rows:
        db.assocs[aid] = Association(aid, "c", acct, user, parent=parent, shares=shares)
    # nobody used anything: every Level FS is infinite, everything ties
    info = fair_tree_factors(db, "c", {})
    assert {info[i].fairshare for i in (10, 11, 12, 13)} == {1.0}
    # w used a lot: a and b tie (no usage) and are merged, x, y, z tie; w last
    info = fair_tree_factors(db, "c", {1: 10.0, 13: 10.0})
    assert [info[i].fairshare for i in (10, 11, 12)] == [1.0, 1.0, 1.0]
    assert info[13].fairshare == 0.25


def test_decay_halves_over_a_half_life() -> None:
    assert decayed(100.0, 3600, 3600) == pytest.approx(50.0, rel=1e-3)
    assert decayed(100.0, 3600, 0) == 100.0  # decay off


def test_billing_weights_make_gpus_count() -> None:
    w = parse_billing_weights("CPU=1.0,Mem=0.25G,GRES/gpu=10")
    assert w["mem"] == pytest.approx(0.25 / 1024)
    job = {"cpu": 4, "mem": 8192, "gres/gpu": 2}
    assert billing(job, w) == pytest.approx(4 + 2 + 20)
    assert billing(job, {}) == 4  # no weights: the CPUs
    assert billing(job, w, max_tres=True) == 20


def test_advance_charges_running_jobs_with_qos_usage_factor_and_decays() -> None:
    params = FairshareParams(half_life_s=0, billing_weights={"cpu": 1.0, "gres/gpu": 10.0})
    job = RunningJob(1, 11, "low", 1000.0, {"cpu": 2, "gres/gpu": 1})
    s = advance(UsageState(last_decay=1000.0, last_reset=1000.0), 1100.0, [job], params,
                usage_factor={"low": 0.5})
    assert s.assoc[11].raw == pytest.approx(100 * 12 * 0.5)
    assert s.assoc[11].tres["gres/gpu"] == pytest.approx(50.0)
    assert s.qos["low"].raw == pytest.approx(600.0)
    # charged again only for the new stretch; ends between passes are charged by charge_ended
    s2 = advance(s, 1200.0, [job], params, usage_factor={"low": 0.5})
    assert s2.assoc[11].raw == pytest.approx(1200.0)
    charge_ended(s2, job, 1300.0, params, {"low": 0.5})
    assert s2.assoc[11].raw == pytest.approx(1800.0)
    assert tres_minutes(s2.assoc)[11]["gres/gpu"] == pytest.approx(150 / 60)
    # with decay, usage accumulated before is decayed
    p = FairshareParams(half_life_s=100.0)
    s3 = advance(UsageState({11: Usage(100.0)}, last_decay=0.0 + 1, last_reset=1.0), 101.0, [], p)
    assert s3.assoc[11].raw == pytest.approx(50.0, rel=1e-2)
    assert UsageState.from_dict(s2.to_dict()) == s2


def utc(*t: int) -> float:
    return float(calendar.timegm((*t, 0, 0, 0)[:6]))


def test_reset_periods_like_slurm() -> None:
    last = utc(2026, 3, 15, 13)  # a Sunday
    assert next_reset("DAILY", last, last) == utc(2026, 3, 16)
    assert next_reset("WEEKLY", last, last) == utc(2026, 3, 22)
    assert next_reset("MONTHLY", last, last) == utc(2026, 4, 1)
    assert next_reset("QUARTERLY", last, last) == utc(2026, 4, 1)
    assert next_reset("QUARTERLY", utc(2026, 11, 2), 0) == utc(2027, 1, 1)
    assert next_reset("YEARLY", last, last) == utc(2027, 1, 1)
    assert next_reset("NONE", last, last) is None
    params = FairshareParams(half_life_s=0, reset_period="DAILY")
    s = UsageState({11: Usage(5.0)}, last_decay=last, last_reset=last)
    assert advance(s, utc(2026, 3, 15, 23), [], params).assoc[11].raw == 5.0
    assert advance(s, utc(2026, 3, 16, 1), [], params).assoc == {}


def test_fairshare_view_factor_by_job_fields() -> None:
    from corral.sched.fairshare import FairshareView

    db = classic_tree()
    view = FairshareView(db, "c", UsageState({11: Usage(0.2), 12: Usage(0.25), 14: Usage(0.25)}))
    assert view.factor("u5", "F") == 1.0
    assert view.factor("u2", "C") == 0.2
    assert view.factor("u2", "B") == 0.0  # no such association


def test_hourly_records_split_at_hour_boundaries() -> None:
    from corral.sched.fairshare import UsageSpan, hourly_records

    spans = [UsageSpan(11, 3000.0, 7800.0, {"gres/gpu": 2}, 10.0),
             UsageSpan(12, 3600.0, 3700.0, {"cpu": 1}, 1.0)]
    got = hourly_records("c", spans)
    assert got == [("c", 11, 0.0, {"gres/gpu": 1200.0}, 6000.0),
                   ("c", 11, 3600.0, {"gres/gpu": 7200.0}, 36000.0),
                   ("c", 12, 3600.0, {"cpu": 100.0}, 100.0),
                   ("c", 11, 7200.0, {"gres/gpu": 1200.0}, 6000.0)]
