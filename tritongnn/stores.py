"""PyG's remote back-ends, a ``(FeatureStore, GraphStore)`` pair, read into
a ``Data`` the loader builds from like any other: the graph store's edge
index (``get_all_edge_attrs`` / ``get_edge_index``, in its COO, CSR or CSC
layout) as an ``edge_index`` in the store's edge order, the feature store's
tensors (``get_all_tensor_attrs`` / ``get_tensor``) fetched whole, once.

What PyG's loader does over such a pair, and this module keeps:

- homogeneous graphs are those whose edge attributes all have
  ``edge_type=None`` (``NeighborSampler.is_hetero``); of several (one graph
  in several layouts) the first is read, as ``GraphStore.csc`` does;
- the node count is ``max(edge_attr.size)`` (PyG's ``NeighborSampler``;
  without a size, here, the largest of the feature tensors' rows, the
  pointer's length and the largest id + 1);
- an edge's id (``e_id``) is its position in the store's own order: COO
  order, CSR order (``ptr2index`` of the row pointer), or CSC order;
- every feature-store tensor is a node attribute, indexed by the batch's
  node ids along dim 0 (``filter_custom_store``), ``num_nodes`` set: here
  one of any other length is refused by name (PyG indexes it by node ids).

Building from the store's order costs no sort where that order is grouped
by target (CSC, sorted COO: ``CSCGraph.from_edge_index`` counts and
copies); a CSR graph is sorted by target once, as ``GraphStore.csc`` does.
The COO expansion is a ``[2, E]`` int64 host temporary (16 B an edge) that
the build reads and drops."""
from __future__ import annotations

import copy

import numpy as np
import torch
from torch_geometric.data import Data, FeatureStore, GraphStore, HeteroData
from torch_geometric.data.graph_store import EdgeLayout

from .kernels._launch import check_ids_in_range


class StoreData(Data):
    """The ``Data`` read from a ``(FeatureStore, GraphStore)`` pair: every
    attribute but ``edge_index`` is a node attribute sliced along dim 0, as
    PyG's ``filter_custom_store`` indexes each feature-store tensor by the
    batch's node ids (a key with ``"index"`` or ``"edge"`` in it too)."""

    def is_node_attr(self, key: str) -> bool:
        return key not in ("edge_index", "num_nodes")

    def is_edge_attr(self, key: str) -> bool:
        return False

    def __cat_dim__(self, key: str, value, *args, **kwargs):
        return -1 if key == "edge_index" else 0


def is_store_pair(data) -> bool:
    return (isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], FeatureStore)
            and isinstance(data[1], GraphStore))


def _check_pointer(ptr: torch.Tensor, num_entries: int, name: str) -> None:
    if ptr.dim() != 1 or ptr.numel() < 1:
        raise ValueError(f"{name} must be 1-D with one entry more than the nodes, got shape {tuple(ptr.shape)}")
    if int(ptr[0]) != 0 or int(ptr[-1]) != num_entries:
        raise ValueError(f"{name} must run from 0 to the number of edges ({num_entries}), got "
                         f"{int(ptr[0])} to {int(ptr[-1])}")
    if bool((ptr[1:] < ptr[:-1]).any()):
        at = int(torch.nonzero(ptr[1:] < ptr[:-1])[0]) + 1
        raise ValueError(f"{name} must be non-decreasing; entry {at} is below entry {at - 1}")


def _expand(ptr: torch.Tensor, num_entries: int, name: str) -> torch.Tensor:
    """A CSR/CSC pointer as the id of the row/column of each entry, in order."""
    _check_pointer(ptr, num_entries, name)
    ids = torch.arange(ptr.numel() - 1, device=ptr.device)
    return ids.repeat_interleave(ptr.diff().to(torch.int64), output_size=num_entries)


def _edge_attrs(graph_store: GraphStore) -> list:
    edge_attrs = list(graph_store.get_all_edge_attrs())
    if not edge_attrs:
        raise ValueError("the graph store holds no edge index (get_all_edge_attrs() is empty)")
    return edge_attrs


def _edge_arrays(graph_store: GraphStore, attr):
    """``(attr, row, col, pointer_nodes)``: the edge attribute ``attr``
    (a copy), its COO arrays in the store's order, and the node count its
    pointer implies (None for COO)."""
    attr = copy.copy(attr)  # (PyG's Data as a graph store writes a size into the attr it reads)
    pair = graph_store.get_edge_index(attr)
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or \
            not all(isinstance(t, torch.Tensor) for t in pair):
        raise TypeError(f"the graph store's get_edge_index({attr}) must give a pair of tensors, got "
                        f"{type(pair).__name__}")
    row, col = pair
    for name, t in (("row", row), ("col", col)):
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool or t.dim() != 1:
            raise TypeError(f"the graph store's edge index ({attr.layout.value}) {name} must be a 1-D integer "
                            f"tensor, got dtype {t.dtype}, shape {tuple(t.shape)}")
    layout, pointer_nodes = EdgeLayout(attr.layout), None
    if layout == EdgeLayout.CSC:  # (row, colptr): sources by target
        pointer_nodes = col.numel() - 1
        col = _expand(col, row.numel(), "the graph store's CSC column pointer")
    elif layout == EdgeLayout.CSR:  # (rowptr, col): targets by source
        pointer_nodes = row.numel() - 1
        row = _expand(row, col.numel(), "the graph store's CSR row pointer")
    elif row.numel() != col.numel():
        raise ValueError(f"the graph store's COO edge index has {row.numel()} rows and {col.numel()} cols")
    return attr, row, col, pointer_nodes


def _rows(value) -> int | None:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else None
    return len(value) if hasattr(value, "__len__") else None


def _tensors(feature_store: FeatureStore) -> dict:
    """``{group_name: {attr_name: the whole tensor}}`` of the feature store,
    each fetched once (``get_tensor`` with ``index=None``: the whole tensor,
    as PyG's sampler reads a time attribute)."""
    out = {}
    for attr in feature_store.get_all_tensor_attrs():
        attr = copy.copy(attr)  # (PyG's loader writes the batch's index into the attrs it reads)
        attr.index = None
        for key in attr.__dataclass_fields__:  # unset fields (PyG's Data gives no group_name) as None
            if not attr.is_set(key):
                setattr(attr, key, None)
        if attr.attr_name in ("edge_index", "num_nodes"):
            raise ValueError(f"the feature store's tensor {attr.attr_name!r} would shadow the batch's own "
                             f"{attr.attr_name}: rename it")
        out.setdefault(attr.group_name, {})[attr.attr_name] = feature_store.get_tensor(attr)
    return out


def _check_rows(tensors: dict, num_nodes: int, where: str = "") -> None:
    for name, value in tensors.items():
        if not isinstance(value, (torch.Tensor, np.ndarray)) and not hasattr(value, "__len__"):
            raise TypeError(f"the feature store's {where}{name!r} must be a tensor or numpy array, got "
                            f"{type(value).__name__}")
        rows = _rows(value)
        if rows != num_nodes:
            got = "is a scalar" if rows is None else f"has {rows} rows"
            raise ValueError(f"the feature store's {where}{name!r} {got}, expected one row a node "
                             f"(num_nodes={num_nodes}): PyG's loader indexes every feature-store tensor "
                             f"by the batch's node ids")


def _num_nodes(size, pointer_nodes, ids, tensors, what: str) -> int:
    """A node count as PyG's sampler takes it from the graph store (the
    size given, else the largest pointer length, id + 1 or table), then
    the longest table's where it is longer (nodes without edges)."""
    if size is not None:
        num_nodes = int(size)
        if pointer_nodes is not None and pointer_nodes > num_nodes:
            raise ValueError(f"the graph store's pointer covers {pointer_nodes} {what}, more than its size "
                             f"{num_nodes}")
    else:
        counts = [pointer_nodes or 0] + [int(t.max()) + 1 for t in ids if t.numel()]
        num_nodes = max(counts + [r for r in map(_rows, tensors.values()) if r is not None])
    for t in ids:
        check_ids_in_range(t, num_nodes, f"the graph store's edge index ({what})")
    return max([num_nodes] + [r for r in map(_rows, tensors.values()) if r is not None])


def is_hetero_pair(data) -> bool:
    """A ``(FeatureStore, GraphStore)`` pair whose edges are typed (PyG's
    ``NeighborSampler.is_hetero``)."""
    return is_store_pair(data) and any(attr.edge_type is not None for attr in data[1].get_all_edge_attrs())


def as_hetero_data(stores) -> HeteroData:
    """The ``HeteroData`` of a ``(FeatureStore, GraphStore)`` pair with typed
    edges (neither modified), as PyG's loader reads one: each edge type's
    first edge index in the store's order (its ``e_id``), each group's
    tensors as that node type's attributes, whole, and each node type's
    ``num_nodes`` (the edge types' sizes, else ids, and its tables)."""
    feature_store, graph_store = stores
    groups = _tensors(feature_store)
    data, seen = HeteroData(), {}
    edge_attrs = _edge_attrs(graph_store)
    if any(attr.edge_type is None for attr in edge_attrs):
        typed = sorted({str(a.edge_type) for a in edge_attrs if a.edge_type is not None})
        raise ValueError(f"the graph store mixes typed edges {', '.join(typed)} and untyped ones "
                         f"(edge_type=None): give every edge index its edge type")
    for attr in edge_attrs:
        edge_type = tuple(attr.edge_type)
        if edge_type in seen:
            continue
        attr, row, col, pointer_nodes = _edge_arrays(graph_store, attr)
        seen[edge_type] = (attr, row, col, pointer_nodes)
        data[edge_type].edge_index = torch.stack([row.to(torch.int64), col.to(torch.int64)])
    node_types = list(dict.fromkeys([t for e in seen for t in (e[0], e[2])] + [g for g in groups if g is not None]))
    for node_type in node_types:
        sizes, ids, pointers = [], [], []
        for (src, _, dst), (attr, row, col, pointer_nodes) in seen.items():
            layout = EdgeLayout(attr.layout)
            for end, (t, side) in enumerate(((src, row), (dst, col))):
                if t != node_type:
                    continue
                if attr.size is not None:
                    sizes.append(int(attr.size[end]))
                ids.append(side)
                if (layout == EdgeLayout.CSR and end == 0) or (layout == EdgeLayout.CSC and end == 1):
                    pointers.append(pointer_nodes)
        tensors = groups.get(node_type, {})
        num_nodes = _num_nodes(max(sizes) if sizes else None, max(pointers) if pointers else None, ids, tensors,
                               f"{node_type!r} nodes")
        _check_rows(tensors, num_nodes, f"{node_type!r} ")
        for name, value in tensors.items():
            data[node_type][name] = value
        data[node_type].num_nodes = num_nodes
    return data


def as_data(stores) -> StoreData:
    """The ``Data`` of a ``(FeatureStore, GraphStore)`` pair (neither
    modified): ``edge_index`` in the store's edge order (so a CSC position,
    or a COO/CSR one, is the edge's id), ``num_nodes``, and each feature
    tensor whole (the store's own tensor where it hands it out: no copy).

    Raises:
        NotImplementedError: typed edges or several node types.
        ValueError / TypeError: an empty graph store, a malformed edge
            index, ids past the node count, feature tensors whose rows
            differ (the node count is the graph's size or the longest
            table's, whichever is larger).
    """
    feature_store, graph_store = stores
    edge_attrs = _edge_attrs(graph_store)
    typed = sorted({str(attr.edge_type) for attr in edge_attrs if attr.edge_type is not None})
    if typed:
        raise NotImplementedError(f"data as a (FeatureStore, GraphStore) pair with typed edges {', '.join(typed)} "
                                  f"(heterogeneous graphs) is read by NeighborLoader only so far")
    attr, row, col, pointer_nodes = _edge_arrays(graph_store, edge_attrs[0])
    groups = _tensors(feature_store)
    if len(groups) > 1:
        raise ValueError(f"the feature store holds several node types ({', '.join(sorted(map(str, groups)))}) "
                         f"over untyped edges: give each edge index its edge_type (a heterogeneous graph)")
    tensors = next(iter(groups.values()), {})
    # PyG's NeighborSampler: max(edge_attrs[0].size); feature rows past the
    # graph's size are nodes without edges (PyG's loader indexes them by node
    # id all the same): the node count is the longest table's
    num_nodes = _num_nodes(None if attr.size is None else max(int(s) for s in attr.size), pointer_nodes,
                           (row, col), tensors, "nodes")
    _check_rows(tensors, num_nodes)
    data = StoreData(edge_index=torch.stack([row.to(torch.int64), col.to(torch.int64)]), **tensors)
    data.num_nodes = num_nodes
    return data
