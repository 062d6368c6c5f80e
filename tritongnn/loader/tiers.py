"""The tiers the loader reads, built once: the CSC graph and the features on
the loader's device or in pinned host memory, and with a ``cache_budget``
the dual cache (profile, plan, relabel: ``tritongnn.cache``). With one host
copy for the ranks of a host (``share_host_memory``), the host's leader
builds the host arrays into shared memory and the others map them."""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time

import torch

from .._checks import check_positive_int
from ..cache.allocator import CachePlan, check_budget, plan_by_degree, plan_cache
from ..cache.dual import DualCache, relabel_tiers
from ..cache.profile import AccessProfile
from ..graph import CSCGraph, csc_bytes, edge_bytes
from ..host_memory import as_pinned
from ..shared_host import HostGroup, SharedHostArrays
from ..memory import CACHE_BYTES_PER_NODE, batch_bound, batch_working_set, device_free_bytes, model_reserve
from ..sampling.profile import profile_accesses
from ..sampling.sampler import NeighborSampler
from .arguments import stored_features
from .replay import SLOT_ROWS, most_slots
from .saved import SavedBuild


def resolve_budget(budget, device: torch.device, memory_reserve, *, num_nodes: int = 0, whole: int = 0,
                   eager: int = 0, replayed: int = 0) -> int:
    """``cache_budget`` in bytes: ``"auto"`` is the GPU memory the process
    may still use less the cache's own ``CACHE_BYTES_PER_NODE`` for each of
    ``num_nodes`` and ``memory_reserve`` (``"auto"``: with room for the
    ``eager`` working set of batches built one by one; for the ``replayed``
    one where the budget would hold all ``whole`` bytes of graph and
    features, as the batches are then replayed into slots); an int is
    checked against the card."""
    if budget == "auto":
        if device.type != "cuda":
            raise ValueError(f"cache_budget='auto' sizes the cache from free GPU memory: it needs a "
                             f"CUDA device, got device={device}")
        # what the process may still use (within set_per_process_memory_fraction)
        free = device_free_bytes(device) - CACHE_BYTES_PER_NODE * num_nodes
        budget = free - model_reserve(device, memory_reserve, eager)
        if whole and budget >= whole:
            budget = free - model_reserve(device, memory_reserve, replayed)
        return max(0, budget)
    if isinstance(budget, str):
        raise ValueError(f"cache_budget must be an int number of bytes or 'auto', got {budget!r}")
    budget = check_budget(budget, "cache_budget")
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        if budget > total:
            raise ValueError(f"cache_budget={budget} bytes is more than the GPU's {total} bytes")
    return budget


def working_sets(batch_size: int, num_neighbors, num_nodes: int, num_edges: int, x_shape, row_bytes: int,
                 prefetch: int, rows_per_batch: float | None = None) -> dict:
    """GPU bytes of a loader's batches at once (``memory.batch_working_set``):
    ``eager``, built one by one (``prefetch`` in flight, one handed out, one
    in the loop), and ``replayed``, into slots (``most_slots``, each
    ``SLOT_ROWS`` times a batch). A batch holds the nodes the fanouts allow,
    or ``SLOT_ROWS`` times the ``rows_per_batch`` a profile measured; and
    ``whole``, the graph's and the features' bytes."""
    nodes, edges = batch_bound(batch_size, num_neighbors, num_nodes, num_edges)
    if rows_per_batch is not None:
        nodes = min(nodes, math.ceil(SLOT_ROWS * rows_per_batch))
    columns = 0 if x_shape is None else (int(x_shape[1]) if len(x_shape) == 2 else 1)
    # (a cache's graph keeps its edge_perm: the relabel makes one)
    return dict(whole=csc_bytes(num_nodes, num_edges, keep_edge_perm=True) + row_bytes * num_nodes,
                eager=batch_working_set(nodes, edges, row_bytes, columns, prefetch + 2),
                replayed=batch_working_set(nodes, edges, row_bytes, columns,
                                           math.ceil(most_slots(prefetch) * SLOT_ROWS)))


class BuildClock:
    """Seconds of each build stage, exclusive of the stages it calls
    (profiling builds the graph it samples): ``with clock("graph"): ...``.
    On a GPU each boundary synchronises, so a stage owns its kernels."""

    def __init__(self, device: torch.device):
        self.device, self.seconds, self._open = device, {}, []

    @contextlib.contextmanager
    def __call__(self, stage: str):
        self._tick()
        self._open.append(stage)
        try:
            yield
        finally:
            self._tick()
            self._open.pop()

    def _tick(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        if self._open:
            stage = self._open[-1]
            self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._last
        self._last = now

    def as_dict(self) -> dict:
        return {stage: round(seconds, 3) for stage, seconds in self.seconds.items()}


class TierBuilder:
    """Builds the graph, ``x`` and the cache for one loader (``build``).
    Afterwards ``host_ranks`` says how many ranks map the host arrays,
    ``cache_profile`` is the profile the cache was planned from (None
    without a cache) and ``clock`` holds the seconds of each stage."""

    def __init__(self, *, device: torch.device, placement: str, rank: int, world_size: int, num_neighbors,
                 generator: torch.Generator, input_nodes: torch.Tensor, batch_size: int, memory_reserve,
                 warm_budget: int, prefetch: int = 2, build_dir=None):
        self.device, self.placement = device, placement
        self.rank, self.world_size = rank, world_size
        self.num_neighbors, self.generator = num_neighbors, generator
        self.input_nodes, self.batch_size = input_nodes, batch_size
        self.memory_reserve, self._warm_budget, self.prefetch = memory_reserve, warm_budget, prefetch
        self.host_ranks = 1
        self.cache_profile = None
        self.build_dir = build_dir
        self.saved = None  # the SavedBuild in build_dir, once build() has run
        self.clock = BuildClock(device)

    def build(self, edge_index, num_nodes: int, features, feature_dtype, *, keep_edge_perm: bool,
              share_host_memory: bool, cache_budget, replace: bool, cache_profile, profile_epochs: int,
              cache_policy: str, dynamic) -> tuple[CSCGraph, torch.Tensor | None, DualCache | None]:
        """``(graph, x, cache)``: ``cache`` None without a budget, else
        ``graph`` and ``x`` are its relabelled ones (internal ids)."""
        placement = self.placement
        saved = self.saved = None if self.build_dir is None else \
            SavedBuild(self.build_dir, edge_index, num_nodes, keep_edge_perm)

        def build_graph() -> CSCGraph:
            # sorted on the loader's device in chunks, written where it is read: with
            # placement="host" pinned host memory, the edges never all on the GPU at once
            host = placement == "host" and self.device.type == "cuda"

            def build():
                return CSCGraph.from_edge_index(edge_index, num_nodes, keep_edge_perm=keep_edge_perm,
                                                device="cpu" if host else self.device, work=self.device,
                                                pin=host)
            with self.clock("graph"):
                return build() if saved is None else saved.graph(build, self.device, pin=host)

        # ranks sharing one host copy: a collective, so every rank of the group takes part
        host_group = self._host_group(share_host_memory)
        # With one host copy, features to store in feature_dtype are converted
        # where their values are needed (the leader's build of the copy; a
        # rank that builds a tier of its own), not by every rank up front:
        # until then x is a meta tensor of their shape and dtype.
        self._feature_source = (features, feature_dtype)
        with self.clock("features"):
            x = self._stored(features, feature_dtype, defer=host_group is not None)
        self.fingerprint = (num_nodes, edge_index.size(1), keep_edge_perm,
                            None if x is None else (tuple(x.shape), str(x.dtype)))
        # with one host copy, only the host's leader builds the graph; a single
        # rank with a cache and a build_dir may need only the relabelled one saved there
        lazy = saved is not None and host_group is None and cache_budget is not None
        graph = build_graph() if (host_group is None or host_group.is_leader) and not lazy else None
        try:
            if cache_budget is None:
                shared = None if host_group is None else self._share_graph(host_group, graph, x)
                if shared is not None:
                    return shared + (None,)
                graph = build_graph() if graph is None else graph
                if placement == "host" and self.device.type == "cuda":
                    graph = graph.pin_memory()
                with self.clock("features"):
                    return graph, self._place(self._real(x)) if x is not None else None, None
            if x is not None and x.dim() == 2 and x.size(1) == 0:
                raise ValueError(f"data.x has shape {tuple(x.shape)}: a feature cache plans rows by their bytes "
                                 f"and these have none; drop cache_budget, or give x at least one column")
            cache = self._build_cache(graph, build_graph, x, replace, cache_budget, cache_profile,
                                      profile_epochs, cache_policy, dynamic, host_group)
            return cache.graph, cache.x, cache
        finally:
            del self._feature_source  # the loader keeps no reference to the user's x

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
                self._stored(*self._feature_source, out=host.empty("x", x.shape, x.dtype))
            elif x is not None:
                host.copy("x", x)
            if graph.edge_perm is not None:  # read by the sampler through UVA (e_id)
                host.copy("edge_perm", graph.edge_perm)
            return {}

        published = SharedHostArrays(group, self.device).publish(build, self.fingerprint)
        if published is None:
            return None
        self.host_ranks = len(group.ranks)
        _, arrays = published
        return (CSCGraph(arrays["indptr"], arrays["indices"], arrays.get("edge_perm"), validate=False),
                arrays.get("x"))

    def _build_cache(self, graph, build_graph, x, replace, budget, profile, epochs, policy, dynamic,
                     host_group) -> DualCache:
        """Profile (or load a profile), plan the split, build the dual cache.
        With one host copy (``host_group``), the host's leader plans and
        writes the relabelled host tiers, the other ranks map them and build
        their GPU tiers from them."""
        check_positive_int("profile_epochs", epochs)
        num_nodes = self.fingerprint[0]
        if budget != "auto" or self.device.type != "cuda":  # checked before the profile's epochs (which
            budget = resolve_budget(budget, self.device, self.memory_reserve)  # size "auto" on a GPU)
        if graph is None and host_group is None:  # built (or read back) only once wanted
            graph_once = []

            def build_graph(build=build_graph):
                if not graph_once:
                    graph_once.append(build())
                return graph_once[0]
        with self.clock("profile"):
            self.cache_profile = self._access_profile(graph if graph is not None else build_graph, x, num_nodes,
                                                      replace, profile, epochs, policy)
        if budget == "auto":
            budget = resolve_budget(budget, self.device, self.memory_reserve, num_nodes=num_nodes,
                                    **self._working_sets(x))
        if host_group is not None:
            cache = self._share_cache(host_group, graph, build_graph, x, budget, policy, dynamic)
            if cache is not None:
                return cache
            graph = build_graph() if graph is None else graph
        with self.clock("features"):
            x = self._real(x)
        saved, settings = self.saved, self._plan_settings(x, policy, dynamic)
        reused = None if saved is None else saved.relabelled(budget, settings, self.device)
        if reused is not None:
            plan, rows, relabelled = reused
            with self.clock("cache"):
                x = relabel_tiers(None, x, plan, self.device)[1]
                return DualCache.from_relabelled(relabelled, x, plan, self.device, dynamic, rows,
                                                 self.cache_profile, self._warm_rows(x))
        graph = build_graph() if graph is None else graph
        with self.clock("plan"):
            plan, rows = self._plan_cache(graph, x, budget, policy, dynamic)
        with self.clock("cache"):  # relabelled hot-first, the tiers copied
            cache = DualCache(graph, x, plan, self.device, dynamic, rows, self.cache_profile, self._warm_rows(x))
        if saved is not None:
            row_bytes = 0 if x is None else x.size(1) * x.element_size()
            saved.save_relabelled(budget, settings, plan, rows, rows * row_bytes, cache.graph)
        return cache

    def _plan_settings(self, x, policy: str, dynamic) -> tuple:
        """What a saved plan must have been made with, besides its budget:
        the profile known by its totals, as it may be the user's."""
        row_bytes = 0 if x is None else x.size(1) * x.element_size()
        p = self.cache_profile
        profile = None if p is None else (p.epochs, p.num_batches, float(p.feature.sum()), int(p.inputs.sum()),
                                          int(p.adjacency.sum()))
        return (policy, row_bytes, None if dynamic is None else repr(dynamic), self.num_neighbors, profile,
                ("edge_bytes", self._edge_bytes()))

    def _edge_bytes(self) -> int:
        """Bytes a cached edge takes, and a pick from a host list reads: its
        neighbour id and its ``edge_perm`` entry (the relabelled graph always
        has one; the cache copies the cached rows' part: ``hot_edge_perm``)."""
        return edge_bytes(*self.fingerprint[:2])

    def _working_sets(self, x) -> dict:
        """``working_sets`` of this loader, with the rows per batch its profile saw."""
        profile = self.cache_profile
        rows = int(profile.inputs.sum()) / profile.num_batches if profile is not None and profile.num_batches \
            else None
        row_bytes = 0 if x is None else (x.size(1) if x.dim() == 2 else 1) * x.element_size()
        return working_sets(self.batch_size, self.num_neighbors, self.fingerprint[0], self.fingerprint[1],
                            None if x is None else x.shape, row_bytes, self.prefetch, rows)

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
        saved = self.saved if profile is None else None
        if saved is not None:
            profile = saved.profile_path(self.input_nodes, self.num_neighbors, replace, self.batch_size, epochs)
        if profile is None or isinstance(profile, (str, os.PathLike)):
            path = profile

            def compute():  # on rank 0, which builds the graph (the leader of its host)
                # only rank 0 looks for the file: ranks that saw it at different
                # times (or hosts that lack it) must not disagree on the broadcast
                if path is not None and os.path.exists(path):
                    try:
                        loaded = AccessProfile.load(path, num_nodes, self.num_neighbors)
                    except ValueError:
                        if saved is None:  # the user's file: theirs to fix
                            raise
                    else:  # (build_dir's own, if unreadable, is profiled and written again)
                        if saved is not None:
                            saved.loaded.append("profile")
                        return loaded
                built = graph() if callable(graph) else graph
                host_graph = built.pin_memory() if self.device.type == "cuda" else built
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
            lambda b, d: plan_cache(profile, degree, row_bytes, b, index_bytes=self._edge_bytes(),
                                    dynamic_bytes=d),
            budget, row_bytes, dynamic if x is not None else None, graph.num_nodes)

    def _share_cache(self, group: HostGroup, graph, build_graph, x, budget, policy, dynamic) -> DualCache | None:
        """With a cache: the leader plans, relabels into the host copy and
        publishes the plan; every rank maps the host tiers and builds its own
        GPU tiers (a tier the plan caches whole is built on each rank's
        device from its own input, never through host memory). None when
        ``/dev/shm`` had no room."""
        num_nodes = self.fingerprint[0]
        built = {}

        def build(host: SharedHostArrays) -> dict:
            x_values = self._real(x)
            plan, rows = self._plan_cache(graph, x_values, budget, policy, dynamic)
            built["tiers"] = relabel_tiers(graph, x_values, plan, self.device, host.empty)
            built["plan"] = plan
            host.copy("order", plan.order, pin=False)  # the plan the host tiers follow, for the others
            return dict(rows=rows, plan={f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)
                                         if f.name != "order"})

        published = SharedHostArrays(group, self.device).publish(build, self.fingerprint)
        if published is None:
            return None
        self.host_ranks = len(group.ranks)
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

    def _real(self, x: torch.Tensor | None) -> torch.Tensor | None:
        """``x`` with values: a deferred (meta) store converted now."""
        return self._stored(*self._feature_source) if x is not None and x.is_meta else x

    def _stored(self, x, dtype, defer: bool = False, out: torch.Tensor | None = None):
        pinned = self.placement == "host" and self.device.type == "cuda"
        return stored_features(x, dtype, self.device, pinned, defer=defer, out=out)

    def _place(self, x: torch.Tensor) -> torch.Tensor:
        if self.placement == "host" and self.device.type == "cuda":
            return as_pinned(x, self.device)
        return x.to(self.device).contiguous()
