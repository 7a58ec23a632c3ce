"""scrontab in the controller: each user's crontab, its recurring jobs, and their routes.

As slurmctld does (src/slurmctld/crontab.c, 22.05): each cron entry is a batch job whose
begin time is the entry's next start; when it ends it is requeued, same job id, for the
following start; `scancel` of it stops the recurrence and disables its lines (`scrontab
-l` shows them as `#DISABLED:`).  A new crontab replaces the old one whole: its jobs are
made first (none are kept if one fails, and the failing lines are reported), then the old
entries' pending jobs are cancelled and their running ones lose the recurrence.

Each user's record (the file, its disabled lines, its job ids) is written through the
controller's group-commit writer (store migration 5); the jobs themselves are ordinary job
records, so both survive a restart.
"""

from __future__ import annotations

import asyncio
import logging
import pwd
from typing import Any

from aiohttp import web

from corral.controller.errors import ESLURM_USER_ID_MISSING, SlurmError
from corral.controller.jobs import JobEvent, JobEventKind
from corral.model.crontab import CronEntry, CronError, next_start_epoch, parse_cron_line
from corral.model.job import Job, JobState, Reason
from corral.store.base import CrontabRecord

log = logging.getLogger("corral.controller")

ESLURM_SCRON_DISABLED = 0  # slurmctld answers SLURM_ERROR; scrontab checks the config first


def _err(message: str, errno: int, **extra: Any) -> SlurmError:
    e = SlurmError(message, errno, 400)
    e.extra = extra  # type: ignore[attr-defined]  # added to the answer's JSON
    return e


def enabled(ctl: Any) -> bool:
    return "enable" in ctl.config.options.get("ScronParameters", "").lower()


class CrontabBook:
    """Every user's crontab record: {"crontab": text, "disabled": "3-4,", "jobs": [ids]}."""

    def __init__(self, ctl: Any) -> None:
        self.ctl = ctl
        try:
            self.by_uid: dict[int, dict[str, Any]] = ctl.store.load_crontabs()
        except Exception:
            log.exception("could not load the crontabs")
            self.by_uid = {}
        ctl.table.subscribe(self.on_event)

    def save(self, uid: int) -> None:
        self.ctl.writer.crontab(CrontabRecord(uid, self.by_uid.get(uid)))

    def entry_of(self, job: Job) -> CronEntry | None:
        if not job.cron_spec:
            return None
        try:
            return parse_cron_line(job.cron_spec + " x")
        except CronError:
            return None

    # ---- a cron job ended: requeue it for its next start, or disable it -------------
    def on_event(self, ev: JobEvent) -> None:
        job = ev.job
        if not job.cron_job:
            return
        if ev.kind == JobEventKind.REQUEUED:
            # requeued while running (node failure, scontrol requeue): it waits for its
            # next start, not for requeue's short delay
            self._wait_for_next_start(job)
            return
        if ev.kind != JobEventKind.ENDED:
            return
        if job.state == JobState.CANCELLED:
            self._disable(job)
            return
        try:
            asyncio.get_running_loop().call_soon(self._requeue, job)
        except RuntimeError:  # no loop (a unit test's table): requeue now
            self._requeue(job)

    def _requeue(self, job: Job) -> None:
        ctl = self.ctl
        entry = self.entry_of(job)
        if entry is None or not job.state.finished or not job.cron_job:
            return
        # its REQUEUED event (on_event) sets the begin time to the next start
        ctl.requeue_job(job, ctl.clock(), hold=False)
        ctl.request_schedule()
        log.info("cron job %d requeued, next start %.0f", job.job_id, job.begin_time or 0)

    def _wait_for_next_start(self, job: Job) -> None:
        entry = self.entry_of(job)
        if entry is None:
            return
        job.begin_time = next_start_epoch(entry, self.ctl.clock())
        if not job.held:
            job.reason = Reason.BEGIN_TIME
        self.ctl.mark(job)

    def _disable(self, job: Job) -> None:
        """scancel of a cron job: Slurm comments its lines out (`#DISABLED:`)."""
        job.cron_job = False
        self.ctl.mark(job)
        rec = self.by_uid.get(job.uid)
        if rec is None or job.job_id not in rec.get("jobs", []):
            return
        span = rec.get("lines", {}).get(str(job.job_id))
        if span:
            rec["disabled"] = rec.get("disabled", "") + f"{span},"
        self.save(job.uid)

    # ---- replacing a user's crontab -----------------------------------------------
    async def replace(self, who: Any, uid: int, gid: int, text: str | None,
                      jobs: list[dict[str, Any]]) -> list[int]:
        ctl = self.ctl
        target = ctl.identity(uid, gid)
        made: list[tuple[Job, str]] = []
        now = ctl.clock()
        for item in jobs if text is not None else []:
            span = f"{int(item.get('line_start', 0))}-{int(item.get('line_end', 0))}"
            try:
                entry = parse_cron_line(str(item.get("cron", "")))
                payload = item.get("payload") or {}
                spec = dict(payload.get("spec") or {})
                spec["begin_time"] = next_start_epoch(entry, now)
                job = await ctl.submit(target, spec, payload.get("script", ""),
                                       payload.get("env", {}), payload.get("argv", []),
                                       None, payload.get("open_mode", "truncate"))
            except (SlurmError, CronError, TypeError, ValueError) as e:
                for old, _ in made:  # none of a failed crontab's jobs is kept
                    old.cron_job = False
                    ctl.finish_pending(old, JobState.CANCELLED, ctl.clock(), by=who.uid)
                if isinstance(e, SlurmError):
                    raise _err(e.message, e.errno, failed_lines=span) from None
                raise _err("Invalid job description", 0, failed_lines=span) from None
            job.cron_job = True
            job.cron_spec = entry.spec()
            ctl.mark(job)
            made.append((job, span))
        # the old entries: pending jobs cancelled, running ones run out without recurring
        new_ids = {j.job_id for j, _ in made}
        before = self.by_uid.get(uid) or {}
        for jid in before.get("jobs", []):
            old_job = ctl.jobs.get(jid)
            if old_job is None or jid in new_ids or not old_job.cron_job:
                continue
            old_job.cron_job = False
            if old_job.state == JobState.PENDING:
                ctl.finish_pending(old_job, JobState.CANCELLED, ctl.clock(), by=who.uid)
            ctl.mark(old_job)
        if text is None:
            self.by_uid.pop(uid, None)
        else:
            self.by_uid[uid] = {"crontab": text, "disabled": "",
                                "jobs": [j.job_id for j, _ in made],
                                "lines": {str(j.job_id): span for j, span in made}}
        self.save(uid)
        ctl.request_schedule()
        await ctl.durable()
        return [j.job_id for j, _ in made]


def book_of(ctl: Any) -> CrontabBook:
    book = getattr(ctl, "_crontab_book", None)
    if book is None:
        book = CrontabBook(ctl)
        ctl._crontab_book = book
    return book


def _target(ctl: Any, who: Any, user: Any, *, write: bool) -> tuple[int, int]:
    """The crontab's owner: the caller, or with -u another user's, which operators may
    read and only root and SlurmUser may change (slurmctld's validate_operator and
    validate_slurm_user)."""
    if user is None or user == "":
        return who.uid, who.gid
    try:
        pw = pwd.getpwnam(str(user)) if not str(user).isdigit() else pwd.getpwuid(int(user))
    except KeyError:
        raise SlurmError("Invalid user id", ESLURM_USER_ID_MISSING) from None
    allowed = who.operator and (not write or who.uid in ctl._super_user_uids())
    if pw.pw_uid != who.uid and not allowed:
        raise SlurmError("Invalid user id", ESLURM_USER_ID_MISSING)
    return pw.pw_uid, pw.pw_gid


def _check_enabled(ctl: Any) -> None:
    if not enabled(ctl):
        raise _err("scrontab is disabled on this cluster", ESLURM_SCRON_DISABLED, disabled=True)


def add_routes(router: web.UrlDispatcher, ctl: Any) -> None:
    from corral.controller.server import json_body, json_response, peer_identity

    book_of(ctl)  # loaded and subscribed at startup: a restart keeps the recurrences

    async def show(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        _check_enabled(ctl)
        uid, _ = _target(ctl, who, request.query.get("user"), write=False)
        rec = book_of(ctl).by_uid.get(uid)
        return json_response({"crontab": rec["crontab"] if rec else None,
                              "disabled_lines": rec.get("disabled", "") if rec else ""})

    async def update(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        _check_enabled(ctl)
        body = await json_body(request)
        uid, gid = _target(ctl, who, body.get("user"), write=True)
        text = body.get("crontab")
        jobs = body.get("jobs") or []
        if (text is not None and not isinstance(text, str)) or not isinstance(jobs, list):
            raise SlurmError("Malformed request", 0)
        ids = await book_of(ctl).replace(who, uid, gid, text, jobs)
        return json_response({"job_ids": ids})

    async def remove(request: web.Request) -> web.Response:
        who = peer_identity(request, ctl)
        _check_enabled(ctl)
        uid, gid = _target(ctl, who, request.query.get("user"), write=True)
        await book_of(ctl).replace(who, uid, gid, None, [])
        return json_response({"ok": True})

    router.add_get("/v1/crontab", show)
    router.add_put("/v1/crontab", update)
    router.add_delete("/v1/crontab", remove)
