"""Every message between the controller, the agents, the step supervisors and srun/salloc,
as typed classes with a strict parser (docs/STEPS.md describes the protocol).

A message is a class per kind; its `TYPE` is the wire's `"type"` (or, for the supervisor's
datagrams, `"op"` / `"event"`, named by `KEY`).  `decode(raw, CHANNEL)` turns a JSON text
or an already-parsed object into the class its channel allows, checking each field's type and
range, and raises `MessageError` (never KeyError/TypeError/ValueError) for anything else; a
field the class does not know is ignored (a newer peer may add one).  `encode(msg)` is its
inverse: `decode(encode(m), channel) == m`.

The wire format is the JSON of today's dicts, so a peer that still builds or reads plain
dicts keeps working.  Plain classes rather than `dataclasses`: srun imports this module and
must start fast (tests/unit/test_cli_imports.py); `dataclass_transform` tells type checkers
that the keyword constructors are typed.
"""

from __future__ import annotations

import binascii
import json
import math

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, TypeVar, dataclass_transform

    from corral.model.launchplan import ContainerSpec, LaunchPlan

    M = TypeVar("M", bound="Message")
else:
    def dataclass_transform(**_kw: object) -> object:
        return lambda cls: cls

MAX_ID = (1 << 53) - 1  # what a JSON number holds exactly
MAX_UID = (1 << 32) - 2
MAX_TEXT = 1 << 20  # one string field (a name, a path, an environment value)
MAX_DATA = 16 << 20  # one base64 chunk of program I/O (the link's limit is 64 MB)
MAX_ITEMS = 1 << 17  # entries of one list or object (tasks, environment, argv)
MAX_SIGNAL = 64
JOB_END_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                            "OUT_OF_MEMORY", "REQUEUED", "PREEMPTED", "BOOT_FAIL", "DEADLINE"})
STREAMS = ("stdout", "stderr")
STDIN_MODES = ("0", "all", "none")  # or any task id: "5" (srun --input=5)
OPEN_MODES = ("append", "truncate")


class MessageError(ValueError):
    """A message that is not valid JSON, not of a kind its channel allows, or has a field of
    the wrong type or out of range.  `str()` says what, for a log line or an error reply."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class FieldSpec:
    """Constraints of one field (made by `field()`)."""

    __slots__ = ("default", "default_factory", "lo", "hi", "maxlen", "choices", "b64",
                 "omit_none", "name", "kind")

    def __init__(self, default: Any = MISSING, default_factory: Callable[[], Any] | None = None,
                 lo: float | None = None, hi: float | None = None, maxlen: int | None = None,
                 choices: tuple[str, ...] | frozenset[str] | None = None, b64: bool = False,
                 omit_none: bool = False) -> None:
        self.default = default
        self.default_factory = default_factory
        self.lo = lo
        self.hi = hi
        self.maxlen = maxlen
        self.choices = choices
        self.b64 = b64
        self.omit_none = omit_none
        self.name = ""
        self.kind: tuple[Any, ...] = ()

    @property
    def required(self) -> bool:
        return self.default is MISSING and self.default_factory is None

    def make_default(self) -> Any:
        return self.default_factory() if self.default_factory is not None else self.default


def field(*, default: Any = MISSING, default_factory: Callable[[], Any] | None = None,
          lo: float | None = None, hi: float | None = None, maxlen: int | None = None,
          choices: tuple[str, ...] | frozenset[str] | None = None, b64: bool = False,
          omit_none: bool = False) -> Any:
    """A field with constraints: `lo`/`hi` bound numbers, `maxlen` strings and collections,
    `choices` strings; `b64` fields must be base64; `omit_none` leaves a None off the wire."""
    return FieldSpec(default, default_factory, lo, hi, maxlen, choices, b64, omit_none)


_CLASSES: dict[str, type[Message]] = {}


def _parse_type(text: str) -> tuple[Any, ...]:
    """"int | None" -> ("opt", ("int",)); "list[TaskSpec]" -> ("list", ("msg", "TaskSpec"))."""
    text = text.strip()
    if text.endswith("| None"):
        return ("opt", _parse_type(text[:-len("| None")]))
    if text.startswith("list[") and text.endswith("]"):
        return ("list", _parse_type(text[5:-1]))
    if text.startswith("dict[str,") and text.endswith("]"):
        return ("dict", _parse_type(text[len("dict[str,"):-1]))
    if text in ("int", "float", "str", "bool", "Any"):
        return (text,)
    return ("msg", text)


@dataclass_transform(kw_only_default=True, field_specifiers=(field,))
class Message:
    """Base of every message and of the records nested in them."""

    TYPE: ClassVar[str] = ""  # the wire's "type" (empty: a nested record, no type key)
    KEY: ClassVar[str] = "type"
    _fields: ClassVar[tuple[FieldSpec, ...] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _CLASSES[cls.__name__] = cls

    @classmethod
    def fields(cls) -> tuple[FieldSpec, ...]:
        """The fields, from the class annotations (worked out on first use: srun pays only
        for the kinds it meets)."""
        specs = cls.__dict__.get("_fields")
        if specs is not None:
            return specs  # type: ignore[no-any-return]
        found: list[FieldSpec] = []
        for klass in reversed(cls.__mro__):
            for name, ann in klass.__dict__.get("__annotations__", {}).items():
                if name.isupper() or name.startswith("_"):
                    continue  # TYPE, KEY, _fields: class constants
                value = klass.__dict__.get(name, MISSING)
                spec = value if isinstance(value, FieldSpec) else FieldSpec(default=value)
                spec.name = name
                spec.kind = _parse_type(str(ann))
                found = [s for s in found if s.name != name] + [spec]
        cls._fields = tuple(found)
        return cls._fields

    def __init__(self, **values: Any) -> None:
        for spec in self.fields():
            if spec.name in values:
                value = values.pop(spec.name)
            elif spec.required:
                raise TypeError(f"{type(self).__name__}: missing field {spec.name!r}")
            else:
                value = spec.make_default()
            object.__setattr__(self, spec.name, value)
        if values:
            raise TypeError(f"{type(self).__name__}: unknown fields {sorted(values)}")

    # ---- comparison and display ----------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, s.name) == getattr(other, s.name) for s in self.fields())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{s.name}={getattr(self, s.name)!r}" for s in self.fields())
        return f"{type(self).__name__}({inner})"

    # ---- wire ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {self.KEY: self.TYPE} if self.TYPE else {}
        for spec in self.fields():
            value = getattr(self, spec.name)
            if value is None and spec.omit_none:
                continue
            out[spec.name] = _to_wire(value)
        return out

    @classmethod
    def from_dict(cls: type[M], data: Any, where: str = "") -> M:
        """A validated instance; MessageError naming the first bad field."""
        where = where or (cls.TYPE or cls.__name__)
        if not isinstance(data, dict):
            raise MessageError(f"{where}: expected an object, got {_kind(data)}")
        values: dict[str, Any] = {}
        for spec in cls.fields():
            if spec.name not in data:
                if spec.required:
                    raise MessageError(f"{where}: missing field {spec.name!r}")
                values[spec.name] = spec.make_default()
                continue
            values[spec.name] = _check(spec, spec.kind, data[spec.name],
                                       f"{where}.{spec.name}")
        msg = cls(**values)
        msg.validate(where)
        return msg

    def validate(self, where: str) -> None:
        """Rules between fields (a subclass's); raise MessageError."""


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _to_wire(value: Any) -> Any:
    if isinstance(value, Message):
        return value.to_dict()
    if isinstance(value, list):
        return [_to_wire(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_wire(v) for k, v in value.items()}
    return value


def _check(spec: FieldSpec, kind: tuple[Any, ...], value: Any, where: str) -> Any:
    tag = kind[0]
    if tag == "opt":
        return None if value is None else _check(spec, kind[1], value, where)
    if tag == "Any":
        return value
    if tag == "int":
        if type(value) is not int:
            raise MessageError(f"{where}: expected an integer, got {_kind(value)}")
        lo = 0 if spec.lo is None else spec.lo
        hi = MAX_ID if spec.hi is None else spec.hi
        if not lo <= value <= hi:
            raise MessageError(f"{where}: {value} is out of range [{lo:g}, {hi:g}]")
        return value
    if tag == "float":
        if type(value) not in (int, float) or not math.isfinite(value):
            raise MessageError(f"{where}: expected a number, got {_kind(value)}")
        lo = 0.0 if spec.lo is None else spec.lo
        hi = 1e15 if spec.hi is None else spec.hi
        if not lo <= value <= hi:
            raise MessageError(f"{where}: {value} is out of range [{lo:g}, {hi:g}]")
        return float(value)
    if tag == "bool":
        if type(value) is not bool:
            raise MessageError(f"{where}: expected true or false, got {_kind(value)}")
        return value
    if tag == "str":
        if type(value) is not str:
            raise MessageError(f"{where}: expected a string, got {_kind(value)}")
        limit = spec.maxlen or (MAX_DATA if spec.b64 else MAX_TEXT)
        if len(value) > limit:
            raise MessageError(f"{where}: longer than {limit} characters")
        if spec.choices is not None and value not in spec.choices:
            raise MessageError(f"{where}: {value[:40]!r} is not one of {sorted(spec.choices)}")
        if spec.b64:
            try:
                binascii.a2b_base64(value, strict_mode=True)
            except (binascii.Error, ValueError):
                raise MessageError(f"{where}: not base64") from None
        return value
    if tag == "list":
        if type(value) is not list:
            raise MessageError(f"{where}: expected a list, got {_kind(value)}")
        if len(value) > (spec.maxlen or MAX_ITEMS):
            raise MessageError(f"{where}: more than {spec.maxlen or MAX_ITEMS} items")
        item = FieldSpec(lo=spec.lo, hi=spec.hi, choices=spec.choices)
        return [_check(item, kind[1], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if tag == "dict":
        if type(value) is not dict:
            raise MessageError(f"{where}: expected an object, got {_kind(value)}")
        if len(value) > (spec.maxlen or MAX_ITEMS):
            raise MessageError(f"{where}: more than {spec.maxlen or MAX_ITEMS} entries")
        item = FieldSpec(lo=spec.lo, hi=spec.hi)
        out = {}
        for k, v in value.items():
            if len(k) > MAX_TEXT:
                raise MessageError(f"{where}: a key longer than {MAX_TEXT} characters")
            out[k] = _check(item, kind[1], v, f"{where}[{k[:40]!r}]")
        return out
    cls = _CLASSES.get(kind[1])
    if cls is None:  # a programming error in this module, caught by its unit tests
        raise MessageError(f"{where}: unknown record type {kind[1]}")
    return cls.from_dict(value, where)


# ---- channels --------------------------------------------------------------------------

class Channel:
    """The message kinds one receiver accepts."""

    def __init__(self, name: str, key: str = "type") -> None:
        self.name = name
        self.key = key
        self.kinds: dict[str, type[Message]] = {}

    def add(self, cls: type[Message]) -> type[Message]:
        self.kinds[cls.TYPE] = cls
        return cls


def decode(raw: str | bytes | Any, channel: Channel) -> Message:
    """The message in `raw` (JSON text, or an object parsed already) if `channel` allows its
    kind and every field checks; MessageError otherwise."""
    if isinstance(raw, (str, bytes, bytearray)):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            raise MessageError(f"{channel.name}: not valid JSON") from None
    if not isinstance(raw, dict):
        raise MessageError(f"{channel.name}: expected an object, got {_kind(raw)}")
    kind = raw.get(channel.key)
    cls = channel.kinds.get(kind) if isinstance(kind, str) else None
    if cls is None:
        shown = repr(kind)[:40]
        raise MessageError(f"{channel.name}: unknown message {channel.key} {shown}")
    try:
        return cls.from_dict(raw)
    except RecursionError:
        raise MessageError(f"{channel.name}: nested too deeply") from None


def encode(msg: Message) -> str:
    return json.dumps(msg.to_dict(), separators=(",", ":"))


# The receivers.
TO_CONTROLLER_FROM_CLIENT = Channel("client message")  # srun/salloc -> controller
TO_CLIENT = Channel("controller message")  # controller -> srun/salloc
TO_AGENT = Channel("controller message")  # controller -> agent
TO_CONTROLLER_FROM_AGENT = Channel("agent message")  # agent -> controller
TO_STEPD = Channel("control message", key="op")  # agent -> step supervisor (datagram)
TO_AGENT_FROM_STEPD = Channel("step notification", key="event")  # supervisor -> agent


def _check_stdin(mode: str, where: str) -> None:
    """A step's stdin mode: "all", "none", or the id of the one task that reads it."""
    if mode not in STDIN_MODES and not (mode.isdecimal() and mode.isascii()
                                        and int(mode) < 1 << 24 and mode == str(int(mode))):
        raise MessageError(f"{where}.stdin: {mode[:40]!r} is not all, none or a task id")


# ---- records nested in messages ----------------------------------------------------------

class Window(Message):
    rows: int = field(default=24, lo=0, hi=65535)
    cols: int = field(default=80, lo=0, hi=65535)


class StepSpec(Message):
    """The step srun asks for (docs/STEPS.md, STEP)."""

    name: str = ""
    argv: list[str] = field(default_factory=list)
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict)
    ntasks: int | None = field(default=None, lo=1, hi=1 << 24)
    nodes: int | None = field(default=None, lo=1, hi=1 << 24)
    ntasks_per_node: int | None = field(default=None, lo=1, hi=1 << 24)
    cpus_per_task: int = field(default=1, lo=1, hi=1 << 24)
    gpus_per_task: int | None = field(default=None, lo=0, hi=1 << 16)
    gpus_per_node: int | None = field(default=None, lo=0, hi=1 << 16)
    # --gpus: a total for the step, taken from the job's GPUs node by node (as many as
    # each of the step's nodes has), so 6 GPUs fit a job holding 4 + 2
    gpus: int | None = field(default=None, lo=0, hi=1 << 20, omit_none=True)
    gpu_bind: str | None = field(default=None, maxlen=4096)
    multi_prog: str | None = field(default=None, omit_none=True)  # --multi-prog's file
    nodelist: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    overlap: bool = False
    overcommit: bool = False  # -O: tasks share CPUs (the step holds one task's per node)
    no_allocate: bool = False  # srun -Z (operators): run on `nodelist` without a job
    mem_per_node: int | None = field(default=None, lo=0, hi=1 << 40, omit_none=True)  # MB
    mem_per_cpu: int | None = field(default=None, lo=0, hi=1 << 40, omit_none=True)
    task_prolog: str | None = field(default=None, omit_none=True, maxlen=4096)
    task_epilog: str | None = field(default=None, omit_none=True, maxlen=4096)
    slurmd_debug: int | None = field(default=None, lo=0, hi=4, omit_none=True)  # over ERROR
    container: ContainerSpec | None = field(default=None, omit_none=True)  # Pyxis' options
    pty: bool = False
    window: Window | None = None
    stdin: str = field(default="0", maxlen=16)
    output: str | None = None
    error: str | None = None
    input: str | None = None
    kill_on_bad_exit: bool = False
    time_limit: int | None = field(default=None, lo=1)
    open_mode: str = field(default="truncate", choices=OPEN_MODES)
    # srun's command line, for `sacct -o submitline` of the step
    submit_line: str = field(default="", maxlen=1 << 16)

    def validate(self, where: str) -> None:
        _check_stdin(self.stdin, where)


class TaskSpec(Message):
    """One task of a `launch_tasks` message."""

    task_id: int = field(lo=0, hi=1 << 24)
    local_id: int = field(default=0, lo=0, hi=1 << 24)
    node: str = field(default="", maxlen=1024)
    env: dict[str, str] = field(default_factory=dict)
    stdout: str | None = None
    stderr: str | None = None
    stdin: str | None = None
    notice: str | None = field(default=None, omit_none=True)  # a line for its stderr first
    argv: list[str] | None = field(default=None, omit_none=True)  # its own (--multi-prog)


# ---- srun/salloc -> controller ------------------------------------------------------------

_C = TO_CONTROLLER_FROM_CLIENT


@_C.add
class StepStart(Message):
    TYPE = "start"
    job_id: int | None = None
    alloc: dict[str, Any] | None = None  # sbatch's job spec; the controller's submit checks it
    step: StepSpec | None = None
    alloc_env: dict[str, str] | None = field(default=None, omit_none=True)


@_C.add
class Stdin(Message):
    TYPE = "stdin"
    data: str = field(default="", b64=True)


@_C.add
class StdinEof(Message):
    TYPE = "stdin_eof"


@_C.add
class SignalStep(Message):
    TYPE = "signal"
    signal: int = field(default=2, lo=1, hi=MAX_SIGNAL)


@_C.add
class Cancel(Message):
    TYPE = "cancel"


@_C.add
class Resize(Message):
    TYPE = "resize"
    rows: int = field(default=24, lo=0, hi=65535)
    cols: int = field(default=80, lo=0, hi=65535)


@_C.add
class Release(Message):
    TYPE = "release"
    exit_code: int = field(default=0, lo=0, hi=(1 << 31) - 1)


@_C.add
class Detach(Message):
    TYPE = "detach"


# ---- controller -> srun/salloc ------------------------------------------------------------

_T = TO_CLIENT


@_T.add
class Pending(Message):
    TYPE = "pending"
    job_id: int
    reason: str = ""


@_T.add
class Allocated(Message):
    TYPE = "allocated"
    job_id: int
    nodes: str = ""
    env: dict[str, str] = field(default_factory=dict)


@_T.add
class Waiting(Message):
    TYPE = "waiting"
    message: str = ""


@_T.add
class StepStarted(Message):
    TYPE = "step"
    job_id: int
    step_id: int
    nodes: list[str]
    tasks_per_node: list[int] = field(lo=0, hi=1 << 24)
    ntasks: int = field(lo=0, hi=1 << 24)

    def validate(self, where: str) -> None:
        if len(self.nodes) != len(self.tasks_per_node) or sum(self.tasks_per_node) != self.ntasks:
            raise MessageError(f"{where}: nodes, tasks_per_node and ntasks disagree")


@_T.add
class Output(Message):
    TYPE = "output"
    task: int = field(lo=0, hi=1 << 24)
    stream: str = field(default="stdout", choices=STREAMS)
    data: str = field(default="", b64=True)


@_T.add
class TaskEnded(Message):
    TYPE = "exit"
    task: int = field(lo=0, hi=1 << 24)
    exit_code: int = field(default=0, lo=0, hi=255)
    signal: int = field(default=0, lo=0, hi=127)


@_T.add
class StepEnd(Message):
    TYPE = "step_end"
    exit_code: int = field(default=0, lo=0, hi=255)


@_T.add
class Error(Message):
    TYPE = "error"
    message: str


@_T.add
class AllocationEnded(Message):
    TYPE = "ended"
    state: str = ""


@_T.add
class UserMessage(Message):
    """`scontrol notify` for the allocation's srun/salloc (Slurm's SRUN_USER_MSG)."""

    TYPE = "user_msg"
    message: str = field(maxlen=1024)


# ---- controller -> agent ----------------------------------------------------------------------

_A = TO_AGENT


@_A.add
class Batch(Message):
    """Several messages in one frame (decode each with `decode(m, TO_AGENT)`)."""

    TYPE = "batch"
    messages: list[dict[str, Any]]


@_A.add
class LaunchJob(Message):
    """Start a job's batch step: its typed plan (model.launchplan)."""

    TYPE = "launch"
    node: str = ""
    launch: LaunchPlan


@_A.add
class Control(Message):
    """For the job's step supervisor (`control` is a TO_STEPD message)."""

    TYPE = "control"
    job_id: int
    control: dict[str, Any]

    def validate(self, where: str) -> None:
        decode(self.control, TO_STEPD)


@_A.add
class HealthCheck(Message):
    """Run HealthCheckProgram on these nodes of the agent now (controller.health); the
    verdicts come back in a heartbeat's `health`."""

    TYPE = "health_check"
    nodes: list[str] = field(default_factory=list)
    program: str = field(default="", maxlen=4096)
    timeout: float = field(default=60.0, lo=0.1, hi=86400.0)


@_A.add
class JobStart(Message):
    """A job was allocated these nodes of the agent (controller.prolog): the Prolog to run on
    each before the job's first process there (at once with PrologFlags=Alloc, else at the
    batch step or the node's first srun step)."""

    TYPE = "job_start"
    job_id: int
    nodes: list[str] = field(default_factory=list)
    batch_host: str = field(default="", maxlen=1024)
    prolog: str = field(default="", maxlen=4096)
    epilog: str = field(default="", maxlen=4096)
    timeout: float | None = field(default=None, lo=0.1, hi=1e7)
    alloc: bool = False  # PrologFlags=Alloc (or Contain)
    serial: bool = False  # PrologFlags=Serial: one script at a time on a node
    env: dict[str, str] = field(default_factory=dict)  # Slurm's prolog environment
    gpus: dict[str, str] = field(default_factory=dict)  # node -> its GPU indices, "0,1"


@_A.add
class JobEnd(Message):
    """The job's run ended on the agent's nodes: its Epilog runs there (controller.prolog)."""

    TYPE = "job_end"
    job_id: int
    nodes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # the exit code, in Slurm's names


@_A.add
class LaunchTasks(Message):
    TYPE = "launch_tasks"
    job_id: int
    step_id: int
    uid: int = field(lo=0, hi=MAX_UID)
    gid: int = field(lo=0, hi=MAX_UID)
    user: str = ""
    home: str = ""
    cwd: str = ""
    argv: list[str] = field(default_factory=list)
    pty: bool = False
    window: Window | None = None
    stdin: str = field(default="0", maxlen=16)
    kill_wait: float | None = field(default=None, lo=0, hi=1e6)
    open_mode: str = field(default="truncate", choices=OPEN_MODES)
    tasks: list[TaskSpec] = field(default_factory=list)
    cpus_per_task: int = field(default=1, lo=1, hi=1 << 24)
    node_cpus: dict[str, int] = field(default_factory=dict, lo=0, hi=1 << 24)
    node_mem_mb: dict[str, int] = field(default_factory=dict, lo=0, hi=1 << 40)
    # srun --task-prolog / --task-epilog: run as the user around each task
    task_prolog: str | None = field(default=None, omit_none=True, maxlen=4096)
    task_epilog: str | None = field(default=None, omit_none=True, maxlen=4096)
    # srun --slurmd-debug: the agent's step log lines to the tasks' stderr, above ERROR
    slurmd_debug: int | None = field(default=None, lo=0, hi=4, omit_none=True)
    # the container the tasks run in (Pyxis' --container-* options; model.launchplan)
    container: ContainerSpec | None = field(default=None, omit_none=True)

    def validate(self, where: str) -> None:
        _check_stdin(self.stdin, where)


class _StepRef(Message):
    job_id: int
    step_id: int


@_A.add
class TaskStdin(_StepRef):
    TYPE = "task_stdin"
    data: str = field(default="", b64=True)


@_A.add
class TaskStdinEof(_StepRef):
    TYPE = "task_stdin_eof"


@_A.add
class SignalTasks(_StepRef):
    TYPE = "signal_tasks"
    signal: int = field(lo=1, hi=MAX_SIGNAL)


@_A.add
class KillTasks(_StepRef):
    TYPE = "kill_tasks"


@_A.add
class ResizeTasks(_StepRef):
    TYPE = "resize_tasks"
    rows: int = field(default=24, lo=0, hi=65535)
    cols: int = field(default=80, lo=0, hi=65535)


@_A.add
class TaskFlow(_StepRef):
    """Output flow control: `pause` stops reading the step's output pipes (its client is
    behind), `pause: false` resumes."""

    TYPE = "task_flow"
    pause: bool


@_A.add
class PmiKvs(_StepRef):
    """The puts of every rank of an --mpi=pmi2 step at fence `epoch`, merged by the
    controller (model.pmi): the agent adds them to its table and releases its ranks."""

    TYPE = "pmi_kvs"
    epoch: int
    kvs: dict[str, str] = field(default_factory=dict)


@_A.add
class Ack(Message):
    TYPE = "ack"
    job_id: int


@_A.add
class Reconnect(Message):
    TYPE = "reconnect"
    reason: str = ""


@_A.add
class Registered(Message):
    TYPE = "registered"
    nodes: list[str] = field(default_factory=list)
    ack: list[int] = field(default_factory=list)
    heartbeat: float = field(default=10.0, lo=0.001, hi=1e6)
    config: dict[str, Any] = field(default_factory=dict)


# ---- agent -> controller ------------------------------------------------------------------

_G = TO_CONTROLLER_FROM_AGENT


@_G.add
class JobEnded(Message):
    TYPE = "ended"
    job_id: int
    state: str = field(choices=JOB_END_STATES)
    exit_code: int = field(default=0, lo=0, hi=255)
    signal: int = field(default=0, lo=0, hi=127)
    end_time: float | None = None


@_G.add
class Register(Message):
    TYPE = "register"
    nodes: list[str] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    ended: list[JobEnded] = field(default_factory=list)
    hw: dict[str, Any] = field(default_factory=dict)


@_G.add
class TaskOutput(_StepRef):
    TYPE = "task_output"
    task_id: int = field(lo=0, hi=1 << 24)
    stream: str = field(default="stdout", choices=STREAMS)
    data: str = field(default="", b64=True)


@_G.add
class TaskExit(_StepRef):
    TYPE = "task_exit"
    task_id: int = field(lo=0, hi=1 << 24)
    exit_code: int = field(default=0, lo=0, hi=255)
    signal: int = field(default=0, lo=0, hi=127)


@_G.add
class PmiFence(_StepRef):
    """This agent's ranks of an --mpi=pmi2 step reached fence `epoch` (counted from 0):
    their puts since the last fence, for the controller to merge with the other agents'."""

    TYPE = "pmi_fence"
    epoch: int
    ranks: list[int] = field(default_factory=list, hi=1 << 24)
    puts: dict[str, str] = field(default_factory=dict)


@_G.add
class LaunchFailed(Message):
    TYPE = "launch_failed"
    job_id: int
    error: str = ""


@_G.add
class CpusBound(Message):
    """The real CPU ids this agent bound a job to on one of its nodes (they replace the
    ledger's indices: `scontrol -d show job` CPU_IDs=)."""

    TYPE = "cpus_bound"
    job_id: int
    node: str = field(maxlen=256)
    cpus: list[int] = field(lo=0, hi=1 << 20, maxlen=1 << 16)


class GpuHealthEvent(Message):
    """One thing the agent's GPU health check saw (agent.health): an XID, ECC or row
    remapping trouble, a GPU fallen off the bus."""

    gpu: int = field(lo=0, hi=1 << 16)
    kind: str = field(choices=("xid", "ecc", "remap", "lost"))
    code: int = field(default=0, lo=0, hi=1 << 20)  # the XID
    drains: bool = False  # hardware trouble; else the user's program caused it
    text: str = field(default="", maxlen=1024)


class HealthReport(Message):
    """A node's health verdict (agent.health): HealthCheckProgram's, or its GPUs'."""

    node: str = field(maxlen=256)
    ok: bool = True
    reason: str = field(default="", maxlen=1024)  # the drain reason when not ok
    source: str = field(default="program", choices=("program", "gpu"))
    checked: float = field(default=0.0, lo=0.0, hi=1e11)
    gpu_events: list[GpuHealthEvent] = field(default_factory=list, maxlen=1024)


@_G.add
class Heartbeat(Message):
    TYPE = "heartbeat"
    load: float = field(default=0.0, lo=0.0, hi=1e9)
    free_mem: int | None = None
    health: list[HealthReport] | None = field(default=None, omit_none=True)


@_G.add
class PrologResult(Message):
    """A Prolog or Epilog failed (or hung past PrologEpilogTimeout) on a node."""

    TYPE = "prolog_result"
    job_id: int
    node: str = field(maxlen=256)
    kind: str = field(choices=("prolog", "epilog"))
    ok: bool = True
    reason: str = field(default="", maxlen=1024)


@_G.add
class Usage(Message):
    """Resource use sampled on the agent's machine (agent.usage): its GPUs and its steps,
    each a dict the controller checks (controller.usage); `final` steps have ended."""
    TYPE = "usage"
    time: float = field(default=0.0, lo=0.0, hi=1e11)
    gpus: list[dict[str, Any]] = field(default_factory=list, maxlen=1024)
    steps: list[dict[str, Any]] = field(default_factory=list, maxlen=100000)


# ---- agent -> step supervisor (control datagrams, key "op") -------------------------------------

_S = TO_STEPD


@_S.add
class CancelOp(Message):
    KEY = "op"
    TYPE = "cancel"


@_S.add
class RequeueOp(Message):
    KEY = "op"
    TYPE = "requeue"


@_S.add
class SignalOp(Message):
    KEY = "op"
    TYPE = "signal"
    signal: int = field(lo=1, hi=MAX_SIGNAL)
    batch_only: bool = False


@_S.add
class SuspendOp(Message):
    KEY = "op"
    TYPE = "suspend"


@_S.add
class ResumeOp(Message):
    KEY = "op"
    TYPE = "resume"


@_S.add
class TimeLimitOp(Message):
    KEY = "op"
    TYPE = "time_limit"
    seconds: float = field(lo=-1.0, hi=1e12)  # -1: no limit


@_S.add
class NotifyOp(Message):
    """`scontrol notify` (and idle-GPU reclaim's notice): the batch step writes it to the job's
    stderr as `slurmstepd: error: MESSAGE`, as Slurm's does; a job's srun/salloc gets it from
    the controller (UserMessage)."""

    KEY = "op"
    TYPE = "notify"
    message: str = field(maxlen=1024)


# ---- step supervisor -> agent (notifications, key "event") -----------------------------------

_N = TO_AGENT_FROM_STEPD


@_N.add
class StepdStarted(Message):
    KEY = "event"
    TYPE = "started"
    job_id: int
    step: str = "batch"
    pid: int = field(lo=1, hi=1 << 32)


@_N.add
class StepdExited(Message):
    KEY = "event"
    TYPE = "exited"
    job_id: int
    step: str = "batch"
    state: str = field(choices=JOB_END_STATES)
    exit_code: int = field(default=0, lo=0, hi=255)
    signal: int = field(default=0, lo=0, hi=127)


# The launch plan's records (LaunchJob.launch) live in their own module; importing it here
# registers them for decoding whichever module is imported first.
import corral.model.launchplan  # noqa: E402,F401
