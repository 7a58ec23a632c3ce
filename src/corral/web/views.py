"""What the dashboard, `corral why` and the event stream show, and to whom.

Each function reads the controller's memory and returns plain JSON-ready data (copies, never
live objects).  The rules (docs/SECURITY.md, "The dashboard"):

- everyone who may use the cluster sees its shape: nodes, their states and reasons, which
  job and user hold each GPU and how busy it is, the queue's rows (job id, user, account,
  partition, state, size, reason, place, estimated start), as `squeue` and `sinfo` show
  them to every user;
- a job's details (name, command, working directory, output paths, steps, usage, the output
  tail, its timeline) go to its owner, operators (AdminLevel too) and its account's
  coordinators only;
- with slurm.conf's `PrivateData=jobs` (controller/privacy.py) other users' jobs are not
  shown at all (a GPU they hold shows as in use, nothing more), and with `PrivateData=usage`
  (or `jobs`) the users page shows the caller's own figures only.
"""

from __future__ import annotations

import functools
import os
import stat
import time
from typing import TYPE_CHECKING, Any

from corral.controller import privacy
from corral.model.hostlists import compress
from corral.model.job import Job, JobState
from corral.model.node import Node, node_state_short
from corral.model.patterns import expand_pattern
from corral.model.reasons import PendingReason, from_text

if TYPE_CHECKING:
    from corral.controller.state import Controller, Identity

OUTPUT_TAIL_BYTES = 16 * 1024


def may_see_details(ctl: Controller, who: Identity, job: Job) -> bool:
    return privacy.sees_job_of(ctl, who, job.uid, job.account)


def jobs_hidden(ctl: Controller) -> bool:
    """PrivateData=jobs: others' jobs are not shown to those who may not see their details."""
    return "jobs" in privacy.hidden(ctl)


def gpu_samples(book: Any) -> dict[str, dict[int, dict[str, Any]]]:
    """node -> GPU index -> its latest sample (util %, memory used/total MB, processes),
    from the agents' usage samples (controller/usage.py's book; None where not kept)."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for node, (_t, samples) in (getattr(book, "gpus", None) or {}).items():
        out[node] = {g["index"]: g for g in samples}
    return out


# ---- the queue ------------------------------------------------------------------------------
def pending_reason(ctl: Controller, job: Job) -> PendingReason:
    """The typed reason of the last pass, unless the job's reason changed since (a hold)."""
    typed = ctl.pending_reasons.get(job.job_id)
    if typed is not None and typed.text() == job.reason:
        return typed
    return from_text(job.reason)


def expected_start(job: Job, now: float) -> float | None:
    """squeue --start's figure: backfill's estimate, else a later --begin time."""
    if job.begin_time and job.begin_time > now:
        return max(job.begin_time, job.sched_start or 0)
    return job.sched_start


def line_order(ctl: Controller) -> dict[int, tuple[int, int]]:
    """Each pending job's (place, of how many) in its partition's line: by priority, then
    submission, as the scheduler takes them."""
    by_part: dict[str, list[Job]] = {}
    for j in ctl.pending.values():
        by_part.setdefault(j.partition, []).append(j)
    out: dict[int, tuple[int, int]] = {}
    for jobs in by_part.values():
        jobs.sort(key=lambda j: (-j.priority, j.submit_time, j.job_id))
        n = len(jobs)
        for i, j in enumerate(jobs, 1):
            out[j.job_id] = (i, n)
    return out


@functools.lru_cache(maxsize=4096)
def explain(r: PendingReason) -> str:
    return r.explain()  # reasons repeat a lot across a queue: worded once each


def _nodes(job: Job) -> str:
    return job.nodes[0] if len(job.nodes) == 1 else compress(job.nodes) if job.nodes else ""


class DetailsFor:
    """may_see_details for one caller over many jobs, coordinators asked once per account."""

    def __init__(self, ctl: Controller, who: Identity) -> None:
        self.ctl, self.who = ctl, who
        self.coordinates: dict[str, bool] = {}

    def __call__(self, job: Job) -> bool:
        who = self.who
        if who.operator or who.uid == job.uid:
            return True
        seen = self.coordinates.get(job.account)
        if seen is None:  # another user's job: the answer depends on its account alone
            seen = self.coordinates[job.account] = may_see_details(self.ctl, who, job)
        return seen


def job_row(ctl: Controller, who: Identity, job: Job, now: float,
            place: tuple[int, int] | None = None,
            details: DetailsFor | None = None) -> dict[str, Any]:
    """A job as the queue shows it to `who` (the name only to those who see details)."""
    row: dict[str, Any] = {
        "id": job.display_id(), "job_id": job.job_id, "user": job.user, "account": job.account,
        "partition": job.partition, "state": job.state.value, "nodes": _nodes(job),
        "num_nodes": len(job.nodes) or job.num_nodes, "cpus": job.alloc_cpus,
        "gpus": job.alloc_gpus or job.gpus or job.gpus_per_node * job.num_nodes,
        "priority": job.priority, "submit_time": job.submit_time, "start_time": job.start_time,
        "time_limit": job.time_limit, "mine": job.uid == who.uid,
        "details": (details or DetailsFor(ctl, who))(job),
    }
    row["name"] = job.name if row["details"] else ""
    if job.state == JobState.PENDING:
        r = pending_reason(ctl, job)
        row["reason"] = r.text()
        row["why"] = explain(r)
        row["estimated_start"] = expected_start(job, now)
        if place is not None:
            row["place"], row["in_line"] = place
    return row


def queue(ctl: Controller, who: Identity, now: float, limit: int | None = None
          ) -> dict[str, Any]:
    """Pending jobs in line order, then running ones; with `limit`, the first `limit` of
    them plus every job of the caller's (a 10,000-job queue is 3 MB of JSON)."""
    places = line_order(ctl)
    details = DetailsFor(ctl, who)
    pending = sorted(ctl.pending.values(), key=lambda j: (j.partition, places[j.job_id][0]))
    running = sorted(ctl.running.values(), key=lambda j: j.job_id)
    jobs = pending + running
    if jobs_hidden(ctl):
        jobs = [j for j in jobs if details(j)]
    if limit is not None and len(jobs) > limit:
        jobs = [j for i, j in enumerate(jobs) if i < limit or j.uid == who.uid]
    rows = [job_row(ctl, who, j, now, places.get(j.job_id), details) for j in jobs]
    return {"jobs": rows, "pending": len(pending), "running": len(running),
            "shown": len(rows), "now": now, "estimates": estimate_error(ctl)}


def estimate_error(ctl: Controller) -> dict[str, Any]:
    """How right the estimated starts were: the median and p90 of |actual - first
    estimate| over the last starts that had one (controller.estimates); None before any."""
    est = ctl.estimates
    q = est.quantiles((0.5, 0.9))
    known = bool(est.errors)
    return {"starts": len(est.errors), "median_s": q[0.5] if known else None,
            "p90_s": q[0.9] if known else None, "bias_s": est.bias() if known else None}


def why(ctl: Controller, job: Job, now: float) -> dict[str, Any]:
    """`corral why`: the typed reason with its numbers, the place in line, the estimate."""
    out: dict[str, Any] = {"job_id": job.job_id, "id": job.display_id(),
                           "state": job.state.value, "partition": job.partition}
    if job.state != JobState.PENDING:
        return out
    r = pending_reason(ctl, job)
    place = line_order(ctl).get(job.job_id)
    out.update(reason=r.text(), code=r.code.name, why=r.explain(),
               requested=dict(r.requested), used=dict(r.used), available=dict(r.available),
               per_node=r.per_node, unavailable_nodes=list(r.nodes), limit=r.label,
               note=r.note, estimated_start=expected_start(job, now),
               place=place[0] if place else None, in_line=place[1] if place else None,
               priority=job.priority)
    return out


# ---- the cluster --------------------------------------------------------------------------
def node_row(n: Node, holders: dict[int, Job], samples: dict[int, dict[str, Any]],
             shown: DetailsFor | None = None) -> dict[str, Any]:
    """A node and its GPUs; with `shown`, a GPU held by a job the caller may not see
    (PrivateData=jobs) is only marked as held."""
    gpus = []
    for i in range(n.gpus):
        j = holders.get(i)
        s = samples.get(i)
        held = j is not None
        if j is not None and shown is not None and not shown(j):
            j = None
        gpus.append({"index": i, "held": held, "job_id": j.job_id if j else None,
                     "user": j.user if j else None,
                     "util": s.get("util") if s else None,
                     "memory_used": s.get("memory_used") if s else None,
                     "memory_total": s.get("memory_total") if s else None})
    return {"name": n.name, "state": node_state_short(n), "reason": n.reason or "",
            "cpus": n.cpus, "alloc_cpus": n.alloc_cpus, "memory": n.real_memory,
            "alloc_memory": n.alloc_mem, "gpu_type": n.gpu_type or "", "gpus": gpus,
            "partitions": list(n.partitions), "load": n.cpu_load}


def gpu_holders(ctl: Controller) -> dict[str, dict[int, Job]]:
    out: dict[str, dict[int, Job]] = {}
    for j in ctl.running.values():
        for a in j.alloc:
            if a.gpus:
                held = out.setdefault(a.node, {})
                for g in a.gpus:
                    held[g] = j
    return out


def _shown(ctl: Controller, who: Identity | None) -> DetailsFor | None:
    return DetailsFor(ctl, who) if who is not None and jobs_hidden(ctl) else None


def cluster(ctl: Controller, now: float, book: Any = None, who: Identity | None = None
            ) -> dict[str, Any]:
    holders = gpu_holders(ctl)
    samples = gpu_samples(book)
    shown = _shown(ctl, who)
    nodes = [node_row(n, holders.get(n.name, {}), samples.get(n.name, {}), shown)
             for n in ctl.nodes.values()]
    total = sum(n.gpus for n in ctl.nodes.values())
    used = sum(len(h) for h in holders.values())
    return {"cluster": ctl.cluster_name, "nodes": nodes, "gpus": total, "gpus_alloc": used,
            "pending": len(ctl.pending), "running": len(ctl.running), "now": now,
            "sampled": bool(samples)}


def idle_gpus(ctl: Controller, now: float, book: Any = None, who: Identity | None = None
              ) -> dict[str, Any]:
    """GPUs free for new jobs (usable nodes), and allocated GPUs whose last sample shows
    no use (where the agents sample GPUs; jobs the caller may see)."""
    holders = gpu_holders(ctl)
    samples = gpu_samples(book)
    shown = _shown(ctl, who)
    free, idle = [], []
    for n in ctl.nodes.values():
        held = holders.get(n.name, {})
        for i in range(n.gpus):
            j = held.get(i)
            if j is None:
                if n.usable:
                    free.append({"node": n.name, "index": i, "gpu_type": n.gpu_type or ""})
                continue
            s = samples.get(n.name, {}).get(i)
            if shown is not None and not shown(j):
                continue
            if s is not None and not s.get("util") and not s.get("processes"):
                idle.append({"node": n.name, "index": i, "job_id": j.job_id, "user": j.user,
                             "account": j.account, "since": j.start_time})
    return {"free": free, "allocated_idle": idle, "sampled": bool(samples), "now": now}


def node_page(ctl: Controller, n: Node, history: list[dict[str, Any]], now: float,
              book: Any = None, who: Identity | None = None) -> dict[str, Any]:
    holders = gpu_holders(ctl).get(n.name, {})
    shown = _shown(ctl, who)
    row = node_row(n, holders, gpu_samples(book).get(n.name, {}), shown)
    jobs = sorted({j.job_id for j in ctl.running.values()
                   if n.name in j.nodes and (shown is None or shown(j))})
    row.update(state_long=n.state_name(), reason_user=n.reason_user or "",
               reason_time=n.reason_time, features=list(n.features), jobs=jobs,
               last_contact=n.last_contact, boot_time=n.boot_time, history=history, now=now)
    return row


# ---- a job's page ---------------------------------------------------------------------------
def output_path(job: Job, which: str = "stdout") -> str | None:
    """Where the batch step writes its output (as launch.py expands it)."""
    if not job.batch:
        return None
    default = "slurm-%A_%a.out" if job.array_job_id is not None else "slurm-%j.out"
    pattern = (job.stderr or job.stdout or default) if which == "stderr" else \
        (job.stdout or default)
    node = job.batch_host or (job.alloc[0].node if job.alloc else "")
    p = expand_pattern(pattern, job_id=job.job_id, name=job.name, user=job.user, node=node,
                       array_job_id=job.array_job_id, array_task_id=job.array_task_id)
    return p if os.path.isabs(p) else os.path.join(job.work_dir, p)


def read_tail(path: str, uid: int, limit: int = OUTPUT_TAIL_BYTES) -> str | None:
    """The end of a job's output file, only when it is a regular file the job's owner owns,
    opened without following a link (a job could point its output at a file it may not
    read, and the controller runs as root)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return None
        start = max(0, st.st_size - limit)
        data = os.pread(fd, limit, start)
    finally:
        os.close(fd)
    text = data.decode("utf-8", "replace")
    if start > 0:
        text = text.split("\n", 1)[-1]  # from the first whole line
    return text


def timeline(job: Job, history: list[tuple[float, str, str]]) -> list[dict[str, Any]]:
    """The job's transitions: those the controller saw (events), else its timestamps."""
    if history:
        return [{"time": t, "event": kind, "state": state} for t, kind, state in history]
    out = [{"time": job.submit_time, "event": "submitted", "state": "PENDING"}]
    if job.start_time:
        out.append({"time": job.start_time, "event": "started", "state": "RUNNING"})
    if job.end_time:
        out.append({"time": job.end_time, "event": "ended", "state": job.state.value})
    return out


def job_page(ctl: Controller, job: Job, history: list[tuple[float, str, str]], now: float,
             book: Any = None, tail: bool = True) -> dict[str, Any]:
    """Everything the dashboard shows of a job: for its owner, operators, coordinators."""
    places = line_order(ctl) if job.state == JobState.PENDING else {}
    from corral.controller.state import Identity

    owner = Identity(job.uid, job.gid, job.user, False)
    d = job_row(ctl, owner, job, now, places.get(job.job_id))
    d.update(name=job.name, group=job.group, qos=job.qos, work_dir=job.work_dir,
             command=job.command or "", submit_line=job.submit_line, end_time=job.end_time,
             exit_code=f"{job.exit_code}:{job.term_signal}", restarts=job.restart_count,
             requested={"nodes": job.num_nodes, "tasks": job.num_tasks,
                        "cpus_per_task": job.cpus_per_task, "mem_per_node": job.mem_per_node,
                        "mem_per_cpu": job.mem_per_cpu, "gpus": job.gpus,
                        "gpus_per_node": job.gpus_per_node, "time_limit": job.time_limit},
             alloc=[{"node": a.node, "cpus": a.cpus, "mem_mb": a.mem_mb, "gpus": list(a.gpus)}
                    for a in job.alloc],
             timeline=timeline(job, history), notices=list(job.notices),
             stdout=output_path(job) or "", stderr=output_path(job, "stderr") or "")
    d["details"] = True
    live = getattr(book, "live", None) or {}
    job_gpu = (getattr(book, "job_gpu", None) or {}).get(job.job_id, {})
    held = {a.node: len(a.gpus) for a in job.alloc}
    # the book sums its GPUs' utilisation per node: the page shows their mean
    d["gpu_usage"] = {node: {"util": u / max(1, held.get(node, 1)), "memory_used": mem}
                      for node, (u, mem) in job_gpu.items()}
    d["steps"] = [{"step": s.step_id, "name": s.name, "state": str(s.state),
                   "start_time": s.start_time, "end_time": s.end_time,
                   "usage": dict(getattr(s, "usage", None) or {}) or
                   dict(live.get((job.job_id, s.step_id), {}))}
                  for s in job.steps]
    if tail:
        path = d["stdout"]
        d["output_tail"] = read_tail(path, job.uid) if path else None
    return d


# ---- users and accounts ---------------------------------------------------------------------
def users(ctl: Controller, who: Identity, now: float) -> dict[str, Any]:
    """Per user: jobs running and pending, CPUs and GPUs held; the association tree's usage,
    limits and fairshare (sshare's figures) for operators, else for the caller's own rows
    and the accounts above them."""
    from corral.controller.api_accounts import share_rows

    per_user: dict[str, dict[str, Any]] = {}
    for j in ctl.jobs.values():
        if not j.state.active and j.state != JobState.PENDING:
            continue
        u = per_user.setdefault(j.user, {"user": j.user, "running": 0, "pending": 0,
                                         "cpus": 0, "gpus": 0})
        if j.state == JobState.PENDING:
            u["pending"] += 1
        else:
            u["running"] += 1
            u["cpus"] += j.alloc_cpus
            u["gpus"] += j.alloc_gpus
    hide = privacy.hidden(ctl)
    admin = ctl.accounts.is_admin(who)  # type: ignore[arg-type]  # an Identity is a Caller
    if not admin and hide & {"jobs", "usage"}:
        per_user = {k: v for k, v in per_user.items() if k == who.user}
    rows = share_rows(ctl)["rows"]
    if not admin:
        mine = {r["account"] for r in rows if r["user"] == who.user}
        db = ctl.accounts.db
        coord = {r["account"] for r in rows
                 if db.is_coordinator(who.user, r["account"], ctl.cluster_name)}
        rows = [r for r in rows if r["account"] in coord
                or (r["user"] in ("", who.user) and r["account"] in mine | {"root"})]
    limits: dict[tuple[str, str], dict[str, Any]] = {}
    for a in ctl.accounts.db.iter_tree(ctl.cluster_name):
        assoc = a[1]
        limits[(assoc.account, assoc.user or "")] = {
            k: v for k, v in assoc.limits.to_dict().items() if v not in (None, {}, [])}
    for r in rows:
        r["limits"] = limits.get((r["account"], r["user"]), {})
    return {"users": sorted(per_user.values(), key=lambda u: u["user"]), "associations": rows,
            "now": now}


def me(ctl: Controller, who: Identity) -> dict[str, Any]:
    return {"user": who.user, "uid": who.uid, "operator": who.operator,
            "cluster": ctl.cluster_name, "now": time.time()}
