"""Mini-batch sampling over the graph's tiers: the multi-hop sampler, its
PyG ``BaseSampler`` wrapper, and the access profile it runs for the cache."""
from .profile import profile_accesses
from .pyg import PyGSampler
from .sampler import NeighborSampler

__all__ = ["NeighborSampler", "PyGSampler", "profile_accesses"]
