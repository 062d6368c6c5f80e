"""Uniform neighbour sampling for one hop, on the GPU.

Layout. The graph is CSC: the in-neighbours (message sources) of node ``v``
are ``indices[indptr[v]:indptr[v + 1]]``. ``indptr``/``indices`` may live in
GPU memory or in pinned host memory; the kernels read either directly (UVA),
so the adjacency of a graph larger than the GPU is never staged by the CPU.

Four launches per hop, no host synchronisation:

1. ``kernels.classify`` (three passes, an atomic-free multi-block prefix
   sum): per frontier node, its row start, degree and the number of
   neighbours it will draw (``count``: ``min(degree, fanout)`` without
   replacement, ``fanout`` (or 0 for an isolated node) with replacement,
   ``degree`` for ``fanout = -1``); the output offsets (exclusive scan of
   ``count``), so the edges of a hop come out grouped by target node, in
   frontier order, like PyG's; and ``order``, the frontier with full nodes
   (``degree <= fanout``) before random ones, per sub-batch.
2. ``_sample_kernel`` (fanout >= 0): a ``[BLOCK_NODES, FANOUT_PAD]`` tile, one
   node of ``order`` per row. A node with ``degree <= fanout`` copies its row;
   a tile of such nodes only (most tiles, thanks to ``order``) skips the
   draws. A node with more neighbours draws ``fanout`` distinct positions
   with Robert Floyd's algorithm: for ``j = degree - fanout .. degree - 1``
   draw ``t`` uniform in ``[0, j]`` and keep ``j`` if ``t`` was already
   chosen, else ``t``. Every ``fanout``-subset is then equally likely, at
   ``O(fanout^2)`` work per node however large its degree (hubs of power-law
   graphs cost the same as small nodes), without reading the row. With
   replacement the draws are i.i.d. ``_all_kernel`` (fanout = -1) copies
   whole rows, one output edge per lane.
   ``method="grouped"`` swaps this kernel for ``sample_grouped``'s (GARDEN's
   GPS), one batch at a time: the same draws (``_draw_positions``), but rows
   of degree <= ``d_max`` are staged with one coalesced load and the picks
   served from the tile.

``method="fused"`` (``sample_fused``) does all of this in one launch: each
program classifies and scans its block of the frontier, draws the same
picks (one node a lane), finds where its edges start by a look-back over
the blocks before it, and stores them; ``method="auto"`` takes it where
the adjacency is in GPU memory.

Random numbers are Philox (``tl.randint4x``, four words an evaluation)
keyed by a per-launch seed drawn from the caller's ``torch.Generator`` and
by (node position, draw): results are reproducible for a given generator
state, independent of the launch shape and of the order in which programs
take the nodes. The seed is read from device
memory, so a CUDA graph of the launches replays with new seeds.

Super-batches. The K sub-batches of a super-batch are sampled in the same
launches: the frontier is their frontiers end to end (``frontier_batch``,
``batch_ptr``), each sub-batch has its own seed (``seed[k]``) and a node's
Philox counter is its position *within its sub-batch*. A sub-batch therefore
draws exactly the numbers it would draw sampled alone, and its edges, a
contiguous slice (``edge_ptr``), are exactly that batch's edges.

The adjacency may come in two tiers (the adjacency cache): after hot-first
relabelling, the rows of nodes ``< A`` are a prefix of the CSC arrays, kept as
GPU copies ``hot_indptr``/``hot_indices``; a node's row bounds and a
position's neighbour are read from the GPU copy when ``v < A`` (position
``< indptr[A]``), else from the full arrays, usually in pinned host memory.

Visit order. Through UVA the H200 reads host memory at a rate set by the
distinct host pages a kernel's reads touch, not by their bytes
(``kernels.gather``'s docstring); a frontier in sampling order touches one
page a read. Where rows cross PCIe and the host arrays they are read from
outgrow the L2 (``sorts_frontier``: all of them, or with the adjacency
cache those past its GPU prefix, where enough of the row reads go there),
a hop therefore sorts its frontier by node id
(``classify.node_order``, one ``torch.sort`` of 32-bit keys on the device),
reads the row bounds in that order (``classify_frontier(sort_by_node=
True)``) and the sampling kernels take their nodes in it (``visit``; the
split kernels full nodes first, each part still sorted). Every output still
goes to its frontier position's slots with its position's draws: the same
edges, bit for bit. In a super-batch the K frontiers are sorted together, so
a node of several sub-batches is read once into the L2 for all of them, and
K frontiers touch each page more densely than one. Measured on an H200
(``bench/results/README.md``, thirty-fifth session; 5x10^7 nodes, 10^9
edges, batch 8000, [15, 10, 5]): the hops 5.2x (the third) and 2.3x (the
second) faster for the foundation kernel, a whole batch 3.7x (29.6 -> 8.0
ms); K = 8 then samples 1.39-1.61x as fast a batch as K = 1 over methods
and runs (in frontier order 1.03-1.17x). On cnr2000, whose 16 MB of arrays
stay in the L2, sorting only cost (hops 0.47-0.73x; a super-batch of 8
gained nothing from any of its hops sorted, thirty-sixth session): there
the frontier keeps its order. With the adjacency cache (thirty-ninth
session, the same graph renamed hot-first by degree, the rows of a quarter
or half of its edges in GPU memory) sorting made a batch 2.4-3.1x faster
at K = 1 and 3.3-4.0x at K = 8 with [15, 10, 5], 1.7-1.9x and 2.5-2.9x
with [5, 10, 15], for every kernel that sorts; with three quarters cached
1.4x and 1.7x; with 90 % cached it cost (0.94x, 0.78x). A node is met
there about as often as its degree, so those shares are also the row
reads' shares. At ogbn-papers100M scale, whose cache is ordered by
profiled reads, a profile serves more reads than its share of the edges,
and sorting cost there too: with a 24 GB budget (80 % of the edges' bytes
cached, 94 % of the row reads served) sampling took 1.07 s an epoch sorted
with the grouped kernel against 0.76 s in frontier order with the
foundation's; with 6 GB (70 %, 85 %) 0.70-0.71 s against 0.67 s. Hence
``SORT_MIN_UVA_SHARE`` of the reads, which the loader takes from its cache
plan (``NeighborSampler``'s ``adjacency_hit_rate``).
The fused kernel, whose look-back scan walks the frontier in order, does
not sort.

Sizes need not be known on the host: the frontier is a buffer of ``bound``
slots of which the first ``num_frontier`` (a device scalar) are valid, so a
whole multi-hop batch is sampled without one ``.item()`` in between.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import reference
from .classify import _load_tiered, check_num_frontier, classify_frontier
from .outputs import HopSample
from ._launch import (check_dense_index, check_readable, interpreted_block, l2_bytes, next_power_of_2, on_device_of,
                      use_triton)


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
            # placed in the tile (at 3fb8873 on an H200: the foundation hop
            # 1.11-1.19x faster on the large graph than with each step on the
            # tile); a loop on the tile past 32 steps (unrolling hundreds
            # takes minutes to compile)
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
    o_out = (b_end - b_count)[:, None] + o_j[None, :]
    tl.store(out_src + o_out, b_src, mask=m_e)
    tl.store(out_dst + o_out, tl.broadcast_to(b_dst[:, None], (BLOCK_NODES, FANOUT_PAD)), mask=m_e)
    if WRITE_EID:
        tl.store(out_eid + o_out, b_pos, mask=m_e)
    if HAS_BATCH:
        tl.store(out_batch + o_out, tl.broadcast_to(b_batch[:, None], (BLOCK_NODES, FANOUT_PAD)), mask=m_e)


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


def _check_batches(frontier, frontier_batch, batch_ptr, seed, device):
    """The super-batch arguments: both or neither, int64 on the frontier's
    device, one Philox seed per sub-batch. Returns K."""
    if (frontier_batch is None) != (batch_ptr is None):
        raise ValueError("frontier_batch and batch_ptr come together (the super-batch's sub-batches)")
    if frontier_batch is None:
        num_batches = 1
    else:
        for name, t in (("frontier_batch", frontier_batch), ("batch_ptr", batch_ptr)):
            if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.dim() != 1:
                raise TypeError(f"{name} must be a 1-D int64 tensor, got "
                                f"{getattr(t, 'dtype', type(t).__name__)}")
            if t.device != device:
                raise ValueError(f"{name} lives on {t.device}, the frontier on {device}")
        if frontier_batch.numel() != frontier.numel():
            raise ValueError(f"frontier_batch has {frontier_batch.numel()} slots, the frontier {frontier.numel()}")
        num_batches = batch_ptr.numel() - 1
        if num_batches < 1:
            raise ValueError(f"batch_ptr must have K + 1 >= 2 entries, got {batch_ptr.numel()}")
    if seed is not None and (not isinstance(seed, torch.Tensor) or seed.dtype != torch.int64):
        raise TypeError(f"seed must be an int64 tensor of Philox seeds, got "
                        f"{getattr(seed, 'dtype', type(seed).__name__)}")
    if seed is not None and seed.numel() != num_batches:
        raise ValueError(f"seed must hold one Philox seed per sub-batch ({num_batches}), got {seed.numel()}")
    return num_batches


@on_device_of("frontier")
def sample_neighbors(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    frontier: torch.Tensor,
    frontier_local: torch.Tensor,
    num_frontier: torch.Tensor,
    fanout: int,
    replace: bool = False,
    generator: torch.Generator | None = None,
    return_eid: bool = False,
    seed: torch.Tensor | None = None,
    hot_indptr: torch.Tensor | None = None,
    hot_indices: torch.Tensor | None = None,
    frontier_batch: torch.Tensor | None = None,
    batch_ptr: torch.Tensor | None = None,
    method: str = "foundation",
    d_max: int = 64,
    sort_frontier: bool | None = None,
) -> HopSample:
    """Sample up to ``fanout`` in-neighbours of every frontier node, for one
    batch or for the K sub-batches of a super-batch in one launch.

    Args:
        indptr: ``[N + 1]`` int64 CSC pointer (GPU or pinned host memory).
        indices: ``[E]`` int32/int64 CSC sources (GPU or pinned host memory).
        frontier: ``[bound]`` int64 global node ids; the first ``num_frontier``
            are sampled.
        frontier_local: ``[bound]`` int64 local id of each frontier node,
            written as the target of its edges.
        num_frontier: ``[1]`` int64 tensor on the frontier's device.
        fanout: neighbours per node; -1 takes every neighbour.
        replace: draw with replacement (i.i.d.) instead of a uniform subset.
        generator: CPU ``torch.Generator`` the launch seed is drawn from
            (and, on the CPU path, every random number).
        return_eid: also return each edge's CSC position.
        seed: ``[K]`` int64 Philox seeds (one per sub-batch, ``[1]`` for one
            batch) on the frontier's device, used instead of a draw from
            ``generator`` by the Triton kernels.
        hot_indptr, hot_indices: the adjacency cache, GPU copies of
            ``indptr[:A + 1]`` and ``indices[:indptr[A]]`` for the first A
            (hot-first) nodes: their rows are read from these, the others
            from ``indptr``/``indices``. Both or neither.
        frontier_batch: ``[bound]`` int64 sub-batch of each frontier node,
            contiguous by sub-batch (a super-batch); None for one batch.
        batch_ptr: ``[K + 1]`` int64 device: where each sub-batch starts in
            the frontier, ``batch_ptr[K] == num_frontier``; with
            ``frontier_batch``.
        method: which kernels sample the hop (the draws, hence the edges,
            are the same for a given seed): ``"foundation"``, the classifier's
            three passes and a kernel reading every pick from memory;
            ``"grouped"`` (GARDEN's GPS, ``kernels.sample_grouped``) stages
            rows of degree <= ``d_max`` with one coalesced load and picks from
            the staged tile; ``"grouped_split"`` runs its full and random nodes
            as two kernels on two streams; ``"fused"``
            (``kernels.sample_fused``) does the classification, placement and
            draws in one launch;
            ``"auto"``: ``"fused"`` where every row is in GPU memory,
            where every row is in host memory ``"grouped"`` if the frontier
            is read in node-id order, else ``"grouped_split"``, and
            ``"foundation"`` otherwise (``auto_method``). The CPU reference
            ignores it.
        d_max: widest row the grouped kernels stage (and the fused one,
            with ``FUSED_STAGE``), a power of two in [1, 1024]; hubs above
            it pick from memory.
        sort_frontier: read the frontier's row bounds and rows in node-id
            order (module docstring, "Visit order"; the same edges). None:
            where every row is read through UVA and the host arrays outgrow
            the L2 (``sorts_frontier``). The fused kernel reads in frontier
            order only: True with it raises ValueError.

    Returns:
        ``HopSample``: edges grouped by target in frontier order (so by
        sub-batch), ``edge_ptr`` where each sub-batch's edges start, ``batch``
        the sub-batch of each edge (with ``frontier_batch``). With
        ``fanout >= 0`` its buffers have ``bound * fanout`` slots and nothing
        is synchronised; with ``fanout = -1`` they are sized exactly (one
        sync). Node ``i`` of sub-batch ``k`` draws its neighbours from
        ``seed[k]`` and its position within sub-batch ``k``: each sub-batch
        gets exactly what sampling it alone with ``seed[k:k + 1]`` gives.

    Example:
        >>> hop = sample_neighbors(indptr, indices, seeds, torch.arange(len(seeds)),
        ...                        torch.tensor([len(seeds)]), fanout=10)
    """
    if not isinstance(fanout, int) or isinstance(fanout, bool) or fanout < -1:
        raise ValueError(f"fanout must be an int >= -1 (-1 = all neighbours), got {fanout!r}")
    if fanout > MAX_FANOUT:
        raise ValueError(f"fanout={fanout}: the kernels draw at most {MAX_FANOUT} neighbours per node "
                         f"(-1 takes them all)")
    check_method(method, d_max)
    if sort_frontier is not None and not isinstance(sort_frontier, bool):
        raise TypeError(f"sort_frontier must be True, False or None, got {sort_frontier!r}")
    device = frontier.device
    num_batches = _check_batches(frontier, frontier_batch, batch_ptr, seed, device)
    check_dense_index(indptr, "indptr", (torch.int64,))
    check_dense_index(indices, "indices", (torch.int32, torch.int64))
    if hot_indptr is not None and hot_indices is not None:
        check_dense_index(hot_indptr, "hot_indptr", (torch.int64,))
        check_dense_index(hot_indices, "hot_indices", (torch.int32, torch.int64))
    # after the checks: the rule and auto read the arrays' placement and sizes
    if sort_frontier is None:
        sort_frontier = visits_in_node_order(method, indptr, indices, device, hot_indptr, hot_indices)
    if method == "auto":
        method = auto_method(indices, hot_indices, device, sort_frontier)
    if sort_frontier and method == "fused" and fanout >= 0:
        raise ValueError("sort_frontier=True: method='fused' reads the frontier in its own order "
                         "(its look-back scan); take another method or sort_frontier=None")
    if not use_triton(device):
        return reference.sample_neighbors(indptr, indices, frontier, frontier_local, num_frontier, fanout,
                                          replace, generator, return_eid, frontier_batch, batch_ptr)
    check_readable(indptr, device, "indptr")
    check_readable(indices, device, "indices")
    frontier_local = frontier_local.contiguous()  # read with stride 1 (classify makes the rest so)
    tiered = hot_indptr is not None or hot_indices is not None
    if tiered:
        if hot_indptr is None or hot_indices is None:
            raise ValueError("hot_indptr and hot_indices come together (the adjacency cache)")
        check_readable(hot_indptr, device, "hot_indptr")
        check_readable(hot_indices, device, "hot_indices")
        if hot_indptr.dtype != indptr.dtype or hot_indices.dtype != indices.dtype:
            raise TypeError(f"hot_indptr/hot_indices must have the dtypes of indptr/indices "
                            f"({indptr.dtype}, {indices.dtype}), got {hot_indptr.dtype}, {hot_indices.dtype}")
        if not 1 <= hot_indptr.numel() <= indptr.numel() or hot_indices.numel() > indices.numel():
            raise ValueError(f"hot_indptr [{hot_indptr.numel()}] / hot_indices [{hot_indices.numel()}] "
                             f"must be prefixes of indptr [{indptr.numel()}] / indices [{indices.numel()}]")
    else:
        hot_indptr, hot_indices = indptr, indices
    has_batch = frontier_batch is not None
    bound = frontier.numel()
    if fanout >= 0:
        # Every slot a hop may fill: nothing is synchronised.
        slots = bound * fanout
        src = torch.empty(slots, dtype=torch.int64, device=device)
        dst = torch.empty_like(src)
        eid = torch.empty_like(src) if return_eid else src
        batch = torch.empty_like(src) if has_batch else src
        if slots and seed is None:
            seed = torch.full((1,), int(draw_seeds(1, generator)[0]), dtype=torch.int64, device=device)
        if method == "fused":  # one launch, no classifier
            check_num_frontier(num_frontier)
            if slots:
                # imported here: sample_fused builds on this module's device helpers
                from .sample_fused import launch_fused
                edge_ptr = launch_fused(indptr, hot_indptr, indices, hot_indices, frontier.contiguous(),
                                        frontier_local, num_frontier, frontier_batch, batch_ptr, seed, src, dst,
                                        eid, batch, fanout, replace, return_eid, tiered, d_max,
                                        stage=FUSED_STAGE and (replace or d_max > fanout))
            else:  # no slot: no edge in any sub-batch
                edge_ptr = torch.zeros(num_batches + 1, dtype=torch.int64, device=device)
            return HopSample(src, dst, eid if return_eid else None, edge_ptr[-1:], batch if has_batch else None,
                             edge_ptr)
    classified = classify_frontier(indptr, frontier, num_frontier, fanout, replace, frontier_batch, batch_ptr,
                                   hot_indptr if tiered else None, sort_by_node=sort_frontier)
    edge_ptr = classified.edge_ptr
    num_edges = edge_ptr[-1:]
    if not has_batch:  # never read: the kernels' HAS_BATCH is off
        frontier_batch = batch_ptr = frontier

    if fanout == -1:
        # Only here is the output size unknown up to the sum of degrees.
        total = int(num_edges.item())
        owner = torch.repeat_interleave(torch.arange(bound, device=device), classified.degree,
                                        output_size=total)
        src = torch.empty(total, dtype=torch.int64, device=device)
        dst = torch.empty_like(src)
        eid = torch.empty_like(src) if return_eid else src
        batch = torch.empty_like(src) if has_batch else src
        if total:
            _all_kernel[(triton.cdiv(total, 1024),)](
                indices, hot_indices, owner, frontier_local, classified.row_start, classified.offsets,
                classified.degree, frontier_batch, src, dst, eid, batch, total, hot_indices.numel(),
                WRITE_EID=return_eid, TIERED=tiered, HAS_BATCH=has_batch, BLOCK=1024)
        return HopSample(src, dst, eid if return_eid else None, num_edges, batch if has_batch else None,
                         edge_ptr)

    if slots:
        if method != "foundation":
            # imported here: sample_grouped builds on this module's device helpers
            from .sample_grouped import launch_grouped
            launch_grouped(indices, hot_indices, frontier_local, classified, num_frontier,
                           frontier_batch if has_batch else None, batch_ptr if has_batch else None, src, dst, eid,
                           batch, seed, hot_indices.numel(), fanout, replace, return_eid, tiered, d_max,
                           split=method == "grouped_split")
            return HopSample(src, dst, eid if return_eid else None, num_edges, batch if has_batch else None,
                             edge_ptr)
        fanout_pad = next_power_of_2(fanout)
        block_nodes, num_warps = _launch_settings(fanout_pad)
        order = classified.order if classified.visit is None else classified.visit
        _sample_kernel[(triton.cdiv(bound, block_nodes),)](
            indices, hot_indices, frontier_local, order, classified.row_start, classified.degree,
            classified.offsets, frontier_batch, batch_ptr, num_frontier, src, dst, eid, batch, bound, seed,
            hot_indices.numel(), FANOUT=fanout, FANOUT_PAD=fanout_pad, REPLACE=replace,
            WRITE_EID=return_eid, TIERED=tiered, HAS_BATCH=has_batch, BLOCK_NODES=block_nodes,
            num_warps=num_warps)
    return HopSample(src, dst, eid if return_eid else None, num_edges, batch if has_batch else None, edge_ptr)


def sorts_frontier(indptr: torch.Tensor, indices: torch.Tensor, device: torch.device,
                   hot_indptr: torch.Tensor | None = None, hot_indices: torch.Tensor | None = None,
                   uva_reads: float | None = None) -> bool:
    """``sort_frontier=None``: whether a hop on ``device`` visits its frontier
    in node-id order: where rows are read through UVA (``indices`` in host
    memory) and the host arrays' bytes the kernels read there outgrow the
    GPU's L2 (below that, the rows read once stay in the L2 and the sort
    only costs), if ``SORT_FRONTIER``. With the adjacency cache
    (``hot_indptr``/``hot_indices``, GPU copies of the arrays' prefixes)
    only the rest counts, what the kernels read through UVA, and only where
    at least ``SORT_MIN_UVA_SHARE`` of the row reads go there (a cache that
    serves most of them leaves too few to the sort): ``uva_reads``, that
    share, where the caller knows it (the cache plan's expected misses),
    else the share of the edges past the prefix (a node is met about as
    often as its degree)."""
    if not SORT_FRONTIER or device.type != "cuda" or indices.is_cuda:
        return False
    host_bytes = indptr.nbytes + indices.nbytes
    if hot_indptr is not None and hot_indices is not None:
        if uva_reads is None:
            uva_reads = 1 - hot_indices.numel() / max(1, indices.numel())
        if uva_reads < SORT_MIN_UVA_SHARE:
            return False
        host_bytes -= hot_indptr.nbytes + hot_indices.nbytes
    return host_bytes > l2_bytes(device)


def visits_in_node_order(method: str, indptr: torch.Tensor, indices: torch.Tensor, device: torch.device,
                         hot_indptr: torch.Tensor | None = None, hot_indices: torch.Tensor | None = None,
                         uva_reads: float | None = None) -> bool:
    """``sort_frontier=None`` for ``method``: ``sorts_frontier``, except that
    the fused kernel always reads in frontier order (its look-back scan)."""
    return method != "fused" and sorts_frontier(indptr, indices, device, hot_indptr, hot_indices, uva_reads)


def auto_method(indices: torch.Tensor, hot_indices: torch.Tensor | None, device: torch.device,
                sorted_visits: bool = False) -> str:
    """``method="auto"`` for a hop sampled on ``device``: ``"fused"`` where
    every row is read from GPU memory; where rows are read from host memory
    through UVA (all of them, or those past the adjacency cache),
    ``"grouped"`` (GARDEN's grouped sampler, one kernel) if the frontier is
    visited in node-id order (``sorted_visits``, what ``sorts_frontier``
    asks for past the L2); otherwise ``"grouped_split"`` (its full and
    random nodes on two streams) where every row is read through UVA, and
    ``"foundation"`` with the adjacency cache (most rows then in GPU
    memory) and under the interpreter.

    Measured on an H200 (``bench/results/README.md``): in GPU memory the
    fused hop is 1.53-2.17x the foundation's on both graphs (0abf2ca), the
    grouped kernels' 0.68-0.81x a batch (thirty-fourth session). Through
    UVA in frontier order, where host pages bound every kernel, the fused
    hop fell to 0.87x and 0.70x on the large graph's two larger hops, and
    the grouped_split hops (one coalesced read of a staged row, fewer and
    larger PCIe requests than its scattered picks) ran at 1.00-1.16x on both
    graphs (thirty-fourth session). In node-id order (thirty-fifth session,
    the large graph) the grouped hops ran at 1.20 / 1.37 / 1.14x the
    foundation's in the same order and grouped_split's at 0.98 / 1.03 /
    0.96x: its two kernels walk the host pages twice, each half as densely;
    a batch 1.19x the foundation's at K = 1 and at K = 8. With the
    adjacency cache (thirty-ninth session, the large graph, a quarter or
    half of its edges' rows in GPU memory), in node-id order grouped 1.09-
    1.10x the foundation's a batch at K = 1 and 1.07-1.20x at K = 8,
    grouped_split 1.01-1.07x and 1.08-1.14x (three quarters: 0.97-0.99x,
    even); in frontier order, which the cache keeps where it serves most
    reads, the foundation's was the fastest with 90 % of the edges cached
    (grouped 0.82-0.91x, grouped_split 0.86-0.99x), the fused kernel
    0.59-0.74x wherever measured."""
    if device.type != "cuda":
        return "foundation"
    if sorted_visits:
        return "grouped"
    if hot_indices is not None:
        return "foundation"
    return "fused" if indices.is_cuda else "grouped_split"


METHODS = ("auto", "foundation", "grouped", "grouped_split", "fused")
# whether ``sort_frontier=None`` visits the frontier in node-id order where
# every row is read through UVA (``sorts_frontier``; module docstring)
SORT_FRONTIER = True
# ...and with the adjacency cache, where at least this share of the row
# reads goes through UVA (measured, the module docstring: sorting paid with
# a quarter and more, cost with 6-15 %)
SORT_MIN_UVA_SHARE = 0.2
# whether method="fused" stages rows of degree <= d_max (the grouped tile) or
# reads every pick from memory (the foundation's tile). Off: staged, its
# blocks are the grouped kernel's 16 nodes, and the hop ran at 0.37-0.51x
# the foundation's on the large graph's two larger hops (H200, 88faa3a and 7683140)
FUSED_STAGE = False
# neighbours drawn per node at most: a node's draws are one [fanout]-wide row
# of a register tile (and its Floyd draw a loop of fanout steps)
MAX_FANOUT = 1024


def check_method(method: str, d_max: int) -> None:
    """Validate ``sample_neighbors``' ``method`` and ``d_max`` (ValueError
    naming the bad one)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not isinstance(d_max, int) or isinstance(d_max, bool) or not 1 <= d_max <= 1024 \
            or d_max & (d_max - 1):
        raise ValueError(f"d_max must be a power of two in [1, 1024] (the widest row the grouped "
                         f"sampler stages), got {d_max!r}")


def draw_seeds(count: int, generator: torch.Generator | None) -> torch.Tensor:
    """``[count]`` int64 Philox seeds drawn from ``generator`` (CPU)."""
    return torch.randint(0, 2**31 - 1, (count,), generator=generator)
