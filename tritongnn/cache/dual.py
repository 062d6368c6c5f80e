"""The dual cache: hot-first relabelled topology and features, their hot
prefixes in GPU memory, the rest in pinned host memory read through UVA.

Built once from a ``CachePlan``: the graph is relabelled so the plan's order
becomes ids ``0 .. N-1``; the neighbour lists of the first ``A`` nodes and the
feature rows of the first ``F`` are copied to the GPU; the full relabelled
arrays stay in pinned host memory. The sampler and the gather read a row
from the GPU copy when its id is below ``A`` (``F``), one comparison in the
kernels. Ids the user sees are mapped back through ``order``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..graph import CSCGraph, inverse_permutation
from .allocator import CachePlan
from .profile import lists_read


@dataclass
class CacheStats:
    """Hits and misses since ``reset`` (device counters; read with ``as_dict``)."""
    device: torch.device
    row_bytes: int

    def __post_init__(self):
        self.reset()

    def reset(self) -> None:
        self._hits = torch.zeros(2, dtype=torch.int64, device=self.device)  # rows, lists from the GPU
        self.batches = self._rows = self._lists = 0  # known on the host: no sync to count them

    def record(self, node: torch.Tensor, num_sampled_nodes: list[int], num_feature: int,
               num_adjacency: int) -> None:
        """Count one batch: ``node`` its internal ids in hop order. The
        neighbour lists read are those of every node but the last hop's."""
        num_expanded = lists_read(num_sampled_nodes)
        self._hits += torch.stack([(node < num_feature).sum(), (node[:num_expanded] < num_adjacency).sum()])
        self.batches += 1
        self._rows += node.numel()
        self._lists += num_expanded

    def as_dict(self) -> dict:
        rows, lists = self._rows, self._lists
        row_hits, list_hits = self._hits.tolist()
        return dict(batches=self.batches,
                    feature_hit_rate=row_hits / rows if rows else float("nan"),
                    adjacency_hit_rate=list_hits / lists if lists else float("nan"),
                    feature_rows=rows, feature_rows_from_host=rows - row_hits,
                    feature_bytes_from_host=(rows - row_hits) * self.row_bytes,
                    adjacency_lists=lists, adjacency_lists_from_host=lists - list_hits)


class DualCache:
    """Relabelled graph and features split between GPU and host memory.

    Attributes:
        plan: the ``CachePlan`` it was built from.
        order: ``[N]`` int64 on the device, internal id -> user id.
        new_id: ``[N]`` int64 on the device, user id -> internal id.
        graph: the relabelled ``CSCGraph`` (pinned host memory on a GPU).
        hot_indptr, hot_indices: GPU copies of the first ``A`` rows, or None.
        x, hot_x: relabelled features (host) and their first ``F`` rows (GPU).
        stats: ``CacheStats`` of the batches drawn so far.
    """

    def __init__(self, graph: CSCGraph, x: torch.Tensor | None, plan: CachePlan, device):
        device = torch.device(device)
        self.plan, self.device = plan, device
        num_nodes = graph.num_nodes
        if plan.order.numel() != num_nodes:
            raise ValueError(f"the cache plan orders {plan.order.numel()} nodes, the graph has {num_nodes}")
        work = device if device.type == "cuda" else graph.device  # where to relabel
        order = plan.order.to(work)
        relabelled = graph.to(work).relabel(order)
        self.order, self.new_id = order.to(device), inverse_permutation(order).to(device)
        num_adjacency, num_feature = plan.num_adjacency, plan.num_feature

        def host(t):  # the cold tier: pinned host memory under a GPU
            t = t.cpu()
            return t.pin_memory() if device.type == "cuda" else t

        if num_adjacency == num_nodes:  # every list cached: one tier, on the device
            self.graph, self.hot_indptr, self.hot_indices = relabelled.to(device), None, None
        else:
            self.graph = relabelled.pin_memory() if device.type == "cuda" else relabelled.to("cpu")
            self.hot_indptr = relabelled.indptr[:num_adjacency + 1].to(device).clone()
            self.hot_indices = relabelled.indices[:int(relabelled.indptr[num_adjacency])].to(device).clone()
        if x is None:
            self.x = self.hot_x = None
        else:
            x_new = x[order.to(x.device)].contiguous()  # where x lives: it may not fit on the GPU
            if num_feature == num_nodes:
                self.x = self.hot_x = x_new.to(device)
            else:
                self.x = host(x_new)
                self.hot_x = x_new[:num_feature].to(device).clone()
        row_bytes = 0 if x is None else x.size(1) * x.element_size()
        self.stats = CacheStats(device, row_bytes)

    @property
    def adjacency_tiers(self) -> dict:
        """Keyword arguments of the sampler for the adjacency cache."""
        if self.hot_indptr is None:
            return {}
        return dict(hot_indptr=self.hot_indptr, hot_indices=self.hot_indices)
