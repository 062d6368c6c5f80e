"""Edge ids of sampled CSC positions: ``out[i] = edge_perm[positions[i]]``.

The sampler finds each edge at a CSC position; PyG's ``e_id`` names the
column of the user's ``edge_index``. The CSC graph keeps that map,
``edge_perm`` (int32 below 2^31 edges), where the graph lives: GPU memory,
or pinned host memory read here through UVA, one 4-byte load per sampled
edge at the position where the sampler read ``indices`` (the same 32-byte
sectors' neighbourhood of a row: picks of one row share sectors). With the
adjacency cache, ``hot_edge_perm`` is its GPU copy for the cached rows, a
prefix of the CSC positions (hot-first ids): a position below
``hot_edge_perm.numel()`` is read there, so cache hits cost no PCIe read.

``count`` (a device scalar) bounds the positions mapped, for a buffer whose
valid prefix only the device knows (a batch packed inside a CUDA graph):
the call never syncs, so it can be captured. ``out`` may be ``positions``
(in place: each element is read before it is written, by the same lane).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import reference
from ._launch import check_dense_index, check_readable, interpreted_block, on_device_of, use_triton

BLOCK = interpreted_block(1024, 4096)
_PERM_DTYPES = (torch.int32, torch.int64)


@triton.jit(do_not_specialize=["num_positions", "num_hot", "num_edges"])
def _edge_ids_kernel(
    positions,      # [num_positions] int64 CSC positions
    count,          # [1] int64 valid prefix of positions (if HAS_COUNT)
    hot_perm,       # [num_hot] int32/int64 edge ids of positions < num_hot, GPU memory
    perm,           # [num_edges] int32/int64 edge ids of every position (GPU or pinned host)
    out,            # [num_positions] int64 out: edge ids
    num_positions,
    num_hot,
    num_edges,
    HAS_COUNT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    o_i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < num_positions
    if HAS_COUNT:
        m_i = m_i & (o_i < tl.load(count))
    b_pos = tl.load(positions + o_i, mask=m_i, other=0)
    # a position outside the graph reads nothing and comes out -1
    m_in = m_i & (b_pos >= 0) & (b_pos < num_edges)
    m_hot = m_in & (b_pos < num_hot)
    b_hot = tl.load(hot_perm + b_pos, mask=m_hot, other=-1).to(tl.int64)
    b_cold = tl.load(perm + b_pos, mask=m_in & (b_pos >= num_hot), other=-1).to(tl.int64)
    tl.store(out + o_i, tl.where(m_hot, b_hot, b_cold), mask=m_i)


@on_device_of("positions")
def edge_ids(positions: torch.Tensor, edge_perm: torch.Tensor, hot_edge_perm: torch.Tensor | None = None,
             count: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """The edge ids of CSC ``positions``.

    Args:
        positions: ``[P]`` int64 CSC positions, contiguous, on the device
            the call runs on; a position outside ``[0, E)`` gives -1.
        edge_perm: ``[E]`` int32 or int64, position -> edge id: on that
            device, or in pinned host memory (read through UVA).
        hot_edge_perm: ``[H]`` of ``edge_perm``'s dtype on that device, its
            first ``H`` entries (the adjacency cache's rows), or None.
        count: ``[1]`` int64 on that device: only ``positions[:count]``
            are mapped (``out`` past it is not written), or None (all).
        out: ``[P]`` int64 on that device (``positions`` itself: in place),
            or None for a new tensor.

    Returns:
        ``out``: ``[P]`` int64 edge ids.

    Example:
        >>> e_id = edge_ids(hop.eid[:num_edges], graph.edge_perm)   # graph pinned: UVA reads
    """
    check_dense_index(positions, "positions", (torch.int64,))
    check_dense_index(edge_perm, "edge_perm", _PERM_DTYPES)
    device = positions.device
    check_readable(edge_perm, device, "edge_perm")
    if hot_edge_perm is not None:
        check_dense_index(hot_edge_perm, "hot_edge_perm", (edge_perm.dtype,))
        if hot_edge_perm.device != device:
            raise ValueError(f"hot_edge_perm lives on {hot_edge_perm.device}, positions on {device}")
        if hot_edge_perm.numel() > edge_perm.numel():
            raise ValueError(f"hot_edge_perm has {hot_edge_perm.numel()} entries, more than edge_perm's "
                             f"{edge_perm.numel()}")
    if count is not None and (not isinstance(count, torch.Tensor) or count.dtype != torch.int64
                              or count.numel() != 1 or count.device != device):
        raise ValueError(f"count must be a one-element int64 tensor on {device}")
    if out is None:
        out = torch.empty_like(positions)
    elif out.dtype != torch.int64 or out.shape != positions.shape or out.device != device or \
            not out.is_contiguous():
        raise ValueError(f"out must be a contiguous int64 tensor of shape {tuple(positions.shape)} on {device}")
    if not use_triton(device):
        return reference.edge_ids(positions, edge_perm, hot_edge_perm, count, out)
    if positions.numel() == 0:
        return out
    hot = edge_perm if hot_edge_perm is None else hot_edge_perm
    num_hot = 0 if hot_edge_perm is None else hot_edge_perm.numel()
    grid = (triton.cdiv(positions.numel(), BLOCK),)
    _edge_ids_kernel[grid](positions, positions if count is None else count, hot, edge_perm, out,
                           positions.numel(), num_hot, edge_perm.numel(),
                           HAS_COUNT=count is not None, BLOCK=BLOCK)
    return out
