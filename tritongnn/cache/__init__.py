"""The dual GPU cache (features and adjacency), built in the order data flows:

- ``profile``: the access counts the cache is planned from (GARDEN eq. 4;
  ``sampling.profile`` runs the sampler to collect them);
- ``allocator``: the hot-first order and the split of one byte budget
  between the adjacency and feature caches (``CSCGraph.relabel`` renames);
- ``dual``: the relabelled graph and features, their hot prefixes on the
  GPU, the rest in pinned host memory, and the hit counters;
- ``dynamic``: the bounded EWMA-refreshed feature cache for the rows the
  static cache misses (GARDEN's ADFC);
- ``reuse``, ``reorder``: rows of the previous batch read on the GPU, and
  batches ordered so that consecutive ones share the most (FastGL).
"""
from .allocator import CachePlan, hot_first_order, plan_by_degree, plan_cache
from .dynamic import DynamicCache, DynamicCacheConfig
from .profile import AccessProfile, depth_weights

__all__ = ["AccessProfile", "depth_weights", "CachePlan", "hot_first_order",
           "plan_cache", "plan_by_degree", "DynamicCache", "DynamicCacheConfig"]
