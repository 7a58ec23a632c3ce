"""MPI type selection: srun's --mpi, SLURM_MPI_TYPE, slurm.conf's MpiDefault (model/mpi.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.cli import srun
from corral.cli.options import CliExit
from corral.model.config import ConfigError, parse_config
from corral.model.mpi import MpiTypeError, parse_mpi_type


@pytest.mark.parametrize(("text", "kind"), [("none", "none"), ("PMI2", "pmi2"), (" pmi2", "pmi2")])
def test_supported_types(text: str, kind: str) -> None:
    assert parse_mpi_type(text) == kind


@pytest.mark.parametrize("text", ["pmix", "pmix_v3", "pmix_v4", "openmpi", ""])
def test_other_types_are_refused(text: str) -> None:
    with pytest.raises(MpiTypeError):
        parse_mpi_type(text)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path))
    return tmp_path


def _step_env(args: list[str], env: dict[str, str]) -> dict[str, str]:
    req = srun.parse_srun(args, {"SLURM_JOB_ID": "7", **env}, "/home/alice", 1000.0)
    return dict(req.step["env"])


def test_srun_mpi_option_and_variable(home: Path) -> None:
    assert _step_env(["--mpi=pmi2", "true"], {})["SLURM_MPI_TYPE"] == "pmi2"
    assert _step_env(["--mpi=none", "true"], {})["SLURM_MPI_TYPE"] == "none"
    assert _step_env(["true"], {"SLURM_MPI_TYPE": "pmi2"})["SLURM_MPI_TYPE"] == "pmi2"
    # the command line beats the variable
    assert _step_env(["--mpi=none", "true"], {"SLURM_MPI_TYPE": "pmi2"})["SLURM_MPI_TYPE"] == "none"
    assert "SLURM_MPI_TYPE" not in _step_env(["true"], {})  # no MpiDefault: none, unset


def test_srun_takes_mpidefault_from_slurm_conf(home: Path) -> None:
    (home / "slurm.conf").write_text("ClusterName=c\nMpiDefault=pmi2 # default\n")
    assert _step_env(["true"], {})["SLURM_MPI_TYPE"] == "pmi2"
    assert _step_env(["--mpi=none", "true"], {})["SLURM_MPI_TYPE"] == "none"
    (home / "slurm.conf").write_text("MpiDefault=pmix\n")
    with pytest.raises(CliExit) as info:
        _step_env(["true"], {})
    assert info.value.code == 1
    assert info.value.stderr == ("srun: error: MpiDefault=pmix: PMIx is not supported by "
                                 "Corral (use pmi2 or none)\n")


def test_config_refuses_pmix_default() -> None:
    assert parse_config("MpiDefault=pmi2\n").options["MpiDefault"] == "pmi2"
    with pytest.raises(ConfigError, match="MpiDefault=pmix_v3: PMIx is not supported"):
        parse_config("MpiDefault=pmix_v3\n")
