"""MPI plugin types srun accepts (--mpi, SLURM_MPI_TYPE, MpiDefault) and what each means.

Corral offers `none` and `pmi2`; PMIx (pmix, pmix_v3, pmix_v4...) is refused by name so that a
script asking for it fails clearly instead of starting ranks that never find each other."""

from __future__ import annotations

SUPPORTED = ("none", "pmi2")
# what `srun --mpi=list` prints (Slurm's layout: a heading, then one type a line after a tab)
LIST_TEXT = "MPI plugin types are...\n" + "".join(f"\t{t}\n" for t in SUPPORTED)


class MpiTypeError(ValueError):
    pass


def parse_mpi_type(text: str) -> str:
    """The MPI type `text` names (case-insensitive), or MpiTypeError saying why not."""
    kind = text.strip().lower()
    if kind in SUPPORTED:
        return kind
    if kind == "pmix" or kind.startswith("pmix_"):
        raise MpiTypeError("PMIx is not supported by Corral (use pmi2 or none)")
    raise MpiTypeError(f"unknown MPI type (Corral offers: {', '.join(SUPPORTED)})")
