"""Batches replayed from CUDA graphs a few batches ahead of the loop, where
every row a batch reads is in GPU memory.

Why: there a GraphSAGE step is bound by the host, not the GPU: the
training thread's Python takes the step's whole time, and building a batch
(sampling, gathering, assembling it: ~1.0-1.3 ms of Python) on the
producer thread takes that time from the loop (one interpreter lock). A
replayed batch is two graph replays and a few views (~0.55 ms of Python),
issued by the loader's producer thread (``pipeline.Prefetcher``). On the
H200 at ogbn-papers100M scale with every row in GPU memory an epoch took
0.96-1.00 s replayed against 1.01-1.08 s built, for 8-19 GB more peak GPU
memory; with rows crossing PCIe, PCIe bounds the step and the slots'
memory buys nothing (2 % slower at a 24 GB budget): ``replays_batches``.

How: a ring of slots, each a ``PackedBatch`` (the sampler's graph: the
hops, then the batch's ``node`` and edges packed into buffers sized by the
hops' bounds, and its sizes copied to pinned memory) and a gather graph
(``n_id`` through the cache's order, ``x`` through the tiers of
``gather_rows`` with the node count read on the device, each node attribute
by ``take_node_rows``), both writing buffers of the slot's own. Asked for
batch ``i``, the pipeline replays batch ``i + prefetch`` into a free slot
(the sampling graph, then the gather graph, on the loader's sampling
stream), then waits for batch ``i``'s sampling graph (long done: it was
replayed ``prefetch`` steps ago), reads its sizes and hands out views of
the slot's buffers, ordered after the gather graph (``pipeline.hand_over``
as the loop takes it from the queue).

A slot is free once nothing outside the pipeline holds a tensor viewing
its buffers (their storages' use counts, not the batch objects: a view of a
view, e.g. ``batch.x[:batch.batch_size]`` kept past the batch, holds it
too; so does a batch waiting in the producer's queue); its next replay then
waits for the work every stream the loop has taken a batch on this pass had
queued when it was found free. A batch is read on the stream current where
it was asked for (or on one ordered before that stream's later work);
another stream that reads it after the loop has dropped it must be waited
for before the next batch is asked for. Up to ``prefetch + 4`` slots
(``most_slots``): a loop that keeps every batch (``list(loader)``) gets the
rest built batch by batch, as does a batch of another size (a short last
batch) and every batch where a graph cannot be captured.

The batches are the built ones, bit for bit, for the same seed: the same
sampler kernels draw the same per-hop seeds in batch order, and the gather
reads the same tiers (``tests/test_pipeline.py``).
"""
from __future__ import annotations

import collections
import contextlib
import math

import torch
from torch_geometric.data import Data

from ..cuda_graph import capture
from ..kernels import gather_rows
from ..kernels._launch import use_triton
from ..kernels.aggregate import mark_sorted_by_dst
from ..kernels.gather import take_node_rows
from .assemble import Assembler

# A slot's ``x`` and node attributes hold this many times the nodes of the
# largest batch seen when it was made, not the node buffer's bound (7.3M
# rows of 512 B at ogbn-papers100M scale, batch 8000 at [15, 10, 5], where
# a batch has ~3.0M nodes): a batch's node count varies by a few percent,
# and one past the rows is completed eagerly (``_hand_out``), its slot sized
# again when next free.
SLOT_ROWS = 1.25
# Slots past ``prefetch + 3`` (the batch the loop holds, the one handed
# out, the one queued, ``prefetch`` in flight) for a loop that keeps a
# batch a step longer.
SPARE_SLOTS = 1


def most_slots(prefetch: int) -> int:
    """The slots a pipeline of ``prefetch`` batches in flight keeps at most."""
    return max(1, prefetch) + 3 + SPARE_SLOTS


def reads_no_host_rows(placement: str, cache, num_nodes: int, has_x: bool) -> bool:
    """Whether every adjacency list and feature row a batch reads lies in
    the loader's device memory: ``placement="device"``, or a cache that
    holds them all."""
    if cache is None:
        return placement == "device"
    plan = cache.plan
    return plan.num_adjacency >= num_nodes and (not has_x or plan.num_feature >= num_nodes)


class ReplayState:
    """What replayed passes keep across passes: the slots by batch size
    (``slots``), the sizes whose capture failed (``failed``), the nodes of
    the largest replayed batch so far (``most_nodes``: a new slot's rows);
    ``slot_rows``: a slot's rows as a multiple of that (``SLOT_ROWS``).

    ``eager_on_cpu``: on a CPU nothing is captured and the loader builds its
    batches one by one; set it (tests, under Triton's interpreter) to run
    the replayed path there, each "replay" run eagerly into the slot's
    buffers, in a producer thread."""

    def __init__(self):
        self.slots: dict[int, list] = {}
        self.failed: dict[int, bool] = {}
        self.most_nodes = 0
        self.slot_rows = SLOT_ROWS
        self.eager_on_cpu = False

    def possible(self, sampler, device: torch.device) -> bool:
        """Whether the sampler's batches can be captured (or, with
        ``eager_on_cpu``, run as if they were): not with a ``subgraph_type``
        other than ``"directional"`` (its edges come from a pass after the
        hops, with host syncs), nor for a disjoint sampler (a packed batch
        has no ``batch`` vector: ``NeighborSampler.packed_batch``; its
        batches are built, each one's hops replayed by the sampler)."""
        if sampler.subgraph_type != "directional" or sampler.disjoint:
            return False
        return sampler.cuda_graph or (self.eager_on_cpu and device.type == "cpu" and use_triton(device))


def _use_count(t: torch.Tensor) -> int:
    """Tensors viewing ``t``'s storage (``t`` itself included)."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


class _Slot:
    """One batch's graphs and buffers: the sampler's ``PackedBatch`` and the
    gather graph over its ``node`` buffer, whose ``x`` and node attributes
    hold ``rows`` nodes (``size_rows``; None until the first batch replayed
    into it is sampled)."""

    def __init__(self, assembler: Assembler, packed):
        self.assembler, self.packed = assembler, packed
        self.n_id = packed.node if assembler.cache is None else None  # (with a cache: ``size_rows``)
        self.rows = self.x = self.graph = None
        self.attrs: dict = {}
        self.tiers = assembler.feature_tiers()
        self.bases, self.idle = [], []
        self.handed = False  # handed out since it was last found free
        self._free_events: dict = {}  # one per stream the loop read batches on
        self.free: list = []  # what its next replay waits for

    def size_rows(self, num_nodes: int, most_seen: int, slot_rows: float) -> None:
        """Give ``x`` and the node attributes ``slot_rows`` times the nodes of
        the larger of this batch (``num_nodes``) and the largest seen
        (``most_seen``), at most the node buffer's bound, and capture the
        gather graph over them. Rows past them are not gathered: a batch
        with more nodes is completed in ``_hand_out``."""
        assembler, bound, device = self.assembler, self.packed.node.numel(), self.assembler.device
        rows = min(bound, max(1, math.ceil(slot_rows * max(num_nodes, most_seen))))
        self.rows, self.graph = rows, None
        if assembler.cache is not None:
            # zeros: past a batch's nodes stay ids of earlier batches, in range
            # for ``take_node_rows``' fallback, which reads every id
            self.n_id = torch.zeros(rows, dtype=self.packed.node.dtype, device=device)
        if assembler.x is not None:
            self.x = torch.empty((rows, assembler.x.size(1)), dtype=assembler.x_dtype, device=device)
        self.attrs = {key: torch.empty((rows,) + value.shape[1:], dtype=value.dtype, device=device)
                      for key, (value, _) in assembler.attrs.node.items()}
        if device.type == "cuda":
            try:
                self.graph, _ = capture(self._gather)
            except BaseException:  # sized again when next used (or, where refused, gathered eagerly)
                self.rows = None
                raise
        # the buffers handed out, and the tensors viewing each while none is
        # (the storage's own reference: the tensor kept here)
        self.bases = list(dict.fromkeys([self.packed.node, self.packed.edges, self.n_id]
                                        + [t for t in (self.packed.eid, self.x) if t is not None]
                                        + list(self.attrs.values())))
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
        device holds), at most ``rows``. (A lookup over the whole buffer,
        7.3x10^6 ids for a batch's ~3x10^6 at papers100M scale, takes 0.2 ms
        a batch on the H200 where the batch's own take 0.1:
        ``take_node_rows``.)"""
        assembler, node, rows = self.assembler, self.packed.node, self.rows
        if assembler.cache is not None:
            take_node_rows(assembler.cache.order, node[:rows], self.n_id[:rows], count=self.packed.num_nodes)
        if self.x is not None:
            gather_rows(assembler.x, node[:rows], self.x, **self.tiers, validate=False,
                        count=self.packed.num_nodes)
        for key, (value, _) in assembler.attrs.node.items():
            take_node_rows(value, self.n_id[:rows], self.attrs[key], count=self.packed.num_nodes)

    def replay_gather(self) -> None:
        if self.graph is None:
            self._gather()
        else:
            self.graph.replay()

    def held(self) -> bool:
        """Whether a tensor outside the pipeline views a buffer of this slot."""
        return any(_use_count(t) > idle for t, idle in zip(self.bases, self.idle))


class ReplayedBatches:
    """A pass of ``loader``'s ``batches`` (their input ids, in order),
    replayed ``loader.prefetch`` ahead (module docstring). Made on the
    loop's thread, iterated by the producer's, yielding ``(batch, ready,
    built)`` for ``pipeline.hand_over`` on the loop's thread, which then
    reports its stream with ``read_on``.

    It reads the loader's public surface: ``device``, ``prefetch``,
    ``batch_size``, ``sampler``, ``generator``, ``seeds``, ``times``,
    ``replay`` (the ``ReplayState``), ``assembler``, ``schedule`` and
    ``streams()``."""

    def __init__(self, loader, batches):
        self.loader, self.batches = loader, iter(batches)
        self.assembler, self.state = loader.assembler, loader.replay
        self.cuda = loader.device.type == "cuda"
        self.depth = max(1, loader.prefetch)
        self.most = most_slots(loader.prefetch)
        self.in_flight: collections.deque = collections.deque()
        self.stream = self.gather_stream = None
        # the streams the loop has taken batches on this pass (a slot waits
        # for them all; replaced, not appended to: the producer reads it
        # while the loop may add one)
        self.consumers = ()
        if self.cuda:
            self.stream, self.gather_stream = loader.streams()[:2]
            consumer = torch.cuda.current_stream(loader.device)
            # the epoch's input ids were made on the loop's stream
            self.stream.wait_stream(consumer)
            self.consumers = (consumer,)

    def read_on(self, stream) -> None:
        """The loop took a batch on ``stream`` (from the producer's queue)."""
        if stream not in self.consumers:
            self.consumers = self.consumers + (stream,)

    def _stream(self, stream):
        return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def _slot(self, batch_size: int) -> _Slot | None:
        """A slot for a batch of ``batch_size`` seeds that no batch in flight
        or held uses (a new one while fewer than ``most``), or None."""
        state = self.state
        if state.failed.get(batch_size):
            return None
        slots = state.slots.setdefault(batch_size, [])
        busy = {id(entry[1]) for entry in self.in_flight if entry[0] == "slot"}
        for slot in slots:
            if id(slot) in busy or slot.held():
                continue
            if slot.handed:  # the loop's work queued so far is all that read it
                if self.cuda:
                    slot.found_free(self.consumers)
                slot.handed = False
            return slot
        if len(slots) >= self.most:
            return None
        try:
            with self._stream(self.stream):
                packed = self.loader.sampler.packed_batch(batch_size)
                slot = _Slot(self.assembler, packed) if packed is not None else None
        except RuntimeError:  # a capture refused (a sync in it)
            slot = None
        if slot is None:
            state.failed[batch_size] = True
            return None
        slots.append(slot)
        return slot

    def _launch(self, input_id: torch.Tensor) -> None:
        """Start the batch of ``input_id``: replayed into a free slot, or
        (no slot) built as the producer builds it, on the same streams."""
        loader = self.loader
        # (a short last batch: a pass's one batch of its size, not worth graphs of its own)
        slot = self._slot(input_id.numel()) if input_id.numel() == loader.batch_size else None
        if slot is None:
            with self._stream(self.stream):
                batch = loader.schedule.build_one(input_id, self.gather_stream)
            ready = None
            if self.cuda:
                ready = torch.cuda.Event()
                ready.record(self.gather_stream)
            self.in_flight.append(("built", batch, ready))
            return
        times, stream = loader.times, self.stream
        rng = loader.sampler.draw_rng(loader.generator)  # drawn in batch order, as a built pass draws them
        # both graphs on the sampling stream, one after the other: the
        # loader's GPU work is a fraction of a step's, so nothing is gained
        # by overlapping a batch's gather with the next one's sampling, and
        # each stream switch, wait and event is host time (the timing's
        # gather span starts where sampling ends)
        with self._stream(stream):
            for event in slot.free:
                stream.wait_event(event)
            start = times.mark(stream)
            slot.packed.replay(loader.seeds[input_id], rng)
            sampled = times.mark(stream)
            if slot.rows is None:  # a new slot, or one a batch outgrew: sized by this batch (one sync)
                try:
                    slot.size_rows(int(slot.packed.num_nodes.item()), self.state.most_nodes, self.state.slot_rows)
                except RuntimeError:  # its gather graph refused: completed eagerly, no more slots of the size
                    self.state.failed[input_id.numel()] = True
                    slot.rows = 0
            if slot.rows:
                slot.replay_gather()
            gathered = times.mark(stream)
        self.in_flight.append(("slot", slot, input_id, (start, sampled, gathered)))

    def _hand_out(self, entry) -> tuple[Data, torch.cuda.Event | None, bool]:
        """The batch of ``entry``, the event its work ends at (None on a
        CPU), and whether it was built (not replayed into a slot)."""
        if entry[0] == "built":
            return entry[1], entry[2], True
        assembler = self.assembler
        _, slot, input_id, (start, sampled, gathered) = entry
        if self.cuda:
            sampled.synchronize()  # the sizes in pinned memory (replayed steps ago: done)
        out, edge_index = slot.packed.outputs()
        n = out.node.numel()
        self.state.most_nodes = max(self.state.most_nodes, n)
        if n <= slot.rows:  # (else gathered anew below)
            n_id, x = slot.n_id[:n], None if slot.x is None else slot.x[:n]
            attrs = {key: buffer[:n] for key, buffer in slot.attrs.items()}
        ready, built, stats = gathered, False, assembler.host_stats
        if n > slot.rows or stats is not None:
            # on the gather stream, after the gather graph: a built batch
            # counts there (one stream adds to the counters)
            if self.cuda:
                self.gather_stream.wait_event(gathered)
            with self._stream(self.gather_stream):
                if n > slot.rows:  # past the slot's rows: gathered anew, the slot sized again when next free
                    n_id, x, attrs = assembler.gather_nodes(out.node, slot.tiers)
                    slot.rows, built = None if slot.rows else 0, True
                if stats is not None:
                    stats.record(out.node, out.col, out.num_sampled_nodes, assembler.num_feature,
                                 assembler.num_adjacency)
            if self.cuda and (built or stats.counts_on_device(assembler.num_feature, assembler.num_adjacency)):
                ready = torch.cuda.Event()
                ready.record(self.gather_stream)
        batch = Data(edge_index=mark_sorted_by_dst(edge_index), n_id=n_id)
        if x is not None:
            batch.x = assembler.batch_x(x)
        if assembler.x is None or assembler.attrs.set_num_nodes:
            batch.num_nodes = n
        for key, value in attrs.items():
            batch[key] = value
        if out.edge is not None:  # edge ids, mapped from CSC positions in the graph (``PackedBatch``)
            batch.e_id = out.edge
        slot.handed = True
        self.loader.times.add_batch(start, sampled, sampled, gathered)  # the gather starts where sampling ends
        return assembler.complete(batch, input_id, out), (ready if self.cuda else None), built

    def __iter__(self):
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
                yield self._hand_out(self.in_flight.popleft())
        finally:
            # work replayed and never handed out (a pass left early) may
            # still run: the loop's streams, which the next pass's replays
            # wait for first, wait for it
            for stream in self.consumers:
                stream.wait_stream(self.stream)
                stream.wait_stream(self.gather_stream)
            self.in_flight.clear()
