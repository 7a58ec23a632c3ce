"""The crontab records (scrontab) in both stores: written by a batch, removed by None."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.store.base import CrontabRecord, WriteBatch
from corral.store.memory import MemoryStore
from corral.store.sqlite import SqliteStore


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_crontab_records_round_trip(kind: str, tmp_path: Path) -> None:
    def open_store() -> SqliteStore | MemoryStore:
        return SqliteStore(str(tmp_path / "state.db")) if kind == "sqlite" else mem

    mem = MemoryStore()
    store = open_store()
    rec = {"crontab": "* * * * * true\n", "disabled": "", "jobs": [7],
           "lines": {"7": "1-1"}}
    store.write(WriteBatch(crontabs=[CrontabRecord(1000, rec), CrontabRecord(1001, rec)]))
    if kind == "sqlite":
        store.close()
        store = open_store()
    assert store.load_crontabs() == {1000: rec, 1001: rec}
    store.write(WriteBatch(crontabs=[CrontabRecord(1000, None)]))
    assert store.load_crontabs() == {1001: rec}
    assert WriteBatch(crontabs=[CrontabRecord(1, None)])  # a batch with only that is written
    store.close()
