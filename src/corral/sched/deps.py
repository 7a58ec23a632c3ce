"""Job dependencies (`--dependency`), parsed and evaluated as Slurm 22.05 does.

Syntax: `type:id[:id…][,type:id…]` (all must hold) or with `?` between groups (any
holds; one `?` anywhere makes the whole list "any", as in Slurm).  Types: after, afterany,
afterok, afternotok, aftercorr, singleton; a bare id means afterany (Slurm's old form).
Ids: `7` (the job, or every task when 7 is an array), `7_*` (the whole array), `7_2` (one
task), `7_[1-3,5]` (those tasks); `after:7+10` waits 10 minutes after 7 starts.
An id Slurm no longer knows lifts the dependency ("job is gone, dependency lifted"), and an
unknown id is accepted at submission too (the reference capture D10), so `lookup`
returning no records means satisfied.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from corral.model.job import ACTIVE_STATES, FINISHED_STATES, JobState

SATISFIED = "satisfied"
WAITING = "waiting"
NEVER = "never"  # Slurm: DependencyNeverSatisfied

FULFILLED = "fulfilled"
UNFULFILLED = "unfulfilled"
FAILED = "failed"

KINDS = ("after", "afterany", "afterok", "afternotok", "aftercorr", "singleton")
_UNSUPPORTED = ("afterburstbuffer", "expand")
_FINISHED = frozenset(s.value for s in FINISHED_STATES)
_PENDING = JobState.PENDING.value
_COMPLETED = JobState.COMPLETED.value

# (state, exit code, start time) of every record the reference names
Lookup = Callable[[int, int | None], Sequence[tuple[str, int, float | None]]]


class DependencyError(ValueError):
    """A dependency Slurm would refuse.  str() is Slurm's wording; `detail` says why."""

    def __init__(self, detail: str, message: str = "Job dependency problem") -> None:
        super().__init__(message)
        self.detail = detail


@dataclass(frozen=True, slots=True)
class DepItem:
    kind: str
    job_id: int = 0  # 0 for singleton
    task_id: int | None = None  # one array task
    whole_array: bool = False  # written ID_*
    delay_s: int = 0  # after:ID+minutes
    failed: bool = False  # "(failed)" carried over from scontrol's own text


@dataclass(frozen=True, slots=True)
class Dependency:
    items: tuple[DepItem, ...] = ()
    any_of: bool = False  # "?" separators

    def job_ids(self) -> list[int]:
        return [i.job_id for i in self.items if i.job_id]


_ID = re.compile(r"(\d+)(?:_(\*|\d+))?(?:\+(-?\d+))?(?:\((\w*)\))?")
_ARRAY_SET = re.compile(r"(\d+)_\[([^\]]*)\]")
_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


def _expand_array_sets(text: str) -> str:
    """after:123_[4-5] → after:123_4:123_5 (what Slurm's _xlate_array_dep does)."""

    def expand(m: re.Match[str]) -> str:
        job, spec = m.group(1), m.group(2)
        tasks: list[int] = []
        for part in spec.split(","):
            r = _RANGE.fullmatch(part.strip())
            if not r:
                raise DependencyError(f"bad array task list {spec!r}")
            lo = int(r.group(1))
            hi = int(r.group(2)) if r.group(2) else lo
            step = int(r.group(3)) if r.group(3) else 1
            if hi < lo or step < 1:
                raise DependencyError(f"bad array task list {spec!r}")
            tasks.extend(range(lo, hi + 1, step))
        if not tasks:
            raise DependencyError(f"bad array task list {spec!r}")
        return ":".join(f"{job}_{t}" for t in sorted(set(tasks)))

    return _ARRAY_SET.sub(expand, text)


def _parse_id(kind: str, text: str) -> DepItem:
    m = _ID.fullmatch(text)
    if not m:
        raise DependencyError(f"bad job id {text!r}")
    job_id = int(m.group(1))
    if job_id == 0:
        raise DependencyError("job id 0")
    task, minutes, state = m.group(2), m.group(3), m.group(4)
    delay = 0
    if minutes is not None:
        delay = int(minutes)
        if delay <= 0:
            raise DependencyError(f"bad delay in {text!r}")
        delay *= 60
    return DepItem(
        kind=kind, job_id=job_id,
        task_id=int(task) if task is not None and task != "*" else None,
        whole_array=task == "*", delay_s=delay,
        failed=(state or "").lower() == FAILED,
    )


def parse_dependency(text: str | None, *, own_job_id: int | None = None,
                     own_array_job_id: int | None = None) -> Dependency:
    """Parse a --dependency value; "" or "0" means none.  Raises DependencyError.
    With `own_job_id` (and `own_array_job_id` for an array task), a job that names itself
    is refused, as Slurm does."""
    if text is None:
        return Dependency()
    text = text.strip()
    if text in ("", "0"):
        return Dependency()
    text = _expand_array_sets(text)
    items: list[DepItem] = []
    any_of = "?" in text
    for group in re.split(r"[,?]", text):
        if not group:
            raise DependencyError(f"empty dependency in {text!r}")
        kind, colon, rest = group.partition(":")
        kind_l = kind.lower()
        if not colon:
            single = re.fullmatch(r"(?i)singleton(?:\((\w*)\))?", group)
            if single:
                items.append(DepItem("singleton", failed=(single.group(1) or "").lower() == FAILED))
                continue
            if group[:1].isdigit():  # Slurm's old form: a bare id means afterany
                items.append(_parse_id("afterany", group))
                continue
            raise DependencyError(f"bad dependency {group!r}")
        if kind_l in _UNSUPPORTED:
            raise DependencyError(f"{kind_l} dependencies are not supported",
                                  f"Dependency type {kind_l} is not supported")
        if kind_l not in KINDS or kind_l == "singleton":
            raise DependencyError(f"unknown dependency type {kind!r}")
        if not rest:
            raise DependencyError(f"no job id in {group!r}")
        for part in rest.split(":"):
            items.append(_parse_id(kind_l, part))
    unique: list[DepItem] = []
    seen: set[tuple[str, int, int | None, bool]] = set()
    for item in items:
        key = (item.kind, item.job_id, item.task_id, item.whole_array)
        if key not in seen:  # Slurm keeps one entry per (type, job, task)
            seen.add(key)
            unique.append(item)
    if own_job_id is not None:
        for item in unique:
            same = item.job_id == own_job_id and (item.task_id is None or own_array_job_id is None)
            whole = own_array_job_id is not None and item.job_id == own_array_job_id \
                and item.task_id is None
            if same or whole:
                raise DependencyError(f"job {own_job_id} cannot depend on itself")
    return Dependency(tuple(unique), any_of)


def item_state(item: DepItem, lookup: Lookup, now: float, *, singleton_blocked: bool = False,
               array_task_id: int | None = None) -> str:
    """fulfilled / unfulfilled / failed for one entry."""
    if item.failed:
        return FAILED
    if item.kind == "singleton":
        return UNFULFILLED if singleton_blocked else FULFILLED
    if item.kind == "aftercorr" and array_task_id is not None:
        records = lookup(item.job_id, array_task_id)
        if not records:  # no such task in the other array: wait on the array as a whole
            records = lookup(item.job_id, None)
    else:
        records = lookup(item.job_id, item.task_id)
    if not records:
        return FULFILLED  # job is gone (or never existed): dependency lifted
    pending, finished, ok = False, True, True  # (one loop: most items name one record)
    for state, code, _ in records:
        if state == _PENDING:
            pending = True
        if state not in _FINISHED:
            finished = False
        if state != _COMPLETED or code != 0:
            ok = False
    kind = item.kind
    if kind == "after":
        if pending:
            return UNFULFILLED
        starts = [s for _, _, s in records if s is not None]
        # A job cancelled before it started has no start time: nothing to wait for.
        if item.delay_s and starts and now - max(starts) < item.delay_s:
            return UNFULFILLED
        return FULFILLED
    if kind == "afterany":
        return FULFILLED if finished else UNFULFILLED
    if kind == "afternotok":
        if not finished:
            return UNFULFILLED
        return FAILED if ok else FULFILLED
    # afterok, aftercorr
    if not finished:
        return UNFULFILLED
    return FULFILLED if ok else FAILED


def combine(dep: Dependency, states: Sequence[str]) -> str:
    """The dependency's verdict from its entries' states (`item_state`)."""
    if not states:
        return SATISFIED
    if dep.any_of:
        if FULFILLED in states:
            return SATISFIED
        return WAITING if UNFULFILLED in states else NEVER
    if FAILED in states:
        return NEVER
    return WAITING if UNFULFILLED in states else SATISFIED


def evaluate(dep: Dependency, lookup: Lookup, now: float, *, job_user: str = "",
             job_name: str = "", singleton_blocked: bool = False,
             array_task_id: int | None = None) -> str:
    """"satisfied", "waiting" or "never" (→ reason DependencyNeverSatisfied).

    `singleton_blocked`: the caller's answer to whether another job of `job_user` named
    `job_name` is running, suspended, or pending ahead of this one (the names are only
    carried for the caller's bookkeeping).  `array_task_id`: this job's own task id, which
    aftercorr pairs with the same task of the other array."""
    states = [item_state(i, lookup, now, singleton_blocked=singleton_blocked,
                         array_task_id=array_task_id) for i in dep.items]
    return combine(dep, states)


def format_dependency(dep: Dependency, lookup: Lookup | None = None, now: float = 0.0, *,
                      singleton_blocked: bool = False, array_task_id: int | None = None,
                      is_array: Callable[[int], bool] | None = None,
                      states: Sequence[str] | None = None) -> str:
    """The Dependency= text of `scontrol show job`: entries not yet fulfilled, each with
    its state, e.g. "afterok:1_*(unfulfilled)".  "" once the whole dependency is satisfied
    (scontrol prints (null)).  Without `lookup`, every entry shows as unfulfilled (what a
    job shows right after submission).  `is_array(id)` tells whether a plain id names an
    array, which Slurm prints as ID_*.  `states`: each entry's state, already known (the
    scheduling pass's `DepIndex.item_states`), instead of `lookup`."""
    if not dep.items:
        return ""
    if states is not None:
        if combine(dep, states) == SATISFIED:
            return ""
    elif lookup is None:
        states = [FAILED if i.failed else UNFULFILLED for i in dep.items]
    else:
        states = [item_state(i, lookup, now, singleton_blocked=singleton_blocked,
                             array_task_id=array_task_id) for i in dep.items]
        if combine(dep, states) == SATISFIED:
            return ""
    out: list[str] = []
    sep = ""
    for item, state in zip(dep.items, states, strict=True):
        if state == FULFILLED:
            continue
        if item.kind == "singleton":
            text = f"singleton({state})"
        else:
            text = f"{item.kind}:{item.job_id}"
            if item.task_id is not None:
                text += f"_{item.task_id}"
            elif item.whole_array or (is_array is not None and is_array(item.job_id)):
                text += "_*"
            if item.delay_s:
                text += f"+{item.delay_s // 60}"
            text += f"({state})"
        out.append(sep + text)
        sep = "?" if dep.any_of else ","
    return "".join(out)


# ---- the per-pass index ----------------------------------------------------------------

class DepJob(Protocol):
    """What dependencies read of a job record (a `Job` has all of it)."""

    @property
    def job_id(self) -> int: ...
    @property
    def array_job_id(self) -> int | None: ...
    @property
    def array_task_id(self) -> int | None: ...
    @property
    def array_tasks(self) -> list[int] | None: ...
    @property
    def state(self) -> JobState: ...
    @property
    def exit_code(self) -> int: ...
    @property
    def start_time(self) -> float | None: ...
    @property
    def uid(self) -> int: ...
    @property
    def name(self) -> str: ...


@dataclass(frozen=True, slots=True)
class GoneRecord:
    """The final state of a job no longer held in the controller's memory."""

    job_id: int
    array_job_id: int | None
    array_task_id: int | None
    state: str
    exit_code: int
    start_time: float | None

    @staticmethod
    def of(job: DepJob) -> GoneRecord:
        return GoneRecord(job.job_id, job.array_job_id, job.array_task_id, job.state.value,
                          job.exit_code, job.start_time)


class GoneJobs:
    """Final states of finished jobs that left memory, for dependencies that still name them.

    The controller fills it outside scheduling passes (when a job expires while a pending
    job depends on it, or once from the store when a dependency names a job not in memory),
    so a pass never reads the store.  `known` records ids looked up in the store and not
    found there either: the dependency on them is lifted, as Slurm does."""

    def __init__(self) -> None:
        self.by_id: dict[int, GoneRecord] = {}
        self.by_array: dict[int, dict[int, GoneRecord]] = {}
        self.missing: set[int] = set()

    def add(self, rec: GoneRecord) -> None:
        self.by_id[rec.job_id] = rec
        if rec.array_job_id is not None:
            self.by_array.setdefault(rec.array_job_id, {})[rec.job_id] = rec
        self.missing.discard(rec.job_id)

    def knows(self, job_id: int) -> bool:
        return job_id in self.by_id or job_id in self.by_array or job_id in self.missing

    def lookup(self, job_id: int, task_id: int | None) -> list[tuple[str, int, float | None]]:
        return [(r.state, r.exit_code, r.start_time) for r in self.records(job_id, task_id)]

    def records(self, job_id: int, task_id: int | None) -> list[GoneRecord]:
        recs: list[GoneRecord] = []
        members = self.by_array.get(job_id, {})
        if task_id is None:
            own = self.by_id.get(job_id)
            if own is not None:
                recs.append(own)
            recs.extend(r for r in members.values() if r.job_id != job_id)
        else:
            recs.extend(r for r in members.values() if r.array_task_id == task_id)
        return recs

    def __len__(self) -> int:
        return len(self.by_id)


class DepIndex:
    """Every job the dependencies of one pass may name, indexed once: O(1) lookups instead
    of a scan of all jobs per dependency.  Built on first use: a pass in which no pending
    job has a dependency (the common case) does not walk every job for nothing."""

    def __init__(self, jobs: Iterable[DepJob], gone: GoneJobs | None = None) -> None:
        self.gone = gone
        self._jobs: Iterable[DepJob] | None = jobs
        self._by_id: dict[int, DepJob] = {}
        self._by_array: dict[int, list[DepJob]] = {}
        # for singleton, made on its first use (a list per pending job is costly)
        self._names_built = False
        self._active: set[tuple[int, str]] = set()  # (uid, name) of running/suspended jobs
        self._pending: dict[tuple[int, str], list[DepJob]] = {}
        # item_states' answers per entry (but singleton, which depends on the job): for
        # a scheduling pass, during which no job changes
        self._states: dict[DepItem, str] = {}

    def _build(self) -> None:
        jobs, self._jobs = self._jobs, None
        if jobs is None:
            return
        by_id, by_array = self._by_id, self._by_array
        for j in jobs:
            by_id[j.job_id] = j
            if j.array_job_id is not None:
                by_array.setdefault(j.array_job_id, []).append(j)

    def _build_names(self) -> None:
        self._build()
        if self._names_built:
            return
        self._names_built = True
        active, pending = self._active, self._pending
        running, waiting = ACTIVE_STATES, JobState.PENDING
        for j in self._by_id.values():
            st = j.state
            if st in running:
                active.add((j.uid, j.name))
            elif st is waiting:
                pending.setdefault((j.uid, j.name), []).append(j)

    @property
    def by_id(self) -> dict[int, DepJob]:
        self._build()
        return self._by_id

    @property
    def by_array(self) -> dict[int, list[DepJob]]:
        self._build()
        return self._by_array

    @property
    def active(self) -> set[tuple[int, str]]:
        self._build_names()
        return self._active

    @property
    def pending(self) -> dict[tuple[int, str], list[DepJob]]:
        self._build_names()
        return self._pending

    def item_states(self, dep: Dependency, now: float, singleton_blocked: bool
                    ) -> tuple[str, ...]:
        """`item_state` of each entry of `dep` at `now` (no job's own array task id), each
        entry's answer made once a pass (many jobs wait on the same job)."""
        if self._jobs is not None:
            self._build()
        memo = self._states
        items = dep.items
        if len(items) == 1 and items[0].kind != "singleton":  # (the common case)
            item = items[0]
            state = memo.get(item)
            if state is None:
                state = memo[item] = item_state(item, self._lookup, now)
            return (state,)
        out: list[str] = []
        for item in items:
            if item.kind == "singleton":
                out.append(FAILED if item.failed else
                           UNFULFILLED if singleton_blocked else FULFILLED)
                continue
            state = memo.get(item)
            if state is None:
                state = memo[item] = item_state(item, self._lookup, now)
            out.append(state)
        return tuple(out)

    def dependency_text(self, text: str, dep: Dependency, states: tuple[str, ...]) -> str:
        """`format_dependency(dep, states=states, is_array=…)` of a job's dependency `text`
        (parsed: `dep`), the arrays being this pass's, remembered across passes: the
        answer depends on nothing else, and a waiting job's rarely changes."""
        if self._jobs is not None:
            self._build()
        by_array = self._by_array
        arrays = tuple(i.job_id in by_array for i in dep.items) if by_array else ()
        key = (text, states, arrays)
        found = _TEXTS.get(key)
        if found is None:
            if len(_TEXTS) >= 65536:
                _TEXTS.clear()
            found = _TEXTS[key] = format_dependency(
                dep, states=states, is_array=lambda job_id: job_id in by_array)
        return found

    def lookup(self, job_id: int, task_id: int | None) -> list[tuple[str, int, float | None]]:
        self._build()
        return self._lookup(job_id, task_id)

    def _lookup(self, job_id: int, task_id: int | None) -> list[tuple[str, int, float | None]]:
        members = self._by_array.get(job_id, ())
        gone = self.gone
        if task_id is None and not members and (
                gone is None or job_id not in gone.by_array):
            # (the common case: a plain job, in memory or gone; what the rest makes of it)
            own = self._by_id.get(job_id)
            if own is not None:
                return [(own.state._value_, own.exit_code, own.start_time)]
            rec = gone.by_id.get(job_id) if gone is not None else None
            return [] if rec is None else [(rec.state, rec.exit_code, rec.start_time)]
        js: list[DepJob] = []
        if task_id is None:
            own = self._by_id.get(job_id)
            if own is not None:
                js.append(own)
            if members:
                js.extend(j for j in members if j.job_id != job_id)
        else:
            for j in members:
                if j.array_task_id == task_id:
                    js.append(j)
                elif j.array_tasks:
                    tasks = j.array_tasks
                    k = bisect_left(tasks, task_id)
                    if k < len(tasks) and tasks[k] == task_id:
                        js.append(j)
        # (_value_: Enum's value property costs a call per job)
        out = [(j.state._value_, j.exit_code, j.start_time) for j in js]
        if gone is not None and (job_id in gone.by_array
                                 or (task_id is None and job_id in gone.by_id)):
            # an array some of whose tasks already left memory: both halves count
            by_id = self._by_id
            out.extend((r.state, r.exit_code, r.start_time)
                       for r in gone.records(job_id, task_id) if r.job_id not in by_id)
        return out

    def singleton_blocked(self, job: DepJob) -> bool:
        """Another job of this user with this name runs, or waits ahead of it."""
        key = (job.uid, job.name)
        if key in self.active:
            return True
        return any(j.job_id < job.job_id and j.array_job_id != job.array_job_id
                   for j in self.pending.get(key, ()))


# DepIndex.dependency_text's answers by (dependency text, its entries' states, whether
# each entry's id names an array): a pure function's, kept across passes
_TEXTS: dict[tuple[str, tuple[str, ...], tuple[bool, ...]], str] = {}


@lru_cache(maxsize=65536)
def parse_cached(text: str) -> Dependency:
    """parse_dependency for the scheduler: the same text is parsed once, not every pass.
    Raises DependencyError like parse_dependency (errors are not cached)."""
    return parse_dependency(text)
