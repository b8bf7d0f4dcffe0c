"""Clusters beyond one machine: over ssh with TLS, and workers as Slurm jobs."""
