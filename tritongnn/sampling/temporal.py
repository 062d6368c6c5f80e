"""Temporal sampling in ``NeighborSampler`` (PyG's ``time_attr``).

A temporal sampler is disjoint (PyG 2.8 forces ``disjoint=True`` with
time): every seed slot has its own subgraph and its own time, and in each
hop a frontier node only samples neighbours no later than its slot's
seed's time (``kernels.sample_temporal``: node- or edge-level time, rows
sorted by time). The seed times are ``[B]``, the caller's (PyG's
``input_time``) or the seeds' node times (pyg-lib's default; edge-level
time has none, and needs them given). Per hop the frontier slot ``i``
reads ``seed_time[frontier_batch[i]]``; slots past the frontier's count
hold stale sub-batch ids, clamped into range (their windows are never read).

Temporal batches run eagerly: the sampler's CUDA graphs take the seeds
and Philox seeds as inputs, not times, so ``sample_disjoint`` skips the
capture for them.
"""
from __future__ import annotations

import torch

from ..kernels._launch import on_device
from ..kernels.sample_temporal import STRATEGIES, TIME_DTYPES


def check_times(node_time, edge_time, strategy: str, graph, device) -> dict:
    """The sampler's temporal keyword arguments for ``sample_neighbors``
    (``{}`` where it is not temporal); TypeError/ValueError naming the bad
    argument."""
    if strategy not in STRATEGIES:
        raise ValueError(f"temporal_strategy must be one of {STRATEGIES}, got {strategy!r}")
    if node_time is None and edge_time is None:
        return {}
    if node_time is not None and edge_time is not None:
        raise ValueError("node_time and edge_time exclude each other (one time attribute, node- or edge-level)")
    name, time = ("node_time", node_time) if node_time is not None else ("edge_time", edge_time)
    expected = graph.num_nodes if node_time is not None else graph.num_edges
    if not isinstance(time, torch.Tensor) or time.dim() != 1 or time.numel() != expected:
        raise ValueError(f"{name} must be a 1-D tensor of shape [{expected}], got "
                         f"{tuple(getattr(time, 'shape', ()))}")
    if time.dtype not in TIME_DTYPES:
        raise TypeError(f"{name} must hold int64, int32, float32 or float64 times, got {time.dtype}")
    if not on_device(time, torch.device(device)):
        raise ValueError(f"{name} lives on {time.device}, the sampler on {device}")
    return {name: time, "temporal_strategy": strategy}


def batch_seed_times(times: dict, seeds: torch.Tensor, seed_time) -> torch.Tensor:
    """``[B]`` seed times of a batch: ``seed_time`` checked (in the time's
    dtype, one per seed, on the seeds' device), else the seeds' node times;
    edge-level time without ``seed_time`` raises ValueError (pyg-lib's)."""
    time = times.get("node_time", times.get("edge_time"))
    if seed_time is None:
        if "node_time" not in times:
            raise ValueError("seed_time is needed with edge_time (edge-level time: seeds have no node time; "
                             "PyG's input_time)")
        return times["node_time"][seeds]
    if not isinstance(seed_time, torch.Tensor) or seed_time.dim() != 1 or seed_time.numel() != seeds.numel():
        raise ValueError(f"seed_time must be a 1-D tensor of {seeds.numel()} times (one per seed), got "
                         f"{tuple(getattr(seed_time, 'shape', ()))}")
    if seed_time.dtype != time.dtype:
        raise TypeError(f"seed_time must hold the time attribute's {time.dtype} times, got {seed_time.dtype}")
    if seed_time.device != seeds.device:
        raise ValueError(f"seed_time lives on {seed_time.device}, the seeds on {seeds.device}")
    return seed_time


def hop_times(seed_time: torch.Tensor, frontier_batch: torch.Tensor, times: dict) -> dict:
    """``sample_neighbors``' temporal arguments for one hop: each frontier
    slot's seed time (``seed_time[frontier_batch]``, stale slots clamped
    into range), no sync."""
    if seed_time.numel() == 0:
        slot_time = seed_time.new_empty(frontier_batch.shape)
    else:
        slot_time = seed_time[frontier_batch.clamp(0, seed_time.numel() - 1)]
    return dict(times, seed_time=slot_time)
