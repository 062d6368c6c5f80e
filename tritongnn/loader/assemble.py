"""A sampled batch turned into PyG's ``Data``: ``n_id`` through the cache's
order, ``x`` gathered through the tiers (``kernels.gather_rows``: GPU
caches, staged or reused rows, pinned host rows through UVA), the node and
edge attributes sliced, the graph attributes and PyG's bookkeeping set, the
user's ``transform`` applied; host reads counted in ``host_stats``."""
from __future__ import annotations

import torch
from torch_geometric.data import Data

from ..kernels import gather_rows
from ..kernels.aggregate import mark_sorted_by_dst
from ..sampling.link import LinkLabels
from ..sampling.outputs import edge_index_of
from ..sampling.subgraph import hop_layout
from .arguments import Attributes
from .timing import StageTimes


class Assembler:
    """Builds the ``Data`` of sampled batches from the loader's tiers.

    Args:
        x: the stored features (internal ids with a cache), or None.
        x_dtype: the dtype batches' ``x`` come out in (``data.x``'s).
        attrs: the attributes batches slice or copy (``arguments.Attributes``).
        cache: the ``DualCache``, or None; its prefixes ``num_feature`` /
            ``num_adjacency`` of rows / lists are on the GPU.
        reuse: a ``BatchReuse`` or ``GroupReuse``, or None.
        host_stats: the counters of host reads, or None.
        input_ids: what ``input_id`` reports for each seed position (a bool
            mask's node ids, as PyG), or None: the positions themselves.
        input_time: PyG's ``input_time`` on the device (``batch.seed_time``
            at the batch's positions, as PyG sets it), or None.
    """

    def __init__(self, *, x, x_dtype, attrs: Attributes, cache, reuse, host_stats, num_feature: int,
                 num_adjacency: int, transform, times: StageTimes, device: torch.device,
                 input_ids: torch.Tensor | None = None, input_time: torch.Tensor | None = None):
        self.x, self.x_dtype, self.attrs = x, x_dtype, attrs
        self.cache, self.reuse, self.host_stats = cache, reuse, host_stats
        self.num_feature, self.num_adjacency = num_feature, num_adjacency
        self.transform, self.times, self.device = transform, times, device
        self.input_ids = input_ids
        self.input_time = input_time  # PyG's input_time (on the device): batch.seed_time

    def feature_tiers(self) -> dict:
        """``gather_rows``'s static tiers of ``x``: the cache's, else none
        (with reuse, an empty one: on a CPU, x would count as one)."""
        cache = self.cache
        if cache is not None:
            return dict(hot=cache.hot_x, num_hot=self.num_feature, row_map=cache.row_map, warm=cache.warm_x)
        return {} if self.reuse is None else dict(hot=self.x[:0], num_hot=0)

    def finish(self, item, gather_stream=None) -> Data:
        """Gather and assemble one sampled batch (``item``: ``(input_id, out,
        start, sampled, share)``), counted in ``times``. With
        ``gather_stream`` (the producer's), the work runs there: the next
        batch's sampling, on the current stream, overlaps this batch's
        gather (both wait mostly on UVA reads, neither fills PCIe)."""
        _, out, *_ = item
        if gather_stream is None:
            batch, mark = self._assemble(item)
        else:
            # what the sampling stream made and the gather stream reads: the
            # ids, and the edges (row and col are one [2, E] block; counted by
            # the stats); the seeds' ids were made on the consumer's stream
            tensors = [t for t in (out.node, out.row, out.edge) if t is not None]
            if out.col._base is None or out.col._base is not out.row._base:
                tensors.append(out.col)
            gather_stream.wait_stream(torch.cuda.current_stream(self.device))
            for t in tensors:
                t.record_stream(gather_stream)  # made on this stream, read on that one
            with torch.cuda.stream(gather_stream):
                batch, mark = self._assemble(item)
        self.times.add_batch(*mark)
        return batch

    def _assemble(self, item) -> tuple[Data, tuple]:
        """The ``Data`` of ``item`` and its marks for ``StageTimes.add_batch``."""
        input_id, out, start, sampled, share = item
        gather_start = self.times.mark()
        dynamic = self.cache.dynamic if self.cache is not None else None
        reuse = self.reuse
        tiers = {}
        if self.x is not None:
            tiers = self.feature_tiers()
            if dynamic is not None:
                dynamic.before_batch()
                tiers.update(dynamic=dynamic.rows, slot=dynamic.slot)
            if reuse is not None:
                tiers.update(reuse.gather_args())
        n_id, x, rows = self.gather_nodes(out.node, tiers)
        gathered = self.times.mark()
        # edges come grouped by target, hop by hop (the sampler's order): the
        # mark spares tritongnn.nn's layers a host sync each checking it
        batch = Data(edge_index=mark_sorted_by_dst(edge_index_of(out.row, out.col)), n_id=n_id)
        if x is not None:
            batch.x = self.batch_x(x)
        if self.host_stats is not None:
            reused = None
            if reuse is not None:
                reused = reuse.served(out.node, dynamic.slot if dynamic is not None else None)
                reuse.remember(out.node, x)
            self.host_stats.record(out.node, out.col, hop_layout(out), self.num_feature,
                                   self.num_adjacency, dynamic.observe(out.node) if dynamic is not None else None,
                                   reused)
        if self.x is None or self.attrs.set_num_nodes:
            batch.num_nodes = n_id.numel()
        for key, (value, dim) in self.attrs.node.items():
            batch[key] = rows[key] if dim == 0 else value.index_select(dim, n_id)
        if out.edge is not None:  # (the loader's sampler always returns it, as PyG's does)
            batch.e_id = out.edge
            for key, (value, dim) in self.attrs.edge.items():
                batch[key] = value.index_select(dim, out.edge)
        return self.complete(batch, input_id, out), (start, sampled, gather_start, gathered, share)

    def gather_nodes(self, node: torch.Tensor, tiers: dict):
        """``n_id``, ``x`` (read through ``tiers``, ``gather_rows``'s) and the
        node attributes along dim 0 of the internal ids ``node``, each a
        tensor of its own."""
        n_id = node if self.cache is None else self.cache.order.index_select(0, node)  # (indexing parses more Python)
        x = None
        if self.x is not None:
            if self.x.dtype != self.x_dtype:  # stored narrower (feature_dtype): widened by the gather
                x = torch.empty((node.numel(), self.x.size(1)), dtype=self.x_dtype, device=self.device)
            x = gather_rows(self.x, node, x, **tiers, validate=False)  # the sampler's ids
        rows = {key: value.index_select(0, n_id) for key, (value, dim) in self.attrs.node.items() if dim == 0}
        return n_id, x, rows

    def batch_x(self, x: torch.Tensor) -> torch.Tensor:
        """A batch's gathered rows ``x`` (``[n, D]``) as its ``x``: 1-D
        again where ``data.x`` was (``Attributes.flat_x``)."""
        return x.squeeze(1) if self.attrs.flat_x else x

    def complete(self, batch: Data, input_id: torch.Tensor, out) -> Data:
        """``batch`` (its nodes' and edges' tensors set) with the graph
        attributes and PyG's bookkeeping (``input_id``, ``batch_size``,
        ``num_sampled_nodes``/``edges`` and a disjoint batch's ``batch``
        from the ``SamplerOutput``; a link batch's labels in place of
        ``batch_size``: ``sampling.link``), then
        the user's ``transform``."""
        for key, value in self.attrs.graph.items():
            batch[key] = value
        if isinstance(out.metadata, LinkLabels):  # a link batch: its supervision edges, no batch_size (PyG's)
            out.metadata.fill(batch)
        else:
            batch.input_id = input_id if self.input_ids is None else self.input_ids.index_select(0, input_id)
            batch.batch_size = input_id.numel()
            if self.input_time is not None:  # PyG's data.seed_time, set only where input_time is given
                batch.seed_time = self.input_time[input_id]
        batch.num_sampled_nodes = out.num_sampled_nodes
        batch.num_sampled_edges = out.num_sampled_edges
        if out.batch is not None:  # a disjoint batch: each node's seed slot (PyG's ``data.batch = out.batch``)
            batch.batch = out.batch
        return self.transform(batch) if self.transform is not None else batch
