"""The dual cache: hot-first relabelled topology and features, their hot
prefixes in GPU memory, the rest in pinned host memory read through UVA.

Built once from a ``CachePlan``: the graph is relabelled so the plan's order
becomes ids ``0 .. N-1``; the neighbour lists of the first ``A`` nodes and the
feature rows of the first ``F`` are copied to the GPU; the full relabelled
graph stays in pinned host memory, and so do the features, in the user's ids
(a feature table can be larger than the GPU and a good part of the host: it
is not copied in the new order, the gather reads internal id ``i`` at row
``order[i]``). The sampler and the gather read a row from the GPU copy when
its id is below ``A`` (``F``), one comparison in the kernels. Ids the user
sees are mapped back through ``order``. Optionally (``warm_rows``), the rows
``F .. F + W - 1`` are also copied, in that order, to new pinned host
memory, where the gather reads them: many of a batch's misses fall there,
packed, and UVA reads cost per 64 KB page touched.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..graph import CSCGraph, inverse_permutation
from ..memory import device_free_bytes
from ..host_memory import as_pinned, pinned_empty
from ..kernels import gather_rows
from .allocator import CachePlan, prefix_share
from .dynamic import DynamicCache, DynamicCacheConfig
from .profile import AccessProfile, lists_read


def _host_table(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x`` where the host tier reads it: itself when already pinned (or on a
    CPU loader, when its rows are contiguous), else one pinned copy."""
    if device.type != "cuda":
        return x.cpu().contiguous()  # no copy when x is already both
    return as_pinned(x, device)


def _rows_per_chunk(x: torch.Tensor) -> int:
    """Rows of ``x`` in 256 MB: what a chunked copy of its rows moves at a time."""
    return max(1, (1 << 28) // max(1, x.size(1) * x.element_size()))


def _rows_on_device(x: torch.Tensor, order: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x[order]`` on ``device``, with no permuted copy where ``x`` lives:
    a host table larger than half the host must not be copied there. From
    pinned memory one UVA gather; from pageable memory in row chunks."""
    if device.type != "cuda" or x.device == device:
        return x[order.to(x.device)].to(device)
    order = order.to(device)
    if x.device.type == "cpu" and x.is_pinned() and x.is_contiguous():
        return gather_rows(x, order)
    out = torch.empty(x.shape, dtype=x.dtype, device=device)
    step = _rows_per_chunk(x)
    for begin in range(0, x.size(0), step):
        out[begin:begin + step] = x[order[begin:begin + step].to(x.device)].to(device)
    return out


def _warm_copy(x: torch.Tensor, order: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x[order]`` in new pinned host memory, gathered on ``device`` 256 MB
    at a time (``x`` is pinned: UVA reads, then a copy back)."""
    warm = pinned_empty((order.numel(), x.size(1)), x.dtype, device)
    step = _rows_per_chunk(x)
    for begin in range(0, order.numel(), step):
        warm[begin:begin + step].copy_(gather_rows(x, order[begin:begin + step]))
    return warm


def relabel_tiers(graph: CSCGraph | None, x: torch.Tensor | None, plan: CachePlan, device,
                  host_empty=None) -> tuple[CSCGraph | None, torch.Tensor | None]:
    """The graph renamed by ``plan.order`` and the features, each where the
    dual cache reads it: on ``device`` (renamed) when the plan caches all of
    it, else in host memory (pinned on a GPU), from which the cache copies
    its prefix. Features kept in host memory stay in the user's ids (the
    cache reads row ``order[i]`` for internal id ``i``): a table larger than
    the GPU is never copied in a new order, and a pinned one is not copied
    at all.

    Args:
        graph: the graph in the user's ids, or None (None comes back).
        x: ``[N, D]`` features in the user's ids, or None (None comes back).
        plan: the ``CachePlan``; ``plan.order[new] = old``.
        device: the device the cache serves.
        host_empty: ``host_empty(name, shape, dtype) -> tensor``: where to
            write the arrays that stay in host memory (``"indptr"``,
            ``"indices"``, ``"edge_perm"``, ``"x"``), e.g. a host copy
            shared by the ranks of a host
            (``tritongnn.shared_host.SharedHostArrays.empty``); default:
            fresh host memory, pinned on a GPU.

    Returns:
        ``(graph, x)``: the graph relabelled; ``x`` relabelled on ``device``
        when the plan caches every row, else in the user's ids in host memory.
    """
    device = torch.device(device)
    num_nodes = plan.order.numel()
    relabelled_graph = relabelled_x = None
    if graph is not None:
        if graph.num_nodes != num_nodes:
            raise ValueError(f"the cache plan orders {num_nodes} nodes, the graph has {graph.num_nodes}")
        # relabelled where the graph is, in chunks, into where it is read,
        # with the map from the new CSC positions to edge ids (e_id)
        keep = True
        # a host graph relabelled on the GPU where a copy of it fits twice
        # over (E-sized gathers and searches), each chunk written back
        work = device if device.type == "cuda" and graph.device.type == "cpu" and \
            2 * graph.nbytes + 48 * num_nodes <= device_free_bytes(device) else None
        if plan.num_adjacency == num_nodes:  # every list cached: one tier, on the device
            relabelled_graph = graph.relabel(plan.order, keep, device, work=work)
        elif host_empty is None:
            relabelled_graph = graph.relabel(plan.order, keep, "cpu", pin=device.type == "cuda", work=work)
        else:
            relabelled = graph.relabel(plan.order, keep, "cpu", work=work)
            arrays = [None if t is None else host_empty(name, t.shape, t.dtype).copy_(t)
                      for name, t in (("indptr", relabelled.indptr), ("indices", relabelled.indices),
                                      ("edge_perm", relabelled.edge_perm))]
            relabelled_graph = CSCGraph(*arrays, validate=False)
    if x is not None:
        if x.size(0) != num_nodes:
            raise ValueError(f"the cache plan orders {num_nodes} nodes, x has {x.size(0)} rows")
        if plan.num_feature == num_nodes:  # every row on the device, in internal ids
            relabelled_x = _rows_on_device(x, plan.order, device)
        elif host_empty is None:
            relabelled_x = _host_table(x, device)
        else:
            relabelled_x = host_empty("x", x.shape, x.dtype).copy_(x)
    return relabelled_graph, relabelled_x


@dataclass
class CacheStats:
    """Hits and misses since ``reset`` (device counters; read with ``as_dict``)."""
    device: torch.device
    row_bytes: int
    index_bytes: int = 4
    indptr_bytes: int = 8
    num_nodes: int | None = None  # a tier of this many rows or lists holds them all

    def __post_init__(self):
        self.reset()

    @classmethod
    def of(cls, graph: CSCGraph, x: torch.Tensor | None, device) -> "CacheStats":
        """Counters for reads of ``graph``'s lists and ``x``'s rows (a pick
        from a host list reads its neighbour id and, where the graph has
        one, its ``edge_perm`` entry: the edge's ``e_id``)."""
        pick_bytes = graph.indices.element_size() + (0 if graph.edge_perm is None else graph.edge_perm.element_size())
        return cls(device, 0 if x is None else x.size(1) * x.element_size(), pick_bytes,
                   graph.indptr.element_size(), graph.num_nodes)

    def reset(self) -> None:
        # on the device: rows from the static cache, rows from the dynamic
        # cache, lists from the adjacency cache, neighbour picks from host
        # lists, rows copied from the previous batch (or a group's staging
        # buffer), rows staged for a group (read from host once)
        self._counts = torch.zeros(6, dtype=torch.int64, device=self.device)
        self.batches = self._rows = self._lists = 0  # known on the host: no sync to count them
        self._all_rows = self._all_lists = 0  # hits of tiers that hold every row, every list: counted here

    def record(self, node: torch.Tensor, col: torch.Tensor, num_sampled_nodes: list[int],
               num_feature: int, num_adjacency: int, dynamic_served: torch.Tensor | None = None,
               reused: torch.Tensor | None = None) -> None:
        """Count one batch: ``node`` its internal ids in hop order, ``col``
        the local id of the node each edge was sampled for. The neighbour
        lists read are those of every node but the last hop's."""
        num_expanded = lists_read(num_sampled_nodes)
        # a tier that holds everything (no budget) hits every read: counted
        # on the host, without the kernels (at 8000 seeds of [15, 10, 5] on
        # papers100M's scale, node[col] alone reads 10^7 ids a batch)
        all_rows, all_lists = self._holds_all(num_feature), self._holds_all(num_adjacency)
        self._all_rows += node.numel() if all_rows else 0
        self._all_lists += num_expanded if all_lists else 0
        self.batches += 1
        self._rows += node.numel()
        self._lists += num_expanded
        if not self.counts_on_device(num_feature, num_adjacency, dynamic_served, reused):
            # nothing for the device to count: no torch call at all (the
            # loader's producer shares the interpreter with the training loop)
            return
        zero = node.new_zeros(())
        self._counts += torch.stack([
            zero if all_rows else (node < num_feature).sum(),
            zero if dynamic_served is None else dynamic_served,
            zero if all_lists else (node[:num_expanded] < num_adjacency).sum(),
            zero if all_lists else (node[col] >= num_adjacency).sum(),
            zero if reused is None else reused, zero])

    def _holds_all(self, num_cached: int) -> bool:
        return self.num_nodes is not None and num_cached >= self.num_nodes

    def counts_on_device(self, num_feature: int, num_adjacency: int, dynamic_served=None, reused=None) -> bool:
        """Whether ``record`` launches kernels for a batch (else it counts
        on the host alone): some tier does not hold everything."""
        return not (self._holds_all(num_feature) and self._holds_all(num_adjacency)
                    and dynamic_served is None and reused is None)

    def record_staged(self, rows: int) -> None:
        """Count ``rows`` read from host memory into a group's staging
        buffer (``GroupReuse``)."""
        self._counts[5] += rows

    def as_dict(self) -> dict:
        rows, lists = self._rows, self._lists
        static, dynamic, list_hits, host_picks, reused, staged = self._counts.tolist()
        static, list_hits = static + self._all_rows, list_hits + self._all_lists
        from_host = rows - static - dynamic - reused + staged
        lists_from_host = lists - list_hits
        feature_bytes = from_host * self.row_bytes
        # a list read from the host: its indptr pair, then the picked entries
        adjacency_bytes = lists_from_host * 2 * self.indptr_bytes + host_picks * self.index_bytes
        return dict(feature_hit_rate=(static + dynamic) / rows if rows else float("nan"),
                    static_feature_hit_rate=static / rows if rows else float("nan"),
                    dynamic_feature_hit_rate=dynamic / rows if rows else float("nan"),
                    reused_rows=reused, staged_rows=staged,
                    adjacency_hit_rate=list_hits / lists if lists else float("nan"),
                    feature_rows=rows, feature_rows_from_host=from_host,
                    feature_bytes_from_host=feature_bytes,
                    adjacency_lists=lists, adjacency_lists_from_host=lists_from_host,
                    adjacency_bytes_from_host=adjacency_bytes,
                    host_bytes=feature_bytes + adjacency_bytes)


class DualCache:
    """Relabelled graph and features split between GPU and host memory.

    Attributes:
        plan: the ``CachePlan`` it was built from.
        order: ``[N]`` int64 on the device, internal id -> user id.
        new_id: ``[N]`` int64 on the device, user id -> internal id.
        graph: the relabelled ``CSCGraph`` (pinned host memory on a GPU).
        hot_indptr, hot_indices: GPU copies of the first ``A`` rows, or None.
        hot_edge_perm: the GPU copy of ``graph.edge_perm`` for those rows
            (their edges' ids: a cache hit reads its ``e_id`` there, not
            through UVA), or None.
        x: the features in host memory, in the user's ids (``row_map``), or
            relabelled on the device when every row is cached.
        row_map: ``order`` when ``x`` is in the user's ids (the gather reads
            internal id ``i`` at ``x[row_map[i]]``), else None.
        hot_x: the first ``F`` rows in internal ids (GPU).
        warm_x: rows ``F .. F + W - 1`` in internal ids, a pinned host copy
            (``warm_rows``), or None: the rows the GPU misses most, packed,
            so that a batch's host reads share 64 KB pages.
        dynamic: the ``DynamicCache`` of rows from ``F`` on, or None.
        stats: ``CacheStats`` of the batches drawn so far.
    """

    def __init__(self, graph: CSCGraph, x: torch.Tensor | None, plan: CachePlan, device,
                 dynamic: DynamicCacheConfig | None = None, dynamic_rows: int = 0,
                 profile: AccessProfile | None = None, warm_rows: int = 0):
        graph, x = relabel_tiers(graph, x, plan, device)  # checks the plan against the graph
        self._build(graph, x, plan, device, dynamic, dynamic_rows, profile, warm_rows)

    @classmethod
    def from_relabelled(cls, graph: CSCGraph, x: torch.Tensor | None, plan: CachePlan, device,
                        dynamic: DynamicCacheConfig | None = None, dynamic_rows: int = 0,
                        profile: AccessProfile | None = None, warm_rows: int = 0) -> "DualCache":
        """The cache over a graph and features already renamed by ``plan``
        and placed as ``relabel_tiers`` places them (e.g. a host copy another
        rank of this host wrote): only the GPU tiers are built here.

        Args:
            graph, x: as ``relabel_tiers`` returns them.
            plan, device, dynamic, dynamic_rows, profile, warm_rows: as for ``DualCache``.

        Returns:
            The ``DualCache``.
        """
        num_nodes = plan.order.numel()
        if graph.num_nodes != num_nodes or (x is not None and x.size(0) != num_nodes):
            raise ValueError(f"the cache plan orders {num_nodes} nodes, the relabelled graph has "
                             f"{graph.num_nodes} and x {None if x is None else x.size(0)} rows")
        cache = cls.__new__(cls)
        cache._build(graph, x, plan, device, dynamic, dynamic_rows, profile, warm_rows)
        return cache

    def _build(self, graph: CSCGraph, x: torch.Tensor | None, plan: CachePlan, device,
               dynamic: DynamicCacheConfig | None, dynamic_rows: int, profile: AccessProfile | None,
               warm_rows: int) -> None:
        device = torch.device(device)
        self.plan, self.device = plan, device
        num_nodes = graph.num_nodes
        self.order = plan.order.to(device)
        self.new_id = inverse_permutation(self.order)
        num_adjacency, num_feature = plan.num_adjacency, plan.num_feature
        self.graph = graph
        self.hot_edge_perm = None
        if num_adjacency == num_nodes:  # one tier, on the device
            self.hot_indptr = self.hot_indices = None
        else:
            self.hot_indptr, self.hot_indices = graph.row_prefix(num_adjacency, device)
            if graph.edge_perm is not None:
                self.hot_edge_perm = graph.edge_perm[:self.hot_indices.numel()].to(device).clone()
        self.dynamic = None
        self.x = x
        self.row_map = None
        self.warm_x = None
        if x is None:
            self.hot_x = None
        elif num_feature == num_nodes:  # one tier, on the device
            self.hot_x = x
        else:
            self.row_map = self.order  # internal id -> the user's, the row of x
            self.hot_x = gather_rows(x, self.order[:num_feature]) if device.type == "cuda" \
                else x[self.order[:num_feature].to(x.device)]
            warm_rows = min(warm_rows, num_nodes - num_feature)
            if warm_rows > 0 and device.type == "cuda":  # (a CPU loader reads no host memory through UVA)
                self.warm_x = _warm_copy(x, self.order[num_feature:num_feature + warm_rows], device)
            if dynamic is not None and dynamic_rows > 0:
                prior = None
                if profile is not None and profile.num_batches:  # gathers per batch, outside the static cache
                    prior = profile.inputs.to(device)[self.order][num_feature:].double() / profile.num_batches
                self.dynamic = DynamicCache(x, num_feature, min(dynamic_rows, num_nodes - num_feature),
                                            dynamic, device, prior, row_map=self.row_map)
        self.stats = CacheStats.of(graph, x, device)

    def grow_features(self, num_feature: int, profile: AccessProfile | None = None) -> bool:
        """Cache the feature rows of the internal ids below ``num_feature``,
        more than the plan's and fewer than every row (a cache of every row
        is another layout: ``x`` relabelled on the device). The old GPU tier
        is freed before the new one is gathered from host memory, so the two
        never take memory at once. Only with ``x`` in host memory and no warm
        copy or dynamic cache (both start where the static rows end).
        False, with the cache as it was, where the GPU refuses the rows."""
        plan, num_nodes = self.plan, self.order.numel()
        if self.row_map is None or self.warm_x is not None or self.dynamic is not None:
            raise ValueError("grow_features needs x in host memory, no warm copy and no dynamic cache")
        if not plan.num_feature < num_feature < num_nodes:
            raise ValueError(f"num_feature must be in ({plan.num_feature}, {num_nodes}), got {num_feature}")
        row_bytes = self.x.size(1) * self.x.element_size()
        if self.device.type != "cuda":
            self.hot_x = self.x[self.order[:num_feature].to(self.x.device)]
        else:
            self.hot_x = None
            torch.cuda.empty_cache()  # the old tier's block, back to the card for the larger one
            try:
                self.hot_x = gather_rows(self.x, self.order[:num_feature])
            except torch.OutOfMemoryError:  # the rows the plan had, which fitted: the cache as it was
                torch.cuda.empty_cache()
                self.hot_x = gather_rows(self.x, self.order[:plan.num_feature])
                return False
        grown = (num_feature - plan.num_feature) * row_bytes
        # (on the CPU: two [N] temporaries at the GPU's fullest)
        hit_rate = plan.feature_hit_rate if profile is None else \
            prefix_share(profile.inputs.cpu()[self.order.cpu()], num_feature)
        self.plan = dataclasses.replace(plan, num_feature=num_feature, feature_bytes=plan.feature_bytes + grown,
                                        budget=plan.budget + grown, feature_hit_rate=hit_rate)
        return True

    @property
    def adjacency_tiers(self) -> dict:
        """Keyword arguments of the sampler for the adjacency cache: its
        arrays (the cached rows' edge ids too) and the plan's expected hit
        rate (which sets the visit order; NaN without a profile)."""
        if self.hot_indptr is None:
            return {}
        return dict(hot_indptr=self.hot_indptr, hot_indices=self.hot_indices, hot_edge_perm=self.hot_edge_perm,
                    adjacency_hit_rate=float(self.plan.adjacency_hit_rate))
