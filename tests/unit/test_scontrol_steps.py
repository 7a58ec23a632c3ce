"""`scontrol show step` ids, read as scontrol_print_step reads them (strtol)."""

from __future__ import annotations

import pytest

from corral.cli.scontrol_steps import parse_step_id


@pytest.mark.parametrize(("text", "parsed"), [
    ("5", (5, None, None)), ("5.0", (5, None, 0)), ("5.12", (5, None, 12)),
    ("7_3", (7, 3, None)), ("5.batch", (5, None, 0)), ("abc", (0, None, None)),
])
def test_parse_step_id(text: str, parsed: tuple[int, int | None, int | None]) -> None:
    assert parse_step_id(text) == parsed
