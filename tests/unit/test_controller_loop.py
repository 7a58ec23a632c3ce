"""The controller runs on uvloop, on asyncio's loop when told not to."""

from __future__ import annotations

import asyncio

import pytest

from corral.controller.main import _run


async def _loop_module() -> int:
    return 1 if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else 0


def test_controller_runs_on_uvloop() -> None:
    assert _run(_loop_module()) == 1


def test_uvloop_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_UVLOOP", "0")
    assert _run(_loop_module()) == 0
