"""The controller's core: memory and decisions without I/O (see core.py)."""

from corral.controller.core.core import AssocSource, Core, task_ranges
from corral.controller.core.effects import Effect, Outbox

__all__ = ["Core", "AssocSource", "Effect", "Outbox", "task_ranges"]
