"""The dependency text of a job record, shared by scontrol and squeue (kept light)."""

from __future__ import annotations

TYPE_CHECKING = False  # annotations only: `typing` would cost every start
if TYPE_CHECKING:
    from typing import Any


def dependency_str(job: dict[str, Any]) -> str:
    """A job's Dependency= as scontrol and squeue's %E print it: each entry with its state,
    e.g. "afterok:21(unfulfilled)"; (null) once there is nothing left to wait for."""
    if job.get("state") != "PENDING":
        return "(null)"
    if "dependency_text" in job:  # the controller's own rendering, entries' states included
        return job["dependency_text"] or "(null)"
    dep = job.get("dependency")
    if not dep:
        return "(null)"
    reason = job.get("reason")
    if reason == "DependencyNeverSatisfied":
        status = "(failed)"
    elif reason in ("Dependency", "JobHeldUser", "JobHeldAdmin", "BeginTime"):
        # Held or not yet begun: the controller did not get to the dependency, which
        # (without dependency_text) is shown as still waiting.
        status = "(unfulfilled)"
    else:
        return "(null)"  # satisfied: Slurm drops fulfilled dependencies from the list
    import re  # only here: `re` would cost every start of squeue and scontrol

    out: list[str] = []
    for sep, item in re.findall(r"(^|[,?])([^,?]+)", dep):
        kind, _, ids = item.partition(":")
        parts = [f"{kind}:{i}{status}" for i in ids.split(":")] if ids else [f"{kind}{status}"]
        out.append((sep if out else "") + ",".join(parts))
    return "".join(out)
