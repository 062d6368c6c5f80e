"""Multi-hop neighbour sampling of a mini-batch on the GPU.

For every hop: sample the frontier's in-neighbours (``kernels.sample``), map
them to local ids through the batch's id map (``kernels.id_map``), and
take the new nodes as the next frontier. Buffers are sized by host-side upper
bounds with device-side counts, so the hops run back to back; the host waits
once per batch, to learn the sizes it returns (``num_sampled_nodes`` /
``num_sampled_edges`` are Python lists in PyG's contract), and once more in
a hop whose upper bound has grown past ``_SYNC_ABOVE`` slots a sub-batch, to
cut it to the real frontier before it multiplies by the next fanout. Without
a sync, a hop's new nodes are cut to K x num_nodes slots (no sub-batch has
more new nodes than the graph has nodes): on a small graph the next hop's
buffers then scale with the graph, not with the product of the fanouts.

On a GPU, the hops of a batch are also captured once per batch size into a
CUDA graph and replayed (``sampling.captured``), and the batch's outputs
are copied out of the graph's buffers before the next replay. Batches
whose hops must sync (fanout -1, very large frontiers) run eagerly; both
paths give the same batch for the same generator state. The limits on what
is captured (``_SYNC_ABOVE``, ``_GRAPH_KEYS_MAX``) are per sub-batch: a
super-batch of K batches that each replay alone replays too, where its id
map is a direct table (``id_map.direct_fits``). Where K batches' words pass
the direct table but one batch's fit, ``sample_many`` samples them as
consecutive super-batches of the most that fit (``_super_batch_step``): a
super-batch on a hash map is slower than single batches.

Super-batching (GARDEN's super-batch degree classifier): ``sample_many``
samples K batches in one pass (``sampling.super_batch``).

Disjoint batches (PyG's ``disjoint=True``): B sub-batches of one seed each
through the same launches, on a hop-major id map (``sampling.disjoint``).
Temporal sampling (PyG's ``time_attr``) is disjoint, each slot's frontier
limited by its seed's time (``sampling.temporal``).

``NeighborSampler.sample`` returns PyG's own ``SamplerOutput``;
``sampling.pyg.PyGSampler`` wraps it as a ``torch_geometric.sampler.BaseSampler``
so PyG's ``NodeLoader`` can drive it too.
"""
from __future__ import annotations

import torch
from torch_geometric.sampler import SamplerOutput

from .._checks import check_positive_int
from ..graph import CSCGraph
from ..kernels import IdMap, draw_seeds, sample_neighbors
from ..kernels._launch import check_ids_in_range, check_readable, host_list, on_device, on_device_of, use_triton
from ..kernels.id_map import DirectTable, direct_fits
from ..kernels.sample import check_method, visits_in_node_order
from .arguments import check_hit_rate, check_num_neighbors, within_kernel_fanouts
from .captured import CapturedHops, PackedBatch, hop_sizes
from .disjoint import check_disjoint, disjoint_method, sample_disjoint, seed_slots
from .outputs import batch_output
from .subgraph import check_subgraph_type, to_subgraph
from .temporal import batch_seed_times, check_times, hop_times
from .super_batch import SuperBatches

# Both limits are per sub-batch: a super-batch of K has K times each.
_SYNC_ABOVE = 1 << 21  # frontier slots past which a hop syncs to trim its buffers
# keys of the id map a captured graph owns (a hash map: <= 2^24 slots, 256
# MiB of table in int32 rows; a direct map shares the sampler's table); a
# batch of 8000 seeds with fanouts [15, 10, 5] asks 7.3M, and replaying its
# hops spares the loader's thread ~20 launches of Python a batch, time it
# would otherwise take from the training loop's (one interpreter lock)
_GRAPH_KEYS_MAX = 1 << 23
_GRAPHS_MAX = 4  # shapes (batch size, or K and total seeds) with a captured graph, per sampler


class NeighborSampler(SuperBatches):
    """Samples the L-hop neighbourhood of a batch of seeds, or of K batches
    at once (``sample_many``).

    Args:
        graph: the ``CSCGraph`` (GPU memory, or pinned host memory read
            through UVA when ``device`` is a GPU).
        num_neighbors: fanout per hop, -1 = all neighbours.
        replace: sample with replacement.
        device: where sampling runs and outputs live.
        return_eid: also return the id of every sampled edge (``e_id``):
            its CSC position where the graph has no ``edge_perm``, else
            ``edge_perm`` of it, read where the graph lives (GPU memory, or
            pinned host memory through UVA; ``kernels.edge_ids``).
        cuda_graph: on a GPU, capture each batch size's hops into a CUDA
            graph and replay it (same batches, a fraction of the host time).
        hot_indptr, hot_indices: the adjacency cache (GPU copies of the
            first rows of a hot-first relabelled graph), or None.
        hot_edge_perm: with ``return_eid``, the GPU copy of ``edge_perm``
            for the cached rows (its first ``hot_indices.numel()``
            entries), so that their edge ids are read from GPU memory; or None.
        adjacency_hit_rate: with the adjacency cache, the share of row
            reads it is expected to serve (the loader's cache plan gives
            it): each hop then reads its frontier in node-id order where
            enough of the reads cross PCIe (``kernels.sample.sorts_frontier``).
            None (or NaN): the share of the edges the cache holds stands in.
        method, d_max: the sampling kernels, ``"auto"`` (the one-pass
            ``"fused"`` where the adjacency is all in GPU memory,
            ``"grouped_split"`` where it is all in pinned host memory,
            ``"grouped"`` where either reads the frontier in node-id order,
            ``"foundation"`` with an adjacency cache otherwise), ``"foundation"``,
            ``"fused"``, ``"grouped"`` or ``"grouped_split"`` (GARDEN's
            grouped sampler, staging rows of degree <= ``d_max``); all give
            the same batches for the same generator state, alone or in
            ``sample_many``'s super-batches (see
            ``kernels.sample.sample_neighbors``).
        edge_weight: ``[E]`` float32 non-negative weight of each CSC
            position of ``graph`` (where its ``indices`` are), or None:
            neighbours drawn in proportion to weight (PyG's ``weight_attr``;
            ``kernels.sample_weighted``), by one kernel whatever ``method``.
        subgraph_type: PyG's: ``"directional"`` (the sampled edges),
            ``"bidirectional"`` or ``"induced"`` (``sampling.subgraph``: the
            same nodes, other edges, no per-hop counts; not captured by
            ``packed_batch``).
        disjoint: PyG's: each seed its own subgraph, ``batch`` its seed
            slot (``sampling.disjoint``); not with ``"induced"``, as PyG.
        node_time, edge_time: PyG's ``time_attr`` (``sampling.temporal``):
            ``[N]`` time of each node by id, or ``[E]`` of each CSC position,
            on ``device``; rows sorted by time. Temporal sampling is
            disjoint, as PyG 2.8 makes it (``disjoint`` forced on).
        temporal_strategy: ``"uniform"`` or ``"last"`` (PyG's).

    Example:
        >>> sampler = NeighborSampler(graph.to("cuda"), [15, 10, 5], device="cuda")
        >>> out = sampler.sample(seeds, torch.Generator().manual_seed(0))
        >>> out.node, out.row, out.col   # n_id, edge sources, edge targets (local)
        >>> outs = sampler.sample_many(seeds.split(1024), generator)  # K batches, one pass
    """

    def __init__(self, graph: CSCGraph, num_neighbors, replace: bool = False,
                 device="cuda", return_eid: bool = False, cuda_graph: bool = True,
                 hot_indptr: torch.Tensor | None = None, hot_indices: torch.Tensor | None = None,
                 method: str = "auto", d_max: int = 64, adjacency_hit_rate: float | None = None,
                 edge_weight: torch.Tensor | None = None, subgraph_type: str = "directional",
                 hot_edge_perm: torch.Tensor | None = None, disjoint: bool = False,
                 node_time: torch.Tensor | None = None, edge_time: torch.Tensor | None = None,
                 temporal_strategy: str = "uniform"):
        check_method(method, d_max)
        self.subgraph_type = check_subgraph_type(subgraph_type)
        self._times = check_times(node_time, edge_time, temporal_strategy, graph, device)
        self.disjoint = check_disjoint(disjoint or self.temporal, self.subgraph_type)
        adjacency_hit_rate = check_hit_rate(adjacency_hit_rate)
        self.graph = graph
        self.num_neighbors = check_num_neighbors(num_neighbors)
        self._fanouts = within_kernel_fanouts(self.num_neighbors, graph, replace)  # what the kernels get
        self.replace = bool(replace)
        self.device = torch.device(device)
        self.return_eid = return_eid
        # read where the graph lives: never copied (4 B an edge)
        self._edge_perm = graph.edge_perm if return_eid else None
        self._hot_edge_perm = hot_edge_perm if self._edge_perm is not None else None
        if self._edge_perm is not None:
            check_readable(self._edge_perm, self.device, "graph.edge_perm")
        self._id_map = None
        self._direct: DirectTable | None = None  # the direct id maps' words, shared
        self.cuda_graph = bool(cuda_graph) and self.device.type == "cuda"
        self._captured: dict[int | tuple[int, int], CapturedHops | None] = {}
        # frontier slots a sub-batch past which a hop syncs to trim its buffers
        # (per sampler: a small graph's tests set it low to reach the trim)
        self.sync_above = _SYNC_ABOVE
        self._tiers = {} if hot_indptr is None and hot_indices is None else \
            dict(hot_indptr=hot_indptr, hot_indices=hot_indices)
        if self.disjoint:  # (not the fused kernel: its edge_ptr tile is K = B wide)
            method = disjoint_method(method, graph.indices, hot_indices)
        self._kernel = dict(method=method, d_max=d_max)
        if edge_weight is not None:  # (checked by every hop's sample_neighbors, without a sync)
            if not isinstance(edge_weight, torch.Tensor) or edge_weight.shape != (graph.num_edges,):
                raise ValueError(f"edge_weight must be a tensor of shape [{graph.num_edges}] (one weight per "
                                 f"edge of the graph), got {tuple(getattr(edge_weight, 'shape', ()))}")
            self._kernel["edge_weight"] = edge_weight
        if self._tiers and adjacency_hit_rate is not None:  # every hop's visit order, from the expected misses
            self._kernel["sort_frontier"] = visits_in_node_order(
                method, graph.indptr, graph.indices, self.device, **self._tiers, uva_reads=1 - adjacency_hit_rate)

    @property
    def temporal(self) -> bool:
        """Whether neighbours are sampled by time (``node_time``/``edge_time``)."""
        return bool(self._times)

    def _node_bound(self, batch_size: int) -> int:
        # Keys the id map is first sized for: seeds, then each hop multiplies,
        # never more than every node (plus repeated seeds). A fanout of -1 has
        # no bound: start from what the hops before it give and let the map grow.
        most = self.graph.num_nodes + batch_size
        bound = layer = batch_size
        for fanout in self._fanouts:
            if fanout == -1:
                return min(most, max(16 * bound, 1 << 16))
            layer *= fanout
            bound += layer
            if bound >= most:
                return most
        return bound

    def _frontier_cap(self, num_batches: int) -> int:
        """Slots a hop's new nodes can fill: none of K sub-batches has more
        new nodes than the graph has nodes."""
        return num_batches * self.graph.num_nodes

    def _keys_bound(self, batch_size: int, num_batches: int = 1) -> int:
        """Slots the hops of a (super-)batch of ``batch_size`` seeds in all,
        in ``num_batches`` sub-batches, ask of the id map (seeds plus every
        candidate), or 0 when a hop syncs: fanout -1, or a frontier trimmed
        past ``_sync_slots`` (``_hops``)."""
        total = frontier = batch_size
        for hop, fanout in enumerate(self._fanouts):
            if fanout == -1 or (hop > 0 and frontier > self._sync_slots(num_batches)):
                return 0
            candidates = frontier * fanout
            total += candidates
            frontier = min(candidates, self._frontier_cap(num_batches))
        return total

    def _sync_slots(self, num_batches: int) -> int:
        """Frontier slots past which a hop syncs: ``sync_above`` a sub-batch (a disjoint batch's are one batch)."""
        return self.sync_above * (1 if self.disjoint else num_batches)

    def _new_id_map(self, capacity: int, num_batches: int) -> IdMap:
        """An id map of K sub-batches: on the sampler's direct table where
        it fits (``id_map.direct_fits``: the words every direct map of this
        sampler shares, its batches running one after another on one
        stream; sized for the largest K so far), else a hash table of its
        own sized for ``capacity`` keys. The direct table outlives hash maps
        of larger K (single batches and short super-batches still use it)."""
        if not use_triton(self.device) or not direct_fits(self.graph.num_nodes, num_batches):
            return IdMap(self.graph.num_nodes, num_batches, capacity, self.device, kind="hash",
                         hop_major=self.disjoint)
        keys = self.graph.num_nodes * num_batches
        if self._direct is None or self._direct.num_keys < keys:
            # a larger table: the graphs captured on the old one are dropped
            # (captured again when next asked for), so that it is freed
            # before the new one is allocated
            old, self._direct = self._direct, None
            if old is not None:
                for key in [k for k, c in self._captured.items() if c is not None and c.id_map.direct is old]:
                    del self._captured[key]
                if self._id_map is not None and self._id_map.direct is old:
                    self._id_map = None
                del old
            self._direct = DirectTable(keys, self.device)
        return IdMap(self.graph.num_nodes, num_batches, capacity, self.device, kind="direct",
                     direct=self._direct, hop_major=self.disjoint)

    def _map_for(self, capacity: int, num_batches: int = 1) -> IdMap:
        # One map serves every K up to the largest seen (sub-batches past K
        # stay empty): the loader's last, shorter super-batch reuses it.
        old = self._id_map
        if old is None or old.capacity < capacity or old.num_batches < num_batches:
            if old is not None:
                if old.direct is None:
                    capacity = max(capacity, old.capacity)
                num_batches = max(num_batches, old.num_batches)
            # free the old table before the new one is allocated (this
            # function's reference too: it kept the old alive until now)
            self._id_map = old = None
            self._id_map = self._new_id_map(capacity, num_batches)
        return self._id_map

    def _hops(self, seeds, rng, generator, id_map, seeds_batch=None, batch_ptr=None, frontier=None,
              seed_time=None):
        """The device part of a (super-)batch: every hop sampled and mapped.
        Syncs only where a frontier is trimmed (see the module docstring).
        With ``seeds_batch``/``batch_ptr`` (K + 1 entries) the K sub-batches
        go through each launch together; ``rng`` is ``[L, K]`` (disjoint:
        ``[L, 1]``; ``frontier_batch`` is then each frontier node's seed
        slot: ``sampling.disjoint``). With ``frontier`` (``(nodes, local,
        count)`` already in ``id_map``: one batch's deduplicated seeds,
        ``sample_endpoints``) the map is not started again. ``seed_time``
        (``[B]``, temporal, disjoint): each frontier slot's window is its
        seed's, ``seed_time[frontier_batch]`` (``sampling.temporal``)."""
        if frontier is None:
            frontier_local = id_map.start(seeds, seeds_batch)
            frontier, num_frontier = seeds, torch.full((1,), seeds.numel(), dtype=torch.int64, device=self.device)
        else:
            frontier, frontier_local, num_frontier = frontier
        frontier_batch = seeds_batch
        num_batches = 1 if batch_ptr is None else batch_ptr.numel() - 1
        if self.disjoint and rng is not None:
            rng = seed_slots(rng, num_batches)
        cap = self._frontier_cap(num_batches)
        hops = []
        for hop, fanout in enumerate(self._fanouts):
            last = hop == len(self._fanouts) - 1
            times = {} if seed_time is None else hop_times(seed_time, frontier_batch, self._times)
            edges = sample_neighbors(self.graph.indptr, self.graph.indices, frontier, frontier_local,
                                     num_frontier, fanout, self.replace, generator, self.return_eid,
                                     seed=None if rng is None else rng[hop], frontier_batch=frontier_batch,
                                     batch_ptr=batch_ptr, **self._tiers, **self._kernel, **times)
            # the last hop's new nodes are no frontier: their local ids need
            # not be stored (in the table or as new_local)
            mapped = id_map.insert(edges.src, edges.num_edges, edges.batch,
                                   edges.edge_ptr if edges.batch is not None else None, last=last)
            hops.append((edges, mapped))
            if last:
                break
            frontier, frontier_local, num_frontier = mapped.new_nodes, mapped.new_local, mapped.num_new
            if frontier_batch is not None:
                frontier_batch = mapped.new_batch
                # (the map may hold more sub-batches than this super-batch: they stay empty)
                per_batch = mapped.num_new_per_batch[:num_batches]
                batch_ptr = torch.cat([per_batch.new_zeros(1), torch.cumsum(per_batch, 0)])
            keep = min(frontier.numel(), cap)  # a static cut (no sync): never more new nodes than that
            if keep > self._sync_slots(num_batches):
                keep = int(num_frontier.item())  # the real frontier (a sync)
            if keep < frontier.numel():
                frontier, frontier_local = frontier[:keep], frontier_local[:keep]
                if frontier_batch is not None:
                    frontier_batch = frontier_batch[:keep]
        return hops

    def _replayable(self, batch_size: int, num_batches: int = 1) -> CapturedHops | None:
        key = batch_size if num_batches == 1 else (num_batches, batch_size)
        if key not in self._captured:
            keys = self._keys_bound(batch_size, num_batches)
            captured = None
            # A super-batch on a hash map runs eagerly: its launches are
            # already shared by K batches, and a captured one keeps buffers
            # sized for the untrimmed bound (H200, 5x10^7 nodes, K = 16:
            # 2.41-2.60 ms a batch at 14.1-14.7 GB peak captured, 2.50-2.58
            # ms at 12.6-13.5 GB eager)
            direct = num_batches == 1 or direct_fits(self.graph.num_nodes, num_batches) or self.disjoint
            most_keys = _GRAPH_KEYS_MAX * (1 if self.disjoint else num_batches)
            if 0 < keys <= most_keys and len(self._captured) < _GRAPHS_MAX and direct:
                try:
                    captured = CapturedHops(self, batch_size, num_batches)
                except RuntimeError:  # a sync or an unsupported call in the capture
                    captured = None
            self._captured[key] = captured
        return self._captured[key]

    @on_device_of("self")
    def packed_batch(self, batch_size: int) -> PackedBatch | None:
        """A new ``PackedBatch`` for batches of ``batch_size`` seeds (its
        graph captured on a GPU), or None where one cannot be: a hop that
        syncs (fanout -1, a frontier past ``_SYNC_ABOVE``), more id-map keys
        than ``_GRAPH_KEYS_MAX``, a ``subgraph_type`` other than ``"directional"``, captures off
        (``cuda_graph=False``), a CPU without Triton's interpreter, or
        ``disjoint`` (no ``batch`` buffer: ``sample`` replays its hops)."""
        check_positive_int("batch_size", batch_size)
        keys = self._keys_bound(batch_size)
        capturable = self.cuda_graph or (self.device.type == "cpu" and use_triton(self.device))
        if not capturable or not 0 < keys <= _GRAPH_KEYS_MAX \
                or self.subgraph_type != "directional" or self.disjoint:
            return None
        return PackedBatch(self, batch_size)

    def draw_rng(self, generator, num_batches: int = 1) -> torch.Tensor | None:
        """``[L, K]`` per-hop Philox seeds on the CPU: L per batch, drawn
        batch after batch as consecutive ``sample`` calls draw them (a
        replay copies them into its buffer, an eager pass to the device)."""
        if not use_triton(self.device):
            return None
        num_hops = len(self.num_neighbors)
        if num_batches == 1:
            return draw_seeds(num_hops, generator)[:, None]
        # one draw of K x L: the generator gives its numbers in order, batch
        # after batch, as K draws of L would
        return draw_seeds(num_hops * num_batches, generator).view(num_batches, num_hops).T.contiguous()

    def _rng_on_device(self, rng: torch.Tensor | None) -> torch.Tensor | None:
        return None if rng is None else rng.to(self.device, non_blocking=True)

    def _check_seeds(self, seeds, name: str) -> None:
        if not isinstance(seeds, torch.Tensor) or seeds.dtype != torch.int64 or seeds.dim() != 1:
            raise TypeError(f"{name} must be a 1-D int64 tensor, got "
                            f"{getattr(seeds, 'dtype', type(seeds).__name__)} of shape "
                            f"{tuple(getattr(seeds, 'shape', ()))}")
        if not on_device(seeds, self.device):
            raise ValueError(f"{name} lives on {seeds.device}, the sampler on {self.device}")

    @on_device_of("self")
    def sample(self, seeds: torch.Tensor, generator: torch.Generator | None = None,
               validate: bool = True, seed_time: torch.Tensor | None = None) -> SamplerOutput:
        """Sample around ``seeds`` (``[B]`` int64 on ``device``, ids in range;
        checked, with one host sync, unless ``validate=False``: the loader's
        seeds were checked once, as ``input_nodes``). A temporal sampler
        takes ``seed_time`` (``[B]`` on ``device``, PyG's ``input_time``),
        else the seeds' node times (``sampling.temporal``).

        Returns:
            ``SamplerOutput`` with ``node`` (n_id, hop order, seeds first),
            ``row``/``col`` (local source/target of every edge, hop order),
            ``edge`` (e_id, or None), ``num_sampled_nodes`` (``[B, new nodes
            per hop...]``) and ``num_sampled_edges`` (per hop), as lists;
            with another ``subgraph_type`` its edges, both counts None
            (``sampling.subgraph``); disjoint: ``sampling.disjoint``.
        """
        if validate:
            self._check_seeds(seeds, "seeds")
            check_ids_in_range(seeds, self.graph.num_nodes, "seeds")
        rng = self.draw_rng(generator)  # one draw per hop, so both paths agree
        if self.temporal:
            seed_time = batch_seed_times(self._times, seeds, seed_time)
        elif seed_time is not None:
            raise ValueError("seed_time is given to a sampler without node_time or edge_time (PyG's time_attr)")
        if self.disjoint:
            return self._subgraph(sample_disjoint(self, seeds, rng, generator, seed_time))
        captured = self._replayable(seeds.numel()) if self.cuda_graph and seeds.numel() else None
        if captured is not None:
            hops, sizes = captured.replay(seeds, rng)
        else:
            hops = self._hops(seeds, self._rng_on_device(rng), generator,
                              self._map_for(self._node_bound(seeds.numel())))
            sizes = hop_sizes(hops) if hops else None

        # The one sync of the batch: every hop's sizes in one copy.
        sizes = host_list(sizes) if hops else []
        return self._subgraph(batch_output(seeds, hops, sizes, self.device, self.return_eid, self._edge_perm,
                                           self._hot_edge_perm))

    @on_device_of("self")
    def sample_endpoints(self, endpoints: torch.Tensor, generator: torch.Generator | None = None,
                         validate: bool = True) -> tuple[SamplerOutput, torch.Tensor]:
        """Sample around the distinct nodes of ``endpoints`` (``[C]`` int64 on
        ``device``, repeats allowed: both ends of a batch's supervision edges
        and its negatives). The batch's own id map deduplicates them, as its
        first insert (one pass, no sort): they become the seeds, in order of
        first appearance, and the hops go on in the same map.

        Returns:
            ``(out, local)``: the ``SamplerOutput`` of the distinct endpoints
            (``num_sampled_nodes[0]`` of them, first in ``out.node``), and
            ``[C]`` int64 local id of each endpoint (``out.node[local] ==
            endpoints``). Same sizes sync as ``sample``: one.
        """
        if self.disjoint:
            raise NotImplementedError("sample_endpoints (link-level batches) of a disjoint sampler")
        if validate:
            self._check_seeds(endpoints, "endpoints")
            check_ids_in_range(endpoints, self.graph.num_nodes, "endpoints")
        rng = self.draw_rng(generator)  # as ``sample``: one draw per hop
        id_map = self._map_for(self._node_bound(endpoints.numel()))
        id_map.start(endpoints[:0])
        count = torch.full((1,), endpoints.numel(), dtype=torch.int64, device=self.device)
        seeds = id_map.insert(endpoints, count, last=not self._fanouts)
        hops = self._hops(None, self._rng_on_device(rng), generator, id_map,
                          frontier=(seeds.new_nodes, seeds.new_local, seeds.num_new)) if self._fanouts else []
        sizes = host_list(torch.cat([seeds.num_new] + ([hop_sizes(hops)] if hops else [])))
        out = batch_output(seeds.new_nodes[:sizes[0]], hops, sizes[1:], self.device, self.return_eid,
                           self._edge_perm, self._hot_edge_perm)
        return self._subgraph(out), seeds.local[:endpoints.numel()]

    def _subgraph(self, out: SamplerOutput) -> SamplerOutput:
        """``out`` with the edges of ``subgraph_type`` (``sampling.subgraph``;
        the induced pass restarts the sampler's id map, on this stream)."""
        if self.subgraph_type == "directional":
            return out
        id_map = self._map_for(out.node.numel()) if use_triton(self.device) else None
        return to_subgraph(out, self.subgraph_type, self.graph, self._tiers, id_map, self._edge_perm,
                           self._hot_edge_perm)
