"""What the core keeps from one pass or tick to the next, brought up to date from the job
table's marks (`JobTable.mark`: every job added, dropped, persisted or moved to another
state, and every job a pass gave new reasons, priority or plans) instead of being made
again from every job each time."""

from __future__ import annotations

from typing import Protocol


class _Marks(Protocol):
    marks: list[int]
    marks_dropped: int


class MarkCursor:
    """One reader's place in the job table's marks."""

    __slots__ = ("table", "seen")

    def __init__(self, table: _Marks) -> None:
        self.table = table
        self.seen = -1  # marks read (marks_dropped + len(marks) then); -1: none yet

    def changed(self) -> list[int] | None:
        """The ids of the jobs marked since the last call (an id may repeat), or None the
        first time and when marks were dropped unread: what was kept must be made afresh."""
        table = self.table
        dropped = table.marks_dropped
        seen, self.seen = self.seen, dropped + len(table.marks)
        if seen < dropped:
            return None
        return table.marks[seen - dropped:]
