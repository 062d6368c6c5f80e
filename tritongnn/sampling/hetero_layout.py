"""A ``HeteroData`` graph laid out for the homogeneous kernels: one id space
for the nodes of every type, one CSC over (edge type, target) segments.

Global ids. The nodes of type ``t`` (in ``data.node_types`` order) are
``node_offset[t] + local``, the edges of type ``e`` (``data.edge_types``)
``edge_offset[e] + local``: one id map keyed by global id is the (type, id)
map of a batch, and an edge's global id says its type.

Segments. PyG samples each edge type on its own: a node of type ``t`` draws
its fanout of ``e``'s neighbours for every edge type ``e`` into ``t``. So
the CSC's "rows" are segments, one per (edge type, target):
``seg_offset[e] + target_local``, each listing the global ids of its
sources (``indices``) in input order; its ``edge_perm`` gives each CSC
position's global edge id. A hop expands every frontier node into its
segments (``expand``: a ``[F, M]`` grid of the edge types into its type,
padded with the empty segment ``num_segments``), and the unchanged
sampling kernels draw from them, the targets' local ids repeated. Edge
types whose fanouts differ in a hop are drawn by one launch per distinct
fanout (``hop_classes``; a list ``num_neighbors`` is one), never one a type.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..graph import CSCGraph

EdgeType = tuple


@dataclass(frozen=True)
class HopClass:
    """The edge types one launch of a hop samples: ``fanout`` for each, and
    ``segments`` (``[T, M]`` int64 on the device): for each node type, the
    first segment of each such edge type into it (``seg_offset``), -1 where
    it has fewer than M."""
    fanout: int
    segments: torch.Tensor


class HeteroLayout:
    """Node and edge types of a ``HeteroData``, their global id ranges and the
    segments of its CSC (module docstring).

    Args:
        node_types: PyG's ``data.node_types``; ``num_nodes``: nodes of each.
        edge_types: ``data.edge_types`` (``(src, rel, dst)``); ``num_edges``:
            edges of each.
    """

    def __init__(self, node_types: list[str], num_nodes: list[int], edge_types: list[EdgeType],
                 num_edges: list[int]):
        self.node_types = list(node_types)
        self.edge_types = [tuple(e) for e in edge_types]
        self.type_index = {t: i for i, t in enumerate(self.node_types)}
        self.edge_index_of = {e: i for i, e in enumerate(self.edge_types)}
        self.node_offset = np.concatenate([[0], np.cumsum(num_nodes, dtype=np.int64)]).tolist()
        self.edge_offset = np.concatenate([[0], np.cumsum(num_edges, dtype=np.int64)]).tolist()
        self.src_type = [self.type_index[e[0]] for e in self.edge_types]
        self.dst_type = [self.type_index[e[2]] for e in self.edge_types]
        dst_nodes = [num_nodes[t] for t in self.dst_type]
        self.seg_offset = np.concatenate([[0], np.cumsum(dst_nodes, dtype=np.int64)]).tolist()

    @classmethod
    def of(cls, data) -> "HeteroLayout":
        """The layout of a ``HeteroData`` (its types in PyG's order)."""
        node_types = list(data.node_types)
        for _, _, dst in data.edge_types:  # (PyG lists a type seen only in an edge type too)
            if dst not in node_types:
                node_types.append(dst)
        num_nodes = []
        for t in node_types:
            n = data[t].num_nodes
            if n is None:
                raise ValueError(f"data[{t!r}] has no num_nodes and no node attribute to infer it from: set "
                                 f"data[{t!r}].num_nodes")
            num_nodes.append(int(n))
        num_edges = [int(data[e].edge_index.shape[-1]) for e in data.edge_types]
        return cls(node_types, num_nodes, list(data.edge_types), num_edges)

    @property
    def num_nodes(self) -> int:
        return self.node_offset[-1]

    @property
    def num_edges(self) -> int:
        return self.edge_offset[-1]

    @property
    def num_segments(self) -> int:
        """Segments of the CSC; segment ``num_segments`` is the empty one."""
        return self.seg_offset[-1]

    def num_nodes_of(self, node_type: str) -> int:
        t = self.type_index[node_type]
        return self.node_offset[t + 1] - self.node_offset[t]

    def global_ids(self, node_type: str, local: torch.Tensor) -> torch.Tensor:
        return local + self.node_offset[self.type_index[node_type]]

    def segment_edge_index(self, edge_indices: list[torch.Tensor]) -> torch.Tensor:
        """``[2, E]`` int64 on the CPU: each edge's global source id and its
        segment, edge types end to end (column ``edge_offset[e] + j`` is edge
        ``j`` of type ``e``); the inputs are read, not modified."""
        out = torch.empty((2, self.num_edges), dtype=torch.int64)
        for e, edge_index in enumerate(edge_indices):
            lo, hi = self.edge_offset[e], self.edge_offset[e + 1]
            ei = edge_index.to("cpu")
            torch.add(ei[0].to(torch.int64), self.node_offset[self.src_type[e]], out=out[0, lo:hi])
            torch.add(ei[1].to(torch.int64), self.seg_offset[e], out=out[1, lo:hi])
        return out

    def build_csc(self, edge_indices: list[torch.Tensor], device: torch.device, pin: bool) -> CSCGraph:
        """The segment CSC (module docstring) with its ``edge_perm``: on
        ``device``, or in pinned host memory (``pin``), sorted on ``device``.
        Its ``num_nodes`` covers the segments, the empty one and the global
        node ids (the kernels check ids against it)."""
        edge_index = self.segment_edge_index(edge_indices)
        size = max(self.num_segments + 1, self.num_nodes)
        host = pin and device.type == "cuda"
        return CSCGraph.from_edge_index(edge_index, size, keep_edge_perm=True, device="cpu" if host else device,
                                        work=device, pin=host)

    def hop_classes(self, fanouts: dict[EdgeType, list[int]], hop: int, device) -> list[HopClass]:
        """The launches of hop ``hop``: one per distinct nonzero fanout among
        the edge types (``fanouts[e][hop]``), each with its segment table."""
        classes = []
        values = [fanouts[e][hop] for e in self.edge_types]
        for fanout in dict.fromkeys(v for v in values if v != 0):
            into = [[] for _ in self.node_types]
            for e, v in enumerate(values):
                if v == fanout:
                    into[self.dst_type[e]].append(self.seg_offset[e])
            width = max(1, max(len(row) for row in into))
            table = torch.full((len(self.node_types), width), -1, dtype=torch.int64)
            for t, row in enumerate(into):
                table[t, :len(row)] = torch.tensor(row, dtype=torch.int64)
            classes.append(HopClass(fanout, table.to(device)))
        return classes

    def node_type_of(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """The type index of each global id (``offsets``: ``node_offset`` on
        the ids' device); ids past the last type (a buffer's unwritten
        slots) get the last."""
        return torch.bucketize(ids, offsets[1:], right=True).clamp_(max=len(self.node_types) - 1)

    def expand(self, frontier: torch.Tensor, frontier_local: torch.Tensor, num_frontier: torch.Tensor,
               hop_class: HopClass, offsets: torch.Tensor):
        """A frontier of global node ids as the segments ``hop_class`` samples:
        ``(segments, local, count)``, node by node, each node's segments in
        edge-type order (padding: the empty segment), with no host sync."""
        node_type = self.node_type_of(frontier, offsets)
        local_in_type = frontier - offsets.index_select(0, node_type)
        base = hop_class.segments.index_select(0, node_type)  # [F, M]
        segments = torch.where(base >= 0, base + local_in_type[:, None], self.num_segments)
        width = base.size(1)
        return (segments.reshape(-1), frontier_local[:, None].expand(-1, width).reshape(-1),
                num_frontier * width)
