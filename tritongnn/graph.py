"""CSC topology: the in-neighbours of every node, in GPU or pinned host memory.

Sampling for a target node reads the nodes whose messages flow into it (PyG's
``edge_index[0] -> edge_index[1]``), so the graph is stored by target:
``indices[indptr[v]:indptr[v + 1]]`` are the sources of the edges into ``v``.
``indptr`` is int64 (graphs pass 2^31 edges); ``indices`` is int32 while the
node count allows it (half the bytes to cache or read through UVA), else
int64.
"""
from __future__ import annotations

import torch

from ._checks import check_ids_in_range

_INT32_MAX = 2**31 - 1


def _index_dtype(num_nodes: int) -> torch.dtype:
    """The dtype of ``indices``: int32 where the node ids fit, else int64."""
    return torch.int32 if num_nodes <= _INT32_MAX else torch.int64


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


class CSCGraph:
    """A graph in CSC form.

    Args:
        indptr: ``[N + 1]`` integer, non-decreasing, ``indptr[0] == 0``,
            ``indptr[N] == E``.
        indices: ``[E]`` integer source ids in ``[0, N)``.
        edge_perm: optional ``[E]`` int64: position ``i`` of ``indices`` is
            edge ``edge_perm[i]`` of the ``edge_index`` it was built from (so
            sampled edges can slice edge attributes, as PyG's ``e_id`` does).
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
        self.edge_perm = None if edge_perm is None else _as_index(edge_perm, "edge_perm").to(torch.int64)
        if validate:
            self._validate()
        self.indices = indices.to(_index_dtype(num_nodes))

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
                        keep_edge_perm: bool = False, device=None) -> "CSCGraph":
        """Build from PyG's ``edge_index`` ``[2, E]`` (messages ``[0] -> [1]``).

        Args:
            edge_index: ``[2, E]`` integer tensor; not modified.
            num_nodes: N; default ``max id + 1``.
            keep_edge_perm: keep the CSC-position -> edge-id map (``e_id``).
            device: where to sort (a GPU sorts 10^9 edges in about a second);
                default the device of ``edge_index``.
        """
        edge_index = _as_index(edge_index, "edge_index")
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
        device = edge_index.device if device is None else torch.device(device)
        edge_index = edge_index.to(device)
        num_edges = edge_index.size(1)
        if num_nodes is None:  # (negative ids are refused below, by name)
            num_nodes = max(int(edge_index.max()) + 1, 0) if num_edges else 0
        if not isinstance(num_nodes, int) or isinstance(num_nodes, bool) or num_nodes < 0:
            raise ValueError(f"num_nodes must be a non-negative int, got {num_nodes!r}")
        check_ids_in_range(edge_index, num_nodes, "edge_index")
        src, dst = edge_index[0], edge_index[1]
        indptr = torch.zeros(num_nodes + 1, dtype=torch.int64, device=device)
        torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0, out=indptr[1:])
        if bool((dst[1:] >= dst[:-1]).all()):
            # already grouped by target (CSC order, e.g. PyG's sort_edge_index(sort_by_row=False)):
            # no sort, whose keys, values and temporaries would take ~4x edge_index on the device
            perm = torch.arange(num_edges, device=device) if keep_edge_perm else None
            # a copy in the graph's index dtype: never a view of the caller's edge_index
            return cls(indptr, src.to(_index_dtype(num_nodes), copy=True), perm, validate=False)
        perm = torch.argsort(dst, stable=True)  # stable: parallel edges keep their order
        return cls(indptr, src[perm], perm if keep_edge_perm else None, validate=False)

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

    def relabel(self, order: torch.Tensor, keep_edge_perm: bool = True) -> "CSCGraph":
        """The same graph with node ``order[i]`` renamed ``i``.

        Hot-first relabelling (the dual cache) puts the hottest nodes at the
        smallest ids, so that the cached rows of features and adjacency are
        prefixes. Each row keeps its neighbours in their order, so sampling
        by position draws the same (renamed) neighbours. ``edge_perm`` maps
        the new CSC positions to this graph's edge ids (its own ``edge_perm``,
        or its CSC positions when it has none).

        Args:
            order: ``[N]`` integer permutation of ``[0, N)``, ``order[new] = old``.
            keep_edge_perm: False: no ``edge_perm`` (8 bytes per edge, 13 GB at
                1.6x10^9 edges) where no edge id will be asked for.
        """
        order = _as_index(order, "order")
        num_nodes = self.num_nodes
        if order.dim() != 1 or order.numel() != num_nodes:
            raise ValueError(f"order must be a permutation of [0, {num_nodes}), got shape {tuple(order.shape)}")
        device = self.indptr.device
        order = order.to(device, torch.int64)
        new_id = inverse_permutation(order)
        degree = self.degree()[order]
        indptr = torch.zeros(num_nodes + 1, dtype=torch.int64, device=device)
        torch.cumsum(degree, 0, out=indptr[1:])
        row = torch.repeat_interleave(torch.arange(num_nodes, device=device), degree,
                                      output_size=self.num_edges)
        old_pos = self.indptr[order][row] + (torch.arange(self.num_edges, device=device) - indptr[row])
        indices = new_id[self.indices.to(device)[old_pos].to(torch.int64)]
        if not keep_edge_perm:
            edge_perm = None
        else:
            edge_perm = old_pos if self.edge_perm is None else self.edge_perm.to(device)[old_pos]
        del old_pos, row
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
        from .host_memory import pinned_copy
        if self.is_pinned:
            return self
        device = self.device if self.device.type == "cuda" else torch.device("cuda")
        return self._apply(lambda t: pinned_copy(t, device))

    def __repr__(self) -> str:
        where = "pinned host" if self.is_pinned else str(self.device)
        return (f"CSCGraph(num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
                f"indices={self.indices.dtype}, on {where})")
