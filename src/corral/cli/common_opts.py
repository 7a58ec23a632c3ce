"""The options every Slurm command answers alike: --help, --usage, -V/--version.

Light on purpose (only `sys`): the commands import it on every start.
"""

from __future__ import annotations

import sys

SLURM_VERSION = "22.05.8"
VERSION_LINE = f"slurm {SLURM_VERSION}\n"
VERSION_OPTS = ("-V", "--version")


def answer_info_option(opt: str, help_text: str, usage_text: str = "",
                       help_opts: tuple[str, ...] = ("--help",),
                       usage_opts: tuple[str, ...] = ("--usage",)) -> bool:
    """Print the command's help, usage or version line if `opt` asks for one.

    True when it did (the command then exits 0); `help_opts`/`usage_opts` are the
    spellings this command gives each (sreport answers -h with its usage, for example).
    """
    if opt in help_opts:
        sys.stdout.write(help_text)
    elif opt in usage_opts:
        sys.stdout.write(usage_text)
    elif opt in VERSION_OPTS:
        sys.stdout.write(VERSION_LINE)
    else:
        return False
    return True
