"""Weighted neighbour sampling of one hop (PyG's ``weight_attr=``).

``sample.sample_neighbors(edge_weight=...)`` comes here for ``fanout >= 1``
after the classifier (``kernels.classify``): the same row bounds, output
offsets and ``order`` (full nodes first) as the uniform kernels, so a hop's
edges come out grouped by target in frontier order with the same counts,
and the id map, super-batches and the adjacency cache work unchanged. Only
which positions a random node takes depends on the weights
(``edge_weight[p]``: the weight of CSC position ``p``).

Semantics (pyg-lib's ``neighbor_kernel.cpp``, which PyG 2.8 calls):

- Without replacement, a node of ``degree <= fanout`` takes its whole row,
  zero weights included (pyg-lib's "sample the full neighbourhood" case;
  weights are not read). A node of higher degree takes ``fanout`` distinct
  positions, a weighted random sample in Efraimidis and Spirakis' sense
  (pyg-lib's own algorithm): every position gets the key ``E / w`` (``E``
  exponential, ``-log(u)``), the ``fanout`` smallest keys win. That is
  successive sampling: the first pick is position ``i`` with probability
  ``w_i / W``, each next one in proportion among those left. A zero weight
  has key +inf: it is taken only where fewer than ``fanout`` positions
  have a positive weight, to fill the count (pyg-lib takes the top
  ``fanout`` of ``log(u) / w`` whatever their value); among zero weights
  the kernel draws a uniform random order.
- With replacement, a node of degree >= 1 takes ``fanout`` i.i.d. picks,
  each ``i`` with probability ``w_i / W`` (pyg-lib: ``torch.multinomial``);
  zero weights are never picked. A row of zero total weight has no such
  distribution (pyg-lib raises; ``NeighborLoader`` refuses the graph): here
  its picks are uniform over the row, so that nothing reads out of it.
- ``fanout = -1`` takes every neighbour, weights unread (the uniform
  ``_all_kernel`` serves it).

Algorithm. Both modes read the row's weights once per pass in chunks of
``BLOCK`` positions, a ``[BN, BLOCK]`` tile of ``BN`` nodes: coalesced
loads, ``O(degree)`` work, nothing staged but a ``[BN, FP]`` state, for
rows of any length. A weighted draw cannot skip the row (unlike Floyd's
``O(fanout^2)`` uniform draw, which never reads it): every weight decides.

- Without replacement each position's key is packed with the position
  into an int64 word (the key's float32 bits high: a non-negative float
  orders as its bits; the position low), and a node keeps the ``fanout``
  smallest words seen as a set: a chunk's words below the largest kept one
  replace it, smallest first, until none is below (a tile loops while any
  of its nodes has one). That is a reservoir: the first chunk fills it, and
  past position ``m`` a chunk brings about ``fanout * BLOCK / m`` words in,
  so the work past the keys themselves is ``O(fanout log(degree))``; no
  sort of a chunk (``tl.topk``'s bitonic network costs more, and seconds a
  call under the interpreter). The kept words are read out smallest first:
  successive sampling's order, as pyg-lib's ``topk``. Zero weights pack as
  key bits ``0x7F800000`` (+inf) plus 23 random bits, so they follow every
  positive key in random order; a key past float32 (a tiny weight) is
  clamped below +inf.
- With replacement a first pass sums the row (the running prefix in
  float64, each chunk's ``tl.cumsum`` in float32), a second finds every
  target ``t_j = u_j * W`` as the number of positions whose inclusive
  prefix sum is ``<= t_j`` (the first position past ``t_j``, whose weight
  is then positive), comparing ``[BN, FP, BLOCK]`` only in chunks that hold
  a target. Both passes add the same terms in the same order, so the last
  prefix is exactly ``W``; a pick is clamped to the last positive weight
  all the same. Float64 prefixes keep a position's share exact to about
  ``BLOCK * 2^-24`` of its weight however long the row.

Random numbers: Philox (``tl.philox``) keyed by the node's seed (its
sub-batch's in a super-batch) at counter ``(j // 4, draw, stream, 0)``,
word ``j % 4``, for row position ``j`` (``stream`` 0) or target ``j``
(``stream`` 1), ``draw`` the node's position in its batch's frontier
(``sample_common._node_streams``): reproducible for a seed whatever the
launch shape, node order or super-batch, as the uniform kernels are.

Weights are read from ``edge_weight`` alone, where the graph's full arrays
are (GPU, or pinned host memory through UVA): the adjacency cache's GPU
prefix holds ids only (its budget counts index bytes), so with it a row's
ids come from the cache and its weights through UVA.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ._launch import interpreted_block
from .classify import _load_tiered
from .sample_common import _below, _node_streams, _write_edges

_EMPTY = tl.constexpr(2**63 - 1)  # the word of a lane with no position: above every key


@triton.jit
def _philox_words(seed, b_draw, b_c0, stream, PER_NODE_SEED: tl.constexpr):
    """The four Philox words at counter ``(b_c0, b_draw, stream, 0)``: ``b_c0``
    a ``[BN, Q]`` tile, ``b_draw`` ``[BN]``, ``seed`` a scalar or (with
    ``PER_NODE_SEED``) ``[BN]``."""
    b_c0 = b_c0.to(tl.uint32)
    b_c1 = tl.broadcast_to(b_draw[:, None], b_c0.shape).to(tl.uint32)
    b_zero = b_c0 * 0
    if PER_NODE_SEED:
        seed = tl.broadcast_to(seed[:, None], b_c0.shape)
    return tl.philox(seed, b_c0, b_c1, b_zero + stream, b_zero)


@triton.jit
def _row_words(seed, b_draw, lo, PER_NODE_SEED: tl.constexpr, BLOCK: tl.constexpr, BLOCK_NODES: tl.constexpr):
    """``[BN, BLOCK]`` uint32: word ``j`` of each node's row stream for the
    positions ``j = lo .. lo + BLOCK - 1`` (``lo`` a multiple of 4), one
    Philox evaluation per four positions."""
    o_q = lo // 4 + tl.arange(0, BLOCK // 4)  # [BLOCK / 4]
    b_c0 = tl.broadcast_to(o_q[None, :], (BLOCK_NODES, BLOCK // 4))
    b_r0, b_r1, b_r2, b_r3 = _philox_words(seed, b_draw, b_c0, 0, PER_NODE_SEED)
    # [BN, BLOCK / 4, 2, 2] -> [BN, BLOCK]: position 4q + 2a + b takes word 2a + b of counter q
    return tl.reshape(tl.join(tl.join(b_r0, b_r1), tl.join(b_r2, b_r3)), [BLOCK_NODES, BLOCK])


@triton.jit
def _target_words(seed, b_draw, PER_NODE_SEED: tl.constexpr, FANOUT_PAD: tl.constexpr,
                  BLOCK_NODES: tl.constexpr):
    """``[BN, FP]`` uint32: word ``j`` of each node's target stream."""
    o_j = tl.arange(0, FANOUT_PAD)
    b_c0 = tl.broadcast_to((o_j // 4)[None, :], (BLOCK_NODES, FANOUT_PAD))
    b_r0, b_r1, b_r2, b_r3 = _philox_words(seed, b_draw, b_c0, 1, PER_NODE_SEED)
    c = (o_j % 4)[None, :]
    return tl.where(c == 0, b_r0, tl.where(c == 1, b_r1, tl.where(c == 2, b_r2, b_r3)))


@triton.jit
def _smallest_keys(weight, b_start, b_deg, m_draw, seed, b_draw, PER_NODE_SEED: tl.constexpr,
                   FANOUT: tl.constexpr, FANOUT_PAD: tl.constexpr, BLOCK: tl.constexpr,
                   BLOCK_NODES: tl.constexpr):
    """``[BN, FP]`` int64 row positions of the ``FANOUT`` smallest keys ``E /
    w`` of each node of ``m_draw`` (degree > fanout), smallest first."""
    o_c = tl.arange(0, BLOCK)  # [BLOCK]
    o_j = tl.arange(0, FANOUT_PAD)  # [FP]
    # the kept words, a set: slot j < FANOUT empty as _EMPTY - j (distinct, above every word),
    # padding slots -1 (below every word: never the largest, never replaced)
    b_best = tl.where(o_j[None, :] < FANOUT, _EMPTY - o_j[None, :].to(tl.int64), -1)
    b_best = tl.broadcast_to(b_best, (BLOCK_NODES, FANOUT_PAD))
    b_worst = tl.max(b_best, axis=1)  # [BN] the largest kept word: a word below it enters
    num = tl.max(tl.where(m_draw, b_deg, 0), axis=0)  # the tile's longest row
    lo = 0
    while lo < num:
        o_pos = lo + o_c  # [BLOCK] positions in the row
        m_w = m_draw[:, None] & (o_pos[None, :] < b_deg[:, None])  # [BN, BLOCK]
        b_w = tl.load(weight + b_start[:, None] + o_pos[None, :], mask=m_w, other=0.0).to(tl.float32)
        b_bits = _row_words(seed, b_draw, lo, PER_NODE_SEED, BLOCK, BLOCK_NODES)  # [BN, BLOCK] uint32
        b_u = ((b_bits >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)  # (0, 1), 24 bits
        b_pos_w = b_w > 0
        b_key = -tl.log(b_u) / tl.where(b_pos_w, b_w, 1.0)  # exponential / weight
        b_key_bits = tl.minimum(b_key.to(tl.int32, bitcast=True), 0x7F7FFFFF)  # +inf (tiny w) -> max finite
        # zero weight: +inf's bits plus 23 random bits (a uniform order among them, after every positive key)
        b_key_bits = tl.where(b_pos_w, b_key_bits, 0x7F800000 | (b_bits & 0x7FFFFF).to(tl.int32))
        b_word = (b_key_bits.to(tl.int64) << 32) | o_pos[None, :].to(tl.int64)
        b_word = tl.where(m_w, b_word, _EMPTY)
        # a word below the worst kept replaces it, smallest first, until none is: FANOUT times
        # in the first chunk, then about FANOUT * BLOCK / (position) a chunk (reservoir odds)
        b_next = tl.min(b_word, axis=1)  # [BN]
        while tl.max((b_next < b_worst).to(tl.int32), axis=0) > 0:
            m_in = b_next < b_worst
            b_best = tl.where(m_in[:, None] & (b_best == b_worst[:, None]), b_next[:, None], b_best)
            b_word = tl.where(b_word == b_next[:, None], _EMPTY, b_word)
            b_worst = tl.max(b_best, axis=1)
            b_next = tl.min(b_word, axis=1)
        lo += BLOCK
    # the kept words in key order: successive sampling's order, as pyg-lib's topk gives
    b_best = tl.where(o_j[None, :] < FANOUT, b_best, _EMPTY)
    b_pick = tl.zeros([BLOCK_NODES, FANOUT_PAD], tl.int64)
    for s in range(FANOUT):
        b_first = tl.min(b_best, axis=1)
        b_pick = tl.where(o_j[None, :] == s, (b_first & 0xFFFFFFFF)[:, None], b_pick)
        b_best = tl.where(b_best == b_first[:, None], _EMPTY, b_best)
    return b_pick


@triton.jit
def _weighted_draws(weight, b_start, b_deg, m_draw, seed, b_draw, PER_NODE_SEED: tl.constexpr,
                    FANOUT_PAD: tl.constexpr, BLOCK: tl.constexpr, BLOCK_NODES: tl.constexpr):
    """``[BN, FP]`` int64 row positions drawn i.i.d. in proportion to weight
    for each node of ``m_draw`` (degree >= 1): inverse CDF over the row."""
    o_c = tl.arange(0, BLOCK)  # [BLOCK]
    num = tl.max(tl.where(m_draw, b_deg, 0), axis=0)
    # pass 1: the total, chunk after chunk as pass 2 adds it up, and the last positive weight
    b_total = tl.zeros([BLOCK_NODES], tl.float64)
    b_last = tl.full([BLOCK_NODES], -1, tl.int64)
    lo = 0
    while lo < num:
        o_pos = lo + o_c
        m_w = m_draw[:, None] & (o_pos[None, :] < b_deg[:, None])
        b_w = tl.load(weight + b_start[:, None] + o_pos[None, :], mask=m_w, other=0.0).to(tl.float32)
        b_total = tl.max(b_total[:, None] + tl.cumsum(b_w, axis=1).to(tl.float64), axis=1)
        b_last = tl.maximum(b_last, tl.max(tl.where(b_w > 0, o_pos[None, :], -1), axis=1).to(tl.int64))
        lo += BLOCK
    b_bits = _target_words(seed, b_draw, PER_NODE_SEED, FANOUT_PAD, BLOCK_NODES)  # [BN, FP]
    b_u = (b_bits.to(tl.float64) + 0.5) * (1.0 / 4294967296.0)  # (0, 1), 32 bits
    b_target = b_u * b_total[:, None]  # [BN, FP]
    # pass 2: a target's pick is the number of positions whose prefix sum is <= it
    b_pick = tl.zeros([BLOCK_NODES, FANOUT_PAD], tl.int64)
    b_prefix = tl.zeros([BLOCK_NODES], tl.float64)
    lo = 0
    while lo < num:
        o_pos = lo + o_c
        m_w = m_draw[:, None] & (o_pos[None, :] < b_deg[:, None])
        b_w = tl.load(weight + b_start[:, None] + o_pos[None, :], mask=m_w, other=0.0).to(tl.float32)
        b_cum = b_prefix[:, None] + tl.cumsum(b_w, axis=1).to(tl.float64)  # [BN, BLOCK] inclusive
        b_end = tl.max(b_cum, axis=1)  # [BN] the prefix after this chunk
        b_valid = tl.sum(m_w.to(tl.int64), axis=1)  # [BN]
        m_past = b_target >= b_end[:, None]  # every position of the chunk is <= the target
        b_pick += tl.where(m_past, b_valid[:, None], 0)
        m_in = m_draw[:, None] & ~m_past & (b_target >= b_prefix[:, None])  # the target falls in this chunk
        if tl.max(tl.max(m_in.to(tl.int32), axis=1), axis=0) > 0:
            m_le = (b_cum[:, None, :] <= b_target[:, :, None]) & m_w[:, None, :]  # [BN, FP, BLOCK]
            b_pick += tl.where(m_in, tl.sum(m_le.to(tl.int64), axis=2), 0)
        b_prefix = b_end
        lo += BLOCK
    b_pick = tl.minimum(b_pick, b_last[:, None])
    # a row of zero total weight: uniform over the row (the loader refuses such rows)
    b_uniform = _below(b_bits, b_deg[:, None])
    return tl.where((b_total > 0)[:, None], b_pick, b_uniform)


@triton.jit(do_not_specialize=["bound", "num_hot_edges"])
def _weighted_kernel(
    indices,         # [E] int32/int64 CSC sources, GPU or pinned host
    hot_indices,     # [num_hot_edges] GPU copy of indices[:num_hot_edges] (if TIERED)
    weight,          # [E] float32 weight of each CSC position, GPU or pinned host
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
    seed,            # [K] int64 Philox seed of each sub-batch for this hop (read on the device)
    num_hot_edges,   # CSC positions < num_hot_edges are read from hot_indices
    FANOUT: tl.constexpr,
    FANOUT_PAD: tl.constexpr,  # next power of two >= FANOUT
    BLOCK: tl.constexpr,       # row positions a chunk, a power of two >= max(FANOUT_PAD, 4)
    REPLACE: tl.constexpr,
    WRITE_EID: tl.constexpr,
    TIERED: tl.constexpr,
    HAS_BATCH: tl.constexpr,
    BLOCK_NODES: tl.constexpr,
):
    i_o = tl.program_id(0).to(tl.int64) * BLOCK_NODES + tl.arange(0, BLOCK_NODES)
    m_n = (i_o < bound) & (i_o < tl.load(num_frontier))
    i_n = tl.load(order + i_o, mask=m_n, other=0)  # [BN] frontier positions
    b_batch, b_seed, b_draw = _node_streams(seed, frontier_batch, batch_ptr, i_n, m_n, HAS_BATCH)
    b_start = tl.load(row_start + i_n, mask=m_n, other=0)
    b_deg = tl.load(degree + i_n, mask=m_n, other=0)
    b_end = tl.load(offsets + i_n, mask=m_n, other=0)
    b_dst = tl.load(frontier_local + i_n, mask=m_n, other=0)
    o_j = tl.arange(0, FANOUT_PAD)  # [FP]
    b_pick = tl.broadcast_to(o_j[None, :], (BLOCK_NODES, FANOUT_PAD)).to(tl.int64)  # a full node's row
    if REPLACE:
        m_draw = m_n & (b_deg > 0)
        b_pick = _weighted_draws(weight, b_start, b_deg, m_draw, b_seed, b_draw, HAS_BATCH, FANOUT_PAD, BLOCK,
                                 BLOCK_NODES)
        b_count = tl.where(b_deg > 0, FANOUT, 0)
    else:
        m_draw = m_n & (b_deg > FANOUT)
        if tl.max(m_draw.to(tl.int32), axis=0) > 0:  # a tile of full nodes reads no weight
            b_chosen = _smallest_keys(weight, b_start, b_deg, m_draw, b_seed, b_draw, HAS_BATCH, FANOUT,
                                      FANOUT_PAD, BLOCK, BLOCK_NODES)
            b_pick = tl.where(m_draw[:, None], b_chosen, b_pick)
        b_count = tl.minimum(b_deg, FANOUT)

    m_e = m_n[:, None] & (o_j[None, :] < b_count[:, None])  # [BN, FP]
    b_pos = b_start[:, None] + b_pick  # CSC position of the edge
    b_src = _load_tiered(hot_indices, indices, b_pos, num_hot_edges, m_e, TIERED).to(tl.int64)
    _write_edges(out_src, out_dst, out_eid, out_batch, b_src, b_pos, b_count, m_e, b_end, b_dst, b_batch,
                 FANOUT_PAD, WRITE_EID, HAS_BATCH, BLOCK_NODES)


def _launch_settings(fanout_pad: int, replace: bool) -> tuple[int, int, int]:
    """``(block, block_nodes, num_warps)``: chunks of ``block`` positions.
    Without replacement 64, ~2048 elements in the wider of the chunk's and
    the kept words' tiles; with replacement at least 4 (a
    Philox evaluation's words) and the ``[BN, FP, BLOCK]`` compare of a
    chunk holding a target near 8192 elements. Not yet tuned on a GPU: a
    tile waits for its longest row, so fewer nodes a tile may suit skewed
    degrees (``bench/loader.py --weight-attr`` measures a batch)."""
    if replace:
        block = max(4, min(64, 8192 // fanout_pad))
        block_nodes = max(1, min(32, 8192 // (fanout_pad * block)))
    else:
        block = 64
        block_nodes = max(1, min(32, 2048 // max(block, fanout_pad)))
    return block, interpreted_block(block_nodes, max(block_nodes, 64)), 4


def launch_weighted(indices, hot_indices, weight, frontier_local, classified, num_frontier, frontier_batch,
                    batch_ptr, src, dst, eid, batch, seed, num_hot_edges, fanout: int, replace: bool,
                    return_eid: bool, tiered: bool, has_batch: bool) -> None:
    """Write one hop's weighted picks into ``src``/``dst``/``eid``/``batch``
    (``bound * fanout`` slots), for ``fanout >= 1``, after the classifier
    (``classified``; its ``visit`` order where the frontier is read in
    node-id order). ``frontier_batch``/``batch_ptr``: the super-batch's
    (``has_batch``), else any tensor (unread); other arguments as
    ``sample.sample_neighbors``'."""
    bound = classified.row_start.numel()
    fanout_pad = triton.next_power_of_2(fanout)
    block, block_nodes, num_warps = _launch_settings(fanout_pad, replace)
    order = classified.order if classified.visit is None else classified.visit
    _weighted_kernel[(triton.cdiv(bound, block_nodes),)](
        indices, hot_indices, weight, frontier_local, order, classified.row_start, classified.degree,
        classified.offsets, frontier_batch, batch_ptr, num_frontier, src, dst, eid, batch, bound, seed,
        num_hot_edges, FANOUT=fanout, FANOUT_PAD=fanout_pad, BLOCK=block, REPLACE=replace,
        WRITE_EID=return_eid, TIERED=tiered, HAS_BATCH=has_batch, BLOCK_NODES=block_nodes,
        num_warps=num_warps)
