"""One hop in one pass: classification, placement and grouped sampling fused.

``sample_neighbors(..., method="fused")``. The foundation and grouped
samplers run a hop as four launches: the degree classifier's three passes
(``kernels.classify``: row bounds and degrees written out, a multi-block
scan of the counts, the offsets and the full-first ``order`` written out)
and a sampling kernel that reads those per-node arrays back. Measured on an
H200 (``bench/results/README.md``, the sampler's floor), that costs a hop
2-4x the time of the reads any exact sampler must make: on small frontiers
the four launches' latency, on large ones the per-node arrays' round trips.

Here one program takes ``BLOCK_NODES`` consecutive frontier nodes and

1. reads their row bounds (``indptr``, or the adjacency cache's copy) and
   their counts (``min(degree, fanout)``, as the classifier's
   ``_count_and_class``), scans the counts in the block (``tl.cumsum``) and
   publishes the block's sum;
2. draws and reads its nodes' picks, which need no output place yet: one
   node a lane (``_lane_picks``): Floyd's steps compare a node's earlier
   picks in its own lane (``sample_common._floyd_lanes``) and each pick is
   read as it is drawn; past 32 draws a node (unrolling them would take
   minutes to compile), with the grouped tile's ``[nodes x fanout]`` layout
   (``sample_grouped._grouped_picks``, its rows not staged);
3. finds where its block's edges start with a *decoupled look-back*
   (Merrill and Garland's single-pass scan): it walks back over its
   predecessors' published values until one carries an inclusive prefix,
   and publishes its own. Its wait overlaps the picks' reads, issued
   before it. Blocks take their place in the chain from an atomic ticket,
   not ``program_id``, so a program only ever waits on programs already
   running (no reliance on the order the hardware starts them in). Each
   status word packs the value and its flag in one int64, written by one
   atomic exchange and read by one volatile load, so no reader sees a flag
   without its value, and nothing else is published through it: every
   atomic here is ``relaxed``. (With the default ``acq_rel`` each one
   compiles to ``MEMBAR.ALL.GPU`` before and ``CCTL.IVALL`` after: the
   inclusive publish waits for the block's own pick reads, and its
   successors with it. Relaxed, the large graph's hops 2 and 3 run at 1.54 /
   1.53x the foundation hop against 1.41 / 1.40x; ``bench/results``);
4. stores its edges through ``[nodes x fanout]`` tiles, which a warp
   stores coalesced (``_write_lanes``, ``sample_common._write_edges``),
   and, where its block holds a sub-batch's first position, that
   sub-batch's ``edge_ptr``.

Why lanes. Nsight Compute on the large graph's hop 2 (``bench/results``):
with the grouped tile, a warp issues ~4,900 instructions at 8.4 cycles
each, 2.7 warps a scheduler. Most are Floyd's steps on the ``[BN, FP]``
tile, each a reduction across 16 lanes and two layout changes. In lanes the
kernel takes 96 registers at fanout 10 (160 with the tile's steps: 5
programs an SM against 3) and 1,944 static instructions (4,416), and runs
the large graph's hops at 1.85 / 1.43 / 1.43x the foundation hop (in the
tile, its steps in lanes too: 1.57 / 1.30 / 1.29x; both with ``acq_rel``
atomics). Staging rows as the grouped kernels do takes their blocks of 16
nodes and ran the hop at 0.37-0.51x the foundation's on the large graph's
two larger hops, so the fused kernel reads every pick from memory.

The per-node arrays never leave registers, and a hop is two graph nodes
(the status words' memset and this kernel) instead of four kernels. What the
fusion gives up: the classifier's full-first ``order``, which lets tiles of
full nodes skip Floyd's draws (here every node draws; a full node's picks
are then its whole row).

Same edges, bit for bit. Node ``i`` of sub-batch ``k`` draws from
``seed[k]`` and its position within sub-batch ``k`` through the same
``_draw_positions`` as every other method, and its edges go to the same
slots (the exclusive scan of the counts in frontier order), so the output is
the foundation kernel's exactly (``tests/test_sample_grouped.py``,
``tests/test_super_batch.py``); the distribution tests carry over and are
repeated on this kernel.

``fanout = -1`` (whole rows, an output sized on the host) keeps the
classifier's path.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._launch import interpreted_block, next_power_of_2
from .classify import _count_and_class, _load_tiered, _row_bounds
from .sample_common import _below, _floyd_lanes, _lane_words, _node_streams, _write_edges
from .sample_grouped import _grouped_picks

# A status word is value << 2 | flag: 0 not published yet, 1 the block's own
# sum, 2 the sum of every block up to and including it (its inclusive prefix).
# Predecessors' words read at once by a block's look-back.
LOOK_BACK = 32
# Past this many draws a node, the picks are drawn on the grouped ``[BN, FP]``
# tile instead of one node a lane (``_lane_picks``' steps are unrolled)
MAX_LANE_FANOUT = 32


@triton.jit
def _publish_sum(status, ticket, block_sum):
    """Publish block ``ticket``'s own sum (block 0's is its inclusive prefix)."""
    tl.atomic_xchg(status + 1 + ticket, (block_sum << 2) | tl.where(ticket == 0, 2, 1), sem="relaxed")


@triton.jit
def _look_back(status, ticket, block_sum, WINDOW: tl.constexpr):
    """Exclusive prefix of block ``ticket``, whose sum is published: add
    its predecessors' published values walking back to the nearest inclusive
    prefix, publish its own prefix.

    The walk reads ``WINDOW`` predecessors' words in one load (a scalar walk
    pays one dependent load, ~1 us, per block it passes): where every word
    from the nearest prefix on is published, their values are the answer;
    with no prefix in the window, its sum is added and the walk moves one
    window back; with a word not yet published, the window is read again."""
    p_status = status + 1  # word 0 is the ticket counter
    prefix = tl.zeros((), tl.int64)
    o_w = tl.arange(0, WINDOW).to(tl.int64)
    end = ticket  # blocks [0, end) still to add
    while end > 0:
        o_b = end - WINDOW + o_w  # [W] blocks end - W .. end - 1
        # blocks before the first count as a published prefix of 0
        b_word = tl.load(p_status + o_b, mask=o_b >= 0, other=2, volatile=True)
        b_flag = b_word & 3
        nearest = tl.max(tl.where(b_flag == 2, o_b, -WINDOW - 1), axis=0)  # the nearest prefix, if any
        m_use = o_b >= nearest  # the words to add: from the nearest prefix on (all without one)
        if tl.min(tl.where(m_use, b_flag, 3), axis=0) > 0:  # all published: else read them again
            prefix += tl.sum(tl.where(m_use, b_word >> 2, 0), axis=0)
            end = tl.where(nearest >= end - WINDOW, 0, end - WINDOW)
    if ticket > 0:
        tl.atomic_xchg(p_status + ticket, ((prefix + block_sum) << 2) | 2, sem="relaxed")
    return prefix


@triton.jit
def _lane_picks(indices, hot_indices, num_hot_edges, b_start, b_deg, b_seed, b_draw, m_n, FANOUT: tl.constexpr,
                REPLACE: tl.constexpr, TIERED: tl.constexpr):
    """``_grouped_picks`` one node a lane: tuples of ``FANOUT`` ``[BN]``
    neighbour ids and CSC positions, and the ``[BN]`` counts. The same
    draws (``_floyd_lanes``, or i.i.d. with ``REPLACE``) and so the same
    edges, without the ``[BN, FP]`` tile's padding lanes."""
    if REPLACE:
        b_count = tl.where(b_deg > 0, FANOUT, 0)
        b_words = _lane_words(b_seed, b_draw, FANOUT)
    else:
        b_count = tl.minimum(b_deg, FANOUT)
        b_taken = _floyd_lanes(b_seed, b_draw, b_deg, FANOUT)
    b_srcs = ()
    b_poss = ()
    for s in tl.static_range(FANOUT):
        if REPLACE:
            b_pick = _below(b_words[s], b_deg)
        else:
            b_pick = tl.where(b_deg <= FANOUT, s, b_taken[s])
        b_pos = b_start + b_pick
        b_poss = b_poss + (b_pos,)
        b_srcs = b_srcs + (_load_tiered(hot_indices, indices, b_pos, num_hot_edges, m_n & (s < b_count), TIERED),)
    return b_srcs, b_poss, b_count


@triton.jit
def _stack_lanes(b_lanes, FANOUT: tl.constexpr, FANOUT_PAD: tl.constexpr, BLOCK_NODES: tl.constexpr):
    """``[BN, FP]`` tile of a tuple of ``FANOUT`` ``[BN]`` vectors (column
    ``s`` from vector ``s``, zeros past ``FANOUT``), by ``tl.join`` of
    halves: vector ``k`` with vector ``k + m / 2`` of the ``m`` left, so the
    first join's axis is the column's top bit and a row-major reshape puts
    every vector in its column. Each node's row stays in its lane until
    the store moves it."""
    b_cols = ()
    for s in tl.static_range(FANOUT_PAD):
        if s < FANOUT:
            b_cols = b_cols + (b_lanes[s],)
        else:
            b_cols = b_cols + (tl.zeros_like(b_lanes[0]),)
    for level in tl.static_range(FANOUT_PAD.bit_length() - 1):
        b_next = ()
        for k in tl.static_range(FANOUT_PAD >> (level + 1)):
            b_next = b_next + (tl.join(b_cols[k], b_cols[k + (FANOUT_PAD >> (level + 1))]),)
        b_cols = b_next
    return tl.reshape(b_cols[0], (BLOCK_NODES, FANOUT_PAD))


@triton.jit
def _write_lanes(out_src, out_dst, out_eid, out_batch, b_srcs, b_poss, b_count, b_end, b_dst, b_batch,
                 FANOUT: tl.constexpr, FANOUT_PAD: tl.constexpr, WRITE_EID: tl.constexpr, HAS_BATCH: tl.constexpr,
                 BLOCK_NODES: tl.constexpr):
    """Store ``_lane_picks``' edges, node ``n``'s ``s``-th at ``b_end[n] -
    b_count[n] + s``, through ``[BN, FP]`` tiles (``_stack_lanes``, then
    the grouped kernels' ``_write_edges``): the compiler moves them into a
    layout a warp stores coalesced. (Stored a lane at a time instead, a
    warp's 32 stores hit 32 rows: measured 0.78x and 0.93x the foundation
    hop on the large graph's hops 2 and 3, against 1.28x and 1.37x through
    tiles; bench/results/README.md.)"""
    b_src = _stack_lanes(b_srcs, FANOUT, FANOUT_PAD, BLOCK_NODES).to(tl.int64)
    if WRITE_EID:
        b_pos = _stack_lanes(b_poss, FANOUT, FANOUT_PAD, BLOCK_NODES)
    else:  # not stored
        b_pos = b_src
    m_e = tl.arange(0, FANOUT_PAD)[None, :] < b_count[:, None]
    _write_edges(out_src, out_dst, out_eid, out_batch, b_src, b_pos, b_count, m_e, b_end, b_dst, b_batch,
                 FANOUT_PAD, WRITE_EID, HAS_BATCH, BLOCK_NODES)


@triton.jit(do_not_specialize=["bound", "num_hot", "num_hot_edges", "num_batches"])
def _fused_kernel(
    indptr,          # [N + 1] int64 CSC pointer, GPU or pinned host
    hot_indptr,      # [num_hot + 1] int64 GPU copy of indptr[:num_hot + 1] (if TIERED)
    indices,         # [E] int32/int64 CSC sources, GPU or pinned host
    hot_indices,     # [num_hot_edges] GPU copy of indices[:num_hot_edges] (if TIERED)
    frontier,        # [bound] int64 global ids; the first num_frontier are sampled
    frontier_local,  # [bound] int64 local id of each frontier node (edge target)
    num_frontier,    # [1] int64 device scalar
    frontier_batch,  # [bound] int64 sub-batch of each frontier node (if HAS_BATCH)
    batch_ptr,       # [K + 1] int64 first frontier position of each sub-batch (if HAS_BATCH)
    seed,            # [K] int64 Philox seed of each sub-batch
    status,          # [1 + programs] int64 zeroed: the ticket counter, then one status word a block
    out_src,         # [bound * fanout] int64 out
    out_dst,         # [bound * fanout] int64 out
    out_eid,         # [bound * fanout] int64 out (if WRITE_EID)
    out_batch,       # [bound * fanout] int64 out (if HAS_BATCH)
    edge_ptr,        # [K + 1] int64 out: first output edge of each sub-batch; [K] = all edges
    bound,
    num_hot,         # rows of nodes < num_hot come from hot_indptr
    num_hot_edges,   # CSC positions < num_hot_edges come from hot_indices
    num_batches,     # K
    FANOUT: tl.constexpr,
    FANOUT_PAD: tl.constexpr,
    REPLACE: tl.constexpr,
    WRITE_EID: tl.constexpr,
    TIERED: tl.constexpr,
    HAS_BATCH: tl.constexpr,
    BLOCK_NODES: tl.constexpr,
    BLOCK_K: tl.constexpr,  # >= K + 1, a power of two
    LOOK_BACK: tl.constexpr,  # predecessors' status words read at once
    LANES: tl.constexpr,      # draw and read one node a lane (_lane_picks), else on the grouped tile
):
    ticket = tl.atomic_add(status, 1, sem="relaxed").to(tl.int64)
    first = ticket * BLOCK_NODES
    n = tl.minimum(tl.maximum(tl.load(num_frontier), 0), bound)  # a count past the buffer: the buffer
    # Blocks past the last node write nothing and no later block needs their
    # sum; the block holding position n (maybe past every node) still runs:
    # it writes edge_ptr[K].
    if first <= n:
        i_n = first + tl.arange(0, BLOCK_NODES)  # [BN] frontier positions
        m_n = i_n < n
        b_v = tl.load(frontier + i_n, mask=m_n, other=0)
        b_start, b_deg = _row_bounds(indptr, hot_indptr, b_v, num_hot, m_n, TIERED)
        b_count, _ = _count_and_class(b_deg, m_n, FANOUT, False, REPLACE)
        b_inclusive = tl.cumsum(b_count, axis=0)
        block_sum = tl.sum(b_count, axis=0)
        # Published first: a successor's walk waits on this word alone, so
        # it is out before this block's own reads.
        _publish_sum(status, ticket, block_sum)

        b_dst = tl.load(frontier_local + i_n, mask=m_n, other=0)
        b_batch, b_seed, b_draw = _node_streams(seed, frontier_batch, batch_ptr, i_n, m_n, HAS_BATCH)
        # The picks need no place: drawn and read before the walk, so the
        # walk's wait overlaps their reads.
        if LANES:
            b_srcs, b_poss, b_count = _lane_picks(indices, hot_indices, num_hot_edges, b_start, b_deg, b_seed, b_draw,
                                                  m_n, FANOUT, REPLACE, TIERED)
        else:
            # (the tile unstaged: D_MAX and TILE unused)
            b_src, b_pos, b_count, m_e = _grouped_picks(indices, hot_indices, num_hot_edges, b_start, b_deg, b_seed,
                                                        b_draw, m_n, FANOUT, FANOUT_PAD, 1, FANOUT_PAD, False, REPLACE,
                                                        TIERED, False, HAS_BATCH, BLOCK_NODES)
        prefix = _look_back(status, ticket, block_sum, LOOK_BACK)

        # edge_ptr[k] = edges before position batch_ptr[k], written by the
        # block holding that position
        o_k = tl.arange(0, BLOCK_K).to(tl.int64)
        m_k = o_k <= num_batches
        if HAS_BATCH:
            # (in [0, n] by contract; clamped, a position past n still has
            # every edge before it, and some block writes it)
            b_ptr = tl.minimum(tl.maximum(tl.load(batch_ptr + o_k, mask=m_k, other=0), 0), n)
        else:
            b_ptr = tl.where(o_k == 0, 0, n)
        m_mine = m_k & (b_ptr >= first) & (b_ptr < first + BLOCK_NODES)
        b_before = tl.sum(tl.where(i_n[None, :] < b_ptr[:, None], b_count[None, :], 0), axis=1)  # [BK]
        tl.store(edge_ptr + o_k, prefix + b_before, mask=m_mine)
        if LANES:
            _write_lanes(out_src, out_dst, out_eid, out_batch, b_srcs, b_poss, b_count, prefix + b_inclusive, b_dst,
                         b_batch, FANOUT, FANOUT_PAD, WRITE_EID, HAS_BATCH, BLOCK_NODES)
        else:
            _write_edges(out_src, out_dst, out_eid, out_batch, b_src, b_pos, b_count, m_e, prefix + b_inclusive,
                         b_dst, b_batch, FANOUT_PAD, WRITE_EID, HAS_BATCH, BLOCK_NODES)


def _launch_settings(fanout_pad: int) -> tuple[int, int, int | None]:
    """``(BLOCK_NODES, num_warps, maxnreg)``: the foundation kernel's
    ``[BN, FP]`` tile of ~2048 elements but at most 128 nodes (fanouts 9-16:
    128 nodes a program).

    Measured on an H200 (``bench/results/README.md``), 4 warps: fanout 5 at
    128 nodes 1.43x the foundation hop (0.127 ms), at 256 (the foundation's
    tile) 1.20x, 512 with 8 warps 0.98x; fanouts 10 and 15 at 128 nodes
    1.17-1.65x, 256 with 8 warps 0.89-1.51x. Fewer nodes a program mean more
    programs in flight and a shorter wait on a block's predecessors; below
    128, more blocks in the look-back's chain. Drawing in lanes at 256 nodes
    with 8 or 4 warps, or 64 with 2, is slower than 128 with 4 on every
    large-graph hop.

    No register cap (``maxnreg``, the third value, for the benches): on the
    grouped tile, caps of 128, 96 and 80 registers (4-6 programs an SM,
    spilling) ran the large graph's hop 2 at 1.07-1.17x against 1.16x
    uncapped."""
    return interpreted_block(max(16, min(128, 2048 // fanout_pad)), 256), 4, None


def launch_fused(indptr, hot_indptr, indices, hot_indices, frontier, frontier_local, num_frontier,
                 frontier_batch, batch_ptr, seed, src, dst, eid, batch, fanout: int, replace: bool,
                 return_eid: bool, tiered: bool) -> torch.Tensor:
    """Write one hop's edges into ``src``/``dst``/``eid``/``batch`` (``bound *
    fanout`` slots, ``fanout >= 1``) in one launch and return ``edge_ptr``
    (``[K + 1]``). Called by ``sample.sample_neighbors`` with its checked
    arguments; ``frontier_batch``/``batch_ptr`` None for one batch."""
    device = frontier.device
    bound = frontier.numel()
    has_batch = frontier_batch is not None
    num_batches = batch_ptr.numel() - 1 if has_batch else 1
    fanout_pad = next_power_of_2(fanout)
    block_nodes, num_warps, maxnreg = _launch_settings(fanout_pad)
    # one block more than the nodes need: position ``bound`` (the end of a
    # full buffer) has a block too, which writes edge_ptr[K]
    programs = bound // block_nodes + 1
    status = torch.zeros(1 + programs, dtype=torch.int64, device=device)
    edge_ptr = torch.empty(num_batches + 1, dtype=torch.int64, device=device)
    if not has_batch:  # never read: HAS_BATCH is off
        frontier_batch = batch_ptr = frontier
    _fused_kernel[(programs,)](
        indptr, hot_indptr, indices, hot_indices, frontier, frontier_local.contiguous(), num_frontier,
        frontier_batch.contiguous(), batch_ptr, seed, status, src, dst, eid, batch, edge_ptr, bound,
        hot_indptr.numel() - 1, hot_indices.numel(), num_batches, FANOUT=fanout, FANOUT_PAD=fanout_pad,
        REPLACE=replace, WRITE_EID=return_eid, TIERED=tiered, HAS_BATCH=has_batch, BLOCK_NODES=block_nodes,
        BLOCK_K=next_power_of_2(num_batches + 1), LOOK_BACK=LOOK_BACK, LANES=fanout <= MAX_LANE_FANOUT,
        num_warps=num_warps, maxnreg=maxnreg)
    return edge_ptr
