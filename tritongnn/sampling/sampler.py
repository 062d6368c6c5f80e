"""Multi-hop neighbour sampling of a mini-batch on the GPU.

For every hop: sample the frontier's in-neighbours (``kernels.sample``), map
them to local ids through the batch's hash table (``kernels.id_map``), and
take the new nodes as the next frontier. Buffers are sized by host-side upper
bounds with device-side counts, so the hops run back to back; the host waits
once per batch, to learn the sizes it returns (``num_sampled_nodes`` /
``num_sampled_edges`` are Python lists in PyG's contract), and once more in
a hop whose upper bound has grown past ``_SYNC_ABOVE`` slots, to cut it to the
real frontier before it multiplies by the next fanout.

On a GPU, the hops of a batch are also captured once per batch size into a
CUDA graph and replayed: a batch is some 20 small kernels and torch ops whose
Python launch cost (~1 ms) exceeds their GPU time (~0.3 ms), and on the host
that time competes with the training loop for the interpreter. Replay needs
what capture froze to stay put: the seeds and per-hop Philox seeds are copied
into static buffers, the hash table is the graph's own, and the batch's
outputs are copied out of the graph's buffers before the next replay. Batches
whose hops must sync (fanout -1, very large frontiers) run eagerly; both
paths give the same batch for the same generator state.

``NeighborSampler.sample`` returns PyG's own ``SamplerOutput``; ``PyGSampler``
wraps it as a ``torch_geometric.sampler.BaseSampler`` so PyG's ``NodeLoader``
can drive it too.
"""
from __future__ import annotations

import torch
from torch_geometric.sampler import BaseSampler, NodeSamplerInput, SamplerOutput

from ..graph import CSCGraph
from ..kernels import IdMap, draw_seeds, sample_neighbors
from ..kernels.sample import check_method
from ..kernels._launch import use_triton

_SYNC_ABOVE = 1 << 21  # frontier slots past which a hop syncs to trim its buffers
_GRAPH_KEYS_MAX = 1 << 22  # keys of the id map a captured graph owns: <= 192 MB of table
_GRAPHS_MAX = 4  # batch sizes with a captured graph, per sampler


def check_num_neighbors(num_neighbors) -> list[int]:
    """Validate PyG's ``num_neighbors`` (a list of per-hop fanouts)."""
    if isinstance(num_neighbors, dict):
        raise NotImplementedError("num_neighbors as a dict (heterogeneous graphs) is not supported yet")
    if not isinstance(num_neighbors, (list, tuple)):
        raise TypeError(f"num_neighbors must be a list of ints, got {type(num_neighbors).__name__}")
    for hop, fanout in enumerate(num_neighbors):
        if not isinstance(fanout, int) or isinstance(fanout, bool):
            raise TypeError(f"num_neighbors[{hop}] must be an int, got {fanout!r}")
        if fanout < -1:
            raise ValueError(f"num_neighbors[{hop}] = {fanout}: a fanout must be >= 0, or -1 for all neighbours")
    return list(num_neighbors)


class _CapturedHops:
    """A CUDA graph of one batch size's hops with the buffers it reads:
    ``seeds`` and ``rng`` (per-hop Philox seeds) are written before each
    replay; ``hops`` are overwritten by it."""

    def __init__(self, sampler: "NeighborSampler", batch_size: int):
        device = sampler.device
        self.seeds = torch.zeros(batch_size, dtype=torch.int64, device=device)
        self.rng = torch.zeros(len(sampler.num_neighbors), dtype=torch.int64, device=device)
        # its own table, sized so that no hop needs to grow it (a sync)
        self.id_map = IdMap(sampler.graph.num_nodes, 1, sampler._keys_bound(batch_size), device)
        sampler._hops(self.seeds, self.rng, None, self.id_map)  # compiles every kernel first
        self.graph = torch.cuda.CUDAGraph()
        # "relaxed": the training thread may call CUDA meanwhile; a sync in
        # the capture still fails it, and the sampler falls back to eager.
        with torch.cuda.graph(self.graph, capture_error_mode="relaxed"):
            self.hops = sampler._hops(self.seeds, self.rng, None, self.id_map)

    def replay(self, seeds: torch.Tensor, rng: torch.Tensor):
        self.seeds.copy_(seeds)
        self.rng.copy_(rng, non_blocking=True)
        self.graph.replay()
        return self.hops


class NeighborSampler:
    """Samples the L-hop neighbourhood of a batch of seeds.

    Args:
        graph: the ``CSCGraph`` (GPU memory, or pinned host memory read
            through UVA when ``device`` is a GPU).
        num_neighbors: fanout per hop, -1 = all neighbours.
        replace: sample with replacement.
        device: where sampling runs and outputs live.
        return_eid: also return the id of every sampled edge (``e_id``).
        cuda_graph: on a GPU, capture each batch size's hops into a CUDA
            graph and replay it (same batches, a fraction of the host time).
        hot_indptr, hot_indices: the adjacency cache (GPU copies of the
            first rows of a hot-first relabelled graph), or None.
        method, d_max: the sampling kernel, ``"foundation"``, ``"grouped"``
            or ``"grouped_split"`` (GARDEN's grouped sampler, staging rows of
            degree <= ``d_max``); all give the same batches for the same
            generator state (see ``kernels.sample.sample_neighbors``).

    Example:
        >>> sampler = NeighborSampler(graph.to("cuda"), [15, 10, 5], device="cuda")
        >>> out = sampler.sample(seeds, torch.Generator().manual_seed(0))
        >>> out.node, out.row, out.col   # n_id, edge sources, edge targets (local)
    """

    def __init__(self, graph: CSCGraph, num_neighbors, replace: bool = False,
                 device="cuda", return_eid: bool = False, cuda_graph: bool = True,
                 hot_indptr: torch.Tensor | None = None, hot_indices: torch.Tensor | None = None,
                 method: str = "foundation", d_max: int = 64):
        check_method(method, d_max)
        self.graph = graph
        self.num_neighbors = check_num_neighbors(num_neighbors)
        self.replace = bool(replace)
        self.device = torch.device(device)
        self.return_eid = return_eid
        if return_eid and graph.edge_perm is not None:
            self._edge_perm = graph.edge_perm.to(self.device)
        else:
            self._edge_perm = None
        self._id_map = None
        self.cuda_graph = bool(cuda_graph) and self.device.type == "cuda"
        self._captured: dict[int, _CapturedHops | None] = {}
        self._tiers = {} if hot_indptr is None and hot_indices is None else \
            dict(hot_indptr=hot_indptr, hot_indices=hot_indices)
        self._kernel = dict(method=method, d_max=d_max)

    def _node_bound(self, batch_size: int) -> int:
        # Keys the id map is first sized for: seeds, then each hop multiplies,
        # never more than every node (plus repeated seeds). A fanout of -1 has
        # no bound: start from what the hops before it give and let the map grow.
        most = self.graph.num_nodes + batch_size
        bound = layer = batch_size
        for fanout in self.num_neighbors:
            if fanout == -1:
                return min(most, max(16 * bound, 1 << 16))
            layer *= fanout
            bound += layer
            if bound >= most:
                return most
        return bound

    def _keys_bound(self, batch_size: int) -> int:
        """Slots the hops of a batch ask of the id map (seeds plus every
        candidate), or 0 when a hop syncs: fanout -1, or a frontier trimmed
        past ``_SYNC_ABOVE``."""
        total = layer = batch_size
        for hop, fanout in enumerate(self.num_neighbors):
            if fanout == -1 or (hop > 0 and layer > _SYNC_ABOVE):
                return 0
            layer *= fanout
            total += layer
        return total

    def _map_for(self, batch_size: int) -> IdMap:
        capacity = self._node_bound(batch_size)
        if self._id_map is None or self._id_map.capacity < capacity:
            self._id_map = IdMap(self.graph.num_nodes, 1, capacity, self.device)
        return self._id_map

    def _hops(self, seeds, rng, generator, id_map):
        """The device part of a batch: every hop sampled and mapped. Syncs
        only where a frontier is trimmed (see the module docstring)."""
        frontier_local = id_map.start(seeds)
        frontier, num_frontier = seeds, torch.full((1,), seeds.numel(), dtype=torch.int64,
                                                    device=self.device)
        hops = []
        for hop, fanout in enumerate(self.num_neighbors):
            edges = sample_neighbors(self.graph.indptr, self.graph.indices, frontier, frontier_local,
                                     num_frontier, fanout, self.replace, generator, self.return_eid,
                                     seed=None if rng is None else rng[hop:hop + 1], **self._tiers,
                                     **self._kernel)
            mapped = id_map.insert(edges.src, edges.num_edges)
            hops.append((edges, mapped))
            frontier, frontier_local, num_frontier = mapped.new_nodes, mapped.new_local, mapped.num_new
            last = hop == len(self.num_neighbors) - 1
            if not last and frontier.numel() > _SYNC_ABOVE:
                n = int(num_frontier.item())
                frontier, frontier_local = frontier[:n], frontier_local[:n]
        return hops

    def _replayable(self, batch_size: int) -> _CapturedHops | None:
        if batch_size not in self._captured:
            keys = self._keys_bound(batch_size)
            captured = None
            if 0 < keys <= _GRAPH_KEYS_MAX and len(self._captured) < _GRAPHS_MAX:
                try:
                    captured = _CapturedHops(self, batch_size)
                except RuntimeError:  # a sync or an unsupported call in the capture
                    captured = None
            self._captured[batch_size] = captured
        return self._captured[batch_size]

    def sample(self, seeds: torch.Tensor, generator: torch.Generator | None = None) -> SamplerOutput:
        """Sample around ``seeds`` (``[B]`` int64 on ``device``, ids in range).

        Returns:
            ``SamplerOutput`` with ``node`` (n_id, hop order, seeds first),
            ``row``/``col`` (local source/target of every edge, hop order),
            ``edge`` (e_id, or None), ``num_sampled_nodes`` (``[B, new nodes
            per hop...]``) and ``num_sampled_edges`` (per hop), as lists.
        """
        rng = None
        if use_triton(self.device):  # one draw per hop, so both paths agree
            rng = draw_seeds(len(self.num_neighbors), generator).to(self.device)
        captured = self._replayable(seeds.numel()) if self.cuda_graph and seeds.numel() else None
        if captured is not None:
            hops = captured.replay(seeds, rng)
        else:
            hops = self._hops(seeds, rng, generator, self._map_for(seeds.numel()))

        # The one sync of the batch: every hop's sizes in one copy. The
        # slices below copy the batch out of the (possibly replayed) buffers.
        sizes = torch.cat([t for e, m in hops for t in (e.num_edges, m.num_new)]).tolist() if hops else []
        num_edges, num_new = sizes[0::2], sizes[1::2]
        node = torch.cat([seeds] + [m.new_nodes[:n] for (_, m), n in zip(hops, num_new)])
        row = torch.cat([m.local[:e] for (_, m), e in zip(hops, num_edges)]) if hops else \
            torch.empty(0, dtype=torch.int64, device=self.device)
        col = torch.cat([h.dst[:e] for (h, _), e in zip(hops, num_edges)]) if hops else torch.empty_like(row)
        edge = None
        if self.return_eid:
            edge = torch.cat([h.eid[:e] for (h, _), e in zip(hops, num_edges)]) if hops else torch.empty_like(row)
            if self._edge_perm is not None:
                edge = self._edge_perm[edge]
        return SamplerOutput(node=node, row=row, col=col, edge=edge,
                             num_sampled_nodes=[seeds.numel()] + num_new,
                             num_sampled_edges=num_edges)


class PyGSampler(BaseSampler):
    """``NeighborSampler`` behind PyG's ``BaseSampler`` seam, for PyG's own
    ``NodeLoader``::

        loader = torch_geometric.loader.NodeLoader(
            data, PyGSampler(data, [10, 10]), input_nodes=data.train_mask, batch_size=128)

    Args:
        data: a ``torch_geometric.data.Data`` with ``edge_index``.
        num_neighbors, replace, device: as for ``NeighborSampler``.
        seed: seeds the sampler's random stream.
    """

    def __init__(self, data, num_neighbors, replace: bool = False, device=None, seed: int = 0):
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True)
        self.sampler = NeighborSampler(graph.to(device), num_neighbors, replace, device,
                                       return_eid=True)
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
