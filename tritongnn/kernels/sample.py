"""Uniform neighbour sampling for one hop, on the GPU.

Layout. The graph is CSC: the in-neighbours (message sources) of node ``v``
are ``indices[indptr[v]:indptr[v + 1]]``. ``indptr``/``indices`` may live in
GPU memory or in pinned host memory; the kernels read either directly (UVA),
so the adjacency of a graph larger than the GPU is never staged by the CPU.

Three launches per hop, no host synchronisation:

1. ``_row_kernel``: per frontier node, its row start, degree and the number of
   neighbours it will draw (``count``: ``min(degree, fanout)`` without
   replacement, ``fanout`` (or 0 for an isolated node) with replacement,
   ``degree`` for ``fanout = -1``).
2. ``torch.cumsum(count)``: the output offsets, so the edges of a hop come out
   grouped by target node, in frontier order, like PyG's.
3. ``_sample_kernel`` (fanout >= 0): a ``[BLOCK_NODES, FANOUT_PAD]`` tile, one
   node per row. A node with ``degree <= fanout`` copies its row. A node with
   more neighbours draws ``fanout`` distinct positions with Robert Floyd's
   algorithm: for ``j = degree - fanout .. degree - 1`` draw ``t`` uniform in
   ``[0, j]`` and keep ``j`` if ``t`` was already chosen, else ``t``. Every
   ``fanout``-subset is then equally likely, at ``O(fanout^2)`` work per node
   however large its degree (hubs of power-law graphs cost the same as small
   nodes), without reading the row. With replacement the draws are i.i.d.
   ``_all_kernel`` (fanout = -1) copies whole rows, one output edge per lane.
   ``method="grouped"`` swaps this kernel for ``sample_grouped``'s (GARDEN's
   GPS): the same draws (``_draw_positions``), but rows of degree <= ``d_max``
   are staged with one coalesced load and the picks served from the tile.

Random numbers are Philox (``tl.randint``) keyed by a per-launch seed drawn
from the caller's ``torch.Generator`` and by (node position, draw): results are
reproducible for a given generator state, independent of the launch shape.
The seed is read from device memory, so a CUDA graph of the launches replays
with new seeds.

The adjacency may come in two tiers (the adjacency cache): after hot-first
relabelling, the rows of nodes ``< A`` are a prefix of the CSC arrays, kept as
GPU copies ``hot_indptr``/``hot_indices``; a node's row bounds and a
position's neighbour are read from the GPU copy when ``v < A`` (position
``< indptr[A]``), else from the full arrays, usually in pinned host memory.

Sizes need not be known on the host: the frontier is a buffer of ``bound``
slots of which the first ``num_frontier`` (a device scalar) are valid, so a
whole multi-hop batch is sampled without one ``.item()`` in between.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import reference
from .outputs import HopSample
from ._launch import check_readable, interpreted_block, next_power_of_2, use_triton


@triton.jit
def _load_tiered(hot, cold, b_idx, num_hot, mask, TIERED: tl.constexpr):
    """``cold[b_idx]``, with ``b_idx < num_hot`` read from ``hot`` instead
    (the adjacency cache: hot-first ids make "cached?" one comparison)."""
    if TIERED:
        m_hot = mask & (b_idx < num_hot)
        b_hot = tl.load(hot + b_idx, mask=m_hot, other=0)
        b_cold = tl.load(cold + b_idx, mask=mask & (b_idx >= num_hot), other=0)
        b_out = tl.where(m_hot, b_hot, b_cold)
    else:
        b_out = tl.load(cold + b_idx, mask=mask, other=0)
    return b_out


@triton.jit(do_not_specialize=["bound", "fanout", "num_hot"])
def _row_kernel(
    indptr,        # [N + 1] int64, GPU or pinned host
    hot_indptr,    # [num_hot + 1] int64 GPU copy of indptr[:num_hot + 1] (if TIERED)
    frontier,      # [bound] int64 global ids of the nodes to sample for
    num_frontier,  # [1] int64 device scalar: valid prefix of ``frontier``
    row_start,     # [bound] int64 out: indptr[v]
    degree,        # [bound] int64 out: indptr[v + 1] - indptr[v]
    count,         # [bound] int64 out: neighbours drawn (0 beyond num_frontier)
    bound,         # number of slots in the buffers
    fanout,        # neighbours per node (ignored when ALL)
    num_hot,       # nodes < num_hot read their row bounds from hot_indptr
    ALL: tl.constexpr,  # fanout == -1: every neighbour
    REPLACE: tl.constexpr,
    TIERED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i_n = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_slot = i_n < bound
    m_n = m_slot & (i_n < tl.load(num_frontier))
    b_v = tl.load(frontier + i_n, mask=m_n, other=0)
    b_start = _load_tiered(hot_indptr, indptr, b_v, num_hot, m_n, TIERED)
    b_deg = _load_tiered(hot_indptr, indptr, b_v + 1, num_hot + 1, m_n, TIERED) - b_start
    if ALL:
        b_count = b_deg
    elif REPLACE:
        b_count = tl.where(b_deg > 0, fanout, 0).to(tl.int64)
    else:
        b_count = tl.minimum(b_deg, fanout)
    tl.store(row_start + i_n, b_start, mask=m_slot)
    tl.store(degree + i_n, b_deg, mask=m_slot)
    tl.store(count + i_n, b_count, mask=m_slot)


@triton.jit
def _uniform_below(seed, offset, n):
    # (32 random bits * n) >> 32 is uniform in [0, n) up to a bias of n / 2^32,
    # far below what any test of a real degree can see; no modulo, no loop.
    b_r = tl.randint(seed, offset).to(tl.uint32, bitcast=True).to(tl.int64)
    return (b_r * n) >> 32


@triton.jit
def _draw_positions(seed, i_n, b_deg, FANOUT: tl.constexpr, FANOUT_PAD: tl.constexpr,
                    REPLACE: tl.constexpr, BLOCK_NODES: tl.constexpr):
    """Row positions drawn for a tile of nodes: ``[BN, FP]`` picks and the
    ``[BN]`` count of those that are edges. The Philox counter of draw ``j``
    of the node at frontier position ``i`` is ``i * FANOUT_PAD + j``, so every
    kernel calling this draws the same positions for the same (seed, position),
    whatever its tile shape or node order."""
    o_j = tl.arange(0, FANOUT_PAD)  # [FP]
    if REPLACE:
        b_pick = _uniform_below(seed, i_n[:, None] * FANOUT_PAD + o_j[None, :], b_deg[:, None])  # [BN, FP]
        b_count = tl.where(b_deg > 0, FANOUT, 0)
    else:
        # Floyd's algorithm, all nodes of the tile in lock step.
        b_chosen = tl.full([BLOCK_NODES, FANOUT_PAD], -1, tl.int64)
        for s in tl.static_range(FANOUT):
            b_top = b_deg - FANOUT + s  # [BN] draw t in [0, b_top]
            b_t = _uniform_below(seed, i_n * FANOUT_PAD + s, b_top + 1)
            b_seen = tl.sum((b_chosen == b_t[:, None]).to(tl.int32), axis=1) > 0
            b_new = tl.where(b_seen, b_top, b_t)
            b_chosen = tl.where(o_j[None, :] == s, b_new[:, None], b_chosen)
        b_full = b_deg <= FANOUT
        b_pick = tl.where(b_full[:, None], o_j[None, :], b_chosen)
        b_count = tl.minimum(b_deg, FANOUT)
    return b_pick, b_count


@triton.jit(do_not_specialize=["bound", "num_hot_edges"])
def _sample_kernel(
    indices,         # [E] int32/int64 CSC sources, GPU or pinned host
    hot_indices,     # [num_hot_edges] GPU copy of indices[:num_hot_edges] (if TIERED)
    frontier_local,  # [bound] int64 local id of each frontier node (edge target)
    row_start,       # [bound] int64 from _row_kernel
    degree,          # [bound] int64 from _row_kernel
    offsets,         # [bound] int64 inclusive cumsum of count
    num_frontier,    # [1] int64 device scalar
    out_src,         # [bound * fanout] int64 out: global id of the sampled neighbour
    out_dst,         # [bound * fanout] int64 out: local id of the node it was sampled for
    out_eid,         # [bound * fanout] int64 out: CSC position of the edge (if WRITE_EID)
    bound,
    seed,            # [1] int64 device scalar: Philox seed of this launch (read on the
                     # device, so a captured CUDA graph replays with fresh seeds)
    num_hot_edges,   # CSC positions < num_hot_edges are read from hot_indices
    FANOUT: tl.constexpr,
    FANOUT_PAD: tl.constexpr,  # next power of two >= FANOUT
    REPLACE: tl.constexpr,
    WRITE_EID: tl.constexpr,
    TIERED: tl.constexpr,
    BLOCK_NODES: tl.constexpr,
):
    i_n = tl.program_id(0).to(tl.int64) * BLOCK_NODES + tl.arange(0, BLOCK_NODES)
    m_n = (i_n < bound) & (i_n < tl.load(num_frontier))
    seed = tl.load(seed)
    b_start = tl.load(row_start + i_n, mask=m_n, other=0)
    b_deg = tl.load(degree + i_n, mask=m_n, other=0)
    b_end = tl.load(offsets + i_n, mask=m_n, other=0)
    b_dst = tl.load(frontier_local + i_n, mask=m_n, other=0)
    o_j = tl.arange(0, FANOUT_PAD)  # [FP]
    b_pick, b_count = _draw_positions(seed, i_n, b_deg, FANOUT, FANOUT_PAD, REPLACE,
                                      BLOCK_NODES)  # [BN, FP], [BN]

    m_e = m_n[:, None] & (o_j[None, :] < b_count[:, None])  # [BN, FP]
    b_pos = b_start[:, None] + b_pick  # CSC position of the edge
    b_src = _load_tiered(hot_indices, indices, b_pos, num_hot_edges, m_e, TIERED).to(tl.int64)
    o_out = (b_end - b_count)[:, None] + o_j[None, :]
    tl.store(out_src + o_out, b_src, mask=m_e)
    tl.store(out_dst + o_out, tl.broadcast_to(b_dst[:, None], (BLOCK_NODES, FANOUT_PAD)), mask=m_e)
    if WRITE_EID:
        tl.store(out_eid + o_out, b_pos, mask=m_e)


@triton.jit(do_not_specialize=["num_edges", "num_hot_edges"])
def _all_kernel(
    indices,         # [E] CSC sources
    hot_indices,     # [num_hot_edges] GPU copy of indices[:num_hot_edges] (if TIERED)
    owner,           # [num_edges] int64 frontier position owning each output edge
    frontier_local,  # [bound] int64
    row_start,       # [bound] int64
    offsets,         # [bound] int64 inclusive cumsum of count (= degree here)
    degree,          # [bound] int64
    out_src, out_dst, out_eid,
    num_edges,
    num_hot_edges,
    WRITE_EID: tl.constexpr,
    TIERED: tl.constexpr,
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


def _launch_settings(fanout_pad: int) -> tuple[int, int]:
    # ~2048 tile elements per program keeps Floyd's [BN, FP] compare in
    # registers; 4 warps. Fanout 15 -> 128 nodes per program.
    block_nodes = max(16, min(256, 2048 // fanout_pad))
    return interpreted_block(block_nodes, 256), 4


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
    method: str = "foundation",
    d_max: int = 64,
) -> HopSample:
    """Sample up to ``fanout`` in-neighbours of every frontier node.

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
        seed: ``[1]`` int64 Philox seed on the frontier's device, used
            instead of a draw from ``generator`` by the Triton kernels.
        hot_indptr, hot_indices: the adjacency cache, GPU copies of
            ``indptr[:A + 1]`` and ``indices[:indptr[A]]`` for the first A
            (hot-first) nodes: their rows are read from these, the others
            from ``indptr``/``indices``. Both or neither.
        method: which kernel reads the neighbour ids (the draws, hence the
            edges, are the same for a given seed): ``"foundation"`` reads every
            pick from memory; ``"grouped"`` (GARDEN's GPS,
            ``kernels.sample_grouped``) stages rows of degree <= ``d_max`` with
            one coalesced load and picks from the staged tile;
            ``"grouped_split"`` runs its full and random nodes as two kernels
            on two streams. The CPU reference ignores it.
        d_max: widest row the grouped kernels stage, a power of two in
            [1, 1024]; hubs above it pick from memory.

    Returns:
        ``HopSample``: edges grouped by target in frontier order. With
        ``fanout >= 0`` its buffers have ``bound * fanout`` slots and nothing
        is synchronised; with ``fanout = -1`` they are sized exactly (one sync).

    Example:
        >>> hop = sample_neighbors(indptr, indices, seeds, torch.arange(len(seeds)),
        ...                        torch.tensor([len(seeds)]), fanout=10)
    """
    if not isinstance(fanout, int) or isinstance(fanout, bool) or fanout < -1:
        raise ValueError(f"fanout must be an int >= -1 (-1 = all neighbours), got {fanout!r}")
    check_method(method, d_max)
    device = frontier.device
    if not use_triton(device):
        return reference.sample_neighbors(indptr, indices, frontier, frontier_local,
                                          num_frontier, fanout, replace, generator, return_eid)
    check_readable(indptr, device, "indptr")
    check_readable(indices, device, "indices")
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
    num_hot, num_hot_edges = hot_indptr.numel() - 1, hot_indices.numel()
    bound = frontier.numel()
    row_start = torch.empty(bound, dtype=torch.int64, device=device)
    degree = torch.empty_like(row_start)
    count = torch.empty_like(row_start)
    if bound:
        grid = (triton.cdiv(bound, 512),)
        _row_kernel[grid](indptr, hot_indptr, frontier, num_frontier, row_start, degree, count,
                          bound, fanout, num_hot, ALL=fanout == -1, REPLACE=replace,
                          TIERED=tiered, BLOCK=512)
    offsets = torch.cumsum(count, 0)
    num_edges = offsets[-1:] if bound else torch.zeros(1, dtype=torch.int64, device=device)

    if fanout == -1:
        # Only here is the output size unknown up to the sum of degrees.
        total = int(num_edges.item())
        owner = torch.repeat_interleave(torch.arange(bound, device=device), count,
                                        output_size=total)
        src = torch.empty(total, dtype=torch.int64, device=device)
        dst = torch.empty_like(src)
        eid = torch.empty_like(src) if return_eid else src
        if total:
            _all_kernel[(triton.cdiv(total, 1024),)](
                indices, hot_indices, owner, frontier_local, row_start, offsets, degree,
                src, dst, eid, total, num_hot_edges, WRITE_EID=return_eid, TIERED=tiered,
                BLOCK=1024)
        return HopSample(src, dst, eid if return_eid else None, num_edges)

    slots = bound * fanout
    src = torch.empty(slots, dtype=torch.int64, device=device)
    dst = torch.empty_like(src)
    eid = torch.empty_like(src) if return_eid else src
    if slots:
        if seed is None:
            seed = torch.full((1,), int(draw_seeds(1, generator)[0]), dtype=torch.int64, device=device)
        if method != "foundation":
            # imported here: sample_grouped builds on this module's device helpers
            from .sample_grouped import launch_grouped
            launch_grouped(indices, hot_indices, frontier_local, row_start, degree, offsets, num_frontier,
                           src, dst, eid, seed, num_hot_edges, fanout, replace, return_eid, tiered, d_max,
                           split=method == "grouped_split")
            return HopSample(src, dst, eid if return_eid else None, num_edges)
        fanout_pad = next_power_of_2(fanout)
        block_nodes, num_warps = _launch_settings(fanout_pad)
        _sample_kernel[(triton.cdiv(bound, block_nodes),)](
            indices, hot_indices, frontier_local, row_start, degree, offsets, num_frontier,
            src, dst, eid, bound, seed, num_hot_edges,
            FANOUT=fanout, FANOUT_PAD=fanout_pad, REPLACE=replace, WRITE_EID=return_eid,
            TIERED=tiered, BLOCK_NODES=block_nodes, num_warps=num_warps)
    return HopSample(src, dst, eid if return_eid else None, num_edges)


METHODS = ("foundation", "grouped", "grouped_split")


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
