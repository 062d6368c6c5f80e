"""``LinkNeighborLoader``'s own arguments checked as PyG 2.8's ``LinkLoader``
reads them: the supervision edges (``edge_label_index``, the graph's edges
by default), their labels (shifted by one where ``"binary"`` negatives take
label 0) and their times (``edge_label_time``, with ``time_attr``)."""
from __future__ import annotations

import torch

from ..kernels._launch import check_ids_in_range
from .arguments import index_tensor
from .temporal import check_input_time


def check_link_time(edge_label_time, time_attr) -> None:
    """PyG's pairing rule of ``edge_label_time`` and ``time_attr``: both or
    neither (PyG's ValueError and message)."""
    if (edge_label_time is not None) != (time_attr is not None):
        raise ValueError(f"Received conflicting 'edge_label_time' and 'time_attr' arguments: 'edge_label_time' "
                         f"is {'set' if edge_label_time is not None else 'not set'} while 'time_attr' is "
                         f"{'set' if time_attr is not None else 'not set'}. Both arguments must be provided for "
                         f"temporal sampling.")


def check_edge_label_time(edge_label_time, num_edges: int, dtype: torch.dtype, device) -> torch.Tensor | None:
    """``edge_label_time`` as ``[P]`` times in the time attribute's ``dtype``
    on ``device`` (integers, or floats where ``dtype`` is floating; a new
    tensor, the caller's is never written), or None."""
    if edge_label_time is None:
        return None
    return check_input_time(edge_label_time, dtype, num_edges, name="edge_label_time",
                            per="edge of edge_label_index").to(device)


def check_edge_label_index(edge_label_index, data, device) -> torch.Tensor:
    """The supervision edges as a ``[2, P]`` int64 tensor on ``device`` (a
    copy: the caller's tensor is never written): ``data.edge_index`` where
    None; a tensor, numpy array or nested list of node ids in range."""
    if edge_label_index is None:
        edge_label_index = data.edge_index
    elif isinstance(edge_label_index, tuple) and edge_label_index and isinstance(edge_label_index[0], (str, tuple)):
        raise NotImplementedError("edge_label_index with an edge type (heterogeneous graphs) is not supported yet")
    tensor = index_tensor(edge_label_index, "edge_label_index")
    if tensor is None:
        raise TypeError(f"edge_label_index must be a [2, num_edges] tensor of node ids or None, "
                        f"got {type(edge_label_index).__name__}")
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise TypeError(f"edge_label_index must hold integer node ids, got dtype {tensor.dtype}")
    if tensor.dim() != 2 or tensor.size(0) != 2:
        raise ValueError(f"edge_label_index must have shape [2, num_edges], got {tuple(tensor.shape)}")
    tensor = tensor.to(device=device, dtype=torch.int64, copy=True)
    if tensor.numel():
        check_ids_in_range(tensor.reshape(-1), data.num_nodes, "edge_label_index")
    return tensor


def check_edge_label(edge_label, num_edges: int, neg_sampling, device) -> torch.Tensor | None:
    """The supervision edges' labels on ``device`` as PyG uses them:
    ``[P, ...]``; with ``"binary"`` negatives and a smallest label of 0,
    shifted by one (0 is the negatives' label); refused with ``"triplet"``."""
    if edge_label is None:
        return None
    if neg_sampling is not None and neg_sampling.is_triplet():
        raise ValueError("edge_label must be None for 'triplet' negative sampling: a batch's src_index, "
                         "dst_pos_index and dst_neg_index tell positives from negatives")
    label = index_tensor(edge_label, "edge_label")
    if label is None:
        raise TypeError(f"edge_label must be a tensor of one label per edge of edge_label_index or None, "
                        f"got {type(edge_label).__name__}")
    if label.dim() == 0 or label.size(0) != num_edges:
        raise ValueError(f"edge_label must have {num_edges} rows (one per edge of edge_label_index), "
                         f"got shape {tuple(label.shape)}")
    label = label.to(device)
    if neg_sampling is not None and neg_sampling.is_binary() and label.numel() and label.min() == 0:
        label = label + 1  # (a new tensor: the caller's is not written)
    return label


def endpoints_per_edge(neg_sampling) -> float:
    """Endpoints a supervision edge brings to its batch (its two ends and
    its negatives'): what the loader's sizing takes as seeds per edge."""
    if neg_sampling is None:
        return 2.0
    if neg_sampling.is_triplet():
        return 2.0 + neg_sampling.amount
    return 2.0 * (1 + neg_sampling.amount)
