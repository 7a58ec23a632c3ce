"""The association database answers with data (change sets, rows), the sacctmgr command
renders Slurm's text from it (cli/sacctmgr_text.py); refusals are SlurmErrors without an
HTTP status of their own; the core imports no I/O and no server."""

from __future__ import annotations

import subprocess
import sys

import pytest

from corral import jsonio
from corral.cli.sacctmgr_text import render_changes
from corral.controller.accounts import Accounts, Caller
from corral.controller.assoc_changes import AssocRef, ChangeSet
from corral.controller.errors import ESLURM_ACCESS_DENIED, SlurmError
from corral.store.memory import MemoryStore

ROOT = Caller("root", operator=True)


def change(acc: Accounts, who: Caller, op: str, entity: str, names: list[str] | None = None,
           where: dict[str, str] | None = None, sets: dict[str, str] | None = None,
           commit: bool = True) -> ChangeSet:
    out = acc.execute(who, {"op": op, "entity": entity, "names": names or [],
                            "where": where or {}, "set": sets or {}, "commit": commit})
    assert out.changes is not None and out.rows == []
    return out.changes


def over_the_wire(c: ChangeSet) -> str:
    """The text the command prints for `c`, after the API's JSON."""
    return render_changes(jsonio.loads(jsonio.dumps_bytes({"c": c.to_dict()}))["c"])


@pytest.fixture
def acc() -> Accounts:
    a = Accounts(MemoryStore(), "corral")
    change(a, ROOT, "add", "account", ["lab"])
    change(a, ROOT, "add", "user", ["ann", "ben"], {"account": "lab"})
    return a


def test_add_user_is_a_change_set_of_records_and_associations(acc: Accounts) -> None:
    c = change(acc, ROOT, "add", "user", ["cat"], {"account": "lab", "partition": "gpu",
                                                   "GrpTRES": "gres/gpu=2", "Fairshare": "5"})
    assert (c.op, c.entity, c.changed, c.names) == ("add", "user", True, ["cat"])
    assert c.assocs == [AssocRef("corral", "lab", "cat", "gpu", None)]
    assert c.default_account == "lab" and c.admin_level is None
    assert c.settings == {"Fairshare": "5", "GrpTRES": "gres/gpu=2"}
    assert over_the_wire(c) == (
        " Adding User(s)\n  cat\n Settings =\n  Default Account = lab\n"
        " Associations =\n  U = cat       A = lab        C = corral     P = gpu       \n"
        " Non Default Settings\n  Fairshare     = 5\n  GrpTRES       = gres/gpu=2\n")


def test_nothing_to_do_is_an_unchanged_set_the_command_words(acc: Accounts) -> None:
    c = change(acc, ROOT, "add", "user", ["ann"], {"account": "lab"})
    assert not c.changed and c.names == [] and c.assocs == []
    assert over_the_wire(c) == " Nothing new added.\n"
    c = change(acc, ROOT, "delete", "qos", ["nosuch"])
    assert not c.changed and over_the_wire(c) == " Nothing deleted\n"
    c = change(acc, ROOT, "delete", "coordinator", ["ann"], {"account": "lab"})
    assert not c.changed and over_the_wire(c) == " Nothing removed\n"


def test_modify_user_reports_asked_changes_that_matched_nothing(acc: Accounts) -> None:
    # the users' records change; no association of theirs is on cluster `other`
    c = change(acc, ROOT, "modify", "user", ["ann"], {"cluster": "other"},
               {"AdminLevel": "Operator", "MaxJobs": "3"})
    assert c.changed and c.record_change_asked and c.assoc_change_asked and c.assocs == []
    assert over_the_wire(c) == " Modified users...\n  ann\n Nothing modified\n"
    c = change(acc, ROOT, "modify", "user", ["ann"], {"cluster": "other"}, {"MaxJobs": "3"})
    assert not c.changed and over_the_wire(c) == " Nothing modified\n"


def test_deleting_an_account_lists_the_subtree_and_its_associations(acc: Accounts) -> None:
    change(acc, ROOT, "add", "account", ["sub"], {"parent": "lab"})
    change(acc, ROOT, "add", "user", ["dan"], {"account": "sub"})
    change(acc, ROOT, "add", "account", ["other"])
    change(acc, ROOT, "add", "user", ["ann", "ben", "dan"], {"account": "other"})
    c = change(acc, ROOT, "delete", "account", ["lab"])
    assert c.names == ["lab", "sub"]
    assert {(a.account, a.user) for a in c.assocs} == {
        ("lab", None), ("lab", "ann"), ("lab", "ben"), ("sub", None), ("sub", "dan")}
    assert over_the_wire(c) == " Deleting accounts...\n  lab\n  sub\n"
    assert "lab" not in acc.db.accounts and "sub" not in acc.db.accounts
    assert acc.db.users["dan"].default_account == "other"


def test_an_uncommitted_change_keeps_nothing(acc: Accounts) -> None:
    before = acc.db
    c = change(acc, ROOT, "add", "qos", ["gold"], {"Description": "Gold"}, commit=False)
    assert c.changed and c.names == ["gold"] and acc.db is before and "gold" not in acc.db.qos
    assert over_the_wire(c) == " Adding QOS(s)\n  gold\n Settings\n  Description    = gold\n"


def test_add_coordinator_lists_users_then_accounts(acc: Accounts) -> None:
    change(acc, ROOT, "add", "account", ["b2"])
    c = change(acc, ROOT, "add", "coordinator", ["ann", "ben"], {"account": "lab,b2"})
    assert c.coordinators == [("ann", "lab"), ("ann", "b2"), ("ben", "lab"), ("ben", "b2")]
    assert over_the_wire(c) == (" Adding Coordinator User(s)\n  ann\n  ben\n"
                                " To Account(s) and all sub-accounts\n  lab\n  b2\n")


def test_the_change_set_crosses_the_api_whole(acc: Accounts) -> None:
    c = change(acc, ROOT, "add", "user", ["eve"], {"account": "lab", "cluster": "corral"})
    again = ChangeSet.from_dict(jsonio.loads(jsonio.dumps_bytes(c.to_dict())))
    assert again == c
    out = acc.execute(ROOT, {"op": "show", "entity": "qos", "names": ["normal"]})
    assert out.changes is None and out.to_dict()["changes"] is None and out.out == ""
    assert [r["Name"] for r in out.rows] == ["normal"]


def test_refusals_are_slurm_errors_with_an_errno_not_an_http_status(acc: Accounts) -> None:
    with pytest.raises(SlurmError) as e:
        change(acc, Caller("ann"), "add", "account", ["mine"])
    assert e.value.errno == ESLURM_ACCESS_DENIED
    assert e.value.message == " Problem adding accounts: Access/permission denied"
    with pytest.raises(SlurmError) as e:
        change(acc, ROOT, "add", "user", ["zed"], {"account": "nosuch"})
    assert e.value.errno == 0 and "doesn't exist" in e.value.message


def test_the_api_maps_errnos_to_http() -> None:
    from corral.controller.api_accounts import http_status

    assert http_status(SlurmError("x", ESLURM_ACCESS_DENIED)) == 403
    assert http_status(SlurmError(" Bad MaxJobs value: x")) == 400


def _imported_by(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    return set(out.stdout.split())


def test_the_association_core_does_no_io_and_imports_no_server() -> None:
    loaded = _imported_by("corral.controller.accounts")
    for heavy in ("asyncio", "aiohttp", "socket", "sqlite3", "pwd", "corral.store",
                  "corral.controller.server", "corral.controller.state", "corral.cli"):
        assert not any(m == heavy or m.startswith(heavy + ".") for m in loaded), heavy


def test_the_account_routes_do_not_import_the_server() -> None:
    assert "corral.controller.server" not in _imported_by("corral.controller.api_accounts")
