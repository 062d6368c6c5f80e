"""``NeighborLoader`` over a ``HeteroData``: PyG's heterogeneous batches from
the GPU sampler (``sampling.hetero``).

``tritongnn.NeighborLoader(hetero_data, ...)`` is one of these. The graph
is one segment CSC over global ids (``sampling.hetero_layout``), on the GPU
or in pinned host memory read through UVA (``placement``, chosen as for a
``Data``); each node type's ``x`` is a table of its own there, gathered by
the type's ``n_id`` with the same kernel (``kernels.gather_rows``), and the
other attributes of each node and edge type are sliced by ``n_id`` /
``e_id`` as PyG's ``filter_hetero_data`` does. The pass machinery is the
homogeneous loader's (``Schedule``, the prefetching producer, ``stats``,
``loader(index)``); batches are built eagerly (no CUDA-graph replay), and
the dual cache and the options that serve it are for ``Data`` only so far.
"""
from __future__ import annotations

import logging

import torch
from torch_geometric.data import Data, HeteroData

from ..graph import csc_bytes
from ..host_memory import as_pinned
from ..memory import check_reserve
from ..sampling.arguments import check_num_neighbors
from ..sampling.hetero import HeteroSampler
from ..sampling.hetero_layout import HeteroLayout
from ..stores import as_hetero_data, is_store_pair
from . import arguments
from .growth import CacheGrowth
from .hetero_assemble import EdgeAttributes, HeteroAssembler
from .neighbor_loader import NeighborLoader, loader_device
from .placement import choose_placement
from .schedule import Schedule
from .shard import resolve_ranks
from .tiers import working_sets
from .timing import StageTimes

_log = logging.getLogger("tritongnn")

# NeighborLoader's options for the dual cache and super-batching, at the
# values that mean "off": a HeteroData loader has none of them yet
_DATA_ONLY = dict(cache_budget=None, cache_profile=None, profile_epochs=3, cache_policy="profile",
                  dynamic_cache=None, warm_budget=None, reuse=False, reorder_group=1, super_batch=1,
                  build_dir=None)


def hetero_fanouts(num_neighbors, edge_types: list[tuple]) -> dict:
    """PyG's ``num_neighbors`` for a ``HeteroData``: one list for every edge
    type, or a dict of one per edge type, all with the same number of hops."""
    if not isinstance(num_neighbors, dict):
        fanouts = check_num_neighbors(num_neighbors)
        return {e: list(fanouts) for e in edge_types}
    out = {}
    for key, value in num_neighbors.items():
        if tuple(key) not in edge_types:
            raise ValueError(f"num_neighbors has a key {key!r} that is not an edge type of data "
                             f"({edge_types})")
        out[tuple(key)] = check_num_neighbors(value)
    missing = [e for e in edge_types if e not in out]
    if missing:
        raise ValueError(f"num_neighbors has no fanouts for the edge types {missing}: give a list for every "
                         f"edge type (0 samples none)")
    if len({len(v) for v in out.values()}) > 1:
        raise ValueError(f"Number of hops must be the same across all edge types, got "
                         f"{ {e: len(v) for e, v in out.items()} } (PyG's: hops must be the same across all "
                         f"edge types)")
    return out


def check_input_type(input_nodes, layout: HeteroLayout):
    """PyG's ``input_nodes`` for a ``HeteroData``: a node type, or ``(node
    type, ids / bool mask / None)``; returns the type and the rest."""
    if isinstance(input_nodes, str):
        node_type, nodes = input_nodes, None
    elif isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2 and isinstance(input_nodes[0], str):
        node_type, nodes = input_nodes
    else:
        raise ValueError(f"input_nodes for a HeteroData must be a node type or (node type, ids or mask), got "
                         f"{type(input_nodes).__name__}")
    if node_type not in layout.type_index:
        raise ValueError(f"input_nodes names the node type {node_type!r}, which data does not have (its "
                         f"types: {layout.node_types})")
    return node_type, nodes


def _check_edges(data: HeteroData, layout: HeteroLayout) -> list[torch.Tensor]:
    """Each edge type's ``edge_index`` checked: a dense ``[2, E]`` integer
    tensor with sources and targets within their types' node counts."""
    edge_indices = []
    for e, edge_type in enumerate(layout.edge_types):
        name = f"data[{edge_type!r}].edge_index"
        edge_index = data[edge_type].edge_index
        arguments.check_edge_index(edge_index, name)
        src_n = layout.num_nodes_of(edge_type[0])
        dst_n = layout.num_nodes_of(edge_type[2])
        if edge_index.numel():
            low, high = int(edge_index.min()), edge_index.amax(1).tolist()
            if low < 0 or high[0] >= src_n or high[1] >= dst_n:
                raise ValueError(f"{name} has ids outside its node types ({edge_type[0]!r}: {src_n} nodes, "
                                 f"{edge_type[2]!r}: {dst_n}): smallest {low}, largest source {high[0]}, "
                                 f"largest target {high[1]}")
        edge_indices.append(edge_index)
    return edge_indices


def _edge_weight(data: HeteroData, layout: HeteroLayout, weight_attr, replace: bool, graph, device):
    """PyG's ``weight_attr`` over a ``HeteroData``: the named attribute of
    each edge type that has it (uniform, weight 1, for one that does not),
    checked per type, in the segment CSC's order; None for None."""
    if weight_attr is None:
        return None
    parts, found = [], False
    for edge_type in layout.edge_types:
        store = data[edge_type]
        num = store.edge_index.shape[-1]
        if weight_attr in store:
            found = True
            size = max(layout.num_nodes_of(edge_type[0]), layout.num_nodes_of(edge_type[2]))
            one = Data(edge_index=store.edge_index, num_nodes=size, **{weight_attr: store[weight_attr]})
            parts.append(arguments.check_weight_attr(one, weight_attr, replace).to(torch.float32))
        else:
            parts.append(torch.ones(num, dtype=torch.float32))
    if not found:
        raise ValueError(f"weight_attr={weight_attr!r} is an attribute of no edge type of data")
    return arguments.csc_edge_weight(torch.cat(parts), graph, device)


class HeteroNeighborLoader(NeighborLoader):
    """``NeighborLoader`` for a ``HeteroData`` (module docstring); made by
    ``tritongnn.NeighborLoader`` itself, with its arguments. Batches are
    ``HeteroData``: per node type ``n_id``, ``x`` and the node attributes,
    ``num_sampled_nodes`` (per hop); per edge type ``edge_index`` (local to
    its types), ``e_id``, the edge attributes, ``num_sampled_edges``; the
    input type's ``input_id`` and ``batch_size``."""

    def __init__(self, data, num_neighbors, input_nodes=None, input_time=None,
                 replace: bool = False, *, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, transform=None, device=None, placement: str = "auto",
                 generator: torch.Generator | None = None, seed: int | None = None,
                 prefetch: int = 2, sample_kernel: str = "auto", feature_dtype: torch.dtype | None = None,
                 rank: int | None = None, world_size: int | None = None, share_host_memory: bool = True,
                 memory_reserve="auto", **kwargs):
        for name, off in _DATA_ONLY.items():
            value = kwargs.pop(name, off)
            if value is not off and value != off:
                raise NotImplementedError(f"{name}={value!r} with a HeteroData is not supported yet (the dual "
                                          f"cache and super-batches serve a Data)")
        sampling = arguments.check_kwargs(dict(kwargs, input_time=input_time))
        if sampling["disjoint"] or input_time is not None or kwargs.get("time_attr") is not None:
            raise NotImplementedError("disjoint and temporal sampling (disjoint, time_attr, input_time) of a "
                                      "HeteroData are not supported yet")
        arguments.check_settings(batch_size=batch_size, super_batch=1, sample_kernel=sample_kernel,
                                 placement=placement, prefetch=prefetch, generator=generator, seed=seed,
                                 feature_dtype=feature_dtype, share_host_memory=share_host_memory,
                                 cache_policy="profile")
        self.device = loader_device(device)
        self.memory_reserve = check_reserve(memory_reserve)
        if is_store_pair(data):
            data = as_hetero_data(data)  # (PyG's remote back-ends, read once)
        self.layout = layout = HeteroLayout.of(data)
        edge_indices = _check_edges(data, layout)
        self.num_neighbors = hetero_fanouts(num_neighbors, layout.edge_types)
        self.input_type, nodes = check_input_type(input_nodes, layout)
        self.input_nodes, input_ids = arguments.check_input_nodes(nodes, layout.num_nodes_of(self.input_type),
                                                                  self.device)

        node_stores = {t: data[t] for t in layout.node_types}
        features = {t: self._features(store, t) for t, store in node_stores.items()}
        feature_bytes = sum(arguments.feature_bytes(x, feature_dtype if x is not None and x.dtype.is_floating_point
                                                    else None) for _, x in features.values())
        attribute_bytes = sum(sum(v.numel() * v.element_size() for v, _ in attrs.node.values()
                                  if isinstance(v, torch.Tensor)) for attrs, _ in features.values())
        width = max([1] + [x.size(1) for _, x in features.values() if x is not None])
        # a hop's fanout over all edge types (for the working set): their sum, -1 where one takes all
        per_hop = [-1 if -1 in hop else sum(hop) for hop in zip(*self.num_neighbors.values())]
        chosen = choose_placement(
            placement, self.device, csc_bytes(max(layout.num_segments + 1, layout.num_nodes), layout.num_edges,
                                              True),
            feature_bytes, attribute_bytes, cache_budget=None, host_only=False, reserve=memory_reserve,
            working=working_sets(batch_size, per_hop, layout.num_nodes, layout.num_edges,
                                 (layout.num_nodes, width), feature_bytes // max(1, layout.num_nodes),
                                 prefetch)["replayed"])
        self.placement = chosen.placement
        self.placement_reason = chosen.reason + (" (no cache: the dual cache serves a Data only so far)"
                                                 if chosen.cache_budget is not None else "")
        _log.info("tritongnn.NeighborLoader: %s", self.placement_reason)
        host = self.placement == "host" and self.device.type == "cuda"

        self.batch_size, self.shuffle, self.drop_last = batch_size, bool(shuffle), bool(drop_last)
        self.super_batch, self.transform, self.prefetch = 1, transform, prefetch
        self.rank, self.world_size = resolve_ranks(rank, world_size)
        self.temporal = None
        self._start_passes(seed, generator)

        self.graph = layout.build_csc(edge_indices, self.device, pin=host)
        self.x = {}
        for t, (attrs, x) in features.items():
            if x is not None:
                stored = arguments.stored_features(x, feature_dtype if x.dtype.is_floating_point else None,
                                                   self.device, pinned=host)
                self.x[t] = as_pinned(stored, self.device) if host else stored.to(self.device).contiguous()
        edge_attrs = {e: EdgeAttributes.of(data, e, self.device) for e in layout.edge_types}
        weight = _edge_weight(data, layout, kwargs.get("weight_attr"), replace, self.graph, self.device)
        self.cache, self.cache_profile, self._host_ranks = None, None, 1
        self.build_loaded, self.build_seconds = [], {}
        self.seeds = layout.global_ids(self.input_type, self.input_nodes)
        self.sampler = HeteroSampler(layout, self.graph, self.num_neighbors, replace, self.device,
                                     edge_weight=weight, method=sample_kernel,
                                     subgraph_type=sampling["subgraph_type"])
        self.stats_history: list[dict] = []
        self.times = StageTimes(self.device)
        self.host_stats = self.reorder = self.reuse = None
        self.assembler = HeteroAssembler(
            data=data, x=self.x, x_dtype={t: x.dtype for t, (_, x) in features.items() if x is not None},
            attrs={t: attrs for t, (attrs, _) in features.items()}, edge_attrs=edge_attrs,
            input_type=self.input_type, input_ids=input_ids, transform=transform, times=self.times,
            device=self.device)
        self.growth = CacheGrowth(None, self.device, eligible=False)
        self.schedule = Schedule(sampler=self.sampler, seeds=self.seeds, generator=self.generator, super_batch=1,
                                 reorder=None, assembler=self.assembler)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()

    def _features(self, store, node_type: str):
        """A node type's attributes (``arguments.split_attributes``: its
        batches carry ``num_nodes`` where it is set) and its ``x`` checked,
        as for a ``Data``."""
        try:
            return arguments.split_attributes(Data(**dict(store)), self.layout.num_nodes_of(node_type), self.device)
        except (TypeError, ValueError) as error:  # the message names data.x: say whose
            raise type(error)(f"data[{node_type!r}]: {error}") from error

    def _replays_batches(self) -> bool:
        return False  # (hetero batches are built eagerly)

    @property
    def host_arrays(self) -> list[torch.Tensor]:
        arrays = [self.graph.indptr, self.graph.indices, self.graph.edge_perm, *self.x.values()]
        return [t for t in arrays if t is not None and t.device.type == "cpu"]

    def __repr__(self) -> str:
        return "NeighborLoader()"  # (as PyG's, which is one class for both)
