"""Sampling: processors, filters and the draw (sampler.py), the lab (lab.py), traces (trace.py)."""

from tokenstep.sampling.lab import distribution, exercise

__all__ = ["distribution", "exercise"]
