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

from dataclasses import dataclass

import numpy as np
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


@dataclass
class TimeAttribute:
    """A time attribute of ``data``: ``node_time`` ``[N]`` by node id or
    ``edge_time`` ``[E]`` in ``edge_index`` order (the other None); what
    ``time_order`` and ``sampler_times`` read (``loader.temporal.TemporalArgs``
    has the same two fields)."""
    node_time: torch.Tensor | None
    edge_time: torch.Tensor | None


def data_times(data, time_attr: str) -> TimeAttribute:
    """``data[time_attr]`` as a node-level (PyG asks ``is_node_attr``
    first) or else edge-level 1-D tensor of times; ValueError/TypeError
    naming ``time_attr`` otherwise."""
    if not isinstance(time_attr, str) or time_attr not in data.keys():
        raise ValueError(f"time_attr={time_attr!r} is not an attribute of data (its attributes: "
                         f"{sorted(data.keys())})")
    value = data[time_attr]
    time = torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value
    if not isinstance(time, torch.Tensor) or time.dim() != 1 or time.dtype not in TIME_DTYPES:
        raise TypeError(f"time_attr={time_attr!r}: data.{time_attr} must be a 1-D tensor of int64, int32, "
                        f"float32 or float64 times")
    if data.is_node_attr(time_attr) and time.numel() == data.num_nodes:
        return TimeAttribute(time, None)
    if data.is_edge_attr(time_attr) and time.numel() == data.edge_index.size(1):
        return TimeAttribute(None, time)
    raise ValueError(f"The time attribute '{time_attr}' is neither a node-level or edge-level attribute")


def time_order(edge_index: torch.Tensor, args) -> torch.Tensor:
    """``[E]`` int64 edge permutation that sorts ``edge_index`` by time
    (the source's node time, or the edge's), stably: built from
    ``edge_index[:, perm]`` by a stable sort by target, each CSC row is
    sorted by time with ties in edge order, PyG's ``lexsort([time, col])``
    (``sampler.utils.sort_csc``), the kernels' precondition."""
    if args.edge_time is not None:
        key = args.edge_time.to(edge_index.device)
    else:
        key = args.node_time.to(edge_index.device)[edge_index[0].to(torch.int64)]
    return torch.argsort(key, stable=True)


def sampler_times(args, order: torch.Tensor | None, edge_perm: torch.Tensor | None,
                  device: torch.device) -> dict:
    """``{"node_time": ...}`` or ``{"edge_time": ...}`` as the sampler
    reads them on ``device``: node times by internal id (``order[new] =
    old``, the hot-first relabelling, or None), edge times in CSC order
    (``edge_perm``, CSC position to edge id, or None where they are one)."""
    if args.node_time is not None:
        time = args.node_time if order is None else args.node_time[order.to(args.node_time.device)]
        return {"node_time": time.to(device).contiguous()}
    time = args.edge_time if edge_perm is None else args.edge_time[edge_perm.to(args.edge_time.device)]
    return {"edge_time": time.to(device).contiguous()}


def time_sorted(edge_index: torch.Tensor, args) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(edges, order)``: what the CSC graph is built from, ``edge_index``
    itself where not temporal, else its edges in time order
    (``time_order``, ``order``: the edge id of each), so every row is
    sorted by time (the relabel of the cache keeps each row's order)."""
    if args is None:
        return edge_index, None
    order = time_order(edge_index, args)
    return edge_index[:, order.to(edge_index.device)], order
