"""Where a cluster lives: $CORRAL_HOME and the files inside it.

Imported by the CLI, so it must stay tiny (stdlib `os` only).
"""

from __future__ import annotations

import os


def corral_home() -> str:
    """The state directory of the current cluster.

    $CORRAL_HOME if set; otherwise /var/lib/corral for root and ~/.corral for others.
    """
    env = os.environ.get("CORRAL_HOME")
    if env:
        return os.path.abspath(env)
    if os.geteuid() == 0:
        return "/var/lib/corral"
    return os.path.join(os.path.expanduser("~"), ".corral")


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
