"""Where a cluster lives: $CORRAL_HOME and the files inside it.

Imported by the CLI, so it must stay tiny (stdlib `os` only).
"""

from __future__ import annotations

import os

SYSTEM_HOME = "/var/lib/corral"


def system_home() -> str:
    """Where root's cluster lives: the cluster of every user on this machine.

    $CORRAL_SYSTEM_HOME moves it (an installation elsewhere, tests); only root can make a
    cluster there, so finding its socket tells a user the machine's cluster runs.
    """
    return os.path.abspath(os.environ.get("CORRAL_SYSTEM_HOME") or SYSTEM_HOME)


def own_home() -> str:
    """The cluster this user starts with `corral up`: $CORRAL_HOME if set; otherwise the
    system home for root and ~/.corral for others."""
    env = os.environ.get("CORRAL_HOME")
    if env:
        return os.path.abspath(env)
    if os.geteuid() == 0:
        return system_home()
    return os.path.join(os.path.expanduser("~"), ".corral")


def _has_cluster(home: str) -> bool:
    return os.path.exists(os.path.join(home, "corral.sock")) or \
        os.path.exists(os.path.join(home, "agent.sock"))


def corral_home() -> str:
    """The state directory of the cluster this user's commands talk to.

    $CORRAL_HOME if set; otherwise the user's own cluster (~/.corral) if one runs, else
    the machine's cluster that root started (the system home), as Slurm users never
    configure anything; else ~/.corral (where `corral up` would start one).
    """
    own = own_home()
    if os.environ.get("CORRAL_HOME") or os.geteuid() == 0 or _has_cluster(own):
        return own
    system = system_home()
    return system if _has_cluster(system) else own


def socket_path(home: str | None = None) -> str:
    return os.path.join(home or corral_home(), "corral.sock")


def agent_socket_path(home: str | None = None) -> str:
    return os.path.join(home or corral_home(), "agent.sock")


def config_path(home: str | None = None) -> str:
    return os.path.join(home or corral_home(), "slurm.conf")


def db_path(home: str | None = None) -> str:
    return os.path.join(home or corral_home(), "state.db")


def log_dir(home: str | None = None) -> str:
    return os.path.join(home or corral_home(), "log")


def pid_file(name: str, home: str | None = None) -> str:
    return os.path.join(home or corral_home(), f"{name}.pid")


def spool_dir(home: str | None = None) -> str:
    """Where the agent keeps per-job directories (scripts, status files)."""
    return os.path.join(home or corral_home(), "spool")
