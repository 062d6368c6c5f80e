"""A sampled (super-)batch's hop buffers laid out as PyG ``SamplerOutput``s.

``NeighborSampler`` runs the hops on the device and reads their sizes in one
sync; what is left is host-side slicing of those buffers, kept here apart
from the hop loop. A single batch's nodes are its seeds then each hop's new
nodes, its ``row`` and ``col`` the two rows of one ``[2, E]`` tensor. A
super-batch's outputs are grouped by sub-batch (``edge_ptr`` from the
classifier, ``num_new_per_batch`` from the id map): each sub-batch's parts
are sliced from the hops' buffers and laid end to end with one
``torch.cat`` a buffer, one ``node`` and one edge buffer a pass, and the K
``SamplerOutput``s are slices of them (each batch's ``edge_index`` a
``[2, E]`` view): two copies a pass, not a dozen a batch. ``joined`` and
``edge_index_of`` give the loader those spans as views, without a copy.
"""
from __future__ import annotations

import torch
from torch_geometric.sampler import SamplerOutput

from ..kernels import edge_ids


def _edge_rows(rows: list[torch.Tensor], cols: list[torch.Tensor], device) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's ``row`` and ``col`` (each hop's parts laid end to end),
    written as the two rows of one ``[2, E]`` tensor: the loader's
    ``edge_index`` is then that tensor (``edge_index_of``), not a copy."""
    num_edges = sum(part.numel() for part in rows)
    edge_index = torch.empty((2, num_edges), dtype=torch.int64, device=device)
    if rows:
        torch.cat(rows, out=edge_index[0])
        torch.cat(cols, out=edge_index[1])
    return edge_index[0], edge_index[1]


def _end_to_end(first: torch.Tensor, second: torch.Tensor) -> bool:
    """Whether ``second`` starts in memory where ``first`` ends: two flat,
    contiguous views of one storage, of one dtype."""
    return (first.dim() == second.dim() == 1 and first.dtype == second.dtype and first.device == second.device
            and (first.stride(0) == 1 or first.numel() <= 1) and (second.stride(0) == 1 or second.numel() <= 1)
            and first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()
            and second.storage_offset() == first.storage_offset() + first.numel())


def joined(parts: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(parts)`` of flat tensors, without the copy where each
    starts in memory where the one before ends (``sample_many``'s K
    ``node`` tensors): the view that spans them."""
    if len(parts) > 1 and all(_end_to_end(a, b) for a, b in zip(parts, parts[1:])):
        return parts[0].as_strided((sum(p.numel() for p in parts),), (1,))
    return torch.cat(parts)


def edge_index_of(row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """``torch.stack([row, col])``, without the copy where ``col`` follows
    ``row`` in memory (as ``NeighborSampler`` returns them: the two rows of
    one ``[2, E]`` tensor, or, from ``sample_many``, a batch's rows and
    columns end to end in the pass's edge buffer): that ``[2, E]`` view."""
    if row.numel() == col.numel() and _end_to_end(row, col):
        return row.as_strided((2, row.numel()), (row.numel(), 1))
    return torch.stack([row, col])


def to_edge_ids(edge: torch.Tensor, edge_perm: torch.Tensor | None,
                hot_edge_perm: torch.Tensor | None = None) -> torch.Tensor:
    """The input graph's edge ids of CSC positions ``edge`` (a tensor of the
    batch's own, mapped in place; ``kernels.edge_ids``), or ``edge`` itself
    where the graph has no ``edge_perm`` (its positions are the ids)."""
    return edge if edge_perm is None else edge_ids(edge, edge_perm, hot_edge_perm, out=edge)


def batch_output(seeds: torch.Tensor, hops, sizes: list[int], device, return_eid: bool,
                 edge_perm: torch.Tensor | None, hot_edge_perm: torch.Tensor | None = None) -> SamplerOutput:
    """One batch's ``SamplerOutput`` from its hops' buffers, ``sizes`` being
    the host's copy of ``hop_sizes`` (``[e0, n0, e1, n1, ...]``): the slices
    copy the batch out of the (possibly replayed) buffers. ``edge_perm``
    (and the adjacency cache's ``hot_edge_perm``) map the edges' CSC
    positions to edge ids (``to_edge_ids``)."""
    num_edges, num_new = sizes[0::2], sizes[1::2]
    node = torch.cat([seeds] + [m.new_nodes[:n] for (_, m), n in zip(hops, num_new)])
    row, col = _edge_rows([m.local[:e] for (_, m), e in zip(hops, num_edges)],
                          [h.dst[:e] for (h, _), e in zip(hops, num_edges)], device)
    edge = None
    if return_eid:
        edge = torch.cat([h.eid[:e] for (h, _), e in zip(hops, num_edges)]) if hops else torch.empty_like(row)
        edge = to_edge_ids(edge, edge_perm, hot_edge_perm)
    return SamplerOutput(node=node, row=row, col=col, edge=edge,
                         num_sampled_nodes=[seeds.numel()] + num_new,
                         num_sampled_edges=num_edges)


def super_batch_outputs(seeds: torch.Tensor, hops, bounds: list[int], sizes: list[int], device,
                        return_eid: bool, edge_perm: torch.Tensor | None,
                        hot_edge_perm: torch.Tensor | None = None) -> list[SamplerOutput]:
    """The K ``SamplerOutput``s of a super-batch whose sub-batches have
    ``sizes`` seeds, ``bounds`` being the host's copy of ``hop_bounds``
    (every hop's ``edge_ptr``, K + 1, then its new nodes per sub-batch, K)."""
    num_batches = len(sizes)
    k1 = num_batches + 1
    edge_at = [bounds[h * (2 * k1 - 1):h * (2 * k1 - 1) + k1] for h in range(len(hops))]  # edge_ptr a hop
    num_edges = [[at[k + 1] - at[k] for k in range(num_batches)] for at in edge_at]
    num_new = [bounds[h * (2 * k1 - 1) + k1:(h + 1) * (2 * k1 - 1)] for h in range(len(hops))]
    edges_of = [sum(hop[k] for hop in num_edges) for k in range(num_batches)]
    nodes_of = [sizes[k] + sum(hop[k] for hop in num_new) for k in range(num_batches)]

    # Every sub-batch's parts, sliced on the host from the boundaries just
    # read, laid end to end by one torch.cat a buffer: sub-batch k's
    # nodes (its seeds, then each hop's new nodes) in one node buffer,
    # its rows then its columns (its ``edge_index``, ``[2, E_k]``) in one
    # edge buffer. The copies run on the GPU while the host builds the
    # outputs (and the caller goes on to the next pass).
    node_parts, edge_parts, eid_parts = [], [], []
    seed_at = 0
    new_at = [0] * len(hops)
    for k in range(num_batches):
        node_parts.append(seeds[seed_at:seed_at + sizes[k]])
        seed_at += sizes[k]
        for h, (_, m) in enumerate(hops):
            node_parts.append(m.new_nodes[new_at[h]:new_at[h] + num_new[h][k]])
            new_at[h] += num_new[h][k]
        spans = [(edge_at[h][k], edge_at[h][k + 1]) for h in range(len(hops))]
        edge_parts += [m.local[a:b] for (_, m), (a, b) in zip(hops, spans)]
        edge_parts += [e.dst[a:b] for (e, _), (a, b) in zip(hops, spans)]
        if return_eid:
            eid_parts += [e.eid[a:b] for (e, _), (a, b) in zip(hops, spans)]
    node = torch.cat(node_parts)
    no_edge = torch.empty(0, dtype=torch.int64, device=device)  # no hop: nothing to lay end to end
    edges = torch.cat(edge_parts or [no_edge])
    eid = torch.cat(eid_parts or [no_edge]) if return_eid else None
    eid_of = [None] * num_batches if eid is None else to_edge_ids(eid, edge_perm, hot_edge_perm).split(edges_of)
    outputs = []
    for k, (n_id, pair) in enumerate(zip(node.split(nodes_of), edges.split([2 * e for e in edges_of]))):
        row, col = pair.view(2, edges_of[k]).unbind(0)
        outputs.append(SamplerOutput(
            node=n_id, row=row, col=col, edge=eid_of[k],
            num_sampled_nodes=[sizes[k]] + [hop[k] for hop in num_new],
            num_sampled_edges=[hop[k] for hop in num_edges]))
    return outputs
