from __future__ import annotations

import time
from collections.abc import Iterator

import pytest


@pytest.fixture
def utc_tz(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """TZ=UTC for the test (the captures' times were printed in UTC), restored after."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
