"""The limits stage: association and QOS limits counted inside the pass.

NOT IMPLEMENTED YET, and honest about it: this stage passes every candidate through
unchanged and decides no reason.  It is where GrpTRES, MaxJobsPerUser, MaxTRESPerJob and
the QOS limits of the policy issue go: each candidate is charged against the usage the
snapshot carries (running jobs plus the starts made earlier in the same pass), and one
over a limit waits with Slurm's reason (AssocGrpGRES, QOSMaxJobsPerUserLimit, …).
"""

from __future__ import annotations

from corral.model.reasons import PendingReason

from .snapshot import PendingView


def limits(candidates: list[PendingView]) -> tuple[list[PendingView], dict[int, PendingReason]]:
    """(candidates that stay, reasons of those held back): today all stay."""
    return candidates, {}
