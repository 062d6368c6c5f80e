"""GARDEN's super-batch degree classifier: an atomic-free multi-block prefix sum.

A hop's frontier holds the new nodes of K sub-batches, contiguous by
sub-batch (``frontier_batch``, non-decreasing; ``batch_ptr[k]`` is where
sub-batch ``k`` starts, ``batch_ptr[K]`` the number of valid nodes). Each
node is one of

- a *full* node: every neighbour is taken (``degree <= fanout`` without
  replacement, any node with fanout -1, an isolated node), no random draw;
- a *random* node: ``fanout`` neighbours are drawn (``degree > fanout``, or
  any node with neighbours when drawing with replacement).

Two scans give everything downstream needs, without one atomic (GARDEN's
Algorithm 1, HashmapsForUniqueClassify + BatchPartition):

- ``C``, the exclusive scan of the neighbours each node draws (``count``):
  node ``i``'s edges go to ``[C(i), C(i) + count(i))`` of the hop's output.
  The frontier is grouped by sub-batch, so the output is too, and within a
  sub-batch the edges are grouped by target in frontier order, as PyG's;
  ``edge_ptr[k] = C(batch_ptr[k])`` is where sub-batch ``k``'s edges start.
- ``F``, the exclusive scan of the full flags: with ``s = batch_ptr[b]`` and
  ``e = batch_ptr[b + 1]`` for node ``i``'s sub-batch ``b``, ``p = F(i) -
  F(s)`` full nodes precede it in its sub-batch and ``num_full[b] = F(e) -
  F(s)`` (GARDEN's BoundPtr) are in it. A full node goes to slot ``s + p``
  of ``order``, a random node to ``s + num_full[b] + (i - s - p)``: within
  each sub-batch, full nodes first, then random nodes, each in frontier
  order. (Algorithm 1 line 21 writes ``BoundPtr[i] + Rank``; the sub-batch
  start must be added too, as here.)

Why two placements. ``order`` groups nodes by class so that a sampling
program meets nodes of one kind: a tile of full nodes skips the random draws
(Floyd's loop) altogether, and a grouped sampler can stage random nodes'
rows together. The *edges* stay in frontier order (``C`` is over the
frontier, not over ``order``): a sampled sub-batch then is, slice for slice,
what sampling that batch alone gives, and splitting the super-batch needs no
reordering. Placing the edges class by class too would save nothing (a
node's edges are written once either way) and would cost a permutation per
hop to restore PyG's order.

The scans are the textbook three passes, for frontiers of any size:

1. ``_classify_kernel`` (one program per ``BLOCK`` nodes): degree, count and
   class of each node; block-local exclusive scans with ``tl.cumsum``; the
   block's two sums.
2. ``_carry_kernel`` (one program per scanned channel): the exclusive scan of
   the block sums, in place, ``BLOCK`` sums at a time with a running carry.
3. ``_place_kernel``: ``global(j) = local(j) + carry[j // BLOCK]`` for any
   ``j`` in ``[0, bound]`` (the scans have ``bound + 1`` slots, the last one
   past every node, so ``C``/``F`` at a sub-batch end are one read too): the
   output offsets, ``order``, and (program 0) the per-sub-batch boundaries.

Sizes stay on the device: the frontier is ``bound`` slots of which
``num_frontier`` are valid, and nothing is synchronised. ``prefix_sum`` is
the same scan on its own (tested against ``torch.cumsum``).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import reference
from ._launch import check_dense_index, interpreted_block, on_device_of, use_triton
from .outputs import ClassifiedFrontier


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


@triton.jit
def _row_bounds(indptr, hot_indptr, b_v, num_hot, mask, TIERED: tl.constexpr):
    """``(indptr[v], indptr[v + 1] - indptr[v])`` of nodes ``b_v``: their
    rows' start and degree, from the adjacency cache's copy for hot nodes."""
    b_start = _load_tiered(hot_indptr, indptr, b_v, num_hot, mask, TIERED)
    b_deg = _load_tiered(hot_indptr, indptr, b_v + 1, num_hot + 1, mask, TIERED) - b_start
    return b_start, b_deg


@triton.jit
def _count_and_class(b_deg, m_n, fanout, ALL: tl.constexpr, REPLACE: tl.constexpr):
    """Neighbours drawn by each node and whether it is a full node (its whole
    row, no random draw); 0 and False outside ``m_n``."""
    if ALL:
        b_count = b_deg
        b_full = m_n
    elif REPLACE:
        b_count = tl.where(b_deg > 0, fanout, 0).to(tl.int64)
        b_full = m_n & (b_deg == 0)
    else:
        b_count = tl.minimum(b_deg, fanout)
        b_full = m_n & (b_deg <= fanout)
    return tl.where(m_n, b_count, 0), b_full


@triton.jit
def _global_exclusive(local, carry, b_j, mask, BLOCK: tl.constexpr):
    # exclusive scan at positions b_j in [0, bound]: block-local part + the block's carry
    b_local = tl.load(local + b_j, mask=mask, other=0)
    return b_local + tl.load(carry + b_j // BLOCK, mask=mask, other=0)


@triton.jit(do_not_specialize=["bound", "num_hot"])
def _bounds_kernel(
    indptr,        # [N + 1] int64, GPU or pinned host
    hot_indptr,    # [num_hot + 1] int64 GPU copy of indptr[:num_hot + 1] (if TIERED)
    frontier,      # [bound] int64 global ids
    visit,         # [bound] int64 frontier positions in the order their bounds are read
    num_frontier,  # [1] int64 device scalar
    row_start,     # [bound] int64 out: indptr[v], at the node's frontier position
    degree,        # [bound] int64 out: indptr[v + 1] - indptr[v], likewise
    bound,
    num_hot,
    TIERED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # ``classify_frontier(sort_by_node=True)``: the reads of ``indptr``
    # follow ``visit`` (node-id order: monotone addresses, few host pages),
    # the writes go back to frontier positions, in GPU memory.
    i_v = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_n = (i_v < bound) & (i_v < tl.load(num_frontier))
    i_n = tl.load(visit + i_v, mask=m_n, other=0)
    b_v = tl.load(frontier + i_n, mask=m_n, other=0)
    b_start, b_deg = _row_bounds(indptr, hot_indptr, b_v, num_hot, m_n, TIERED)
    tl.store(row_start + i_n, b_start, mask=m_n)
    tl.store(degree + i_n, b_deg, mask=m_n)


@triton.jit(do_not_specialize=["num_blocks", "bound", "fanout", "num_hot"])
def _classify_kernel(
    indptr,        # [N + 1] int64, GPU or pinned host
    hot_indptr,    # [num_hot + 1] int64 GPU copy of indptr[:num_hot + 1] (if TIERED)
    frontier,      # [bound] int64 global ids
    num_frontier,  # [1] int64 device scalar: valid prefix of ``frontier``
    row_start,     # [bound] int64 out: indptr[v] (BOUNDS: in, written by _bounds_kernel)
    degree,        # [bound] int64 out: indptr[v + 1] - indptr[v] (0 past num_frontier; BOUNDS: in)
    local_count,   # [bound + 1] int64 out: block-local exclusive scan of count
    local_full,    # [bound + 1] int64 out: block-local exclusive scan of the full flags
    block_sums,    # [2, num_blocks] int64 out: each block's count sum (row 0), full count (row 1)
    num_blocks,    # cdiv(bound + 1, BLOCK)
    bound,
    fanout,
    num_hot,
    ALL: tl.constexpr,
    REPLACE: tl.constexpr,
    TIERED: tl.constexpr,
    BOUNDS: tl.constexpr,  # row_start and degree of the valid nodes are given (_bounds_kernel)
    BLOCK: tl.constexpr,
):
    i_b = tl.program_id(0).to(tl.int64)
    i_n = i_b * BLOCK + tl.arange(0, BLOCK)  # [B] slots; slot ``bound`` is the end marker
    m_slot = i_n < bound
    m_n = m_slot & (i_n < tl.load(num_frontier))  # (a count past bound: bound, by m_slot)
    if BOUNDS:
        b_deg = tl.load(degree + i_n, mask=m_n, other=0)
        tl.store(row_start + i_n, tl.zeros_like(i_n), mask=m_slot & ~m_n)
        tl.store(degree + i_n, b_deg, mask=m_slot & ~m_n)
    else:
        b_v = tl.load(frontier + i_n, mask=m_n, other=0)
        b_start, b_deg = _row_bounds(indptr, hot_indptr, b_v, num_hot, m_n, TIERED)
        tl.store(row_start + i_n, b_start, mask=m_slot)
        tl.store(degree + i_n, b_deg, mask=m_slot)
    b_count, b_full = _count_and_class(b_deg, m_n, fanout, ALL, REPLACE)
    b_full = b_full.to(tl.int64)
    m_scan = i_n <= bound
    tl.store(local_count + i_n, tl.cumsum(b_count, axis=0) - b_count, mask=m_scan)
    tl.store(local_full + i_n, tl.cumsum(b_full, axis=0) - b_full, mask=m_scan)
    tl.store(block_sums + i_b, tl.sum(b_count, axis=0))
    tl.store(block_sums + num_blocks + i_b, tl.sum(b_full, axis=0))


@triton.jit(do_not_specialize=["num_blocks"])
def _carry_kernel(
    block_sums,  # [C, num_blocks] int64, in place: block sums -> exclusive scan of them
    num_blocks,
    BLOCK: tl.constexpr,
):
    # One program per channel walks its row BLOCK sums at a time: the row has
    # bound / BLOCK entries (~10^4 for a 10^7-node frontier), a few loop trips.
    p_row = block_sums + tl.program_id(0).to(tl.int64) * num_blocks
    o_b = tl.arange(0, BLOCK).to(tl.int64)  # [B]
    b_carry = tl.zeros((), dtype=tl.int64)
    # (a ``while`` on a tensor: Triton's interpreter cannot ``range`` over an
    # unspecialised int)
    while tl.min(o_b, axis=0) < num_blocks:
        m_b = o_b < num_blocks
        b_sum = tl.load(p_row + o_b, mask=m_b, other=0)
        tl.store(p_row + o_b, b_carry + tl.cumsum(b_sum, axis=0) - b_sum, mask=m_b)
        b_carry += tl.sum(b_sum, axis=0)
        o_b += BLOCK


@triton.jit(do_not_specialize=["num_blocks", "bound", "fanout", "num_batches"])
def _place_kernel(
    degree,          # [bound] int64 from _classify_kernel
    local_count,     # [bound + 1] int64
    local_full,      # [bound + 1] int64
    carries,         # [2, num_blocks] int64 exclusive scans of the block sums
    frontier_batch,  # [bound] int64 sub-batch of each node (if HAS_BATCH)
    batch_ptr,       # [K + 1] int64 first frontier position of each sub-batch (if HAS_BATCH)
    num_frontier,    # [1] int64 device scalar
    offsets,         # [bound] int64 out: inclusive end of each node's edges (frontier order)
    order,           # [bound] int64 out: frontier position at each slot, full nodes first per sub-batch
    edge_ptr,        # [K + 1] int64 out: first output edge of each sub-batch; [K] = all edges
    num_full,        # [K] int64 out: full nodes of each sub-batch
    num_blocks,
    bound,
    fanout,
    num_batches,     # K
    ALL: tl.constexpr,
    REPLACE: tl.constexpr,
    HAS_BATCH: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    i_n = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # [B]
    n = tl.minimum(tl.maximum(tl.load(num_frontier), 0), bound)  # a count past the buffer: the buffer
    m_slot = i_n < bound
    m_n = m_slot & (i_n < n)
    b_deg = tl.load(degree + i_n, mask=m_n, other=0)
    b_count, b_full = _count_and_class(b_deg, m_n, fanout, ALL, REPLACE)
    b_edge = _global_exclusive(local_count, carries, i_n, m_slot, BLOCK)
    tl.store(offsets + i_n, b_edge + b_count, mask=m_slot)

    if HAS_BATCH:
        b_batch = tl.load(frontier_batch + i_n, mask=m_n, other=0)
        b_first = tl.load(batch_ptr + b_batch, mask=m_n, other=0)
        b_end = tl.load(batch_ptr + b_batch + 1, mask=m_n, other=0)
    else:
        b_first = tl.zeros_like(i_n)
        b_end = tl.zeros_like(i_n) + n
    p_full = carries + num_blocks
    b_full_first = _global_exclusive(local_full, p_full, b_first, m_n, BLOCK)
    b_full_in_batch = _global_exclusive(local_full, p_full, b_end, m_n, BLOCK) - b_full_first
    b_full_before = _global_exclusive(local_full, p_full, i_n, m_n, BLOCK) - b_full_first
    b_random_before = i_n - b_first - b_full_before
    b_slot = tl.where(b_full, b_first + b_full_before, b_first + b_full_in_batch + b_random_before)
    tl.store(order + b_slot, i_n, mask=m_n)

    if tl.program_id(0) == 0:  # the K + 1 boundaries: a handful of values, one program
        o_k = tl.arange(0, BLOCK_K).to(tl.int64)
        while tl.min(o_k, axis=0) <= num_batches:
            m_k = o_k <= num_batches
            m_kk = o_k < num_batches
            if HAS_BATCH:
                b_ptr = tl.load(batch_ptr + o_k, mask=m_k, other=0)
                b_next = tl.load(batch_ptr + o_k + 1, mask=m_kk, other=0)
            else:
                b_ptr = tl.where(o_k == 0, 0, n)
                b_next = tl.where(o_k == 0, n, 0)
            tl.store(edge_ptr + o_k, _global_exclusive(local_count, carries, b_ptr, m_k, BLOCK), mask=m_k)
            b_full_k = _global_exclusive(local_full, p_full, b_next, m_kk, BLOCK) - \
                _global_exclusive(local_full, p_full, b_ptr, m_kk, BLOCK)
            tl.store(num_full + o_k, b_full_k, mask=m_kk)
            o_k += BLOCK_K


@triton.jit(do_not_specialize=["num_blocks", "bound"])
def _local_scan_kernel(
    values,      # [bound] int64
    local,       # [bound] int64 out: block-local inclusive scan
    block_sums,  # [1, num_blocks] int64 out
    num_blocks,
    bound,
    BLOCK: tl.constexpr,
):
    i_b = tl.program_id(0).to(tl.int64)
    i_n = i_b * BLOCK + tl.arange(0, BLOCK)
    m_n = i_n < bound
    b_x = tl.load(values + i_n, mask=m_n, other=0)
    tl.store(local + i_n, tl.cumsum(b_x, axis=0), mask=m_n)
    tl.store(block_sums + i_b, tl.sum(b_x, axis=0))


@triton.jit(do_not_specialize=["bound"])
def _add_carry_kernel(local, carries, out, bound, BLOCK: tl.constexpr):
    i_n = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_n = i_n < bound
    b_x = tl.load(local + i_n, mask=m_n, other=0)
    tl.store(out + i_n, b_x + tl.load(carries + i_n // BLOCK, mask=m_n, other=0), mask=m_n)


def _block_size(block: int | None) -> int:
    # 1024 nodes per program, 4 warps: the scan of a block is a few shuffle
    # rounds, and ~10^4 blocks for a 10^7-node frontier keep pass 2 short.
    # Under the interpreter cost is per op: larger blocks.
    if block is None:
        return interpreted_block(1024, 4096)
    if not isinstance(block, int) or isinstance(block, bool) or block < 2 or block & (block - 1):
        raise ValueError(f"block must be a power of two >= 2, got {block!r}")
    return block


@on_device_of("values")
def prefix_sum(values: torch.Tensor, block: int | None = None) -> torch.Tensor:
    """Inclusive prefix sum of int64 ``values``, atomic-free, any length:
    block-local ``tl.cumsum``, a scan of the block sums, the carries added back.

    Args:
        values: ``[n]`` int64 (GPU, or CPU under the interpreter; otherwise
            ``torch.cumsum`` runs).
        block: elements per program (a power of two; default tuned per backend).

    Returns:
        ``[n]`` int64, equal to ``torch.cumsum(values, 0)``.

    Example:
        >>> prefix_sum(torch.tensor([3, 0, 2], device="cuda"))
        tensor([3, 3, 5], device='cuda:0')
    """
    if not isinstance(values, torch.Tensor) or values.dtype != torch.int64 or values.dim() != 1:
        shape = tuple(getattr(values, "shape", ()))
        raise TypeError(f"values must be a 1-D int64 tensor, got "
                        f"{getattr(values, 'dtype', type(values).__name__)} of shape {shape}")
    block = _block_size(block)
    n = values.numel()
    if not use_triton(values.device):
        return torch.cumsum(values, 0)
    out = torch.empty_like(values)
    if n == 0:
        return out
    values = values.contiguous()
    num_blocks = triton.cdiv(n, block)
    local = torch.empty_like(values)
    sums = torch.empty(num_blocks, dtype=torch.int64, device=values.device)
    _local_scan_kernel[(num_blocks,)](values, local, sums, num_blocks, n, BLOCK=block)
    _carry_kernel[(1,)](sums, num_blocks, BLOCK=block)
    _add_carry_kernel[(num_blocks,)](local, sums, out, n, BLOCK=block)
    return out


def check_num_frontier(num_frontier) -> None:
    """A frontier's valid count: a ``[1]`` int64 tensor (TypeError otherwise)."""
    if not isinstance(num_frontier, torch.Tensor) or num_frontier.numel() != 1 or \
            num_frontier.dtype != torch.int64:
        raise TypeError(f"num_frontier must be a [1] int64 tensor (a device scalar), got "
                        f"{getattr(num_frontier, 'dtype', type(num_frontier).__name__)} "
                        f"{tuple(getattr(num_frontier, 'shape', ()))}")


@on_device_of("frontier")
def classify_frontier(
    indptr: torch.Tensor,
    frontier: torch.Tensor,
    num_frontier: torch.Tensor,
    fanout: int,
    replace: bool = False,
    frontier_batch: torch.Tensor | None = None,
    batch_ptr: torch.Tensor | None = None,
    hot_indptr: torch.Tensor | None = None,
    block: int | None = None,
    sort_by_node: bool = False,
    bounds: tuple | None = None,
) -> ClassifiedFrontier:
    """Classify a (super-)batch frontier into full and random nodes and place
    its output edges, with no atomic and no host synchronisation.

    Args:
        indptr: ``[N + 1]`` int64 CSC pointer (GPU or pinned host memory).
        frontier: ``[bound]`` int64 global ids; the first ``num_frontier`` count.
        num_frontier: ``[1]`` int64 device scalar.
        fanout: neighbours per node, -1 for all.
        replace: sampling with replacement (every node with neighbours draws).
        frontier_batch: ``[bound]`` int64 sub-batch of each node, contiguous
            by sub-batch; None for one batch.
        batch_ptr: ``[K + 1]`` int64 where each sub-batch starts in the
            frontier, ``batch_ptr[K] == num_frontier``; with ``frontier_batch``.
        hot_indptr: the adjacency cache's ``indptr[:A + 1]`` on the GPU, or None.
        block: nodes per program of the scans (a power of two; tests force
            small blocks to cross many).
        sort_by_node: read the row bounds in node-id order (``node_order``;
            the order comes back as ``visit``, for the sampling kernels to
            read the rows in it too), then classify and place in frontier
            order: the same outputs as without it. Where ``indptr`` is read
            through UVA, monotone addresses touch far fewer host pages
            (``kernels.sample``, "Visit order").
        bounds: ``(row_start, degree, visit)`` given instead of read from
            ``indptr``: ``[bound]`` int64 each node's row (its time window,
            ``kernels.sample_temporal``) at its frontier position, and the
            order they were read in (or None); ``sort_by_node`` unread.

    Returns:
        ``ClassifiedFrontier`` (row bounds, degrees, output offsets in
        frontier order, the class-grouped ``order``, ``edge_ptr`` and
        ``num_full`` per sub-batch).

    Example:
        >>> c = classify_frontier(indptr, frontier, num_frontier, 10, frontier_batch=b, batch_ptr=ptr)
        >>> c.edge_ptr    # [K + 1]: where each sub-batch's edges start in the hop's output
    """
    if not isinstance(fanout, int) or isinstance(fanout, bool) or fanout < -1:
        raise ValueError(f"fanout must be an int >= -1 (-1 = all neighbours), got {fanout!r}")
    if (frontier_batch is None) != (batch_ptr is None):
        raise ValueError("frontier_batch and batch_ptr come together (the super-batch's sub-batches)")
    check_dense_index(indptr, "indptr", (torch.int64,))
    if hot_indptr is not None:
        check_dense_index(hot_indptr, "hot_indptr", (torch.int64,))
    check_num_frontier(num_frontier)
    block = _block_size(block)
    device = frontier.device
    num_batches = 1 if batch_ptr is None else batch_ptr.numel() - 1
    if num_batches < 1:
        raise ValueError(f"batch_ptr must have K + 1 >= 2 entries, got {batch_ptr.numel()}")
    if not use_triton(device):
        return reference.classify_frontier(indptr, frontier, num_frontier, fanout, replace,
                                           frontier_batch, batch_ptr, bounds)
    tiered = hot_indptr is not None
    if not tiered:
        hot_indptr = indptr
    # the kernels read every array with stride 1 (no copy when already so)
    frontier = frontier.contiguous()
    frontier_batch = None if frontier_batch is None else frontier_batch.contiguous()
    bound = frontier.numel()
    if bounds is None:
        row_start = torch.empty(bound, dtype=torch.int64, device=device)
        degree = torch.empty_like(row_start)
    else:
        row_start, degree, visit = bounds
    offsets = torch.empty_like(row_start)
    order = torch.empty_like(row_start)
    edge_ptr = torch.empty(num_batches + 1, dtype=torch.int64, device=device)
    num_full = torch.empty(num_batches, dtype=torch.int64, device=device)
    num_blocks = triton.cdiv(bound + 1, block)
    local_count = torch.empty(bound + 1, dtype=torch.int64, device=device)
    local_full = torch.empty_like(local_count)
    sums = torch.empty(2, num_blocks, dtype=torch.int64, device=device)
    has_batch = frontier_batch is not None
    if not has_batch:
        frontier_batch = batch_ptr = frontier  # never read
    flags = dict(ALL=fanout == -1, REPLACE=bool(replace))
    if bounds is None:
        visit = node_order(frontier, num_frontier, indptr.numel() - 1) if sort_by_node else None
    if bounds is None and visit is not None and bound:
        _bounds_kernel[(triton.cdiv(bound, block),)](
            indptr, hot_indptr, frontier, visit, num_frontier, row_start, degree, bound,
            hot_indptr.numel() - 1, TIERED=tiered, BLOCK=block)
    _classify_kernel[(num_blocks,)](indptr, hot_indptr, frontier, num_frontier, row_start, degree,
                                    local_count, local_full, sums, num_blocks, bound, fanout,
                                    hot_indptr.numel() - 1, TIERED=tiered,
                                    BOUNDS=bounds is not None or visit is not None, BLOCK=block, **flags)
    _carry_kernel[(2,)](sums, num_blocks, BLOCK=block)
    _place_kernel[(max(1, triton.cdiv(bound, block)),)](
        degree, local_count, local_full, sums, frontier_batch, batch_ptr, num_frontier, offsets, order,
        edge_ptr, num_full, num_blocks, bound, fanout, num_batches, HAS_BATCH=has_batch,
        BLOCK=block, BLOCK_K=min(128, block), **flags)
    return ClassifiedFrontier(row_start, degree, offsets, order, edge_ptr, num_full, visit)


def node_order(frontier: torch.Tensor, num_frontier: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """``[bound]`` int64 frontier positions in node-id order, the
    ``num_frontier`` valid ones first (the slots past them last, in any
    order); equal ids (a node in several sub-batches) side by side. One
    ``torch.sort`` on the device, no sync: int32 keys where every id fits
    (half a 64-bit sort's radix passes)."""
    bound = frontier.numel()
    valid = torch.arange(bound, device=frontier.device) < num_frontier
    narrow = num_nodes < 2**31 - 1
    dtype = torch.int32 if narrow else torch.int64
    # a slot past the valid prefix holds anything: masked before the cast
    key = torch.where(valid, frontier, num_nodes).to(dtype)
    return torch.sort(key).indices
