"""The controller's periodic duties, listed once: the controller process, the harness and
the simulator run this list at every tick of the cadence (controller/cadence.py)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from corral.controller.health import tick as health_tick
from corral.controller.reclaim import tick as reclaim_tick

if TYPE_CHECKING:
    from corral.controller.state import Controller

log = logging.getLogger("corral.controller")


def drop_silent_agents(ctl: Controller, now: float) -> None:
    """Forget agent links that stayed silent for SlurmdTimeout.

    A cut network leaves the TCP connection looking open for minutes; dropping the link
    lets `check_node_health` mark the node NOT_RESPONDING on time. The old connection may
    come back to life with the network, so it carries a "reconnect" request: the agent
    then registers afresh instead of talking into a link the controller has given up.
    """
    timeout = ctl.config.get_int("SlurmdTimeout")
    if timeout <= 0:
        return
    for name, send in list(ctl.agent_senders.items()):
        node = ctl.nodes.get(name)
        if node is not None and node.last_contact is not None and now - node.last_contact >= timeout:
            log.warning("agent of node %s silent for %.0f s: link dropped", name,
                        now - node.last_contact)
            send({"type": "reconnect", "reason": f"silent for {now - node.last_contact:.0f} s"})
            ctl.agent_lost([name], send)


def periodic_duties(ctl: Controller, now: float) -> None:
    """One tick: ask for a pass, charge fairshare usage, enforce time limits (allocations and batch jobs), drop
    agent links silent for SlurmdTimeout and mark their nodes NOT_RESPONDING, forget jobs
    older than MinJobAge."""
    ctl.request_schedule()
    ctl.core.usage.tick(now)  # fairshare usage: decay and charge every PriorityCalcPeriod
    ctl.check_time_limits(now)
    drop_silent_agents(ctl, now)
    ctl.check_node_health(now)
    health_tick(ctl, now)  # HealthCheckProgram where HealthCheckInterval says it is due
    reclaim_tick(ctl, now)  # idle-GPU reclaim: notices and actions that are due
    ctl.expire_finished(now)
