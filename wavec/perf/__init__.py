"""The performance model (DESIGN.md §13, issue #22): decompose a compiled kernel's launch into tasks and
their demand, schedule the tasks on a GPU's SMs, and derive features and the roofline time from them."""

from .decompose import Decomposition, decompose
from .features import Features, bottleneck, features, roofline
from .gpus import GPUS, GPUSpec, gpu
from .schedule import Schedule, occupancy, schedule

__all__ = [
    "Decomposition",
    "decompose",
    "GPUSpec",
    "GPUS",
    "gpu",
    "Schedule",
    "occupancy",
    "schedule",
    "Features",
    "features",
    "roofline",
    "bottleneck",
]
