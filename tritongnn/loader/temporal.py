"""PyG's temporal arguments (``time_attr``, ``input_time``,
``temporal_strategy``) checked against ``data`` and the seeds, as PyG 2.8's
``NeighborLoader`` and ``NeighborSampler`` take them:

- ``time_attr`` names a node-level attribute of ``data`` (PyG asks
  ``data.is_node_attr`` first) or else an edge-level one; anything else is
  PyG's ValueError. A 1-D tensor (or numpy array) of int64 (PyG's, pyg-lib
  reads ``int64_t``), int32, float32 or float64 times.
- ``input_time`` overrides the seeds' times and needs ``time_attr`` (PyG's
  ValueError); one time per seed, integer, or floating where the time
  attribute is. Without it a seed's time is its node's (node-level time);
  edge-level time has no node time, and pyg-lib refuses to sample it
  without seed times ("Seed time needs to be specified"): refused here at
  construction, naming ``input_time``.
- ``temporal_strategy`` is ``"uniform"`` or ``"last"`` (pyg-lib's "No
  valid temporal strategy found" otherwise); unread without ``time_attr``.
- ``weight_attr`` with ``time_attr``: pyg-lib refuses the pair.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..kernels.sample_temporal import STRATEGIES, TIME_DTYPES
from ..sampling.temporal import sampler_times
from .arguments import as_tensor, index_tensor, named_attribute


@dataclass
class TemporalArgs:
    """The checked temporal arguments: the time attribute (``node_time``
    ``[N]`` by node id or ``edge_time`` ``[E]`` in ``edge_index`` order,
    the user's tensors, not copied), ``input_time`` ``[num_seeds]`` in their
    dtype (or None: the seeds' node times), the strategy."""
    time_attr: str
    node_time: torch.Tensor | None
    edge_time: torch.Tensor | None
    input_time: torch.Tensor | None
    strategy: str

    @property
    def time(self) -> torch.Tensor:
        return self.node_time if self.node_time is not None else self.edge_time


def check_temporal(data, time_attr, input_time, temporal_strategy, weight_attr, num_seeds: int,
                   num_edges: int, timed_seeds: bool = False) -> TemporalArgs | None:
    """The temporal arguments checked (module docstring); None where
    sampling is not temporal (no ``time_attr``). ``timed_seeds``: every
    batch brings its seeds' times (a link loader's ``edge_label_time``), so
    edge-level time needs no ``input_time``. Nothing is modified."""
    if temporal_strategy not in STRATEGIES:
        raise ValueError(f"temporal_strategy must be one of {STRATEGIES}, got {temporal_strategy!r}")
    if time_attr is None:
        if input_time is not None:
            raise ValueError("Received conflicting 'input_time' and 'time_attr' arguments: 'input_time' is set "
                             "while 'time_attr' is not set.")
        return None
    if weight_attr is not None:
        raise ValueError(f"time_attr={time_attr!r} and weight_attr={weight_attr!r} exclude each other "
                         f"(pyg-lib samples by time or by weight, not both)")
    value = named_attribute(data, "time_attr", time_attr, "times", "a node or edge attribute",
                            missing=f"The time attribute '{time_attr}' is neither a node-level or edge-level "
                                    f"attribute (data's attributes: {sorted(data.keys())})")
    node_level = data.is_node_attr(time_attr)
    if not node_level and not data.is_edge_attr(time_attr):
        raise ValueError(f"The time attribute '{time_attr}' is neither a node-level or edge-level attribute "
                         f"(shape {tuple(value.shape)}; {data.num_nodes} nodes, {num_edges} edges)")
    time = as_tensor(value, f"data.{time_attr}")
    expected = data.num_nodes if node_level else num_edges
    if time.dim() != 1 or time.numel() != expected:
        level = "node" if node_level else "edge"
        raise ValueError(f"time_attr={time_attr!r}: data.{time_attr} must be a 1-D {level}-level attribute of "
                         f"shape [{expected}], got shape {tuple(time.shape)}")
    if time.dtype not in TIME_DTYPES:
        raise TypeError(f"time_attr={time_attr!r}: data.{time_attr} must hold int64 (PyG's), int32, float32 or "
                        f"float64 times, got {time.dtype}")
    if input_time is not None:
        input_time = check_input_time(input_time, time.dtype, num_seeds)
    elif not node_level and not timed_seeds:
        raise ValueError(f"time_attr={time_attr!r} is edge-level: pass input_time, one time per seed (edges "
                         f"have times, seeds do not; pyg-lib needs seed times to sample by edge time)")
    return TemporalArgs(time_attr, time if node_level else None, None if node_level else time, input_time,
                        temporal_strategy)


def check_input_time(input_time, dtype: torch.dtype, num_seeds: int, name: str = "input_time",
                     per: str = "seed of input_nodes") -> torch.Tensor:
    """``input_time`` (or the argument ``name``: a link loader's
    ``edge_label_time``) as a 1-D tensor of ``num_seeds`` times in ``dtype``
    (the time attribute's): integers, or floats where ``dtype`` is
    floating. A new tensor where it is converted; the user's is never
    written."""
    times = index_tensor(input_time, name)
    if times is None:
        raise TypeError(f"{name} must be a tensor, numpy array or list of times, got "
                        f"{type(input_time).__name__}")
    if times.dtype == torch.bool or times.dtype.is_complex or \
            (times.dtype.is_floating_point and not dtype.is_floating_point):
        raise TypeError(f"{name} must hold {'numbers' if dtype.is_floating_point else 'integers'} as the "
                        f"time attribute's {dtype} times do, got {times.dtype}")
    if times.dim() != 1 or times.numel() != num_seeds:
        raise ValueError(f"{name} must have shape [{num_seeds}] (one time per {per}), got "
                         f"{tuple(times.shape)}")
    return times.to(dtype)


def loader_temporal(data, kwargs: dict, input_time, num_seeds: int, num_edges: int, world_size: int,
                    build_dir, device, timed_seeds: bool = False) -> TemporalArgs | None:
    """``NeighborLoader``'s temporal arguments (``time_attr`` and
    ``temporal_strategy`` in ``kwargs``) checked (``check_temporal``), None
    where it is not temporal; ``input_time`` on ``device``; ``timed_seeds``:
    ``check_temporal``'s. The time-sorted build composes the graph's
    edge ids in place (``temporal_sampling``): not with several ranks
    (their shared host copy) nor ``build_dir`` (a saved graph), refused."""
    args = check_temporal(data, kwargs.get("time_attr"), input_time, kwargs.get("temporal_strategy", "uniform"),
                          kwargs.get("weight_attr"), num_seeds, num_edges, timed_seeds)
    if args is not None and (world_size > 1 or build_dir is not None):
        raise NotImplementedError(f"time_attr={args.time_attr!r} with world_size={world_size} / build_dir="
                                  f"{build_dir!r}: temporal sampling builds its graph in one process, unsaved")
    if args is not None and args.input_time is not None:
        args.input_time = args.input_time.to(device)
    return args


def temporal_sampling(args: TemporalArgs | None, order: torch.Tensor | None, graph, cache, device) -> dict:
    """``NeighborSampler``'s temporal keyword arguments (``{}`` where not
    temporal), after the graph built from ``sampling.temporal.time_sorted``'s edges has its
    edge ids composed with ``order``, in place (``graph.edge_perm`` and the
    cache's GPU copy of its first entries): ``e_id`` and edge attributes
    stay the user's edge ids."""
    if args is None:
        return {}
    for perm in (graph.edge_perm, None if cache is None else cache.hot_edge_perm):
        if perm is not None:
            perm.copy_(order.to(perm.device)[perm.to(torch.int64)])
    times = sampler_times(args, None if cache is None else cache.order, graph.edge_perm, device)
    return dict(times, temporal_strategy=args.strategy)
