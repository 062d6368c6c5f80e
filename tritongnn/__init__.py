"""tritongnn: GPU neighbour sampling for PyTorch Geometric, in Triton.

Swap ``torch_geometric.loader.NeighborLoader`` for ``tritongnn.NeighborLoader``
(and ``LinkNeighborLoader`` for ``tritongnn.LinkNeighborLoader``) and keep
the model: sampling, id mapping and feature gathering run on the GPU, reading
topology and features from GPU memory or pinned host memory (UVA).

Data flow (each stage in its own module):

    seeds -> sampling.sampler   (per hop: kernels.sample, kernels.id_map)
          -> kernels.gather     (features: GPU rows, or pinned host rows via UVA)
          -> loader.assemble    (a PyG Data batch)
          -> loader.pipeline    (prepared on side streams by a producer thread)

``cache`` holds the dual GPU cache, ``graph`` the CSC topology, ``datasets``
the readers and synthetic graphs, ``kernels.reference`` the pure-torch
versions of every kernel.
"""
from .graph import CSCGraph
from .loader import LinkNeighborLoader, NeighborLoader
from .sampling import NeighborSampler, PyGSampler

__version__ = "0.1.0"
__all__ = ["CSCGraph", "LinkNeighborLoader", "NeighborLoader", "NeighborSampler", "PyGSampler", "__version__"]
