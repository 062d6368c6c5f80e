"""CSC topology: the in-neighbours of every node, in GPU or pinned host memory.

Sampling for a target node reads the nodes whose messages flow into it (PyG's
``edge_index[0] -> edge_index[1]``), so the graph is stored by target:
``indices[indptr[v]:indptr[v + 1]]`` are the sources of the edges into ``v``.
``indptr`` is int64 (graphs pass 2^31 edges); ``indices`` is int32 while the
node count allows it (half the bytes to cache or read through UVA), else
int64, and so is ``edge_perm`` (CSC position -> edge id, PyG's ``e_id``)
while the edge count does (6.4 GB at 1.6x10^9 edges, not 12.8).
"""
from __future__ import annotations

import torch

from .kernels._launch import check_ids_in_range
from .host_memory import pinned_copy, pinned_empty
from .memory import chunk_items, device_free_bytes, size

_INT32_MAX = 2**31 - 1


def _index_dtype(num_nodes: int) -> torch.dtype:
    """The dtype of ``indices``: int32 where the node ids fit, else int64."""
    return torch.int32 if num_nodes <= _INT32_MAX else torch.int64


def edge_id_dtype(num_edges: int) -> torch.dtype:
    """The dtype of ``edge_perm``: int32 where the edge ids fit, else int64."""
    return torch.int32 if num_edges <= _INT32_MAX else torch.int64


def _narrowed(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype``, a pinned array staying pinned (kernels read it
    through UVA)."""
    if t.dtype == dtype:
        return t
    if t.device.type == "cpu" and t.is_pinned():
        return pinned_empty(tuple(t.shape), dtype, torch.device("cuda", torch.cuda.current_device())).copy_(t)
    return t.to(dtype)


def _as_index(t, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer ids, got dtype {t.dtype}")
    return t


def inverse_permutation(order: torch.Tensor) -> torch.Tensor:
    """``new_id`` with ``new_id[order[i]] = i``, checking that ``order`` is a
    permutation of ``[0, len(order))``."""
    num_nodes = order.numel()
    if num_nodes and (int(order.min()) < 0 or int(order.max()) >= num_nodes):
        raise ValueError(f"order must be a permutation of [0, {num_nodes}): it holds ids outside the range")
    new_id = torch.full((num_nodes,), -1, dtype=torch.int64, device=order.device)
    new_id[order] = torch.arange(num_nodes, device=order.device)
    if bool((new_id < 0).any()):
        raise ValueError(f"order must be a permutation of [0, {num_nodes}): it repeats ids")
    return new_id


def _chunks(num_items: int, size: int):
    """``(lo, hi)`` of consecutive chunks of ``size`` covering ``[0, num_items)``."""
    return ((lo, min(lo + size, num_items)) for lo in range(0, num_items, max(1, size)))


def _cuda_of(device: torch.device, work: torch.device) -> torch.device:
    """The GPU a pinned output is for: ``work`` if a GPU, else the current one."""
    if work.type == "cuda":
        return work
    if device.type == "cuda":
        return device
    return torch.device("cuda", torch.cuda.current_device())


def _work_device(device: torch.device, pin: bool, work) -> torch.device:
    if work is not None:
        return torch.device(work)
    if pin and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _empty(shape, dtype, device: torch.device, pin_for: torch.device | None) -> torch.Tensor:
    """An output array on ``device``, or pinned for GPU ``pin_for``."""
    if pin_for is not None:
        return pinned_empty(shape, dtype, pin_for)
    return torch.empty(shape, dtype=dtype, device=device)


def _check_fits(device: torch.device, pin: bool, what: str, nbytes: int) -> None:
    """ValueError, before allocating, where ``nbytes`` do not fit the GPU
    memory the process may still use."""
    if pin or device.type != "cuda":
        return
    free = device_free_bytes(device)
    if nbytes > free:
        raise ValueError(f"{what} takes {size(nbytes)} on {device}, and the process may use "
                         f"{size(free)} more there: keep it in host memory (placement='host'), "
                         f"or free GPU memory first")


def in_target_order(edge_index: torch.Tensor, chunk_edges: int | None = None) -> bool:
    """Whether ``edge_index`` is grouped by target (``edge_index[1]``
    non-decreasing, PyG's ``is_sorted``): then its CSC graph is its own
    columns in order, so a CSC position is the edge's id (``e_id`` without
    an ``edge_perm``). Read in chunks where it is, stopping at the first
    out of order: a graph in any other order costs one chunk."""
    num_edges, last = edge_index.size(1), None
    for lo, hi in _chunks(num_edges, chunk_edges or chunk_items(edge_index.device, 16, num_edges)):
        dst = edge_index[1, lo:hi]
        if (last is not None and int(dst[0]) < last) or bool((dst[1:] < dst[:-1]).any()):
            return False
        last = int(dst[-1])
    return True


def csc_bytes(num_nodes: int, num_edges: int, keep_edge_perm: bool = False) -> int:
    """Bytes of the CSC graph of ``num_edges`` edges on ``num_nodes`` nodes:
    its int64 ``indptr``, its ``indices`` (int32 below 2^31 nodes) and,
    with ``keep_edge_perm``, its ``edge_perm`` (int32 below 2^31 edges)."""
    return (num_nodes + 1) * 8 + num_edges * edge_bytes(num_nodes, num_edges, keep_edge_perm)


def edge_bytes(num_nodes: int, num_edges: int, keep_edge_perm: bool = True) -> int:
    """Bytes an edge takes in that CSC graph (and a sampled pick of it reads):
    its ``indices`` entry and, with ``keep_edge_perm``, its ``edge_perm`` one."""
    perm = edge_id_dtype(num_edges).itemsize if keep_edge_perm else 0
    return _index_dtype(num_nodes).itemsize + perm


class CSCGraph:
    """A graph in CSC form.

    Args:
        indptr: ``[N + 1]`` integer, non-decreasing, ``indptr[0] == 0``,
            ``indptr[N] == E``.
        indices: ``[E]`` integer source ids in ``[0, N)``.
        edge_perm: optional ``[E]`` integer: position ``i`` of ``indices`` is
            edge ``edge_perm[i]`` of the ``edge_index`` it was built from (so
            sampled edges can slice edge attributes, as PyG's ``e_id`` does);
            stored int32 below 2^31 edges, else int64. None: the positions
            are the edge ids.
        validate: check the invariants above (one pass over the arrays).

    Example:
        >>> g = CSCGraph.from_edge_index(data.edge_index, data.num_nodes)
        >>> g = g.to("cuda")        # or g.pin_memory() to read it through UVA
    """

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor,
                 edge_perm: torch.Tensor | None = None, validate: bool = True):
        indptr = _as_index(indptr, "indptr")
        indices = _as_index(indices, "indices")
        if indptr.dim() != 1 or indptr.numel() < 1:
            raise ValueError(f"indptr must be 1-D with N + 1 >= 1 entries, got shape {tuple(indptr.shape)}")
        if indices.dim() != 1:
            raise ValueError(f"indices must be 1-D, got shape {tuple(indices.shape)}")
        num_nodes = indptr.numel() - 1
        self.indptr = indptr.to(torch.int64)
        # checked in the dtype given, then narrowed: a cast first would wrap
        # ids past int32 into range
        self.indices = indices
        self.edge_perm = None if edge_perm is None else _as_index(edge_perm, "edge_perm")
        if validate:
            self._validate()
        self.indices = indices.to(_index_dtype(num_nodes))
        if self.edge_perm is not None:
            self.edge_perm = _narrowed(self.edge_perm, edge_id_dtype(indices.numel()))

    def _validate(self) -> None:
        indptr, indices = self.indptr, self.indices
        num_edges = indices.numel()
        if int(indptr[0]) != 0:
            raise ValueError(f"indptr[0] must be 0, got {int(indptr[0])}")
        if int(indptr[-1]) != num_edges:
            raise ValueError(f"indptr[-1] must equal the number of edges {num_edges}, got {int(indptr[-1])}")
        if indptr.numel() > 1 and bool((indptr[1:] < indptr[:-1]).any()):
            row = int(torch.nonzero(indptr[1:] < indptr[:-1])[0])
            raise ValueError(f"indptr must be non-decreasing; indptr[{row + 1}] < indptr[{row}]")
        check_ids_in_range(indices, self.num_nodes, "indices")
        if self.edge_perm is not None:
            if self.edge_perm.dim() != 1 or self.edge_perm.numel() != num_edges:
                raise ValueError(f"edge_perm must be 1-D with one entry per edge ({num_edges}), got shape "
                                 f"{tuple(self.edge_perm.shape)}")
            check_ids_in_range(self.edge_perm, num_edges, "edge_perm", "edge id")

    @classmethod
    def from_edge_index(cls, edge_index: torch.Tensor, num_nodes: int | None = None,
                        keep_edge_perm: bool = False, device=None, *, work=None, pin: bool = False,
                        chunk_edges: int | None = None) -> "CSCGraph":
        """Build from PyG's ``edge_index`` ``[2, E]`` (messages ``[0] -> [1]``).

        A stable counting sort by target, in chunks of edges: each chunk is
        moved to ``work``, sorted there and scattered into the output, so
        the temporaries are a chunk's, never E-sized (the output itself is).

        Args:
            edge_index: ``[2, E]`` integer tensor, any order, duplicates kept;
                not modified.
            num_nodes: N; default ``max id + 1``.
            keep_edge_perm: keep the CSC-position -> edge-id map (``e_id``).
            device: where the graph goes; default the device of ``edge_index``.
            work: where the chunks are sorted (a GPU sorts 10^9 edges in about
                a second); default ``device``, or the GPU it is pinned for.
            pin: the output in pinned host memory (``device`` the CPU).
            chunk_edges: edges per chunk; default what fits a quarter of the
                memory ``work`` has free (``memory.chunk_items``).
        """
        edge_index = _as_index(edge_index, "edge_index")
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
        device = edge_index.device if device is None else torch.device(device)
        work = _work_device(device, pin, work)
        num_edges = edge_index.size(1)
        if num_nodes is None:  # (negative ids are refused below, by name)
            num_nodes = 0
            for lo, hi in _chunks(num_edges, chunk_edges or chunk_items(work, 16, num_edges)):
                num_nodes = max(num_nodes, int(edge_index[:, lo:hi].max()) + 1)
        if not isinstance(num_nodes, int) or isinstance(num_nodes, bool) or num_nodes < 0:
            raise ValueError(f"num_nodes must be a non-negative int, got {num_nodes!r}")
        index_dtype = _index_dtype(num_nodes)
        nbytes = csc_bytes(num_nodes, num_edges, keep_edge_perm)
        _check_fits(device, pin, "the CSC graph", nbytes)
        if pin and work.type == "cuda" and nbytes <= device_free_bytes(work) // 2:
            # built on the GPU, then copied once into pinned memory: the
            # sorted chunks scattered there, not by the CPU into host memory
            return cls.from_edge_index(edge_index, num_nodes, keep_edge_perm, work, work=work,
                                       chunk_edges=chunk_edges).pin_memory()
        pin_for = _cuda_of(device, work) if pin else None
        indices = _empty((num_edges,), index_dtype, device, pin_for)
        perm = _empty((num_edges,), edge_id_dtype(num_edges), device, pin_for) if keep_edge_perm else None
        # about 100 bytes of temporaries an edge of a chunk: its ids, the sort, positions
        chunks = list(_chunks(num_edges, chunk_edges or chunk_items(work, 100, num_edges)))
        kept = {}  # a graph of one chunk: moved to ``work`` once, for both passes

        def chunk(lo, hi):
            if lo in kept:
                return kept.pop(lo)
            part = edge_index[:, lo:hi].to(work)
            return part[0], part[1].to(torch.int64)

        counts = torch.zeros(num_nodes, dtype=torch.int64, device=work)
        grouped, last = True, None  # whether already grouped by target (CSC order): no sort
        for lo, hi in chunks:
            src, dst = chunk(lo, hi)
            check_ids_in_range(src, num_nodes, "edge_index")
            check_ids_in_range(dst, num_nodes, "edge_index")
            if len(chunks) == 1:
                kept[lo] = src, dst
            counts.index_add_(0, dst, torch.ones_like(dst))
            grouped = grouped and bool((dst[1:] >= dst[:-1]).all()) and (last is None or int(dst[0]) >= last)
            last = int(dst[-1])
        indptr = torch.zeros(num_nodes + 1, dtype=torch.int64, device=work)
        torch.cumsum(counts, 0, out=indptr[1:])
        cursor = indptr[:-1].clone()  # where each target's next edge goes
        del counts
        if grouped:
            # a copy in the graph's index dtype: never a view of the caller's edge_index
            indices.copy_(edge_index[0])
            if perm is not None:
                torch.arange(num_edges, out=perm)
            chunks = []
        for lo, hi in chunks:
            src, dst = chunk(lo, hi)
            order = torch.argsort(dst, stable=True)  # stable: parallel edges keep their order
            dst = dst[order]
            rank = torch.arange(dst.numel(), device=work)
            first = torch.ones_like(dst, dtype=torch.bool)
            first[1:] = dst[1:] != dst[:-1]
            # each edge's rank among the chunk's edges into its target, after the chunks before
            rank -= torch.cummax(torch.where(first, rank, 0), 0).values
            pos = (cursor[dst] + rank).to(device)
            cursor.index_add_(0, dst, torch.ones_like(dst))
            indices[pos] = src[order].to(device, index_dtype)
            if perm is not None:
                perm[pos] = (order + lo).to(device, perm.dtype)
            del order, dst, rank, first, pos
        indptr = indptr.to(device) if pin_for is None else pinned_copy(indptr, pin_for)
        return cls(indptr, indices, perm, validate=False)

    @classmethod
    def from_csr(cls, indptr: torch.Tensor, indices: torch.Tensor, keep_edge_perm: bool = False,
                 device=None) -> "CSCGraph":
        """Build from CSR by source (the layout of ``../shared/data``): row ``u``
        lists the targets of ``u``'s out-edges; edge ids are CSR positions."""
        csr = cls(indptr, indices)  # validates the CSR arrays with the same rules
        num_nodes = csr.num_nodes
        src = torch.repeat_interleave(torch.arange(num_nodes, device=csr.indptr.device),
                                      csr.indptr.diff())
        edge_index = torch.stack([src, csr.indices.to(torch.int64)])
        return cls.from_edge_index(edge_index, num_nodes, keep_edge_perm, device)

    @property
    def num_nodes(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    @property
    def device(self) -> torch.device:
        return self.indices.device

    @property
    def is_pinned(self) -> bool:
        return self.indices.device.type == "cpu" and self.indices.is_pinned()

    @property
    def nbytes(self) -> int:
        perm = 0 if self.edge_perm is None else self.edge_perm.nbytes
        return self.indptr.nbytes + self.indices.nbytes + perm

    def degree(self) -> torch.Tensor:
        """``[N]`` int64 in-degree (neighbours available to sample)."""
        return self.indptr.diff()

    def relabel(self, order: torch.Tensor, keep_edge_perm: bool = True, device=None, *, pin: bool = False,
                work=None, chunk_edges: int | None = None) -> "CSCGraph":
        """The same graph with node ``order[i]`` renamed ``i``.

        Hot-first relabelling (the dual cache) puts the hottest nodes at the
        smallest ids, so that the cached rows of features and adjacency are
        prefixes. Each row keeps its neighbours in their order, so sampling
        by position draws the same (renamed) neighbours. ``edge_perm`` maps
        the new CSC positions to this graph's edge ids (its own ``edge_perm``,
        or its CSC positions when it has none). Worked in chunks of edges:
        N-sized tables, chunk-sized temporaries.

        Args:
            order: ``[N]`` integer permutation of ``[0, N)``, ``order[new] = old``.
            keep_edge_perm: False: no ``edge_perm`` (4 bytes per edge below
                2^31 edges, 6.4 GB at 1.6x10^9) where no edge id will be asked for.
            device: where the relabelled graph goes; default this graph's.
            pin: the output in pinned host memory (``device`` the CPU).
            work: where the work is done; default where the graph is. A GPU
                for a host graph takes a copy of it (its ``nbytes``) there,
                and writes each chunk of the output back.
            chunk_edges: edges per chunk; default what fits
                (``memory.chunk_items``).
        """
        if work is not None and torch.device(work) != self.indices.device:
            work = torch.device(work)
            perm = self.edge_perm if keep_edge_perm else None
            _check_fits(work, False, "the graph's copy to relabel",
                        self.indptr.nbytes + self.indices.nbytes + (0 if perm is None else perm.nbytes))
            copy = CSCGraph(self.indptr.to(work), self.indices.to(work), None if perm is None else perm.to(work),
                            validate=False)
            return copy.relabel(order, keep_edge_perm, self.indices.device if device is None else device, pin=pin,
                                chunk_edges=chunk_edges)
        order = _as_index(order, "order")
        num_nodes, num_edges = self.num_nodes, self.num_edges
        if order.dim() != 1 or order.numel() != num_nodes:
            raise ValueError(f"order must be a permutation of [0, {num_nodes}), got shape {tuple(order.shape)}")
        work = self.indices.device
        device = work if device is None else torch.device(device)
        _check_fits(device, pin, "the relabelled CSC graph", (num_nodes + 1) * 8 + num_edges * (
            self.indices.dtype.itemsize + (edge_id_dtype(num_edges).itemsize if keep_edge_perm else 0)))
        order = order.to(work, torch.int64)
        new_id = inverse_permutation(order)
        degree = self.degree()[order]
        indptr = torch.zeros(num_nodes + 1, dtype=torch.int64, device=work)
        torch.cumsum(degree, 0, out=indptr[1:])
        old_start = self.indptr[order]
        del degree
        pin_for = _cuda_of(device, work) if pin else None
        indices = _empty((num_edges,), self.indices.dtype, device, pin_for)
        edge_perm = _empty((num_edges,), edge_id_dtype(num_edges), device, pin_for) if keep_edge_perm else None
        # about 50 bytes of temporaries an edge of a chunk: positions, rows, old positions, ids
        for lo, hi in _chunks(num_edges, chunk_edges or chunk_items(work, 50, num_edges)):
            pos = torch.arange(lo, hi, device=work)
            row = torch.searchsorted(indptr[1:], pos, right=True)
            old_pos = old_start[row] + (pos - indptr[row])
            del pos, row
            indices[lo:hi].copy_(new_id[self.indices[old_pos].to(torch.int64)])
            if edge_perm is not None:
                edge_perm[lo:hi].copy_(old_pos if self.edge_perm is None else self.edge_perm[old_pos])
        indptr = indptr.to(device) if pin_for is None else pinned_copy(indptr, pin_for)
        return CSCGraph(indptr, indices, edge_perm, validate=False)

    def row_prefix(self, num_rows: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies on ``device`` of the rows of the first ``num_rows`` nodes:
        ``(indptr[:A + 1], indices[:indptr[A]])``, the adjacency cache's GPU
        tier of a hot-first relabelled graph (the sampler's ``hot_indptr``
        and ``hot_indices``).

        Args:
            num_rows: A, an int in ``[0, num_nodes]``.
            device: where the copies go.
        """
        if isinstance(num_rows, bool) or not hasattr(num_rows, "__index__"):
            raise TypeError(f"num_rows must be an int, got {type(num_rows).__name__}")
        num_rows = num_rows.__index__()
        if not 0 <= num_rows <= self.num_nodes:
            raise ValueError(f"num_rows must be in [0, {self.num_nodes}], got {num_rows}")
        device = torch.device(device)
        return (self.indptr[:num_rows + 1].to(device).clone(),
                self.indices[:int(self.indptr[num_rows])].to(device).clone())

    def _apply(self, fn) -> "CSCGraph":
        out = CSCGraph.__new__(CSCGraph)
        out.indptr, out.indices = fn(self.indptr), fn(self.indices)
        out.edge_perm = None if self.edge_perm is None else fn(self.edge_perm)
        return out

    def to(self, device) -> "CSCGraph":
        """A copy in ``device`` memory (self if already there)."""
        device = torch.device(device)
        return self if self.device == device else self._apply(lambda t: t.to(device))

    def pin_memory(self) -> "CSCGraph":
        """A copy in pinned host memory, which GPU kernels read directly (UVA):
        exactly its bytes (``host_memory.pinned_copy``), copied straight from
        the GPU when it is there."""
        if self.is_pinned:
            return self
        device = self.device if self.device.type == "cuda" else torch.device("cuda")
        return self._apply(lambda t: pinned_copy(t, device))

    def __repr__(self) -> str:
        where = "pinned host" if self.is_pinned else str(self.device)
        return (f"CSCGraph(num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
                f"indices={self.indices.dtype}, on {where})")
