"""Neighbour aggregation over edges grouped by destination (FastGL's
memory-aware aggregation), forward and backward.

``out[d] = sum_e w_e * x[src_e]`` over the edges ``e`` of destination ``d``
(``w_e``: 1, GCN's edge weight, and/or ``1 / degree`` for a mean, which the
kernels apply to the destination's sum, or its gradient row). Forward:
a program takes ``SEGS`` consecutive destinations and a block of feature
columns, keeps each destination's partial sum in registers while it streams
the source rows of its edges, ``BLOCK_E`` at a time, once each, and writes
the result once. PyG's default path writes every message ``x[src_e]`` to an
``[E, D]`` buffer, then scatter-adds it: two extra passes over ``E * D``.

Backward, ``grad_x[s] = sum_e w_e * grad_out[dst_e]``: from the same
destination grouping, each program reads its destination's gradient row once
and adds it (weighted) to the rows of the edges' sources with float32
atomics; summation order then varies run to run, as with PyG's
``index_add``. Regrouping the edges by source instead and summing without
atomics was 4.8x slower, the sort included (115 against 24 ms).

Edges are grouped by destination once per ``edge_index`` (``Grouping``): a
model's layers share it, and a block from the sampler is already grouped,
which one comparison pass detects. That pass ends in a host sync (its
``bool``), which stalls the host's launches once per layer: the order is
remembered instead where it is known. ``mark_sorted_by_dst`` records it for
an ``edge_index`` (tritongnn's loader marks its batches, sorted by
construction), a checked ``edge_index`` found sorted is recorded too, and a
leading slice of a recorded one (``edge_index[:, :k]``, how layer-wise
trimming narrows it) is sorted as well. A record holds for the tensor while
it lives unchanged in place (its version counter).

Measured on an H200 (``bench/bench_aggregate.py --sweep``, 10 sampled blocks
of a 5x10^7-node Chung-Lu graph, [15, 10, 5], batch 8000, 4.5x10^7 edges,
width 128): forward 13.5 ms, backward 23.8 ms at SEGS 16, BLOCK_E 16,
BLOCK_D 128, 2 warps, the best of 54 settings (4 warps: 30-33 ms forward;
one destination per program: 17+ ms).
"""
from __future__ import annotations

import weakref

import torch
import triton
import triton.language as tl

from . import reference
from ._launch import host_list, interpreted_block, next_power_of_2, on_device_of, use_triton


# the feature dtypes the kernels take (they accumulate in float32: no float64)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit(do_not_specialize=["num_segments"])
def _segment_sum_kernel(
    x,          # [N, D] rows to sum
    indptr,     # [num_segments + 1] int64: segment s holds edges indptr[s] .. indptr[s + 1]
    index,      # [E] int64 row of x of each edge, grouped by segment
    weight,     # [E] float32 weight of each edge (if WEIGHTED)
    out,        # [num_segments, D]
    num_segments,
    D: tl.constexpr,
    stride_x, stride_out,
    WEIGHTED: tl.constexpr,
    MEAN: tl.constexpr,     # divide each segment's sum by its edge count (at least 1)
    SEGS: tl.constexpr,     # consecutive segments per program, one after the other
    BLOCK_E: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    o_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < D
    for k in tl.static_range(SEGS):
        segment = tl.program_id(0).to(tl.int64) * SEGS + k
        if segment < num_segments:
            start = tl.load(indptr + segment)
            end = tl.load(indptr + segment + 1)
            acc = tl.zeros([BLOCK_D], dtype=tl.float32)
            e = start
            while e < end:  # a while loop: the interpreter cannot range() over loaded bounds
                o_e = e + tl.arange(0, BLOCK_E)
                m_e = o_e < end
                b_index = tl.load(index + o_e, mask=m_e, other=0)
                b_rows = tl.load(x + b_index[:, None] * stride_x + o_d[None, :],
                                 mask=m_e[:, None] & m_d[None, :], other=0).to(tl.float32)  # [BE, BD]
                if WEIGHTED:
                    b_w = tl.load(weight + o_e, mask=m_e, other=0)
                    b_rows = b_rows * b_w[:, None]
                acc += tl.sum(b_rows, axis=0)
                e += BLOCK_E
            if MEAN:
                acc = acc / tl.maximum(end - start, 1).to(tl.float32)
            tl.store(out + segment * stride_out + o_d, acc.to(out.dtype.element_ty), mask=m_d)


@triton.jit(do_not_specialize=["num_segments"])
def _scatter_add_kernel(
    grad,       # [num_segments, D] one row per segment (destination)
    indptr,     # [num_segments + 1] int64 segment bounds, as for _segment_sum_kernel
    index,      # [E] int64 row of out each edge adds to, grouped by segment
    weight,     # [E] float32 (if WEIGHTED)
    out,        # [N, D] float32, zeroed: out[index[e]] += weight[e] * grad[segment of e]
    num_segments,
    D: tl.constexpr,
    stride_grad, stride_out,
    WEIGHTED: tl.constexpr,
    MEAN: tl.constexpr,     # divide by the segment's edge count, as the forward did
    SEGS: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    o_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < D
    for k in tl.static_range(SEGS):
        segment = tl.program_id(0).to(tl.int64) * SEGS + k
        if segment < num_segments:
            start = tl.load(indptr + segment)
            end = tl.load(indptr + segment + 1)
            b_grad = tl.load(grad + segment * stride_grad + o_d, mask=m_d & (start < end),
                             other=0).to(tl.float32)  # [BD], read once for all its edges
            if MEAN:
                b_grad = b_grad / tl.maximum(end - start, 1).to(tl.float32)
            e = start
            while e < end:
                o_e = e + tl.arange(0, BLOCK_E)
                m_e = o_e < end
                b_index = tl.load(index + o_e, mask=m_e, other=0)
                b_rows = tl.broadcast_to(b_grad[None, :], (BLOCK_E, BLOCK_D))
                if WEIGHTED:
                    b_w = tl.load(weight + o_e, mask=m_e, other=0)
                    b_rows = b_rows * b_w[:, None]
                tl.atomic_add(out + b_index[:, None] * stride_out + o_d[None, :], b_rows,
                              mask=m_e[:, None] & m_d[None, :], sem="relaxed")
                e += BLOCK_E


def _launch_settings(width: int) -> dict:
    """SEGS, BLOCK_E, BLOCK_D and warps of both kernels (see the module
    docstring for the measurements behind them)."""
    # at least 16 columns: narrower tiles save nothing, and a [BLOCK_E, 1]
    # atomic_add loses repeated addresses under Triton 3.6's interpreter
    block_d = min(max(16, next_power_of_2(width)), interpreted_block(LAUNCH["BLOCK_D"], 256))
    # interpreted: 3 segments a program, so the tests meet a grid whose last
    # program runs past the last segment (the guard), as compiled launches do
    return dict(SEGS=interpreted_block(LAUNCH["SEGS"], 3), BLOCK_E=interpreted_block(LAUNCH["BLOCK_E"], 128),
                BLOCK_D=block_d, num_warps=LAUNCH["num_warps"])


LAUNCH = dict(SEGS=16, BLOCK_E=16, BLOCK_D=128, num_warps=2)


def _grid(num_segments: int, width: int, settings: dict):
    return (triton.cdiv(num_segments, settings["SEGS"]), triton.cdiv(width, settings["BLOCK_D"]))


@on_device_of("x")
def segment_sum(x: torch.Tensor, indptr: torch.Tensor, index: torch.Tensor,
                weight: torch.Tensor | None = None, mean: bool = False) -> torch.Tensor:
    """``out[s] = sum_{e in segment s} weight[e] * x[index[e]]``, divided by
    the segment's edge count (at least 1) with ``mean``.

    Args:
        x: ``[N, D]`` rows (contiguous along D).
        indptr: ``[S + 1]`` int64 segment bounds, non-decreasing.
        index: ``[E]`` int64 rows of ``x``, in ``[0, N)``, grouped by segment.
        weight: ``[E]`` float32 per-edge weights, or None (all 1).
        mean: divide each sum by its segment's size.

    Returns:
        ``[S, D]`` in ``x.dtype``.
    """
    num_segments = indptr.numel() - 1
    out = torch.empty((num_segments, x.size(1)), dtype=x.dtype, device=x.device)
    if not use_triton(x.device):
        return reference.segment_sum(x, indptr, index, weight, out, mean)
    if num_segments == 0 or x.size(1) == 0:
        return out.zero_()
    x = x.contiguous()
    settings = _launch_settings(x.size(1))
    _segment_sum_kernel[_grid(num_segments, x.size(1), settings)](
        x, indptr, index, weight if weight is not None else indptr, out, num_segments,
        x.size(1), x.stride(0), out.stride(0), WEIGHTED=weight is not None, MEAN=mean, **settings)
    return out


def scatter_add(grad: torch.Tensor, indptr: torch.Tensor, index: torch.Tensor,
                weight: torch.Tensor | None, num_rows: int, mean: bool = False) -> torch.Tensor:
    """The transpose of ``segment_sum`` without regrouping the edges:
    ``out[index[e]] += weight[e] * grad[s]`` for every edge ``e`` of segment
    ``s`` (``grad[s]`` divided by the segment's size with ``mean``), with
    float32 atomics (summation order varies run to run, like PyG's
    ``index_add``).

    Args:
        grad: ``[S, D]`` one row per segment.
        indptr, index, weight, mean: the segments, as for ``segment_sum``.
        num_rows: rows of the output (``index`` in ``[0, num_rows)``).

    Returns:
        ``[num_rows, D]`` float32.
    """
    out = torch.zeros((num_rows, grad.size(1)), dtype=torch.float32, device=grad.device)
    num_segments = indptr.numel() - 1
    if not use_triton(grad.device):
        return reference.scatter_add(grad, indptr, index, weight, out, mean)
    if num_segments == 0 or grad.size(1) == 0 or index.numel() == 0:
        return out
    grad = grad.contiguous()
    settings = _launch_settings(grad.size(1))
    _scatter_add_kernel[_grid(num_segments, grad.size(1), settings)](
        grad, indptr, index, weight if weight is not None else indptr, out, num_segments,
        grad.size(1), grad.stride(0), out.stride(0), WEIGHTED=weight is not None, MEAN=mean, **settings)
    return out


def _segments(key: torch.Tensor, num_segments: int, presorted: bool):
    """Edge order grouping ``key`` (None: already grouped) and segment bounds."""
    if presorted:
        bounds = torch.arange(num_segments + 1, dtype=key.dtype, device=key.device)
        return None, torch.searchsorted(key, bounds)
    # 32-bit keys sort in half the radix passes of 64-bit ones
    narrow = key.to(torch.int32) if num_segments < 2**31 else key
    perm = torch.sort(narrow, stable=True).indices
    counts = torch.bincount(key, minlength=num_segments)
    indptr = torch.zeros(num_segments + 1, dtype=torch.int64, device=key.device)
    torch.cumsum(counts, 0, out=indptr[1:])
    return perm, indptr


# Known destination order (module docstring): marked tensors by (data pointer, strides): (weakref, version, columns).
# Leading slices of one share its address and strides, whatever the tensor
# it is a view of (a replayed batch's edge_index is a view of a flat buffer,
# ``loader.replay``, so ``_base`` would name the buffer, not it).
_SORTED: dict = {}


def mark_sorted_by_dst(edge_index: torch.Tensor) -> torch.Tensor:
    """Record that ``edge_index[1]`` (destinations) is non-decreasing, so
    ``aggregate`` skips its check (a host sync) for it and for leading
    slices of it, while it is not modified in place. Only for an order known
    by construction, as the sampler's: a wrong mark gives wrong sums.

    Returns ``edge_index``.
    """
    if not isinstance(edge_index, torch.Tensor):
        raise TypeError(f"edge_index must be a [2, E] tensor, got {type(edge_index).__name__}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        return edge_index  # not a [2, E] edge list: nothing to record (aggregate refuses it anyway)
    key = _address(edge_index)

    def forget(ref, key=key):
        entry = _SORTED.get(key)
        if entry is not None and entry[0] is ref:  # (a later mark at the same address stays)
            del _SORTED[key]
    _SORTED[key] = (weakref.ref(edge_index, forget), edge_index._version, edge_index.size(1))
    return edge_index


def _address(t: torch.Tensor) -> tuple:
    return t.data_ptr(), t.stride(), t.dtype, t.device


def _known_sorted(edge_index: torch.Tensor) -> bool:
    """``edge_index`` is recorded sorted, or is a leading slice of columns of
    a recorded tensor: the same first element and strides (so, while the
    recorded one lives, the same memory), no more columns, and no write
    since (views share the version counter)."""
    if edge_index.dim() != 2:
        return False
    entry = _SORTED.get(_address(edge_index))
    if entry is None:
        return False
    ref, version, columns = entry
    return ref() is not None and version == edge_index._version and edge_index.size(1) <= columns


class Grouping:
    """The order of one ``edge_index`` that both passes read: its edges
    grouped by destination, and the segment bounds.

    A model applies every layer to the same ``edge_index``, so ``aggregate``
    keeps the grouping of the last few it met (while they live and are not
    modified in place) and sorts once per batch, not once per layer and pass.
    A sampled block's edges already come grouped by destination, which one
    comparison pass detects: no sort at all there. Only derived tensors are
    held, never ``edge_index`` or a view of it, so the cache does not keep a
    batch alive.
    """

    def __init__(self, dst: torch.Tensor, num_src: int, num_dst: int, presorted: bool | None = None,
                 src: torch.Tensor | None = None):
        self.num_src, self.num_dst = num_src, num_dst
        if presorted is None and dst.numel():
            # the check, one host sync: the order, and (with src) both rows'
            # ranges (a kernel would read x past its end, or drop the edge)
            checks = [(dst[1:] >= dst[:-1]).all().long(), *torch.aminmax(dst)]
            if src is not None:
                checks += torch.aminmax(src)
            sizes = host_list(torch.stack(checks))
            presorted = bool(sizes[0])
            for name, (lo, hi), n in (("edge_index[1]", sizes[1:3], num_dst), ("edge_index[0]", sizes[3:5], num_src)):
                if lo < 0 or hi >= n:
                    raise ValueError(f"{name} holds node id {lo if lo < 0 else hi}, outside [0, {n})")
        self.presorted = bool(presorted) or dst.numel() < 2
        self.dst_perm, self.dst_indptr = _segments(dst, num_dst, presorted)

    def by_dst(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.dst_perm is None else t[self.dst_perm]


_GROUPINGS: dict = {}  # id(edge_index) -> (weakref, version, sizes, Grouping)
_GROUPINGS_MAX = 4


def _grouping(edge_index: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, num_src: int,
              num_dst: int, known_order: bool = True) -> Grouping:
    """The ``Grouping`` of ``edge_index``, kept for its next layers. With
    ``known_order`` a recorded order (``mark_sorted_by_dst``) skips the
    check and a checked one found sorted is recorded; without, every new
    ``edge_index`` is checked (one host sync)."""
    key = id(edge_index)
    entry = _GROUPINGS.get(key)
    if entry is not None and entry[0]() is edge_index and entry[1] == edge_index._version \
            and entry[2] == (num_src, num_dst):
        return entry[3]
    grouping = Grouping(dst, num_src, num_dst, True if known_order and _known_sorted(edge_index) else None,
                        src=src)
    if grouping.presorted and known_order:
        mark_sorted_by_dst(edge_index)  # its leading slices (the next layers') need no check
    while len(_GROUPINGS) >= _GROUPINGS_MAX:
        _GROUPINGS.pop(next(iter(_GROUPINGS)))
    ref = weakref.ref(edge_index, lambda _, key=key: _GROUPINGS.pop(key, None))
    _GROUPINGS[key] = (ref, edge_index._version, (num_src, num_dst), grouping)
    return grouping


class _Aggregate(torch.autograd.Function):
    # A mean divides by the destination's degree inside both kernels: no
    # per-edge weights to build (six launches a layer, on the host's clock)
    #
    # With ``with_root`` it also returns ``x[:num_dst]`` (a view), the
    # destinations' own rows that SAGE's root term reads, and adds that
    # output's gradient into ``grad_x``'s leading rows in place. Sliced
    # outside, the slice's backward would build a zero-padded ``[N, D]``
    # gradient and autograd would add it to ``grad_x``: two more passes over
    # ``N x D`` (at the second layer of a [15, 10, 5] batch of 8000 at
    # papers100M's scale, 0.33 ms of a 4.0 ms step on an H200; the step's
    # kernels take 3.46 ms with this and SAGEConv's addmm_ root term).
    @staticmethod
    def forward(ctx, x, src, dst, grouping: Grouping, mean: bool, edge_weight, with_root: bool = False):
        weight = None if edge_weight is None else grouping.by_dst(edge_weight.to(torch.float32))
        src_grouped = grouping.by_dst(src)
        out = segment_sum(x, grouping.dst_indptr, src_grouped, weight, mean)
        ctx.save_for_backward(x, src, dst, src_grouped, weight)
        ctx.grouping, ctx.mean = grouping, mean
        ctx.set_materialize_grads(False)  # an unused output's gradient: None, not zeros to add
        return (out, x.narrow(0, 0, grouping.num_dst)) if with_root else out

    @staticmethod
    def backward(ctx, grad_out, grad_root=None):
        x, src, dst, src_grouped, weight = ctx.saved_tensors
        grouping = ctx.grouping
        grad_x = grad_weight = None
        if grad_out is not None:
            grad_out = grad_out.contiguous()
        if ctx.needs_input_grad[0]:
            if grad_out is not None:
                grad_x = scatter_add(grad_out, grouping.dst_indptr, src_grouped, weight, x.size(0),
                                     ctx.mean).to(x.dtype)
            else:
                grad_x = torch.zeros_like(x)
            if grad_root is not None:
                grad_x[:grad_root.size(0)] += grad_root
        if ctx.needs_input_grad[5] and grad_out is not None:  # d out[dst_e] / d w_e = x[src_e] (/ degree)
            grad_weight = (grad_out[dst].float() * x[src].float()).sum(1)
            if ctx.mean:
                indptr = grouping.dst_indptr
                grad_weight = grad_weight / (indptr[1:] - indptr[:-1]).clamp(min=1).to(torch.float32)[dst]
        return grad_x, None, None, None, None, grad_weight, None


def check_edge_index(edge_index: torch.Tensor) -> None:
    """ValueError unless ``edge_index`` is a ``[2, E]`` int64 tensor (what
    the aggregation and attention kernels read)."""
    if edge_index.dim() != 2 or edge_index.size(0) != 2 or edge_index.dtype != torch.int64:
        raise ValueError(f"edge_index must be a [2, E] int64 tensor, got {edge_index.dtype} "
                         f"{tuple(edge_index.shape)}")


@on_device_of("x")
def aggregate(x: torch.Tensor, edge_index: torch.Tensor, num_dst: int, reduce: str = "sum",
              edge_weight: torch.Tensor | None = None, with_root: bool = False, known_order: bool = True):
    """Sum or mean of ``edge_weight * x[edge_index[0]]`` per destination
    ``edge_index[1]`` (PyG's ``flow="source_to_target"``), differentiable in
    ``x`` and ``edge_weight``.

    Args:
        x: ``[N_src, D]`` source features.
        edge_index: ``[2, E]`` int64, sources in row 0, destinations in row 1.
        num_dst: number of destination nodes (ids in ``[0, num_dst)``).
        reduce: ``"sum"`` (or ``"add"``) or ``"mean"`` (0 where no edge).
        edge_weight: optional ``[E]`` weight of each message (GCN's norm).

        with_root: also return ``x[:num_dst]``, the destinations' own rows
            when they lead ``x`` (a sampled block's), whose gradient the
            backward adds into ``x``'s in place (``_Aggregate``).
        known_order: trust a destination order recorded by
            ``mark_sorted_by_dst`` (module docstring); False checks
            ``edge_index`` (one host sync) unless its grouping is kept.

    Returns:
        ``[num_dst, D]``; with ``with_root``, that and ``x[:num_dst]``.
    """
    if reduce not in ("sum", "add", "mean"):
        raise ValueError(f"reduce must be 'sum', 'add' or 'mean', got {reduce!r}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [num_nodes, dim], got shape {tuple(x.shape)}")
    if x.dtype not in DTYPES:
        raise TypeError(f"x must be float32, float16 or bfloat16 (the kernels accumulate in float32), "
                        f"got {x.dtype}")
    if not isinstance(num_dst, int) or isinstance(num_dst, bool) or num_dst < 0:
        raise ValueError(f"num_dst must be an int >= 0, got {num_dst!r}")
    if with_root and num_dst > x.size(0):
        raise ValueError(f"with_root needs the destinations to lead x: num_dst ({num_dst}) is more than "
                         f"x's {x.size(0)} rows")
    check_edge_index(edge_index)
    if edge_weight is not None and edge_weight.shape != (edge_index.size(1),):
        raise ValueError(f"edge_weight must have shape [{edge_index.size(1)}] (one per edge), "
                         f"got {tuple(edge_weight.shape)}")
    # the kernels read the rows with stride 1 (a transposed [E, 2] has 2)
    src, dst = edge_index[0].contiguous(), edge_index[1].contiguous()
    grouping = _grouping(edge_index, src, dst, x.size(0), num_dst, known_order)
    if edge_weight is not None:
        edge_weight = edge_weight.contiguous()
    return _Aggregate.apply(x, src, dst, grouping, reduce == "mean", edge_weight, with_root)
