"""A sampled batch's edges for PyG's ``subgraph_type`` other than
``"directional"``: the induced subgraph of its nodes (Triton kernels) and the
sampled edges made bidirectional.

**Induced** (PyG's ``subgraph_type="induced"``, ``directed=False``): every
edge of the graph whose two ends are nodes of the batch, as often as the
graph holds it, in torch-sparse's order (PyG samples induced subgraphs with
``torch_sparse.neighbor_sample(directed=False)``): targets in local-id
order, each target's in-neighbours in CSC order. For the batch's nodes
``nodes`` (local id = position):

1. the id map restarted with ``nodes`` (``IdMap.start``: node ``i`` takes
   local id ``i``, a repeated node its first position, as the sampler's);
2. every node's row bounds (``classify_frontier`` with fanout -1: the
   adjacency cache's copy for hot rows) and the sum of their degrees, the
   candidates (one sync);
3. ``_count_kernel``, one lane a candidate: its CSC position, its neighbour
   read once (``_load_tiered``: the GPU copy below the cached prefix, else
   the arrays, pinned host memory through UVA), looked up in the map
   (``id_map_kernels._lookup_local``, a read of the table): its local id or
   -1 stored, and each program's hits;
4. the exclusive scan of the programs' hits and their total (a second sync:
   the output's exact size);
5. ``_write_kernel``: each program's hits packed at its offset by a
   block-local ``tl.cumsum``, so the candidates' order is kept.

Temporaries: 16 B a candidate (its owner and its local id); the rows are
read through UVA once.

**Bidirectional** (PyG's ``SamplerOutput.to_bidirectional``): the sampled
edges and their reverses, each distinct ``(src, dst)`` once, ordered by
``(dst, src)`` as PyG's ``coalesce(sort_by_row=False)``. A reversed edge
carries the id of the edge it reverses; of the copies of one pair the first
in ``[sampled edges in hop order, then their reverses]`` gives its id (PyG's
``reduce="any"`` keeps an unspecified one). One stable sort of the keys
(torch's radix sort on a GPU), no kernel of ours.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import reference
from ._launch import check_dense_index, check_readable, interpreted_block, on_device_of, use_triton
from .classify import _load_tiered, classify_frontier
from .id_map import IdMap
from .id_map_kernels import _lookup_local

_BLOCK = interpreted_block(1024, 4096)  # candidates a program


@triton.jit(do_not_specialize=["num_cand", "num_hot_edges", "cap_mask", "hash_shift"])
def _count_kernel(
    indices,      # [E] int32/int64 CSC sources, GPU or pinned host
    hot_indices,  # [num_hot_edges] GPU copy of indices[:num_hot_edges] (if TIERED)
    owner,        # [num_cand] int64 local id of each candidate's target (position in nodes)
    row_start,    # [n] int64 indptr[nodes[i]]
    offsets,      # [n] int64 inclusive cumsum of the degrees
    degree,       # [n] int64
    table, tag,   # the id map's (IdMap.lookup_args)
    found,        # [num_cand] int64 out: local id of each candidate's neighbour, -1 if not in the batch
    hits,         # [programs] int64 out: candidates of each program whose neighbour is in the batch
    num_cand,
    num_hot_edges,
    cap_mask, hash_shift,
    EMPTY: tl.constexpr,
    DIRECT: tl.constexpr,
    TIERED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i_p = tl.program_id(0).to(tl.int64)
    i_e = i_p * BLOCK + tl.arange(0, BLOCK)
    m_e = i_e < num_cand
    b_node = tl.load(owner + i_e, mask=m_e, other=0)
    b_first = tl.load(offsets + b_node, mask=m_e, other=0) - tl.load(degree + b_node, mask=m_e, other=0)
    b_pos = tl.load(row_start + b_node, mask=m_e, other=0) + (i_e - b_first)  # CSC position
    b_src = _load_tiered(hot_indices, indices, b_pos, num_hot_edges, m_e, TIERED).to(tl.int64)
    b_local = _lookup_local(table, tag, b_src, m_e, cap_mask, hash_shift, EMPTY, DIRECT)
    tl.store(found + i_e, b_local, mask=m_e)
    tl.store(hits + i_p, tl.sum((m_e & (b_local >= 0)).to(tl.int64), axis=0))


@triton.jit(do_not_specialize=["num_cand"])
def _write_kernel(
    found,        # [num_cand] int64 from _count_kernel
    owner, row_start, offsets, degree,  # as _count_kernel's
    start,        # [programs] int64 exclusive scan of _count_kernel's hits
    out_src,      # [num_edges] int64 out: local id of each edge's source
    out_dst,      # [num_edges] int64 out: local id of its target
    out_eid,      # [num_edges] int64 out: its CSC position (if WRITE_EID)
    num_cand,
    WRITE_EID: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i_p = tl.program_id(0).to(tl.int64)
    i_e = i_p * BLOCK + tl.arange(0, BLOCK)
    m_e = i_e < num_cand
    b_local = tl.load(found + i_e, mask=m_e, other=-1)
    m_hit = m_e & (b_local >= 0)
    b_hit = m_hit.to(tl.int64)
    o_out = tl.load(start + i_p) + tl.cumsum(b_hit, axis=0) - b_hit  # [BLOCK] the hits in order
    b_node = tl.load(owner + i_e, mask=m_hit, other=0)
    tl.store(out_src + o_out, b_local, mask=m_hit)
    tl.store(out_dst + o_out, b_node, mask=m_hit)
    if WRITE_EID:
        b_first = tl.load(offsets + b_node, mask=m_hit, other=0) - tl.load(degree + b_node, mask=m_hit, other=0)
        tl.store(out_eid + o_out, tl.load(row_start + b_node, mask=m_hit, other=0) + (i_e - b_first), mask=m_hit)


@on_device_of("nodes")
def induced_edges(indptr: torch.Tensor, indices: torch.Tensor, nodes: torch.Tensor, id_map: IdMap | None = None,
                  return_eid: bool = False, hot_indptr: torch.Tensor | None = None,
                  hot_indices: torch.Tensor | None = None, rows: torch.Tensor | None = None,
                  row_owner: torch.Tensor | None = None):
    """Every edge of the graph between two of ``nodes`` (the induced subgraph).

    Args:
        indptr: ``[N + 1]`` int64 CSC pointer (GPU or pinned host memory).
        indices: ``[E]`` int32/int64 CSC sources (GPU or pinned host memory).
        nodes: ``[n]`` int64 global ids of the batch's nodes; node ``i`` is
            local id ``i`` (a repeated node: its first position, as sources).
        id_map: an ``IdMap`` over the graph's ``N`` nodes on ``nodes``'
            device, restarted here with ``nodes`` (its batch is forgotten);
            None: one of its own. Unused by the CPU reference.
        return_eid: also return each edge's CSC position.
        hot_indptr, hot_indices: the adjacency cache's GPU copies of the
            arrays' prefixes (``kernels.sample.sample_neighbors``), or None.
        rows, row_owner: the CSC rows to read instead of ``nodes``' own
            (``[m]`` int64; a heterogeneous graph's segments,
            ``sampling.hetero_layout``) and the local id of the node each
            row is for (``[m]`` int64, the edges' target); None: row ``i``
            is node ``i``'s.

    Returns:
        ``(src, dst, pos)``: ``[M]`` int64 local ids of each edge's source
        and target (the two rows of one ``[2, M]`` tensor), grouped by
        row (target) in local order, each row's edges in CSC order; ``pos``
        the CSC positions (or None).

    Example:
        >>> src, dst, pos = induced_edges(graph.indptr, graph.indices, out.node, return_eid=True)
    """
    check_dense_index(indptr, "indptr", (torch.int64,))
    check_dense_index(indices, "indices", (torch.int32, torch.int64))
    if not isinstance(nodes, torch.Tensor) or nodes.dtype != torch.int64 or nodes.dim() != 1:
        raise TypeError(f"nodes must be a 1-D int64 tensor, got {getattr(nodes, 'dtype', type(nodes).__name__)}")
    if (hot_indptr is None) != (hot_indices is None):
        raise ValueError("hot_indptr and hot_indices come together (the adjacency cache)")
    device = nodes.device
    if (rows is None) != (row_owner is None):
        raise ValueError("rows and row_owner come together")
    if not use_triton(device):
        return reference.induced_edges(indptr, indices, nodes, return_eid, rows, row_owner)
    check_readable(indptr, device, "indptr")
    check_readable(indices, device, "indices")
    tiered = hot_indices is not None
    if tiered:
        check_readable(hot_indices, device, "hot_indices")
    n = nodes.numel()
    edge_index = torch.empty((2, 0), dtype=torch.int64, device=device)
    if n == 0:
        return edge_index[0], edge_index[1], edge_index[0] if return_eid else None
    if id_map is None:
        id_map = IdMap(indptr.numel() - 1, 1, n, device)
    nodes = nodes.contiguous()
    id_map.start(nodes)
    read = nodes if rows is None else rows.contiguous()
    count = torch.full((1,), read.numel(), dtype=torch.int64, device=device)
    rows_read = classify_frontier(indptr, read, count, -1, hot_indptr=hot_indptr)
    num_cand = int(rows_read.edge_ptr[-1])  # (a sync: the candidates' buffers)
    if num_cand == 0:
        return edge_index[0], edge_index[1], edge_index[0] if return_eid else None
    # each candidate's row (the kernels' "owner"; the target, where rows are the nodes')
    owner = torch.repeat_interleave(torch.arange(read.numel(), device=device), rows_read.degree,
                                    output_size=num_cand)
    found = torch.empty(num_cand, dtype=torch.int64, device=device)
    programs = triton.cdiv(num_cand, _BLOCK)
    hits = torch.empty(programs, dtype=torch.int64, device=device)
    table, tag, cap_mask, hash_shift, empty, direct = id_map.lookup_args()
    hot = hot_indices if tiered else indices
    _count_kernel[(programs,)](indices, hot, owner, rows_read.row_start, rows_read.offsets, rows_read.degree,
                               table, tag, found, hits, num_cand, hot.numel(), cap_mask, hash_shift, EMPTY=empty,
                               DIRECT=direct, TIERED=tiered, BLOCK=_BLOCK)
    ends = torch.cumsum(hits, 0)
    num_edges = int(ends[-1])  # (the second sync: the exact size)
    edge_index = torch.empty((2, num_edges), dtype=torch.int64, device=device)
    pos = torch.empty(num_edges, dtype=torch.int64, device=device) if return_eid else None
    if num_edges:
        _write_kernel[(programs,)](found, owner, rows_read.row_start, rows_read.offsets, rows_read.degree, ends - hits,
                                   edge_index[0], edge_index[1], edge_index[0] if pos is None else pos, num_cand,
                                   WRITE_EID=return_eid, BLOCK=_BLOCK)
        if row_owner is not None:  # each row's target node
            torch.index_select(row_owner, 0, edge_index[1].clone(), out=edge_index[1])
    return edge_index[0], edge_index[1], pos


def bidirectional_edges(src: torch.Tensor, dst: torch.Tensor, edge: torch.Tensor | None, num_nodes: int):
    """The edges ``(src, dst)`` and their reverses, each distinct pair once,
    ordered by ``(dst, src)`` (PyG's ``to_bidirectional``; module docstring).

    Args:
        src, dst: ``[E]`` int64 local ids of the sampled edges' ends.
        edge: ``[E]`` int64 their edge ids (a reverse takes its edge's), or None.
        num_nodes: the batch's nodes (every local id is below it).

    Returns:
        ``(src, dst, edge)``: ``src``/``dst`` the two rows of one ``[2, M]``
        int64 tensor, ``edge`` ``[M]`` (or None).
    """
    both_src, both_dst = torch.cat([src, dst]), torch.cat([dst, src])
    key, perm = torch.sort(both_dst * max(1, int(num_nodes)) + both_src, stable=True)
    first = torch.ones_like(key, dtype=torch.bool)
    first[1:] = key[1:] != key[:-1]
    keep = perm[first]
    edge_index = torch.stack([both_src[keep], both_dst[keep]])
    return edge_index[0], edge_index[1], None if edge is None else torch.cat([edge, edge])[keep]
