"""The order a pass builds its batches in: sampled ``super_batch`` at a time
(``NeighborSampler.sample_many``), with ``reorder_group`` gathered a group at
a time in FastGL's match order (``cache.reorder``), with group reuse each
group's host rows staged once (``cache.reuse.GroupReuse``) while the group
before it is gathered."""
from __future__ import annotations

import itertools

import torch

from ..cache.reuse import GroupReuse
from .assemble import Assembler


def staging_group_sizes(num_batches: int, group: int) -> list[int]:
    """Sizes of the groups a pass of ``num_batches`` stages (group reuse):
    ``group`` at a time, then the last ``< 2 * group`` batches in groups
    each half of those left (22 -> 11, 6, 3, 1, 1).

    The pass is bound by the staging reads, each group's overlapping the
    steps of the group before; the last group's steps overlap nothing. So
    the smaller the last group, the shorter that tail (16 steps of ~8 ms at
    ogbn-papers100M scale, one with halving), for little more read: each
    halved group is still staged while the one before it trains, and shares
    fewer pages only across its few batches. At ogbn-papers100M scale,
    whole passes: 1.90 s an epoch against 1.92 s without, within noise;
    the published numbers are measured with it."""
    sizes, left = [], num_batches
    while left > 0:
        size = group if left >= 2 * group else -(-left // 2)
        sizes.append(size)
        left -= size
    return sizes


def pass_batches(shards, num_inputs: int, epoch: int, shuffle: bool, generator: torch.Generator, batch_size: int,
                 num_batches: int, device: torch.device) -> list[torch.Tensor]:
    """The input ids of a pass's ``num_batches`` batches, in order: this
    rank's shard of ``epoch`` (``shards``: a ``SeedShards``), or all
    ``num_inputs`` shuffled by ``generator`` (or in order)."""
    if shards is not None:
        order = shards.positions(epoch)
    else:
        order = torch.randperm(num_inputs, generator=generator) if shuffle else torch.arange(num_inputs)
    order = order.to(device)
    return [order[i:i + batch_size] for i in range(0, num_batches * batch_size, batch_size)]


class Schedule:
    """Samples and assembles a pass's batches (their input ids, in epoch
    order) in the order the loader's settings give.

    Args:
        sampler: the ``NeighborSampler``; ``seeds``: the input nodes in its
            ids (internal ids with a cache), indexed by the input ids.
        assembler: turns each sampled batch into ``Data``.
        reorder: a ``MatchReorder``, or None.
        input_time: PyG's ``input_time`` on the device, indexed by the
            input ids (each batch's ``seed_time``), or None: a temporal
            sampler's seeds then take their node times.
    """

    def __init__(self, *, sampler, seeds: torch.Tensor, generator: torch.Generator, super_batch: int,
                 reorder, assembler: Assembler, input_time: torch.Tensor | None = None):
        self.sampler, self.seeds, self.generator = sampler, seeds, generator
        self.input_time = input_time  # PyG's, on the device: a temporal batch's seed times
        self.super_batch, self.reorder, self.assembler = super_batch, reorder, assembler
        self.reuse, self.times = assembler.reuse, assembler.times

    def batches(self, batches, gather_stream=None, staging_stream=None):
        """The pass's batches, built in turn: with ``reorder`` assembled a
        group at a time in the group's match order; with group reuse, each
        group's host rows staged (on ``staging_stream``) before the batches
        of the group before it are gathered, so that those reads overlap
        these batches' steps."""
        sampled = self.sampled(batches)
        finish = self.assembler.finish
        if self.reorder is None and not isinstance(self.reuse, GroupReuse):
            for item in sampled:
                yield finish(item, gather_stream)
            return
        # a group: the reorder's, else (group reuse alone) the super-batch
        group_size = self.reorder.group if self.reorder is not None else self.super_batch
        staging = isinstance(self.reuse, GroupReuse)
        if staging and self.reorder is None:
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

    def build_one(self, input_id: torch.Tensor, gather_stream=None):
        """The batch of ``input_id``, sampled on the current stream and
        gathered on ``gather_stream`` (no reorder or reuse in between)."""
        return self.assembler.finish(next(self.sampled([input_id])), gather_stream)

    def sampled(self, batches):
        """``(input_id, SamplerOutput, start, sampled, share)`` of each batch
        in epoch order, ``super_batch`` batches sampled in one pass; ``share``
        is the batch's part of the pass's sampling time (1 / batches in it)."""
        for first in range(0, len(batches), self.super_batch):
            group = batches[first:first + self.super_batch]
            start = self.times.mark()
            if len(group) == 1:
                # (validate=False: the seeds were checked once, as input_nodes)
                seed_time = None if self.input_time is None else self.input_time[group[0]]  # else node times
                outs = [self.sampler.sample(self.seeds[group[0]], self.generator, validate=False,
                                            seed_time=seed_time)]
            else:
                outs = self.sampler.sample_many([self.seeds[input_id] for input_id in group], self.generator,
                                                validate=False)
            sampled = self.times.mark()
            for input_id, out in zip(group, outs):
                yield input_id, out, start, sampled, 1.0 / len(group)

    def _group(self, group, staged, gather_stream):
        """A group's batches, in the reorder's order; with ``staged`` (its
        ``GroupReuse`` buffer) their gathers read its rows."""
        if staged is not None:
            self._use(staged, gather_stream)
        nodes = [item[1].node for item in group]
        try:
            for j in (self.reorder.order(nodes) if self.reorder is not None else range(len(group))):
                yield self.assembler.finish(group[j], gather_stream)
        finally:  # a pass left mid-group too: the release waits for the gathers issued
            if staged is not None:
                self.reuse.finish(staged, gather_stream)

    def _stage(self, nodes, staging_stream):
        """Read the group's host rows once (``GroupReuse``), on
        ``staging_stream``; returns the buffer they are in."""
        cache = self.assembler.cache
        dynamic = cache.dynamic if cache is not None else None
        return self.reuse.stage(self.assembler.x, nodes, dynamic.slot if dynamic is not None else None,
                                cache.row_map if cache is not None else None, staging_stream)

    def _use(self, staged, gather_stream) -> None:
        """Gather from ``staged`` (on ``gather_stream``: after its rows are
        written), and count its rows read from host memory there, where the
        batches' counts are kept."""
        self.reuse.use(staged, gather_stream)
        host_stats = self.assembler.host_stats
        if host_stats is not None:
            with torch.cuda.stream(gather_stream):  # None: a no-op
                host_stats.record_staged(staged.staged.numel())
