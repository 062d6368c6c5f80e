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
    """The edges of one hop, grouped by target in frontier order.

    Attributes:
        src: ``[bound]`` int64 global id of each sampled neighbour (edge source).
        dst: ``[bound]`` int64 local id of the node it was sampled for (target).
        eid: ``[bound]`` int64 CSC position of each edge, or None.
        num_edges: ``[1]`` int64 device scalar, the valid prefix.
    """
    src: torch.Tensor
    dst: torch.Tensor
    eid: torch.Tensor | None
    num_edges: torch.Tensor


@dataclass(slots=True)
class MappedHop:
    """One hop's candidates mapped to local ids.

    Attributes:
        local: ``[bound]`` int64 local id of every candidate.
        new_nodes: ``[bound]`` int64 global ids of the nodes new to their
            sub-batch, in order of first appearance, grouped by sub-batch.
        new_local: ``[bound]`` int64 their local ids.
        new_batch: ``[bound]`` int64 their sub-batch, or None for one batch.
        num_new: ``[1]`` int64 device scalar, the valid prefix of ``new_*``.
        num_new_per_batch: ``[K]`` int64 new nodes of each sub-batch.
    """
    local: torch.Tensor
    new_nodes: torch.Tensor
    new_local: torch.Tensor
    new_batch: torch.Tensor | None
    num_new: torch.Tensor
    num_new_per_batch: torch.Tensor
