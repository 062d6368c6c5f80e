"""Neighbour aggregation over edges grouped by destination (FastGL's
memory-aware aggregation), forward and backward.

``out[d] = sum_e w_e * x[src_e]`` over the edges ``e`` of destination ``d``
(``w_e``: 1, GCN's edge weight, and/or ``1 / degree`` for a mean):
one program per destination and block of feature columns keeps the partial
sum in registers and streams the source rows of its edges, ``BLOCK_E`` at a
time, once each; the result is written once. PyG's default path writes every
message ``x[src_e]`` to an ``[E, D]`` buffer, then scatter-adds it with
atomics: two extra passes over ``E * D`` values.

The backward of the sum over destinations is the same sum over sources
(``grad_x[s] = sum_e w_e * grad_out[dst_e]``), so one kernel serves both,
with the edges grouped by destination forward and by source backward.
Partial sums accumulate in float32 whatever the feature dtype.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import reference
from ._launch import interpreted_block, next_power_of_2, use_triton


@triton.jit(do_not_specialize=["num_segments"])
def _segment_sum_kernel(
    x,          # [N, D] rows to sum
    indptr,     # [num_segments + 1] int64: segment s holds edges indptr[s] .. indptr[s + 1]
    index,      # [E] int64 row of x of each edge, grouped by segment
    weight,     # [E] float32 weight of each edge (if WEIGHTED)
    out,        # [num_segments, D]
    num_segments,
    D: tl.constexpr,
    stride_x, stride_out,
    WEIGHTED: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    segment = tl.program_id(0).to(tl.int64)
    o_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < D
    start = tl.load(indptr + segment)
    end = tl.load(indptr + segment + 1)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    e = start
    while e < end:  # a while loop: the interpreter cannot range() over loaded bounds
        o_e = e + tl.arange(0, BLOCK_E)
        m_e = o_e < end
        b_index = tl.load(index + o_e, mask=m_e, other=0)
        b_rows = tl.load(x + b_index[:, None] * stride_x + o_d[None, :],
                         mask=m_e[:, None] & m_d[None, :], other=0).to(tl.float32)
        if WEIGHTED:
            b_w = tl.load(weight + o_e, mask=m_e, other=0)
            b_rows = b_rows * b_w[:, None]
        acc += tl.sum(b_rows, axis=0)
        e += BLOCK_E
    tl.store(out + segment * stride_out + o_d, acc.to(out.dtype.element_ty), mask=m_d)


def segment_sum(x: torch.Tensor, indptr: torch.Tensor, index: torch.Tensor,
                weight: torch.Tensor | None = None) -> torch.Tensor:
    """``out[s] = sum_{e in segment s} weight[e] * x[index[e]]``.

    Args:
        x: ``[N, D]`` rows (contiguous along D).
        indptr: ``[S + 1]`` int64 segment bounds, non-decreasing.
        index: ``[E]`` int64 rows of ``x``, in ``[0, N)``, grouped by segment.
        weight: ``[E]`` float32 per-edge weights, or None (all 1).

    Returns:
        ``[S, D]`` in ``x.dtype``.
    """
    num_segments = indptr.numel() - 1
    out = torch.empty((num_segments, x.size(1)), dtype=x.dtype, device=x.device)
    if not use_triton(x.device):
        return reference.segment_sum(x, indptr, index, weight, out)
    if num_segments == 0 or x.size(1) == 0:
        return out.zero_()
    x = x.contiguous()
    block_d = min(next_power_of_2(x.size(1)), interpreted_block(128, 256))
    grid = (num_segments, triton.cdiv(x.size(1), block_d))
    _segment_sum_kernel[grid](
        x, indptr, index, weight if weight is not None else indptr, out, num_segments,
        x.size(1), x.stride(0), out.stride(0),
        WEIGHTED=weight is not None, BLOCK_E=interpreted_block(16, 128), BLOCK_D=block_d, num_warps=4)
    return out


def _grouped(key: torch.Tensor, num_segments: int):
    """Edge order grouping ``key`` (stable) and the segment bounds."""
    perm = torch.argsort(key, stable=True)
    counts = torch.bincount(key, minlength=num_segments)
    indptr = torch.zeros(num_segments + 1, dtype=torch.int64, device=key.device)
    torch.cumsum(counts, 0, out=indptr[1:])
    return perm, indptr


class _Aggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, src, dst, num_dst: int, mean: bool, edge_weight):
        perm, indptr = _grouped(dst, num_dst)
        weight = None if edge_weight is None else edge_weight.to(torch.float32)
        inverse = None
        if mean:
            degree = (indptr[1:] - indptr[:-1]).clamp(min=1).to(torch.float32)
            inverse = (1.0 / degree)[dst]
            weight = inverse if weight is None else weight * inverse
        out = segment_sum(x, indptr, src[perm], None if weight is None else weight[perm])
        ctx.save_for_backward(x, src, dst, weight, inverse)
        ctx.num_src, ctx.mean = x.size(0), mean
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, src, dst, weight, inverse = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_x = grad_weight = None
        if ctx.needs_input_grad[0]:
            perm, indptr = _grouped(src, ctx.num_src)
            grad_x = segment_sum(grad_out, indptr, dst[perm], None if weight is None else weight[perm])
        if ctx.needs_input_grad[5]:  # d out[dst_e] / d w_e = x[src_e] (/ degree for mean)
            grad_weight = (grad_out[dst].float() * x[src].float()).sum(1)
            if ctx.mean:
                grad_weight = grad_weight * inverse
        return grad_x, None, None, None, None, grad_weight


def aggregate(x: torch.Tensor, edge_index: torch.Tensor, num_dst: int, reduce: str = "sum",
              edge_weight: torch.Tensor | None = None) -> torch.Tensor:
    """Sum or mean of ``edge_weight * x[edge_index[0]]`` per destination
    ``edge_index[1]`` (PyG's ``flow="source_to_target"``), differentiable in
    ``x`` and ``edge_weight``.

    Args:
        x: ``[N_src, D]`` source features.
        edge_index: ``[2, E]`` int64, sources in row 0, destinations in row 1.
        num_dst: number of destination nodes (ids in ``[0, num_dst)``).
        reduce: ``"sum"`` (or ``"add"``) or ``"mean"`` (0 where no edge).
        edge_weight: optional ``[E]`` weight of each message (GCN's norm).

    Returns:
        ``[num_dst, D]``.
    """
    if reduce not in ("sum", "add", "mean"):
        raise ValueError(f"reduce must be 'sum', 'add' or 'mean', got {reduce!r}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [num_nodes, dim], got shape {tuple(x.shape)}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2 or edge_index.dtype != torch.int64:
        raise ValueError(f"edge_index must be a [2, E] int64 tensor, got {edge_index.dtype} "
                         f"{tuple(edge_index.shape)}")
    if edge_weight is not None and edge_weight.shape != (edge_index.size(1),):
        raise ValueError(f"edge_weight must have shape [{edge_index.size(1)}] (one per edge), "
                         f"got {tuple(edge_weight.shape)}")
    src, dst = edge_index[0], edge_index[1]
    return _Aggregate.apply(x, src, dst, int(num_dst), reduce == "mean", edge_weight)
