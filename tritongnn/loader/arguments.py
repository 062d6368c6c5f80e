"""The loader's arguments checked and normalised before anything is built:
PyG's keyword arguments (the unsupported ones refused by name), the seeds,
the attributes of ``data`` split into what batches slice by ``n_id`` or
``e_id`` and what they copy, and ``x`` in its stored dtype."""
from __future__ import annotations

import copy
import enum
import numbers
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from torch_geometric.data import Data

from .._checks import check_positive_int
from ..kernels._launch import check_ids_in_range
from ..cache.allocator import check_budget
from ..cache.reorder import check_group
from ..graph import CSCGraph, in_target_order
from ..host_memory import pinned_empty
from ..kernels.sample import METHODS as SAMPLE_METHODS
from ..sampling.disjoint import check_disjoint
from ..sampling.subgraph import resolve_subgraph_type
from ..stores import as_data, is_store_pair
from . import frames
from .placement import PLACEMENTS

# PyG arguments this loader does not implement yet, with the value that means
# "not used": passing anything else raises NotImplementedError naming it.
_UNSUPPORTED = {
    "transform_sampler_output": None,
    "neighbor_sampler": None,
    "collate_fn": None,
    "sampler": None,
    "batch_sampler": None,
    "generator_device": None,
    "custom_cls": None,  # (PyG's NodeLoader's own, reached through NeighborLoader's kwargs)
    "input_id": None,
}
# DataLoader worker settings: there are no workers (sampling runs on the GPU in
# this process), so these have no effect; say so instead of dropping them.
_NO_EFFECT = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor",
              "timeout", "worker_init_fn", "multiprocessing_context", "pin_memory_device",
              "in_order", "filter_per_worker")
_FEATURE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # stores narrower than data.x's
# what the feature gather moves (bit for bit): no complex (Triton has no
# such dtype) nor float8 (no conversion under the interpreter)
_X_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.uint8, torch.int8,
             torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32, torch.uint64)
CACHE_POLICIES = ("profile", "degree")


def sliced_attributes(data: Data):
    """``(key, value, is_node)`` of the attributes batches slice by ``n_id``
    (node) or ``e_id`` (edge), ``x`` and ``edge_index`` aside: tensors and
    numpy arrays, and TensorFrame-like tables (``frames``)."""
    for key, value in data.items():
        if key in ("x", "edge_index", "num_nodes"):
            continue
        if frames.is_frame(value):
            is_node = frames.frame_kind(value, data.num_nodes, num_edges(data))
            if is_node is not None:
                yield key, value, is_node
        elif isinstance(value, (torch.Tensor, np.ndarray)) and (data.is_node_attr(key) or data.is_edge_attr(key)):
            yield key, value, data.is_node_attr(key)


def _nbytes(value) -> int:
    """GPU bytes of an attribute the loader moves there (a frame is sliced where it lives: none)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    return int(value.nbytes) if isinstance(value, np.ndarray) else 0


def feature_bytes(x, feature_dtype) -> int:
    """Bytes of ``x`` as the loader stores it (in ``feature_dtype``)."""
    if x is None or not hasattr(x, "shape"):
        return 0
    if not isinstance(feature_dtype, torch.dtype):  # None, or refused by name later
        return _nbytes(x)
    return int(np.prod(x.shape)) * feature_dtype.itemsize


def attribute_bytes(data: Data) -> int:
    return sum(_nbytes(value) for _, value, _ in sliced_attributes(data))


def keeps_edge_perm(edge_index: torch.Tensor) -> bool:
    """Whether the CSC graph keeps ``edge_perm``, the map from CSC positions
    to edge ids that batches' ``e_id`` (PyG's always there) and edge
    attributes go through: unless ``edge_index`` is grouped by target, when
    a CSC position is the edge's id. (A cache's hot-first relabel makes
    the map of its own graph either way: ``CSCGraph.relabel``.)"""
    return not in_target_order(edge_index)


def num_edges(data: Data) -> int:
    edge_index = data.edge_index
    return edge_index.shape[-1] if hasattr(edge_index, "shape") and len(edge_index.shape) == 2 else 0


def as_tensor(value, name: str) -> torch.Tensor:
    """A numpy array (an ``np.memmap`` too) as a torch tensor over the same
    memory, never written (a read-only one too); a tensor as it is."""
    if not isinstance(value, np.ndarray):
        return value
    try:
        with warnings.catch_warnings():  # a read-only array: the loader only reads it
            warnings.filterwarnings("ignore", message=".*not writable.*")
            return torch.from_numpy(value)
    except TypeError as error:
        raise TypeError(f"{name} is a numpy array of dtype {value.dtype}, which has no torch dtype") from error


def check_kwargs(kwargs: dict) -> dict:
    """PyG's keyword arguments checked (the unsupported refused by name);
    returns the sampler's arguments they ask for: ``subgraph_type``
    (``directed=False``: PyG's deprecated ``"induced"``, with its warning)
    and ``disjoint`` (``sampling.disjoint``; not with ``"induced"``, as PyG;
    forced on by ``time_attr``, as PyG 2.8's ``disjoint or is_temporal``)."""
    for name, value in kwargs.items():
        if name in ("subgraph_type", "directed", "disjoint"):
            continue  # resolve_subgraph_type's, check_disjoint's
        if name in ("time_attr", "input_time", "temporal_strategy"):
            continue  # loader.temporal's
        if name in _UNSUPPORTED:
            default = _UNSUPPORTED[name]
            if isinstance(value, enum.Enum):  # e.g. SubgraphType.directional, PyG's default
                value = value.value
            if value is not default and value != default:
                raise NotImplementedError(
                    f"tritongnn.NeighborLoader does not support {name}={value!r} yet")
        elif name in _NO_EFFECT:
            warnings.warn(f"NeighborLoader: {name}={value!r} has no effect: tritongnn samples and "
                          f"gathers on the GPU in this process, with no DataLoader workers",
                          stacklevel=3)
        elif name == "is_sorted":
            continue  # a hint for PyG's CSC conversion; ours sorts either way
        elif name == "weight_attr":
            continue  # checked against data by check_weight_attr
        else:
            raise TypeError(f"NeighborLoader got an unexpected keyword argument {name!r}")
    subgraph_type = resolve_subgraph_type(kwargs.get("subgraph_type", "directional"),
                                          kwargs.get("directed", True), stacklevel=4)
    disjoint = check_disjoint(kwargs.get("disjoint", False), subgraph_type)
    if kwargs.get("time_attr") is not None:
        disjoint = check_disjoint(True, subgraph_type)
    return dict(subgraph_type=subgraph_type, disjoint=disjoint)


def check_data(data) -> Data:
    """``data`` checked, as the ``Data`` the loader builds from: a
    ``(FeatureStore, GraphStore)`` pair read into one (``stores.as_data``)."""
    if is_store_pair(data):
        data = as_data(data)
    elif isinstance(data, tuple):
        kinds = ", ".join(type(part).__name__ for part in data)
        raise TypeError(f"data as a tuple must be a (FeatureStore, GraphStore) pair, got ({kinds})")
    if not isinstance(data, Data):
        if type(data).__name__ == "HeteroData":  # (NeighborLoader takes one: loader.hetero)
            raise NotImplementedError("HeteroData (heterogeneous graphs) is supported by NeighborLoader only so "
                                      "far")
        raise TypeError(f"data must be a torch_geometric.data.Data or a (FeatureStore, GraphStore) pair, "
                        f"got {type(data).__name__}")
    if "edge_index" not in data:
        if "adj_t" in data:
            raise NotImplementedError("data without edge_index (adj_t, a sparse adjacency) is not supported yet")
        if data.num_nodes is None:
            raise ValueError("data has neither edge_index nor num_nodes: the loader cannot tell the graph's size")
        data = copy.copy(data)  # a graph without edges, as PyG reads it (the user's data unchanged)
        data.edge_index = torch.empty(2, 0, dtype=torch.int64)
    check_edge_index(data.edge_index)
    frames.check_sequences(data)
    return data


def check_edge_index(edge_index, name: str = "data.edge_index") -> None:
    """``data.edge_index`` (``name``) as the graph's build reads it: a dense
    ``[2, E]`` tensor of integer node ids that holds data (ids in range are
    checked as the build reads them)."""
    if not isinstance(edge_index, torch.Tensor):
        kind = type(edge_index)
        hint = " (torch.from_numpy makes one over the same memory)" if isinstance(edge_index, np.ndarray) else ""
        raise TypeError(f"{name} must be a torch.Tensor of shape [2, num_edges], got "
                        f"{kind.__module__}.{kind.__name__}{hint}")
    if edge_index.is_meta:
        raise ValueError(f"{name} is a meta tensor of shape {tuple(edge_index.shape)}: it holds no "
                         f"node ids to build the graph from")
    if edge_index.layout != torch.strided:
        raise TypeError(f"{name} must be a dense tensor, got layout {edge_index.layout}")
    if edge_index.dtype.is_floating_point or edge_index.dtype.is_complex or edge_index.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer node ids, got dtype {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{name} must have shape [2, num_edges], got {tuple(edge_index.shape)}")


def named_attribute(data: Data, argument: str, name, what: str, kind: str, missing: str | None = None):
    """``data[name]`` for the ``argument`` naming it (``weight_attr``,
    ``time_attr``): a tensor or numpy array of ``what``, else TypeError; a
    name not in ``data`` raises ValueError (``missing``, or one naming the
    attributes there)."""
    if not isinstance(name, str):
        raise TypeError(f"{argument} must be the name (a str) of {kind} of data, got {type(name).__name__} {name!r}")
    if name not in data.keys():
        raise ValueError(missing or f"{argument}={name!r} is not an attribute of data (its attributes: "
                                    f"{sorted(data.keys())})")
    value = data[name]
    if not isinstance(value, (torch.Tensor, np.ndarray)):
        raise TypeError(f"{argument}={name!r}: data.{name} must be a tensor of {what}, got {type(value).__name__}")
    return value


def check_weight_attr(data: Data, weight_attr, replace: bool) -> torch.Tensor | None:
    """``data[weight_attr]``, the edge weights PyG's ``weight_attr`` names,
    checked (None for None): a 1-D floating tensor (or numpy array) of one
    finite, non-negative weight per edge; with replacement every node with
    in-edges must have some positive weight among them (PyG's
    ``torch.multinomial`` raises on a zero sum). Not modified."""
    if weight_attr is None:
        return None
    value = named_attribute(data, "weight_attr", weight_attr, "edge weights", "an edge attribute")
    weight = as_tensor(value, f"data.{weight_attr}")
    edges = num_edges(data)
    if weight.dim() != 1 or weight.numel() != edges or not data.is_edge_attr(weight_attr):
        raise ValueError(f"weight_attr={weight_attr!r}: data.{weight_attr} must be an edge attribute of shape "
                         f"[{edges}] (one weight per edge), got shape {tuple(weight.shape)}")
    if not weight.dtype.is_floating_point:
        raise TypeError(f"weight_attr={weight_attr!r}: data.{weight_attr} must hold floating-point weights, "
                        f"got {weight.dtype}")
    # float32 is what the kernels read: a float64 weight past its range is refused too
    bad = ~(weight.to(torch.float32).isfinite() & (weight >= 0))
    if bool(bad.any()):
        edge = int(bad.nonzero()[0])
        raise ValueError(f"weight_attr={weight_attr!r}: edge weights must be finite, non-negative float32 "
                         f"values; data.{weight_attr}[{edge}] = {float(weight[edge])}")
    if replace and edges:
        target = data.edge_index[1].to(weight.device, torch.int64)
        total = torch.zeros(data.num_nodes, dtype=torch.float64, device=weight.device)
        total.index_add_(0, target, weight.to(torch.float64))
        empty = (torch.bincount(target, minlength=data.num_nodes) > 0) & (total == 0)
        if bool(empty.any()):
            node = int(empty.nonzero()[0])
            raise ValueError(f"weight_attr={weight_attr!r} with replace=True: node {node}'s in-edges all have "
                             f"weight 0, so there is no distribution to draw its neighbours from (PyG's "
                             f"torch.multinomial raises on it)")
    return weight


def csc_edge_weight(weight: torch.Tensor | None, graph: CSCGraph, device: torch.device) -> torch.Tensor | None:
    """``weight`` (in ``edge_index`` order) as the sampler on ``device``
    reads it: float32 in the graph's CSC order (``weight[graph.edge_perm]``,
    or ``weight`` as it is where the graph has no ``edge_perm``: its CSC
    positions are the edge ids), where the graph's ``indices`` are (GPU,
    host memory pinned for ``device``, or the CPU); copied in chunks of
    2^24 edges. None for None."""
    if weight is None:
        return None
    perm, indices = graph.edge_perm, graph.indices
    out = pinned_empty(indices.shape, torch.float32, device) if graph.is_pinned else \
        torch.empty(indices.shape, dtype=torch.float32, device=indices.device)
    step = 1 << 24
    for lo in range(0, indices.numel(), step):
        part = slice(lo, lo + step) if perm is None else perm[lo:lo + step].to(weight.device, torch.int64)
        out[lo:lo + step].copy_(weight[part].to(torch.float32))
    return out


def check_settings(*, batch_size, super_batch, sample_kernel, placement, prefetch, generator, seed,
                   feature_dtype, share_host_memory, cache_policy, disjoint: bool = False) -> None:
    """The arguments that need nothing but themselves (or ``disjoint``,
    checked by ``check_kwargs``) to be checked."""
    check_positive_int("batch_size", batch_size)
    check_positive_int("super_batch", super_batch)
    if disjoint and super_batch != 1:
        raise ValueError(f"super_batch={super_batch} with disjoint=True: a disjoint batch already samples its "
                         f"seeds as sub-batches of one launch; take super_batch=1")
    if sample_kernel not in SAMPLE_METHODS:
        raise ValueError(f"sample_kernel must be one of {SAMPLE_METHODS}, got {sample_kernel!r}")
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if not isinstance(prefetch, int) or prefetch < 0:
        raise ValueError(f"prefetch must be an int >= 0, got {prefetch!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if generator is not None and generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU torch.Generator, got one on {generator.device}")
    if seed is not None:
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
        if not 0 <= seed < 2**62:
            raise ValueError(f"seed must be in [0, 2**62), got {seed}")
    if feature_dtype is not None and feature_dtype not in _FEATURE_DTYPES:
        raise TypeError(f"feature_dtype must be one of torch.float16, torch.bfloat16, torch.float32 "
                        f"(or None), got {feature_dtype!r}")
    if not isinstance(share_host_memory, bool):
        raise TypeError(f"share_host_memory must be a bool, got {type(share_host_memory).__name__} "
                        f"{share_host_memory!r}")
    if cache_policy not in CACHE_POLICIES:
        raise ValueError(f"cache_policy must be one of {CACHE_POLICIES}, got {cache_policy!r}")


def check_host_options(placement: str, cache_budget, reuse, reorder_group: int, super_batch: int, dynamic,
                       warm_budget) -> None:
    """The options that save host reads, against the placement chosen
    (``dynamic``: the resolved ``DynamicCacheConfig``, or None)."""
    if cache_budget is not None and placement != "host":
        raise ValueError(f"cache_budget={cache_budget!r} caches a graph kept in host memory: "
                         f"pass placement='host' with it (placement='device' holds it all on the GPU)")
    if not isinstance(reuse, bool) and reuse != "group":
        raise TypeError(f"reuse must be a bool or 'group', got {type(reuse).__name__} {reuse!r}")
    if reuse and placement != "host":
        raise ValueError(f"reuse={reuse!r} saves host reads: it needs placement='host' (with "
                         f"placement='device' every row is in GPU memory already)")
    if reorder_group != 1:  # checked here, before the graph is built
        check_group(reorder_group)
    if reuse == "group" and reorder_group == 1 and super_batch == 1:
        raise ValueError("reuse='group' reads each host row once per group of batches: pass "
                         "super_batch > 1 or reorder_group > 1 (the group size) with it")
    if dynamic is not None and cache_budget is None:
        raise ValueError("dynamic_cache takes its share of cache_budget: pass cache_budget "
                         "(and placement='host') with it")
    if warm_budget is not None:
        check_budget(warm_budget, "warm_budget")
        if warm_budget and cache_budget is None:
            raise ValueError(f"warm_budget={warm_budget} copies the rows after the GPU cache's: pass "
                             f"cache_budget (and placement='host') with it")


def index_tensor(value, name: str) -> torch.Tensor | None:
    """``value`` as PyG takes ids or positions (a tensor, a numpy array, a
    list, tuple or range) as a tensor: itself, one over the same memory, or
    a new one (an empty sequence: int64); None for anything else."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, range):
        return torch.arange(value.start, value.stop, value.step)
    if isinstance(value, np.ndarray):
        return as_tensor(value, name)
    if isinstance(value, (list, tuple)):
        return torch.tensor(value) if len(value) else torch.empty(0, dtype=torch.int64)
    return None


def seed_tensor(seeds, name: str) -> torch.Tensor:
    """Seeds as PyG takes them (``index_tensor``); a sequence of anything
    but ints is refused (PyG would cast floats and bools to ids)."""
    tensor = index_tensor(seeds, name)
    if tensor is None:
        raise TypeError(f"{name} must be a tensor, list or range of node ids, a bool mask or None, "
                        f"got {type(seeds).__name__}")
    if isinstance(seeds, (list, tuple)) and tensor.dtype != torch.int64:
        raise TypeError(f"{name} as a {type(seeds).__name__} must hold int node ids, got {tensor.dtype} "
                        f"values (a bool mask: pass a torch.bool tensor)")
    return tensor


def check_input_nodes(input_nodes, num_nodes: int, device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The seeds' node ids, and the ``input_id`` batches report for them
    where it is not their position in the seeds: PyG's ``get_input_nodes``
    gives a bool mask's node ids (``mask.nonzero()``), index tensors and
    None their positions (None here)."""
    if input_nodes is None:
        return torch.arange(num_nodes, device=device), None
    if isinstance(input_nodes, str) or (isinstance(input_nodes, tuple) and input_nodes
                                        and isinstance(input_nodes[0], str)):
        raise NotImplementedError("input_nodes with a node type (heterogeneous graphs) is not supported yet")
    input_nodes = seed_tensor(input_nodes, "input_nodes")
    if input_nodes.dtype == torch.bool:
        if input_nodes.dim() != 1 or input_nodes.numel() != num_nodes:
            raise ValueError(f"input_nodes as a bool mask must have shape [{num_nodes}], "
                             f"got {tuple(input_nodes.shape)}")
        nodes = torch.nonzero(input_nodes).flatten()
    elif input_nodes.dtype.is_floating_point or input_nodes.dtype.is_complex:
        raise TypeError(f"input_nodes must hold integer node ids or be a bool mask, got {input_nodes.dtype}")
    else:
        if input_nodes.dim() != 1:
            raise ValueError(f"input_nodes must be 1-D, got shape {tuple(input_nodes.shape)}")
        nodes = input_nodes.to(torch.int64)
        check_ids_in_range(nodes, num_nodes, "input_nodes")
    if nodes.numel() == 0:
        raise ValueError("input_nodes is empty: there is no seed to sample from")
    nodes = nodes.to(device)
    return nodes, nodes if input_nodes.dtype == torch.bool else None


@dataclass
class Attributes:
    """``data``'s attributes besides ``x`` and ``edge_index``, as batches
    take them: ``node`` and ``edge`` ones ``{key: (tensor on the device,
    dim)}``, sliced by ``n_id`` / ``e_id`` along ``dim`` (a frame as a
    ``frames.FrameRows``, dim 0, where it lives); ``graph`` ones
    copied whole; ``set_num_nodes``: the batch carries ``num_nodes``
    (PyG's does when the data stores it explicitly); ``flat_x``: ``data.x``
    is 1-D (node ids for an ``nn.Embedding``, say), stored and gathered as
    one column, and batches' ``x`` are 1-D again (PyG's ``x[n_id]``)."""
    node: dict = field(default_factory=dict)
    edge: dict = field(default_factory=dict)
    graph: dict = field(default_factory=dict)
    set_num_nodes: bool = False
    flat_x: bool = False

    @property
    def replayable(self) -> bool:
        """Whether replayed batches (``loader.replay``) can hold these: no
        edge attributes, node ones tensors sliced along dim 0 (a frame is
        sliced by its own ``__getitem__``, outside the graphs)."""
        return not self.edge and all(isinstance(value, torch.Tensor) and dim == 0
                                     for value, dim in self.node.values())


def split_attributes(data: Data, num_nodes: int, device) -> tuple[Attributes, torch.Tensor | None]:
    """Node attributes to slice by ``n_id``, edge attributes by ``e_id``,
    the rest copied, as PyG's ``filter_data`` does; numpy arrays read as
    torch tensors over the same memory (``np.memmap`` too). Returns them
    and ``data.x`` so, checked, ``[num_nodes, D]`` (a 1-D one as a view of
    one column: ``Attributes.flat_x``)."""
    attrs = Attributes(set_num_nodes="num_nodes" in data.keys())
    sliced = {key: is_node for key, _, is_node in sliced_attributes(data)}
    for key, value in data.items():
        if key in ("x", "edge_index", "num_nodes"):
            continue
        if key == "y" and isinstance(value, torch.Tensor) and value.dim() and \
                value.size(0) not in (num_nodes, 1):
            # PyG would copy such a y whole as a graph attribute: node
            # labels with the wrong row count are a bug, say so
            raise ValueError(f"data.y has {value.size(0)} rows, expected num_nodes={num_nodes}")
        if key not in sliced:
            attrs.graph[key] = value
            continue
        kind = attrs.node if sliced[key] else attrs.edge
        if frames.is_frame(value):  # by its rows (PyG's index_select slices a frame's rows only)
            kind[key] = (frames.FrameRows(value, device), 0)
            continue
        # sliced along PyG's cat dim (-1 for keys with "index" in them)
        dim = data.__cat_dim__(key, value)
        if not isinstance(dim, int):
            raise NotImplementedError(f"data.{key}: an attribute sliced along two dims ({dim}) is "
                                      f"not supported yet")
        kind[key] = (as_tensor(value, f"data.{key}").to(device), dim)
    x = as_tensor(data.x, "data.x")
    if isinstance(x, torch.Tensor) and x.is_meta:
        raise ValueError(f"data.x is a meta tensor of shape {tuple(x.shape)}: it holds no features to gather")
    if isinstance(x, torch.Tensor) and x.dtype not in _X_DTYPES:
        raise TypeError(f"data.x has dtype {x.dtype}, which the feature gather does not support: pass floating "
                        f"(float16, bfloat16, float32, float64), integer or bool features")
    if x is not None:
        if not isinstance(x, torch.Tensor) or x.dim() not in (1, 2):
            raise ValueError(f"data.x must be a tensor or numpy array of shape [num_nodes, num_features] or "
                             f"[num_nodes], got {type(x).__name__} of shape {tuple(getattr(x, 'shape', ()))}")
        if x.size(0) != num_nodes:
            raise ValueError(f"data.x has {x.size(0)} rows, expected num_nodes={num_nodes}")
        if x.dim() == 1:  # a view: pinned in place, or read where it is, as a 2-D x
            attrs.flat_x, x = True, x.unsqueeze(1)
    return attrs, x


def stored_features(x: torch.Tensor | None, dtype: torch.dtype | None, device: torch.device, pinned: bool,
                    defer: bool = False, out: torch.Tensor | None = None) -> torch.Tensor | None:
    """``x`` in ``feature_dtype`` (``dtype``), copied where it will be
    read: ``out``, else pinned host memory (``pinned``), else ``device``;
    ``x`` itself when no conversion is asked; a meta tensor of the stored
    shape and dtype with ``defer`` (checked, not converted). Converted in
    chunks of rows, each checked for values past the dtype's range; on the
    loader's GPU when it has one (a chunk there and back moves at PCIe
    rates: the CPU converts papers100M's 57 GB table in ~41 s)."""
    if dtype is None or x is None or x.dtype == dtype:
        return x
    if not x.dtype.is_floating_point:
        raise ValueError(f"feature_dtype={dtype} stores floating features narrower: data.x must be "
                         f"floating-point, got {x.dtype}")
    if dtype.itemsize >= x.dtype.itemsize:
        raise ValueError(f"feature_dtype={dtype} must be narrower than data.x's {x.dtype}: batches' x "
                         f"come out in data.x's dtype")
    if defer:
        return torch.empty(x.shape, dtype=dtype, device="meta")
    if out is not None:
        stored = out
    elif pinned:
        stored = pinned_empty(x.shape, dtype, device)
    else:
        stored = torch.empty(x.shape, dtype=dtype, device=device)
    on = device if device.type == "cuda" else x.device  # where each chunk is converted
    step = max(1, (1 << 24) // max(1, x.size(1)))  # rows per chunk: 16M values
    for begin in range(0, x.size(0), step):
        part = x[begin:begin + step].to(on, non_blocking=True)
        narrow = part.to(dtype)
        past = narrow.isinf() & part.isfinite()
        # copied back before the check: the chunk's sync below orders it
        stored[begin:begin + step].copy_(narrow, non_blocking=True)
        if bool(past.any()):
            row = begin + int(past.any(1).nonzero()[0])
            other = "torch.bfloat16 (float32's range), or None" if dtype == torch.float16 else "None"
            raise ValueError(f"feature_dtype={dtype} cannot hold data.x (row {row} has values past its "
                             f"range, {torch.finfo(dtype).max:g}); pass {other}")
    return stored
