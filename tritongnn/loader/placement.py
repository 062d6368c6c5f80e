"""Where the loader keeps the graph and the features: the GPU, or pinned
host memory read through UVA with the dual cache in front of it.

``placement="auto"`` (the default) puts both on the GPU when they fit the
memory the process may still use there with ``memory_reserve`` left for the
model (its optimiser, activations and the batches in flight); else in host
memory, with ``cache_budget="auto"``: the cache takes what the reserve leaves.
An explicit placement that cannot fit fails here, naming the sizes, before
anything large is allocated.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..memory import device_free_bytes, model_reserve, size

PLACEMENTS = ("auto", "device", "host")


@dataclass(frozen=True)
class Placement:
    """What the loader chose: ``placement`` (``"device"`` or ``"host"``),
    the ``cache_budget`` it builds with, and why, in one line."""
    placement: str
    cache_budget: int | str | None
    reason: str


def choose_placement(placement: str, device: torch.device, graph_bytes: int, feature_bytes: int,
                     attribute_bytes: int, *, cache_budget, host_only: bool, reserve,
                     working: int = 0) -> Placement:
    """The placement for a graph of ``graph_bytes`` (CSC, its ``edge_perm``
    included where it keeps one: ``graph.csc_bytes``), ``feature_bytes``
    (``x`` as stored) and ``attribute_bytes`` (other node and edge
    attributes, on the device either way) on ``device``. ``host_only``:
    an argument that needs host placement was given (a cache budget, reuse,
    a warm copy). ``reserve``: ``memory_reserve`` (bytes or ``"auto"``,
    which leaves ``working``, the batches' and a model's working set, or
    more: ``memory.model_reserve``)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if device.type != "cuda":
        if placement == "host" or (placement == "auto" and host_only):
            return Placement("host", cache_budget, f"placement='host' on {device}: host memory")
        return Placement("device", cache_budget, f"placement={placement!r} on {device}: host memory")
    resident = graph_bytes + feature_bytes
    free = device_free_bytes(device)
    if placement == "device":
        if resident + attribute_bytes > free:
            raise ValueError(
                f"placement='device' puts the graph ({size(graph_bytes)}) and the features "
                f"({size(feature_bytes)}) on {device}, and the process may use {size(free)} more there: "
                f"pass placement='auto' or 'host' (pinned host memory with a GPU cache), or "
                f"feature_dtype=torch.bfloat16 to halve the features")
        return Placement("device", cache_budget, f"placement='device': graph {size(graph_bytes)} and "
                                                 f"features {size(feature_bytes)} on {device}")
    if placement == "host" or host_only:  # (placement "auto" here)
        return Placement("host", cache_budget, f"placement='host': graph {size(graph_bytes)} and features "
                                               f"{size(feature_bytes)} in pinned host memory")
    left = model_reserve(device, reserve, working)
    if resident + attribute_bytes + left <= free:
        return Placement("device", None, f"placement='auto' -> 'device': graph {size(graph_bytes)} + "
                                         f"features {size(feature_bytes)} + reserve {size(left)} fit the "
                                         f"{size(free)} free on {device}")
    return Placement("host", "auto", f"placement='auto' -> 'host' with cache_budget='auto': graph "
                                     f"{size(graph_bytes)} + features {size(feature_bytes)} + reserve "
                                     f"{size(left)} exceed the {size(free)} free on {device}")
