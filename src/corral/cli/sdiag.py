"""sdiag: the scheduler's statistics, in Slurm 22.05's layout, from the controller's counters
(controller.metrics: derived from the typed job events and the passes' timings).

Printed: the header, the job counters, the main schedule statistics and the backfill
counters Corral keeps.  Corral's backfill is a stage of every pass, so its cycles are the
passes'.  Slurm's RPC and thread statistics have no counterpart and are left out; `-r`
(reset) is refused, as the counters are kept since the controller started.
"""

from __future__ import annotations

import sys
import time

from corral.cli import client
from corral.cli.common_opts import VERSION_LINE

PROG = "sdiag"
USAGE = "Usage: sdiag [-M cluster] [-aritT]\n"
HELP = """\
Usage: sdiag [OPTIONS]
  -a, --all           all statistics
  -r, --reset         reset statistics
  -M, --cluster       direct the request to a specific cluster
  -i, --sort-by-id    sort RPCs by id
  -t, --sort-by-time  sort RPCs by total run time
  -T, --sort-by-time2 sort RPCs by average run time
  -V, --version       display current version number

Help options:
  --help          show this help message
  --usage         display brief usage message
"""


def _when(t: float) -> str:
    return f"{time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(t))} ({int(t)})"


def render(s: dict[str, int | float]) -> str:
    cycles = int(s["cycles"])
    mean = int(s["cycle_sum_us"]) // cycles if cycles else 0
    minutes = max(1.0, (float(s["time"]) - float(s["start_time"])) / 60)
    stars = "*" * 55
    return "\n".join([
        stars,
        f"sdiag output at {_when(float(s['time']))}",
        f"Data since      {_when(float(s['reset_time']))}",
        stars,
        "",
        f"Jobs submitted: {s['jobs_submitted']}",
        f"Jobs started:   {s['jobs_started']}",
        f"Jobs completed: {s['jobs_completed']}",
        f"Jobs canceled:  {s['jobs_canceled']}",
        f"Jobs failed:    {s['jobs_failed']}",
        "",
        f"Job states ts:  {_when(float(s['time']))}",
        f"Jobs pending:   {s['jobs_pending']}",
        f"Jobs running:   {s['jobs_running']}",
        "",
        "Main schedule statistics (microseconds):",
        f"\tLast cycle:   {s['cycle_last_us']}",
        f"\tMax cycle:    {s['cycle_max_us']}",
        f"\tTotal cycles: {cycles}",
        f"\tMean cycle:   {mean}",
        f"\tCycles per minute: {int(cycles / minutes)}",
        f"\tLast queue length: {s['queue_len']}",
        "",
        "Backfilling stats",
        f"\tTotal backfilled jobs (since last slurm start): {s['jobs_backfilled']}",
        f"\tTotal cycles: {cycles}",
        f"\tLast cycle: {s['cycle_last_us']}",
        f"\tMax cycle:  {s['cycle_max_us']}",
        "",
    ])


def _main(argv: list[str]) -> int:
    for a in argv:
        if a in ("-h", "--help", "--usage"):
            sys.stdout.write(USAGE if a == "--usage" else HELP)
            return 0
        if a in ("-r", "--reset"):
            sys.stderr.write(f"{PROG}: error: resetting the statistics is not supported by "
                             "Corral (they count since the controller started)\n")
            return 1
        if a in ("-V", "--version"):
            sys.stdout.write(VERSION_LINE)  # the version every other command gives
            return 0
        if a not in ("-a", "--all", "-i", "--sort-by-id", "-t", "--sort-by-time",
                     "-T", "--sort-by-time2"):
            sys.stderr.write(f"{PROG}: unrecognized option '{a}'\n{USAGE}")
            return 1
    sys.stdout.write(render(client.get("/v1/sdiag")))
    return 0


def main(argv: list[str] | None = None) -> int:
    return client.run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
