"""``tritongnn.LinkNeighborLoader``: a drop-in for ``torch_geometric.loader.LinkNeighborLoader``.

Batches of supervision edges (``edge_label_index``, the graph's edges by
default) with PyG 2.8's layout: the subgraph sampled around both ends of
every edge and of its negatives, ``n_id`` (the distinct endpoints first),
``edge_index``, ``e_id`` where ``NeighborLoader`` gives it,
``num_sampled_nodes`` / ``num_sampled_edges``, ``input_id`` (the edges'
positions in ``edge_label_index``) and, in local ids, ``edge_label_index``
with ``edge_label`` (no negatives, or ``"binary"``) or ``src_index``,
``dst_pos_index``, ``dst_neg_index`` (``"triplet"``): ``sampling.link``.

It is ``NeighborLoader`` with another schedule: the same placement, tiers
and caches (built and profiled around the supervision edges' endpoints),
the same gather, assembly and producer thread; each batch's negatives are
drawn on the device, its endpoints deduplicated by the sampler's id map
(``NeighborSampler.sample_endpoints``) and its labels laid out from their
local ids. Batches are built, not replayed from CUDA graphs (a batch's
distinct endpoints vary in number), and sampled one at a time
(``super_batch=1``).

Temporal batches (``edge_label_time`` with ``time_attr``) are disjoint, as
PyG's: every endpoint and negative a seed of its positive's time
(``sampling.link``), no neighbour later than it (``sampling.temporal``).
"""
from __future__ import annotations

from .._checks import check_positive_int
from ..sampling.link import LinkBatches, cast_neg_sampling
from . import arguments
from .call import check_index
from .link_arguments import (check_edge_label, check_edge_label_index, check_edge_label_time, check_link_time,
                             endpoints_per_edge)
from .neighbor_loader import NeighborLoader
from .schedule import Schedule, pass_batches
from .shard import SeedShards
from .temporal import check_temporal


class LinkSchedule(Schedule):
    """``Schedule`` whose batches are supervision edges: a batch's input ids
    are positions in ``edge_label_index``; it is sampled around their
    endpoints and negatives (``LinkBatches``), temporal where
    ``edge_label_time`` is given (``[P]``, in the time attribute's dtype)."""

    def __init__(self, *, src, dst, edge_label, links: LinkBatches, edge_label_time=None, **kwargs):
        super().__init__(seeds=src, **kwargs)
        self.src, self.dst, self.edge_label, self.links = src, dst, edge_label, links
        self.edge_label_time = edge_label_time

    def sampled(self, batches):
        for input_id in batches:
            start = self.times.mark()
            time = None if self.edge_label_time is None else self.edge_label_time.index_select(0, input_id)
            label = None if self.edge_label is None else self.edge_label.index_select(0, input_id)
            out = self.links.sample(self.sampler, self.src.index_select(0, input_id),
                                    self.dst.index_select(0, input_id), input_id, label, self.generator, time,
                                    validate=False)
            yield input_id, out, start, self.times.mark(), 1.0


class LinkNeighborLoader(NeighborLoader):
    """A GPU drop-in for ``torch_geometric.loader.LinkNeighborLoader``
    (homogeneous graphs).

    Args:
        data, num_neighbors, replace, subgraph_type, weight_attr, transform:
            as for ``NeighborLoader`` (and PyG).
        edge_label_index: ``[2, P]`` supervision edges (node ids); None: every
            edge of ``data``.
        edge_label: ``[P, ...]`` their labels, or None. With ``"binary"``
            negatives, labels whose smallest is 0 are shifted by one (0
            marks negatives, as PyG); without any, batches carry
            ``edge_label`` of ones (float) then zeros.
        neg_sampling: PyG's ``NegativeSampling`` (or a dict or mode string):
            ``"binary"``, ``ceil(P * amount)`` random pairs labelled 0;
            ``"triplet"``, ``amount`` random destinations per source; drawn
            uniformly, or by its ``src_weight`` / ``dst_weight``, on the
            device, not checked against the graph's edges (as PyG).
        neg_sampling_ratio: PyG's older spelling of ``"binary"`` negatives.
        batch_size: supervision edges per batch; ``shuffle``, ``drop_last``:
            over them.
        disjoint: every endpoint (both ends of each edge, each negative) its
            own subgraph, PyG's layout: the endpoints first in order,
            ``batch`` their positive's slot, label indices ``arange``.
        edge_label_time, time_attr, temporal_strategy: PyG's temporal
            link batches, both or neither: ``edge_label_time`` ``[P]`` the
            supervision edges' times, ``time_attr`` a node- or edge-level
            attribute of times; always disjoint, each endpoint (and
            negative) a seed of its edge's time, no neighbour (node time)
            or edge (edge time) later than it, ``"uniform"`` among those or
            the ``"last"``; node-level time also keeps negatives no later
            (``sampling.link.draw_not_later``). Batches carry
            ``edge_label_time`` (``seed_time`` with ``"triplet"``).
        **kwargs: ``NeighborLoader``'s settings for memory and speed
            (``device``, ``placement``, ``cache_budget``, ``dynamic_cache``,
            ``warm_budget``, ``reuse``, ``reorder_group``, ``feature_dtype``,
            ``prefetch``, ``rank`` / ``world_size``, ``seed``, ...), and PyG's
            remaining arguments as there. ``super_batch`` must be 1.

    Example:
        >>> loader = LinkNeighborLoader(data, [10, 10], edge_label_index=train_edges,
        ...                             neg_sampling="binary", batch_size=256, shuffle=True)
        >>> for batch in loader:
        ...     h = model(batch.x, batch.edge_index)
        ...     score = (h[batch.edge_label_index[0]] * h[batch.edge_label_index[1]]).sum(-1)
    """

    _timed_seeds = True  # (edge_label_time: edge-level time needs no input_time)

    def __init__(self, data, num_neighbors, edge_label_index=None, edge_label=None, edge_label_time=None,
                 replace: bool = False, subgraph_type="directional", disjoint: bool = False,
                 temporal_strategy: str = "uniform", neg_sampling=None, neg_sampling_ratio=None,
                 time_attr=None, weight_attr=None, transform=None, *, batch_size: int = 1,
                 shuffle: bool = False, drop_last: bool = False, super_batch: int = 1, **kwargs):
        check_link_time(edge_label_time, time_attr)
        if super_batch != 1:
            raise NotImplementedError(f"tritongnn.LinkNeighborLoader does not support super_batch={super_batch!r} "
                                      f"yet (link batches are sampled one at a time)")
        data = arguments.check_data(data)
        neg_sampling = cast_neg_sampling(neg_sampling, neg_sampling_ratio)
        label_index = check_edge_label_index(edge_label_index, data, "cpu")
        label = check_edge_label(edge_label, label_index.size(1), neg_sampling, "cpu")
        times = check_temporal(data, time_attr, None, temporal_strategy, weight_attr, 0, arguments.num_edges(data),
                               timed_seeds=True)  # (super() checks it again, before its build)
        label_time = None if times is None else \
            check_edge_label_time(edge_label_time, label_index.size(1), times.time.dtype, "cpu")
        # the tiers are built (and a cache profiled) around the supervision
        # edges' ends, in batches of the endpoints a batch brings
        ends = label_index.reshape(-1).unique() if label_index.numel() else None
        check_positive_int("batch_size", batch_size)  # (before it sizes the tiers' batches)
        super().__init__(data, num_neighbors, ends, replace=replace, subgraph_type=subgraph_type, disjoint=disjoint,
                         temporal_strategy=temporal_strategy, time_attr=time_attr, weight_attr=weight_attr,
                         transform=transform,
                         batch_size=max(1, int(batch_size * endpoints_per_edge(neg_sampling))), shuffle=shuffle,
                         drop_last=drop_last, **kwargs)
        self.batch_size = batch_size
        self.neg_sampling = neg_sampling
        self.edge_label_index = label_index.to(self.device)
        self.edge_label = None if label is None else label.to(self.device)
        self.num_label_edges = self.edge_label_index.size(1)
        if self.world_size > 1:  # each rank its share of the supervision edges
            self._shards = SeedShards(self.num_label_edges, self.rank, self.world_size, self.shuffle,
                                      self.drop_last, self._shards.seed)
        self.edge_label_time = None if label_time is None else label_time.to(self.device)
        node_time = None if times is None or times.node_time is None else times.node_time.to(self.device)
        links = LinkBatches(neg_sampling, data.num_nodes, self.device,
                            None if self.cache is None else self.cache.new_id, node_time=node_time)
        self.schedule = LinkSchedule(src=self.edge_label_index[0], dst=self.edge_label_index[1],
                                     edge_label=self.edge_label, links=links, edge_label_time=self.edge_label_time,
                                     sampler=self.sampler,
                                     generator=self.generator, super_batch=1, reorder=self.reorder,
                                     assembler=self.assembler)

    def __call__(self, index):
        """The batch of the supervision edges at positions ``index`` of
        ``edge_label_index``, as PyG's ``LinkLoader.__call__``; it ends the
        pass still open, as ``iter(loader)`` does."""
        positions = check_index(index, self.num_label_edges, self.device)
        self.open_pass.end()
        return self.schedule.build_one(positions)

    def _replays_batches(self) -> bool:
        return False  # (module docstring)

    def __len__(self) -> int:
        n = self.num_label_edges if self._shards is None else len(self._shards)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _epoch_batches(self):
        self.epoch += 1
        return pass_batches(self._shards, self.num_label_edges, self.epoch - 1, self.shuffle, self.generator,
                            self.batch_size, len(self), self.device)
