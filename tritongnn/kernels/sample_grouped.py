"""Grouped neighbour sampling (GARDEN's grouping-based parallel sampler, GPS).

The same contract and the same random stream as ``sample_foundation._sample_kernel``:
only the way neighbour ids are read changes. ``sample_neighbors(...,
method="grouped")`` selects it; the row kernel, offsets and the ``fanout =
-1`` path are shared.

GARDEN (Sec. IV-C) splits a warp into groups of ``fanout`` lanes, one node
per group, ``floor(32 / fanout)`` nodes per warp, and for every random node
(``fanout < degree <= D_max``, 64 by default) first copies its whole
adjacency row into shared memory with one coalesced load, then serves the
random picks from there; nodes of degree above ``D_max`` pick straight from
global memory; full nodes (``degree <= fanout``) copy their rows.

Triton counterpart. A program holds ``BLOCK_NODES`` nodes in a ``[BN, FP]``
tile (``FP``: fanout padded to a power of two), one node per row: a warp
instruction on it covers ``32 // FP`` nodes of ``FP`` lanes (fanout 15: 2
nodes of 16 lanes, GARDEN's grouping with the fanout padded), and every node
of a tile runs the same code (Floyd's draws in lock step), so lanes do not
diverge by node. Rows of ``degree <= D_MAX`` are loaded as one ``[BN,
D_MAX]`` tile (lane ``d`` of row ``n`` reads ``indices[start_n + d]``,
masked by the degree: 32 lanes of a warp read 128 contiguous bytes of int32
ids), and the picks are taken from it with ``tl.gather(tile, pick, axis=1)``
(registers, or shared memory where the compiler routes the gather through
it: GARDEN's staging buffer). Full nodes are staged the same way (their rows
fit the tile), which is their contiguous row copy.

Bit-identical by construction. The draws come from ``sample_common._draw_positions``
(draw ``j`` of frontier position ``i``: word ``j % 4`` of Philox at
counter ``i * ceil(fanout / 4) + j // 4``, then Robert Floyd's algorithm),
which the foundation kernel calls too, and a staged pick reads
``tile[n, pick] = indices[start_n + pick]``, the value the foundation
kernel loads from memory. So for the same seed the two return the
same edges in the same slots: ``tests/test_sample_grouped.py`` checks that
bit for bit, and the distribution tests of the foundation carry over (and
are repeated on this kernel).

Why staging could pay, and where it does. Measured on an H200
(``bench/results/README.md``): 0.67-1.13x the foundation kernel's speed
with adjacency in GPU memory, where Nsight Compute shows twice the useful
bytes per sector and 10-15x fewer sectors per request but the foundation
kernel is not bound by requests (``sample_fused`` shares this kernel's tile,
unstaged). Through UVA, with the frontier in sampling order, 1.00-1.16x a
hop (``grouped_split``) and 1.35-1.38x a batch of the 10^9-edge graph; with
it in node-id order (where ``sample.sorts_frontier`` sorts it, 3.7x faster
for every kernel), this kernel in one launch 1.20 / 1.37 / 1.14x a hop and
1.19x a batch, the split pair 0.96-1.03x. ``method="auto"`` takes the one
or the other where every row crosses PCIe.

- The staged load needs no random number, so it is issued *before* Floyd's
  arithmetic and its latency overlaps it; the foundation kernel can only
  read after drawing. Through UVA (pinned host memory, microseconds of
  latency) this overlap is the main hoped-for gain, with fewer, larger PCIe
  reads (a row in one or two 128-byte requests instead of up to ``fanout``
  scattered 32-byte sectors).
- Staging never reads fewer 32-byte sectors than the picks, and can read
  more: 15 random positions of a 64-id int32 row touch 7.2 of its 8 sectors
  on average (staging: 8, ~10% more), but 5 of 64 touch only 4.0 (staging:
  twice the bytes). So the smaller the fanout, the smaller the best
  ``D_MAX`` may be; the benchmark sweeps it. The tile also costs ``D_MAX``
  lanes of issue per node instead of ``FP``, and registers.
- Registers: the ``[BN, D_MAX]`` tile is the largest live value (plus its
  64-bit addresses while loading); ``_launch_settings`` keeps it at 2048
  elements a program, 16 a thread with 4 warps.

Super-batches (``frontier_batch``): a node draws from its sub-batch's seed at
its position within the sub-batch, as in the foundation kernel, so each
sub-batch gets the edges it gets sampled alone.

Two-kernel variant (``method="grouped_split"``, without replacement): the
degree classifier (``kernels.classify``, GARDEN's Algorithm 1) has already
ordered the frontier full nodes first (``order``, ``num_full``); the random
nodes run this kernel and the full nodes a copy-only one
(no draws, no staging) on a second CUDA stream, as GARDEN does. Both write
the same slots the fused kernel writes (offsets and Philox counters are by
frontier position), so the output is again bit-identical. With replacement
every node with neighbours draws, so it runs the fused kernel.
"""
from __future__ import annotations

import threading

import torch
import triton
import triton.language as tl

from ._launch import interpreted_block, new_stream, next_power_of_2, reserved
from .classify import _load_tiered
from .sample_common import _draw_positions, _node_streams, _write_edges


@triton.jit
def _grouped_picks(
    indices, hot_indices, num_hot_edges,
    b_start,  # [BN] int64 row start of each node (indptr[v])
    b_deg,    # [BN] int64 its degree
    b_seed,   # the Philox seed: a scalar, or [BN] with PER_NODE_SEED (each node's sub-batch's)
    b_draw,   # [BN] int64 its Philox position (frontier position within its sub-batch)
    m_n,      # [BN] which nodes are real
    FANOUT: tl.constexpr, FANOUT_PAD: tl.constexpr, D_MAX: tl.constexpr, TILE: tl.constexpr,
    STAGE: tl.constexpr, REPLACE: tl.constexpr, TIERED: tl.constexpr, FULL_ONLY: tl.constexpr,
    PER_NODE_SEED: tl.constexpr, BLOCK_NODES: tl.constexpr,
):
    """Draw the edges of a tile of nodes whose row bounds and Philox stream
    are known: ``[BN, FP]`` neighbour ids (int64), CSC positions and mask,
    and the ``[BN]`` count of each node's edges. Where they go is
    ``_write_edges``' business: the one-pass kernel (``sample_fused``) reads
    the picks before it knows their place."""
    o_j = tl.arange(0, FANOUT_PAD)  # [FP]
    if STAGE:
        # Every row that fits the tile, in one coalesced load issued before
        # the draws: it needs no random number, so its latency overlaps them.
        # The tile is TILE >= FANOUT_PAD wide; lanes past the degree load nothing.
        o_d = tl.arange(0, TILE)  # [T]
        m_stage = m_n & (b_deg <= D_MAX)  # [BN]
        m_row = m_stage[:, None] & (o_d[None, :] < b_deg[:, None])  # [BN, T]
        b_row = _load_tiered(hot_indices, indices, b_start[:, None] + o_d[None, :], num_hot_edges,
                             m_row, TIERED)  # [BN, T]

    if FULL_ONLY:  # every node has degree <= fanout: copy its row
        b_pick = tl.broadcast_to(o_j[None, :], (BLOCK_NODES, FANOUT_PAD))  # [BN, FP]
        b_count = tl.minimum(b_deg, FANOUT)
    else:
        b_pick, b_count = _draw_positions(b_seed, b_draw, b_deg, m_n, FANOUT, FANOUT_PAD, REPLACE,
                                          PER_NODE_SEED, BLOCK_NODES)  # [BN, FP], [BN]
    m_e = m_n[:, None] & (o_j[None, :] < b_count[:, None])  # [BN, FP]
    b_pos = b_start[:, None] + b_pick  # [BN, FP] CSC position of each edge

    if STAGE:
        # Hubs (degree > D_MAX) read their picks from memory; the rest from
        # the tile. Padding lanes and hubs gather lane 0, never out of range.
        m_hub = m_e & (b_deg > D_MAX)[:, None]
        b_direct = _load_tiered(hot_indices, indices, b_pos, num_hot_edges, m_hub, TIERED)  # [BN, FP]
        i_lane = tl.where(m_e & m_stage[:, None], b_pick, 0).to(tl.int32)
        b_staged = tl.gather(b_row, i_lane, axis=1)  # [BN, FP]
        b_src = tl.where(m_stage[:, None], b_staged, b_direct).to(tl.int64)
    else:
        b_src = _load_tiered(hot_indices, indices, b_pos, num_hot_edges, m_e, TIERED).to(tl.int64)
    return b_src, b_pos, b_count, m_e


@triton.jit
def _grouped_nodes(indices, hot_indices, frontier_local, row_start, degree, offsets, frontier_batch, batch_ptr,
                   out_src, out_dst, out_eid, out_batch, seed, num_hot_edges, i_n, m_n, FANOUT: tl.constexpr,
                   FANOUT_PAD: tl.constexpr, D_MAX: tl.constexpr, TILE: tl.constexpr, STAGE: tl.constexpr,
                   REPLACE: tl.constexpr, WRITE_EID: tl.constexpr, TIERED: tl.constexpr, FULL_ONLY: tl.constexpr,
                   HAS_BATCH: tl.constexpr, BLOCK_NODES: tl.constexpr):
    # frontier positions ``i_n``: the classifier's arrays give the rest
    b_start = tl.load(row_start + i_n, mask=m_n, other=0)  # [BN]
    b_deg = tl.load(degree + i_n, mask=m_n, other=0)
    b_end = tl.load(offsets + i_n, mask=m_n, other=0)
    b_dst = tl.load(frontier_local + i_n, mask=m_n, other=0)
    b_batch, b_seed, b_draw = _node_streams(seed, frontier_batch, batch_ptr, i_n, m_n, HAS_BATCH)
    b_src, b_pos, b_count, m_e = _grouped_picks(indices, hot_indices, num_hot_edges, b_start, b_deg, b_seed,
                                                b_draw, m_n, FANOUT, FANOUT_PAD, D_MAX, TILE, STAGE, REPLACE, TIERED,
                                                FULL_ONLY, HAS_BATCH, BLOCK_NODES)
    _write_edges(out_src, out_dst, out_eid, out_batch, b_src, b_pos, b_count, m_e, b_end, b_dst, b_batch,
                 FANOUT_PAD, WRITE_EID, HAS_BATCH, BLOCK_NODES)


@triton.jit(do_not_specialize=["bound", "num_hot_edges"])
def _grouped_kernel(
    indices,         # [E] int32/int64 CSC sources, GPU or pinned host
    hot_indices,     # [num_hot_edges] GPU copy of indices[:num_hot_edges] (if TIERED)
    frontier_local,  # [bound] int64 local id of each frontier node (edge target)
    row_start,       # [bound] int64 from the classifier (kernels.classify)
    degree,          # [bound] int64 from the classifier
    offsets,         # [bound] int64 inclusive end of each node's edges
    num_frontier,    # [1] int64 device scalar: valid prefix of the frontier
    order,           # [bound] int64 the classifier's frontier positions, full nodes first
    num_full,        # [1] int64 device scalar: full nodes at the head of order (NODES != "all")
    frontier_batch,  # [bound] int64 sub-batch of each frontier node (if HAS_BATCH)
    batch_ptr,       # [K + 1] int64 first frontier position of each sub-batch (if HAS_BATCH)
    out_src,         # [bound * fanout] int64 out: global id of the sampled neighbour
    out_dst,         # [bound * fanout] int64 out: local id of the node it was sampled for
    out_eid,         # [bound * fanout] int64 out: CSC position of the edge (if WRITE_EID)
    out_batch,       # [bound * fanout] int64 out: sub-batch of the edge (if HAS_BATCH)
    bound,           # slots of the frontier buffers
    seed,            # [K] int64 device: Philox seed of each sub-batch for this launch
    num_hot_edges,   # CSC positions < num_hot_edges are read from hot_indices
    FANOUT: tl.constexpr,
    FANOUT_PAD: tl.constexpr,  # next power of two >= FANOUT
    D_MAX: tl.constexpr,       # rows of degree <= D_MAX are staged (a power of two)
    TILE: tl.constexpr,        # staged tile width, max(D_MAX, FANOUT_PAD): see ``launch_grouped``
    STAGE: tl.constexpr,       # stage rows of degree <= D_MAX (False: read every pick from memory)
    REPLACE: tl.constexpr,
    WRITE_EID: tl.constexpr,
    TIERED: tl.constexpr,
    NODES: tl.constexpr,       # "all": the whole of ``order``; "random"/"full": that part of it
    HAS_BATCH: tl.constexpr,   # a super-batch: K sub-batches, each with its own seed
    BLOCK_NODES: tl.constexpr,
):
    num_valid = tl.load(num_frontier)
    first = tl.program_id(0).to(tl.int64) * BLOCK_NODES
    if NODES == "all":
        # A run of the classified order, as in the foundation kernel: tiles
        # of full nodes skip the draws (outputs are placed by frontier
        # position, so the order changes no edge).
        i_k = first + tl.arange(0, BLOCK_NODES)  # [BN] slots of order
        m_n = (i_k < bound) & (i_k < num_valid)
        i_n = tl.load(order + i_k, mask=m_n, other=0)
        _grouped_nodes(indices, hot_indices, frontier_local, row_start, degree, offsets, frontier_batch, batch_ptr,
                       out_src, out_dst, out_eid, out_batch, seed, num_hot_edges, i_n, m_n, FANOUT, FANOUT_PAD,
                       D_MAX, TILE, STAGE, REPLACE, WRITE_EID, TIERED, False, HAS_BATCH, BLOCK_NODES)
    else:
        # order[:num_full] holds the full nodes, order[num_full:num_valid]
        # the random ones; the grid covers ``bound`` slots for either part,
        # so a program past its part's end returns without drawing.
        split = tl.load(num_full)
        if NODES == "random":
            first += split
            end = num_valid
        else:
            end = split
        if first < end:
            i_k = first + tl.arange(0, BLOCK_NODES)  # [BN] slots of order
            m_n = (i_k < bound) & (i_k < end)
            i_n = tl.load(order + i_k, mask=m_n, other=0)
            _grouped_nodes(indices, hot_indices, frontier_local, row_start, degree, offsets, frontier_batch,
                           batch_ptr, out_src, out_dst, out_eid, out_batch, seed, num_hot_edges, i_n, m_n, FANOUT,
                           FANOUT_PAD, D_MAX, TILE, STAGE, REPLACE, WRITE_EID, TIERED, NODES == "full",
                           HAS_BATCH, BLOCK_NODES)


def _launch_settings(fanout_pad: int, d_max: int, stage: bool) -> tuple[int, int]:
    """``(BLOCK_NODES, num_warps)`` of a grouped launch.

    Registers bound this kernel (it waits on memory: the more programs an SM
    holds, the more reads are in flight). Compiled for sm_90 by ptxas (no GPU
    needed), fanout 15, int32 ids, no spills anywhere: D_MAX 64 with BN 32
    and 4 warps (16 staged ids a thread) took 195 registers, 2 programs an
    SM; BN 16 (8 a thread) took 64, 8 programs; D_MAX 32 with BN 32 took
    95-187 although its staged tile is no larger: Floyd's ``[BN, FP]`` tile
    (4 a thread there) weighs as much. With the shapes below, fanouts 5, 10
    and 15, D_MAX 16 to 128, int32 or int64 ids, one or two tiers: 48-90
    registers (the foundation kernel's BN 128: 158-202). So a program holds
    ``1024 // max(D_MAX, 64)`` nodes over 4 warps: 16 at the default, 4 a warp,
    of which one warp instruction on the ``[BN, FP]`` tile covers ``32 //
    FP`` (GARDEN's ``floor(32 / fanout)`` with the fanout padded). Without
    staging, the foundation kernel's shape. Under the interpreter the cost is
    per operation (a Philox call costs the same for 16 nodes as for 1024), so
    tiles grow to 65536 elements.
    """
    width = max(fanout_pad, d_max) if stage else fanout_pad
    if stage:
        block_nodes = max(1, 1024 // max(width, 64))
    else:
        block_nodes = max(16, min(256, 2048 // width))
    return interpreted_block(block_nodes, max(16, min(1024, 65536 // width))), 4


def _full_first(visit: torch.Tensor, degree: torch.Tensor, num_frontier: torch.Tensor, fanout: int):
    """``(order, num_full)`` for the split kernels from a node-id ``visit``
    order: every full node (degree <= fanout) first, then every random one,
    each part still in node-id order (a stable partition: one scan of the
    flags, one scatter; no sync), and ``[1]`` how many are full. Slots past
    ``num_frontier`` keep their places."""
    position = torch.arange(visit.numel(), device=visit.device)
    full = (degree[visit] <= fanout) & (position < num_frontier)
    full_before = torch.cumsum(full, 0)  # inclusive
    num_full = full_before[-1:]
    slot = torch.where(full, full_before - 1, num_full + position - full_before)
    return torch.empty_like(visit).scatter_(0, slot, visit), num_full


# A side stream per stream launching on it, not per GPU: a CUDA graph capture
# on one stream takes in whatever lands on its side stream meanwhile, so the
# eager launches of another thread (another loader's producer) must not
# share it; a capture stream's side stream is reserved as it is
# (``_launch.new_stream``). Streams are pooled by torch, so this stays small.
_side_streams: dict[torch.cuda.Stream, torch.cuda.Stream] = {}
# made under a lock: two threads' first launches on one stream would each
# draw a stream, and the loser's would stay counted as in use for good
_side_lock = threading.Lock()


def _side_stream(main: torch.cuda.Stream) -> torch.cuda.Stream:
    side = _side_streams.get(main)
    if side is None:
        with _side_lock:
            side = _side_streams.get(main)
            if side is None:
                side = _side_streams[main] = new_stream(main.device, reserve=reserved(main))
    return side


def launch_grouped(indices, hot_indices, frontier_local, classified, num_frontier, frontier_batch, batch_ptr,
                   src, dst, eid, batch, seed, num_hot_edges, fanout: int, replace: bool, return_eid: bool,
                   tiered: bool, d_max: int, split: bool) -> None:
    """Write one hop's edges into ``src``/``dst``/``eid``/``batch`` (``bound *
    fanout`` slots) with the grouped kernel(s). Called by
    ``sample.sample_neighbors`` after the classifier (``classified``, a
    ``ClassifiedFrontier``: its ``order`` puts the full nodes first,
    ``num_full`` of them), for ``fanout >= 1``; ``frontier_batch`` and
    ``batch_ptr`` None for one batch (``batch`` then unused); other arguments
    as there."""
    row_start, degree, offsets = classified.row_start, classified.degree, classified.offsets
    bound = row_start.numel()
    if classified.visit is None:
        # per sub-batch its full nodes, then its random ones: a split takes
        # the first sub-batch's full nodes as "full", the rest as "random"
        # (whose kernel copies a full node's row as the other would).
        # Partitioning every sub-batch's full nodes first (``_full_first``
        # over this order) is slower: cnr2000 through UVA, K=8, 0.455-0.482
        # ms a batch against 0.402-0.457 (H200)
        order, num_full = classified.order, classified.num_full[:1]
    elif split and not replace:
        order, num_full = _full_first(classified.visit, degree, num_frontier, fanout)
    else:
        order, num_full = classified.visit, None
    fanout_pad = next_power_of_2(fanout)
    # The staged tile is at least as wide as the picks gathered from it:
    # Triton 3.6 fails to compile ``tl.gather`` from a [BN, D_MAX] tile into
    # a wider [BN, FANOUT_PAD] one (an assertion in its thread-locality pass,
    # seen at fanout 5, d_max 1 with replacement), and lanes past a row's
    # degree load nothing, so the wider tile reads no more.
    common = dict(FANOUT=fanout, FANOUT_PAD=fanout_pad, D_MAX=d_max, TILE=max(d_max, fanout_pad),
                  REPLACE=replace, WRITE_EID=return_eid, TIERED=tiered, HAS_BATCH=frontier_batch is not None)
    if frontier_batch is None:  # never read: HAS_BATCH is off
        frontier_batch = batch_ptr = batch = src
    arrays = (indices, hot_indices, frontier_local, row_start, degree, offsets, num_frontier)
    outputs = (frontier_batch, batch_ptr, src, dst, eid, batch, bound, seed, num_hot_edges)
    if not split or replace:
        stage = replace or d_max > fanout
        block_nodes, num_warps = _launch_settings(fanout_pad, d_max, stage)
        _grouped_kernel[(triton.cdiv(bound, block_nodes),)](  # num_full: unused
            *arrays, order, num_frontier, *outputs, STAGE=stage, NODES="all",
            BLOCK_NODES=block_nodes, num_warps=num_warps, **common)
        return

    def run(nodes, stage):
        block_nodes, num_warps = _launch_settings(fanout_pad, d_max, stage)
        _grouped_kernel[(triton.cdiv(bound, block_nodes),)](
            *arrays, order, num_full, *outputs, STAGE=stage, NODES=nodes,
            BLOCK_NODES=block_nodes, num_warps=num_warps, **common)

    device = row_start.device
    if device.type != "cuda":
        run("full", False)
        run("random", d_max > fanout)
        return
    # Full nodes on a side stream, random nodes on the caller's; the caller's
    # stream waits for both, so every buffer freed after this call is reused
    # only once the side stream is done with it (no record_stream needed).
    # Inside a CUDA graph capture the fork and join are captured too.
    main = torch.cuda.current_stream(device)
    side = _side_stream(main)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        run("full", False)
    run("random", d_max > fanout)
    main.wait_stream(side)
