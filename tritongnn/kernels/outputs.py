"""What the sampling and id-map passes hand to the next stage (both backends).

Buffers have ``bound`` slots, a host-side upper bound, and a valid prefix
whose length is a device scalar: a batch is sampled hop after hop without the
host waiting for the GPU to say how many nodes a hop found.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class HopSample:
    """The edges of one hop, grouped by target in frontier order (so, for a
    super-batch, grouped by sub-batch too).

    Attributes:
        src: ``[bound]`` int64 global id of each sampled neighbour (edge source).
        dst: ``[bound]`` int64 local id of the node it was sampled for (target).
        eid: ``[bound]`` int64 CSC position of each edge, or None.
        num_edges: ``[1]`` int64 device scalar, the valid prefix.
        batch: ``[bound]`` int64 sub-batch of each edge (its target's), or
            None for one batch.
        edge_ptr: ``[K + 1]`` int64 device: where each sub-batch's edges
            start (``edge_ptr[K] == num_edges``), or None.
    """
    src: torch.Tensor
    dst: torch.Tensor
    eid: torch.Tensor | None
    num_edges: torch.Tensor
    batch: torch.Tensor | None = None
    edge_ptr: torch.Tensor | None = None


@dataclass(slots=True)
class MappedHop:
    """One hop's candidates mapped to local ids.

    Attributes:
        local: ``[bound]`` int64 local id of every candidate.
        new_nodes: ``[bound]`` int64 global ids of the nodes new to their
            sub-batch, in order of first appearance, grouped by sub-batch.
        new_local: ``[bound]`` int64 their local ids (None after a hop
            inserted with ``last=True``).
        new_batch: ``[bound]`` int64 their sub-batch, or None for one batch
            (and after a last hop).
        num_new: ``[1]`` int64 device scalar, the valid prefix of ``new_*``.
        num_new_per_batch: ``[K]`` int64 new nodes of each sub-batch.
    """
    local: torch.Tensor
    new_nodes: torch.Tensor
    new_local: torch.Tensor | None
    new_batch: torch.Tensor | None
    num_new: torch.Tensor
    num_new_per_batch: torch.Tensor


@dataclass(slots=True)
class ClassifiedFrontier:
    """A hop's frontier classified into full and random nodes
    (``kernels.classify``), with the placement of its output edges.

    Attributes:
        row_start: ``[bound]`` int64 ``indptr[v]`` of each frontier node.
        degree: ``[bound]`` int64 its in-degree (0 past the valid prefix).
        offsets: ``[bound]`` int64 inclusive end of each node's output edges:
            edges grouped by sub-batch, then by target in frontier order.
        order: ``[bound]`` int64 frontier positions, per sub-batch its full
            nodes then its random nodes, each in frontier order (valid prefix
            ``num_frontier``).
        edge_ptr: ``[K + 1]`` int64 where each sub-batch's edges start;
            ``edge_ptr[K]`` is the hop's edge count.
        num_full: ``[K]`` int64 full nodes of each sub-batch (GARDEN's
            BoundPtr: ``order[batch_ptr[k] : batch_ptr[k] + num_full[k]]`` are
            sub-batch ``k``'s full nodes).
        visit: with ``sort_by_node``, ``[bound]`` int64 frontier positions
            in node-id order (valid prefix ``num_frontier``), the order the
            row bounds were read in; else None.
    """
    row_start: torch.Tensor
    degree: torch.Tensor
    offsets: torch.Tensor
    order: torch.Tensor
    edge_ptr: torch.Tensor
    num_full: torch.Tensor
    visit: torch.Tensor | None = None
