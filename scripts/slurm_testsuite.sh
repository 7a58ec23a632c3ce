#!/usr/bin/env bash
# Run Slurm's own Python test suite (testsuite/python of a Slurm source checkout, e.g.
# tag slurm-22-05-8-1) against a Corral cluster, in the suite's local-config mode, and
# print its pass/fail counts.  A developer's tool: CI does not run it.
#
#   scripts/slurm_testsuite.sh SLURM_SOURCE_DIR [pytest arguments...]
#
# Without pytest arguments it runs testsuite/python/tests/commands.  Examples:
#   scripts/slurm_testsuite.sh ~/src/slurm
#   scripts/slurm_testsuite.sh ~/src/slurm tests/commands/srun -k usage
#
# Corral's commands must be first on PATH (a venv with Corral installed, activated), and
# the Python that runs it ($PYTHON, default python3) needs pytest (and pexpect for the
# tests that use it).  The cluster is started in a temporary $CORRAL_HOME with four nodes
# and stopped at the end.  Tests that need auto-config mode (reconfiguring Slurm) skip;
# tests that compile a C program against a built libslurm (RoutePlugin) error, as Corral
# has none.  README.md (Documentation) has the last measured counts.
set -euo pipefail

if [ $# -lt 1 ] || [ ! -d "$1/testsuite/python" ]; then
    echo "usage: $0 SLURM_SOURCE_DIR [pytest arguments...]" >&2
    echo "  SLURM_SOURCE_DIR must hold testsuite/python (a Slurm source checkout)" >&2
    exit 2
fi
src=$(cd "$1" && pwd)
shift
python=${PYTHON:-python3}
case $python in */*) python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python") ;; esac
bindir=$(dirname "$(command -v squeue)")
if ! "$bindir/squeue" --version 2>/dev/null | grep -q . || [ ! -x "$bindir/corral" ]; then
    echo "$0: Corral's commands (corral, squeue, ...) must be first on PATH" >&2
    exit 2
fi

home=$(mktemp -d -t corral-slurm-testsuite.XXXXXX)
cleanup() {
    CORRAL_HOME=$home corral down >/dev/null 2>&1 || true
    rm -rf "$home"
}
trap cleanup EXIT
export CORRAL_HOME=$home
for v in $(env | sed -n 's/^\(\(SLURM\|SBATCH\|SRUN\|SALLOC\|SQUEUE\|SACCT\|SINFO\)_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$v"
done

cat > "$home/input.conf" <<CONF
ClusterName=corral
KillWait=2
MinJobAge=600
SchedulerInterval=1
NodeName=node-[1-4] CPUs=4 RealMemory=8000
PartitionName=debug Nodes=node-[1-4] Default=YES MaxTime=INFINITE State=UP
CONF
corral up --config "$home/input.conf" >/dev/null

# The suite's configuration: where Slurm's source is, where the commands and slurm.conf are.
cat > "$home/testsuite.conf" <<CONF
SlurmSourceDir=$src
SlurmBuildDir=$src
SlurmInstallDir=$(dirname "$bindir")
SlurmConfigDir=$home
CONF
export SLURM_TESTSUITE_CONF=$home/testsuite.conf
[ -f "$home/slurm.conf" ] || cp "$home/input.conf" "$home/slurm.conf"

cd "$src/testsuite/python"
[ $# -gt 0 ] || set -- tests/commands
log=$home/pytest.log
"$python" -m pytest -p no:cacheprovider -q -rfE "$@" 2>&1 | tee "$log" || true
echo
counts=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$log" | tail -1 | tr -d '=')
echo "Slurm testsuite/python against Corral: ${counts:-no counts (see the pytest output above)}"
