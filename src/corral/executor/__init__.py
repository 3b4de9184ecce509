"""Executors: how an attempt runs. The corral agent (native) lives in corral.agent; Slurm here."""
