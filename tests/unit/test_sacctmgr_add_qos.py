"""`sacctmgr add qos NAME SETTINGS`: the settings listed after the description, in the
order, labels and number forms of Slurm 22.05's sacctmgr_print_qos_limits."""

from __future__ import annotations

from corral import jsonio
from corral.cli.sacctmgr_text import render_changes
from corral.controller.accounts import Accounts, Caller
from corral.store.memory import MemoryStore

ROOT = Caller("root", operator=True)


def add_qos(acc: Accounts, name: str, where: dict[str, str]) -> str:
    out = acc.execute(ROOT, {"op": "add", "entity": "qos", "names": [name], "where": where,
                             "set": {}, "commit": True})
    assert out.changes is not None
    return render_changes(jsonio.loads(jsonio.dumps_bytes({"c": out.changes.to_dict()}))["c"])


def test_add_qos_lists_the_settings_given() -> None:
    acc = Accounts(MemoryStore(), "corral")
    text = add_qos(acc, "deadline", {
        "Priority": "1000", "MaxWall": "1:00:00", "GrpTRES": "gres/gpu=4", "GraceTime": "120",
        "Preempt": "normal", "PreemptMode": "requeue", "MaxJobsPerUser": "3",
        "MaxTRESPerUser": "gres/gpu=2", "Flags": "DenyOnLimit", "UsageFactor": "2"})
    assert text == (" Adding QOS(s)\n  deadline\n Settings\n"
                    "  Description    = QOS Name\n"
                    "  Flags                    = DenyOnLimit\n"
                    "  GraceTime                = 120\n"
                    "  GrpTRES                  = gres/gpu=4\n"
                    "  MaxJobsPerUser = 3\n"
                    "  MaxTRESPerUser           = gres/gpu=2\n"
                    "  MaxWall                  = 01:00:00\n"
                    "  Preempt                  = normal\n"
                    "  PreemptMode              = REQUEUE\n"
                    "  Priority                 = 1000\n"
                    "  UsageFactor              = 2.0000\n")


def test_add_qos_without_settings_lists_the_description_only() -> None:
    acc = Accounts(MemoryStore(), "corral")
    assert add_qos(acc, "plain", {}) == (" Adding QOS(s)\n  plain\n Settings\n"
                                         "  Description    = QOS Name\n")
    assert add_qos(acc, "open", {"MaxWall": "-1", "Description": "Open"}) == (
        " Adding QOS(s)\n  open\n Settings\n  Description    = open\n"
        "  MaxWall                  = NONE\n")
