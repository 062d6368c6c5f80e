"""``tritongnn.NeighborLoader``: a drop-in for ``torch_geometric.loader.NeighborLoader``.

Same arguments for the common case, same batches: a ``Data`` with ``x, y,
edge_index, n_id, input_id, batch_size, num_sampled_nodes, num_sampled_edges``
(plus every other node attribute sliced by ``n_id``, and ``e_id`` with edge
attributes sliced by it when the graph has any). Nodes and edges come in hop
order, seeds first; ``edge_index[0]`` is the sampled neighbour,
``edge_index[1]`` the node it was sampled for, so PyG models run unchanged,
``trim_to_layer`` included.

Where PyG samples on the CPU in worker processes and copies each batch to the
GPU, this loader samples, maps ids and gathers features on the GPU, reading
topology and features from GPU memory (``placement="device"``) or straight
from pinned host memory (``placement="host"``, UVA) for graphs larger than
the GPU. The next batches are prepared on side CUDA streams while the model
runs on the current one (sampling on one, the gather and assembly on
another, so one batch's gather overlaps the next one's sampling); the batch
handed over is ordered after their work, built by a producer thread
(``_Prefetcher``). Where every row a batch reads is in GPU memory and
nothing it reads changes between batches (``_replays_batches``;
``pipeline.REPLAY_BATCHES``: faster there, not through PCIe, and more
memory), each batch is instead two CUDA graph replays a few batches ahead,
issued by the same producer thread (``pipeline.BatchPipeline``).

With no GPU the same loader runs on the CPU, through the pure-torch
references of the kernels.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import itertools
import logging
import numbers
import os
import queue
import threading
import warnings
import weakref

import numpy as np
import torch
from torch_geometric.data import Data

from .._checks import check_ids_in_range, check_positive_int
from ..cache.allocator import CachePlan, check_budget, plan_by_degree, plan_cache
from ..cache.dual import CacheStats, DualCache, relabel_tiers
from ..cache.dynamic import DynamicCacheConfig
from ..cache.profile import AccessProfile, profile_accesses
from ..cache.reorder import MatchReorder, check_group
from ..cache.reuse import BatchReuse, GroupReuse
from ..cuda_graph import CaptureAbandoned, CaptureRequest, captures_on, relax_thread
from ..graph import CSCGraph, csc_bytes
from ..host_memory import HostGroup, SharedHostArrays, as_pinned, pinned_empty
from ..kernels import gather_rows
from ..kernels._launch import new_stream, use_triton
from ..kernels.aggregate import mark_sorted_by_dst
from ..kernels.sample import METHODS as SAMPLE_METHODS
from ..memory import check_reserve, device_free_bytes, model_reserve
from . import pipeline
from .placement import PLACEMENTS, choose_placement
from .sampler import NeighborSampler, check_num_neighbors, edge_index_of, joined
from .shard import SeedShards, resolve_ranks
from .timing import StageTimes

# PyG arguments this loader does not implement yet, with the value that means
# "not used": passing anything else raises NotImplementedError naming it.
_UNSUPPORTED = {
    "input_time": None,
    "subgraph_type": "directional",
    "disjoint": False,
    "temporal_strategy": "uniform",
    "time_attr": None,
    "weight_attr": None,
    "transform_sampler_output": None,
    "filter_per_worker": None,
    "neighbor_sampler": None,
    "directed": True,
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
              "in_order")
_FEATURE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # stores narrower than data.x's
_CACHE_POLICIES = ("profile", "degree")


_log = logging.getLogger("tritongnn")


def _sliced_attributes(data: Data):
    """``(key, value, is_node)`` of the attributes batches slice by ``n_id``
    (node) or ``e_id`` (edge), ``x`` and ``edge_index`` aside."""
    for key, value in data.items():
        if key in ("x", "edge_index", "num_nodes") or not isinstance(value, (torch.Tensor, np.ndarray)):
            continue
        if data.is_node_attr(key) or data.is_edge_attr(key):
            yield key, value, data.is_node_attr(key)


def _nbytes(value) -> int:
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else int(value.nbytes)


def _feature_bytes(x, feature_dtype) -> int:
    """Bytes of ``x`` as the loader stores it (in ``feature_dtype``)."""
    if x is None or not hasattr(x, "shape"):
        return 0
    if not isinstance(feature_dtype, torch.dtype):  # None, or refused by name later
        return _nbytes(x)
    return int(np.prod(x.shape)) * feature_dtype.itemsize


def _attribute_bytes(data: Data) -> int:
    return sum(_nbytes(value) for _, value, _ in _sliced_attributes(data))


def _has_edge_attrs(data: Data) -> bool:
    return any(not is_node for _, _, is_node in _sliced_attributes(data))


def _num_edges(data: Data) -> int:
    edge_index = data.edge_index
    return edge_index.shape[-1] if hasattr(edge_index, "shape") and len(edge_index.shape) == 2 else 0


def _as_tensor(value, name: str) -> torch.Tensor:
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


def _check_kwargs(kwargs: dict) -> None:
    for name, value in kwargs.items():
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
        else:
            raise TypeError(f"NeighborLoader got an unexpected keyword argument {name!r}")


def _check_input_nodes(input_nodes, num_nodes: int, device) -> torch.Tensor:
    if input_nodes is None:
        return torch.arange(num_nodes, device=device)
    if isinstance(input_nodes, (str, tuple)):
        raise NotImplementedError("input_nodes with a node type (heterogeneous graphs) is not supported yet")
    if not isinstance(input_nodes, torch.Tensor):
        raise TypeError(f"input_nodes must be a tensor of node ids, a bool mask or None, "
                        f"got {type(input_nodes).__name__}")
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
    return nodes.to(device)


class NeighborLoader:
    """A GPU drop-in for ``torch_geometric.loader.NeighborLoader``.

    Args:
        data: a ``torch_geometric.data.Data`` with ``edge_index`` (not modified).
        num_neighbors: fanout per hop, e.g. ``[15, 10, 5]``; -1 = all.
        input_nodes: seed ids, a bool mask, or None for every node.
        input_time: not supported yet (must be None).
        replace: sample with replacement.
        batch_size: seeds per batch.
        shuffle: reshuffle the seeds every epoch.
        drop_last: drop the last incomplete batch.
        transform: called on every batch, as in PyG.
        device: where sampling runs and batches live (default: CUDA if present).
        placement: ``"auto"`` (default): ``"device"`` where the graph and
            the features fit the GPU memory the process may still use with
            ``memory_reserve`` to spare, else ``"host"`` with
            ``cache_budget="auto"`` (``loader.placement_reason`` says which
            and why, also logged at INFO to the ``tritongnn`` logger);
            ``"device"``: topology and features copied to GPU memory (a
            ValueError naming the sizes where they cannot fit); ``"host"``:
            kept in pinned host memory and read by the kernels through UVA
            (graphs larger than the GPU; a CPU ``x`` is pinned in place, not
            copied). On a CPU device both are host memory.
        memory_reserve: GPU bytes the loader leaves to the model, its
            optimiser, activations and the batches in flight when it sizes
            ``placement="auto"`` and ``cache_budget="auto"``; ``"auto"``:
            the larger of 4 GiB and a tenth of what the process may use
            (the card, or ``torch.cuda.set_per_process_memory_fraction``).
        generator: a CPU ``torch.Generator`` for shuffling and sampling;
            default one seeded from ``seed``, or from torch's global RNG.
            With several ranks it draws the samples only.
        seed: int seed for reproducible epochs (ignored when ``generator``).
            With several ranks it is the shuffle seed every rank must share
            (default 0, as for ``DistributedSampler``).
        rank, world_size: this process's share of the seeds in data-parallel
            training (``tritongnn.sampling.shard``): each rank takes a
            disjoint shard per epoch, the same number of batches on every
            rank. Default: ``torch.distributed``'s when it is initialised,
            else one rank.
        share_host_memory: with ``placement="host"`` and several ranks of
            an initialised ``torch.distributed`` process group, the ranks of
            a host hold one copy of the host arrays (topology and features)
            between them, in shared memory (``/dev/shm``) that each pins in
            place (``tritongnn.host_memory``): their lowest rank builds it
            (and relabels it, with a cache) and the others map it; each GPU
            still builds its own caches. False: every rank builds its own.
            Every rank must pass the same ``data``.
        prefetch: batches prepared ahead on side streams by a producer
            thread (GPU only; 0 = prepare each batch when asked; where
            every row a batch reads is in GPU memory, replayed from CUDA
            graphs into ``prefetch + 4`` slots the batches view, each
            holding 1.25x the nodes of the largest batch seen:
            ``sampling.pipeline.REPLAY_BATCHES``). One pass
            at a time: the loader's sampler, caches and staging serve one
            epoch, so ``iter(loader)`` ends any pass still open (its
            iterator stops; ``zip(loader, loader)`` yields nothing). Each
            batch is ordered before the work of the stream current where it
            is asked for; a stream entered after it arrived waits for it
            itself (``s.wait_stream(torch.cuda.current_stream())``).
        cache_budget: with ``placement="host"``, GPU bytes for the dual
            cache (``tritongnn.cache``): the hottest neighbour lists and
            feature rows, found by profiling, are kept in GPU memory, the
            rest read through UVA. An int, or ``"auto"``: the GPU memory
            the process may still use minus ``memory_reserve``. None: no
            cache (unless ``placement="auto"`` chose host memory).
        cache_profile: the access profile the cache is planned from: None
            (profile now), an ``AccessProfile``, or a file path (loaded when
            it exists, else profiled and saved there; with several ranks,
            rank 0 loads or profiles and the others receive its profile).
        profile_epochs: pre-sampling epochs when profiling.
        cache_policy: ``"profile"`` (default): the dual cache planned from
            the access profile; ``"degree"``: the common baseline, a feature
            cache of the nodes that appear in the most neighbour lists, no
            adjacency cache, no profiling needed.
        dynamic_cache: a bounded second feature cache for rows the static
            cache misses, refreshed from recent accesses (GARDEN's ADFC):
            None/False (off), True (defaults), or a dict of or a
            ``tritongnn.cache.DynamicCacheConfig``; its share of
            ``cache_budget`` is ``fraction``, taken from the static feature
            cache's least-used rows (the adjacency cache keeps its share).
        warm_budget: with ``cache_budget``, bytes of pinned host memory for
            a copy of the feature rows next in hotness after the GPU caches
            (``DualCache.warm_x``): many of a batch's misses then fall on
            neighbouring rows of that copy, and UVA reads cost per distinct
            64 KB page, not per byte (``tritongnn.kernels.gather``). Batches
            are the same either way. None or 0: off; the copy never holds
            more than the rows the GPU does not.
        reuse: with ``placement="host"``, rows read from host memory are
            reused on the GPU instead of read again (``tritongnn.cache.reuse``;
            batches are the same either way): ``True``, the previous batch's
            rows (FastGL's match-reuse); ``"group"``, every row a group of
            batches needs (the ``reorder_group``, else the ``super_batch``)
            is read once, sorted by host row (a group's misses share UVA
            pages), into a staging buffer of the group's distinct host rows;
            the next group is staged while this one's batches are gathered
            (two buffers in GPU memory; a pass's last groups halved,
            ``staging_group_sizes``). Measured at ogbn-papers100M scale
            with a 24 GB budget, whole passes: ``super_batch=16`` an epoch
            in 1.83-1.87 s against 3.30-3.35 s, for 75-76 GB of peak GPU
            memory against 39-50 (``super_batch=8``: 69 GB, 1.85 s). With
            a budget that caches every row there is nothing to reuse or
            stage, and the loader leaves it off (``loader.reuse`` None; it
            had cost 0.97 s against 0.92-0.96 s at 868b3ff, 1.30 against
            1.03-1.05 before); ``False``: off.
        reorder_group: sample this many batches, then gather them in the
            order that makes each follow the one it shares most nodes with
            (FastGL's match-reorder, ``tritongnn.cache.reorder``); 1: off.
            Batches come in another order, each seed still once per epoch.
        sample_kernel: the sampling kernels (``NeighborSampler``'s
            ``method``): ``"auto"`` (default: the one-pass ``"fused"``
            kernel where the adjacency is all in GPU memory, 1.53-2.17x the
            foundation's hop on an H200; GARDEN's grouped sampler where
            rows cross PCIe: ``"grouped"`` where each hop reads its
            frontier in node-id order (host arrays past the L2; with the
            adjacency cache, where its plan expects 20 % of the row reads
            or more to miss), 1.14-1.34x the foundation a batch in that
            order, else ``"grouped_split"`` where every row crosses PCIe,
            1.04-1.38x, and ``"foundation"`` with the cache), or any of
            ``"foundation"``, ``"fused"``, ``"grouped"``,
            ``"grouped_split"``. The same batches either way
            (``bench/results``).
        super_batch: sample this many consecutive batches in one pass
            (GARDEN's super-batching, ``NeighborSampler.sample_many``) and
            deliver them one by one; 1: off. The batches are bit for bit
            those of ``super_batch=1`` for the same seed, the last
            super-batch may hold fewer batches (or a short last one). Its
            sampling time is spread evenly over its batches in ``stats``.
            With the adjacency in GPU memory, what a pass saves is each
            batch's fixed host cost, not GPU work (the id map's and the
            sampling kernel's work is per sampled neighbour): it pays
            where a batch's GPU work is small next to that cost. Measured
            on an H200, the sampler alone,
            ``super_batch=8`` against 1 (``bench/results/README.md``):
            cnr2000 in GPU memory 1.29-2.03x; a 5x10^7-node graph through
            UVA 1.43-1.48x, with the adjacency cache holding a quarter or
            half of its edges 1.38-1.71x (three quarters 1.26-1.28x, 90 %
            1.14-1.27x), in GPU memory 1.03-1.51x at batch 8000 (both
            samplers built with ``cuda_graph=False``: 2.2-3.4x) and
            1.24-1.79x at batches of 1024-4000 (``super_batch=2`` on that
            graph in GPU memory: 0.97-1.06x at batches of 1024 and 8000).
            Peak sampler memory grows about K-fold
            (0.96 GB at K=1 to 8.7 GB at K=8, batch 8000, [15, 10, 5]).
            Each batch is gathered on its own (``GATHER_PER_PASS``).
            Past 1 the loader does not replay batches ahead of the loop
            (``pipeline.BatchPipeline``, its default where no row crosses
            PCIe): each super-batch is one ``sample_many`` call (on the
            producer thread, with ``prefetch``).
            Where K x num_nodes id-map words pass the direct table's
            4 GiB, fewer go in each pass (``NeighborSampler.sample_many``).
            With ``reorder_group`` the two are independent: batches are
            sampled K at a time and reordered G at a time (with G a multiple
            of K, each group is G / K whole super-batches).
        feature_dtype: store ``data.x`` in this narrower floating dtype
            (``torch.float16`` or ``torch.bfloat16`` for float32 features,
            also ``torch.float32`` for float64 ones)
            in the GPU caches and in host memory: half the bytes a batch's
            misses move through UVA, twice the rows a cache budget holds.
            Batches' ``x`` keep ``data.x``'s dtype (the gather widens each
            row as it reads it), with the values rounded to
            ``feature_dtype``: a lossy choice, like SALIENT's half-precision
            features (float16 also rounds values below 6e-8 to 0). A copy
            is made (``data.x`` is not modified; with ``share_host_memory``
            the host's leader converts into the shared copy, and another
            rank only where it builds a tier of its own); values that overflow the
            dtype (float16: magnitudes of 65520 and more) raise ValueError;
            inf and NaN in ``data.x`` stay so. None: as given.
        **kwargs: other PyG/DataLoader arguments: worker settings warn that
            they have no effect; features not supported yet raise
            ``NotImplementedError`` naming the argument.

    Example:
        >>> loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=128,
        ...                         input_nodes=data.train_mask, shuffle=True)
        >>> for batch in loader:
        ...     out = model(batch.x, batch.edge_index)[:batch.batch_size]
    """

    def __init__(self, data, num_neighbors, input_nodes=None, input_time=None,
                 replace: bool = False, *, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, transform=None, device=None, placement: str = "auto",
                 generator: torch.Generator | None = None, seed: int | None = None,
                 prefetch: int = 2, cache_budget=None, cache_profile=None, profile_epochs: int = 3,
                 cache_policy: str = "profile", dynamic_cache=None, warm_budget: int | None = None,
                 reuse: bool | str = False,
                 reorder_group: int = 1, sample_kernel: str = "auto", super_batch: int = 1,
                 feature_dtype: torch.dtype | None = None, rank: int | None = None,
                 world_size: int | None = None, share_host_memory: bool = True, memory_reserve="auto",
                 **kwargs):
        _check_kwargs(dict(kwargs, input_time=input_time))
        if isinstance(data, tuple):
            raise NotImplementedError("data as a (FeatureStore, GraphStore) pair is not supported yet")
        if not isinstance(data, Data):
            if type(data).__name__ == "HeteroData":
                raise NotImplementedError("HeteroData (heterogeneous graphs) is not supported yet")
            raise TypeError(f"data must be a torch_geometric.data.Data, got {type(data).__name__}")
        if "edge_index" not in data:
            raise NotImplementedError("data without edge_index (e.g. adj_t) is not supported yet")
        check_positive_int("batch_size", batch_size)
        check_positive_int("super_batch", super_batch)
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
        self.device = torch.device(device if device is not None else
                                   ("cuda" if torch.cuda.is_available() else "cpu"))
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.memory_reserve = check_reserve(memory_reserve)
        chosen = choose_placement(
            placement, self.device, csc_bytes(data.num_nodes, _num_edges(data), _has_edge_attrs(data)),
            _feature_bytes(data.x, feature_dtype), _attribute_bytes(data),
            cache_budget=cache_budget, host_only=cache_budget is not None or bool(reuse) or bool(warm_budget),
            reserve=memory_reserve)
        placement, cache_budget, self.placement_reason = chosen.placement, chosen.cache_budget, chosen.reason
        _log.info("tritongnn.NeighborLoader: %s", self.placement_reason)
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
        if feature_dtype is not None and feature_dtype not in _FEATURE_DTYPES:
            raise TypeError(f"feature_dtype must be one of torch.float16, torch.bfloat16, torch.float32 "
                            f"(or None), got {feature_dtype!r}")
        if not isinstance(share_host_memory, bool):
            raise TypeError(f"share_host_memory must be a bool, got {type(share_host_memory).__name__} "
                            f"{share_host_memory!r}")
        if cache_policy not in _CACHE_POLICIES:
            raise ValueError(f"cache_policy must be one of {_CACHE_POLICIES}, got {cache_policy!r}")
        dynamic = DynamicCacheConfig.resolve(dynamic_cache)
        if dynamic is not None and cache_budget is None:
            raise ValueError("dynamic_cache takes its share of cache_budget: pass cache_budget "
                             "(and placement='host') with it")
        if warm_budget is not None:
            check_budget(warm_budget, "warm_budget")
            if warm_budget and cache_budget is None:
                raise ValueError(f"warm_budget={warm_budget} copies the rows after the GPU cache's: pass "
                                 f"cache_budget (and placement='host') with it")
        self._warm_budget = warm_budget or 0
        self.num_neighbors = check_num_neighbors(num_neighbors)
        num_nodes = data.num_nodes
        self.input_nodes = _check_input_nodes(input_nodes, num_nodes, self.device)
        self.batch_size, self.shuffle, self.drop_last = batch_size, bool(shuffle), bool(drop_last)
        self.super_batch = super_batch
        self.transform, self.placement, self.prefetch = transform, placement, prefetch
        self.rank, self.world_size = resolve_ranks(rank, world_size)
        self.epoch = 0
        self._open_pass = None  # weakref to the open pass's generator (one pass at a time)
        self._streams = None  # the producer's (sampling, gather, staging) streams: made once, one pass at a time
        # the replayed batches' slots by batch size, kept across passes
        # (``pipeline.BatchPipeline``), and the sizes whose capture failed
        self._slots: dict[int, list] = {}
        self._slots_failed: dict[int, bool] = {}
        self._most_nodes = 0  # nodes of the largest replayed batch so far (a new slot's rows)
        self._shards = None
        if self.world_size > 1:
            shuffle_seed = 0 if seed is None else int(seed)
            self._shards = SeedShards(self.input_nodes.numel(), self.rank, self.world_size, self.shuffle,
                                      self.drop_last, shuffle_seed)
            seed = (shuffle_seed * self.world_size + self.rank) % 2**63  # each rank samples its own neighbours
        if generator is None:
            seed = int(torch.randint(0, 2**62, (1,))) if seed is None else int(seed)
            generator = torch.Generator().manual_seed(seed)
        self.generator = generator

        features = self._split_attributes(data, num_nodes)
        edge_index, keep_edge_perm = data.edge_index, bool(self._edge_attrs)

        def build_graph() -> CSCGraph:
            # sorted on the loader's device in chunks, written where it is read: with
            # placement="host" pinned host memory, the edges never all on the GPU at once
            host = placement == "host" and self.device.type == "cuda"
            return CSCGraph.from_edge_index(edge_index, num_nodes, keep_edge_perm=keep_edge_perm,
                                            device="cpu" if host else self.device, work=self.device, pin=host)

        self._x_dtype = None if features is None else features.dtype  # what batches' x come out in
        # ranks sharing one host copy: a collective, so every rank of the group takes part
        host_group = self._host_group(share_host_memory)
        # With one host copy, features to store in feature_dtype are converted
        # where their values are needed (the leader's build of the copy; a
        # rank that builds a tier of its own), not by every rank up front:
        # until then x is a meta tensor of their shape and dtype.
        self._feature_source = (features, feature_dtype)
        x = self._stored_features(features, feature_dtype, defer=host_group is not None)
        self._fingerprint = (num_nodes, edge_index.size(1), keep_edge_perm,
                             None if x is None else (tuple(x.shape), str(x.dtype)))
        self._host_ranks = 1
        # with one host copy, only the host's leader builds the graph
        graph = build_graph() if host_group is None or host_group.is_leader else None
        self.cache = None
        if cache_budget is None:
            shared = None if host_group is None else self._share_graph(host_group, graph, x)
            if shared is not None:
                self.graph, self.x = shared
            else:
                graph = build_graph() if graph is None else graph
                self.graph = graph.pin_memory() if placement == "host" and self.device.type == "cuda" else graph
                self.x = self._place(self._real(x)) if x is not None else None
            self._seeds = self.input_nodes
        else:
            if x is not None and x.dim() == 2 and x.size(1) == 0:
                raise ValueError(f"data.x has shape {tuple(x.shape)}: a feature cache plans rows by their bytes "
                                 f"and these have none; drop cache_budget, or give x at least one column")
            self.cache = self._build_cache(graph, build_graph, x, replace, cache_budget, cache_profile,
                                           profile_epochs, cache_policy, dynamic, host_group)
            self.graph, self.x = self.cache.graph, self.cache.x
            self._seeds = self.cache.new_id[self.input_nodes]  # internal ids
        self.sampler = NeighborSampler(self.graph, self.num_neighbors, replace, self.device,
                                       return_eid=bool(self._edge_attrs), method=sample_kernel,
                                       **(self.cache.adjacency_tiers if self.cache else {}))
        self.stats_history: list[dict] = []
        self.times = StageTimes(self.device)
        # the cached prefixes: features and lists of internal ids below these are on the GPU
        self._num_feature, self._num_adjacency = \
            (self.cache.plan.num_feature, self.cache.plan.num_adjacency) if self.cache else (0, 0)
        # what reads host memory is counted: the cache's counters, or plain ones
        self.host_stats = None
        if self.cache is not None:
            self.host_stats = self.cache.stats
        elif placement == "host" and self.x is not None:
            self.host_stats = CacheStats.of(self.graph, self.x, self.device)
        self.reorder = None
        if reorder_group != 1:
            self.reorder = MatchReorder(num_nodes, reorder_group, self.device, self._num_feature)
        self.reuse = None
        # with every row in GPU memory there is no host read to save: none
        # (group staging there cost 0.3 ms a batch of bookkeeping on the
        # gather stream for nothing staged, profiled at 75d6917)
        if reuse and self.x is not None and self._num_feature < num_nodes:
            kind = GroupReuse if reuse == "group" else BatchReuse
            self.reuse = kind(num_nodes, self._num_feature, self.device)
        del self._feature_source  # the loader keeps no reference to the user's x
        if self.device.type == "cuda":
            # The set-up (cache, tables, converted features) ran on the stream
            # current here; a pass may run under another, and its producer
            # waits only for the stream the pass began on. Once, at the end.
            torch.cuda.current_stream(self.device).synchronize()

    def _host_group(self, share_host_memory: bool) -> HostGroup | None:
        """The ranks of this host when they are to hold one host copy between
        them: ``placement="host"``, several ranks, and ``torch.distributed``'s
        process group being those ranks (the copy is published through it);
        else None. Every rank decides alike from the same arguments."""
        if not share_host_memory or self.placement != "host" or self.world_size == 1:
            return None
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() != self.world_size \
                or dist.get_rank() != self.rank:
            return None
        group = HostGroup.discover()
        return group if group.shared_anywhere else None

    def _share_graph(self, group: HostGroup, graph: CSCGraph | None, x: torch.Tensor | None):
        """Without a cache: the leader writes the graph and the features into
        the host copy, every rank of the host maps it. ``(graph, x)``, or
        None when ``/dev/shm`` had no room."""
        def build(host: SharedHostArrays) -> dict:
            for name, t in (("indptr", graph.indptr), ("indices", graph.indices)):
                host.copy(name, t)
            if x is not None and x.is_meta:  # converted straight into the host copy
                self._stored_features(*self._feature_source, out=host.empty("x", x.shape, x.dtype))
            elif x is not None:
                host.copy("x", x)
            if graph.edge_perm is not None:  # read once, by the sampler's copy to the device
                host.copy("edge_perm", graph.edge_perm, pin=False)
            return {}

        published = SharedHostArrays(group, self.device).publish(build, self._fingerprint)
        if published is None:
            return None
        self._host_ranks = len(group.ranks)
        _, arrays = published
        return (CSCGraph(arrays["indptr"], arrays["indices"], arrays.get("edge_perm"), validate=False),
                arrays.get("x"))

    def _build_cache(self, graph, build_graph, x, replace, budget, profile, epochs, policy, dynamic,
                     host_group) -> DualCache:
        """Profile (or load a profile), plan the split, build the dual cache.
        With one host copy (``host_group``), the host's leader plans and
        writes the relabelled host tiers, the other ranks map them and build
        their GPU tiers from them."""
        budget = self._resolve_budget(budget)
        check_positive_int("profile_epochs", epochs)
        num_nodes = self._fingerprint[0]
        self.cache_profile = self._access_profile(graph, x, num_nodes, replace, profile, epochs, policy)
        if host_group is not None:
            cache = self._share_cache(host_group, graph, build_graph, x, budget, policy, dynamic)
            if cache is not None:
                return cache
            graph = build_graph() if graph is None else graph
        x = self._real(x)
        plan, rows = self._plan_cache(graph, x, budget, policy, dynamic)
        return DualCache(graph, x, plan, self.device, dynamic, rows, self.cache_profile, self._warm_rows(x))

    def _warm_rows(self, x) -> int:
        """Rows of the warm copy ``warm_budget`` pays for."""
        if x is None or not self._warm_budget:
            return 0
        return self._warm_budget // max(1, x.size(1) * x.element_size())

    def _access_profile(self, graph, x, num_nodes, replace, profile, epochs, policy) -> AccessProfile | None:
        """The profile the cache is planned from: loaded, given, or computed
        on rank 0 and broadcast (a collective with several ranks)."""
        if policy == "degree":
            if profile is not None and not isinstance(profile, AccessProfile):
                raise TypeError(f"with cache_policy='degree', cache_profile must be None or an "
                                f"AccessProfile (to report expected hit rates), got {type(profile).__name__}")
            if x is None:
                raise ValueError("cache_policy='degree' caches feature rows: data.x is None")
            return profile
        if profile is None or isinstance(profile, (str, os.PathLike)):
            path = profile

            def compute():  # on rank 0, which builds the graph (the leader of its host)
                # only rank 0 looks for the file: ranks that saw it at different
                # times (or hosts that lack it) must not disagree on the broadcast
                if path is not None and os.path.exists(path):
                    return AccessProfile.load(path, num_nodes, self.num_neighbors)
                host_graph = graph.pin_memory() if self.device.type == "cuda" else graph
                sampler = NeighborSampler(host_graph, self.num_neighbors, replace, self.device)
                # its own stream of random numbers: profiling leaves the loader's untouched
                gen = torch.Generator().manual_seed(self.generator.initial_seed() ^ 0x5EED)
                # every seed, not this rank's shard: all ranks get the same caches
                computed = profile_accesses(sampler, self.input_nodes, self.batch_size, epochs, generator=gen)
                if path is not None:
                    computed.save(path)
                return computed

            profile = self._profile_once(compute, num_nodes)
        elif not isinstance(profile, AccessProfile):
            raise TypeError(f"cache_profile must be None, an AccessProfile or a file path, "
                            f"got {type(profile).__name__}")
        else:
            # a profile built by hand may not say its fanouts
            profile.check(num_nodes, self.num_neighbors if profile.num_neighbors else None, "cache_profile")
        if x is None:  # no features to cache: rank by list reads, give the lists everything
            profile = AccessProfile(profile.adjacency.double(), profile.inputs, profile.adjacency,
                                    profile.epochs, profile.num_batches, profile.seconds)
        return profile

    def _plan_cache(self, graph: CSCGraph, x, budget: int, policy: str, dynamic) -> tuple[CachePlan, int]:
        """The static plan and the dynamic cache's rows, from the graph's degrees."""
        profile = self.cache_profile
        if policy == "degree":
            row_bytes = x.size(1) * x.element_size()
            # nodes by the number of neighbour lists they appear in: how often sampling can pick them
            appearances = torch.bincount(graph.indices.long(), minlength=graph.num_nodes)
            return self._split_dynamic(lambda b, d: plan_by_degree(profile, appearances, row_bytes, b - d),
                                       budget, row_bytes, dynamic, graph.num_nodes)
        row_bytes = budget + 1 if x is None else x.size(1) * x.element_size()
        degree = graph.degree()
        return self._split_dynamic(
            lambda b, d: plan_cache(profile, degree, row_bytes, b, index_bytes=graph.indices.element_size(),
                                    dynamic_bytes=d),
            budget, row_bytes, dynamic if x is not None else None, graph.num_nodes)

    def _share_cache(self, group: HostGroup, graph, build_graph, x, budget, policy, dynamic) -> DualCache | None:
        """With a cache: the leader plans, relabels into the host copy and
        publishes the plan; every rank maps the host tiers and builds its own
        GPU tiers (a tier the plan caches whole is built on each rank's
        device from its own input, never through host memory). None when
        ``/dev/shm`` had no room."""
        num_nodes = self._fingerprint[0]
        built = {}

        def build(host: SharedHostArrays) -> dict:
            x_values = self._real(x)
            plan, rows = self._plan_cache(graph, x_values, budget, policy, dynamic)
            # edge_perm is read once, by the sampler's copy to the device: no need to pin it
            built["tiers"] = relabel_tiers(graph, x_values, plan, self.device,
                                           lambda name, shape, dtype: host.empty(name, shape, dtype,
                                                                                 pin=name != "edge_perm"))
            built["plan"] = plan
            host.copy("order", plan.order, pin=False)  # the plan the host tiers follow, for the others
            return dict(rows=rows, plan={f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)
                                         if f.name != "order"})

        published = SharedHostArrays(group, self.device).publish(build, self._fingerprint)
        if published is None:
            return None
        self._host_ranks = len(group.ranks)
        meta, arrays = published
        if group.is_leader:
            plan, (graph, x) = built["plan"], built["tiers"]
        else:
            # a copy of its own: the shared order is dropped once every rank has one
            plan = CachePlan(order=arrays["order"].to(self.device, copy=True), **meta["plan"])
            whole = relabel_tiers(build_graph() if plan.num_adjacency == num_nodes else None,
                                  self._real(x) if plan.num_feature == num_nodes else None, plan, self.device)
            graph = whole[0] if whole[0] is not None else \
                CSCGraph(arrays["indptr"], arrays["indices"], arrays.get("edge_perm"), validate=False)
            if x is not None:
                x = whole[1] if whole[1] is not None else arrays["x"]
        return DualCache.from_relabelled(graph, x, plan, self.device, dynamic, meta["rows"], self.cache_profile,
                                         self._warm_rows(x))

    def _profile_once(self, compute, num_nodes: int) -> AccessProfile:
        """``compute()`` the profile on rank 0 and broadcast it (GARDEN
        profiles on one GPU); with one rank, or ranks given without a
        process group, just ``compute()``."""
        import torch.distributed as dist
        if self.world_size == 1 or not (dist.is_available() and dist.is_initialized()) \
                or dist.get_world_size() != self.world_size:
            return compute()
        meta = [None]
        if self.rank == 0:
            profile = compute()
            meta = [dict(epochs=profile.epochs, num_batches=profile.num_batches, seconds=profile.seconds,
                         num_neighbors=list(profile.num_neighbors),
                         layer_weights=list(profile.layer_weights))]
        dist.broadcast_object_list(meta, src=0)
        where = self.device if dist.get_backend() == "nccl" else torch.device("cpu")
        if self.rank == 0:
            counts = [profile.feature.to(where), profile.inputs.to(where), profile.adjacency.to(where)]
        else:
            counts = [torch.zeros(num_nodes, dtype=dtype, device=where)
                      for dtype in (torch.float64, torch.int64, torch.int64)]
        for t in counts:
            dist.broadcast(t, src=0)
        return AccessProfile(*[t.to(self.device) for t in counts], **meta[0])

    @staticmethod
    def _split_dynamic(plan_for, budget, row_bytes, dynamic, num_nodes):
        """The static plan and the dynamic cache's rows: the dynamic cache
        takes ``dynamic.fraction`` of the budget, out of the feature cache's
        share (``plan_for(budget, dynamic_bytes)``; ``cache.allocator``),
        unless the whole budget already caches every feature row (then it
        would hold nothing)."""
        rows = 0 if dynamic is None else int(budget * dynamic.fraction) // row_bytes
        if rows == 0:
            return plan_for(budget, 0), 0
        if budget >= num_nodes * row_bytes:  # only then can the whole budget cache every row
            plan = plan_for(budget, 0)
            if plan.num_feature == num_nodes:
                return plan, 0
        # (planning a 10^7-node profile takes seconds: plan once when the rows cannot all fit)
        return plan_for(budget, rows * row_bytes), rows

    def _resolve_budget(self, budget) -> int:
        if budget == "auto":
            if self.device.type != "cuda":
                raise ValueError(f"cache_budget='auto' sizes the cache from free GPU memory: it needs a "
                                 f"CUDA device, got device={self.device}")
            # what the process may still use (within set_per_process_memory_fraction), less a
            # reserve for the model, optimiser and a few batches in flight
            return max(0, device_free_bytes(self.device) - model_reserve(self.device, self.memory_reserve))
        if isinstance(budget, str):
            raise ValueError(f"cache_budget must be an int number of bytes or 'auto', got {budget!r}")
        budget = check_budget(budget, "cache_budget")
        if self.device.type == "cuda":
            total = torch.cuda.get_device_properties(self.device).total_memory
            if budget > total:
                raise ValueError(f"cache_budget={budget} bytes is more than the GPU's {total} bytes")
        return budget

    @property
    def stats(self) -> dict:
        """Statistics of the current (or last) epoch: time in sampling,
        gathering, the model and waiting (``tritongnn.sampling.timing``);
        with ``placement="host"``, the rows and lists read from host memory
        and their bytes (``host_bytes``, dynamic refreshes included), the
        hit rates of the caches and the rows reused from the previous batch.
        Read mid-epoch with ``prefetch``, the loader's counts include the
        batches prepared ahead of the loop. Completed epochs are in
        ``stats_history``."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # counts are written on the prefetch stream
        stats = self.times.as_dict()
        if self.host_stats is not None:
            stats.update(self.host_stats.as_dict())
        if self.reorder is not None:
            stats.update(self.reorder.as_dict())
        if self.cache is not None:
            dynamic = self.cache.dynamic
            if dynamic is not None:
                stats.update(dynamic.as_dict())
                stats["host_bytes"] += stats["dynamic_refresh_bytes_this_epoch"]
        return stats

    @property
    def host_memory(self) -> dict:
        """The loader's arrays in host memory.

        Returns:
            A dict: ``host_array_bytes``, the bytes of the graph and features
            that live in host memory (what ``placement="host"`` reads through
            UVA; every array on a CPU device); ``shared_by_ranks``, how many
            ranks of this host map the same copy of them (1: this process's
            own). ``tritongnn.host_memory.memory_usage()`` gives the
            process's and the host's resident memory.
        """
        nbytes = sum(t.nbytes for t in self.host_arrays)
        return dict(host_array_bytes=nbytes, shared_by_ranks=self._host_ranks)

    @property
    def host_arrays(self) -> list[torch.Tensor]:
        """The graph's and features' tensors in host memory (``host_memory``
        counts their bytes; loaders of one graph may share some: on a CPU
        device they are the caller's own)."""
        arrays = [self.graph.indptr, self.graph.indices, self.graph.edge_perm, self.x]
        return [t for t in arrays if t is not None and t.device.type == "cpu"]

    def _split_attributes(self, data: Data, num_nodes: int) -> torch.Tensor | None:
        """Node attributes to slice by ``n_id``, edge attributes by ``e_id``,
        the rest copied, as PyG's ``filter_data`` does; numpy arrays read as
        torch tensors over the same memory (``np.memmap`` too). Returns
        ``data.x`` so, checked."""
        self._node_attrs, self._edge_attrs, self._graph_attrs = {}, {}, {}
        # PyG's batch carries num_nodes when the data stores it explicitly
        self._set_num_nodes = "num_nodes" in data.keys()
        sliced = {key: is_node for key, _, is_node in _sliced_attributes(data)}
        for key, value in data.items():
            if key in ("x", "edge_index", "num_nodes"):
                continue
            if key == "y" and isinstance(value, torch.Tensor) and value.dim() and \
                    value.size(0) not in (num_nodes, 1):
                # PyG would copy such a y whole as a graph attribute: node
                # labels with the wrong row count are a bug, say so
                raise ValueError(f"data.y has {value.size(0)} rows, expected num_nodes={num_nodes}")
            if key not in sliced:
                self._graph_attrs[key] = value
                continue
            # sliced along PyG's cat dim (-1 for keys with "index" in them)
            dim = data.__cat_dim__(key, value)
            if not isinstance(dim, int):
                raise NotImplementedError(f"data.{key}: an attribute sliced along two dims ({dim}) is "
                                          f"not supported yet")
            attrs = self._node_attrs if sliced[key] else self._edge_attrs
            attrs[key] = (_as_tensor(value, f"data.{key}").to(self.device), dim)
        x = _as_tensor(data.x, "data.x")
        if x is not None:
            if not isinstance(x, torch.Tensor) or x.dim() != 2:
                raise ValueError(f"data.x must be a 2-D tensor or numpy array [num_nodes, num_features], got "
                                 f"{type(x).__name__} of shape {tuple(getattr(x, 'shape', ()))}")
            if x.size(0) != num_nodes:
                raise ValueError(f"data.x has {x.size(0)} rows, expected num_nodes={num_nodes}")
        return x

    def _real(self, x: torch.Tensor | None) -> torch.Tensor | None:
        """``x`` with values: a deferred (meta) store converted now."""
        return self._stored_features(*self._feature_source) if x is not None and x.is_meta else x

    def _stored_features(self, x: torch.Tensor | None, dtype: torch.dtype | None, defer: bool = False,
                         out: torch.Tensor | None = None) -> torch.Tensor | None:
        """``x`` in ``feature_dtype`` (``dtype``), copied where it will be
        read: ``out``, else pinned host memory (``placement="host"`` on a
        GPU), else the device; ``x`` itself when no conversion is asked; a
        meta tensor of the stored shape and dtype with ``defer`` (checked,
        not converted). Converted in chunks of rows, each checked for values
        past the dtype's range; on the loader's GPU when it has one (a chunk
        there and back moves at PCIe rates: the CPU converted papers100M's
        57 GB table in ~41 s)."""
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
        elif self.placement == "host" and self.device.type == "cuda":
            stored = pinned_empty(x.shape, dtype, self.device)
        else:
            stored = torch.empty(x.shape, dtype=dtype, device=self.device)
        on = self.device if self.device.type == "cuda" else x.device  # where each chunk is converted
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

    def _place(self, x: torch.Tensor) -> torch.Tensor:
        if self.placement == "host" and self.device.type == "cuda":
            return as_pinned(x, self.device)
        return x.to(self.device).contiguous()

    def __len__(self) -> int:
        n = self.input_nodes.numel() if self._shards is None else len(self._shards)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch the next pass shuffles for (with several ranks; as
        ``DistributedSampler.set_epoch``). Passes also advance it by one."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        self.epoch = epoch

    def _epoch_batches(self):
        if self._shards is not None:
            order = self._shards.positions(self.epoch)
        else:
            n = self.input_nodes.numel()
            order = torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)
        self.epoch += 1
        order = order.to(self.device)
        return [order[i:i + self.batch_size] for i in range(0, len(self) * self.batch_size, self.batch_size)]

    def _batches(self, batches, gather_stream=None, staging_stream=None):
        """The epoch's batches, built in turn: sampled ``super_batch`` at a
        time; with ``reorder`` assembled a group at a time in the group's
        match order; with group reuse, each group's host rows staged (on
        ``staging_stream``) before the batches of the group before it are
        gathered, so that those reads overlap these batches' steps."""
        sampled = self._sampled(batches)
        if self.reorder is None and not isinstance(self.reuse, GroupReuse):
            if self._gathers_per_pass():  # each super-batch's batches gathered together
                while group := list(itertools.islice(sampled, self.super_batch)):
                    yield from self._finish(group, gather_stream)
                return
            for item in sampled:
                yield from self._finish([item], gather_stream)
            return
        # a group: the reorder's, else (group reuse alone) the super-batch
        group_size = self.reorder.group if self.reorder is not None else self.super_batch
        staging = isinstance(self.reuse, GroupReuse)
        if staging and self.reorder is None and HALVE_LAST_GROUPS:
            sizes = staging_group_sizes(len(batches), group_size)
        else:  # the reorder's groups are its own
            sizes = itertools.repeat(group_size, -(-len(batches) // group_size))
        groups = (list(itertools.islice(sampled, size)) for size in sizes)
        if not staging:
            for group in groups:
                yield from self._group(group, None, gather_stream)
            return
        pending = None  # the group staged before this one, gathered once this one is staged
        try:
            for group in groups:
                staged = self._stage([item[1].node for item in group], staging_stream)
                if pending is not None:
                    yield from self._group(*pending, gather_stream)
                pending = group, staged
            if pending is not None:
                yield from self._group(*pending, gather_stream)
        finally:  # the staged rows freed with the pass, after their gathers
            self.reuse.release(staging_stream)

    def _group(self, group, staged, gather_stream):
        """A group's batches, in the reorder's order; with ``staged`` (its
        ``GroupReuse`` buffer) their gathers read its rows."""
        if staged is not None:
            self._use(staged, gather_stream)
        nodes = [item[1].node for item in group]
        try:
            for j in (self.reorder.order(nodes) if self.reorder is not None else range(len(group))):
                yield from self._finish([group[j]], gather_stream)
        finally:  # a pass left mid-group too: the release waits for the gathers issued
            if staged is not None:
                self.reuse.finish(staged, gather_stream)

    def _sampled(self, batches):
        """``(input_id, SamplerOutput, start, sampled, share)`` of each batch
        in epoch order, ``super_batch`` batches sampled in one pass; ``share``
        is the batch's part of the pass's sampling time (1 / batches in it)."""
        for first in range(0, len(batches), self.super_batch):
            group = batches[first:first + self.super_batch]
            start = self.times.mark()
            if len(group) == 1:
                # (validate=False: the seeds were checked once, as input_nodes)
                outs = [self.sampler.sample(self._seeds[group[0]], self.generator, validate=False)]
            else:
                outs = self.sampler.sample_many([self._seeds[input_id] for input_id in group], self.generator,
                                                validate=False)
            sampled = self.times.mark()
            for input_id, out in zip(group, outs):
                yield input_id, out, start, sampled, 1.0 / len(group)

    def _stage(self, nodes, staging_stream):
        """Read the group's host rows once (``GroupReuse``), on
        ``staging_stream``; returns the buffer they are in."""
        dynamic = self.cache.dynamic if self.cache is not None else None
        return self.reuse.stage(self.x, nodes, dynamic.slot if dynamic is not None else None,
                                self.cache.row_map if self.cache is not None else None, staging_stream)

    def _use(self, staged, gather_stream) -> None:
        """Gather from ``staged`` (on ``gather_stream``: after its rows are
        written), and count its rows read from host memory there, where the
        batches' counts are kept."""
        self.reuse.use(staged, gather_stream)
        if self.host_stats is not None:
            with torch.cuda.stream(gather_stream):  # None: a no-op
                self.host_stats.record_staged(staged.staged.numel())

    def _on_gather_stream(self, fn, gather_stream, tensors):
        """``fn(tensors)`` on ``gather_stream`` (after the current stream's
        work), or here without one."""
        if gather_stream is None:
            return fn(tensors)
        gather_stream.wait_stream(torch.cuda.current_stream(self.device))
        for t in tensors:
            t.record_stream(gather_stream)  # made on this stream, read on that one
        with torch.cuda.stream(gather_stream):
            return fn(tensors)

    def _gathers_per_pass(self) -> bool:
        """Whether a super-batch's batches are gathered in one pass
        (``GATHER_PER_PASS``): with ``super_batch > 1``, and no tier that
        changes from batch to batch (the dynamic cache, batch reuse)."""
        dynamic = self.cache.dynamic if self.cache is not None else None
        return GATHER_PER_PASS and self.super_batch > 1 and self.reuse is None and dynamic is None

    def _finish(self, items, gather_stream=None):
        """Gather and assemble sampled batches (one, or a super-batch's,
        ``_assemble``), and yield them, each counted in ``stats`` as it is
        handed on. With ``gather_stream`` (the prefetcher's), the work runs
        there: the next batch's sampling, on the current stream, overlaps
        this batch's gather (both wait mostly on UVA reads, neither fills
        PCIe)."""
        # what the sampling stream made and the gather stream reads: the
        # ids, and the edges (row and col are one [2, E] block; counted by
        # the stats); the seeds' ids were made on the consumer's stream
        tensors = []
        for _, out, *_ in items:
            tensors += [t for t in (out.node, out.row, out.edge) if t is not None]
            if out.col._base is None or out.col._base is not out.row._base:
                tensors.append(out.col)
        batches, marks = self._on_gather_stream(lambda _: self._assemble(items), gather_stream, tensors)
        for batch, mark in zip(batches, marks):
            self.times.add_batch(*mark)
            yield batch

    def _feature_tiers(self) -> dict:
        """``gather_rows``'s static tiers of ``x``: the cache's, else none
        (with reuse, an empty one: on a CPU, x would count as one)."""
        cache = self.cache
        if cache is not None:
            return dict(hot=cache.hot_x, num_hot=self._num_feature, row_map=cache.row_map, warm=cache.warm_x)
        return {} if self.reuse is None else dict(hot=self.x[:0], num_hot=0)

    def _reads_no_host_rows(self) -> bool:
        """Whether every adjacency list and feature row a batch reads lies
        in the loader's device memory: ``placement="device"``, or a cache
        that holds them all."""
        if self.cache is None:
            return self.placement == "device"
        num_nodes = self.graph.num_nodes
        return self._num_adjacency >= num_nodes and (self.x is None or self._num_feature >= num_nodes)

    def _replays_batches(self) -> bool:
        """Whether passes replay batches from CUDA graphs
        (``pipeline.BatchPipeline``; ``pipeline.REPLAY_BATCHES``, by default
        where no row crosses PCIe): where nothing a batch reads
        changes between batches outside the graphs (no dynamic cache, reuse
        or reorder; one batch a pass; no edge attributes or ``e_id``; node
        attributes along dim 0), with ``prefetch``, on a GPU
        (``pipeline.REPLAY_ON_CPU``: tests, on Triton's interpreter)."""
        dynamic = self.cache.dynamic if self.cache is not None else None
        on_cpu = pipeline.REPLAY_ON_CPU and self.device.type == "cpu" and use_triton(self.device)
        replay = pipeline.REPLAY_BATCHES
        if replay is None:  # where no row a batch reads crosses PCIe
            replay = self._reads_no_host_rows()
        return (replay and self.prefetch > 0
                and (self.sampler.cuda_graph or on_cpu) and self.super_batch == 1 and self.reorder is None
                and self.reuse is None and dynamic is None and not self._edge_attrs
                and all(dim == 0 for _, dim in self._node_attrs.values()))

    def _assemble(self, items) -> tuple[list[Data], list[tuple]]:
        """The ``Data`` of each of ``items`` (``(input_id, out, start,
        sampled, share)``): one batch, or a super-batch's batches gathered
        together (``_gathers_per_pass``): one gather, one ``n_id`` lookup and
        one slice of each node attribute for all of them, each batch's
        tensors views of its rows. That spares the producer's Python (the
        training loop's, in a step bound by the host: one interpreter lock)
        all but one of each of those calls a super-batch. Returns the
        batches and each one's marks for ``StageTimes.add_batch``."""
        times = self.times
        gather_start = times.mark()
        outs = [out for _, out, *_ in items]
        # internal ids: the user's, or hot-first with a cache
        # (a super-batch's nodes lie end to end: their view, not a copy)
        node = outs[0].node if len(outs) == 1 else joined([out.node for out in outs])
        cache = self.cache
        dynamic = cache.dynamic if cache is not None else None
        reuse = self.reuse
        tiers = {}
        if self.x is not None:
            tiers = self._feature_tiers()
            if dynamic is not None:
                dynamic.before_batch()
                tiers.update(dynamic=dynamic.rows, slot=dynamic.slot)
            if reuse is not None:
                tiers.update(reuse.gather_args())
        # attributes along dim 0 sliced once for all; others per batch
        n_id, x, rows = self._gather_nodes(node, tiers)
        gathered = times.mark()
        batches, marks, end = [], [], 0
        for input_id, out, start, sampled, share in items:
            begin, end = end, end + out.node.numel()
            whole = len(items) == 1
            n_id_k = n_id if whole else n_id[begin:end]
            # edges come grouped by target, hop by hop (the sampler's order): the
            # mark spares tritongnn.nn's layers a host sync each checking it
            batch = Data(edge_index=mark_sorted_by_dst(edge_index_of(out.row, out.col)), n_id=n_id_k)
            if x is not None:
                batch.x = x if whole else x[begin:end]
            marks.append((start, sampled, gather_start, gathered, share, 1.0 / len(items)))
            if self.host_stats is not None:
                reused = None
                if reuse is not None:
                    reused = reuse.served(out.node, dynamic.slot if dynamic is not None else None)
                    reuse.remember(out.node, batch.x)
                self.host_stats.record(out.node, out.col, out.num_sampled_nodes, self._num_feature,
                                       self._num_adjacency, dynamic.observe(out.node) if dynamic is not None else None,
                                       reused)
            if self.x is None or self._set_num_nodes:
                batch.num_nodes = n_id_k.numel()
            for key, (value, dim) in self._node_attrs.items():
                if dim == 0:
                    batch[key] = rows[key] if whole else rows[key][begin:end]
                else:
                    batch[key] = value.index_select(dim, n_id_k)
            if self._edge_attrs:
                batch.e_id = out.edge
                for key, (value, dim) in self._edge_attrs.items():
                    batch[key] = value.index_select(dim, out.edge)
            batches.append(self._complete(batch, input_id, out))
        return batches, marks

    def _gather_nodes(self, node: torch.Tensor, tiers: dict):
        """``n_id``, ``x`` (read through ``tiers``, ``gather_rows``'s) and the
        node attributes along dim 0 of the internal ids ``node``, each a
        tensor of its own (``_assemble``; a replayed batch past its slot's
        rows, ``pipeline.BatchPipeline``)."""
        n_id = node if self.cache is None else self.cache.order.index_select(0, node)  # (indexing parses more Python)
        x = None
        if self.x is not None:
            if self.x.dtype != self._x_dtype:  # stored narrower (feature_dtype): widened by the gather
                x = torch.empty((node.numel(), self.x.size(1)), dtype=self._x_dtype, device=self.device)
            x = gather_rows(self.x, node, x, **tiers, validate=False)  # the sampler's ids
        rows = {key: value.index_select(0, n_id) for key, (value, dim) in self._node_attrs.items() if dim == 0}
        return n_id, x, rows

    def _complete(self, batch: Data, input_id: torch.Tensor, out) -> Data:
        """``batch`` (its nodes' and edges' tensors set) with the graph
        attributes and PyG's bookkeeping (``input_id``, ``batch_size``,
        ``num_sampled_nodes``/``edges`` from the ``SamplerOutput``), then
        the user's ``transform``."""
        for key, value in self._graph_attrs.items():
            batch[key] = value
        batch.input_id = input_id
        batch.batch_size = input_id.numel()
        batch.num_sampled_nodes = out.num_sampled_nodes
        batch.num_sampled_edges = out.num_sampled_edges
        return self.transform(batch) if self.transform is not None else batch

    def __iter__(self):
        # One pass at a time: two open passes would share the sampler's id
        # map and captured graphs, the dynamic cache and group staging, and
        # with prefetch their producers run on unordered streams (wrong ids,
        # or rows staged by the other pass). Closing the open one stops its
        # producer (its generator's finally: drain, join, fence).
        open_pass = self._open_pass() if self._open_pass is not None else None
        if open_pass is not None:
            open_pass.close()
        epoch = self._pass()
        self._open_pass = weakref.ref(epoch)
        return epoch

    def _pass(self):
        if self.times.batches:
            self.stats_history.append(self.stats)
            self.times.reset()
            if self.host_stats is not None:
                self.host_stats.reset()
            if self.reorder is not None:
                self.reorder.reset()
        if self.cache is not None and self.cache.dynamic is not None:
            self.cache.dynamic.new_epoch()
        batches = self._epoch_batches()
        if self._replays_batches():
            if pipeline.FROM_PRODUCER:
                yield from self.times.consumer(_Prefetcher(self, batches, replay=True))
            else:
                yield from self.times.consumer(pipeline.BatchPipeline(self, batches))
            return
        if self.device.type != "cuda" or self.prefetch == 0:
            yield from self.times.consumer(self._batches(batches))
            return
        yield from self.times.consumer(_Prefetcher(self, batches))

    def __repr__(self) -> str:
        ranks = f", rank={self.rank}, world_size={self.world_size}" if self.world_size > 1 else ""
        ranks += f", super_batch={self.super_batch}" if self.super_batch > 1 else ""
        return (f"{self.__class__.__name__}(num_neighbors={self.num_neighbors}, "
                f"batch_size={self.batch_size}, placement={self.placement!r}, device={self.device}{ranks})")


# Group staging's last groups halved (``staging_group_sizes``); the
# benchmark turns it off to measure it.
HALVE_LAST_GROUPS = True

# True: a super-batch's batches gathered in one pass, without a dynamic
# cache or reuse (``NeighborLoader._assemble``: one gather launch, one n_id
# lookup, one slice of each node attribute a pass, each batch's tensors
# views of its rows of the pass's, held until the last of them is freed).
# It spares the producer's Python per batch, but on the H200 at
# ogbn-papers100M scale with no budget (25a5dc0, one run, whole passes) it
# was slower: super_batch=8 1.28 s an epoch against 1.05 s gathering batch
# by batch, the loop waiting 0.18 s an epoch for batches (a pass's first
# batch is ready only once all K are gathered), 116.7 GB of peak GPU memory
# against 97.2; with prefetch=6, 1.25 s. So off; the benchmark times both.
GATHER_PER_PASS = False


def staging_group_sizes(num_batches: int, group: int) -> list[int]:
    """Sizes of the groups a pass of ``num_batches`` stages (group reuse):
    ``group`` at a time, then the last ``< 2 * group`` batches in groups
    each half of those left (22 -> 11, 6, 3, 1, 1).

    The pass is bound by the staging reads, each group's overlapping the
    steps of the group before; the last group's steps overlap nothing. So
    the smaller the last group, the shorter that tail (16 steps of ~8 ms at
    ogbn-papers100M scale, one with halving), for little more read: each
    halved group is still staged while the one before it trains, and shares
    fewer pages only across its few batches. Measured there (13bd853, whole
    passes): 1.90 s an epoch against 1.92 s without, within noise; kept, as
    the published numbers were measured with it."""
    sizes, left = [], num_batches
    while left > 0:
        size = group if left >= 2 * group else -(-left // 2)
        sizes.append(size)
        left -= size
    return sizes


class _Prefetcher:
    """Runs ``loader._batches`` in a producer thread on side CUDA streams,
    ``loader.prefetch`` batches ahead of the consumer; with ``replay``, a
    ``pipeline.BatchPipeline`` instead (batches replayed from CUDA graphs,
    ``prefetch`` in flight, one queued: each holds a slot), on a CPU too
    (``pipeline.REPLAY_ON_CPU``: the tests).

    Why a thread and not just a side stream: a training step usually ends in
    ``loss.item()``, which leaves the GPU idle until the host asks for the next
    batch; sampling needs a few host decisions per batch, so it must run on
    the host while the model's kernels run, not after them. ``.item()`` and
    CUDA syncs release the GIL, so the two threads interleave well.
    """

    _DONE = object()

    def __init__(self, loader: NeighborLoader, batches, replay: bool = False):
        self.loader, self.batches = loader, batches
        self.cuda = loader.device.type == "cuda"
        self.queue = queue.Queue(maxsize=1 if replay else loader.prefetch)
        self.stop = threading.Event()
        # sampling, gather with assembly, and group staging (``GroupReuse``):
        # the loader's own three streams, not new ones a pass (torch hands
        # streams out round robin from a pool of 32 per GPU: new ones each
        # pass soon came back as those of another loader's producer), never
        # a capture's (``new_stream``)
        self.stream = self.gather_stream = self.staging_stream = self.consumer = None
        if self.cuda:
            if loader._streams is None:
                loader._streams = tuple(new_stream(loader.device, owner=loader) for _ in range(3))
            self.stream, self.gather_stream, self.staging_stream = loader._streams
            self.consumer = torch.cuda.current_stream(loader.device)
        # made here, on the loop's thread: it reads the loop's stream
        self.replay = pipeline.BatchPipeline(loader, batches, from_producer=True) if replay else None
        self.thread = threading.Thread(target=self._produce, daemon=True)
        self.thread.start()

    def _put(self, item) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _items(self):
        """``(batch, ready, built)`` of each batch, in order (``hand_over``)."""
        if self.replay is not None:
            yield from self.replay
            return
        # closed inside the stream's context: its end (the group staging's
        # release) is queued on the producer's streams
        with torch.cuda.stream(self.stream), contextlib.closing(
                self.loader._batches(self.batches, self.gather_stream, self.staging_stream)) as batches:
            for batch in batches:
                ready = torch.cuda.Event()
                ready.record(self.gather_stream)  # after the sampling it waited for
                yield batch, ready, True

    def _produce(self) -> None:
        try:
            if self.cuda:
                torch.cuda.set_device(self.loader.device)
                relax_thread()  # a user's capture on another thread neither fails this one's calls nor is broken by them
                # The epoch's input ids were made on the consumer's stream: wait
                # for them once, here, not per batch, or every batch would also
                # wait for the training steps queued behind them.
                self.stream.wait_stream(self.consumer)
            # closed here, on a stop too: its end (the group staging's
            # release, the pipeline's fences) is queued before the consumer
            # fences its streams. Captures are run by the loop's thread, in
            # ``next()``: none of the user's device-wide calls can overlap them.
            with captures_on(self._ask_loop), contextlib.closing(self._items()) as items:
                for item in items:
                    if self.stop.is_set() or not self._put(item) or self.stop.is_set():
                        return
        except BaseException as error:  # handed to the consumer, raised there
            self._put(error)
            return
        self._put(self._DONE)

    def _ask_loop(self, work):
        """Run ``work`` (a capture) on the loop's thread; its result."""
        request = CaptureRequest(work)
        if not self._put(request):
            raise CaptureAbandoned("the loop stopped before it ran the capture")
        return request.wait(self.stop)

    def __iter__(self):
        consumer = self.consumer
        try:
            while True:
                item = self.queue.get()
                if item is self._DONE:
                    return
                if isinstance(item, CaptureRequest):
                    item.run()
                    continue
                if isinstance(item, BaseException):
                    raise item
                batch, ready, built = item
                if self.cuda:
                    # the stream current where this batch is asked for: a loop
                    # may step its model under a stream of its own
                    consumer = pipeline.hand_over(batch, ready, self.loader.device, built)
                    if self.replay is not None:
                        self.replay.read_on(consumer)
                yield batch
        finally:
            self.stop.set()
            # A producer blocked on the full queue would notice the stop only at
            # its put's timeout (0.1 s: a loop leaving an epoch early waited for
            # it, and a benchmark timing a window of batches counted it):
            # draining the queue lets its put through, and it returns at once
            # (once stopped it puts at most one more item, which finds room).
            try:
                while True:
                    self.queue.get_nowait()
            except queue.Empty:
                pass
            self.thread.join()
            if not self.cuda:
                return
            # work the producer queued and nobody consumed (an epoch left
            # early) may still run on its streams: the consumer's stream, which
            # the next epoch's producer waits for first, waits for it, so the
            # next batches cannot overlap it in the sampler's id map and buffers
            # (and the stream of the last batch asked for, if another)
            for stream in dict.fromkeys((self.consumer, consumer)):
                for producer in (self.stream, self.gather_stream, self.staging_stream):
                    stream.wait_stream(producer)
