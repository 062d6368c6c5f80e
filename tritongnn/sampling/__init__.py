"""Mini-batch sampling: the multi-hop sampler and the drop-in NeighborLoader."""
from .loader import NeighborLoader
from .sampler import NeighborSampler, PyGSampler

__all__ = ["NeighborLoader", "NeighborSampler", "PyGSampler"]
