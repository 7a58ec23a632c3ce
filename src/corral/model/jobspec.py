"""The job specification: one list of the fields a submission may set (`FIELDS`).

What derives from it:

* the controller: `validate_spec` refuses any key that is not a field, converts each
  value by the field's `kind` and bounds strings by its `max_len` (Slurm's limits,
  slurmctld's _test_job_desc_fields: 1024 for names and comments, PATH_MAX for paths;
  past them Slurm refuses with ESLURM_PATHNAME_TOO_LONG);
* sbatch, salloc and srun: `corral.cli.options.job_spec` builds every spec they send.  A
  field whose value is an option's parsed value as it is takes that option from here
  (`Field.option_key`, the first long name in `options`); the others (name, node and task
  counts, GPUs, node lists, output files, hold) it computes from the options that
  `options` lists.  It refuses a name that is not a field when it is imported and a key
  not in `FIELD_NAMES` when it builds a spec; its length check before sending
  (`too_long_field`) uses `max_len`;
* the store keeps a job as `model.job.Job`, which has an attribute of the same name for
  each field (written by hand: a test checks that every field is one).

This module imports nothing at start (no typing, no dataclasses): the commands import it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing and dataclasses would cost every sbatch/srun/salloc start
if TYPE_CHECKING:
    from typing import Any

PATH_MAX = 4096
NAME_MAX = 1024
DEFAULT_MAX_SCRIPT_SIZE = 4 * 1024 * 1024  # Slurm's DEFAULT_BATCH_SCRIPT_LIMIT
DEFAULT_MAX_SUBMIT_LINE = 1024 * 1024  # Slurm's DEFAULT_MAX_SUBMIT_LINE_SIZE
TOO_LONG = "Pathname of a file, directory or other parameter too long"


class Field:
    """One field of a job spec.

    `kind`: int, opt_int, signed_int, time_limit, str, host, bool, nodes, time, hold or
    container.
    `options`: the sbatch/srun/salloc options that set it; `option_key` is the first long
    one without its dashes, the key the commands' option parsers store its value under.
    `max_len`: the longest string Slurm accepts.
    """

    __slots__ = ("name", "kind", "options", "max_len", "option_key")

    def __init__(self, name: str, kind: str, options: tuple[str, ...] = (),
                 max_len: int = NAME_MAX) -> None:
        self.name = name
        self.kind = kind
        self.options = options
        self.max_len = max_len
        self.option_key = next((o[2:] for o in options if o.startswith("--")), None)

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.kind!r}, {self.options!r}, {self.max_len!r})"


FIELDS: tuple[Field, ...] = (
    Field("name", "str", ("-J", "--job-name")),
    Field("partition", "str", ("-p", "--partition")),
    # absent: -N not given; the job spreads over as many nodes as its tasks need
    Field("num_nodes", "int", ("-N", "--nodes")),
    Field("max_nodes", "opt_int", ("-N", "--nodes")),
    Field("num_tasks", "int", ("-n", "--ntasks")),
    Field("min_cpus", "opt_int", ("--mincpus",)),
    Field("min_tmp_disk", "opt_int", ("--tmp",)),
    Field("ntasks_per_node", "opt_int", ("--ntasks-per-node",)),
    Field("cpus_per_task", "int", ("-c", "--cpus-per-task")),
    Field("mem_per_node", "opt_int", ("--mem",)),
    Field("mem_per_cpu", "opt_int", ("--mem-per-cpu",)),
    Field("gpus", "int", ("-G", "--gpus")),
    Field("gpus_per_node", "int", ("--gpus-per-node", "--gres")),
    Field("gpus_per_task", "int", ("--gpus-per-task",)),
    Field("gpu_type", "str", ("--gres", "--gpus", "--gpus-per-node", "--gpus-per-task")),
    Field("time_limit", "time_limit", ("-t", "--time")),
    Field("time_min", "opt_int", ("--time-min",)),
    Field("req_nodes", "nodes", ("-w", "--nodelist")),
    Field("exc_nodes", "nodes", ("-x", "--exclude")),
    Field("exclusive", "bool", ("--exclusive",)),
    # -O: allocated as if one task per node were asked; the tasks share its CPUs
    Field("overcommit", "bool", ("-O", "--overcommit")),
    Field("requeue", "bool", ("--requeue", "--no-requeue")),
    Field("dependency", "str", ("-d", "--dependency"), 128 * 1024),
    Field("begin_time", "time", ("-b", "--begin")),
    Field("signal", "str", ("--signal",)),
    Field("hint", "str", ("--hint",)),
    Field("constraint", "str", ("-C", "--constraint")),
    Field("mail_type", "str", ("--mail-type",)),
    Field("mail_user", "str", ("--mail-user",)),
    Field("comment", "str", ("--comment",)),
    Field("reservation", "str", ("--reservation",)),
    Field("acctg_freq", "str", ("--acctg-freq",)),  # its resource sampling (agent.usage)
    Field("work_dir", "str", ("-D", "--chdir"), PATH_MAX),
    Field("stdout", "str", ("-o", "--output"), PATH_MAX),
    Field("stderr", "str", ("-e", "--error"), PATH_MAX),
    Field("stdin", "str", ("-i", "--input"), PATH_MAX),
    Field("command", "str", (), PATH_MAX),
    Field("submit_line", "str", (), DEFAULT_MAX_SUBMIT_LINE),
    Field("submit_host", "host", (), NAME_MAX),
    Field("alloc_sid", "int", ()),
    Field("account", "str", ("-A", "--account")),
    Field("qos", "str", ("-q", "--qos")),
    Field("nice", "signed_int", ("--nice",)),
    Field("priority", "opt_int", ("--priority",)),
    Field("held", "hold", ("-H", "--hold")),
    Field("batch", "bool", ()),
    # client-generated id of one submission: a request resent after a lost connection
    # returns the job it already created (sbatch riding out a controller restart)
    Field("submit_id", "str", (), 64),
    # Pyxis' --container-* options of sbatch (model.launchplan.ContainerSpec, as a dict):
    # the batch script runs in this container
    Field("container", "container", ()),
)
BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
FIELD_NAMES = frozenset(BY_NAME)


class JobSpecError(ValueError):
    """A submission Slurm would refuse; str() is the message, `too_long` marks
    ESLURM_PATHNAME_TOO_LONG."""

    def __init__(self, message: str, *, too_long: bool = False) -> None:
        super().__init__(message)
        self.too_long = too_long


def _finite(v: float) -> bool:
    """A number a job field can hold: not NaN or infinite, and within 64 bits."""
    return -(1 << 63) < v < (1 << 63)  # (False for NaN too)


def validate_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The fields of `spec`, checked and converted; None values are dropped."""
    out: dict[str, Any] = {}
    for k, v in spec.items():
        f = BY_NAME.get(k)
        if f is None:
            raise JobSpecError(f"Unknown job field {k!r}")
        if v is None:
            continue
        kind = f.kind
        if kind in ("int", "opt_int", "signed_int", "time_limit"):
            if isinstance(v, bool) or not isinstance(v, int | float) or not _finite(v):
                raise JobSpecError(f"Invalid value for {k}: {v!r}")
            v = int(v)
            if k == "alloc_sid" and v >= 1 << 32:  # a uint32_t in Slurm
                raise JobSpecError(f"Invalid value for {k}: {v}")
            if v < 0 and kind != "signed_int" and not (kind == "time_limit" and v == -1):
                raise JobSpecError(f"Invalid value for {k}: {v}")
        elif kind == "nodes":
            if isinstance(v, str):
                from corral.model import hostlists  # only the controller expands them

                if len(v) > NAME_MAX * 64:
                    raise JobSpecError(TOO_LONG, too_long=True)
                try:
                    v = hostlists.expand(v)
                except hostlists.HostlistError:
                    raise JobSpecError(f"Invalid node list for {k}") from None
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise JobSpecError(f"Invalid node list for {k}")
        elif kind == "bool":
            v = bool(v)
        elif kind == "time":
            if isinstance(v, bool) or not isinstance(v, int | float) or not _finite(v):
                raise JobSpecError(f"Invalid value for {k}: {v!r}")
            v = float(v)
        elif kind == "container":
            from corral.model.launchplan import ContainerSpec  # only the controller checks it
            from corral.model.messages import MessageError

            try:
                v = ContainerSpec.from_dict(v, "container").to_dict()
            except MessageError as e:
                raise JobSpecError(f"Invalid container: {e}") from None
        elif kind == "host":
            # shown in scontrol's one-line records: a host name's letters only
            if not isinstance(v, str) or not v.isascii() or len(v) > f.max_len \
                    or not all(c.isalnum() or c in "-_." for c in v):
                raise JobSpecError(f"Invalid value for {k}: {v!r}")
        elif kind == "hold":
            if v not in ("user", "admin"):
                raise JobSpecError("Invalid hold value")
        else:
            if not isinstance(v, str):
                raise JobSpecError(f"Invalid value for {k}: {v!r}")
            if len(v) > f.max_len:
                raise JobSpecError(TOO_LONG, too_long=True)
        out[k] = v
    return out


def short_hostname() -> str:
    """This host's name up to its first dot (uname's node name is what gethostname(2)
    returns on Linux, without importing socket)."""
    import os  # the commands import os anyway; this module imports nothing at start

    return os.uname().nodename.split(".")[0]


def submitted_from() -> dict[str, Any]:
    """The spec fields sbatch, salloc and srun send for scontrol's AllocNode:Sid=HOST:SID
    (display only): this host's short name and the submitting process's session id."""
    import os

    return {"submit_host": short_hostname(), "alloc_sid": os.getsid(0)}


def script_too_large(script: str, limit: int) -> bool:
    """Longer than `limit` bytes in UTF-8 (Slurm measures the script with strlen)."""
    if len(script) > limit:
        return True
    if len(script) * 4 <= limit:  # even all 4-byte characters fit
        return False
    return len(script.encode("utf-8", "surrogatepass")) > limit


def max_script_size(scheduler_parameters: str) -> int:
    """SchedulerParameters=max_script_size=N (bytes), as slurmctld reads it."""
    for item in scheduler_parameters.split(","):
        key, _, value = item.strip().partition("=")
        if key.lower() == "max_script_size" and value.strip().isdigit():
            return int(value.strip())
    return DEFAULT_MAX_SCRIPT_SIZE


def pn_min_cpus(cpus_per_task: int, ntasks_per_node: int | None, num_tasks: int,
                min_cpus: int | None) -> int:
    """Slurm's pn_min_cpus (slurmctld _copy_job_desc_to_job_record): --mincpus (1 when not
    given), raised to -c times --ntasks-per-node for a job of several tasks, and to -c.
    Every node of the job gets that many CPUs at least; squeue %c and scontrol's
    MinCPUsNode= show it."""
    cpt = max(cpus_per_task, 1)
    out = min_cpus or 1
    if ntasks_per_node and num_tasks > 1:
        out = max(out, cpt * ntasks_per_node)
    return max(out, cpt)


def mbytes_exact(mb: int) -> str:
    """Megabytes as Slurm's convert_num_unit(UNIT_MEGA, CONVERT_NUM_UNIT_EXACT) prints
    them (MinTmpDiskNode=, squeue %d): 0, 500M, 2G, 1.50G (half units count as exact)."""
    if mb == 0:
        return "0"
    num = float(mb)
    units = "MGTP"
    i = 0
    while i < len(units) - 1 and num >= 1024 and int(num) % 512 == 0:
        num /= 1024
        i += 1
    return f"{int(num)}{units[i]}" if num == int(num) else f"{num:.2f}{units[i]}"
