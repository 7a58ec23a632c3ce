"""Slurm commands Corral does not provide yet: one line saying so, exit status 1.

`--help` and `--usage` (where Slurm 22.05 has them) print Slurm's texts and exit 0.

Installed under Slurm's names so that, with Corral's commands first on PATH, a user
typing `sprio` learns where they are instead of reaching another Slurm's client (and
its DNS errors).  One entry function per command, for [project.scripts].
"""

from __future__ import annotations

import sys

PROVIDED = ("sbatch, srun, salloc, squeue, scancel, sinfo, scontrol, sacct, sacctmgr, sshare, "
            "sprio, sreport, sstat, seff, sdiag, scrontab")

# Slurm 22.05's user and admin commands (and the contributed ones people type) that
# Corral lacks, with what Corral offers instead where it has something.
MISSING: dict[str, str] = {
    "sattach": "",
    "sbcast": "",
    "sgather": "",
    "sh5util": "",
    "sjobexitmod": "",
    "sjstat": "`squeue` and `sinfo` show jobs and nodes",
    "smap": "`squeue` and `sinfo` show jobs and nodes",
    "strigger": "",
    "sview": "`corral status`, `squeue` and `sinfo` show the cluster",
}


def message(name: str) -> str:
    hint = MISSING.get(name, "")
    return (f"{name}: error: {name} is not provided by Corral yet"
            f"{'; ' + hint if hint else ''} (Corral provides {PROVIDED})\n")


def run(name: str) -> int:
    if any(a.startswith("-") for a in sys.argv[1:]):  # help/usage print Slurm's texts
        from corral.cli.missing_help import help_or_usage

        text = help_or_usage(name, sys.argv[1:])
        if text is not None:
            sys.stdout.write(text)
            return 0
    sys.stderr.write(message(name))
    return 1


def sattach() -> int:
    return run("sattach")


def sbcast() -> int:
    return run("sbcast")


def scrontab() -> int:
    from corral.cli import scrontab as real  # provided now (cli/scrontab.py)

    return real.main()


def sdiag() -> int:
    from corral.cli import sdiag as real  # provided now (cli/sdiag.py)

    return real.main()


def seff() -> int:
    from corral.cli import seff as real  # provided now (cli/seff.py)

    return real.main()


def sgather() -> int:
    return run("sgather")


def sh5util() -> int:
    return run("sh5util")


def sjobexitmod() -> int:
    return run("sjobexitmod")


def sjstat() -> int:
    return run("sjstat")


def smap() -> int:
    return run("smap")


def sprio() -> int:
    # provided now (cli/sprio.py): kept so an install whose entry point still names
    # this module runs the real command
    from corral.cli import sprio as real

    return real.main()


def sreport() -> int:
    from corral.cli import sreport as real  # provided now (cli/sreport.py)

    return real.main()


def sshare() -> int:
    from corral.cli import sshare as real  # provided now (cli/sshare.py)

    return real.main()


def sstat() -> int:
    from corral.cli import sstat as real  # provided now (cli/sstat.py)

    return real.main()


def strigger() -> int:
    return run("strigger")


def sview() -> int:
    return run("sview")


if __name__ == "__main__":  # python -m corral.cli.missing NAME
    name = sys.argv.pop(1) if len(sys.argv) > 1 else "?"
    sys.exit(run(name))
