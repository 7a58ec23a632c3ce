"""Corral: a Slurm-compatible workload manager for GPU clusters."""

__version__ = "0.1.0"
