"""Attention aggregation over edges grouped by destination (GAT's), forward
and backward, with no per-edge tensors.

``out[d, h] = sum_e softmax_e(leaky_relu(a_src[src_e, h] + a_dst[d, h])) *
xs[src_e, h]`` over the edges ``e`` of destination ``d`` (and, with
``self_loops``, one loop ``d -> d`` in place of any existing self loop, as
PyG's ``GATConv`` adds them), per head ``h``. PyG's ``GATConv`` builds
``[E, H]`` logits, ``[E, H]`` attention, ``[E, H, C]`` messages and scatters
them (and does as much again backward); here a program takes ``SEGS``
consecutive destinations and a block of heads, streams each destination's
source rows once with an online softmax (running max and sum per head, the
partial sum rescaled as the max grows), and writes the output row and the
log of the softmax's normaliser (``lse``, ``[N_dst, H]``), which is all the
backward keeps besides its inputs.

Backward, from the same grouping, one more pass over each destination's
edges: the attention ``p_e = exp(logit_e - lse_d)`` is recomputed, then

* ``grad_xs[src_e, h] += p_e * grad_out[d, h]`` (float32 atomics, as
  ``aggregate``'s backward);
* ``grad_logit_e = p_e * (<grad_out[d, h], xs[src_e, h]> - delta[d, h])``,
  ``delta = <grad_out[d, h], out[d, h]>`` (the softmax's Jacobian, computed
  once per destination), through the leaky ReLU into ``grad_a_src[src_e]``
  (atomics) and ``grad_a_dst[d]`` (summed in registers: one store).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import reference
from ._launch import interpreted_block, next_power_of_2, on_device_of, use_triton
from .aggregate import DTYPES, _grouping, check_edge_index

_NEG = tl.constexpr(-1e30)  # the running max before any edge: finite, so exp(max - max) is never nan


@triton.jit
def _leaky_relu(v, slope):
    return tl.where(v > 0, v, v * slope)


@triton.jit(do_not_specialize=["num_segments", "num_loops"])
def _attend_kernel(
    xs,          # [N_src, H, C] source rows (contiguous)
    a_src,       # [N_src, H] float32 source halves of the logits
    a_dst,       # [N_dst, H] float32 destination halves
    indptr,      # [num_segments + 1] int64: destination d holds edges indptr[d] .. indptr[d + 1]
    index,       # [E] int64 source of each edge, grouped by destination
    out,         # [num_segments, H, C] out
    lse,         # [num_segments, H] float32 out: log of each softmax's normaliser
    num_segments, num_loops, slope,
    H: tl.constexpr, C: tl.constexpr,
    LOOPS: tl.constexpr,    # drop existing self loops, add d -> d for d < num_loops
    SEGS: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_C: tl.constexpr,
):
    o_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    o_c = tl.arange(0, BLOCK_C)
    m_h = o_h < H
    m_hc = m_h[:, None] & (o_c < C)[None, :]
    col = o_h[:, None] * C + o_c[None, :]  # [BH, BC] within a row of H * C
    for k in tl.static_range(SEGS):
        d = tl.program_id(0).to(tl.int64) * SEGS + k
        if d < num_segments:
            start = tl.load(indptr + d)
            end = tl.load(indptr + d + 1)
            b_ad = tl.load(a_dst + d * H + o_h, mask=m_h, other=0)
            b_max = tl.full([BLOCK_H], _NEG, tl.float32)
            b_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
            acc = tl.zeros([BLOCK_H, BLOCK_C], dtype=tl.float32)
            if LOOPS:
                if d < num_loops:  # the loop first: its logit starts the running max
                    b_max = _leaky_relu(tl.load(a_src + d * H + o_h, mask=m_h, other=0) + b_ad, slope)
                    b_sum += 1.0
                    acc = tl.load(xs + d * (H * C) + col, mask=m_hc, other=0).to(tl.float32)
            e = start
            while e < end:  # a while loop: the interpreter cannot range() over loaded bounds
                o_e = e + tl.arange(0, BLOCK_E)
                m_e = o_e < end
                b_src = tl.load(index + o_e, mask=m_e, other=0)
                if LOOPS:
                    m_e = m_e & (b_src != d)  # replaced by the loop above
                m_eh = m_e[:, None] & m_h[None, :]
                b_logit = _leaky_relu(tl.load(a_src + b_src[:, None] * H + o_h[None, :], mask=m_eh, other=0)
                                      + b_ad[None, :], slope)
                b_logit = tl.where(m_e[:, None], b_logit, float("-inf"))  # [BE, BH]
                b_new = tl.maximum(b_max, tl.max(b_logit, axis=0))
                b_scale = tl.exp(b_max - b_new)
                b_p = tl.exp(b_logit - b_new[None, :])  # 0 where masked
                b_sum = b_sum * b_scale + tl.sum(b_p, axis=0)
                b_rows = tl.load(xs + b_src[:, None, None] * (H * C) + col[None, :, :],
                                 mask=m_e[:, None, None] & m_hc[None, :, :], other=0).to(tl.float32)
                acc = acc * b_scale[:, None] + tl.sum(b_p[:, :, None] * b_rows, axis=0)
                b_max = b_new
                e += BLOCK_E
            some = b_sum > 0  # no edge and no loop: PyG's empty sum, 0
            acc = tl.where(some[:, None], acc / tl.where(some, b_sum, 1.0)[:, None], 0.0)
            tl.store(out + d * (H * C) + col, acc.to(out.dtype.element_ty), mask=m_hc)
            tl.store(lse + d * H + o_h, b_max + tl.log(tl.where(some, b_sum, 1.0)), mask=m_h)


@triton.jit(do_not_specialize=["num_segments", "num_loops"])
def _attend_backward_kernel(
    xs, a_src, a_dst, indptr, index, lse,   # as the forward's
    grad_out,    # [num_segments, H, C]
    delta,       # [num_segments, H] float32: <grad_out[d, h], out[d, h]>
    grad_xs,     # [N_src, H, C] float32, zeroed (atomics)
    grad_a_src,  # [N_src, H] float32, zeroed (atomics)
    grad_a_dst,  # [num_segments, H] float32 out
    num_segments, num_loops, slope,
    H: tl.constexpr, C: tl.constexpr,
    LOOPS: tl.constexpr,
    SEGS: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_C: tl.constexpr,
):
    o_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    o_c = tl.arange(0, BLOCK_C)
    m_h = o_h < H
    m_hc = m_h[:, None] & (o_c < C)[None, :]
    col = o_h[:, None] * C + o_c[None, :]
    for k in tl.static_range(SEGS):
        d = tl.program_id(0).to(tl.int64) * SEGS + k
        if d < num_segments:
            start = tl.load(indptr + d)
            end = tl.load(indptr + d + 1)
            b_ad = tl.load(a_dst + d * H + o_h, mask=m_h, other=0)
            b_lse = tl.load(lse + d * H + o_h, mask=m_h, other=0)
            b_delta = tl.load(delta + d * H + o_h, mask=m_h, other=0)
            b_grad = tl.load(grad_out + d * (H * C) + col, mask=m_hc, other=0).to(tl.float32)  # [BH, BC]
            g_ad = tl.zeros([BLOCK_H], dtype=tl.float32)
            if LOOPS:
                if d < num_loops:
                    b_pre = tl.load(a_src + d * H + o_h, mask=m_h, other=0) + b_ad
                    b_p = tl.exp(_leaky_relu(b_pre, slope) - b_lse)
                    b_row = tl.load(xs + d * (H * C) + col, mask=m_hc, other=0).to(tl.float32)
                    b_gl = b_p * (tl.sum(b_grad * b_row, axis=1) - b_delta)
                    b_gpre = tl.where(b_pre > 0, b_gl, b_gl * slope)
                    tl.atomic_add(grad_xs + d * (H * C) + col, b_p[:, None] * b_grad, mask=m_hc, sem="relaxed")
                    tl.atomic_add(grad_a_src + d * H + o_h, b_gpre, mask=m_h, sem="relaxed")
                    g_ad += tl.where(m_h, b_gpre, 0.0)
            e = start
            while e < end:
                o_e = e + tl.arange(0, BLOCK_E)
                m_e = o_e < end
                b_src = tl.load(index + o_e, mask=m_e, other=0)
                if LOOPS:
                    m_e = m_e & (b_src != d)
                m_eh = m_e[:, None] & m_h[None, :]
                b_pre = tl.load(a_src + b_src[:, None] * H + o_h[None, :], mask=m_eh, other=0) + b_ad[None, :]
                b_p = tl.where(m_eh, tl.exp(_leaky_relu(b_pre, slope) - b_lse[None, :]), 0.0)  # [BE, BH]
                m_ehc = m_e[:, None, None] & m_hc[None, :, :]
                b_rows = tl.load(xs + b_src[:, None, None] * (H * C) + col[None, :, :], mask=m_ehc,
                                 other=0).to(tl.float32)
                b_gl = b_p * (tl.sum(b_rows * b_grad[None, :, :], axis=2) - b_delta[None, :])
                b_gpre = tl.where(b_pre > 0, b_gl, b_gl * slope)
                tl.atomic_add(grad_xs + b_src[:, None, None] * (H * C) + col[None, :, :],
                              b_p[:, :, None] * b_grad[None, :, :], mask=m_ehc, sem="relaxed")
                tl.atomic_add(grad_a_src + b_src[:, None] * H + o_h[None, :], b_gpre, mask=m_eh, sem="relaxed")
                g_ad += tl.sum(b_gpre, axis=0)
                e += BLOCK_E
            tl.store(grad_a_dst + d * H + o_h, g_ad, mask=m_h)


# SEGS destinations a program, num_warps; the edge and head blocks follow
# from the head width (``_launch_settings``); not tuned on a GPU.
LAUNCH = dict(SEGS=16, TILE=2048, num_warps=4)
MAX_CHANNELS = 256  # per head: wider heads take PyG's path


def _launch_settings(heads: int, channels: int) -> dict:
    block_c = next_power_of_2(channels)
    block_h = min(next_power_of_2(heads), max(1, 128 // block_c))
    block_e = max(4, min(32, LAUNCH["TILE"] // (block_h * block_c)))
    # interpreted: 3 segments a program (the grid's last program runs past the
    # last segment) and 4 edges a block (rows of several blocks)
    return dict(SEGS=interpreted_block(LAUNCH["SEGS"], 3), BLOCK_E=interpreted_block(block_e, 4),
                BLOCK_H=block_h, BLOCK_C=block_c, num_warps=LAUNCH["num_warps"])


def _grid(num_segments: int, heads: int, settings: dict):
    return (triton.cdiv(num_segments, settings["SEGS"]), triton.cdiv(heads, settings["BLOCK_H"]))


class _Attend(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xs, a_src, a_dst, indptr, index, num_loops: int, slope: float, loops: bool):
        num_dst, (heads, channels) = a_dst.size(0), xs.shape[1:]
        out = torch.empty((num_dst, heads, channels), dtype=xs.dtype, device=xs.device)
        lse = torch.empty((num_dst, heads), dtype=torch.float32, device=xs.device)
        settings = _launch_settings(heads, channels)
        if num_dst:
            _attend_kernel[_grid(num_dst, heads, settings)](
                xs, a_src, a_dst, indptr, index, out, lse, num_dst, num_loops, slope,
                H=heads, C=channels, LOOPS=loops, **settings)
        ctx.save_for_backward(xs, a_src, a_dst, indptr, index, out, lse)
        ctx.num_loops, ctx.slope, ctx.loops, ctx.settings = num_loops, slope, loops, settings
        return out

    @staticmethod
    def backward(ctx, grad_out):
        xs, a_src, a_dst, indptr, index, out, lse = ctx.saved_tensors
        num_dst, (heads, channels) = a_dst.size(0), xs.shape[1:]
        grad_out = grad_out.contiguous()
        delta = (grad_out.float() * out.float()).sum(-1)
        grad_xs = torch.zeros(xs.shape, dtype=torch.float32, device=xs.device)
        grad_a_src = torch.zeros(a_src.shape, dtype=torch.float32, device=xs.device)
        grad_a_dst = torch.empty(a_dst.shape, dtype=torch.float32, device=xs.device)
        if num_dst:
            _attend_backward_kernel[_grid(num_dst, heads, ctx.settings)](
                xs, a_src, a_dst, indptr, index, lse, grad_out, delta, grad_xs, grad_a_src, grad_a_dst,
                num_dst, ctx.num_loops, ctx.slope, H=heads, C=channels, LOOPS=ctx.loops, **ctx.settings)
        return grad_xs.to(xs.dtype), grad_a_src, grad_a_dst, None, None, None, None, None


@on_device_of("xs")
def attend(xs: torch.Tensor, a_src: torch.Tensor, a_dst: torch.Tensor, edge_index: torch.Tensor,
           negative_slope: float = 0.2, self_loops: bool = True) -> torch.Tensor:
    """GAT's attention-weighted sum per destination and head, differentiable
    in ``xs``, ``a_src`` and ``a_dst``.

    Args:
        xs: ``[N_src, H, C]`` source rows (``lin(x)`` viewed per head).
        a_src: ``[N_src, H]`` the sources' halves of the logits
            (``(xs * att_src).sum(-1)``).
        a_dst: ``[N_dst, H]`` the destinations' halves.
        edge_index: ``[2, E]`` int64, sources in row 0, destinations in row 1.
        negative_slope: the leaky ReLU's, applied to ``a_src + a_dst``.
        self_loops: as PyG's ``add_self_loops``: existing self loops dropped,
            one loop ``i -> i`` (source ``i``'s row) for every destination
            ``i < min(N_src, N_dst)``.

    Returns:
        ``[N_dst, H, C]`` in ``xs.dtype``; 0 for a destination without edges
        (or loop).
    """
    if xs.dim() != 3 or xs.dtype not in DTYPES:
        raise ValueError(f"xs must be [N_src, heads, channels] float32, float16 or bfloat16, got "
                         f"{xs.dtype} {tuple(xs.shape)}")
    heads = xs.size(1)
    if a_src.shape != xs.shape[:2] or a_dst.dim() != 2 or a_dst.size(1) != heads:
        raise ValueError(f"a_src must be [{xs.size(0)}, {heads}] and a_dst [N_dst, {heads}], got "
                         f"{tuple(a_src.shape)} and {tuple(a_dst.shape)}")
    check_edge_index(edge_index)
    num_src, num_dst = xs.size(0), a_dst.size(0)
    num_loops = min(num_src, num_dst) if self_loops else 0
    src, dst = edge_index[0].contiguous(), edge_index[1].contiguous()
    grouping = _grouping(edge_index, src, dst, num_src, num_dst)  # also checks the ids' ranges
    if not use_triton(xs.device):
        return reference.attend(xs, a_src, a_dst, edge_index, num_dst, float(negative_slope), num_loops, self_loops)
    return _Attend.apply(xs.contiguous(), a_src.float().contiguous(), a_dst.float().contiguous(),
                         grouping.dst_indptr, grouping.by_dst(src), num_loops, float(negative_slope), self_loops)
