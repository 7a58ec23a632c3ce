"""The controller's metrics: the exposition writer, the event-derived job counts, the GPU
attribution of the agents' samples (controller.usage), on the in-process harness."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from corral.controller.harness import Harness
from corral.controller.metrics import JOB_STATES, Family, Metrics, expose
from corral.controller.usage import UsageBook
from corral.model.job import Job, JobState

if TYPE_CHECKING:
    from corral.controller.state import Controller

CONF = """\
ClusterName=t
MinJobAge=60
NodeName=n[1-2] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=n[1-2] Default=YES
PartitionName=other Nodes=n2
"""


@pytest.fixture
def h() -> Iterator[Harness]:
    with Harness(CONF) as harness:
        yield harness


def _parsed(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(dict(s.labels), s.value) for s in f.samples]
            for f in text_string_to_metric_families(text)}



def _random_gpus(rng: random.Random) -> list[dict[str, Any]]:
    """A node's sample of its two GPUs, as the agent sends it, with random use."""
    return [{"index": i, "util": float(rng.choice([0, 0, 30, 55.5, 100])),
             "memory_used": rng.randint(0, 4) << 28, "memory_total": 1 << 30,
             "power_w": rng.choice([None, 70.0]), "processes": []} for i in range(2)]

def test_exposition_matches_prometheus_client() -> None:
    odd = 'a"b\\c\nd'
    fams = [Family("slurm_x", "Plain gauge", value=3),
            Family("slurm_y", "With \\ and\nnewline", ("node",)),
            Family("corral_z", "Two labels", ("node", "gpu"))]
    fams[1].rows = [(("n1",), 1.5), ((odd,), 0), (("n3",), True)]
    fams[2].rows = [(("n1", "0"), 2), ((odd, "1"), 1e20)]
    ours = expose(fams).decode()

    class Collect:
        def collect(self) -> Iterator[GaugeMetricFamily]:
            for f in fams:
                if not f.labels:
                    yield GaugeMetricFamily(f.name, f.doc, value=f.rows[0][1])
                    continue
                g = GaugeMetricFamily(f.name, f.doc, labels=list(f.labels))
                for values, x in f.rows:
                    g.add_metric(list(values), float(x))
                yield g

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Collect())  # type: ignore[arg-type]
    theirs = generate_latest(reg).decode()
    assert _parsed(ours) == _parsed(theirs)
    assert [f.documentation for f in text_string_to_metric_families(ours)] == \
        [f.documentation for f in text_string_to_metric_families(theirs)]


def _brute(h: Harness, key: str) -> dict[str, Counter[str]]:
    """Job counts by walking every job, to check the event-derived ones against."""
    out: dict[str, Counter[str]] = {}
    for j in h.ctl.jobs.values():
        k = {"partition": (j.partition or "").split(",")[0], "username": j.user,
             "account": j.account or ""}[key]
        c = out.setdefault(k, Counter())
        c["jobs"] += 1
        for suffix, _doc, states in JOB_STATES:
            c[suffix] += j.state in states
        if j.state.active:
            c["gpus_alloc"] += j.alloc_gpus
            c["cpus_alloc"] += j.alloc_cpus
        if j.state is JobState.PENDING and j.held:
            c["hold"] += 1
    return out


def _check_counts(h: Harness, m: Metrics) -> None:
    parsed = _parsed(m.render("jobs-users-accts").decode() + m.render("partitions").decode())
    for prefix, label in (("slurm_user_", "username"), ("slurm_account_", "account"),
                          ("slurm_partition_", "partition")):
        want = _brute(h, label)
        for what in ("jobs", "pending", "running", "completed", "cancelled", "gpus_alloc",
                     "cpus_alloc"):
            name = prefix + ("jobs" if what == "jobs" else f"jobs_{what}")
            got = {s[0][label]: s[1] for s in parsed[name] if s[1] or s[0][label] in want}
            assert got == {k: float(c[what]) for k, c in want.items()
                           if c[what] or k in got}, name
    jobs = _parsed(m.render("jobs").decode())
    assert jobs["slurm_jobs"] == [({}, float(len(h.ctl.jobs)))]
    assert jobs["slurm_jobs_hold"] == [({}, float(sum(c["hold"] for c in
                                                      _brute(h, "username").values())))]


def test_job_counts_follow_the_events(h: Harness) -> None:
    m = Metrics(h.ctl, UsageBook(h.ctl))
    _check_counts(h, m)
    a = h.submit(gpus_per_node=2, cpus_per_task=2)
    b = h.submit(uid=1001, gpus_per_node=1)
    c = h.submit(uid=1001, held="user")
    d = h.submit(partition="other")
    _check_counts(h, m)
    h.tick()
    assert h.job(a).state is JobState.RUNNING
    _check_counts(h, m)
    h.end(a)
    h.call(h.ctl.signal_jobs, h.who(1001), [h.job(b)], 15, batch_only=False, cancel=True)
    if h.job(b).state is JobState.COMPLETING:
        _check_counts(h, m)
        h.end(b, "CANCELLED")
    h.tick()
    _check_counts(h, m)
    h.call(h.ctl.release, h.who(1001), [h.job(c)])
    h.tick()
    _check_counts(h, m)
    h.advance(120)  # MinJobAge: finished jobs leave memory without an event
    assert a not in h.ctl.jobs
    _check_counts(h, m)
    assert d in h.ctl.jobs
    sched = _parsed(m.render("scheduler").decode())
    assert sched["slurm_sdiag_jobs_submitted"] == [({}, 4.0)]
    assert sched["slurm_sdiag_jobs_completed"][0][1] >= 1
    assert sched["slurm_sdiag_jobs_canceled"][0][1] == 1.0


def test_gpu_samples_are_attributed_to_the_jobs_holding_them(h: Harness) -> None:
    book = UsageBook(h.ctl)
    m = Metrics(h.ctl, book)
    a = h.submit(gpus_per_node=2)
    h.tick()
    job = h.job(a)
    node = job.batch_host
    assert node is not None
    held = job.alloc[0].gpus
    samples = [{"index": i, "util": 40.0 if i in held else 0.0, "memory_used": 1 << 30,
                "memory_total": 16 << 30, "power_w": 50.0, "processes": []} for i in range(2)]
    h.call(book.agent_usage, 1.0, samples, [], [node])
    h.call(book.agent_usage, 2.0, [{**s, "util": 60.0 if s["index"] in held else 0.0} for s in samples],
                     [{"job_id": a, "step": "batch", "cpu_user": 1.0, "rss": 5, "rss_max": 9}],
                     [node])
    assert book.running_steps(a, None)[0]["usage"][node]["gpuutil_ave"] == 100.0  # (80+120)/2
    h.call(book.agent_usage, 3.0, [], [{"job_id": a, "step": "batch", "final": True, "cpu_user": 2.0,
                                "rss_max": 11}], [node])
    rec = next(s for s in job.steps if s.step_id == "batch")
    assert rec.usage == {node: {"cpu_user": 2.0, "cpu_sys": 0, "rss": 0, "rss_max": 11,
                                "read": 0, "write": 0, "ntasks": 0, "time": 0,
                                "gpuutil_ave": 100.0, "gpuutil_max": 120.0,
                                "gpumem_max": 2 << 30}}
    assert book.running_steps(a, None) == []
    gpus = _parsed(m.render("gpus").decode())
    assert gpus["corral_job_gpu_utilization_percent"][0] == (
        {"jobid": str(a), "username": job.user, "account": job.account or ""}, 120.0)
    nodes = _parsed(m.render("nodes").decode())
    assert ({"node": node}, 2.0) in nodes["slurm_node_gpus_alloc"]
    assert ({"node": node}, 0.0) in nodes["corral_node_gpus_alloc_idle"]


def test_bad_usage_entries_are_refused_alone(h: Harness) -> None:
    book = UsageBook(h.ctl)
    a = h.submit()
    h.tick()
    node = h.job(a).batch_host
    other = "n2" if node == "n1" else "n1"
    h.call(book.agent_usage, 1.0, [{"index": "x"}, {"index": 0, "util": -1}],
                     [{"job_id": a, "step": "batch", "rss": -5},
                      {"job_id": a, "step": "batch", "rss": "big"},
                      {"job_id": a, "step": "batch", "rss": 1},  # not this agent's node
                      {"job_id": 99, "step": "batch"}, "junk"], [other])
    assert book.gpus == {} and book.running_steps(a, None) == []
    h.call(book.agent_usage, 1.0, [], [{"job_id": a, "step": "batch", "rss": 1}], [node])  # type: ignore[list-item]
    assert book.running_steps(a, None)[0]["usage"][node]["rss"] == 1


def test_kept_text_equals_a_fresh_rendering_after_each_change(h: Harness) -> None:
    """The routes keep per-node and per-group pieces between scrapes: after each kind of
    change (events, no events: free memory, a hold, a drain, a health verdict, a GPU sample)
    the text is what a Metrics made from scratch renders."""
    book = UsageBook(h.ctl)
    m = Metrics(h.ctl, book)
    routes = ("nodes", "jobs", "partitions", "jobs-users-accts", "gpus")

    def same() -> None:
        fresh = Metrics(h.ctl, book)
        for r in routes:
            assert m.render(r) == fresh.render(r), r
            assert m.render(r) == fresh.render(r), r  # served again from what was kept

    same()
    a = h.submit(gpus_per_node=2)
    h.submit(uid=1001, account="", partition="other")  # runs on n2
    same()
    h.tick()
    same()
    node = h.job(a).batch_host
    assert node is not None
    samples = [{"index": i, "util": 0.0, "memory_used": 0, "memory_total": 1 << 30,
                "power_w": None, "processes": []} for i in range(2)]
    h.call(book.agent_usage, 1.0, samples, [], [node])
    same()
    h.call(book.agent_usage, 2.0, [{**s, "util": 30.0} for s in samples], [], [node])
    same()
    owners = _parsed(m.render("jobs-users-accts").decode())
    assert owners["corral_user_gpu_utilization_percent"] == [
        ({"username": h.job(a).user}, 60.0)]  # its two GPUs at 30 %, summed
    h.ctl.nodes["n2"].free_mem = 1234
    same()
    c = h.submit(uid=1001, cpus_per_task=4, partition="other")  # waits for b's CPUs
    h.tick()
    same()
    h.call(h.ctl.hold, h.who(1001), [h.job(c)], "user")
    assert h.job(c).held
    same()
    h.ctl.health.failing["n1"] = {"program": 'disk "full"'}
    h.ctl.health.drained.add("n1")
    h.ctl.nodes["n1"].admin_state = "drain"
    same()
    text = m.render("nodes").decode()
    assert 'corral_node_health_failing{node="n1",source="program",reason="disk \\"full\\""} 1' \
        in text
    assert 'corral_node_health_drained{node="n1"} 1' in text
    assert "corral_nodes_health_failing 1" in text
    h.end(a)
    h.tick()
    same()
    h.advance(120)  # MinJobAge: jobs leave memory without an event
    same()


def test_scheduler_route_gives_each_stage_of_the_last_pass(h: Harness) -> None:
    m = Metrics(h.ctl, UsageBook(h.ctl))
    before = m.render("scheduler").decode()
    assert "corral_sched_stage_seconds{" not in before  # no pass decided anything yet
    h.submit(uid=1000)
    h.tick()
    text = m.render("scheduler").decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    stages = {s.labels["stage"]: s.value for s in families["corral_sched_stage_seconds"].samples}
    assert {"eligibility", "priority", "backfill"} <= set(stages)
    assert all(v >= 0 for v in stages.values())


GPU_CONF = """\
ClusterName=t
MinJobAge=30
NodeName=g[1-5] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=g[1-5] Default=YES
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gpus_route_kept_equals_a_full_rendering_after_random_changes(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """/metrics/gpus is kept in blocks (nodes, jobs) that only changes re-render: after
    each of a random sequence of changes (GPU samples, submissions, starts, ends,
    requeues, cancels, jobs leaving memory, a node seen for the first time) the text equals
    the route rendered from scratch; now and then the other routes are checked against a
    Metrics made from the state at that point."""

    from corral.controller import metrics_gpus

    monkeypatch.setattr(metrics_gpus, "NODE_BLOCK", 2)  # several blocks of each kind
    monkeypatch.setattr(metrics_gpus, "JOB_BLOCK_SHIFT", 1)
    rng = random.Random(seed)
    with Harness(GPU_CONF) as h:
        book = UsageBook(h.ctl)
        m = Metrics(h.ctl, book)
        clock = [0.0]
        job_rows_seen = []

        def sample(node: str) -> None:
            clock[0] += 1
            h.call(book.agent_usage, clock[0], _random_gpus(rng), [], [node])

        def same() -> None:
            got, want = m.render("gpus").decode(), metrics_gpus.full_text(h.ctl, book).decode()
            assert got.splitlines() == want.splitlines()
            job_rows_seen.append("corral_job_gpu_utilization_percent{" in got)

        same()
        for n in ("g1", "g3"):
            sample(n)
        same()
        kinds = ["submit", "submit", "tick", "sample", "sample", "sample", "end", "requeue",
                 "cancel", "advance", "new node"]
        for _ in range(100):
            kind = rng.choice(kinds)
            running = [j for j in h.ctl.running.values() if j.batch_host]
            if kind == "submit":
                h.submit(uid=rng.choice([1000, 1001]), gpus_per_node=rng.choice([0, 1, 2]),
                         account=rng.choice(["", "lab"]) or None)
            elif kind == "tick":
                h.tick()
            elif kind == "sample":  # mostly where jobs run
                busy = [a.node for j in running for a in j.alloc]
                sample(rng.choice(busy if busy and rng.random() < 0.8 else
                                  ["g1", "g2", "g3", "g4", "g5"]))
            elif kind == "end" and running:
                h.end(rng.choice(running).job_id)
            elif kind == "requeue" and running:
                h.call(h.ctl.requeue, h.who(0), [rng.choice(running)], False)
            elif kind == "cancel" and running:
                job = rng.choice(running)
                h.call(h.ctl.signal_jobs, h.who(0), [job], 15, batch_only=False, cancel=True)
                if job.state is JobState.COMPLETING:
                    h.end(job.job_id, "CANCELLED")
            elif kind == "advance":
                h.advance(rng.choice([5, 40]))  # 40: finished jobs leave memory (MinJobAge)
            elif kind == "new node":
                sample(f"x{rng.randint(0, 3)}")  # sampled, but not in the configuration
            if rng.random() < 0.6:  # not every change is followed by a scrape
                same()
            if rng.random() < 0.2:  # the other kept routes, against a Metrics made now
                fresh = Metrics(h.ctl, book)
                for r in ("nodes", "jobs", "partitions", "jobs-users-accts"):
                    assert m.render(r) == fresh.render(r), r
        same()
        assert any(job_rows_seen) and 'node="x' in m.render("gpus").decode()  # all was tried


def test_gpus_route_unscraped_for_long_forgets_what_it_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What changed is remembered for the next scrape; with no scrape for long the route
    drops its kept text (bounded memory) and the next scrape renders everything."""
    from corral.controller import metrics_gpus

    with Harness(GPU_CONF) as h:
        book = UsageBook(h.ctl)
        m = Metrics(h.ctl, book)
        route = m.gpu_route
        before = m.render("gpus")
        assert route.pieces is not None
        h.submit()
        assert route.pieces is not None and route.dirty_jobs
        monkeypatch.setattr(metrics_gpus, "FORGET_SLACK", -5)
        h.submit()
        assert route.pieces is None and not route.dirty_jobs
        assert m.render("gpus") == metrics_gpus.full_text(h.ctl, book) == before


# ---- every route against a straightforward rendering, after random changes ------------------

def _reference(ctl: Controller, book: UsageBook, section: str) -> bytes:
    """A route rendered from scratch by walking the controller's state (every job, every
    node), each family through the plain exposition writer (`expose`, itself checked against
    prometheus-client above): what the kept pieces must add up to."""
    from corral.controller import metrics as mm
    from corral.controller import metrics_gpus

    if section == "gpus":
        return metrics_gpus.full_text(ctl, book)
    groups: dict[str, mm.JobAgg] = {}

    def keys(j: Job) -> tuple[str, ...]:
        return ("", "p:" + (j.partition or "").split(",")[0], "u:" + j.user,
                "a:" + (j.account or ""))

    for j in ctl.jobs.values():
        for k in keys(j):
            a = groups.setdefault(k, mm.JobAgg())
            a.jobs += 1
            if j.state in mm.STATE_SLOT:
                a.states[mm.STATE_SLOT[j.state]] += 1
            a.finished += j.state.finished
            if j.state.active:
                a.cpus += j.alloc_cpus
                a.gpus += j.alloc_gpus
                a.mem += j.alloc_mem
                a.nodes += len(j.nodes)
    for j in ctl.pending.values():
        if j.held:
            for k in keys(j):
                groups[k].held += 1
    groups.setdefault("", mm.JobAgg())

    def kind(prefix: str) -> dict[str, mm.JobAgg]:
        return {k[2:]: a for k, a in groups.items() if k.startswith(prefix) and a.jobs}

    nodes = [ctl.nodes[n] for n in sorted(ctl.nodes)]
    out: list[Family] = []
    if section == "nodes":
        for i, (name, doc) in enumerate(mm.NODE_SERIES):
            f = Family(name, doc, ("node",))
            for n in nodes:
                values = (n.cpus, n.alloc_cpus, max(0, n.cpus - n.alloc_cpus), n.gpus,
                          len(n.alloc_gpus), n.alloc_mem << 20, n.real_memory << 20,
                          None if n.free_mem is None else n.free_mem << 20)
                if values[i] is not None:
                    f.add((n.name,), values[i])
            out.append(f)
        states: Counter[str] = Counter()
        for n in nodes:
            long = n.state_name()
            states[long.split("+")[0].rstrip("*")] += 1
            if "DRAIN" in long:
                states["drain"] += 1
                states["draining" if n.job_count else "drained"] += 1
            states["noresp"] += long.endswith("*")
        out.append(Family("slurm_nodes", "Total number of nodes", value=len(nodes)))
        out += [Family(f"slurm_nodes_{name}", doc, value=states[key])
                for key, name, doc in mm.NODE_STATE_SERIES]
        util = Family(*mm.NODE_SERIES_CORRAL[0], ("node",))
        idle = Family(*mm.NODE_SERIES_CORRAL[1], ("node",))
        failing = Family(*mm.NODE_SERIES_CORRAL[2], ("node", "source", "reason"))
        drained = Family(*mm.NODE_SERIES_CORRAL[3], ("node",))
        for n in nodes:
            entry = book.gpus.get(n.name)
            if entry is not None:
                if entry[1]:
                    util.add((n.name,), sum(g["util"] for g in entry[1]) / len(entry[1]))
                idle.add((n.name,), sum(1 for g in entry[1] if g["util"] < mm.IDLE_GPU_UTIL
                                        and not g["processes"] and g["index"] in n.alloc_gpus))
            for source, why in sorted(ctl.health.failing.get(n.name, {}).items()):
                failing.add((n.name, source, why), 1)
            drained.add((n.name,), int(n.name in ctl.health.drained))
        out += [util, idle, failing, drained,
                Family("corral_nodes_health_failing", "Number of nodes failing a health check "
                       "now", value=sum(1 for n in nodes if ctl.health.failing.get(n.name)))]
    elif section == "jobs":
        out += mm.job_families("slurm_", None, {"": groups[""]})
        why = ctl.pending_reasons
        codes = Counter(why[jid].code if jid in why else None for jid in ctl.pending)
        counts = Counter({"None" if code is None else str(code.value): c
                          for code, c in codes.items()})
        reasons = Family("corral_jobs_pending_reason", "Pending jobs by their typed reason",
                         ("reason",))
        reasons.rows = [((r,), c) for r, c in sorted(counts.items())]
        out.append(reasons)
    elif section == "partitions":
        parts = ctl.partitions
        out.append(Family("slurm_partitions", "Total number of partitions", value=len(parts)))
        counted = kind("p:")
        out += mm.job_families("slurm_partition_", "partition",
                               {p: counted.get(p) or mm.JobAgg() for p in parts})
        for i, (name, doc) in enumerate(mm.Metrics.PARTITION_SERIES):
            f = Family(f"slurm_partition_{name}", doc, ("partition",))
            for p, part in parts.items():
                total = 0
                for n in (ctl.nodes[x] for x in part.nodes if x in ctl.nodes):
                    st = n.state_name()
                    total += (n.cpus, n.gpus, 1, n.alloc_cpus, max(0, n.cpus - n.alloc_cpus),
                              st == "IDLE", st == "MIXED", st == "ALLOCATED", n.alloc_mem << 20,
                              n.real_memory << 20)[i]
                f.add((p,), total)
            out.append(f)
    elif section == "jobs-users-accts":
        by_user, by_account = mm.OwnerGpu(ctl, book).render()  # made now: from scratch
        reclaim = expose(mm.Metrics.reclaim_families(cast(mm.Metrics, SimpleNamespace(ctl=ctl))))
        return b"".join([expose(mm.job_families("slurm_user_", "username", kind("u:"))),
                         by_user.encode(),
                         expose(mm.job_families("slurm_account_", "account", kind("a:"))),
                         by_account.encode(), reclaim])
    return expose(out)


ROUTES_CONF = """\
ClusterName=t
MinJobAge=30
NodeName=g[1-5] CPUs=4 RealMemory=4000 Gres=gpu:2
PartitionName=debug Nodes=g[1-5] Default=YES
PartitionName=small Nodes=g[4-5]
"""


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_every_route_kept_equals_a_straightforward_rendering_after_random_changes(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each route is served from pieces kept between scrapes (per node, group, block of
    GPUs or jobs, each family's bytes) and the combined /metrics from the routes' pieces:
    after each of a random sequence of changes (submissions, passes, ends, cancels, holds,
    GPU samples, free memory, drains, health verdicts, jobs leaving memory) every route,
    and /metrics, is what a rendering from scratch of the whole state gives, and parses."""

    from corral.controller import metrics as mm
    from corral.controller import metrics_gpus

    monkeypatch.setattr(metrics_gpus, "NODE_BLOCK", 2)  # several blocks of each kind
    monkeypatch.setattr(metrics_gpus, "JOB_BLOCK_SHIFT", 1)
    # the scheduler route's timestamps, fixed: it is compared inside /metrics
    monkeypatch.setattr(mm, "time", SimpleNamespace(time=lambda: 1_700_000_000.0))
    rng = random.Random(seed)
    routes = [r for r in Metrics.SECTIONS if r != "scheduler"]
    with Harness(ROUTES_CONF) as h:
        book = UsageBook(h.ctl)
        m = Metrics(h.ctl, book)
        names = ["g1", "g2", "g3", "g4", "g5"]
        clock = [0.0]
        seen: Counter[str] = Counter()

        def sample(node: str) -> None:
            clock[0] += 1
            h.call(book.agent_usage, clock[0], _random_gpus(rng), [], [node])

        def same() -> None:
            for r in rng.sample(routes, len(routes)):  # in any order: each its own pieces
                assert m.render(r).decode() == _reference(h.ctl, book, r).decode(), r
            whole = m.render(None).decode()
            want = b"".join(m.render("scheduler") if r == "scheduler"
                            else _reference(h.ctl, book, r) for r in Metrics.SECTIONS).decode()
            assert whole == want
            families = {f.name: f for f in text_string_to_metric_families(whole)}
            for name in ("slurm_node_gpus_alloc", "slurm_user_jobs_pending",
                         "corral_gpu_allocated"):
                seen[name] += bool(families[name].samples)

        same()
        kinds = ["submit", "submit", "submit", "tick", "tick", "sample", "sample", "end",
                 "cancel", "hold", "release", "free", "drain", "resume", "health", "advance"]
        for _ in range(120):
            kind = rng.choice(kinds)
            running = [j for j in h.ctl.running.values() if j.batch_host]
            pending = list(h.ctl.pending.values())
            node = rng.choice(names)
            if kind == "submit":
                h.submit(uid=rng.choice([1000, 1001, 1002]), gpus_per_node=rng.choice([0, 1, 2]),
                         cpus_per_task=rng.choice([1, 2]), account=rng.choice(["", "lab"]) or None,
                         partition=rng.choice(["debug", "small"]))
            elif kind == "tick":
                h.tick()
            elif kind == "sample":
                sample(node)
            elif kind == "end" and running:
                h.end(rng.choice(running).job_id)
            elif kind == "cancel" and running:
                job = rng.choice(running)
                h.call(h.ctl.signal_jobs, h.who(0), [job], 15, batch_only=False, cancel=True)
                if job.state is JobState.COMPLETING:
                    h.end(job.job_id, "CANCELLED")
            elif kind == "hold" and pending:
                h.call(h.ctl.hold, h.who(0), [rng.choice(pending)], "admin")
            elif kind == "release" and pending:
                h.call(h.ctl.release, h.who(0), [rng.choice(pending)])
            elif kind == "free":
                h.ctl.nodes[node].free_mem = rng.choice([None, 100, 3000])
            elif kind == "drain":
                h.ctl.nodes[node].admin_state = "drain"
            elif kind == "resume":
                h.ctl.nodes[node].admin_state = "up"
            elif kind == "health":
                if rng.random() < 0.5:
                    h.ctl.health.failing[node] = {"program": rng.choice(["disk full", 'a "b"'])}
                    h.ctl.health.drained.add(node)
                else:
                    h.ctl.health.failing.pop(node, None)
                    h.ctl.health.drained.discard(node)
            elif kind == "advance":
                h.advance(rng.choice([5, 40]))  # 40: finished jobs leave memory (MinJobAge)
            if rng.random() < 0.5:  # not every change is followed by a scrape
                same()
        same()
        assert all(seen.values()) and len(seen) == 3  # running jobs, pending ones, GPUs: tried


@pytest.mark.parametrize("seed", range(4))
def test_gpu_samples_reach_the_jobs_the_running_table_holds(h: Harness, seed: int) -> None:
    """The book visits a sampled node's GPU jobs through its own index (gpu_jobs, kept from
    the job events): after random starts, ends, requeues, cancels and suspends, each
    sample's figures are what a scan of every running job gives (the index's oracle)."""
    rng = random.Random(seed)
    book = UsageBook(h.ctl)
    h.register(["n1", "n2"])
    expected: dict[int, dict[str, tuple[float, float]]] = {}
    seen = 0
    for _ in range(60):
        op = rng.random()
        running = sorted(h.ctl.running)
        if op < 0.35:
            h.submit(gpus_per_node=rng.choice([0, 1, 2]), num_nodes=rng.choice([1, 1, 2]))
            h.tick()
        elif op < 0.5 and running:
            h.end(rng.choice(running))
            h.tick()
        elif op < 0.6 and running:
            h.call(h.ctl.requeue, h.who(0), [h.job(rng.choice(running))], False)
            h.tick()
        elif op < 0.7 and running:
            h.call(h.ctl.signal_jobs, h.who(0), [h.job(rng.choice(running))], 9,
                   batch_only=False, cancel=True)
            h.tick()
        elif op < 0.8 and (pausable := [j for j in running if h.job(j).state in (
                JobState.RUNNING, JobState.SUSPENDED)]):
            job = h.job(rng.choice(pausable))
            h.call(h.ctl.suspend, h.who(0), [job], job.state == JobState.SUSPENDED)
        node = rng.choice(["n1", "n2"])
        samples = _random_gpus(rng)
        h.call(book.agent_usage, float(_), samples, [], [node])
        by_index = {g["index"]: g for g in samples}
        for job in h.ctl.running.values():  # the oracle: every running job
            held = [i for a in job.alloc if a.node == node for i in a.gpus]
            if held:
                expected.setdefault(job.job_id, {})[node] = (
                    sum(by_index[i]["util"] for i in held),
                    sum(by_index[i]["memory_used"] for i in held))
        shown = {j: per for j, per in book.job_gpu.items() if j in h.ctl.running}
        assert shown == {j: per for j, per in expected.items() if j in h.ctl.running}
        seen += bool(shown)
        index: dict[str, set[int]] = {}  # and the index holds no job that left
        for job in h.ctl.running.values():
            for a in job.alloc:
                if a.gpus:
                    index.setdefault(a.node, set()).add(job.job_id)
        assert book.gpu_jobs == index
    assert seen > 20  # most samples found GPU jobs to charge
