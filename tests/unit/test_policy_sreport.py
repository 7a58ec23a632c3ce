"""sreport's pure parts: -t formats, values, the tables from the controller's data."""

from __future__ import annotations

import pytest

from corral.cli import sreport

DATA = {"cluster": "lab", "start": 0.0, "end": 3600.0,
        "reported": {"cpu": 8 * 3600.0, "gres/gpu": 2 * 3600.0},
        "allocated": {"cpu": 2 * 1800.0, "gres/gpu": 1800.0},
        "down": {"cpu": 4 * 600.0},
        "assocs": [{"depth": 0, "account": "root", "user": "", "used": {"cpu": 3600.0}},
                   {"depth": 1, "account": "lab", "user": "", "used": {"cpu": 3600.0}},
                   {"depth": 2, "account": "lab", "user": "zz-nouser", "used": {"cpu": 3600.0}}],
        "users": [{"user": "zz-nouser", "accounts": ["lab"], "used": {"cpu": 3600.0}}]}


def test_time_formats_and_values() -> None:
    assert [sreport.time_format(x) for x in ("s", "Min", "hours", "per", "MinPer", "hourp")] \
        == ["seconds", "minutes", "hours", "percent", "minper", "hourper"]
    with pytest.raises(sreport.ReportError):
        sreport.time_format("weeks")
    assert sreport.value(3600.0, 7200.0, "minutes") == "60"
    assert sreport.value(3600.0, 7200.0, "hours") == "1"
    assert sreport.value(3600.0, 7200.0, "percent") == "50.00%"
    assert sreport.value(3600.0, 7200.0, "minper") == "60(50.00%)"


def _report(kind: str, **kw: object) -> list[str]:
    opts: dict[str, object] = {"tres": ["cpu"], "tres_given": False, "fmt": "minutes",
                               "sep": "|", "trailing": False, "header": False}
    opts.update(kw)
    return sreport.report(kind, {}, DATA, **opts)  # type: ignore[arg-type]


def test_utilization_adds_up() -> None:
    assert _report("utilization") == ["lab|60|40|0|380|0|480"]
    assert _report("utilization", tres=["cpu", "gres/gpu"], tres_given=True) == [
        "lab|cpu|60|40|0|380|0|480", "lab|gres/gpu|30|0|0|90|0|120"]


def test_account_tree_is_indented_and_parsable_is_not() -> None:
    assert _report("accountutilizationbyuser") == [
        "lab|root|||60|0", "lab|lab|||60|0", "lab|lab|zz-nouser||60|0"]
    text = _report("accountutilizationbyuser", sep=None, header=True)
    assert text[0] == "-" * 80 and text[2] == "Usage reported in CPU Minutes"
    assert text[4].split() == ["Cluster", "Account", "Login", "Proper", "Name", "Used",
                               "Energy"]
    assert text[7].startswith("      lab  lab ") and text[8].startswith("      lab   lab ")


def test_topusage_orders_and_cuts() -> None:
    assert _report("topusage") == ["lab|zz-nouser||lab|60|0"]
