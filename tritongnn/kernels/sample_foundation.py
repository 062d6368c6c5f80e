"""The foundation sampler's kernels (``sample_neighbors(method="foundation")``).

``_sample_kernel`` (fanout >= 0) takes a ``[BLOCK_NODES, FANOUT_PAD]`` tile,
one node of the classifier's order per row (``kernels.classify``: full nodes
before random ones, so most tiles are all full and skip the draws). A node
with ``degree <= fanout`` copies its row; one with more neighbours draws
``fanout`` distinct positions (``sample_common._draw_positions``: Floyd's
algorithm, ``O(fanout^2)`` work however large the degree, without reading
the row) and reads each pick from memory. ``_all_kernel`` (fanout = -1)
copies whole rows, one output edge per lane. Both read the adjacency cache's
GPU copy where a row lies in it (``classify._load_tiered``).
"""
from __future__ import annotations

import triton
import triton.language as tl

from ._launch import interpreted_block
from .classify import _load_tiered
from .sample_common import _draw_positions, _node_streams, _write_edges


@triton.jit(do_not_specialize=["bound", "num_hot_edges"])
def _sample_kernel(
    indices,         # [E] int32/int64 CSC sources, GPU or pinned host
    hot_indices,     # [num_hot_edges] GPU copy of indices[:num_hot_edges] (if TIERED)
    frontier_local,  # [bound] int64 local id of each frontier node (edge target)
    order,           # [bound] int64 frontier positions, full nodes first (kernels.classify)
    row_start,       # [bound] int64 from the classifier
    degree,          # [bound] int64 from the classifier
    offsets,         # [bound] int64 inclusive end of each node's edges (frontier order)
    frontier_batch,  # [bound] int64 sub-batch of each frontier node (if HAS_BATCH)
    batch_ptr,       # [K + 1] int64 first frontier position of each sub-batch (if HAS_BATCH)
    num_frontier,    # [1] int64 device scalar
    out_src,         # [bound * fanout] int64 out: global id of the sampled neighbour
    out_dst,         # [bound * fanout] int64 out: local id of the node it was sampled for
    out_eid,         # [bound * fanout] int64 out: CSC position of the edge (if WRITE_EID)
    out_batch,       # [bound * fanout] int64 out: sub-batch of the edge (if HAS_BATCH)
    bound,
    seed,            # [K] int64 Philox seed of each sub-batch for this hop (read on the
                     # device, so a captured CUDA graph replays with fresh seeds)
    num_hot_edges,   # CSC positions < num_hot_edges are read from hot_indices
    FANOUT: tl.constexpr,
    FANOUT_PAD: tl.constexpr,  # next power of two >= FANOUT
    REPLACE: tl.constexpr,
    WRITE_EID: tl.constexpr,
    TIERED: tl.constexpr,
    HAS_BATCH: tl.constexpr,
    BLOCK_NODES: tl.constexpr,
):
    # The program's nodes are a run of the classified order: mostly all full
    # nodes (no draws) or all random ones.
    i_o = tl.program_id(0).to(tl.int64) * BLOCK_NODES + tl.arange(0, BLOCK_NODES)
    m_n = (i_o < bound) & (i_o < tl.load(num_frontier))
    i_n = tl.load(order + i_o, mask=m_n, other=0)  # [BN] frontier positions
    b_batch, b_seed, b_draw = _node_streams(seed, frontier_batch, batch_ptr, i_n, m_n, HAS_BATCH)
    b_start = tl.load(row_start + i_n, mask=m_n, other=0)
    b_deg = tl.load(degree + i_n, mask=m_n, other=0)
    b_end = tl.load(offsets + i_n, mask=m_n, other=0)
    b_dst = tl.load(frontier_local + i_n, mask=m_n, other=0)
    o_j = tl.arange(0, FANOUT_PAD)  # [FP]
    b_pick, b_count = _draw_positions(b_seed, b_draw, b_deg, m_n, FANOUT, FANOUT_PAD, REPLACE, HAS_BATCH,
                                      BLOCK_NODES)  # [BN, FP], [BN]

    m_e = m_n[:, None] & (o_j[None, :] < b_count[:, None])  # [BN, FP]
    b_pos = b_start[:, None] + b_pick  # CSC position of the edge
    b_src = _load_tiered(hot_indices, indices, b_pos, num_hot_edges, m_e, TIERED).to(tl.int64)
    _write_edges(out_src, out_dst, out_eid, out_batch, b_src, b_pos, b_count, m_e, b_end, b_dst, b_batch,
                 FANOUT_PAD, WRITE_EID, HAS_BATCH, BLOCK_NODES)


@triton.jit(do_not_specialize=["num_edges", "num_hot_edges"])
def _all_kernel(
    indices,         # [E] CSC sources
    hot_indices,     # [num_hot_edges] GPU copy of indices[:num_hot_edges] (if TIERED)
    owner,           # [num_edges] int64 frontier position owning each output edge
    frontier_local,  # [bound] int64
    row_start,       # [bound] int64
    offsets,         # [bound] int64 inclusive cumsum of count (= degree here)
    degree,          # [bound] int64
    frontier_batch,  # [bound] int64 (if HAS_BATCH)
    out_src, out_dst, out_eid,
    out_batch,       # [num_edges] int64 out (if HAS_BATCH)
    num_edges,
    num_hot_edges,
    WRITE_EID: tl.constexpr,
    TIERED: tl.constexpr,
    HAS_BATCH: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i_e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_e = i_e < num_edges
    b_node = tl.load(owner + i_e, mask=m_e, other=0)
    b_first = tl.load(offsets + b_node, mask=m_e, other=0) - tl.load(degree + b_node, mask=m_e, other=0)
    b_pos = tl.load(row_start + b_node, mask=m_e, other=0) + (i_e - b_first)
    b_src = _load_tiered(hot_indices, indices, b_pos, num_hot_edges, m_e, TIERED).to(tl.int64)
    tl.store(out_src + i_e, b_src, mask=m_e)
    tl.store(out_dst + i_e, tl.load(frontier_local + b_node, mask=m_e, other=0), mask=m_e)
    if WRITE_EID:
        tl.store(out_eid + i_e, b_pos, mask=m_e)
    if HAS_BATCH:
        tl.store(out_batch + i_e, tl.load(frontier_batch + b_node, mask=m_e, other=0), mask=m_e)


def _launch_settings(fanout_pad: int) -> tuple[int, int]:
    # ~2048 tile elements per program keeps Floyd's [BN, FP] compare in
    # registers; 4 warps. Fanout 15 -> 128 nodes per program.
    block_nodes = max(16, min(256, 2048 // fanout_pad))
    return interpreted_block(block_nodes, 256), 4
