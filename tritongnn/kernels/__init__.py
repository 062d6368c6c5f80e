"""Triton kernels, one family per file, each with its launcher; ``reference``
holds the pure-torch versions (test oracles and the CPU path).

- ``classify``: the super-batch degree classifier (full / random nodes,
  output placement) and the atomic-free multi-block prefix sum.
- ``sample``: uniform neighbour sampling of one hop (CSC, GPU or UVA): the
  dispatcher over the methods below, and the choice of method and visit
  order.
- ``sample_common``: the random draws every sampling kernel shares (Philox
  words, Floyd's subset draw), so every method returns the same edges.
- ``sample_foundation``: the classifier-ordered tile kernel reading every
  pick from memory (``method="foundation"``), and whole rows (fanout -1).
- ``sample_grouped``: the same sampling with rows staged by coalesced loads
  (GARDEN's grouped sampler; ``method="grouped"`` / ``"grouped_split"``).
- ``sample_temporal``: PyG's temporal sampling: each frontier node's row
  cut to its window of admissible (no later than its seed) positions, by a
  binary search in rows sorted by time, for the uniform kernels to sample.
- ``sample_fused``: a hop's classification, placement and draws in one
  launch, a decoupled look-back scan (``method="fused"``).
- ``id_map``: fused global-to-local id mapping, keyed by sub-batch (direct
  and hash tables); ``id_map_kernels``: its device passes.
- ``subgraph``: the edges of PyG's ``subgraph_type`` past the sampled
  ones: the induced subgraph of a batch's nodes (a lookup in the id map a
  candidate), and the sampled edges made bidirectional.
- ``gather``: feature row gather from GPU memory or pinned host memory;
  ``gather_kernel``: its kernel and launch shapes.
- ``edge_ids``: sampled CSC positions to the user's edge ids (PyG's
  ``e_id``), one gather from GPU or pinned host memory.
- ``pack``: valid prefixes of bounded buffers packed end to end, sizes
  kept on the device (a mini-batch captured in one CUDA graph), and a
  super-batch's segments each to its own batch's place.
- ``aggregate``: sum/mean neighbour aggregation, forward and backward.
- ``attention``: GAT's attention-weighted aggregation, forward and backward.
- ``reduce``: column sums of a tall matrix (a layer's bias gradient).
"""
from .aggregate import aggregate, segment_sum
from .attention import attend
from .classify import classify_frontier, prefix_sum
from .edge_ids import edge_ids
from .gather import gather_rows
from .id_map import IdMap
from .outputs import ClassifiedFrontier, HopSample, MappedHop
from .pack import pack_prefixes
from .reduce import column_sum
from .sample import draw_seeds, sample_neighbors

__all__ = ["sample_neighbors", "draw_seeds", "IdMap", "gather_rows", "HopSample", "MappedHop", "aggregate", "attend",
           "segment_sum", "column_sum", "classify_frontier", "prefix_sum", "ClassifiedFrontier", "pack_prefixes",
           "edge_ids"]
