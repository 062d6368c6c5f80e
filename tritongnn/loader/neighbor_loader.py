"""``tritongnn.NeighborLoader``: a drop-in for ``torch_geometric.loader.NeighborLoader``.

Same arguments for the common case, same batches: a ``Data`` with ``x, y,
edge_index, n_id, input_id, batch_size, num_sampled_nodes, num_sampled_edges``
(plus every other node attribute sliced by ``n_id``, and ``e_id``, edge
attributes sliced by it; ``kernels.edge_ids``). Nodes and edges come in
hop order, seeds first; ``edge_index[0]`` is the sampled neighbour,
``edge_index[1]`` the node it was sampled for, so PyG models run unchanged,
``trim_to_layer`` included.

Where PyG samples on the CPU in worker processes and copies each batch to the
GPU, this loader samples, maps ids and gathers features on the GPU, reading
topology and features from GPU memory (``placement="device"``) or straight
from pinned host memory (``placement="host"``, UVA) for graphs larger than
the GPU. The class is a facade over the stages, each in its own module:
``arguments`` (checks), ``placement`` and ``tiers`` (where the graph, the
features and the caches live), ``schedule`` (the order batches are sampled
and gathered in), ``assemble`` (a sampled batch as PyG's ``Data``),
``pipeline`` (the producer thread that prepares the next batches on side
CUDA streams while the model runs), ``replay`` (batches replayed from CUDA
graphs where every row a batch reads is in GPU memory), ``shard`` (seeds
split across ranks) and ``timing`` (``loader.stats``). With no GPU it runs
on the CPU, through the kernels' pure-torch references.
"""
from __future__ import annotations

import logging

import torch
from torch_geometric.data import HeteroData

from ..cache.dual import CacheStats
from ..cache.dynamic import DynamicCacheConfig
from ..cache.reorder import MatchReorder
from ..cache.reuse import BatchReuse, GroupReuse
from ..graph import csc_bytes
from ..kernels._launch import new_stream
from ..memory import check_reserve
from ..sampling.arguments import check_num_neighbors
from ..sampling.sampler import NeighborSampler
from ..sampling.temporal import time_sorted
from ..stores import is_hetero_pair
from . import arguments, temporal
from .assemble import Assembler
from .call import OnePass, batch_of
from .pipeline import Prefetcher
from .placement import choose_placement
from .replay import ReplayState, reads_no_host_rows
from .schedule import Schedule, pass_batches
from .shard import SeedShards, resolve_ranks
from .growth import CacheGrowth
from .tiers import TierBuilder, working_sets
from .timing import StageTimes

_log = logging.getLogger("tritongnn")


def loader_device(device) -> torch.device:
    """``device`` as a loader keeps it: default CUDA if present, a bare
    ``"cuda"`` as the current GPU."""
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    return torch.device("cuda", torch.cuda.current_device()) if device.type == "cuda" and device.index is None \
        else device


class NeighborLoader:
    """A GPU drop-in for ``torch_geometric.loader.NeighborLoader``.

    Args:
        data: a ``Data`` with ``edge_index`` or a ``(FeatureStore, GraphStore)`` pair (``tritongnn.stores``), unchanged;
            a ``HeteroData`` (or a pair with typed edges) makes a ``loader.hetero.HeteroNeighborLoader``.
        num_neighbors: fanout per hop, e.g. ``[15, 10, 5]``; -1 = all.
        input_nodes: seed ids (a tensor, list, tuple or range), a bool mask, or None
            for every node. Batches' ``input_id`` are as PyG's: a mask's node
            ids, else the seeds' positions in ``input_nodes``.
        input_time: PyG's: the seeds' times, with ``time_attr`` (``loader.temporal``).
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
            training (``tritongnn.loader.shard``): each rank takes a
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
            ``tritongnn.loader.replay``). One pass
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
        build_dir: a directory where the build is kept
            (``tritongnn.loader.saved``): the CSC graph, the access profile
            and, with a cache, the hot-first relabelled graph and its plan
            are saved there, and a later loader over the same graph and
            settings reads them back instead of sorting, profiling and
            relabelling again (``loader.build_loaded`` lists what it
            read). None: build every time.
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
            stage, and the loader leaves it off (``loader.reuse`` None;
            there it costs 0.97 s an epoch against 0.92-0.96 s);
            ``False``: off.
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
            With the adjacency in GPU memory, what a pass saves is each batch's
            fixed host cost, not GPU work (the id map's and the sampling
            kernel's work is per sampled neighbour): it pays where a batch's GPU
            work is small next to that cost (H200, the sampler alone,
            ``super_batch=8`` against 1: 1.03-2.03x, ``bench/results/README.md``;
            peak sampler memory grows about K-fold). Each batch is gathered
            alone. Past 1 the loader does not replay batches ahead of the loop (``tritongnn.loader.replay``, its default
            where no row crosses PCIe): each super-batch is one ``sample_many``
            call (on the producer thread, with ``prefetch``). Where K x
            num_nodes id-map words pass the direct table's 4 GiB, fewer go in
            each pass (``NeighborSampler.sample_many``). With ``reorder_group``
            the two are independent: batches are sampled K at a time and
            reordered G at a time (with G a multiple of K, each group is G / K
            whole super-batches).
        feature_dtype: store ``data.x`` in this narrower floating dtype (``torch.float16`` or ``torch.bfloat16`` for
            float32 features, also ``torch.float32`` for float64 ones) in the GPU caches and in host memory: half
            the bytes a batch's misses move through UVA, twice the rows a cache budget holds. Batches' ``x`` keep
            ``data.x``'s dtype (the gather widens each row as it reads it), with the values rounded to
            ``feature_dtype``: a lossy choice, like SALIENT's half-precision features (float16 also rounds values
            below 6e-8 to 0). A copy is made (``data.x`` is not modified; with ``share_host_memory`` the host's
            leader converts into the shared copy, and another rank only where it builds a tier of its own); values
            that overflow the dtype (float16: magnitudes of 65520 and more) raise ValueError; inf and NaN in
            ``data.x`` stay so. None: as given.
        **kwargs: ``weight_attr`` (PyG's): the name of an edge attribute of ``data``
            of finite, non-negative float edge weights: neighbours are drawn in proportion to weight
            (``tritongnn.kernels.sample_weighted``); ``disjoint`` (PyG's): each seed samples its own subgraph,
            ``batch.batch`` its seed slot (``tritongnn.sampling.disjoint``); ``time_attr``, ``temporal_strategy``
            (PyG's, disjoint: no neighbour later than its seed, ``tritongnn.sampling.temporal``); other PyG arguments:
            worker settings warn that they have no effect; features not supported yet raise ``NotImplementedError``.

    Example:
        >>> loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=128,
        ...                         input_nodes=data.train_mask, shuffle=True)
        >>> for batch in loader:
        ...     out = model(batch.x, batch.edge_index)[:batch.batch_size]
    """

    _timed_seeds = False  # batches bring their seeds' times (LinkNeighborLoader's edge_label_time)

    def __new__(cls, data=None, *args, **kwargs):
        if cls is NeighborLoader and (isinstance(data, HeteroData) or is_hetero_pair(data)):  # (PyG's one class)
            from .hetero import HeteroNeighborLoader  # (it builds on this class)
            return super().__new__(HeteroNeighborLoader)
        return super().__new__(cls)

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
                 build_dir=None, **kwargs):
        sampling = arguments.check_kwargs(dict(kwargs, input_time=input_time))  # subgraph_type, disjoint
        data = arguments.check_data(data)  # (a (FeatureStore, GraphStore) pair read into a Data)
        weight = arguments.check_weight_attr(data, kwargs.get("weight_attr"), replace)  # PyG's weight_attr
        arguments.check_settings(batch_size=batch_size, super_batch=super_batch, sample_kernel=sample_kernel,
                                 placement=placement, prefetch=prefetch, generator=generator, seed=seed,
                                 feature_dtype=feature_dtype, share_host_memory=share_host_memory,
                                 cache_policy=cache_policy, disjoint=sampling["disjoint"])
        self.device = loader_device(device)
        self.memory_reserve = check_reserve(memory_reserve)
        self.num_neighbors = check_num_neighbors(num_neighbors)
        num_edges, feature_bytes = arguments.num_edges(data), arguments.feature_bytes(data.x, feature_dtype)
        # e_id's map, where positions are not ids (a time-sorted graph's never are)
        keep_edge_perm = kwargs.get("time_attr") is not None or arguments.keeps_edge_perm(data.edge_index)
        chosen = choose_placement(
            placement, self.device, csc_bytes(data.num_nodes, num_edges, keep_edge_perm),
            feature_bytes, arguments.attribute_bytes(data),
            cache_budget=cache_budget, host_only=cache_budget is not None or bool(reuse) or bool(warm_budget),
            reserve=memory_reserve,
            working=working_sets(batch_size, self.num_neighbors, data.num_nodes, num_edges,
                                 getattr(data.x, "shape", None), feature_bytes // max(1, data.num_nodes),
                                 prefetch)["replayed"])
        placement, cache_budget, self.placement_reason = chosen.placement, chosen.cache_budget, chosen.reason
        _log.info("tritongnn.NeighborLoader: %s", self.placement_reason)
        dynamic = DynamicCacheConfig.resolve(dynamic_cache)
        arguments.check_host_options(placement, cache_budget, reuse, reorder_group, super_batch, dynamic,
                                     warm_budget)
        num_nodes = data.num_nodes
        self.input_nodes, input_ids = arguments.check_input_nodes(input_nodes, num_nodes, self.device)
        self.batch_size, self.shuffle, self.drop_last = batch_size, bool(shuffle), bool(drop_last)
        self.super_batch = super_batch
        self.transform, self.placement, self.prefetch = transform, placement, prefetch
        self.rank, self.world_size = resolve_ranks(rank, world_size)
        self.temporal = temporal.loader_temporal(data, kwargs, input_time, self.input_nodes.numel(), num_edges,
                                                 self.world_size, build_dir, self.device, self._timed_seeds)
        edges, time_ids = time_sorted(data.edge_index, self.temporal)  # rows sorted by time
        self._start_passes(seed, generator)

        attrs, features = arguments.split_attributes(data, num_nodes, self.device)
        builder = TierBuilder(device=self.device, placement=placement, rank=self.rank,
                              world_size=self.world_size, num_neighbors=self.num_neighbors,
                              generator=self.generator, input_nodes=self.input_nodes,
                              batch_size=batch_size, memory_reserve=self.memory_reserve,
                              warm_budget=warm_budget or 0, prefetch=prefetch, build_dir=build_dir)
        self.graph, self.x, self.cache = builder.build(
            edges, num_nodes, features, feature_dtype, keep_edge_perm=keep_edge_perm,
            share_host_memory=share_host_memory, cache_budget=cache_budget, replace=replace,
            cache_profile=cache_profile, profile_epochs=profile_epochs, cache_policy=cache_policy,
            dynamic=dynamic)
        self.cache_profile, self._host_ranks = builder.cache_profile, builder.host_ranks
        # which pieces of the build came from build_dir, and each stage's seconds
        self.build_loaded = [] if builder.saved is None else list(builder.saved.loaded)
        self.build_seconds = builder.clock.as_dict()
        # the input nodes in the sampler's ids: internal (hot-first) ones with a cache
        self.seeds = self.input_nodes if self.cache is None else self.cache.new_id[self.input_nodes]
        self.sampler = NeighborSampler(self.graph, self.num_neighbors, replace, self.device,
                                       return_eid=True, method=sample_kernel, **sampling,
                                       edge_weight=arguments.csc_edge_weight(weight, self.graph, self.device),
                                       **(self.cache.adjacency_tiers if self.cache else {}),
                                       **temporal.temporal_sampling(self.temporal, time_ids, self.graph, self.cache,
                                                                    self.device))
        self.stats_history: list[dict] = []
        self.times = StageTimes(self.device)
        # the cached prefixes: features and lists of internal ids below these are on the GPU
        num_feature, num_adjacency = \
            (self.cache.plan.num_feature, self.cache.plan.num_adjacency) if self.cache else (0, 0)
        # what reads host memory is counted: the cache's counters, or plain ones
        self.host_stats = None
        if self.cache is not None:
            self.host_stats = self.cache.stats
        elif placement == "host" and self.x is not None:
            self.host_stats = CacheStats.of(self.graph, self.x, self.device)
        self.reorder = None
        if reorder_group != 1:
            self.reorder = MatchReorder(num_nodes, reorder_group, self.device, num_feature)
        self.reuse = None
        # with every row in GPU memory there is no host read to save: none
        # (group staging there costs 0.3 ms a batch of bookkeeping on the
        # gather stream for nothing staged)
        if reuse and self.x is not None and num_feature < num_nodes:
            kind = GroupReuse if reuse == "group" else BatchReuse
            self.reuse = kind(num_nodes, num_feature, self.device)
        self.assembler = Assembler(x=self.x, x_dtype=None if features is None else features.dtype, attrs=attrs,
                                   cache=self.cache, reuse=self.reuse, host_stats=self.host_stats,
                                   num_feature=num_feature, num_adjacency=num_adjacency, transform=transform,
                                   times=self.times, device=self.device, input_ids=input_ids,
                                   input_time=getattr(self.temporal, "input_time", None))
        # cache_budget and memory_reserve "auto": the feature cache grows into what the first pass leaves
        self.growth = CacheGrowth(self.cache, self.device, eligible=cache_budget == "auto" and self.reuse is None
                                  and self.memory_reserve == "auto" and self.reorder is None)
        self.schedule = Schedule(sampler=self.sampler, seeds=self.seeds, generator=self.generator,
                                 super_batch=super_batch, reorder=self.reorder, assembler=self.assembler,
                                 input_time=getattr(self.temporal, "input_time", None))
        if self.device.type == "cuda":
            # The set-up (cache, tables, converted features) ran on the stream
            # current here; a pass may run under another, and its producer
            # waits only for the stream the pass began on. Once, at the end.
            torch.cuda.current_stream(self.device).synchronize()
            # The build's chunked temporaries leave cached blocks of sizes
            # nothing later asks for (19 GB of an H100 at papers100M scale);
            # handed back, the model and the captures' pools can have them.
            torch.cuda.empty_cache()
        self.growth.start()  # (the pass's GPU peaks its own)

    def _start_passes(self, seed, generator) -> None:
        """The state passes share: the epoch, the open pass, the producer's
        streams, the replay slots, this rank's seed shards and the generator
        (one from ``seed`` where none is given)."""
        self.epoch = 0
        self.open_pass = OnePass()
        self._streams = None  # the producer's (sampling, gather, staging) streams: made once, one pass at a time
        self.replay = ReplayState()  # the replayed batches' slots, kept across passes
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

    # -- what the pipeline calls ------------------------------------------

    def streams(self) -> tuple:
        """The producer's (sampling, gather, staging) CUDA streams: the
        loader's own, made once (torch hands streams out round robin from a
        pool of 32 per GPU: new ones each pass soon come back as those of
        another loader's producer), never a capture's (``new_stream``)."""
        if self._streams is None:
            self._streams = tuple(new_stream(self.device, owner=self) for _ in range(3))
        return self._streams

    def build_batches(self, batches, gather_stream=None, staging_stream=None):
        """The batches of ``batches`` (input ids, in epoch order), built in
        turn (``Schedule.batches``)."""
        return self.schedule.batches(batches, gather_stream, staging_stream)

    # -- passes -----------------------------------------------------------

    def __iter__(self):
        return self.open_pass.start(self._pass())  # (ending the pass still open: ``call.OnePass``)

    def __call__(self, index):
        """The batch of the seeds at positions ``index`` (a tensor, list,
        tuple, range or numpy array) of ``input_nodes``, as PyG's
        ``NodeLoader.__call__`` (``tritongnn.loader.call``); it ends the
        pass still open, as ``iter(loader)`` does, and counts in ``stats``."""
        return batch_of(self, index)

    def _pass(self):
        if self.times.batches:
            whole = self.times.batches >= len(self)  # a whole pass measured what the model takes
            self.stats_history.append(self.stats)
            self.times.reset()
            if self.host_stats is not None:
                self.host_stats.reset()
            if self.reorder is not None:
                self.reorder.reset()
            if whole and self.growth.after_pass(self.cache_profile):
                self.assembler.num_feature = self.cache.plan.num_feature
        if self.cache is not None and self.cache.dynamic is not None:
            self.cache.dynamic.new_epoch()
        batches = self._epoch_batches()
        if self._replays_batches():
            yield from self.times.consumer(Prefetcher(self, batches, replay=True))
        elif self.device.type != "cuda" or self.prefetch == 0:
            yield from self.times.consumer(self.build_batches(batches))
        else:
            yield from self.times.consumer(Prefetcher(self, batches))

    def _reads_no_host_rows(self) -> bool:
        return reads_no_host_rows(self.placement, self.cache, self.graph.num_nodes, self.x is not None)

    def _replays_batches(self) -> bool:
        """Whether passes replay batches from CUDA graphs
        (``tritongnn.loader.replay``): where no row a batch reads crosses PCIe
        (there the step is bound by the host; a dynamic cache or reuse exists
        only where rows do) and nothing a batch reads changes between batches
        outside the graphs (no reorder; one batch a pass; no edge attributes;
        node attributes tensors along dim 0: ``Attributes.replayable``), with
        ``prefetch``, where the sampler captures."""
        return (self._reads_no_host_rows() and self.prefetch > 0
                and self.replay.possible(self.sampler, self.device) and self.super_batch == 1
                and self.reorder is None and self.assembler.attrs.replayable)

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
        self.epoch += 1
        return pass_batches(self._shards, self.input_nodes.numel(), self.epoch - 1, self.shuffle, self.generator,
                            self.batch_size, len(self), self.device)

    # -- what the user reads ----------------------------------------------

    @property
    def stats(self) -> dict:
        """Statistics of the current (or last) epoch: time in sampling,
        gathering, the model and waiting (``tritongnn.loader.timing``);
        with ``placement="host"``, the rows and lists read from host memory
        and their bytes (``host_bytes``, dynamic refreshes included), the
        hit rates of the caches and the rows reused from the previous batch;
        and the build: ``placement``, ``placement_reason``, ``cache_plan``
        (None without a cache), ``build_loaded``, ``build_seconds`` (graph,
        features, profile, plan, cache), ``build_gpu_peak`` (bytes reserved
        and allocated at the peak so far when the build ended; None on the
        CPU), ``cache_grown`` (after the first pass: ``loader.growth``). Read mid-epoch with ``prefetch``,
        the counts include the batches prepared ahead of the loop.
        Completed epochs are in ``stats_history``."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # counts are written on the prefetch stream
        stats = self.times.as_dict()
        stats.update(placement=self.placement, placement_reason=self.placement_reason,
                     cache_plan=None if self.cache is None else str(self.cache.plan),
                     build_loaded=list(self.build_loaded), build_seconds=dict(self.build_seconds),
                     cache_grown=self.growth.grown, build_gpu_peak=self.growth.build_peak)
        for part in (self.host_stats, self.reorder, self.cache and self.cache.dynamic):
            if part is not None:
                stats.update(part.as_dict())
        if self.cache is not None and self.cache.dynamic is not None:
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

    def __repr__(self) -> str:
        # as PyG's NodeLoader: logs and code that print loaders read the same
        return f"{self.__class__.__name__}()"
