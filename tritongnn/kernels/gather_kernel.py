"""The row gather's kernel and its launch shapes (``kernels.gather``).

``_gather_kernel`` copies rows ``out[i] = tier[id]`` from up to three tiers
(GPU copy, slot-mapped caches, a host table through UVA), visiting
positions in a given order and, with ``bounds``, only a part of it read on
the device. ``gather.gather_rows`` picks the passes and their orders; this
module holds what one pass is: the kernel, its block shapes and its grid.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._launch import interpreted_block, next_power_of_2


@triton.jit(do_not_specialize=["n", "num_hot", "num_blocks"])
def _gather_kernel(
    hot,        # [num_hot, D] rows of the GPU tier
    cold,       # [N, D] rows of the other tier (indexed by the same ids)
    dynamic,    # [K, D] rows of the dynamic cache (TIERS == 3)
    slot,       # [N - num_hot] int32 row of `dynamic` holding a cold row, or -1
    previous,   # [P, D] rows of the previous batch (REUSE)
    prev_slot,  # [>= N - num_hot] int32 row of `previous` holding a cold row, or -1
    ids,        # [n] int64 row ids (IDS_SORTED: in visiting order)
    row_map,    # [N] int64 row of `cold` holding id i (MAPPED)
    order,      # [n] int64 visiting order (if ORDERED), e.g. argsort of the rows read
    bounds,     # [2] int64 [begin, end) of the visiting order this launch covers (BOUNDED)
    out,        # [n, D] output, row i = table[ids[i]]
    n,
    num_hot,
    num_blocks,  # cdiv(n, BLOCK_ROWS) (BOUNDED: computed from bounds)
    D: tl.constexpr,  # row width in elements (one compile per width)
    stride_hot, stride_cold, stride_dyn, stride_prev, stride_out,  # row strides in elements
    TIERS: tl.constexpr,  # 1: every row from `cold`; 2: split at num_hot; 3: and `dynamic`
    REUSE: tl.constexpr,  # cold rows found in `previous` are read there (TIERS >= 2)
    MAPPED: tl.constexpr,  # `cold` is in other ids: id i is its row row_map[i]
    ORDERED: tl.constexpr,
    BOUNDED: tl.constexpr,  # visit positions [bounds[0], bounds[1]) of `order` only
    IDS_SORTED: tl.constexpr,  # `ids` come in visiting order (ids[j] is written to out[order[j]])
    BLOCK_ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    begin = 0
    end = n
    if BOUNDED:  # read on the device: the split needs no host sync
        begin = tl.load(bounds)
        end = tl.load(bounds + 1)
        num_blocks = tl.cdiv(end - begin, BLOCK_ROWS)
    # Persistent over row blocks: with a grid smaller than the block count,
    # the programs walk the (sorted) rows side by side.
    # (a while loop: Triton's interpreter cannot range() over a runtime int)
    block = tl.program_id(0).to(tl.int64)
    while block < num_blocks:
        i_v = begin + block * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # positions in the visiting order
        m_r = i_v < end
        i_r = i_v  # rows of `out`
        if ORDERED:
            i_r = tl.load(order + i_v, mask=m_r, other=0)
        if IDS_SORTED:  # independent of the load of `order`: both in flight at once
            b_id = tl.load(ids + i_v, mask=m_r, other=0)
        else:
            b_id = tl.load(ids + i_r, mask=m_r, other=0)
        m_hot = m_r & (b_id < num_hot)
        m_cold = m_r & (b_id >= num_hot)
        if TIERS == 3:
            b_slot = tl.load(slot + (b_id - num_hot), mask=m_cold, other=-1).to(tl.int64)
            m_dyn = m_cold & (b_slot >= 0)
            m_cold = m_cold & (b_slot < 0)
            p_dyn = dynamic + b_slot[:, None] * stride_dyn
        if REUSE:
            b_prev = tl.load(prev_slot + (b_id - num_hot), mask=m_cold, other=-1).to(tl.int64)
            m_prev = m_cold & (b_prev >= 0)
            m_cold = m_cold & (b_prev < 0)
            p_prev = previous + b_prev[:, None] * stride_prev
        p_hot = hot + b_id[:, None] * stride_hot
        if MAPPED:
            b_row_id = tl.load(row_map + b_id, mask=m_r if TIERS == 1 else m_cold, other=0)
        else:
            b_row_id = b_id
        p_cold = cold + b_row_id[:, None] * stride_cold
        p_out = out + i_r[:, None] * stride_out
        # every tier's rows in out's dtype (a no-op where they share it; else
        # stored features widened, e.g. float16 rows into float32 batches)
        OUT_TY = out.dtype.element_ty
        for d0 in range(0, D, BLOCK_D):
            o_d = d0 + tl.arange(0, BLOCK_D)
            m_d = o_d[None, :] < D
            if TIERS == 1:
                b_row = tl.load(p_cold + o_d[None, :], mask=m_r[:, None] & m_d, other=0).to(OUT_TY)
            else:
                b_hot = tl.load(p_hot + o_d[None, :], mask=m_hot[:, None] & m_d, other=0).to(OUT_TY)
                b_cold = tl.load(p_cold + o_d[None, :], mask=m_cold[:, None] & m_d, other=0).to(OUT_TY)
                # a select, not a sum: -0.0 and NaN payloads come out bit for bit
                b_row = tl.where(m_hot[:, None], b_hot, b_cold)
                if TIERS == 3:
                    b_dyn = tl.load(p_dyn + o_d[None, :], mask=m_dyn[:, None] & m_d, other=0).to(OUT_TY)
                    b_row = tl.where(m_dyn[:, None], b_dyn, b_row)
                if REUSE:
                    b_re = tl.load(p_prev + o_d[None, :], mask=m_prev[:, None] & m_d, other=0).to(OUT_TY)
                    b_row = tl.where(m_prev[:, None], b_re, b_row)
            tl.store(p_out + o_d[None, :], b_row, mask=m_r[:, None] & m_d)
        block += tl.num_programs(0)


def _launch_settings(row_bytes: int, elem: int, from_host: bool) -> tuple[int, int, int]:
    """BLOCK_ROWS, BLOCK_D, num_warps (measured on the H200 for 128 x 4-byte
    rows; see ``kernels.gather``'s docstring)."""
    block_d = min(next_power_of_2(max(row_bytes // elem, 1)), 4096 // elem)  # <= 4 KB of a row
    rows = (8192 if from_host else 4096) // (block_d * elem)  # 16 or 32 rows of 512 bytes
    return interpreted_block(max(1, min(64, rows)), 256), block_d, 4


# A pass reading the host runs a persistent grid of one program per this
# many multiprocessors (``kernels.gather``'s docstring: a quarter of the SMs beat a full
# grid on sparse ids and tied on dense ones, measured alone on the GPU).
UVA_SMS_PER_PROGRAM = 4


# A pass from GPU memory whose length the device holds (``count``, or a
# split of the sorted order) runs a persistent grid of this many programs
# per multiprocessor: its ids are sized by a bound (a replayed batch's
# ``node`` buffer: 7.3x10^6 slots at papers100M scale for ~3x10^6 nodes),
# and a grid over the bound spent ~0.3 ms a batch launching blocks that
# exit at once (1.09 against 0.78 ms of gather kernel a batch, profiled).
# Measured on the H200 (bench/bench_gather_bounded.py, 3x10^6 of 7.3x10^6
# ids): exact launch 0.750 ms, grid over the bound 1.077, 8 an SM 0.782
# (16 and 32: 0.79; 4: 0.96; 2: 1.50); within 4-5 % of the exact launch at
# 10^6 ids and at the whole bound too.
BOUNDED_PROGRAMS_PER_SM = 8


def _num_programs(n: int, block_rows: int, from_host: bool, device: torch.device, bounded: bool = False) -> int:
    blocks = triton.cdiv(n, block_rows)
    if device.type != "cuda":
        return blocks
    if from_host:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        return max(1, min(blocks, sms // UVA_SMS_PER_PROGRAM))
    if not bounded:  # a grid over its blocks
        return blocks
    return max(1, min(blocks, torch.cuda.get_device_properties(device).multi_processor_count * BOUNDED_PROGRAMS_PER_SM))
