"""``NeighborSampler`` behind PyG's ``BaseSampler`` seam, so PyG's own
``NodeLoader`` and ``LinkLoader`` can drive it."""
from __future__ import annotations

import torch
from torch_geometric.sampler import BaseSampler, EdgeSamplerInput, NodeSamplerInput, SamplerOutput

from ..graph import CSCGraph
from ..stores import as_data, is_store_pair
from .link import LinkBatches, cast_neg_sampling
from .sampler import NeighborSampler
from .temporal import data_times, sampler_times, time_sorted


def temporal_graph(data, time_attr, temporal_strategy: str, device) -> tuple[dict, CSCGraph]:
    """``(times, graph)``: the sampler's temporal arguments (``{}`` without
    ``time_attr``) and the CSC graph, built from the time-sorted edge order
    where temporal (rows sorted by time, ``edge_perm`` the user's ids)."""
    if time_attr is None:
        return {}, CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True)
    args = data_times(data, time_attr)  # seed times come with each batch (NodeSamplerInput.time)
    edges, order = time_sorted(data.edge_index, args)
    graph = CSCGraph.from_edge_index(edges, data.num_nodes, keep_edge_perm=True)
    graph = CSCGraph(graph.indptr, graph.indices, order[graph.edge_perm.to(torch.int64)], validate=False)
    times = sampler_times(args, None, graph.edge_perm, device)
    return dict(times, temporal_strategy=temporal_strategy), graph


class PyGSampler(BaseSampler):
    """``NeighborSampler`` behind PyG's ``BaseSampler`` seam, for PyG's own
    ``NodeLoader`` and ``LinkLoader``::

        loader = torch_geometric.loader.NodeLoader(
            data, PyGSampler(data, [10, 10]), input_nodes=data.train_mask, batch_size=128)
        loader = torch_geometric.loader.LinkLoader(
            data, PyGSampler(data, [10, 10]), neg_sampling="binary", batch_size=128)

    Args:
        data: a ``torch_geometric.data.Data`` with ``edge_index``, or a
            ``(FeatureStore, GraphStore)`` pair (``tritongnn.stores``: edge
            ids in the graph store's order, as PyG's loader gives them).
        num_neighbors, replace, device, subgraph_type, disjoint: as for
            ``NeighborSampler`` (a disjoint output's ``batch`` becomes the
            batch's ``batch``, as PyG's ``NodeLoader`` sets it).
        seed: seeds the sampler's random stream.
        time_attr, temporal_strategy: PyG's (``sampling.temporal``; disjoint):
            a node- or edge-level attribute of ``data`` holding times; each
            batch's seed times are ``NodeSamplerInput.time`` (the loader's
            ``input_time``), else the seeds' node times.
    """

    def __init__(self, data, num_neighbors, replace: bool = False, device=None, seed: int = 0,
                 subgraph_type: str = "directional", disjoint: bool = False, time_attr: str | None = None,
                 temporal_strategy: str = "uniform"):
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if is_store_pair(data):
            data = as_data(data)
        times, graph = temporal_graph(data, time_attr, temporal_strategy, device)
        self.sampler = NeighborSampler(graph.to(device), num_neighbors, replace, device, return_eid=True,
                                       subgraph_type=subgraph_type, disjoint=disjoint, **times)
        self.device = device
        self.generator = torch.Generator().manual_seed(seed)
        self._links = {}  # LinkBatches of each NegativeSampling asked for, by id

    @property
    def edge_permutation(self):
        return None  # ``SamplerOutput.edge`` already holds edge ids

    def _time_dtype(self) -> torch.dtype:
        times = self.sampler._times
        return times["node_time" if "node_time" in times else "edge_time"].dtype

    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs) -> SamplerOutput:
        seed_time = None
        if index.time is not None:
            if not self.sampler.temporal:
                raise ValueError("the batch has seed times (input_time): build PyGSampler with time_attr")
            seed_time = index.time.to(self.device, self._time_dtype())
        out = self.sampler.sample(index.node.to(self.device, torch.int64), self.generator, seed_time=seed_time)
        out.metadata = (index.input_id, index.time)
        return out

    def sample_from_edges(self, index: EdgeSamplerInput, neg_sampling=None) -> SamplerOutput:
        """PyG's ``edge_sample`` (homogeneous) on this sampler: negatives
        drawn on the device (``sampling.link``), the endpoints deduplicated
        by the sampler's id map (disjoint: each its own seed, in order, as
        PyG's); ``metadata`` in PyG's layout
        for ``LinkLoader`` (local ids in order of first appearance, not
        sorted: the same nodes through ``n_id``). Temporal (``index.time``,
        the edges' ``edge_label_time``): each endpoint a seed of its edge's
        time, negatives no later where time is node-level (``sampling.link``)."""
        time = None
        if index.time is not None:
            if not self.sampler.temporal:
                raise ValueError("the batch has edge_label_time: build PyGSampler with time_attr")
            time = index.time.to(self.device, self._time_dtype())
        if index.input_type is not None:
            raise NotImplementedError("link sampling with an edge type (heterogeneous graphs) is not supported yet")
        neg_sampling = cast_neg_sampling(neg_sampling, None)
        links = self._links.get(id(neg_sampling))
        if links is None or links[0] is not neg_sampling:  # (its weights' prefix sums made once)
            links = self._links[id(neg_sampling)] = (
                neg_sampling, LinkBatches(neg_sampling, self.sampler.graph.num_nodes, self.device,
                                          node_time=self.sampler._times.get("node_time")))
        links = links[1]
        src = index.row.to(self.device, torch.int64)
        label = None if index.label is None else index.label.to(self.device)
        input_id = index.input_id if index.input_id is not None else torch.arange(src.numel())
        out = links.sample(self.sampler, src, index.col.to(self.device, torch.int64), input_id.to(self.device),
                           label, self.generator, time)
        out.metadata = out.metadata.as_metadata()
        return out
