"""sacctmgr's authorization (controller/accounts.py): coordinators, admin levels, signed
requests; the controller log's escaping and rate limits (controller/logsafe.py); and
PrivateData's parsing (controller/privacy.py).  docs/SECURITY.md, rules 31-37."""

from __future__ import annotations

import logging

import pytest

from corral.controller import privacy
from corral.controller.accounts import NO_PRIVILEGE, NOT_SUPER, Accounts, AccountsError, Caller
from corral.controller.logsafe import EscapingFormatter, RateLimit, escape
from corral.store.memory import MemoryStore

ROOT = Caller("root", operator=True)


def run(acc: Accounts, who: Caller, op: str, entity: str, names: list[str] | None = None,
        where: dict[str, str] | None = None, sets: dict[str, str] | None = None) -> str:
    return acc.execute(who, {"op": op, "entity": entity, "names": names or [],
                             "where": where or {}, "set": sets or {}}).out


@pytest.fixture
def acc() -> Accounts:
    a = Accounts(MemoryStore(), "corral")
    run(a, ROOT, "add", "qos", ["high"])
    run(a, ROOT, "add", "account", ["phys"])
    run(a, ROOT, "add", "account", ["theory"], {"parent": "phys"})
    run(a, ROOT, "add", "account", ["chem"])
    run(a, ROOT, "add", "user", ["pi"], {"account": "phys"})
    run(a, ROOT, "add", "user", ["ann"], {"account": "theory"})
    run(a, ROOT, "add", "user", ["op", "boss"], {"account": "chem"})
    run(a, ROOT, "add", "coordinator", ["pi"], {"account": "phys"})
    run(a, ROOT, "modify", "user", where={"names": "op"}, sets={"adminlevel": "Operator"})
    run(a, ROOT, "modify", "user", where={"names": "boss"}, sets={"adminlevel": "Admin"})
    return a


def _denied(acc: Accounts, who: Caller, *args: object, text: str | None = None) -> None:
    before = acc.db.to_records()
    with pytest.raises(AccountsError) as e:
        run(acc, who, *args)  # type: ignore[arg-type]
    assert e.value.status == 403
    if text is not None:
        assert e.value.text == text
    assert acc.db.to_records() == before


def test_a_coordinator_changes_users_not_accounts(acc: Accounts) -> None:
    pi = Caller("pi")
    for account in ("phys", "theory"):
        _denied(acc, pi, "modify", "account", None, {"names": account},
                {"grpjobs": "1000"},
                text=f"{NO_PRIVILEGE}\n Error with request: Access/permission denied")
        _denied(acc, pi, "modify", "account", None, {"names": account}, {"fairshare": "99"})
    _denied(acc, pi, "delete", "account", ["phys"])
    _denied(acc, pi, "modify", "account", None, {"names": "theory"}, {"description": "x"})
    run(acc, pi, "modify", "user", where={"names": "ann", "account": "theory"},
        sets={"maxjobs": "5"})
    assert acc.db.find("corral", "theory", "ann").limits.max_jobs == 5  # type: ignore[union-attr]
    run(acc, pi, "add", "account", ["optics"], {"parent": "phys"})
    run(acc, pi, "modify", "account", where={"names": "optics"}, sets={"parent": "theory"})
    assert acc.db.account_assoc("corral", "optics").parent == "theory"  # type: ignore[union-attr]
    _denied(acc, pi, "modify", "account", None, {"names": "optics"}, {"parent": "chem"})
    _denied(acc, pi, "modify", "account", None, {"names": "phys"}, {"parent": "chem"})
    run(acc, pi, "delete", "account", ["optics"])  # a sub-account's removal is its parent's


def test_a_coordinator_gives_out_only_the_accounts_qos(acc: Accounts) -> None:
    pi = Caller("pi")
    for sets in ({"qos+": "high"}, {"qos": "normal,high"}, {"defaultqos": "high"}):
        _denied(acc, pi, "modify", "user", None, {"names": "ann", "account": "theory"}, sets)
    _denied(acc, pi, "add", "user", ["eve"], {"account": "theory", "qos": "high"},
            text=f"{NO_PRIVILEGE}\n Problem adding users: Access/permission denied")
    _denied(acc, pi, "add", "account", ["optics"], {"parent": "phys", "qos": "high"})
    run(acc, pi, "modify", "user", where={"names": "ann", "account": "theory"},
        sets={"qos": "normal"})
    # once an administrator gives the account the QoS, its coordinator may hand it on
    run(acc, ROOT, "modify", "account", where={"names": "phys"}, sets={"qos": "normal,high"})
    run(acc, pi, "modify", "user", where={"names": "ann", "account": "theory"},
        sets={"qos+": "high"})


def test_only_a_super_user_changes_admin_levels(acc: Accounts) -> None:
    op = Caller("op")
    for level in ("Administrator", "Operator", "None"):
        _denied(acc, op, "modify", "user", None, {"names": "ann"}, {"adminlevel": level},
                text=NOT_SUPER)
    _denied(acc, op, "add", "user", ["eve"], {"account": "chem", "adminlevel": "Admin"},
            text=NOT_SUPER)
    text = acc.dump("corral").replace("User - 'ann':", "User - 'ann':AdminLevel='Administrator':")
    with pytest.raises(AccountsError, match="must be a super user"):
        acc.load(op, text)
    run(acc, op, "add", "account", ["opsacct"])  # an operator's other work goes on
    run(acc, Caller("boss"), "modify", "user", where={"names": "ann"},
        sets={"adminlevel": "Operator"})
    assert acc.db.admin_level("ann") == "Operator"
    assert acc.is_super(Caller("boss")) and not acc.is_super(op)


def test_a_signed_request_has_no_admin_level_rights(acc: Accounts) -> None:
    for name in ("op", "boss"):
        remote = Caller(name, remote=True)
        assert not acc.is_admin(remote) and not acc.is_super(remote)
        _denied(acc, remote, "add", "account", ["x"])
        _denied(acc, remote, "modify", "user", None, {"names": "ann"}, {"adminlevel": "Admin"})
    # a coordinator's rights, bounded by its accounts, stay
    run(acc, Caller("pi", remote=True), "add", "user", ["eve"], {"account": "theory"})


def test_account_names_descriptions_organizations_lower_cased(acc: Accounts) -> None:
    run(acc, ROOT, "add", "account", ["LabX"], {"description": "LabA", "organization": "OrgA"})
    a = acc.db.accounts["labx"]
    assert (a.description, a.organization) == ("laba", "orga")
    run(acc, ROOT, "add", "user", ["zed"], {"account": "LABX"})
    assert acc.db.users["zed"].default_account == "labx"


def test_private_data_words() -> None:
    assert privacy.private_data({}) == frozenset()
    assert privacy.private_data({"PrivateData": "Jobs, usage,nodes"}) == {"jobs", "usage"}
    assert privacy.private_data({"PrivateData": "all"}) == set(privacy.KINDS)
    assert privacy.redact({"job_id": 1, "submit_line": "sbatch --export=T=x"}) == \
        {"job_id": 1, "submit_line": ""}
    assert privacy.redact({"steps": [{"id": 0, "submit_line": "srun --export=T=x"}]}) == \
        {"steps": [{"id": 0, "submit_line": ""}]}


def test_log_values_are_escaped_and_lines_rate_limited() -> None:
    assert escape("a\nb\x1b[2J\x7f\x9b") == "a\\x0ab\\x1b[2J\\x7f\\x9b"
    rec = logging.LogRecord("corral.controller", logging.INFO, "", 0,
                            "job %d notified: %s", (7, "hi\n2026 FORGED"), None)
    line = EscapingFormatter("%(levelname)s %(message)s").format(rec)
    assert line == "INFO job 7 notified: hi\\x0a2026 FORGED"
    now = [0.0]
    rl = RateLimit(burst=3, window=60, clock=lambda: now[0])
    assert [rl.allow("a")[0] for _ in range(5)] == [True, True, True, False, False]
    assert rl.allow("b") == (True, 0)  # per key
    now[0] = 61
    assert rl.allow("a") == (True, 2)  # a new window says how many were held back


def test_sacctmgr_usage_has_slurms_sections(capsys: pytest.CaptureFixture[str]) -> None:
    from corral.cli import sacctmgr

    assert sacctmgr.main(["--usage"]) == 0
    out = capsys.readouterr().out
    assert out == sacctmgr.usage()  # --usage is --help, as in sacctmgr.c
    for section in ("sacctmgr [<OPTION>] [<COMMAND>]", "Valid <OPTION> values are:",
                    "Valid <COMMAND> values are:", "<ENTITY> may be",
                    "<SPECS> are different for each command entity pair", "add account",
                    "list associations", "modify cluster", "delete qos"):
        assert section in out
