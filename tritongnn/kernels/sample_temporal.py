"""Temporal neighbour sampling of one hop (PyG's ``time_attr=``).

``sample.sample_neighbors(seed_time=..., node_time= | edge_time=...)``
comes here: each frontier slot carries the time of the seed whose subgraph
it is in (PyG samples temporally with ``disjoint=True``, every seed its own
subgraph), and only neighbours no later than it may be sampled.

Semantics (pyg-lib's ``neighbor_kernel.cpp``, which PyG 2.8 calls):

- Node-level time: row position ``p`` of a node is admissible iff
  ``node_time[indices[p]] <= seed_time``; edge-level time: iff
  ``edge_time[p] <= seed_time`` (``edge_time`` in CSC order).
- pyg-lib needs every row sorted by time, non-decreasing (PyG's ``to_csc``
  sorts it so, stably, unless ``is_sorted=True``), and finds the
  admissible positions as the prefix before ``upper_bound(seed_time)``.
  This module keeps that contract: rows sorted by time are a precondition
  (``rows_sorted_by_time`` checks it), the admissible prefix is found by a
  binary search, ``O(log degree)`` time reads a node.
- ``"uniform"``: the node samples its admissible prefix as the uniform
  sampler samples a row: ``min(fanout, admissible)`` distinct positions
  without replacement (the whole prefix where it fits), ``fanout`` i.i.d.
  ones with replacement (none where nothing is admissible), every one
  with fanout ``-1``.
- ``"last"``: the window is the prefix's last ``min(fanout, admissible)``
  positions, the most recent admissible neighbours (pyg-lib's
  ``row_start = max(row_start, row_end - count)``): without replacement
  all of them in row (time) order; with replacement ``fanout`` i.i.d.
  draws from that window, as pyg-lib draws; fanout ``-1`` every
  admissible one.

Algorithm. One kernel, ``_window_kernel``, turns each frontier node's row
into its window: the row's start and degree become the window's. The
classifier then takes those bounds (``classify_frontier(bounds=)``) and
the uniform kernels sample the windows unchanged: the same output offsets
(an exclusive scan of ``min(window, fanout)``), ``order``, Philox streams
and id map as uniform sampling, and the same edges the uniform kernels
would draw from rows that were the windows. The binary search runs all
nodes of a block in lock step, ``ceil(log2(degree + 1))`` rounds for the
block's largest row; a round reads one time a node (and, with node-level
time, first the neighbour's id): scattered reads, like the row bounds'.
With ``visit`` (the frontier in node-id order, ``classify.node_order``)
the rows are read in that order, as the bounds kernel reads them.

Time values: int64 as PyG's (pyg-lib reads ``int64_t``), or int32,
float32, float64; ``seed_time`` in the dtype of the time array.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._launch import check_dense_index, check_readable, interpreted_block
from .classify import _load_tiered, _row_bounds, classify_frontier, node_order

STRATEGIES = ("uniform", "last")
TIME_DTYPES = (torch.int64, torch.int32, torch.float32, torch.float64)


@triton.jit(do_not_specialize=["bound", "num_hot", "num_hot_edges", "fanout"])
def _window_kernel(
    indptr,        # [N + 1] int64 CSC pointer, GPU or pinned host
    hot_indptr,    # [num_hot + 1] int64 GPU copy of indptr[:num_hot + 1] (if TIERED)
    indices,       # [E] int32/int64 CSC sources (read with node-level time), GPU or pinned host
    hot_indices,   # [num_hot_edges] GPU copy of indices[:num_hot_edges] (if TIERED)
    time,          # [N] node_time by node id, or [E] edge_time by CSC position (EDGE_TIME)
    frontier,      # [bound] int64 global ids
    visit,         # [bound] int64 frontier positions in the order rows are read (if HAS_VISIT)
    seed_time,     # [bound] time of each frontier slot's seed, in time's dtype
    num_frontier,  # [1] int64 device scalar
    row_start,     # [bound] int64 out: first CSC position of each node's window
    degree,        # [bound] int64 out: its length
    bound,
    num_hot,
    num_hot_edges,
    fanout,        # with LAST: the window is the admissible prefix's last fanout positions (-1: all)
    EDGE_TIME: tl.constexpr,
    LAST: tl.constexpr,
    TIERED: tl.constexpr,
    HAS_VISIT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i_v = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_n = (i_v < bound) & (i_v < tl.load(num_frontier))
    if HAS_VISIT:
        i_n = tl.load(visit + i_v, mask=m_n, other=0)
    else:
        i_n = i_v
    b_v = tl.load(frontier + i_n, mask=m_n, other=0)
    b_start, b_deg = _row_bounds(indptr, hot_indptr, b_v, num_hot, m_n, TIERED)
    b_seed = tl.load(seed_time + i_n, mask=m_n)
    # upper bound in a row sorted by time: the first position whose time is past the seed's;
    # the admissible prefix is [0, b_lo) once b_lo == b_hi
    b_lo = tl.zeros([BLOCK], tl.int64)
    b_hi = tl.where(m_n, b_deg, 0)
    while tl.max(b_hi - b_lo, axis=0) > 0:
        m_s = b_lo < b_hi
        b_mid = b_lo + (b_hi - b_lo) // 2
        b_pos = b_start + b_mid
        if EDGE_TIME:
            b_time = tl.load(time + b_pos, mask=m_s)
        else:
            b_nbr = _load_tiered(hot_indices, indices, b_pos, num_hot_edges, m_s, TIERED)
            b_time = tl.load(time + b_nbr, mask=m_s)
        m_le = b_time <= b_seed
        b_lo = tl.where(m_s & m_le, b_mid + 1, b_lo)
        b_hi = tl.where(m_s & ~m_le, b_mid, b_hi)
    b_len = b_lo
    if LAST:
        if fanout >= 0:
            b_skip = tl.maximum(b_len - fanout, 0)
            b_start += b_skip
            b_len -= b_skip
    tl.store(row_start + i_n, b_start, mask=m_n)
    tl.store(degree + i_n, b_len, mask=m_n)


def check_temporal(seed_time, node_time, edge_time, temporal_strategy, frontier, indptr, indices,
                   edge_weight) -> bool:
    """``sample_neighbors``' temporal arguments checked (TypeError/ValueError
    naming the bad one); True where the hop is temporal."""
    if temporal_strategy not in STRATEGIES:
        raise ValueError(f"temporal_strategy must be one of {STRATEGIES}, got {temporal_strategy!r}")
    if node_time is None and edge_time is None:
        if seed_time is not None:
            raise ValueError("seed_time is given without node_time or edge_time: there is no time to compare")
        return False
    if node_time is not None and edge_time is not None:
        raise ValueError("node_time and edge_time exclude each other (one time attribute, node- or edge-level)")
    if seed_time is None:
        raise ValueError("node_time/edge_time need seed_time, the time of each frontier slot's seed")
    if edge_weight is not None:
        raise ValueError("edge_weight and temporal sampling exclude each other (pyg-lib refuses both together)")
    name, time = ("node_time", node_time) if node_time is not None else ("edge_time", edge_time)
    check_dense_index(time, name, TIME_DTYPES)
    expected = indptr.numel() - 1 if node_time is not None else indices.numel()
    if time.numel() != expected:
        what = "node" if node_time is not None else "CSC position"
        raise ValueError(f"{name} has {time.numel()} entries, expected {expected} (one per {what})")
    if not isinstance(seed_time, torch.Tensor) or seed_time.dim() != 1 or seed_time.dtype != time.dtype:
        raise TypeError(f"seed_time must be a 1-D tensor of {name}'s dtype {time.dtype}, got "
                        f"{getattr(seed_time, 'dtype', type(seed_time).__name__)} of shape "
                        f"{tuple(getattr(seed_time, 'shape', ()))}")
    if seed_time.numel() != frontier.numel():
        raise ValueError(f"seed_time has {seed_time.numel()} slots, the frontier {frontier.numel()} "
                         f"(one seed time per frontier slot)")
    if seed_time.device != frontier.device:
        raise ValueError(f"seed_time lives on {seed_time.device}, the frontier on {frontier.device}")
    return True


def time_windows(indptr, indices, frontier, num_frontier, seed_time, fanout: int, temporal_strategy: str,
                 node_time=None, edge_time=None, hot_indptr=None, hot_indices=None, visit=None):
    """``(row_start, degree)``, ``[bound]`` int64 each: every valid frontier
    slot's window of admissible positions (module docstring), written at its
    frontier position; slots past ``num_frontier`` unwritten. Rows must be
    sorted by time. ``hot_indptr``/``hot_indices``: the adjacency cache's GPU
    prefixes, or None; ``visit``: the order rows are read in, or None."""
    device = frontier.device
    tiered = hot_indptr is not None
    time = node_time if node_time is not None else edge_time
    check_readable(time, device, "node_time" if node_time is not None else "edge_time")
    bound = frontier.numel()
    row_start = torch.empty(bound, dtype=torch.int64, device=device)
    degree = torch.empty_like(row_start)
    if bound:
        block = interpreted_block(256, 1024)
        _window_kernel[(triton.cdiv(bound, block),)](
            indptr, hot_indptr if tiered else indptr, indices, hot_indices if tiered else indices, time,
            frontier, frontier if visit is None else visit, seed_time.contiguous(), num_frontier, row_start,
            degree, bound, hot_indptr.numel() - 1 if tiered else 0, hot_indices.numel() if tiered else 0,
            fanout, EDGE_TIME=edge_time is not None, LAST=temporal_strategy == "last", TIERED=tiered,
            HAS_VISIT=visit is not None, BLOCK=block)
    return row_start, degree


def classify_temporal(indptr, indices, frontier, num_frontier, seed_time, fanout: int, replace: bool,
                      temporal_strategy: str, node_time, edge_time, frontier_batch, batch_ptr,
                      hot_indptr, hot_indices, sort_by_node: bool):
    """``classify_frontier`` over the frontier's time windows instead of its
    rows: row bounds, counts ``min(window, fanout)``, offsets and ``order``
    for the uniform kernels to sample the windows."""
    visit = node_order(frontier, num_frontier, indptr.numel() - 1) if sort_by_node else None
    row_start, degree = time_windows(indptr, indices, frontier, num_frontier, seed_time, fanout,
                                     temporal_strategy, node_time, edge_time, hot_indptr, hot_indices, visit)
    return classify_frontier(indptr, frontier, num_frontier, fanout, replace, frontier_batch, batch_ptr,
                             hot_indptr, bounds=(row_start, degree, visit))


def rows_sorted_by_time(indptr: torch.Tensor, indices: torch.Tensor, node_time=None, edge_time=None) -> bool:
    """Whether every row is sorted by time, non-decreasing (the kernels'
    precondition, and pyg-lib's): ``node_time[indices[p]]`` or
    ``edge_time[p]`` along each row. One pass over the edges, in chunks of
    2^24 positions, where the arrays are."""
    time = node_time if node_time is not None else edge_time
    num_edges = indices.numel()
    if num_edges < 2:
        return True
    # position p > 0 may step down only where a row starts at it
    starts = torch.zeros(num_edges, dtype=torch.bool, device=indptr.device)
    first = indptr[:-1][(indptr[1:] > indptr[:-1]) & (indptr[:-1] > 0)]
    starts[first] = True
    step = 1 << 24
    for lo in range(1, num_edges, step):
        hi = min(num_edges, lo + step)
        pos = torch.arange(lo - 1, hi, device=indptr.device)
        t = edge_time[pos.to(time.device)] if edge_time is not None else \
            node_time[indices[pos.to(indices.device)].to(time.device, torch.int64)]
        down = (t[1:] < t[:-1]).to(indptr.device) & ~starts[lo:hi]
        if bool(down.any()):
            return False
    return True
