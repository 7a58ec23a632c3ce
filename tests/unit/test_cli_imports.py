"""The Slurm-compatible commands must start fast: guard what their modules import.

Each command runs as a fresh interpreter, so every module it imports is paid on
every `sbatch`/`squeue`.  These modules once cost 20-45 ms (typing, dataclasses →
inspect, urllib.parse, corral.model.job's enum/dataclasses; then json and getopt, which
bring re, enum, functools, collections and gettext).  The hot commands (issue #19) aim
at ~10 ms over `python -I -S -c pass`: their launchers start Python that way
(launchers/) and import cli/hot.py first, which answers the common forms (plain squeue
and sinfo, scontrol show job|node ID, sacct -j JOBID, scancel JOBID, and sbatch's common
forms through cli/sbatch_hot.py) with nothing but the interpreter's built-ins (and
`_socket`: SBATCH_FAST_MODULES); every other form imports its command, at most
the number of modules in HOT_BUDGET, counted as the launcher starts them.  Timings belong to
bench/bench_commands.py.
"""

from __future__ import annotations

import getopt
import json
import os
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from corral.cli import client, gnugetopt, scontrol, squeue
from corral.lazyre import LazyPattern
from corral.model.job import STATE_CODES
from tests.unit.http_peer import read_request

COMMANDS = ["sbatch", "squeue", "sinfo", "scontrol", "scancel", "sacct", "srun", "salloc", "sacctmgr",
            "sshare", "sprio", "sreport", "sstat", "seff", "sdiag", "scrontab",
            "missing"]

# Heavy modules (or whole packages) no command module may import at start.
FORBIDDEN = [
    "typing", "dataclasses", "inspect", "http.client", "email", "ssl", "aiohttp", "asyncio",
    "urllib.parse", "corral.controller", "corral.agent", "corral.store",
    # enum + dataclasses: ~15 ms; squeue keeps a plain copy of its state codes instead.
    "corral.model.job",
]


# The commands on the hot path: how many modules each may import beyond what
# `python -I -S` has loaded, counted as their launcher starts them (without `site`).
# Today's counts; raise one only with a reason, and a figure from bench/bench_commands.py.
HOT_BUDGET = {"sbatch": 20, "squeue": 24, "sinfo": 20, "scontrol": 22, "sacct": 25,  # + model.usage
              "scancel": 19}
# What none of them may import at start, beyond FORBIDDEN: `re` (with enum, functools,
# collections: ~1/4 of a start), `json` (imports re), `getopt` (gettext, which imports re),
# python-hostlist (re), orjson (a large extension to load), `socket` (enums, selectors).
HOT_FORBIDDEN = ["re", "json", "enum", "functools", "collections", "getopt", "gettext",
                 "hostlist", "orjson", "socket", "locale"]
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(client.__file__))))


def _modules_without_site(module: str) -> list[str]:
    """Modules `import module` adds in `python -I -S` with Corral on sys.path."""
    code = ("import sys; sys.path[:0] = [sys.argv[1]]; before = set(sys.modules); "
            f"import {module}; print('\\n'.join(sorted(set(sys.modules) - before)))")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code, SRC], capture_output=True,
                            text=True, timeout=60, check=True)
    return result.stdout.split()


@pytest.mark.parametrize("command", sorted(HOT_BUDGET))
def test_hot_command_imports_within_budget(command: str) -> None:
    added = _modules_without_site(f"corral.cli.{command}")
    assert f"corral.cli.{command}" in added
    assert [m for m in added if m.split(".")[0] in HOT_FORBIDDEN] == []
    assert len(added) <= HOT_BUDGET[command], added


def test_budget_probe_sees_heavy_imports() -> None:
    # The counting probe must be able to fail: json brings re and more with it.
    added = _modules_without_site("json")
    assert "re" in added and len(added) > 10


def _loaded_modules(module: str) -> list[str]:
    code = f"import {module}, sys; print('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    return result.stdout.split()


@pytest.mark.parametrize("command", COMMANDS)
def test_command_module_imports_stay_light(command: str) -> None:
    loaded = _loaded_modules(f"corral.cli.{command}")
    assert f"corral.cli.{command}" in loaded  # the probe really imported the module
    heavy = sorted(name for name in loaded
                   if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN))
    assert heavy == []


def test_probe_detects_a_heavy_import() -> None:
    # The check above must be able to fail: a module known to pull in typing.
    assert "typing" in _loaded_modules("corral.model.job")


def test_squeue_state_codes_match_the_model() -> None:
    assert squeue.CODE_OF_STATE == {state.value: code for state, code in STATE_CODES.items()}


@pytest.mark.parametrize("text", ["12", "7_[1-3]", "a b/c,d", "node[01-04]", "x%y&z=1?#",
                                  "naïve ü", "~.-_", ""])
@pytest.mark.parametrize("safe", ["/", "", ","])
def test_quote_matches_urllib(text: str, safe: str) -> None:
    assert client.quote(text, safe=safe) == urllib.parse.quote(text, safe=safe)


def test_missing_commands_say_so_in_one_line() -> None:
    """Every Slurm command Corral lacks has an entry function that prints one line
    naming itself and exits non-zero (console scripts run `sys.exit(fn())`)."""
    from corral.cli import missing

    assert "sattach" in missing.MISSING
    assert not {"sacctmgr", "sshare", "sprio", "sreport", "sstat", "seff", "sdiag"} \
        & set(missing.MISSING)
    assert not set(missing.MISSING) & set(COMMANDS)
    for name in missing.MISSING:
        code = f"import sys; from corral.cli.missing import {name}; sys.exit({name}())"
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 1 and p.stdout == ""
        assert p.stderr.count("\n") == 1
        assert p.stderr.startswith(f"{name}: error: {name} is not provided by Corral yet")


GETOPT_CASES = [
    ([], "ab:", ["alpha=", "beta"]), (["-a", "x", "-bval", "--alpha=1", "y"], "ab:", ["alpha=", "beta"]),
    (["--al", "2", "--", "-a"], "ab:", ["alpha=", "beta"]), (["-b"], "ab:", []),
    (["--beta=1"], "a", ["beta"]), (["--gamma"], "a", ["beta"]), (["--b"], "", ["beta", "bravo="]),
    (["-z"], "a", []), (["x", "-a"], "+a", []), (["--alpha"], "", ["alpha="]), (["-", "-a"], "a", []),
]


@pytest.mark.parametrize("args,shortopts,longopts", GETOPT_CASES)
@pytest.mark.parametrize("fn", ["getopt", "gnu_getopt"])
def test_gnugetopt_matches_the_standard_library(fn: str, args: list[str], shortopts: str,
                                                longopts: list[str]) -> None:
    def run(mod: object) -> object:
        try:
            return getattr(mod, fn)(list(args), shortopts, longopts)
        except (getopt.GetoptError, gnugetopt.GetoptError) as e:
            return ("error", e.msg, e.opt, str(e))
    assert run(gnugetopt) == run(getopt)


@pytest.mark.parametrize("obj", [{"a": [1, 2.5, None, True, "é\u2028\x00\""], "b": {"c": -0.0}},
                                 "text", 7, [], {1: 2}, [1e300, 10**30, float("inf")]])
def test_client_json_matches_the_json_module(obj: object) -> None:
    assert client.json_dumps(obj) == json.dumps(obj, separators=(",", ":"))
    text = json.dumps(obj)
    assert json.dumps(client.json_loads(text.encode())) == json.dumps(json.loads(text))


@pytest.mark.parametrize("bad", ["", "{", "[1,]", "1 2", "nul", '{"a" 1}'])
def test_client_json_refuses_what_json_refuses(bad: str) -> None:
    with pytest.raises(ValueError):
        json.loads(bad)
    with pytest.raises(ValueError):
        client.json_loads(bad)


def test_lazy_pattern_is_the_compiled_pattern() -> None:
    lazy = LazyPattern(r"(\d+)-(\w+)")
    assert lazy.fullmatch("12-ab").groups() == ("12", "ab")
    assert lazy.sub("x", "1-a 2-b") == "x x" and lazy.split("a1-bc") == ["a", "1", "bc", ""]


@pytest.mark.parametrize("pattern", ["slurm-%j.out", "%%j %5a %x_%A", "100%", "%", "%12", "%q%j",
                                     "a%03N%t%n%s%u%J", "%٣j", "no codes"])
def test_percent_substitution_matches_the_regex(pattern: str) -> None:
    def sub(width: str, code: str) -> str:
        return f"<{width}|{code}>"
    expected = re.sub(r"%(\d*)([AajJuxNnts%])", lambda m: sub(m.group(1), m.group(2)), pattern)
    assert scontrol._substitute_percent(pattern, sub) == expected


def test_hot_forms_import_nothing_beyond_the_interpreter() -> None:
    # cli/hot.py answers the common forms (launchers/corral-launch imports it first)
    assert _modules_without_site("corral.cli.hot") == ["corral", "corral.cli", "corral.cli.hot"]


# sbatch's common forms (cli/sbatch_hot.py, through cli/hot.py): the modules a whole
# submission adds to `python -I -S`, the answer read and printed included.
SBATCH_FAST_MODULES = {"corral", "corral.cli", "corral.cli.hot", "corral.cli.sbatch_hot",
                       "_socket"}


def _fast_sbatch_modules(tmp_path: Path, argv: list[str]) -> tuple[str, list[str]]:
    """hot.run("sbatch", argv) in `python -I -S`, against a socket that takes the request
    and answers as the controller does: (what it printed, the modules it added)."""
    import socket
    import threading

    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "corral.sock"))
    server.listen(1)
    server.settimeout(30)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            read_request(conn)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 13\r\n\r\n{\"job_id\":12}")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    code = ("import sys; sys.path[:0] = [sys.argv[1]]; before = set(sys.modules); "
            "from corral.cli import hot; rc = hot.run('sbatch', sys.argv[2:]); "
            "sys.stderr.write(f'{rc}|' + ' '.join(sorted(set(sys.modules) - before)))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SLURM_"))}
    env["CORRAL_HOME"] = str(tmp_path)
    try:
        r = subprocess.run([sys.executable, "-I", "-S", "-c", code, SRC, *argv],
                           capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    finally:
        thread.join(30)
        server.close()
    rc, _, modules = r.stderr.rpartition("\n")[2].partition("|")
    assert rc == "0", r.stderr
    return r.stdout, modules.split()


def test_fast_sbatch_imports_nothing_beyond_the_interpreter(tmp_path: Path) -> None:
    (tmp_path / "job.sh").write_text("#!/bin/sh\n#SBATCH -J x -t 10 --mem=1G\ntrue\n")
    out, added = _fast_sbatch_modules(tmp_path, ["--parsable", "-N", "2", "job.sh"])
    assert out == "12\n"
    assert set(added) <= SBATCH_FAST_MODULES and len(added) <= len(SBATCH_FAST_MODULES), added


def test_hot_squeue_asks_what_a_plain_squeue_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    from corral.cli import hot

    asked: list[str] = []

    def answer(method: str, path: str, body: object = None, **kw: object) -> str:
        asked.append(f"{method} {path}")
        return "JOBID\n"

    monkeypatch.setattr(client, "request", answer)
    monkeypatch.delenv("SQUEUE_FORMAT", raising=False)
    monkeypatch.delenv("SQUEUE_SORT", raising=False)
    monkeypatch.delenv("SLURM_CLUSTERS", raising=False)
    assert squeue._main([]) == 0
    assert asked == [f"GET {hot.SQUEUE_PATH}"]


def test_hot_scancel_sends_what_scancel_sends() -> None:
    from corral.cli import hot, scancel

    options = scancel.parse_args(["12"])
    assert not isinstance(options, int)
    assert hot.CANCEL_BODY == client.json_dumps(options.request_body()).encode()
