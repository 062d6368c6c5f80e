"""``NeighborSampler`` behind PyG's ``BaseSampler`` seam, so PyG's own
``NodeLoader`` can drive it."""
from __future__ import annotations

import torch
from torch_geometric.sampler import BaseSampler, NodeSamplerInput, SamplerOutput

from ..graph import CSCGraph
from ..stores import as_data, is_store_pair
from .sampler import NeighborSampler


class PyGSampler(BaseSampler):
    """``NeighborSampler`` behind PyG's ``BaseSampler`` seam, for PyG's own
    ``NodeLoader``::

        loader = torch_geometric.loader.NodeLoader(
            data, PyGSampler(data, [10, 10]), input_nodes=data.train_mask, batch_size=128)

    Args:
        data: a ``torch_geometric.data.Data`` with ``edge_index``, or a
            ``(FeatureStore, GraphStore)`` pair (``tritongnn.stores``: edge
            ids in the graph store's order, as PyG's loader gives them).
        num_neighbors, replace, device, subgraph_type: as for ``NeighborSampler``.
        seed: seeds the sampler's random stream.
    """

    def __init__(self, data, num_neighbors, replace: bool = False, device=None, seed: int = 0,
                 subgraph_type: str = "directional"):
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if is_store_pair(data):
            data = as_data(data)
        graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True)
        self.sampler = NeighborSampler(graph.to(device), num_neighbors, replace, device,
                                       return_eid=True, subgraph_type=subgraph_type)
        self.device = device
        self.generator = torch.Generator().manual_seed(seed)

    @property
    def edge_permutation(self):
        return None  # ``SamplerOutput.edge`` already holds edge ids

    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs) -> SamplerOutput:
        if index.time is not None:
            raise NotImplementedError("temporal sampling (input_time) is not supported yet")
        out = self.sampler.sample(index.node.to(self.device, torch.int64), self.generator)
        out.metadata = (index.input_id, index.time)
        return out

    def sample_from_edges(self, index, neg_sampling=None):
        raise NotImplementedError("link-level sampling (sample_from_edges) is not supported yet")
