"""Batches replayed from CUDA graphs, a few batches ahead of the loop.

Why: at ogbn-papers100M scale with every row in GPU memory, a GraphSAGE
step is bound by the host, not the GPU (bench/results/README.md, twenty-third
and twenty-fourth sessions): the training thread's Python takes the step's
whole time, and the loader's producer thread, which spends ~1.0-1.3 ms of
Python a batch sampling, gathering and assembling it, takes that time from
the loop (one interpreter lock). Here a batch is two graph replays and a few
views (~0.55 ms of Python), issued either by the loader's producer thread,
which queues each batch for the loop (``FROM_PRODUCER``, ``loader._Prefetcher``),
or by the loop's thread itself as it asks for batches. By default only
where every row a batch reads is in GPU memory (``REPLAY_BATCHES``: faster
there, not at 24 GB, and more memory).

How: a ring of slots, each a ``PackedBatch`` (the sampler's graph: the
hops, then the batch's ``node`` and edges packed into buffers sized by the
hops' bounds, and its sizes copied to pinned memory) and a gather graph of
the loader's (``n_id`` through the cache's order, ``x`` through the tiers of
``gather_rows`` with the node count read on the device, each node attribute
by ``take_node_rows``), both writing buffers of the slot's own. Asked for
batch ``i``, the pipeline replays batch ``i + prefetch`` into a free slot
(the sampling graph, then the gather graph, on the loader's sampling
stream), then waits for batch ``i``'s sampling graph (long done: it was
replayed ``prefetch`` steps ago), reads its sizes and hands out views of
the slot's buffers, ordered after the gather graph: the stream current
where the loop asks for it waits for it (on the loop's thread, here; from a
producer, in ``hand_over`` as the loop takes it from the queue).

A slot is free once nothing outside the pipeline holds a tensor viewing
its buffers (their storages' use counts, not the batch objects: a view of a
view, e.g. ``batch.x[:batch.batch_size]`` kept past the batch, holds it
too; so does a batch waiting in the producer's queue); its next replay then
waits for the work the loop's streams had queued when it was found free
(the stream current on the loop's thread; from a producer, every stream the
loop has taken a batch on this pass). A batch is read on the stream current
where it was asked for (or on one ordered before that stream's later work);
another stream that reads it after the loop has dropped it must be waited
for before the next batch is asked for. Up to ``prefetch + 3`` slots (one
more from a producer, for its queue): a loop that keeps every batch
(``list(loader)``) gets the rest from the producer's path, batch by batch,
as does a batch of another size (a short last batch) and every batch where
a graph cannot be captured.

The batches are the producer's, bit for bit, for the same seed: the same
sampler kernels draw the same per-hop seeds in batch order, and the gather
reads the same tiers (``tests/test_pipeline.py``). The loader replays batches
where nothing changes from batch to batch outside the graphs: no dynamic
cache, no reuse or reorder, one batch a pass, no edge attributes, node
attributes sliced along dim 0 (``NeighborLoader._replays_batches``).
"""
from __future__ import annotations

import collections
import contextlib
import math
import weakref

import torch
from torch_geometric.data import Data

from ..kernels import gather_rows
from ..kernels.gather import take_node_rows
from ..kernels.aggregate import mark_sorted_by_dst
from ..kernels._launch import new_stream
from ..cuda_graph import capture

# Whether the loader replays batches where it can (``NeighborLoader``).
# History: on the H200 at ogbn-papers100M scale with no budget (GraphSAGE,
# whole passes, bench/results/README.md) it was slower than the producer
# thread at first (1.10-1.12 s an epoch against 0.97 at 91db3f9); the
# profile then found its gather launched over the node buffer's bound
# (0.3 ms a batch, now a persistent grid) and its launch spent host time on
# stream switches and lookups. At 960f27b the two are level within a
# call's spread (1.00-1.04 s against 0.94-1.05): the loop's own steps as
# short as with the producer, but 0.5 ms a batch in ``next`` (the sampling
# graph's launch, the ``Data``) against the producer's 0.15; at 91e58fc,
# its lookups of node attributes halved (``take_node_rows``), still no
# faster (1.13 / 1.03 s against 1.04 / 1.04 / 1.01), all replayed by the
# loop's thread. Replayed by the producer thread (``FROM_PRODUCER``, 45cff5c
# to 2dc22fd, six windows of three runs, no budget): 0.86-0.98 s against
# the producer's built batches' 0.93-1.07 (7 % faster on average), for
# 8-19 GB more peak GPU memory; at 24 GB 2 % slower (3.35 against 3.28 s)
# and 10 GB more. At 2333ffc (the slot's ``n_id`` looked up for its rows
# only) 0.96-1.00 s against 1.01-1.08 in the same call, 1.09-1.15x the
# model alone against 1.25-1.29x (twenty-ninth session). So, by default
# (None), a loader replays where no row a batch reads crosses PCIe
# (``placement="device"``, or a cache holding every row:
# ``NeighborLoader._reads_no_host_rows``), where the step is bound by the
# host; elsewhere PCIe bounds it and the slots' memory buys nothing. True:
# wherever it can; False: never.
REPLAY_BATCHES = None
# Who replays (with ``REPLAY_BATCHES``): the loader's producer thread, one
# batch queued for the loop (True), or the loop's own thread as it asks for
# each batch (False).
FROM_PRODUCER = True
# Replay on a CPU too, each "replay" run eagerly into the slot's buffers:
# for the tests, under Triton's interpreter (the loader's CPU path is
# otherwise the producer's, batch by batch).
REPLAY_ON_CPU = False
# A slot's ``x`` and node attributes hold this many times the nodes of the
# largest batch seen when it was made, not the node buffer's bound (7.3M
# rows of 512 B at ogbn-papers100M scale, batch 8000 at [15, 10, 5], where
# a batch has ~3.0M nodes): a batch's node count varies by a few percent,
# and one past the rows is completed eagerly (``_hand_out``), its slot sized
# again when next free.
SLOT_ROWS = 1.25
# Slots past ``prefetch + 2`` (the batch the loop holds, the one handed
# out, ``prefetch`` in flight; from a producer, one more: the queued batch)
# for a loop that keeps a batch a step longer.
SPARE_SLOTS = 1
# (Replaying on the loop's own stream, in order with the model's kernels
# rather than beside them, was tried and removed: at 3b01ce7 on the H200,
# papers100M scale, no budget, one run, 1.11 s an epoch either way,
# bench/results/README.md, twenty-seventh session.)


def most_slots(prefetch: int, from_producer: bool) -> int:
    """The slots a pipeline of ``prefetch`` batches in flight keeps at most."""
    return max(1, prefetch) + 2 + SPARE_SLOTS + int(from_producer)


def hand_over(batch: Data, ready, device, built: bool = True) -> torch.cuda.Stream:
    """Order a batch built on the producer's streams (done at ``ready``)
    before the work of the stream current on ``device``, and (``built``:
    its tensors allocated there, not a replayed slot's views) keep its
    tensors from reuse by those streams until that work is done (freed by
    the loop, not by the streams that made them). Returns that stream."""
    consumer = torch.cuda.current_stream(device)
    consumer.wait_event(ready)
    if not built:  # a slot's buffers: reused only once found free (``_Slot.found_free``)
        return consumer
    for value in batch.to_dict().values():
        if isinstance(value, torch.Tensor) and value.is_cuda:
            value.record_stream(consumer)
    return consumer


def _use_count(t: torch.Tensor) -> int:
    """Tensors viewing ``t``'s storage (``t`` itself included)."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


class _Slot:
    """One batch's graphs and buffers: the sampler's ``PackedBatch`` and the
    loader's gather graph over its ``node`` buffer, whose ``x`` and node
    attributes hold ``rows`` nodes (``size_rows``; None until the first
    batch replayed into it is sampled)."""

    def __init__(self, loader, packed):
        # the loader weakly: it keeps its slots (``_slots``), and a cycle
        # would keep it, and its tables, past the user's last reference
        # until the cyclic GC next runs
        self._loader, self.packed = weakref.ref(loader), packed
        self.n_id = packed.node if loader.cache is None else None  # (with a cache: ``size_rows``)
        self.rows = self.x = self.graph = None
        self.attrs: dict = {}
        self._tiers = loader._feature_tiers()
        self.bases, self.idle = [], []
        self.handed = False  # handed out since it was last found free
        self._free_events: dict = {}  # one per stream the loop read batches on
        self.free: list = []  # what its next replay waits for

    @property
    def loader(self):
        return self._loader()

    def size_rows(self, num_nodes: int, most_seen: int) -> None:
        """Give ``x`` and the node attributes ``SLOT_ROWS`` times the nodes of
        the larger of this batch (``num_nodes``) and the largest seen
        (``most_seen``), at most the node buffer's bound, and capture the
        gather graph over them. Rows past them are not gathered: a batch
        with more nodes is completed in ``_hand_out``."""
        loader, bound, device = self.loader, self.packed.node.numel(), self.loader.device
        rows = min(bound, max(1, math.ceil(SLOT_ROWS * max(num_nodes, most_seen))))
        self.rows, self.graph = rows, None
        if loader.cache is not None:
            # zeros: past a batch's nodes stay ids of earlier batches, in range
            # for ``take_node_rows``' fallback, which reads every id
            self.n_id = torch.zeros(rows, dtype=self.packed.node.dtype, device=device)
        if loader.x is not None:
            self.x = torch.empty((rows, loader.x.size(1)), dtype=loader._x_dtype, device=device)
        self.attrs = {key: torch.empty((rows,) + value.shape[1:], dtype=value.dtype, device=device)
                      for key, (value, _) in loader._node_attrs.items()}
        if device.type == "cuda":
            try:
                self.graph, _ = capture(self._gather)
            except BaseException:  # sized again when next used (or, where refused, gathered eagerly)
                self.rows = None
                raise
        # the buffers handed out, and the tensors viewing each while none is
        # (the storage's own reference: the tensor kept here)
        self.bases = list(dict.fromkeys([self.packed.node, self.packed.edges, self.n_id]
                                        + ([self.x] if self.x is not None else []) + list(self.attrs.values())))
        self.idle = [_use_count(t) for t in self.bases]

    def found_free(self, streams) -> None:
        """Mark the slot's buffers free once the work ``streams`` hold now
        (the loop's, which read them) is done."""
        self.free = []
        for stream in streams:
            event = self._free_events.get(stream)
            if event is None:
                event = self._free_events[stream] = torch.cuda.Event()
            event.record(stream)
            self.free.append(event)

    def _gather(self) -> None:
        """The gather graph's work: ``n_id``, ``x`` and the node attributes
        of the packed ``node`` buffer's first ``num_nodes`` ids (a count the
        device holds), at most ``rows``. (``n_id``'s lookup through the
        cache's order had run over the whole buffer, 7.3x10^6 ids for a
        batch's ~3x10^6 at papers100M scale: 0.2 ms a batch on the H200
        where the batch's own took 0.1, ``take_node_rows``.)"""
        loader, node, rows = self.loader, self.packed.node, self.rows
        if loader.cache is not None:
            take_node_rows(loader.cache.order, node[:rows], self.n_id[:rows], count=self.packed.num_nodes)
        if self.x is not None:
            gather_rows(loader.x, node[:rows], self.x, **self._tiers, validate=False, count=self.packed.num_nodes)
        for key, (value, _) in loader._node_attrs.items():
            take_node_rows(value, self.n_id[:rows], self.attrs[key], count=self.packed.num_nodes)

    def replay_gather(self) -> None:
        if self.graph is None:
            self._gather()
        else:
            self.graph.replay()

    def held(self) -> bool:
        """Whether a tensor outside the pipeline views a buffer of this slot."""
        return any(_use_count(t) > idle for t, idle in zip(self.bases, self.idle))


class BatchPipeline:
    """A pass of ``loader``'s ``batches`` (their input ids, in order),
    replayed ``loader.prefetch`` ahead by the thread iterating it (module
    docstring). Made on the loop's thread; with ``from_producer`` iterated
    by the producer's, yielding ``(batch, ready, built)`` for ``hand_over``
    on the loop's thread (which then reports its stream with ``read_on``),
    else by the loop's, yielding batches its current stream is ordered after."""

    def __init__(self, loader, batches, from_producer: bool = False):
        self.loader, self.batches = loader, iter(batches)
        self.cuda = loader.device.type == "cuda"
        self.from_producer = from_producer
        self.depth = max(1, loader.prefetch)
        self.most = most_slots(loader.prefetch, from_producer)
        self.in_flight: collections.deque = collections.deque()
        self.stream = self.gather_stream = self.consumer = None
        if self.cuda:
            if loader._streams is None:  # the producer's three, made once per loader
                loader._streams = tuple(new_stream(loader.device, owner=loader) for _ in range(3))
            self.stream, self.gather_stream = loader._streams[:2]
            self.consumer = torch.cuda.current_stream(loader.device)
            # the epoch's input ids were made on the loop's stream
            self.stream.wait_stream(self.consumer)
        # the streams the loop has taken batches on this pass (a producer's
        # slots wait for them all; replaced, not appended to: the producer
        # reads it while the loop may add one)
        self.consumers = (self.consumer,)

    def read_on(self, stream) -> None:
        """The loop took a batch on ``stream`` (from a producer's queue)."""
        if stream not in self.consumers:
            self.consumers = self.consumers + (stream,)

    def _stream(self, stream):
        return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def _slot(self, batch_size: int) -> _Slot | None:
        """A slot for a batch of ``batch_size`` seeds that no batch in flight
        or held uses (a new one while fewer than ``most``), or None."""
        loader = self.loader
        if loader._slots_failed.get(batch_size):
            return None
        slots = loader._slots.setdefault(batch_size, [])
        busy = {id(entry[1]) for entry in self.in_flight if entry[0] == "slot"}
        for slot in slots:
            if id(slot) in busy or slot.held():
                continue
            if slot.handed:  # the loop's work queued so far is all that read it
                if self.cuda:
                    slot.found_free(self.consumers if self.from_producer
                                    else (torch.cuda.current_stream(loader.device),))
                slot.handed = False
            return slot
        if len(slots) >= self.most:
            return None
        try:
            with self._stream(self.stream):
                packed = loader.sampler.packed_batch(batch_size)
                slot = _Slot(loader, packed) if packed is not None else None
        except RuntimeError:  # a capture refused (a sync in it)
            slot = None
        if slot is None:
            loader._slots_failed[batch_size] = True
            return None
        slots.append(slot)
        return slot

    def _launch(self, input_id: torch.Tensor) -> None:
        """Start the batch of ``input_id``: replayed into a free slot, or
        (no slot) built by the producer's path, on the same streams."""
        loader = self.loader
        # (a short last batch: a pass's one batch of its size, not worth graphs of its own)
        slot = self._slot(input_id.numel()) if input_id.numel() == loader.batch_size else None
        if slot is None:
            with self._stream(self.stream):
                item = next(loader._sampled([input_id]))
                batch = next(loader._finish([item], self.gather_stream))
            ready = None
            if self.cuda:
                ready = torch.cuda.Event()
                ready.record(self.gather_stream)
            self.in_flight.append(("built", batch, ready))
            return
        times, stream = loader.times, self.stream
        rng = loader.sampler._draw_rng(loader.generator)  # drawn in batch order, as the producer draws them
        # both graphs on the sampling stream, one after the other: the
        # loader's GPU work is a fraction of a step's, so nothing is gained
        # by overlapping a batch's gather with the next one's sampling, and
        # each stream switch, wait and event is host time of the loop's own
        # thread (the timing's gather span starts where sampling ends)
        with self._stream(stream):
            for event in slot.free:
                stream.wait_event(event)
            start = times.mark(stream)
            slot.packed.replay(loader._seeds[input_id], rng)
            sampled = times.mark(stream)
            if slot.rows is None:  # a new slot, or one a batch outgrew: sized by this batch (one sync)
                try:
                    slot.size_rows(int(slot.packed.num_nodes.item()), loader._most_nodes)
                except RuntimeError:  # its gather graph refused: completed eagerly, no more slots of the size
                    loader._slots_failed[input_id.numel()] = True
                    slot.rows = 0
            if slot.rows:
                slot.replay_gather()
            gathered = times.mark(stream)
        self.in_flight.append(("slot", slot, input_id, (start, sampled, gathered)))

    def _hand_out(self, entry) -> tuple[Data, torch.cuda.Event | None, bool]:
        """The batch of ``entry``, the event its work ends at (None on a
        CPU), and whether it was built (not replayed into a slot)."""
        loader = self.loader
        if entry[0] == "built":
            return entry[1], entry[2], True
        _, slot, input_id, (start, sampled, gathered) = entry
        if self.cuda:
            sampled.synchronize()  # the sizes in pinned memory (replayed steps ago: done)
        out, edge_index = slot.packed.outputs()
        n = out.node.numel()
        loader._most_nodes = max(loader._most_nodes, n)
        if n <= slot.rows:  # (else gathered anew below)
            n_id, x = slot.n_id[:n], None if slot.x is None else slot.x[:n]
            attrs = {key: buffer[:n] for key, buffer in slot.attrs.items()}
        ready, built, stats = gathered, False, loader.host_stats
        if n > slot.rows or stats is not None:
            # on the gather stream, after the gather graph: the producer's
            # path counts there (one stream adds to the counters)
            if self.cuda:
                self.gather_stream.wait_event(gathered)
            with self._stream(self.gather_stream):
                if n > slot.rows:  # past the slot's rows: gathered anew, the slot sized again when next free
                    n_id, x, attrs = loader._gather_nodes(out.node, slot._tiers)
                    slot.rows, built = None if slot.rows else 0, True
                if stats is not None:
                    stats.record(out.node, out.col, out.num_sampled_nodes, loader._num_feature,
                                 loader._num_adjacency)
            if self.cuda and (built or stats.counts_on_device(loader._num_feature, loader._num_adjacency)):
                ready = torch.cuda.Event()
                ready.record(self.gather_stream)
        batch = Data(edge_index=mark_sorted_by_dst(edge_index), n_id=n_id)
        if x is not None:
            batch.x = x
        if loader.x is None or loader._set_num_nodes:
            batch.num_nodes = n
        for key, value in attrs.items():
            batch[key] = value
        slot.handed = True
        loader.times.add_batch(start, sampled, sampled, gathered)  # the gather starts where sampling ends
        return loader._complete(batch, input_id, out), (ready if self.cuda else None), built

    def __iter__(self):
        loader = self.loader
        try:
            done = False
            while True:
                while not done and len(self.in_flight) <= self.depth:
                    input_id = next(self.batches, None)
                    if input_id is None:
                        done = True
                    else:
                        self._launch(input_id)
                if not self.in_flight:
                    return
                batch, ready, built = self._hand_out(self.in_flight.popleft())
                if self.from_producer:
                    yield batch, ready, built
                else:
                    if ready is not None:
                        hand_over(batch, ready, loader.device, built)
                    yield batch
        finally:
            # work replayed and never handed out (a pass left early) may
            # still run: the loop's stream, which the next pass's replays
            # wait for first, waits for it
            if self.cuda:
                current = () if self.from_producer else (torch.cuda.current_stream(loader.device),)
                for stream in dict.fromkeys(self.consumers + current):
                    stream.wait_stream(self.stream)
                    stream.wait_stream(self.gather_stream)
            self.in_flight.clear()
