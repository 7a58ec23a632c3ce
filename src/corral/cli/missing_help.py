"""Slurm 22.05's `--help` and `--usage` texts for the commands Corral does not provide yet.

Kept apart from cli/missing.py so that the common path (the one-line refusal) loads none
of this.  The texts are what the Slurm 22.05 commands print, so that scripts and test
suites that look at a command's help find what they expect.
"""

from __future__ import annotations

# name: (usage text, help text, options meaning help, options meaning usage)
TEXTS: dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...]]] = {
    "sattach": (
        "Usage: sattach [options] <jobid.stepid>\n",
        "Usage: sattach [options] <jobid.stepid>\n"
        "      --input-filter=taskid  send stdin to only the specified task\n"
        "      --output-filter=taskid only print stdout from the specified task\n"
        "      --error-filter=taskid  only print stderr from the specified task\n"
        "  -l, --label        prepend task number to lines of stdout & stderr\n"
        "      --layout       print task layout info and exit (does not attach to tasks)\n"
        "  -Q, --quiet        quiet mode (suppress informational messages)\n"
        "  -v, --verbose      verbose mode (multiple -v's increase verbosity)\n"
        "  -V, --version      print the Slurm version and exit\n\n"
        "Help options:\n"
        "  -h, --help         print this help message\n"
        "  -u, --usage        print a brief usage message\n",
        ("-h", "--help"), ("-u", "--usage")),
    "sbcast": (
        "Usage: sbcast [--exclude] [-CfFjpvV] [--send-libs] SOURCE DEST\n",
        "Usage: sbcast [OPTIONS] SOURCE DEST\n"
        "  -C, --compress[=lib]  compress the file being transmitted\n"
        "  --exclude=<path_list> shared object paths to be excluded\n"
        "  -f, --force           replace destination file as required\n"
        "  -F, --fanout=num      specify message fanout\n"
        "  -j, --jobid=#[+#][.#] specify job ID with optional hetjob offset and/or step ID\n"
        "  -p, --preserve        preserve modes and times of source file\n"
        "  --send-libs[=yes|no]  autodetect and broadcast executable's shared objects\n"
        "  -s, --size=num        block size in bytes (rounded off)\n"
        "  -t, --timeout=secs    specify message timeout (seconds)\n"
        "  -v, --verbose         provide detailed event logging\n"
        "  -V, --version         print version information and exit\n"
        "\nHelp options:\n"
        "  --help                show this help message\n"
        "  --usage               display brief usage message\n",
        ("--help",), ("--usage",)),
    "sgather": (
        "Usage: sgather [-CfFkprtvV] SOURCE DEST\n",
        "Usage: sgather [OPTIONS] SOURCE DEST\n"
        "  -C, --compress         compress the file being transmitted\n"
        "  -f, --force            ignore nonexistent source file\n"
        "  -F, --fanout=num       specify message fanout\n"
        "  -k, --keep             do not remove source file after transmission\n"
        "  -p, --preserve         preserve modes and times of source file\n"
        "  -r, --recursive        copy directories recursively\n"
        "  -t, --timeout=secs     specify message timeout (seconds)\n"
        "  -v, --verbose          provide detailed event logging\n"
        "  -V, --version          print version information and exit\n"
        "\nHelp options:\n"
        "  --help                show this help message\n"
        "  --usage               display brief usage message\n",
        ("-h", "--help"), ("--usage",)),
    "strigger": (
        "Usage: strigger [--set | --get | --clear | --version] [-aAbBcCdDefFgGhHiIjnNopQrtuv]\n",
        "Usage: strigger [--set | --get | --clear] [OPTIONS]\n"
        "      --set           create a trigger\n"
        "      --get           get trigger information\n"
        "      --clear         delete a trigger\n\n"
        "      --burst_buffer  trigger event on burst buffer error\n"
        "      --front_end     trigger event on FrontEnd node state changes\n"
        "  -a, --primary_slurmctld_failure\n"
        "                      trigger event when primary slurmctld fails\n"
        "  -A, --primary_slurmctld_resumed_operation\n"
        "                      trigger event on primary slurmctld resumed operation\n"
        "                      after failure\n"
        "  -b, --primary_slurmctld_resumed_control\n"
        "                      trigger event on primary slurmctld resumed control\n"
        "  -B, --backup_slurmctld_failure\n"
        "                      trigger event when backup slurmctld fails\n"
        "  -c, --backup_slurmctld_resumed_operation\n"
        "                      trigger event when backup slurmctld resumed operation\n"
        "                      after failure\n"
        "  -C, --backup_slurmctld_assumed_control\n"
        "                      trigger event when backup slurmctld assumed control\n"
        "  -d, --down          trigger event when node goes DOWN\n"
        "  -D, --drained       trigger event when node becomes DRAINED\n"
        "  -e, --primary_slurmctld_acct_buffer_full\n"
        "                      trigger event when primary slurmctld acct buffer full\n"
        "  -F, --fail          trigger event when node is expected to FAIL\n"
        "  -f, --fini          trigger event when job finishes\n"
        "      --flags=perm    trigger event flag (perm = permanent)\n\n"
        "  -g, --primary_slurmdbd_failure\n"
        "                      trigger when primary slurmdbd fails\n"
        "  -G, --primary_slurmdbd_resumed_operation\n"
        "                      trigger when primary slurmdbd resumed operation after\n"
        "                      failure\n"
        "  -h, --primary_database_failure\n"
        "                      trigger when primary database fails\n"
        "  -H, --primary_database_resumed_operation\n"
        "                      trigger when primary database resumed operation after\n"
        "                      failure\n"
        "  -i, --id=#          a trigger's ID number\n"
        "  -I, --idle          trigger event when node remains IDLE\n"
        "  -j, --jobid=#       trigger related to specific jobid\n"
        "  -M, --cluster=name  cluster to issue commands to.  Default is\n"
        "                      current cluster.  cluster with no name will\n"
        "                      reset to default.\n"
        "                      NOTE: SlurmDBD must up.\n"
        "  -n, --node[=host]   trigger related to specific node, all nodes by default\n"
        "  -N, --noheader      Do not print the message header\n"
        "  -o, --offset=#      trigger's offset time from event, negative to precede\n"
        "  -p, --program=path  pathname of program to execute when triggered\n"
        "  -Q, --quiet         quiet mode (suppress informational messages)\n"
        "  -r, --reconfig      trigger event on configuration changes\n"
        "  -t, --time          trigger event on job's time limit\n"
        "  -u, --up            trigger event when node returned to service from DOWN \n"
        "                      state\n"
        "      --user          a user name or ID to filter triggers by\n"
        "  -v, --verbose       print detailed event logging\n"
        "  -V, --version       print version information and exit\n"
        "\nHelp options:\n"
        "  --help              show this help message\n"
        "  --usage             display brief usage message\n",
        ("--help",), ("--usage",)),
}


def help_or_usage(name: str, argv: list[str]) -> str | None:
    """The text the first help or usage option before `--` asks for, or None."""
    entry = TEXTS.get(name)
    if entry is None:
        return None
    usage, full, help_opts, usage_opts = entry
    for arg in argv:
        if arg == "--":
            break
        if arg in help_opts:
            return full
        if arg in usage_opts:
            return usage
    return None
