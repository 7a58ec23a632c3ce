"""sstat: the resource use of running job steps (Slurm 22.05's fields and layout).

`sstat -j JOB[.STEP][,...]` with `-o/--format`, `-a/--allsteps`, `-p/--parsable`,
`-P/--parsable2`, `-n/--noheader`, `-e/--helpformat`.  The figures are the agents' latest
samples (every JobAcctGatherFrequency seconds), laid out by sacct's field table.
"""

from __future__ import annotations

import getopt
import sys

from corral.cli import client
from corral.cli.common_opts import VERSION_LINE
from corral.cli.fmt import parse_width
from corral.cli.sacct import (
    FIELDS,
    Context,
    Field,
    UsageError,
    _value,
    help_fields,
    render,
)
from corral.model import hostlists

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROG = "sstat"
# sstat's default columns (Slurm's STAT_FIELDS)
STAT_FIELDS = (
    "JobID,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,"
    "MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,MinCPUTask,AveCPU,NTasks,"
    "AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,ConsumedEnergy,MaxDiskRead,"
    "MaxDiskReadNode,MaxDiskReadTask,AveDiskRead,MaxDiskWrite,MaxDiskWriteNode,MaxDiskWriteTask,"
    "AveDiskWrite,TRESUsageInAve,TRESUsageInMax,TRESUsageInMaxNode,TRESUsageInMaxTask,"
    "TRESUsageInMin,TRESUsageInMinNode,TRESUsageInMinTask,TRESUsageInTot,TRESUsageOutAve,"
    "TRESUsageOutMax,TRESUsageOutMaxNode,TRESUsageOutMaxTask,TRESUsageOutMin,"
    "TRESUsageOutMinNode,TRESUsageOutMinTask,TRESUsageOutTot")
STAT_NAMES = STAT_FIELDS.split(",")
# Every field sstat knows, in Slurm's order: what -e lists and -o matches a prefix against
SSTAT_NAMES = (
    "AveCPU", "AveCPUFreq", "AveDiskRead", "AveDiskWrite", "AvePages", "AveRSS", "AveVMSize",
    "ConsumedEnergy", "ConsumedEnergyRaw", "JobID", "MaxDiskRead", "MaxDiskReadNode",
    "MaxDiskReadTask", "MaxDiskWrite", "MaxDiskWriteNode", "MaxDiskWriteTask", "MaxPages",
    "MaxPagesNode", "MaxPagesTask", "MaxRSS", "MaxRSSNode", "MaxRSSTask", "MaxVMSize",
    "MaxVMSizeNode", "MaxVMSizeTask", "MinCPU", "MinCPUNode", "MinCPUTask", "Nodelist", "NTasks",
    "Pids", "ReqCPUFreq", "ReqCPUFreqMin", "ReqCPUFreqMax", "ReqCPUFreqGov", "TRESUsageInAve",
    "TRESUsageInMax", "TRESUsageInMaxNode", "TRESUsageInMaxTask", "TRESUsageInMin",
    "TRESUsageInMinNode", "TRESUsageInMinTask", "TRESUsageInTot", "TRESUsageOutAve",
    "TRESUsageOutMax", "TRESUsageOutMaxNode", "TRESUsageOutMaxTask", "TRESUsageOutMin",
    "TRESUsageOutMinNode", "TRESUsageOutMinTask", "TRESUsageOutTot",
)
# sstat's own widths where they are not sacct's (Slurm's sstat field table)
_SSTAT_WIDTHS = {"AveDiskRead": 12, "AveDiskWrite": 12, "Nodelist": 20, "Pids": 20}
USAGE = "Usage: sstat [options] -j <job(.stepid)>\n\tUse --help for help\n"
HELP = """sstat [<OPTION>] -j <job(.stepid)>
    Valid <OPTION> values are:
      -a, --allsteps:
                   Print all steps for the given job(s) when no step is
                   specified.
      -e, --helpformat:
                   Print a list of fields that can be specified with the
                   '--format' option
      -h, --help:  Print this description of use.
      -j, --jobs:
                   Format is <job(.step)>. Stat this job step
                   or comma-separated list of job steps. This option is
                   required.  The step portion will default to the lowest
                   numbered (not batch, extern, etc) step running if not
                   specified, unless the --allsteps flag is set where not
                   specifying a step will result in all running steps
                   to be displayed.
      -n, --noheader:
                   No header will be added to the beginning of output.
                   The default is to print a header.
      -o, --format:
                   Comma separated list of fields. (use "--helpformat"
                   for a list of available fields).
      -p, --parsable: output will be '|' delimited with a '|' at the end
      -P, --parsable2: output will be '|' delimited without a '|' at the end
"""


def _step_order(step: str) -> tuple[int, int | str]:
    return (0, int(step)) if step.isdigit() else (1, step)


def _main(argv: list[str]) -> int:
    try:
        opts, args = getopt.gnu_getopt(
            argv, "aehj:no:pPvV",
            ["allsteps", "helpformat", "help", "jobs=", "noheader", "format=", "fields=",
             "parsable", "parsable2", "verbose", "version", "usage"])
    except getopt.GetoptError as e:
        sys.stderr.write(f"{PROG}: {e.msg}\n{USAGE}")
        return 1
    jobs: list[str] = []
    spec = STAT_FIELDS
    header = True
    allsteps = False
    parsable: str | None = None
    for o, v in opts:
        if o in ("-a", "--allsteps"):
            allsteps = True
        elif o in ("-e", "--helpformat"):
            sys.stdout.write(help_fields(list(SSTAT_NAMES)))
            return 0
        elif o in ("-h", "--help"):
            sys.stdout.write(HELP)
            return 0
        elif o == "--usage":
            sys.stdout.write(USAGE)
            return 0
        elif o in ("-j", "--jobs"):
            jobs += [x for x in v.split(",") if x]
        elif o in ("-n", "--noheader"):
            header = False
        elif o in ("-o", "--format", "--fields"):
            spec = v
        elif o in ("-p", "--parsable"):
            parsable = "p"
        elif o in ("-P", "--parsable2"):
            parsable = "P"
        elif o in ("-V", "--version"):
            sys.stdout.write(VERSION_LINE)
            return 0
    jobs += [a for a in args if a]
    if not jobs:
        sys.stderr.write(f"{PROG}: error: You didn't give me any jobs to stat.\n")
        return 1
    try:
        fields = parse_stat_fields(spec)
    except UsageError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 1
    rows: list[list[str]] = []
    ctx = Context(0.0)
    for item in jobs:
        head, _, step = item.partition(".")
        if not head.isdigit():
            sys.stderr.write(f"{PROG}: error: Invalid job id: {item}\n")
            return 1
        data = client.get("/v1/usage", job=head, step=step or None)
        running = sorted(data.get("steps") or [], key=lambda s: _step_order(str(s["step"])))
        if not step and not allsteps and running:
            numbered = [s for s in running if str(s["step"]).isdigit()]
            running = [numbered[0] if numbered else running[0]]
        if data.get("state") not in ("RUNNING", "SUSPENDED", "COMPLETING") or (
                not running and step):
            sys.stderr.write(f"{PROG}: error: couldn't get steps for job {item}\n"
                             if data.get("state") in ("RUNNING", "SUSPENDED") else
                             f"{PROG}: error: problem getting steps for job {item}: "
                             "Job has already finished\n" if data.get("state") else
                             f"{PROG}: error: problem getting steps for job {item}: "
                             "Invalid job id specified\n")
            continue
        job: dict[str, Any] = {"job_id": int(head)}
        for s in running:
            rec = {"step_id": s["step"], "usage": s.get("usage"), "ntasks": s.get("ntasks", 1)}
            rows.append([_stat_value(f, job, rec, ctx) for f in fields])
    sys.stdout.write(render(rows, fields, parsable=parsable, header=header))
    return 0


def parse_stat_fields(spec: str) -> list[Field]:
    """-o "jobid,maxrss%12": each name is the first of sstat's fields it begins (any case),
    with sstat's width unless a non-zero "%N" (negative: left-justified) replaces it."""
    by_name = {f.name.lower(): f for f in FIELDS}
    out: list[Field] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        name, pct, w = item.partition("%")
        low = name.lower()
        match = next((n for n in SSTAT_NAMES if n.lower().startswith(low)), None)
        if match is None:
            raise UsageError(f'Invalid field requested: "{name}"')
        known = by_name.get(match.lower())
        width = _SSTAT_WIDTHS.get(match, known.width if known is not None else 10)
        digits = w[1:] if w.startswith("-") else w
        digits = digits[:len(digits) - len(digits.lstrip("0123456789"))]
        if pct and parse_width(digits):  # Slurm's atoi(): leading digits, 0 keeps the width
            width = (-1 if w.startswith("-") else 1) * parse_width(digits)
        out.append(Field(match, width, known.numeric if known is not None else False))
    return out


def _stat_value(field: Field, job: dict[str, Any], rec: dict[str, Any], ctx: Context) -> str:
    if field.name == "NTasks":
        return str(rec["ntasks"])
    if field.name == "Nodelist":
        return hostlists.compress(sorted(rec.get("usage") or {})) or "None assigned"
    if field.name == "Pids":
        return ""  # the agents do not report their tasks' process ids
    return _value(field, job, rec, ctx)


def main(argv: list[str] | None = None) -> int:
    return client.run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
