"""README's "A first hour" commands, run in order as a new user types them, on a fresh cluster
of this machine (whatever it has: no GPUs here) and then on the demo cluster of examples/."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def first_hour_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## A first hour", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, re.S)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "home")
    c.home.mkdir()
    c.workdir.mkdir()
    (c.workdir / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "lab.conf", c.workdir / "examples" / "lab.conf")
    try:
        yield c
    finally:
        c.stop()


def run_block(c: Cluster, block: str) -> str:
    script = "set -euo pipefail\n" + block
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=180,
                       cwd=str(c.workdir), env=c.env)
    assert r.returncode == 0, f"README block failed ({r.returncode}):\n{block}\n{r.stdout}{r.stderr}"
    return r.stdout


def test_readme_first_hour_runs_as_written(home: Cluster) -> None:
    blocks = first_hour_blocks()
    assert len(blocks) == 2, "README's first hour has the default-cluster and the demo block"
    up = home.run("corral", "up", timeout=60)
    assert up.returncode == 0, up.stdout + up.stderr
    gpus = int(home.ok("sinfo", "-h", "-o", "%G").count("gpu:"))
    # a GPU-less machine is told so at once, with where to find declared GPUs
    assert ("GPUs:   none" in up.stdout) == (gpus == 0), up.stdout
    out = run_block(home, blocks[0])
    assert "Submitted batch job 1" in out

    out = run_block(home, blocks[1])
    gpus = [ln.split(":", 1)[1].strip() for ln in out.splitlines()
            if re.match(r"^\s*\d+: \d+$", ln)]
    assert len(gpus) == 8 and all(len(g) == 1 for g in gpus), out
    assert "disk swap" in out


def test_corral_up_names_settings_it_does_not_act_on(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "home", config=(ROOT / "examples" / "lab.conf").read_text()
                + "PreemptMode=GANG\n")
    try:
        c.home.mkdir()
        c.workdir.mkdir()
        (c.home / "input.conf").write_text(c.config)
        up = c.run("corral", "up", "--config", str(c.home / "input.conf"), timeout=60)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "  GPUs:   16" in up.stdout
        assert "accepted but not acted on: PreemptMode=GANG" in up.stdout
    finally:
        c.stop()
