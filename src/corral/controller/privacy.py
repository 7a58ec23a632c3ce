"""Who may see what of other users' work: slurm.conf's `PrivateData`, and submit lines.

Slurm's `PrivateData=jobs,usage,accounts,users` (slurm.conf(5)) hides, from users who are
neither operators (root, SlurmUser, AdminUsers, AdminLevel Operator or Administrator on
the controller's machine) nor coordinators:
- `jobs`: other users' jobs (squeue, scontrol show job, sacct);
- `usage`: other users' usage (sshare, sreport);
- `accounts`: accounts the user has no association with and does not coordinate;
- `users`: other users (sacctmgr show user / association).
Without it, everyone sees everything but the submit line, which can hold secrets
(`--export=TOKEN=…`, `--wrap` text): only its owner, operators and the coordinators of the
job's account see it (the environment and script are never served to anyone).
"""

from __future__ import annotations

from typing import Any

KINDS = ("jobs", "usage", "accounts", "users")
# job fields only the job's owner, operators and its account's coordinators see
PRIVATE_JOB_FIELDS = ("submit_line",)


def private_data(options: dict[str, str]) -> frozenset[str]:
    """slurm.conf's PrivateData: the kinds hidden from other users (`all` for every one;
    unknown words, such as Slurm's cloud/events/nodes/partitions/reservations, are
    accepted and change nothing here)."""
    raw = options.get("PrivateData") or ""
    words = {w.strip().lower() for w in raw.split(",") if w.strip()}
    if "all" in words:
        return frozenset(KINDS)
    return frozenset(w for w in words if w in KINDS)


def hidden(ctl: Any) -> frozenset[str]:
    return private_data(ctl.config.options)


def sees_job_of(ctl: Any, who: Any, uid: int, account: str | None) -> bool:
    """`who` may see the private parts of a job of `uid` under `account`."""
    if who.operator or who.uid == uid or ctl.accounts.is_admin(who):
        return True
    return bool(account) and ctl.accounts.db.is_coordinator(who.user, account,
                                                              ctl.cluster_name)


def redact(view: dict[str, Any]) -> dict[str, Any]:
    """A job's dict without its private fields."""
    for f in PRIVATE_JOB_FIELDS:
        if f in view:
            view[f] = ""
    for step in view.get("steps") or ():  # a step's command line is as private
        if isinstance(step, dict):
            for f in PRIVATE_JOB_FIELDS:
                if f in step:
                    step[f] = ""
    return view


def sees_user_of(ctl: Any, who: Any, user: str, account: str | None) -> bool:
    """`who` may see `user`'s usage or record (PrivateData=usage/users): themselves,
    operators (AdminLevel too), and the coordinators of the account."""
    if who.operator or who.user == user or ctl.accounts.is_admin(who):
        return True
    return bool(account) and ctl.accounts.db.is_coordinator(who.user, account,
                                                              ctl.cluster_name)
