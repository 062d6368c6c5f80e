"""The random draws every sampling kernel shares (``kernels.sample``).

Philox words keyed by (seed, a node's position in its sub-batch), Floyd's
subset draw one node a lane or on a ``[nodes x fanout]`` tile, i.i.d. draws
with replacement, and each frontier node's sub-batch, seed and Philox
position. Every kernel that samples a hop (``sample_foundation``,
``sample_grouped``, ``sample_fused``) draws through these, so all of them
return the same edges for the same seed, bit for bit.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _below(b_bits, n):
    # (32 random bits * n) >> 32 is uniform in [0, n) up to a bias of n / 2^32,
    # far below what any test of a real degree can see; no modulo, no loop.
    return (b_bits.to(tl.uint32, bitcast=True).to(tl.int64) * n) >> 32


@triton.jit
def _quad(seed, b_draw, q, FANOUT: tl.constexpr):
    """Words ``4q .. 4q + 3`` of a node's draws: one Philox evaluation (10
    rounds) at counter ``b_draw * ceil(FANOUT / 4) + q``, all four words."""
    return tl.randint4x(seed, b_draw * ((FANOUT + 3) // 4) + q)


@triton.jit
def _lane_words(seed, b_draw, FANOUT: tl.constexpr):
    """The random words of each node's draws, a tuple of ``[BN]`` uint32
    (at least ``FANOUT``): word ``j`` is word ``j % 4`` of ``_quad`` ``j //
    4``. ``tl.randint`` would evaluate Philox once a word and keep one of
    its four (at fanout 10: 10 evaluations a node against 3 here)."""
    b_words = ()
    for q in tl.static_range((FANOUT + 3) // 4):
        b_words = b_words + _quad(seed, b_draw, q, FANOUT)
    return b_words


@triton.jit
def _word(seed, b_draw, j, FANOUT: tl.constexpr):
    """Word ``j`` of ``_lane_words`` alone (``j`` a runtime scalar or a
    tile of draw indices): its ``_quad``, one of four words kept."""
    b_r0, b_r1, b_r2, b_r3 = _quad(seed, b_draw, j // 4, FANOUT)
    c = j % 4
    return tl.where(c == 0, b_r0, tl.where(c == 1, b_r1, tl.where(c == 2, b_r2, b_r3)))


@triton.jit
def _floyd_lanes(seed, b_draw, b_deg, FANOUT: tl.constexpr):
    """Floyd's subset draw for a vector of nodes, one node a lane: a tuple
    of ``FANOUT`` ``[BN]`` positions, the ``s``-th from step ``s`` (draw t in
    ``[0, deg - FANOUT + s]``; take it, or the top if already taken). Each
    node's steps compare its own earlier picks in its own lane: no
    cross-lane reduction, no layout change a step (``FANOUT <= 32``,
    unrolled). Meaningful for nodes of degree > FANOUT."""
    b_words = _lane_words(seed, b_draw, FANOUT)
    b_taken = ()
    for s in tl.static_range(FANOUT):
        b_top = b_deg - FANOUT + s  # [BN]
        b_t = _below(b_words[s], b_top + 1)
        b_seen = b_t != b_t  # all False
        for r in tl.static_range(s):
            b_seen = b_seen | (b_taken[r] == b_t)
        b_taken = b_taken + (tl.where(b_seen, b_top, b_t),)
    return b_taken


@triton.jit
def _floyd_step(seed, b_draw, b_deg, b_chosen, o_j, s, FANOUT: tl.constexpr):
    """Step ``s`` of Floyd's subset draw for a tile of nodes: draw t in
    ``[0, deg - FANOUT + s]``; take it, or the top if already taken."""
    b_top = b_deg - FANOUT + s  # [BN]
    b_t = _below(_word(seed, b_draw, s, FANOUT), b_top + 1)
    b_seen = tl.sum((b_chosen == b_t[:, None]).to(tl.int32), axis=1) > 0
    b_new = tl.where(b_seen, b_top, b_t)
    return tl.where(o_j[None, :] == s, b_new[:, None], b_chosen)


@triton.jit
def _draw_positions(seed, b_draw, b_deg, m_n, FANOUT: tl.constexpr, FANOUT_PAD: tl.constexpr,
                    REPLACE: tl.constexpr, PER_NODE_SEED: tl.constexpr, BLOCK_NODES: tl.constexpr):
    """Row positions drawn for a tile of nodes: ``[BN, FP]`` picks and the
    ``[BN]`` count of those that are edges. ``seed`` is the launch's Philox
    seed, or with ``PER_NODE_SEED`` a ``[BN]`` seed per node (its sub-batch's);
    draw ``j`` of a node takes word ``j`` of ``_lane_words`` at its
    ``b_draw`` (its position in its batch's frontier), so every kernel
    calling this draws the same positions for the same (seed, position),
    whatever its tile shape or node order."""
    o_j = tl.arange(0, FANOUT_PAD)  # [FP]
    if REPLACE:
        if FANOUT <= 32:  # each node's words in its lane, placed in the tile
            b_words = _lane_words(seed, b_draw, FANOUT)
            b_pick = tl.zeros([BLOCK_NODES, FANOUT_PAD], tl.int64)
            for s in tl.static_range(FANOUT):
                b_pick = tl.where(o_j[None, :] == s, _below(b_words[s], b_deg)[:, None], b_pick)
        else:
            if PER_NODE_SEED:
                seed = tl.broadcast_to(seed[:, None], (BLOCK_NODES, FANOUT_PAD))
            b_pick = _below(_word(seed, b_draw[:, None], o_j[None, :], FANOUT), b_deg[:, None])  # [BN, FP]
        b_count = tl.where(b_deg > 0, FANOUT, 0)
    else:
        b_full = b_deg <= FANOUT
        b_chosen = tl.full([BLOCK_NODES, FANOUT_PAD], -1, tl.int64)
        if tl.max((m_n & ~b_full).to(tl.int32), axis=0) > 0:  # a tile of full nodes draws nothing
            # Floyd's algorithm, all nodes of the tile in lock step: for the
            # usual fanouts unrolled, each node's steps in its own lane, then
            # placed in the tile (on an H200 the foundation hop 1.11-1.19x
            # faster on the large graph than with each step on the tile); a
            # loop on the tile past 32 steps (unrolling hundreds takes
            # minutes to compile)
            if FANOUT <= 32:
                b_taken = _floyd_lanes(seed, b_draw, b_deg, FANOUT)
                for s in tl.static_range(FANOUT):
                    b_chosen = tl.where(o_j[None, :] == s, b_taken[s][:, None], b_chosen)
            else:
                for s in range(FANOUT):
                    b_chosen = _floyd_step(seed, b_draw, b_deg, b_chosen, o_j, s, FANOUT)
        b_pick = tl.where(b_full[:, None], o_j[None, :], b_chosen)
        b_count = tl.minimum(b_deg, FANOUT)
    return b_pick, b_count


@triton.jit
def _node_streams(seed, frontier_batch, batch_ptr, i_n, m_n, HAS_BATCH: tl.constexpr):
    """``(b_batch, b_seed, b_draw)`` of frontier positions ``i_n``: each
    node's sub-batch, Philox seed and position in the Philox stream. In a
    super-batch a node draws from its sub-batch's seed, counting from the
    sub-batch's first node, so it draws what it draws in its batch sampled
    alone; one batch: ``seed[0]`` and ``i_n`` (``b_batch`` is then ``i_n``,
    unused)."""
    if HAS_BATCH:
        b_batch = tl.load(frontier_batch + i_n, mask=m_n, other=0)
        b_seed = tl.load(seed + b_batch, mask=m_n, other=0)
        b_draw = i_n - tl.load(batch_ptr + b_batch, mask=m_n, other=0)
    else:
        b_batch = i_n
        b_seed = tl.load(seed)
        b_draw = i_n
    return b_batch, b_seed, b_draw


@triton.jit
def _write_edges(out_src, out_dst, out_eid, out_batch, b_src, b_pos, b_count, m_e,
                 b_end,    # [BN] int64 inclusive end of each node's output edges
                 b_dst,    # [BN] int64 its local id (the target written)
                 b_batch,  # [BN] int64 its sub-batch (written with HAS_BATCH)
                 FANOUT_PAD: tl.constexpr, WRITE_EID: tl.constexpr, HAS_BATCH: tl.constexpr,
                 BLOCK_NODES: tl.constexpr):
    """Store a block of nodes' picked edges at their output slots (every sampler kernel's write)."""
    o_j = tl.arange(0, FANOUT_PAD)  # [FP]
    o_out = (b_end - b_count)[:, None] + o_j[None, :]  # [BN, FP] output slot
    tl.store(out_src + o_out, b_src, mask=m_e)
    tl.store(out_dst + o_out, tl.broadcast_to(b_dst[:, None], (BLOCK_NODES, FANOUT_PAD)), mask=m_e)
    if WRITE_EID:
        tl.store(out_eid + o_out, b_pos, mask=m_e)
    if HAS_BATCH:
        tl.store(out_batch + o_out, tl.broadcast_to(b_batch[:, None], (BLOCK_NODES, FANOUT_PAD)), mask=m_e)
