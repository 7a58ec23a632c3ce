"""End-to-end: srun's MPI types (--mpi, MpiDefault) and the PMI server of --mpi=pmi2 steps
(agent/pmi2.py), driven by a small PMI-1 client and, where Debian's MPICH can be installed,
by a real MPI program."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

# a PMI-1 client as MPICH's simple PMI speaks it: each rank puts its own key, meets the
# others at the barrier, then reads every rank's key
PMI1_CLIENT = r"""
import os, socket
s = socket.socket(fileno=int(os.environ["PMI_FD"]))
f = s.makefile("rwb", buffering=0)
def ask(line):
    f.write((line + "\n").encode())
    return dict(w.split("=", 1) for w in f.readline().decode().split())
rank, size = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
assert ask("cmd=init pmi_version=1 pmi_subversion=1")["rc"] == "0"
kvs = ask("cmd=get_my_kvsname")["kvsname"]
assert ask(f"cmd=put kvsname={kvs} key=k{rank} value=v{rank * 10}")["rc"] == "0"
assert ask("cmd=barrier_in")["cmd"] == "barrier_out"
seen = [ask(f"cmd=get kvsname={kvs} key=k{r}")["value"] for r in range(size)]
mapping = ask(f"cmd=get kvsname={kvs} key=PMI_process_mapping")["value"]
assert ask("cmd=finalize")["cmd"] == "finalize_ack"
print(rank, size, kvs, ",".join(seen), mapping)
"""

ALLREDUCE = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d sum %d\n", rank, size, sum);
    MPI_Finalize();
    return 0;
}
"""


def test_mpi_list_and_refusals(cluster: Cluster) -> None:
    r = cluster.run("srun", "--mpi=list", timeout=30)
    assert r.returncode == 0 and r.stdout == "MPI plugin types are...\n\tnone\n\tpmi2\n"
    for kind in ("pmix", "pmix_v3"):
        r = cluster.run("srun", f"--mpi={kind}", "true", timeout=30)
        assert r.returncode == 1
        assert r.stderr == (f"srun: error: --mpi={kind}: PMIx is not supported by Corral "
                            f"(use pmi2 or none)\n")


def test_pmi2_step_environment(cluster: Cluster) -> None:
    r = cluster.run("srun", "--mpi=pmi2", "-N2", "-n4", "sh", "-c",
                    'echo $SLURM_PROCID $PMI_RANK $PMI_SIZE $PMI_JOBID $PMI_SPAWNED '
                    '$SLURM_MPI_TYPE; [ -S /proc/$$/fd/$PMI_FD ] || echo no socket', timeout=60)
    assert r.returncode == 0, r.stderr
    rows = sorted(r.stdout.splitlines())
    jobid = rows[0].split()[3]
    assert rows == [f"{i} {i} 4 {jobid} 0 pmi2" for i in range(4)]
    assert jobid.endswith(".0")
    r = cluster.run("srun", "--mpi=none", "sh", "-c", 'echo "${PMI_FD-unset} $SLURM_MPI_TYPE"',
                    timeout=60)
    assert r.returncode == 0 and r.stdout == "unset none\n", r.stderr


def test_pmi1_exchange_across_two_nodes(cluster: Cluster) -> None:
    script = cluster.workdir / "pmi1_client.py"
    script.write_text(PMI1_CLIENT)
    os.chmod(script, 0o644)
    r = cluster.run("srun", "--mpi=pmi2", "-N2", "-n4", sys.executable, str(script),
                    timeout=60)
    assert r.returncode == 0, r.stderr
    rows = sorted(r.stdout.splitlines())
    assert len(rows) == 4
    for i, row in enumerate(rows):
        rank, size, _kvs, seen, mapping = row.split()
        assert (rank, size, seen) == (str(i), "4", "v0,v10,v20,v30")
        assert mapping == "(vector,(0,2,2))"


def _mpicc() -> str | None:
    # MPICH's by its own name: with OpenMPI installed too (tests/e2e/test_openmpi.py),
    # Debian's `mpicc` is OpenMPI's
    if shutil.which("mpicc.mpich") is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "mpich", "libmpich-dev"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, check=False)
    return shutil.which("mpicc.mpich")


def test_mpich_allreduce_across_two_nodes(cluster: Cluster) -> None:
    mpicc = _mpicc()
    if mpicc is None:
        pytest.skip("MPICH (mpicc) is not installed and could not be")
    src, prog = cluster.workdir / "allreduce.c", cluster.workdir / "allreduce"
    src.write_text(ALLREDUCE)
    built = subprocess.run([mpicc, "-o", str(prog), str(src)], capture_output=True, text=True,
                           timeout=120)
    if built.returncode != 0:
        pytest.skip(f"mpicc cannot build here: {built.stderr.strip()[:200]}")
    r = cluster.run("srun", "--mpi=pmi2", "-N2", "-n4", str(prog), timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == [f"rank {i} of 4 sum 10" for i in range(4)]
