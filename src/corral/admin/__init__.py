"""The `corral` administrator command, apart from the Slurm commands (corral.cli)."""
