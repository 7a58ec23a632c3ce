"""Containers for job steps (Pyxis' options): the launch pipeline's container hook."""

from __future__ import annotations

from corral.agent.launch import ExecRequest, LaunchFailure


def wrap(request: ExecRequest) -> None:
    """Refuse: this agent runs no containers yet."""
    raise LaunchFailure("slurmstepd: error: pyxis: containers are not supported on this node\n",
                        1)
