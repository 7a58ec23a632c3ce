"""`corral pam-adopt`: what pam_slurm_adopt does, as a helper that a PAM `account` line runs
through pam_exec.

    account  required  pam_exec.so  stdout  /usr/bin/corral pam-adopt [OPTION=VALUE…]

pam_exec passes PAM_USER, PAM_TYPE, PAM_RHOST… in the environment and forks the helper from
the sshd process that will start the user's session, so the helper's parent is that process.
The helper asks the controller (the local controller or agent socket, as every command does)
which of the user's jobs run on this node; with none, access is refused (action_no_jobs=deny);
with one, the sshd process is moved into that job's cgroup on this node, so the session's
processes are accounted to the job and killed with it.  root is always allowed.

Options are pam_slurm_adopt's, as KEY=VALUE words after the command:
  action_no_jobs=deny|allow          no running job here (default deny)
  action_unknown=newest|allow|deny   several jobs here: adopt into the newest (default),
                                     allow without adopting, or deny
  action_adopt_failure=allow|deny    the job's cgroup could not be joined (default allow)
  action_generic_failure=ignore|allow|deny
                                     the controller cannot be asked, the user is unknown…
                                     (default ignore: allow, as pam_slurm_adopt)
  nodename=NAME                      this node's name in the cluster (Corral's own; default:
                                     $SLURMD_NODENAME, else the short host name)
  log_level=…, disable_x11=…, join_container=…  accepted and not acted on
Exit status: 0 allows, 1 refuses (pam_exec turns any other status into a PAM error).
"""

from __future__ import annotations

import argparse
import os
import pwd
import socket
import stat
import sys
from typing import Any

from corral.cli import client

PROG = "pam_slurm_adopt"  # the name users see in the refusal, as with Slurm
CGROUP_ROOT = "/sys/fs/cgroup"
CHOICES = {
    "action_no_jobs": ("deny", "allow"),
    "action_unknown": ("newest", "allow", "deny"),
    "action_adopt_failure": ("allow", "deny"),
    "action_generic_failure": ("ignore", "allow", "deny"),
}
DEFAULTS = {"action_no_jobs": "deny", "action_unknown": "newest",
            "action_adopt_failure": "allow", "action_generic_failure": "ignore"}
IGNORED = ("log_level", "disable_x11", "join_container", "nodename")
ALLOW, DENY = 0, 1


class OptionError(ValueError):
    pass


def parse_options(words: list[str]) -> dict[str, str]:
    """pam_slurm_adopt's KEY=VALUE options, checked; defaults filled in."""
    opts = dict(DEFAULTS)
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or (key not in CHOICES and key not in IGNORED):
            raise OptionError(f"unknown option '{word}'")
        if key in CHOICES and value not in CHOICES[key]:
            raise OptionError(f"bad value '{value}' for {key} "
                              f"(one of {', '.join(CHOICES[key])})")
        opts[key] = value
    return opts


def this_node(opts: dict[str, str]) -> str:
    return (opts.get("nodename") or os.environ.get("SLURMD_NODENAME")
            or socket.gethostname().split(".")[0])


def _say(message: str) -> None:
    # pam_exec's `stdout` option shows this to the ssh user; the log gets stderr
    print(f"Access denied by {PROG}: {message}" if message else "", flush=True)


def running_jobs(user: str, node: str) -> list[dict[str, Any]]:
    answer = client.get("/v1/jobs", users=user, states="RUNNING", nodes=node,
                        fields="job_id,user,state,start_time")
    return [j for j in answer.get("jobs", []) if j.get("user") == user]


def _safe_dir(root: str, rel_parts: list[str]) -> str | None:
    """root/rel as a real directory (no symlink at any level, owned by root), else None:
    the path is built from fixed names and numbers, and checked before anything is written."""
    path = root
    for part in rel_parts:
        if not part or part in (".", "..") or "/" in part:
            return None
        path = os.path.join(path, part)
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
            return None
    return path


def job_group_dirs(job_id: int, cluster: str, root: str = CGROUP_ROOT) -> list[str]:
    """The directories of the job's group to join, one per hierarchy (one on cgroup v2, one per
    controller on v1): its batch step's group where the batch step runs here, else its
    lowest-numbered step's, as those are killed when the job ends."""
    from corral.agent.cgroup import V1_CONTROLLERS, detect_version

    version = detect_version(root)
    if version is None:
        return []
    bases = [[]] if version == 2 else [[c] for c in V1_CONTROLLERS]
    job_parts = ["corral", cluster, f"job_{int(job_id)}"]
    for base in bases:
        job_dir = _safe_dir(root, base + job_parts)
        if job_dir is None:
            continue
        steps = [s for s in os.listdir(job_dir) if s.startswith("step_")]
        if not steps:
            continue
        names = sorted(steps, key=lambda s: (s != "step_batch", len(s), s))
        step = names[0]
        dirs = []
        for b in bases:
            d = _safe_dir(root, b + job_parts + [step])
            if d is not None:
                dirs.append(d)
        return dirs
    return []


def adopt(pid: int, dirs: list[str]) -> None:
    """Move `pid` (the sshd session process) into the job's group; OSError if it fails."""
    if not dirs:
        raise OSError("the job has no cgroup on this node")
    for d in dirs:
        fd = os.open(os.path.join(d, "cgroup.procs"), os.O_WRONLY | os.O_NOFOLLOW)
        try:
            os.write(fd, str(pid).encode())
        finally:
            os.close(fd)


def decide(opts: dict[str, str], env: dict[str, str], pid: int) -> int:
    if env.get("PAM_TYPE", "account") not in ("account", "open_session"):
        return ALLOW  # only the account (and session) stage is ours to judge
    user = env.get("PAM_USER", "")

    def generic(why: str) -> int:
        print(f"{PROG}: {why}", file=sys.stderr)
        if opts["action_generic_failure"] == "deny":
            _say(why)
            return DENY
        return ALLOW

    try:
        uid = pwd.getpwnam(user).pw_uid
    except (KeyError, ValueError):
        return generic(f"unknown user '{user}'")
    if uid == 0:
        return ALLOW
    node = this_node(opts)
    try:
        jobs = running_jobs(user, node)
    except (client.NotRunning, client.ApiError, OSError) as e:
        return generic(f"cannot ask the controller: {e}")
    if not jobs:
        if opts["action_no_jobs"] == "allow":
            return ALLOW
        _say("you have no active jobs on this node")
        return DENY
    if len(jobs) > 1:
        if opts["action_unknown"] == "allow":
            return ALLOW
        if opts["action_unknown"] == "deny":
            _say("you have more than one job on this node")
            return DENY
    job = max(jobs, key=lambda j: (j.get("start_time") or 0, int(j["job_id"])))
    from corral import paths
    from corral.agent.cgroup import cluster_group_name

    cluster = cluster_group_name(paths.corral_home())  # the agent's home
    try:
        adopt(pid, job_group_dirs(int(job["job_id"]), cluster))
    except OSError as e:
        print(f"{PROG}: could not adopt process {pid} into job {job['job_id']}: {e}",
              file=sys.stderr)
        if opts["action_adopt_failure"] == "deny":
            _say(f"could not adopt the session into job {job['job_id']}")
            return DENY
        return ALLOW
    print(f"{PROG}: process {pid} adopted into job {job['job_id']}", file=sys.stderr)
    return ALLOW


def add_parser(sub: Any) -> None:
    p = sub.add_parser("pam-adopt", help="PAM account helper (pam_exec): ssh only onto nodes "
                       "where the user has a job, into that job's cgroup (pam_slurm_adopt)")
    p.add_argument("options", nargs="*", metavar="OPTION=VALUE",
                   help="pam_slurm_adopt's options: action_no_jobs=deny|allow, …")
    p.set_defaults(fn=cmd_pam_adopt)


def cmd_pam_adopt(args: argparse.Namespace) -> int:
    try:
        opts = parse_options(args.options)
    except OptionError as e:
        print(f"corral pam-adopt: error: {e}", file=sys.stderr)
        return 2
    return decide(opts, dict(os.environ), os.getppid())
