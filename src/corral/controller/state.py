"""The controller: one object over its parts, for the API layer and the step manager.

    base.py        configuration, clock, cluster, job table, writer, identity, lookups
    jobs.py        the job table and the job state machine (typed events)
    cluster.py     nodes, partitions, the ledger of allocated resources
    persist.py     the group-commit writer
    lifecycle.py   starting, ending, requeueing and expiring jobs
    launch.py      launch records for the agents
    scheduling.py  snapshot → sched.pipeline.run_pass → apply the decision
    usecases.py    submit, signal, hold, release, requeue, suspend, update, node admin
    agents.py      agent links, liveness, end reports
    errors.py      SlurmError (Slurm's errno and message)

All methods run on the controller's event loop thread.  A change is made in memory, marked
dirty, and made durable by the group-commit writer before the caller answers the client
(`await self.durable()`).
"""

from __future__ import annotations

from typing import Any

from corral.controller.agents import AgentLinks
from corral.controller.base import Clock, Identity, group_name, user_name
from corral.controller.cluster import NOT_RESPONDING_REASON
from corral.controller.errors import (
    ESLURM_ACCESS_DENIED,
    ESLURM_ALREADY_DONE,
    ESLURM_DEPENDENCY,
    ESLURM_INVALID_ARRAY,
    ESLURM_INVALID_JOB_ID,
    ESLURM_INVALID_NODE_NAME,
    ESLURM_INVALID_PARTITION_NAME,
    ESLURM_INVALID_TIME_LIMIT,
    ESLURM_JOB_PENDING,
    ESLURM_PARTITION_NOT_AVAIL,
    ESLURM_PATHNAME_TOO_LONG,
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
    ESLURM_TRANSITION_STATE_NO_UPDATE,
    SlurmError,
)
from corral.controller.errors import invalid_job as _invalid_job
from corral.controller.launch import parse_signal_spec
from corral.model.config import ClusterConfig
from corral.model.jobspec import FIELD_NAMES as SPEC_FIELDS
from corral.sched.snapshot import NodeView
from corral.store.base import Store


class Controller(AgentLinks):
    def __init__(self, config: ClusterConfig, store: Store, *, config_path: str = "",
                 home: str = "", clock: Clock | None = None) -> None:
        super().__init__(config, store, config_path=config_path, home=home, clock=clock)
        self._idle_views: dict[str, list[NodeView]] = {}  # per partition, for feasibility checks
        self._fits_cache: dict[str, tuple[list[NodeView], dict[tuple[Any, ...], int]]] = {}
        self.silent_nodes: set[str] = set()
        self._usage_spans = []
        self.table.subscribe(self.usage_on_event)  # fairshare: charge a job as it ends
        self.accounts.on_change = lambda _db: self.schedule_from_any_thread()


__all__ = [
    "Controller", "Identity", "SlurmError", "_invalid_job", "parse_signal_spec", "user_name",
    "group_name", "NOT_RESPONDING_REASON", "SPEC_FIELDS",
    "ESLURM_ACCESS_DENIED", "ESLURM_ALREADY_DONE", "ESLURM_DEPENDENCY", "ESLURM_INVALID_ARRAY",
    "ESLURM_INVALID_JOB_ID", "ESLURM_INVALID_NODE_NAME", "ESLURM_INVALID_PARTITION_NAME",
    "ESLURM_INVALID_TIME_LIMIT", "ESLURM_JOB_PENDING", "ESLURM_PARTITION_NOT_AVAIL",
    "ESLURM_PATHNAME_TOO_LONG", "ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE",
    "ESLURM_TRANSITION_STATE_NO_UPDATE",
]
