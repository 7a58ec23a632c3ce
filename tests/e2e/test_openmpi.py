"""End-to-end: Debian's OpenMPI `mpirun` inside an allocation starts its daemons (orted)
through `srun`, as it does under Slurm (its plm/slurm component), and an MPI allreduce runs
across two nodes, as an ordinary user, from sbatch and from salloc (issue 17's MPI item)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, needs_test_users
from tests.e2e.test_users import grant_traverse

pytestmark = [pytest.mark.slow, needs_test_users]

USER = "corral-ompi"

ALLREDUCE = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const char *node = getenv("SLURMD_NODENAME");
    printf("rank %d of %d sum %d on %s\n", rank, size, sum, node ? node : "?");
    MPI_Finalize();
    return 0;
}
"""

# Every node of a test cluster is this one machine, with one hostname. OpenMPI names its
# shared-memory segments by hostname and node-local rank, so the first rank of each "node"
# would map the same segment: shared memory is off (TCP over loopback between all ranks).
# On a real cluster, each node has its own hostname and the defaults work.
OMPI_ENV = {
    "OMPI_MCA_btl": "self,tcp",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    "OMPI_MCA_oob_tcp_if_include": "lo",
}


def _openmpi() -> tuple[str, str] | None:
    """mpicc and mpirun of OpenMPI (by their .openmpi names: MPICH may be the default)."""
    if shutil.which("mpirun.openmpi") is None and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "openmpi-bin", "libopenmpi-dev"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, check=False)
    mpicc, mpirun = shutil.which("mpicc.openmpi"), shutil.which("mpirun.openmpi")
    return (mpicc, mpirun) if mpicc and mpirun else None


@pytest.fixture(scope="module")
def setup() -> Iterator[tuple[Cluster, pwd.struct_passwd, Path, str]]:
    tools = _openmpi()
    if tools is None:
        pytest.skip("OpenMPI (mpicc.openmpi, mpirun.openmpi) is not installed and could not be")
    mpicc, mpirun = tools
    restore = grant_traverse(os.path.realpath(sys.executable))
    made = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", USER], check=True)
        made = True
    base = Path(tempfile.mkdtemp(prefix="corral-ompi-"))
    base.chmod(0o755)  # the user reaches the cluster's socket and the program
    cluster = Cluster(base / "c")
    try:
        src, prog = base / "allreduce.c", base / "allreduce"
        src.write_text(ALLREDUCE)
        built = subprocess.run([mpicc, "-o", str(prog), str(src)], capture_output=True,
                               text=True, timeout=120)
        if built.returncode != 0:
            pytest.skip(f"mpicc.openmpi cannot build here: {built.stderr.strip()[:200]}")
        prog.chmod(0o755)
        cluster.start()
        yield cluster, pwd.getpwnam(USER), prog, mpirun
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
        if made:
            subprocess.run(["userdel", "--remove", USER], capture_output=True)
        for d, mode in restore:
            os.chmod(d, mode)


def _as_user(c: Cluster, user: pwd.struct_passwd, *args: str,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(c.env, HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name, **OMPI_ENV,
             **(env or {}))
    return subprocess.run(list(args), capture_output=True, text=True, timeout=180, env=e,
                          cwd=user.pw_dir, user=user.pw_uid, group=user.pw_gid, extra_groups=[])


def _ranks(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.startswith("rank "))


def _orted_step(c: Cluster, job: str) -> tuple[str, str]:
    """The step mpirun made: its nodes and srun command line (sacct's SubmitLine)."""
    out = c.ok("sacct", "-j", job, "-n", "-P", "-o", "JobID,JobName,NodeList,SubmitLine")
    for line in out.splitlines():
        jobid, name, nodes, submit = line.split("|", 3)
        if jobid == f"{job}.0":
            assert name == "orted", line
            return nodes, submit
    raise AssertionError(f"no step 0 in {out!r}")


def test_mpirun_in_a_batch_job_starts_its_ranks_through_srun(
        setup: tuple[Cluster, pwd.struct_passwd, Path, str]) -> None:
    c, user, prog, mpirun = setup
    r = _as_user(c, user, "sbatch", "--parsable", "-N2", "-n4", "-o", "ompi-%j.out",
                 "--wrap", f"{mpirun} {prog}")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert c.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=150) == "COMPLETED", \
        (Path(user.pw_dir) / f"ompi-{job}.out").read_text()
    out = (Path(user.pw_dir) / f"ompi-{job}.out").read_text()
    assert _ranks(out) == ["rank 0 of 4 sum 10 on node-1", "rank 1 of 4 sum 10 on node-1",
                           "rank 2 of 4 sum 10 on node-2", "rank 3 of 4 sum 10 on node-2"], out
    nodes, submit = _orted_step(c, job)
    assert nodes == "node-[1-2]"
    # OpenMPI's plm/slurm: one orted per node, killed with the step if one fails
    assert submit.startswith("srun --ntasks-per-node=1 --kill-on-bad-exit"), submit
    assert " --ntasks=2 orted " in submit, submit
    owner = c.ok("sacct", "-j", job, "-X", "-n", "-P", "-o", "User").strip()
    assert owner == USER


def test_mpirun_under_salloc_on_a_subset_with_extra_srun_args(
        setup: tuple[Cluster, pwd.struct_passwd, Path, str]) -> None:
    """mpirun on two of three allocated nodes passes --nodes/--nodelist to srun, and
    OMPI_MCA_plm_slurm_args adds the user's own srun options (here --cpu-bind=none)."""
    c, user, prog, mpirun = setup
    r = _as_user(c, user, "salloc", "-N3", "-n3", mpirun, "--host", "node-2,node-3",
                 "-np", "2", str(prog), env={"OMPI_MCA_plm_slurm_args": "--cpu-bind=none"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert _ranks(r.stdout) == ["rank 0 of 2 sum 3 on node-2", "rank 1 of 2 sum 3 on node-3"]
    job = r.stderr.split("Granted job allocation ")[1].split()[0]
    nodes, submit = _orted_step(c, job)
    assert nodes == "node-[2-3]"
    for option in ("--cpu-bind=none", "--nodes=2", "--nodelist=node-2,node-3", "--ntasks=2"):
        assert f" {option} " in submit, submit
