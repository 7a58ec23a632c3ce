"""HTTP routes of sacctmgr, sshare, sprio and sreport (controller/accounts.py behind the
sacctmgr ones).

    POST /v1/accounts        {"op", "entity", "names", "where", "set", "options", "commit"}
                             → {"changes": a change set or null, "changed": bool, "rows": [...]}
    GET  /v1/accounts/dump?cluster=NAME → {"text": the flat file}
    POST /v1/accounts/load   {"text", "commit"} → {"changes", "changed", "rows": []}
    GET  /v1/accounts/events?start=&end=&nodes= → {"events": [...]} (sacctmgr list event)

A change set is `assoc_changes.ChangeSet.to_dict()`: the command renders Slurm's text from
it.  A refusal answers {"error": sacctmgr's text, "errno"}; the HTTP status is this
layer's choice: 403 for ESLURM_ACCESS_DENIED, 400 for the rest.  `add_routes(router, ctl)`
is the one call the server makes; the `Accounts` object is the controller's
(`ctl.accounts`), which the scheduling pass and submission read.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from aiohttp import web

from corral import jsonio
from corral.controller.accounts import NO_DUMP, Caller
from corral.controller.api_common import json_response, peer_identity, query_epoch
from corral.controller.errors import ESLURM_ACCESS_DENIED, SlurmError
from corral.controller.history import compact_state


def http_status(e: SlurmError) -> int:
    """The HTTP status a sacctmgr refusal answers with."""
    return 403 if e.errno == ESLURM_ACCESS_DENIED else 400


def node_events(ctl: Any, start: float | None, end: float | None,
                nodes: list[str] | None) -> list[dict[str, Any]]:
    """Recorded node events, plus each node now down or drained with a reason that has no
    open recorded event (the controller records events as nodes change: the live state
    covers what happened before it did, and a store without history)."""
    import pwd

    store = ctl.store
    recorded = store.query_events(cluster=ctl.cluster_name, start=start, end=end, nodes=nodes) \
        if hasattr(store, "query_events") else []
    open_nodes = {e.node for e in recorded if e.end is None}
    rows = [{"cluster": e.cluster, "node": e.node, "start": e.start, "end": e.end,
             "state": e.state, "reason": e.reason, "uid": e.reason_uid} for e in recorded]
    for n in ctl.nodes.values():
        if n.name in open_nodes or (nodes is not None and n.name not in nodes):
            continue
        out = n.admin_state in ("down", "drain") or not n.responding
        if not out or not n.reason:
            continue
        t = n.reason_time or 0.0
        if end is not None and t >= end:
            continue
        rows.append({"cluster": ctl.cluster_name, "node": n.name, "start": t, "end": None,
                     "state": compact_state(n), "reason": n.reason, "uid": n.reason_uid})
    for r in rows:
        uid = r.pop("uid")
        if uid is None:
            r["user"] = ""
            continue
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = str(uid)
        r["user"] = f"{name}({uid})"
    rows.sort(key=lambda r: (r["start"], r["node"]))
    return rows


def add_routes(router: web.UrlDispatcher, ctl: Any) -> None:
    from corral.controller import privacy

    lock = asyncio.Lock()
    acc = ctl.accounts

    def caller_of(request: web.Request) -> Caller:
        who = peer_identity(request, ctl)
        acc.private_data = privacy.hidden(ctl)  # slurm.conf's, as reconfigured
        # a joined machine's signature vouches for its users, never for their AdminLevel
        return Caller(who.user, who.operator, remote=who.remote)

    async def run(fn: Any) -> Any:
        # SQLite commits (an fsync) leave the event loop free; the in-memory store is inline
        if getattr(acc.store, "inline", False):
            return fn()
        return await asyncio.to_thread(fn)

    async def body(request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        data = jsonio.loads(raw) if raw else {}
        if not isinstance(data, dict):
            raise SlurmError(" Malformed request")
        return data

    def refused(e: SlurmError) -> web.Response:
        return json_response({"error": e.message, "errno": e.errno}, http_status(e))

    async def handle(request: web.Request) -> web.Response:
        caller = caller_of(request)
        try:
            req = await body(request)
            async with lock:
                # the active jobs as the loop sees them now: the worker thread reads this copy
                active = list(acc.active_jobs())
                out = await run(lambda: acc.execute(caller, req, active))
        except SlurmError as e:
            return refused(e)
        return json_response(out.to_dict())

    async def dump(request: web.Request) -> web.Response:
        if not acc.is_super(caller_of(request)):
            return refused(SlurmError(NO_DUMP, ESLURM_ACCESS_DENIED))
        try:
            text = acc.dump(request.query.get("cluster") or ctl.cluster_name)
        except SlurmError as e:
            return refused(e)
        return json_response({"text": text})

    async def load(request: web.Request) -> web.Response:
        caller = caller_of(request)
        try:
            req = await body(request)
            text = str(req.get("text", ""))
            commit = bool(req.get("commit", True))
            async with lock:
                out = await run(lambda: acc.load(caller, text, commit))
        except SlurmError as e:
            return refused(e)
        return json_response(out.to_dict())

    async def events(request: web.Request) -> web.Response:
        peer_identity(request, ctl)
        q = request.query
        try:
            start = query_epoch(q["start"]) if q.get("start") else None
            end = query_epoch(q["end"]) if q.get("end") else None
        except ValueError:
            return refused(SlurmError(" Invalid time in request"))
        nodes = [x for x in q.get("nodes", "").split(",") if x] or None
        if nodes:
            from corral.model import hostlists

            try:
                nodes = [n for spec in nodes for n in hostlists.expand(spec)]
            except hostlists.HostlistError:
                return refused(SlurmError(" Invalid node name specified"))
        return json_response({"events": node_events(ctl, start, end, nodes)})

    async def sshare(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        out = share_rows(ctl)
        if "usage" in privacy.hidden(ctl):  # other users' rows only to coordinators
            out["rows"] = [r for r in out["rows"] if not r["user"]
                           or privacy.sees_user_of(ctl, who, r["user"], r["account"])]
        return json_response(out)

    async def sprio(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        out = priority_rows(ctl)
        if "jobs" in privacy.hidden(ctl):
            out["jobs"] = [j for j in out["jobs"]
                           if privacy.sees_user_of(ctl, who, j["user"], j["account"])]
        return json_response(out)

    async def sreport(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        q = request.query
        try:
            start, end = query_epoch(q["start"]), query_epoch(q["end"])
        except (KeyError, ValueError):
            return refused(SlurmError(" Invalid time in request"))
        if end <= start:
            return refused(SlurmError(" Start time must be before end time"))
        found = await run(lambda: ctl.store.query_jobs(start=start, end=end))
        out = usage_report(ctl, start, end, found)
        if "usage" in privacy.hidden(ctl):  # other users' usage only to coordinators
            out["assocs"] = [r for r in out["assocs"] if not r["user"]
                             or privacy.sees_user_of(ctl, who, r["user"], r["account"])]
            out["users"] = [u for u in out["users"] if any(
                privacy.sees_user_of(ctl, who, u["user"], a) for a in u["accounts"] or [""])]
        return json_response(out)

    router.add_get("/v1/sreport", sreport)
    router.add_get("/v1/sshare", sshare)
    router.add_get("/v1/sprio", sprio)
    router.add_post("/v1/accounts", handle)
    router.add_get("/v1/accounts/events", events)
    router.add_get("/v1/accounts/dump", dump)
    router.add_post("/v1/accounts/load", load)


def share_rows(ctl: Any) -> dict[str, Any]:
    """sshare's data: every association of this cluster in tree order with its shares,
    usage and fairshare factor (sched/fairshare.py), users' factors under Fair Tree."""
    from corral.sched import fairshare as fs

    db = ctl.accounts.db
    infos = fs.fairshare_factors(db, ctl.cluster_name, ctl.usage.assoc, ctl.fair_params.fair_tree)
    minutes = fs.tres_minutes(fs.tree_usage(db, ctl.cluster_name, ctl.usage.assoc))  # type: ignore[arg-type]
    run_mins: dict[int, dict[str, float]] = {}
    for j in ctl.running.values():
        a = db.job_assoc(ctl.cluster_name, j.user, j.account, j.partition)
        if a is None or j.time_limit <= 0 or j.start_time is None:
            continue
        left = max(0.0, (j.start_time + j.time_limit - ctl.clock()) / 60)
        from corral.sched.limits_check import job_request

        for x in db.chain(a):
            d = run_mins.setdefault(x.id, {})
            for k, v in job_request(j).tres.items():
                d[k] = d.get(k, 0.0) + v * left
    rows = []
    for depth, a in db.iter_tree(ctl.cluster_name):
        i = infos.get(a.id)
        rows.append({
            "depth": depth, "account": a.account, "user": a.user or "",
            "partition": a.partition or "", "raw_shares": a.shares,
            "norm_shares": i.norm_shares if i else 0.0, "raw_usage": i.raw_usage if i else 0.0,
            "norm_usage": i.norm_usage if i else 0.0,
            "effective_usage": i.effective_usage if i else 0.0,
            # JSON has no infinity: a non-finite LevelFS goes out as "inf" (or "nan")
            "level_fs": _json_number(i.level_fs) if i else 0.0,
            "fairshare": i.fairshare if i else 0.0,
            "grp_tres_mins": a.limits.to_dict().get("grp_tres_mins") or {},
            "tres_mins": minutes.get(a.id, {}),
            "tres_run_mins": run_mins.get(a.id, {}),
        })
    return {"rows": rows, "fair_tree": ctl.fair_params.fair_tree}


def priority_rows(ctl: Any) -> dict[str, Any]:
    """sprio's data: each pending job's priority factors, normalised and weighted."""
    from corral.sched.pipeline import assoc_factor_of, fairshare_of
    from corral.sched.priority import components

    params = ctl.pass_params().priority
    light = ctl.policy_snapshot_light()
    fs = fairshare_of(light, ctl.sched_params)
    af = assoc_factor_of(light, ctl.sched_params)
    now = ctl.clock()
    w = params.weights
    jobs = []
    for j in sorted(ctl.pending.values(), key=lambda x: x.job_id):
        if j.held or j.is_array_meta and not j.array_tasks:
            continue
        c = components(j, now, params, ctl.partitions, fs, af)
        jobs.append({"job_id": j.job_id, "display_id": j.display_id(),
                     "partition": j.partition, "user": j.user,
                     "account": j.account, "qos": j.qos, "priority": c.priority,
                     "site": 0, "age": c.age, "assoc": c.assoc, "fairshare": c.fairshare,
                     "job_size": c.job_size, "partition_factor": c.partition, "qos_factor": c.qos,
                     "nice": c.nice, "tres": dict(c.tres)})
    return {"jobs": jobs, "weights": {"age": w.age, "assoc": w.assoc, "fairshare": w.fairshare,
                                      "job_size": w.job_size, "partition": w.partition,
                                      "qos": w.qos, "tres": dict(w.tres)}}


def _job_tres(job: Any) -> dict[str, int]:
    """What a job held, per TRES (cpu, mem in MB, node, gres/gpu)."""
    alloc = list(job.alloc or ())
    out = {"cpu": sum(a.cpus for a in alloc), "mem": sum(a.mem_mb for a in alloc),
           "node": len(alloc)}
    gpus = sum(len(a.gpus) for a in alloc)
    if gpus:
        out["gres/gpu"] = gpus
    return out


def _node_tres(n: Any) -> dict[str, int]:
    return {"cpu": int(n.cpus), "mem": int(n.real_memory), "node": 1,
            "gres/gpu": int(n.gpus or 0)}


def _add(d: dict[str, float], tres: dict[str, int], secs: float) -> None:
    for k, v in tres.items():
        if v:
            d[k] = d.get(k, 0.0) + v * secs


def usage_report(ctl: Any, start: float, end: float, stored: list[Any]) -> dict[str, Any]:
    """sreport's data for [start, end): TRES-seconds per TRES of the cluster (reported =
    its capacity over the window, down = nodes down or drained, allocated = jobs), and
    per association in tree order (an account's row holds everything below it), from the
    job records (the store's and the live ones) and the node events."""
    now = ctl.clock()
    jobs = {j.job_id: j for j in stored}
    jobs.update({j.job_id: j for j in list(ctl.jobs.values()) if j.start_time is not None})
    per_pair: dict[tuple[str, str], dict[str, float]] = {}
    allocated: dict[str, float] = {}
    for j in jobs.values():
        if j.start_time is None or not j.alloc:
            continue
        stop = j.end_time if j.end_time is not None else now
        secs = min(stop, end) - max(j.start_time, start)
        if secs <= 0:
            continue
        tres = _job_tres(j)
        _add(allocated, tres, secs)
        _add(per_pair.setdefault((j.user, j.account or ""), {}), tres, secs)
    capacity: dict[str, int] = {}
    for n in ctl.nodes.values():
        for name, count in _node_tres(n).items():
            capacity[name] = capacity.get(name, 0) + count
    span = max(0.0, min(end, now) - start)
    reported = {k: v * span for k, v in capacity.items()}
    down: dict[str, float] = {}
    for e in node_events(ctl, start, end, None):
        n = ctl.nodes.get(e["node"])
        if n is None:
            continue
        secs = min(e["end"] if e["end"] is not None else now, end, now) - max(e["start"], start)
        if secs > 0:
            _add(down, _node_tres(n), secs)
    db = ctl.accounts.db
    rows: list[dict[str, Any]] = []
    for depth, a in db.iter_tree(ctl.cluster_name):
        used: dict[str, float] = {}
        if a.user:
            used = dict(per_pair.get((a.user, a.account), {}))
        else:
            below = db.subaccounts(ctl.cluster_name, a.account)
            for (_u, acct), d in per_pair.items():
                if acct in below or a.account == "root":
                    for k, v in d.items():
                        used[k] = used.get(k, 0.0) + v
        rows.append({"depth": depth, "account": a.account, "user": a.user or "",
                     "used": used})
    users: dict[str, dict[str, Any]] = {}
    for (u, acct), d in per_pair.items():
        row = users.setdefault(u, {"user": u, "accounts": [], "used": {}})
        if acct and acct not in row["accounts"]:
            row["accounts"].append(acct)
        for k, v in d.items():
            row["used"][k] = row["used"].get(k, 0.0) + v
    return {"cluster": ctl.cluster_name, "start": start, "end": end,
            "capacity": capacity, "reported": reported, "down": down,
            "allocated": allocated, "assocs": rows, "users": list(users.values())}


def _json_number(x: float) -> float | str:
    return x if math.isfinite(x) else repr(x)
