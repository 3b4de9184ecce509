"""corral: a workload manager for cloud and cluster compute."""

__version__ = "0.1.0"
