"""Who is calling, and what they may do: the caller's identity, the operators
(root, the controller's own uid, SlurmUser, AdminUsers) and account coordinators.

Authorization lives here and in the use cases above the core (controller/usecases.py);
the core's own transitions carry none, so preemption and idle-GPU reclaim reuse them."""

from __future__ import annotations

import functools
import os
import pwd

from corral.controller.core import AssocSource
from corral.controller.errors import access_denied
from corral.model.config import ClusterConfig
from corral.model.job import Job


class Identity:
    __slots__ = ("uid", "gid", "user", "operator", "remote")

    def __init__(self, uid: int, gid: int, user: str, operator: bool,
                 remote: bool = False) -> None:
        self.uid, self.gid, self.user, self.operator = uid, gid, user, operator
        # signed by a joined machine: no operator rights, no AdminLevel rights
        self.remote = remote


@functools.lru_cache(maxsize=4096)
def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@functools.lru_cache(maxsize=4096)
def group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _uid_of(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return int(name) if name.isdigit() else None


class Authority:
    def __init__(self, config: ClusterConfig, accounts: AssocSource, cluster_name: str) -> None:
        self.accounts = accounts
        self.cluster_name = cluster_name
        self.own_uid = os.geteuid()
        self.reload(config)

    def reload(self, config: ClusterConfig) -> None:
        """The operators of slurm.conf (again, after `scontrol reconfigure`)."""
        slurm_user = config.options.get("SlurmUser", "root").strip()
        # root and SlurmUser (Slurm's validate_slurm_user): RootOnly and AllowGroups let
        # them through; the controller's own uid counts as SlurmUser
        self.super_users = {0, self.own_uid}
        uid = _uid_of(slurm_user)
        if uid is not None:
            self.super_users.add(uid)
        self.operators = set(self.super_users)
        for name in config.options.get("AdminUsers", "").split(","):
            name = name.strip()
            uid = _uid_of(name) if name else None
            if uid is not None:
                self.operators.add(uid)

    def identity(self, uid: int, gid: int) -> Identity:
        return Identity(uid, gid, user_name(uid), uid in self.operators)

    def check_owner(self, who: Identity, job: Job) -> None:
        if not who.operator and who.uid != job.uid:
            raise access_denied()

    def is_coordinator_of(self, who: Identity, job: Job) -> bool:
        """`who` coordinates the job's account (or an account above it) and the job is
        someone else's: Slurm lets an account's coordinators hold, release, cancel,
        requeue and update the jobs of its users as an operator would."""
        return (who.uid != job.uid and bool(job.account)
                and self.accounts.db.is_coordinator(who.user, job.account, self.cluster_name))

    def as_job_operator(self, who: Identity, job: Job) -> Identity:
        """The caller as it acts on `job`: an operator when it coordinates the job's
        account (slurmctld's update_job sets `operator = true` for a coordinator)."""
        if who.operator or not self.is_coordinator_of(who, job):
            return who
        return Identity(who.uid, who.gid, who.user, True)

    def check_job_control(self, who: Identity, job: Job) -> None:
        """cancel, signal and requeue: the owner, an operator or the account's coordinator."""
        if not who.operator and who.uid != job.uid and not self.is_coordinator_of(who, job):
            raise access_denied()
