"""A plain squeue's text kept line by line in squeue's order (issue #19).

squeue.QueuePrinter prints the queue again from all its rows after each change: tens of
milliseconds at 10,000 jobs, while 16 clients poll it and the loop takes submissions.
KeptText keeps each shown job's line and its place (its sort key, in a sorted list), and
is told which rows changed (answers.JobRows): those lines alone are printed and put in
place, and the text is joined from the kept lines in C.  The lines and their order are
QueuePrinter's (sort_jobs' P,t,-p, array tasks where slurmctld's list puts them), which
tests/unit/test_job_rows.py checks against the build from scratch."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from corral.cli import squeue

Row = list[Any]


class KeptText:
    def __init__(self, fields: list[str]) -> None:
        self.fields = fields
        at = {name: i for i, name in enumerate(fields)}
        self.usable = all(k in at for k in squeue.QueuePrinter.ROW_KEYS)
        (self.i_id, self.i_state, self.i_part, self.i_prio, self.i_start,
         self.i_array) = (at.get(k, 0) for k in squeue.QueuePrinter.ROW_KEYS)
        self.opts = squeue.default_options()
        self.header = squeue.format_jobs([], 0.0, self.opts)
        width = next(f.width for f in self.opts.fmt.fields if f.key == "M")
        self.width = width
        self.hole = squeue.TIME_HOLE * width
        self._reset()

    def _reset(self) -> None:
        self.shown_for: tuple[list[str] | None, set[str] | None] | None = None  # None: nothing kept
        # job id → (its key, its row, its line, its record when its TIME moves)
        self.placed: dict[Any, tuple[tuple[Any, ...], Row, str, dict[str, Any] | None]] = {}
        self.keys: list[tuple[Any, ...]] = []  # sorted; lines and moving in the same order
        self.lines: list[str] = []
        self.moving: list[dict[str, Any] | None] = []
        self.arrays: dict[Any, set[Any]] = {}  # array job id → its shown rows' job ids

    def print(self, changed: dict[Any, Row | None] | None, rows: dict[Any, Row | None],
              states: list[str] | None, hidden: set[str] | None) -> squeue.RenderedQueue | None:
        """The text after the rows in `changed` (job id → row, None: not answered) changed,
        `rows` being all the answer's (job id → row or None) and `changed` None where any
        may have.  None where it cannot be printed so (the caller prints it afresh)."""
        if not self.usable:
            return None
        if changed is None or self.shown_for != (states, hidden):
            self._reset()
            changed = rows
        try:
            text = self._apply(changed, states, hidden)
        except (TypeError, ValueError):  # keys that do not compare (odd values)
            text = None
        if text is None:
            self._reset()
        return text

    def _shown(self, row: Row | None, states: list[str] | None,
               hidden: set[str] | None) -> bool:
        return row is not None and (states is None or row[self.i_state] in states) \
            and not (hidden and row[self.i_part] in hidden)

    def _key(self, r: Row, pos: float) -> tuple[Any, ...]:
        # QueuePrinter.print's: (P, t, -p, base order)
        state = r[self.i_state]
        code = squeue.CODE_OF_STATE.get(str(state), str(state))
        if state == "PENDING":
            return (r[self.i_part], code, -r[self.i_prio], 1, -pos, 0)
        return (r[self.i_part], code, -r[self.i_prio], 0, -(r[self.i_start] or 0), pos)

    def _take_out(self, job_id: Any) -> None:
        key = self.placed.pop(job_id)[0]
        at = bisect_left(self.keys, key)
        del self.keys[at], self.lines[at], self.moving[at]

    def _put(self, job_id: Any, key: tuple[Any, ...], row: Row, line: str,
             record: dict[str, Any] | None) -> bool:
        at = bisect_left(self.keys, key)
        if at < len(self.keys) and self.keys[at] == key:
            return False  # two lines of one place: their order is the rows' (QueuePrinter)
        self.keys.insert(at, key)
        self.lines.insert(at, line)
        self.moving.insert(at, record)
        self.placed[job_id] = (key, row, line, record)
        return True

    def _apply(self, changed: dict[Any, Row | None], states: list[str] | None,
               hidden: set[str] | None) -> squeue.RenderedQueue | None:
        i_array, i_prio, fields = self.i_array, self.i_prio, self.fields
        arrays = self.arrays
        touched: set[Any] = set()  # arrays whose members' places are worked out again
        fresh: list[tuple[Any, Row]] = []
        for job_id, row in changed.items():
            old = self.placed.get(job_id)
            if old is not None:
                self._take_out(job_id)
                array = old[1][i_array]
                if array is not None:
                    touched.add(array)
                    arrays[array].discard(job_id)
            if self._shown(row, states, hidden):
                assert row is not None
                if not isinstance(row[i_prio], (int, float)):
                    return None
                fresh.append((job_id, row))
                if row[i_array] is not None:
                    touched.add(row[i_array])
        self.shown_for = (states, hidden)
        records = [dict(zip(fields, r, strict=True)) for _, r in fresh]
        running: list[dict[str, Any]] = []
        printed = squeue.render_rows(self.opts.fmt, {}, records, 0.0, running).split("\n")
        if len(printed) != len(records) + 1:
            return None
        # the kept members of the touched arrays move with the others: out, and back below
        regrouped: list[tuple[Any, Row, str, dict[str, Any] | None]] = []
        for array in touched:
            for job_id in arrays.get(array, ()):
                _, row, line, record = self.placed[job_id]
                self._take_out(job_id)
                regrouped.append((job_id, row, line, record))
        for (job_id, row), record, line in zip(fresh, records, printed, strict=False):
            regrouped.append((job_id, row, line + "\n", record if self.hole in line else None))
        members: list[tuple[Any, Row, str, dict[str, Any] | None]] = []
        for entry in regrouped:
            job_id, row, line, record = entry
            if row[i_array] is None:
                if not self._put(job_id, self._key(row, float(row[self.i_id])), row, line,
                                 record):
                    return None
            else:
                members.append(entry)
                arrays.setdefault(row[i_array], set()).add(job_id)
        if members:
            places = squeue.list_positions([dict(zip(fields, m[1], strict=True))
                                             for m in members])
            for k, (job_id, row, line, record) in enumerate(members):
                if not self._put(job_id, self._key(row, places[k]), row, line, record):
                    return None
        for array in touched:
            if not arrays.get(array, True):
                del arrays[array]
        pieces = (self.header + "".join(self.lines)).split(self.hole)
        moving: list[dict[str, Any]] = list(filter(None, self.moving))  # type: ignore[arg-type]
        if len(pieces) != len(moving) + 1:
            return None
        return squeue.RenderedQueue(pieces, moving, self.width)  # type: ignore[arg-type]
