"""model/jobspec.py's one field list, and what the commands derive from it
(cli/options.py `job_spec`, used by sbatch, salloc and srun)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from corral.cli import options, salloc, sbatch, srun
from corral.model.jobspec import BY_NAME, FIELD_NAMES, FIELDS, validate_spec

NOW = 1_800_000_000.0
# Options that set every field a command can set, so that each builder path runs.
COMMON = ["-J", "x", "-p", "p1", "-N1-2", "-n2", "--ntasks-per-node=1", "-c2", "--mem=1G",
          "-G", "2", "--gpus-per-node=a100:1", "-t", "10", "--time-min=5", "-w", "n1",
          "-x", "n3", "--exclusive", "-d", "afterok:1", "--begin=now+1hour",
          "--signal=USR1@60", "--mail-type=END", "--mail-user=a@b", "--comment=c", "-D",
          "/tmp", "-A", "acc", "-q", "high", "--nice=3", "--priority=5", "-C", "a&b", "-H"]
BATCH_ONLY = {"requeue", "hint", "acctg_freq", "stdout", "stderr", "stdin", "command"}


def _specs() -> dict[str, dict[str, object]]:
    env = {"PATH": "/bin"}
    sub = sbatch.parse_sbatch([*COMMON, "--mincpus=2", "--requeue", "--hint=nomultithread",
                               "-o", "o", "-e", "e", "-i", "i", "--wrap=true"], env, None,
                              "/home/u", NOW, submit_host="h")
    alloc = salloc.parse_salloc([*COMMON, "--mincpus=2", "true"], env, "/home/u", NOW)
    run = srun.parse_srun([*COMMON, "true"], env, "/home/u", NOW)
    assert run.alloc is not None
    return {"sbatch": sub.spec, "salloc": alloc.spec, "srun": run.alloc}


def test_every_command_sends_only_fields_the_controller_accepts() -> None:
    specs = _specs()
    for command, spec in specs.items():
        assert set(spec) <= FIELD_NAMES, command
        validate_spec(spec)  # raises on a key or value the controller refuses
    assert BATCH_ONLY <= set(specs["sbatch"]) and "batch" not in specs["sbatch"]
    for command in ("salloc", "srun"):
        assert not BATCH_ONLY & set(specs[command]) and specs[command]["batch"] is False
    # the same options give the same fields, whichever command sends them
    shared = set(specs["salloc"]) - {"batch"}
    assert shared == set(specs["sbatch"]) - BATCH_ONLY
    for key in shared - {"name", "submit_line"}:
        assert specs["sbatch"][key] == specs["salloc"][key], key


def test_option_fields_take_their_option_from_the_field_list() -> None:
    assert BY_NAME["time_limit"].option_key == "time"
    assert BY_NAME["begin_time"].option_key == "begin"
    assert BY_NAME["batch"].option_key is None
    for f in FIELDS:
        longs = [o[2:] for o in f.options if o.startswith("--")]
        assert f.option_key == (longs[0] if longs else None)
    pairs = options._FROM_OPTION + options._FROM_OPTION_IF_GIVEN + options._BATCH_FROM_OPTION
    assert len(pairs) > 20
    v = {key: f"value of --{key}" for _, key in pairs}
    spec = options.job_spec(v, name="n", cwd="/", submit_line="sbatch", req_nodes=[],
                            exc_nodes=[], min_nodes=1, max_nodes=0, ntasks=1,
                            gpus=(0, 0, 0, None), batch=("/o", None, "/dev/null", None))
    for field, key in pairs:
        assert key == BY_NAME[field].option_key
        assert spec[field] == f"value of --{key}", field


def test_batch_and_allocation_defaults() -> None:
    args = dict(name="n", cwd="/w", submit_line="s", req_nodes=[], exc_nodes=[], min_nodes=1,
                max_nodes=0, ntasks=1, gpus=(0, 0, 0, None), nodes_given=False)
    alloc = options.job_spec({}, **args)  # type: ignore[arg-type]
    batch = options.job_spec({}, batch=("/w/o", None, "/dev/null", "/w/s.sh"),
                             **args)  # type: ignore[arg-type]
    assert alloc["batch"] is False and alloc["cpus_per_task"] == 1
    assert batch["cpus_per_task"] is None  # the partition's DefCpuPerGPU may apply
    assert (batch["stdout"], batch["stderr"], batch["command"]) == ("/w/o", None, "/w/s.sh")
    for spec in (alloc, batch):
        assert spec["num_nodes"] is None and spec["work_dir"] == "/w"
        assert (spec["nice"], spec["exclusive"], spec["held"]) == (0, False, None)
        assert not {"priority", "constraint", "min_cpus"} & set(spec)
    assert options.allocation_spec({}, **args) == alloc  # type: ignore[arg-type]


def test_builder_refuses_a_key_that_is_not_a_field(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KeyError):
        options._option_keys("bogus")
    with pytest.raises(ImportError):
        options._option_keys("submit_host")  # no option sets it
    monkeypatch.setattr(options, "FIELD_NAMES", FIELD_NAMES - {"comment"})
    with pytest.raises(ValueError, match="comment"):
        options.job_spec({}, name="n", cwd="/", submit_line="s", req_nodes=[], exc_nodes=[],
                         min_nodes=1, max_nodes=0, ntasks=1, gpus=(0, 0, 0, None))


def test_client_length_limits_are_the_field_list_s() -> None:
    for field, limit in options._FIELD_LIMITS:
        assert limit == BY_NAME[field].max_len
        assert options.too_long_field({field: "x" * limit}) is None
        assert options.too_long_field({field: "x" * (limit + 1)}) == field


def test_field_list_imports_nothing_at_start() -> None:
    # sbatch, salloc and srun import it: no typing, dataclasses or hostlist
    code = ("import sys; before = set(sys.modules); import corral.model.jobspec; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert set(out) <= {"corral", "corral.model", "corral.model.jobspec", "__future__"}
    assert validate_spec({"req_nodes": "n[1-2]"}) == {"req_nodes": ["n1", "n2"]}
