"""scancel: cancel or signal jobs, by id or by filters, with Slurm 22.05's messages.

Jobs named by id are signalled directly (the controller resolves 7, 7_2, 7_[1-3]);
with filters (-A, -u, -p, -t, -n, -w, --me) or -i the matching active jobs are fetched
first and each is signalled in turn.
"""

from __future__ import annotations

import os
import pwd
import sys
import time

from corral.cli import client
from corral.cli import gnugetopt as getopt
from corral.cli.client import quote
from corral.lazyre import LazyPattern
from corral.model.arrays import check_bracket_ranges, format_task_ids

TYPE_CHECKING = False  # annotations only: `typing` would cost every start ~3 ms
if TYPE_CHECKING:
    from typing import Any

PROG = "scancel"
SLURM_VERSION = "22.05.8"
SIGKILL = 9

# Linux signal numbers, by the names scancel accepts (with or without "SIG").
SIGNALS = {"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8,
           "KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
           "STKFLT": 16, "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21,
           "TTOU": 22, "URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27,
           "WINCH": 28, "IO": 29, "PWR": 30, "SYS": 31}
_STATES = {"PENDING": "PENDING", "PD": "PENDING", "RUNNING": "RUNNING", "R": "RUNNING",
           "SUSPENDED": "SUSPENDED", "S": "SUSPENDED"}


class UsageError(Exception):
    """Bad command line; the message is complete (Slurm's wording), exit code 1."""


class JobRef(tuple[str, str | None]):
    """One job argument: "12", "7_2", "7_[1-3]" (step: "12.0").

    A (job, step) tuple; not a typing.NamedTuple, whose import costs ~3 ms of start time.
    """

    __slots__ = ()

    def __new__(cls, job: str, step: str | None = None) -> JobRef:
        return super().__new__(cls, (job, step))

    @property
    def job(self) -> str:
        return self[0]

    @property
    def step(self) -> str | None:
        return self[1]

    def __repr__(self) -> str:
        return f"JobRef(job={self[0]!r}, step={self[1]!r})"

    def __str__(self) -> str:
        return self.job if self.step is None else f"{self.job}.{self.step}"


_JOB_RE = LazyPattern(r"^([1-9]\d*)(_(?:\d+|\[\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*\]))?(?:\.(\d+))?$")


def parse_job_id(text: str) -> JobRef:
    if text.isdigit() and text.isascii() and text[0] != "0":  # a plain job id: spares `re`
        return JobRef(text, None)
    m = _JOB_RE.match(text)
    if not m:
        raise UsageError(f"scancel: error: Invalid job id {text}")
    tail = m.group(2) or ""
    if tail.startswith("_["):
        # Slurm's scancel expands the brackets with its hostlist code, which refuses a
        # range of more than 64K values: checked here without listing them.
        bad = check_bracket_ranges(tail[1:])
        if bad is not None:
            raise UsageError(f"scancel: error: _parse_single_range: Too many hosts in range "
                             f"`{bad}'\nscancel: error: Invalid job id {text}")
    return JobRef(m.group(1) + tail, m.group(3))


def parse_signal(text: str) -> int:
    t = text.strip().upper()
    if t.isdigit():
        num = int(t)
        if 0 < num < 65:
            return num
    else:
        name = t[3:] if t.startswith("SIG") else t
        if name in SIGNALS:
            return SIGNALS[name]
    raise UsageError(f"scancel: error: Unknown job signal: {text}")


def parse_state(text: str) -> str:
    state = _STATES.get(text.strip().upper())
    if state is None:
        raise UsageError(f"Invalid job state specified: {text}\n"
                         "Valid job states are PENDING, RUNNING, and SUSPENDED")
    return state


class Options:
    # A plain class: importing `dataclasses` would cost every scancel ~5 ms.
    __slots__ = ("jobs", "signal", "batch", "full", "interactive", "verbose", "quiet", "user",
                 "partitions", "state", "names", "nodes", "account", "clusters")

    def __init__(self) -> None:
        self.jobs: list[JobRef] = []
        self.signal: int | None = None
        self.batch = False
        self.full = False
        self.interactive = False
        self.verbose = 0
        self.quiet = False
        self.user: str | None = None
        self.partitions: str | None = None
        self.state: str | None = None
        self.names: str | None = None
        self.nodes: str | None = None
        self.account: str | None = None
        self.clusters: str | None = None  # -M: checked against the cluster's name in _main

    @property
    def has_filters(self) -> bool:
        return any(v is not None for v in (self.user, self.partitions, self.state, self.names,
                                           self.nodes, self.account))

    def request_body(self) -> dict[str, Any]:
        sig = SIGKILL if self.signal is None else self.signal
        # Without --signal scancel cancels; SIGKILL cancels as well.  "full" asks for the
        # batch shell and every step, "batch_only" for the batch shell alone; with neither
        # a signal goes to the steps only (Slurm's rule).
        return {"signal": sig, "batch_only": self.batch, "full": self.full,
                "cancel": self.signal is None or self.signal == SIGKILL}


_SHORT = "A:bcfHin:M:p:Qq:R:s:t:u:vVw:"
_LONG = ["account=", "batch", "cron", "ctld", "full", "hurry", "interactive", "clusters=",
         "cluster=", "name=", "jobname=", "partition=", "quiet", "qos=", "reservation=",
         "signal=", "state=", "user=", "me", "verbose", "version", "nodelist=", "wckey=",
         "sibling=", "help", "usage"]
_UNSUPPORTED = {"-c": "--cron", "-H": "--hurry",
                "-q": "--qos", "-R": "--reservation", "--wckey": "--wckey",
                "--sibling": "--sibling"}

_USAGE = """\
Usage: scancel [-A account] [--batch] [--full] [--interactive] [-n job_name]
               [-p partition] [-Q] [-q qos] [-R reservation] [-s signal | integer]
               [-t PENDING | RUNNING | SUSPENDED] [--usage] [-u user_name]
               [--hurry] [-V] [-v] [-w hosts...] [--wckey=wckey] [--me]
               [job_id[_array_id][.step_id]]
"""
_HELP = """\
Usage: scancel [OPTIONS] [job_id[_array_id][.step_id]]
  -A, --account=account           act only on jobs charging this account
  -b, --batch                     signal batch shell for specified job
  -f, --full                      signal batch shell and all steps for specified job
  -i, --interactive               require response from user for each job
      --me                        equivalent to --user=<current user>
  -n, --name=job_name             act only on jobs with this name
  -p, --partition=partition       act only on jobs in this partition
  -Q, --quiet                     disable warnings
  -s, --signal=name | integer     signal to send to job, default is SIGKILL
  -t, --state=states              act only on jobs in this state.  Valid job
                                  states are PENDING, RUNNING and SUSPENDED
  -u, --user=user_name            act only on jobs of this user
  -V, --version                   output version information and exit
  -v, --verbose                   verbosity level
  -w, --nodelist                  act only on jobs on these nodes

Help options:
  --help                          show this help message
  --usage                         display brief usage message
"""


def parse_args(argv: list[str]) -> Options | int:
    """Options, or an exit code when the command is already answered (help, errors)."""
    try:
        opts, args = getopt.gnu_getopt(argv, _SHORT, _LONG)
    except getopt.GetoptError as e:
        from corral.cli.scontrol import _getopt_error

        sys.stderr.write(_getopt_error(PROG, e) + "\n")
        sys.stderr.write('Try "scancel --help" for more information\n')
        return 1
    o = Options()
    for opt, val in opts:
        if opt == "--help":
            sys.stdout.write(_HELP)
            return 0
        if opt == "--usage":
            sys.stdout.write(_USAGE)
            return 0
        if opt in ("-V", "--version"):
            sys.stdout.write(f"slurm {SLURM_VERSION}\n")
            return 0
        if opt in _UNSUPPORTED or opt in _UNSUPPORTED.values():
            raise UsageError(f"scancel: error: {_UNSUPPORTED.get(opt, opt)} is not supported "
                             "by Corral yet")
        if opt in ("-A", "--account"):
            o.account = val
        elif opt in ("-b", "--batch"):
            o.batch = True
        elif opt in ("-f", "--full"):
            o.full = True
        elif opt in ("-i", "--interactive"):
            o.interactive = True
        elif opt in ("-n", "--name", "--jobname"):
            o.names = val
        elif opt in ("-p", "--partition"):
            o.partitions = val
        elif opt in ("-Q", "--quiet"):
            o.quiet = True  # finished or unknown jobs are never reported without -v anyway
        elif opt in ("-s", "--signal"):
            o.signal = parse_signal(val)
        elif opt in ("-t", "--state"):
            o.state = ",".join(parse_state(s) for s in val.split(",") if s)
        elif opt in ("-u", "--user"):
            o.user = _user_name(val)
        elif opt == "--me":
            o.user = pwd.getpwuid(os.getuid()).pw_name
        elif opt in ("-v", "--verbose"):
            o.verbose += 1
        elif opt in ("-w", "--nodelist"):
            o.nodes = val
        elif opt in ("-M", "--clusters", "--cluster"):
            o.clusters = val
        elif opt == "--ctld":
            pass  # Corral always goes through the controller
    o.jobs = [parse_job_id(a) for a in args]
    if not o.jobs and not o.has_filters:
        raise UsageError("scancel: error: No job identification provided")
    if not o.jobs and o.user is None and o.account is None and os.getuid() != 0:
        # A filter alone reaches only the caller's own jobs, not everyone's (and a
        # permission error for each of them).  With -A, as in Slurm, every job of the
        # account is asked for and the controller decides: a coordinator of the account
        # may cancel its users' jobs, anyone else gets a refusal per job.
        o.user = pwd.getpwuid(os.getuid()).pw_name
    if any(j.step is not None and not j.step.isdigit() for j in o.jobs):
        # J.batch / J.extern: the batch step is reached with -b
        bad = [str(j) for j in o.jobs if j.step is not None and not j.step.isdigit()]
        raise UsageError(f"scancel: error: Invalid job id {bad[0]}")
    return o


def _user_name(text: str) -> str:
    try:
        return (pwd.getpwuid(int(text)) if text.isdigit() else pwd.getpwnam(text)).pw_name
    except KeyError:
        raise UsageError(f"scancel: error: Invalid user name: {text}") from None


def target_id(job: dict[str, Any]) -> str:
    """The id that names exactly this job record: 12, 7_2, or 7_[4-10] for a remainder."""
    if job.get("array_job_id") is None:
        return str(job["job_id"])
    if job.get("array_tasks") is not None:
        return f"{job['array_job_id']}_[{format_task_ids(job['array_tasks'])}]"
    return f"{job['array_job_id']}_{job['array_task_id']}"


def _targets(o: Options) -> list[tuple[str, dict[str, Any] | None]]:
    """What to signal: (id, job record if fetched)."""
    if not o.has_filters and not o.interactive:
        return [(str(j), None) for j in o.jobs]
    params = {"ids": ",".join(str(j) for j in o.jobs) or None, "users": o.user,
              "states": o.state, "partitions": o.partitions, "names": o.names,
              "nodes": o.nodes}
    try:
        ans = client.get("/v1/jobs", **params)
    except client.ApiError as e:
        if e.status == 404:
            return []
        raise
    jobs = ans.get("jobs") or []
    if o.account is not None:
        # Slurm's scancel matches the job's account exactly: one name, no sub-accounts,
        # case as given.
        jobs = [j for j in jobs if j.get("account") == o.account]
    return [(target_id(j), j) for j in jobs]


def _confirm(job_id: str, job: dict[str, Any] | None) -> bool:
    name = (job or {}).get("name", "")
    part = (job or {}).get("partition", "")
    sys.stdout.write(f"Cancel job_id={job_id} name={name} partition={part} [y/n]? ")
    sys.stdout.flush()
    answer = sys.stdin.readline()
    return answer[:1] in ("y", "Y")


# Errors scancel keeps quiet about unless asked (-v): the job is gone already.
_QUIET_ERRORS = ("Invalid job id specified", "Job/step already completing or completed")


def _main(argv: list[str]) -> int:
    try:
        parsed = parse_args(argv)
    except UsageError as e:
        sys.stderr.write(f"{e}\n")
        return 1
    if isinstance(parsed, int):
        return parsed
    o = parsed
    if o.clusters:
        from corral.cli.fmt import ClusterRefused, asked_cluster

        try:
            asked_cluster(PROG, o.clusters, False)
        except ClusterRefused:
            return 1
    body = o.request_body()
    chosen: list[str] = []
    for job_id, job in _targets(o):
        if o.interactive and not _confirm(job_id, job):
            continue
        if o.verbose:
            if body["signal"] == SIGKILL:
                sys.stderr.write(f"scancel: Terminating job {job_id}\n")
            else:
                sys.stderr.write(f"scancel: Signal {body['signal']} to job {job_id}\n")
        chosen.append(job_id)
    return _send_all(o, body, chosen)


def _send_all(o: Options, body: dict[str, Any], job_ids: list[str]) -> int:
    """Send the request for each job.  A job that cannot take a signal yet (pending or
    suspended: "try again later") is tried again after 5, 6, ... seconds, up to ten tries in
    all, as Slurm's scancel does; the jobs wait out each delay together, as its threads do."""
    rc = 0
    waiting = job_ids
    for attempt in range(_MAX_TRIES):
        if attempt:
            time.sleep(5 + attempt - 1)
        again: list[str] = []
        last = attempt == _MAX_TRIES - 1
        for job_id in waiting:
            try:
                client.post(f"/v1/jobs/{quote(job_id, safe='')}/signal", body)
            except client.ApiError as e:
                if e.payload.get("errno") == _TRANSITION_STATE and not last:
                    if o.verbose:
                        sys.stderr.write("scancel: Job is in transitional state, retrying\n")
                    again.append(job_id)
                    continue
                quiet = e.status == 404 or e.message in _QUIET_ERRORS
                if not quiet:
                    rc = 1
                if o.verbose or not quiet:
                    sys.stderr.write(f"scancel: error: Kill job error on job id {job_id}: "
                                     f"{e.message}\n")
        if not again:
            break
        waiting = again
    return rc


# Slurm's MAX_CANCEL_RETRY, and the errno of "Job can not be altered now, try again later"
_MAX_TRIES = 10
_TRANSITION_STATE = 2020


def main(argv: list[str] | None = None) -> int:
    return client.run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
