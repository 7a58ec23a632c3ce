"""Who may change the association database (Slurm's rules, slurmdbd's checks).

Operators (root, SlurmUser, AdminUsers) and users whose AdminLevel is Operator or
Administrator may change anything; only a super user (an operator or an Administrator)
changes admin levels or dumps the tree.  An account's coordinators may add users to that
account and its sub-accounts, change and remove those users' associations, and add
sub-accounts under it, giving out only the QoS the account may already use.  A joined
machine's AdminLevel gives no rights (docs/SECURITY.md).  A refusal is a `SlurmError` with
`ESLURM_ACCESS_DENIED` and the lines sacctmgr prints.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from corral.controller.assoc_grammar import split_list
from corral.controller.errors import ESLURM_ACCESS_DENIED, SlurmError
from corral.model.assoc import AssocDB

ACCESS_DENIED = "Access/permission denied"
# slurmdbd's comment on a change the caller may not make, printed before sacctmgr's line
NO_PRIVILEGE = "sacctmgr: error: Your user doesn't have privilege to perform this action"
NOT_SUPER = "sacctmgr: error: You must be a super user to modify a users admin level"
NO_DUMP = " Your user does not have sufficient privileges to dump clusters."


@dataclass(slots=True)
class Caller:
    user: str
    operator: bool = False
    # signed by a joined machine: its AdminLevel gives no rights (docs/SECURITY.md)
    remote: bool = False


def denied(text: str) -> SlurmError:
    return SlurmError(text, ESLURM_ACCESS_DENIED)


def no_privilege(what: str) -> SlurmError:
    return denied(f"{NO_PRIVILEGE}\n {what}: {ACCESS_DENIED}")


def is_admin(db: AssocDB, who: Caller) -> bool:
    # `who` may be the controller's Identity too (reservations ask): both say `remote`
    return who.operator or (not getattr(who, "remote", False) and db.admin_level(
        who.user) in ("Operator", "Administrator"))


def is_super(db: AssocDB, who: Caller) -> bool:
    """Slurm's super user: root, SlurmUser, AdminUsers or AdminLevel=Administrator."""
    return who.operator or (not getattr(who, "remote", False)
                            and db.admin_level(who.user) == "Administrator")


class Authority:
    """The checks of one request by `who`, against the committed database `db` (a change
    is computed on a copy; who may make it is the live tree's business)."""

    def __init__(self, db: AssocDB, cluster: str, who: Caller) -> None:
        self.db = db
        self.cluster = cluster
        self.who = who
        self.admin = is_admin(db, who)

    def require_admin(self, what: str) -> None:
        if not self.admin:
            raise denied(f" {what}: {ACCESS_DENIED}")

    def require_super_for_admin_level(self) -> None:
        if not is_super(self.db, self.who):
            raise denied(NOT_SUPER)

    def require_coord(self, accounts: Iterable[str], what: str) -> None:
        """An administrator, or a coordinator of every one of `accounts`."""
        if self.admin:
            return
        for a in accounts:
            if not self.db.is_coordinator(self.who.user, a, self.cluster):
                raise denied(f" {what}: {ACCESS_DENIED}")

    def require_coord_of_parents(self, db: AssocDB, clusters: Iterable[str],
                                 names: Iterable[str]) -> None:
        """slurmdbd checks an account association's change against the coordinators of
        its parent: the coordinator of an account may not change or remove it itself."""
        for cl in clusters:
            for n in names:
                x = db.account_assoc(cl, n)
                if x is not None and not (x.parent and db.is_coordinator(
                        self.who.user, x.parent, self.cluster)):
                    raise no_privilege("Error with request")

    def check_coord_qos(self, db: AssocDB, cluster: str, account: str, sets: dict[str, str],
                        what: str) -> None:
        """A coordinator gives out only the QoS the account may already use (slurmdbd's
        get_coord_qos): a QoS list or default QoS naming any other is refused."""
        if self.admin or not ("qos" in sets or "defaultqos" in sets):
            return
        acct = db.account_assoc(cluster, account)
        allowed = set(db.effective_qos(acct)) if acct is not None else set()
        wanted = [q.lstrip("+-") for q in split_list(sets.get("qos", ""))
                  if not q.startswith("-")]
        if sets.get("defaultqos") not in (None, "", "-1"):
            wanted.append(sets["defaultqos"])
        if any(q and q not in allowed for q in wanted):
            raise no_privilege(what)
