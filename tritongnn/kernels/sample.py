"""Neighbour sampling for one hop, on the GPU: the dispatcher.

Layout. The graph is CSC: the in-neighbours (message sources) of node ``v``
are ``indices[indptr[v]:indptr[v + 1]]``. ``indptr``/``indices`` may live in
GPU memory or in pinned host memory; the kernels read either directly (UVA),
so the adjacency of a graph larger than the GPU is never staged by the CPU.

Methods (``sample_neighbors(method=)``), the same edges for the same seed:

- ``"foundation"`` (``sample_foundation``): four launches a hop, no host
  synchronisation. ``kernels.classify`` (three passes, an atomic-free
  multi-block prefix sum) finds each frontier node's row start, degree and
  the number of neighbours it draws (``count``: ``min(degree, fanout)``
  without replacement, ``fanout`` (or 0 for an isolated node) with it,
  ``degree`` for ``fanout = -1``), the output offsets (exclusive scan of
  ``count``, so a hop's edges come out grouped by target in frontier order,
  like PyG's) and ``order``, full nodes (``degree <= fanout``) first per
  sub-batch; a sampling kernel then draws and reads the picks. A node with
  more neighbours than ``fanout`` draws ``fanout`` distinct positions with
  Robert Floyd's algorithm (``sample_common``): for ``j = degree - fanout
  .. degree - 1`` draw ``t`` uniform in ``[0, j]`` and keep ``j`` if ``t``
  was already chosen, else ``t``, so every subset is equally likely at
  ``O(fanout^2)`` work per node however large its degree.
- ``"grouped"`` / ``"grouped_split"`` (``sample_grouped``, GARDEN's GPS):
  the same classifier and draws, rows of degree <= ``d_max`` staged by one
  coalesced load and the picks served from the tile; the split variant runs
  full and random nodes as two kernels on two streams.
- ``"fused"`` (``sample_fused``): one launch, each program classifying and
  scanning its block of the frontier, drawing one node a lane, and finding
  where its edges start by a look-back over the blocks before it.
- ``"auto"``: chosen from where the rows are read (``auto_method``).

With ``edge_weight`` (PyG's ``weight_attr``) every method samples by weight
through one kernel, ``sample_weighted``, after the same classifier: the
method then only names the uniform kernels it would have run. With a time
(PyG's ``time_attr``: ``seed_time`` and ``node_time`` or ``edge_time``)
``sample_temporal`` turns each row into its window of admissible positions
before the classifier, and the uniform kernels sample the windows
(``"fused"``, which classifies rows itself, runs as ``"foundation"``).

Random numbers are Philox (``tl.randint4x``, four words an evaluation)
keyed by a per-launch seed drawn from the caller's ``torch.Generator`` and
by (node position, draw): results are reproducible for a given generator
state, independent of the launch shape and of the order in which programs
take the nodes. The seed is read from device memory, so a CUDA graph of the
launches replays with new seeds.

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
a hop therefore sorts its frontier by node id (``classify.node_order``, one
``torch.sort`` of 32-bit keys on the device), reads the row bounds in that
order (``classify_frontier(sort_by_node=True)``) and the sampling kernels
take their nodes in it (``visit``; the split kernels full nodes first, each
part still sorted). Every output still goes to its frontier position's slots
with its position's draws: the same edges, bit for bit. In a super-batch
the K frontiers are sorted together, so a node of several sub-batches is
read once into the L2 for all of them, and K frontiers touch each page more
densely than one. Measured on an H200 (``bench/results/README.md``; 5x10^7
nodes, 10^9 edges, batch 8000, [15, 10, 5]): the hops 5.2x (the third) and
2.3x (the second) faster for the foundation kernel, a whole batch 3.7x
(29.6 -> 8.0 ms); K = 8 then samples 1.39-1.61x as fast a batch as K = 1
over methods and runs (in frontier order 1.03-1.17x). On cnr2000, whose 16
MB of arrays stay in the L2, sorting only costs (hops 0.47-0.73x; a
super-batch of 8 gains nothing from any of its hops sorted): there the
frontier keeps its order. With the adjacency cache (the same graph renamed
hot-first by degree, the rows of a quarter or half of its edges in GPU
memory) sorting makes a batch 2.4-3.1x faster at K = 1 and 3.3-4.0x at K =
8 with [15, 10, 5], 1.7-1.9x and 2.5-2.9x with [5, 10, 15], for every
kernel that sorts; with three quarters cached 1.4x and 1.7x; with 90 %
cached it costs (0.94x, 0.78x). A node is met there about as often as its
degree, so those shares are also the row reads' shares. At ogbn-papers100M
scale, whose cache is ordered by profiled reads, a profile serves more
reads than its share of the edges, and sorting costs there too: with a 24
GB budget (80 % of the edges' bytes cached, 94 % of the row reads served)
sampling took 1.07 s an epoch sorted with the grouped kernel against 0.76 s
in frontier order with the foundation's; with 6 GB (70 %, 85 %) 0.70-0.71 s
against 0.67 s. Hence ``SORT_MIN_UVA_SHARE`` of the reads, which the loader
takes from its cache plan (``NeighborSampler``'s ``adjacency_hit_rate``).
The fused kernel, whose look-back scan walks the frontier in order, does
not sort.

Sizes need not be known on the host: the frontier is a buffer of ``bound``
slots of which the first ``num_frontier`` (a device scalar) are valid, so a
whole multi-hop batch is sampled without one ``.item()`` in between.
"""
from __future__ import annotations

import torch
import triton

from . import reference
from .classify import check_num_frontier, classify_frontier
from .outputs import HopSample
from ._launch import check_dense_index, check_readable, l2_bytes, next_power_of_2, on_device_of, use_triton
from .sample_foundation import _all_kernel, _launch_settings, _sample_kernel
from .sample_fused import launch_fused
from .sample_grouped import launch_grouped
from .sample_temporal import check_temporal, classify_temporal
from .sample_weighted import launch_weighted


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
    edge_weight: torch.Tensor | None = None,
    seed_time: torch.Tensor | None = None,
    node_time: torch.Tensor | None = None,
    edge_time: torch.Tensor | None = None,
    temporal_strategy: str = "uniform",
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
        d_max: widest row the grouped kernels stage, a power of two in [1,
            1024]; hubs above it pick from memory.
        sort_frontier: read the frontier's row bounds and rows in node-id
            order (module docstring, "Visit order"; the same edges). None:
            where every row is read through UVA and the host arrays outgrow
            the L2 (``sorts_frontier``). The fused kernel reads in frontier
            order only: True with it raises ValueError.
        edge_weight: ``[E]`` float32 non-negative weight of each CSC
            position (where ``indices`` is), or None (uniform): neighbours
            are drawn in proportion to weight (``kernels.sample_weighted``,
            PyG's ``weight_attr``) by one kernel whatever the ``method``.
        seed_time: ``[bound]`` the time of each frontier slot's seed (PyG's
            seed time, in the time array's dtype), with ``node_time`` or
            ``edge_time``: only neighbours no later than it are sampled
            (``kernels.sample_temporal``; rows sorted by time).
        node_time: ``[N]`` int64 (or int32/float) time of each node (GPU or
            pinned host): position ``p`` admissible iff
            ``node_time[indices[p]] <= seed_time``.
        edge_time: ``[E]`` time of each CSC position: ``p`` admissible iff
            ``edge_time[p] <= seed_time``.
        temporal_strategy: ``"uniform"`` among the admissible positions, or
            ``"last"``, the ``fanout`` most recent (PyG's).

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
    weighted = edge_weight is not None and fanout > 0
    if edge_weight is not None:
        check_dense_index(edge_weight, "edge_weight", (torch.float32,))
        if edge_weight.numel() != indices.numel():
            raise ValueError(f"edge_weight has {edge_weight.numel()} entries, indices {indices.numel()} "
                             f"(one weight per CSC position)")
    temporal = check_temporal(seed_time, node_time, edge_time, temporal_strategy, frontier, indptr, indices,
                              edge_weight)
    if weighted or (temporal and method == "fused"):  # these follow the classifier, whatever the method
        method = "foundation"
    # after the checks: the rule and auto read the arrays' placement and sizes
    if sort_frontier is None:
        sort_frontier = visits_in_node_order(method, indptr, indices, device, hot_indptr, hot_indices)
    if method == "auto":
        method = auto_method(indices, hot_indices, device, sort_frontier)
        method = "foundation" if temporal and method == "fused" else method
    if sort_frontier and method == "fused" and fanout >= 0:
        raise ValueError("sort_frontier=True: method='fused' reads the frontier in its own order "
                         "(its look-back scan); take another method or sort_frontier=None")
    if not use_triton(device) and weighted:
        return reference.sample_weighted(indptr, indices, edge_weight, frontier, frontier_local, num_frontier,
                                         fanout, replace, generator, return_eid, frontier_batch, batch_ptr)
    if not use_triton(device) and temporal:
        return reference.sample_temporal(indptr, indices, frontier, frontier_local, num_frontier, fanout, replace,
                                         generator, return_eid, frontier_batch, batch_ptr, seed_time,
                                         temporal_strategy, node_time, edge_time)
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
                edge_ptr = launch_fused(indptr, hot_indptr, indices, hot_indices, frontier.contiguous(),
                                        frontier_local, num_frontier, frontier_batch, batch_ptr, seed, src, dst,
                                        eid, batch, fanout, replace, return_eid, tiered)
            else:  # no slot: no edge in any sub-batch
                edge_ptr = torch.zeros(num_batches + 1, dtype=torch.int64, device=device)
            return HopSample(src, dst, eid if return_eid else None, edge_ptr[-1:], batch if has_batch else None,
                             edge_ptr)
    if temporal:
        classified = classify_temporal(indptr, indices, frontier, num_frontier, seed_time, fanout, replace,
                                       temporal_strategy, node_time, edge_time, frontier_batch, batch_ptr,
                                       hot_indptr if tiered else None, hot_indices if tiered else None,
                                       sort_frontier)
    else:
        classified = classify_frontier(indptr, frontier, num_frontier, fanout, replace, frontier_batch,
                                       batch_ptr, hot_indptr if tiered else None, sort_by_node=sort_frontier)
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
        if weighted:
            check_readable(edge_weight, device, "edge_weight")
            launch_weighted(indices, hot_indices, edge_weight, frontier_local, classified, num_frontier,
                            frontier_batch, batch_ptr, src, dst, eid, batch, seed, hot_indices.numel(), fanout,
                            replace, return_eid, tiered, has_batch)
            return HopSample(src, dst, eid if return_eid else None, num_edges, batch if has_batch else None,
                             edge_ptr)
        if method != "foundation":
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
    only costs). With the adjacency cache
    (``hot_indptr``/``hot_indices``, GPU copies of the arrays' prefixes)
    only the rest counts, what the kernels read through UVA, and only where
    at least ``SORT_MIN_UVA_SHARE`` of the row reads go there (a cache that
    serves most of them leaves too few to the sort): ``uva_reads``, that
    share, where the caller knows it (the cache plan's expected misses),
    else the share of the edges past the prefix (a node is met about as
    often as its degree)."""
    if device.type != "cuda" or indices.is_cuda:
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
    fused hop is 1.53-2.17x the foundation's on both graphs, the grouped
    kernels' 0.68-0.81x a batch. Through UVA in frontier order, where host
    pages bound every kernel, the fused hop falls to 0.87x and 0.70x on the
    large graph's two larger hops, and the grouped_split hops (one coalesced
    read of a staged row, fewer and larger PCIe requests than its scattered
    picks) run at 1.00-1.16x on both graphs. In node-id order (the large
    graph) the grouped hops run at 1.20 / 1.37 / 1.14x the foundation's in
    the same order and grouped_split's at 0.98 / 1.03 / 0.96x: its two
    kernels walk the host pages twice, each half as densely; a batch 1.19x
    the foundation's at K = 1 and at K = 8. With the adjacency cache (the
    large graph, a quarter or half of its edges' rows in GPU memory), in
    node-id order grouped 1.09-1.10x the foundation's a batch at K = 1 and
    1.07-1.20x at K = 8, grouped_split 1.01-1.07x and 1.08-1.14x (three
    quarters: 0.97-0.99x, even); in frontier order, which the cache keeps
    where it serves most reads, the foundation's is the fastest with 90 % of
    the edges cached (grouped 0.82-0.91x, grouped_split 0.86-0.99x), the
    fused kernel 0.59-0.74x wherever measured."""
    if device.type != "cuda":
        return "foundation"
    if sorted_visits:
        return "grouped"
    if hot_indices is not None:
        return "foundation"
    return "fused" if indices.is_cuda else "grouped_split"


METHODS = ("auto", "foundation", "grouped", "grouped_split", "fused")
# With the adjacency cache a hop sorts its frontier where at least this share
# of the row reads goes through UVA (``sorts_frontier``; the module docstring:
# sorting pays with a quarter and more, costs with 6-15 %)
SORT_MIN_UVA_SHARE = 0.2
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
