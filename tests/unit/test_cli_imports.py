"""The Slurm-compatible commands must start fast: guard what their modules import.

Each command runs as a fresh interpreter, so every module it imports is paid on
every `sbatch`/`squeue`.  These modules once cost 20-45 ms (typing, dataclasses →
inspect, urllib.parse, corral.model.job's enum/dataclasses); the budget for a
whole `sbatch --wrap true` is 40 ms including Python's own ~17 ms start.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.parse

import pytest

from corral.cli import client, squeue
from corral.model.job import STATE_CODES

COMMANDS = ["sbatch", "squeue", "sinfo", "scontrol", "scancel", "sacct", "srun", "salloc", "sacctmgr",
            "sshare", "sprio", "sreport", "sstat", "seff", "sdiag", "missing"]

# Heavy modules (or whole packages) no command module may import at start.
FORBIDDEN = [
    "typing", "dataclasses", "inspect", "http.client", "email", "ssl", "aiohttp", "asyncio",
    "urllib.parse", "corral.controller", "corral.agent", "corral.store",
    # enum + dataclasses: ~15 ms; squeue keeps a plain copy of its state codes instead.
    "corral.model.job",
]


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
    assert squeue._CODES == {state.value: code for state, code in STATE_CODES.items()}


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
