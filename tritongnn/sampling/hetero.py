"""Multi-hop neighbour sampling of a ``HeteroData`` batch on the GPU, as PyG's
heterogeneous ``NeighborSampler`` samples.

The graph is the segment CSC of ``sampling.hetero_layout``: each hop expands
its frontier (global ids of every type) into the (edge type, target)
segments it samples, draws from them with the homogeneous kernels
(``kernels.sample``: one launch per distinct fanout of the hop), and maps the
sources through one id map keyed by global id (``kernels.id_map``): a node
reached through several edge types in a hop is one new node, as in PyG. The
batch is then split by type on the device (``split_by_type``), with one host
sync for the counts: PyG's ``HeteroSamplerOutput``, each type's nodes in
hop order, its seeds first.
"""
from __future__ import annotations

import torch
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

from ..graph import CSCGraph
from ..kernels import IdMap, draw_seeds, sample_neighbors
from ..kernels._launch import check_ids_in_range, host_list, on_device_of, use_triton
from ..kernels.outputs import HopSample
from ..kernels.pack import pack_prefixes
from ..kernels.sample import MAX_FANOUT
from ..kernels.subgraph import induced_edges
from .arguments import within_kernel_fanouts
from .captured import hop_sizes
from .hetero_layout import HeteroLayout, HopClass
from .outputs import batch_output, to_edge_ids
from .sampler import _SYNC_ABOVE
from .subgraph import check_subgraph_type


class HeteroSampler:
    """Samples the L-hop neighbourhood of seeds of one node type.

    Args:
        layout: the graph's ``HeteroLayout``; ``graph``: its segment CSC
            (``HeteroLayout.build_csc``: GPU or pinned host memory).
        fanouts: ``{edge_type: [fanout per hop]}`` for every edge type of
            ``layout`` (-1: all neighbours, 0: none), all of one length.
        replace: sample with replacement.
        device: where sampling runs and outputs live.
        edge_weight: ``[E]`` float32 weight of each CSC position (PyG's
            ``weight_attr``), or None: uniform.
        method: the sampling kernels (``kernels.sample.sample_neighbors``).
        subgraph_type: PyG's: ``"directional"`` (the sampled edges),
            ``"bidirectional"`` (each also in reverse:
            ``HeteroSamplerOutput.to_bidirectional``, PyG's own; no
            ``e_id``) or ``"induced"`` (every edge of every type between
            the sampled nodes, ``kernels.subgraph.induced_edges`` over the
            nodes' segments); no per-hop counts but for the first.
    """

    def __init__(self, layout: HeteroLayout, graph: CSCGraph, fanouts: dict, replace: bool = False,
                 device="cuda", edge_weight: torch.Tensor | None = None, method: str = "auto",
                 subgraph_type: str = "directional"):
        self.layout, self.graph = layout, graph
        self.subgraph_type = check_subgraph_type(subgraph_type)
        self.device = torch.device(device)
        self.replace = bool(replace)
        self.num_hops = len(next(iter(fanouts.values()))) if fanouts else 0
        self.classes = [self._within_kernel(layout.hop_classes(fanouts, hop, self.device))
                        for hop in range(self.num_hops)]
        self._offsets = torch.tensor(layout.node_offset, dtype=torch.int64, device=self.device)
        self._edge_offsets = torch.tensor(layout.edge_offset, dtype=torch.int64, device=self.device)
        self._kernel = dict(method=method)
        if edge_weight is not None:
            self._kernel["edge_weight"] = edge_weight
        self._id_map = None
        # every edge type into each node type (the induced subgraph reads them all)
        self._every_type = layout.hop_classes({e: [-1] for e in layout.edge_types}, 0, self.device)[0] \
            if layout.edge_types else None

    def _within_kernel(self, classes: list[HopClass]) -> list[HopClass]:
        """Fanouts past the kernels' ``MAX_FANOUT`` as -1 where no segment
        is that long (``within_kernel_fanouts``)."""
        return [HopClass(within_kernel_fanouts([c.fanout], self.graph, self.replace)[0], c.segments)
                if c.fanout > MAX_FANOUT else c for c in classes]

    @property
    def num_launches(self) -> int:
        """Sampling launches a batch takes (one per hop and distinct fanout)."""
        return sum(len(c) for c in self.classes)

    def _map(self, batch_size: int) -> IdMap:
        """The batches' id map over global ids, made once (a hash map grows
        by itself where a batch needs more)."""
        if self._id_map is None:
            capacity = min(self.layout.num_nodes + batch_size, max(1 << 16, 64 * batch_size))
            self._id_map = IdMap(self.layout.num_nodes, 1, capacity, self.device)
        return self._id_map

    def _joined(self, parts: list[HopSample]) -> HopSample:
        """One hop's launches' edges as one ``HopSample`` (their valid
        prefixes packed end to end on the device, no sync)."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            none = torch.empty(0, dtype=torch.int64, device=self.device)
            return HopSample(none, none, none, torch.zeros(1, dtype=torch.int64, device=self.device))
        bound = sum(p.src.numel() for p in parts)
        counts = [p.num_edges for p in parts]
        src, dst, eid = (torch.empty(bound, dtype=torch.int64, device=self.device) for _ in range(3))
        num_edges = pack_prefixes([p.src for p in parts], counts, src)
        pack_prefixes([p.dst for p in parts], counts, dst)
        pack_prefixes([p.eid for p in parts], counts, eid)
        return HopSample(src, dst, eid, num_edges)

    @on_device_of("self")
    def sample(self, seeds: torch.Tensor, generator: torch.Generator | None = None, validate: bool = True,
               seed_time: torch.Tensor | None = None) -> HeteroSamplerOutput:
        """Sample around ``seeds`` (``[B]`` int64 global ids on ``device``,
        of one node type; checked unless ``validate=False``): PyG's
        ``HeteroSamplerOutput`` (``split_by_type``)."""
        if seed_time is not None:
            raise NotImplementedError("temporal sampling of a HeteroData is not supported yet")
        if validate:
            check_ids_in_range(seeds, self.layout.num_nodes, "seeds")
        out = self.sample_global(seeds, generator)
        if self.subgraph_type == "induced":
            row, col, edge = self._induced(out.node)
            out = self.split_by_type(SamplerOutput(node=out.node, row=row, col=col, edge=edge,
                                                   num_sampled_nodes=out.num_sampled_nodes,
                                                   num_sampled_edges=[row.numel()]))
            out.num_sampled_nodes = out.num_sampled_edges = None
            return out
        out = self.split_by_type(out)
        return out.to_bidirectional() if self.subgraph_type == "bidirectional" else out

    def _induced(self, nodes: torch.Tensor):
        """Every edge between ``nodes`` (global ids, local order), all types:
        ``(row, col, global edge id)``, grouped by target."""
        n = nodes.numel()
        local = torch.arange(n, device=self.device)
        count = torch.full((1,), n, dtype=torch.int64, device=self.device)
        segments, owner, _ = self.layout.expand(nodes, local, count, self._every_type, self._offsets)
        row, col, pos = induced_edges(self.graph.indptr, self.graph.indices, nodes, self._map(n), True,
                                      rows=segments, row_owner=owner)
        return row, col, to_edge_ids(pos, self.graph.edge_perm)

    def sample_global(self, seeds: torch.Tensor, generator: torch.Generator | None = None) -> SamplerOutput:
        """``sample``'s batch before its split: a homogeneous ``SamplerOutput``
        over global ids, ``node`` in hop order (seeds first), ``row``/``col``
        local, ``edge`` global edge ids, and the per-hop counts."""
        graph, layout = self.graph, self.layout
        rng = draw_seeds(self.num_launches, generator).to(self.device) if use_triton(self.device) else None
        id_map = self._map(seeds.numel())
        frontier_local = id_map.start(seeds)
        frontier = seeds
        num_frontier = torch.full((1,), seeds.numel(), dtype=torch.int64, device=self.device)
        hops, launch = [], 0
        for hop, classes in enumerate(self.classes):
            last = hop == self.num_hops - 1
            parts = []
            for hop_class in classes:
                segments, local, count = layout.expand(frontier, frontier_local, num_frontier, hop_class,
                                                       self._offsets)
                parts.append(sample_neighbors(
                    graph.indptr, graph.indices, segments, local, count, hop_class.fanout, self.replace,
                    generator, True, seed=None if rng is None else rng[launch:launch + 1], **self._kernel))
                launch += 1
            edges = self._joined(parts)
            mapped = id_map.insert(edges.src, edges.num_edges, last=last)
            hops.append((edges, mapped))
            if last:
                break
            frontier, frontier_local, num_frontier = mapped.new_nodes, mapped.new_local, mapped.num_new
            keep = min(frontier.numel(), layout.num_nodes)  # never more new nodes than nodes
            if keep > _SYNC_ABOVE:
                keep = int(num_frontier.item())  # the real frontier (a sync)
            frontier, frontier_local = frontier[:keep], frontier_local[:keep]
        sizes = host_list(hop_sizes(hops)) if hops else []
        return batch_output(seeds, hops, sizes, self.device, True, graph.edge_perm)

    def split_by_type(self, out: SamplerOutput) -> HeteroSamplerOutput:
        """``out`` (``sample``'s) as PyG's ``HeteroSamplerOutput``: per node
        type ``node`` (local ids of the type, hop order) and
        ``num_sampled_nodes`` (L + 1 counts), per edge type ``row``/``col``
        (indices into its source's / target's nodes), ``edge`` (its own edge
        ids) and ``num_sampled_edges`` (L counts); one host sync."""
        layout, device = self.layout, self.device
        num_types, num_edge_types = len(layout.node_types), len(layout.edge_types)
        node_counts, edge_counts = out.num_sampled_nodes, out.num_sampled_edges
        node_hops, edge_hops = len(node_counts), len(edge_counts)
        node_type = layout.node_type_of(out.node, self._offsets)
        edge_type = torch.bucketize(out.edge, self._edge_offsets[1:], right=True)
        node_hop = torch.repeat_interleave(torch.arange(node_hops, device=device),
                                           torch.tensor(node_counts, device=device), output_size=out.node.numel())
        edge_hop = torch.repeat_interleave(torch.arange(edge_hops, device=device),
                                           torch.tensor(edge_counts, dtype=torch.int64, device=device),
                                           output_size=out.edge.numel())
        counts = host_list(torch.cat([
            torch.bincount(node_type * node_hops + node_hop, minlength=num_types * node_hops),
            torch.bincount(edge_type * edge_hops + edge_hop, minlength=num_edge_types * edge_hops)]))
        per_type = [counts[t * node_hops:(t + 1) * node_hops] for t in range(num_types)]
        at = num_types * node_hops
        per_edge_type = [counts[at + e * edge_hops:at + (e + 1) * edge_hops] for e in range(num_edge_types)]

        # each node's index among its type's nodes (a stable sort keeps hop order)
        order = torch.argsort(node_type, stable=True)
        totals = [sum(c) for c in per_type]
        starts = torch.tensor([0] + totals[:-1], dtype=torch.int64, device=device).cumsum(0)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(order.numel(), device=device) - starts.index_select(0, node_type[order])
        nodes = (out.node.index_select(0, order) - self._offsets.index_select(0, node_type[order])).split(totals)
        edge_order = torch.argsort(edge_type, stable=True)
        edge_totals = [sum(c) for c in per_edge_type]
        rows = rank.index_select(0, out.row.index_select(0, edge_order)).split(edge_totals)
        cols = rank.index_select(0, out.col.index_select(0, edge_order)).split(edge_totals)
        edges = (out.edge.index_select(0, edge_order)
                 - self._edge_offsets.index_select(0, edge_type[edge_order])).split(edge_totals)
        return HeteroSamplerOutput(
            node=dict(zip(layout.node_types, nodes)),
            row=dict(zip(layout.edge_types, rows)), col=dict(zip(layout.edge_types, cols)),
            edge=dict(zip(layout.edge_types, edges)),
            num_sampled_nodes=dict(zip(layout.node_types, per_type)),
            num_sampled_edges=dict(zip(layout.edge_types, per_edge_type)))
