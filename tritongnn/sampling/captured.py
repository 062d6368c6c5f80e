"""A batch's hops captured into a CUDA graph and replayed.

A batch is some 20 small kernels and torch ops whose Python launch cost
(~1 ms) exceeds their GPU time (~0.3 ms), and on the host that time
competes with the training loop for the interpreter: captured once per
batch size (``NeighborSampler``'s ``_replayable``, or K sub-batches and
their total for a super-batch), a batch is one replay. What capture froze
stays put: the seeds and per-hop Philox seeds are copied into static
buffers, a hash id map is the graph's own (a direct one is the sampler's,
shared: its tag tells batches apart). ``PackedBatch`` also packs the
batch's outputs into buffers of its own, for the loader's replayed batches
(``tritongnn.loader.replay``).
"""
from __future__ import annotations

import weakref

import torch
from torch_geometric.sampler import SamplerOutput

from ..cuda_graph import capture
from ..host_memory import pinned_empty
from ..kernels import edge_ids, pack_prefixes


def hop_sizes(hops) -> torch.Tensor:
    """Every hop's edge count and new-node count, ``[e0, n0, e1, n1, ...]``:
    what the host reads of a batch, in one tensor."""
    return torch.cat([t for e, m in hops for t in (e.num_edges, m.num_new)])


def hop_bounds(hops, num_batches: int) -> torch.Tensor:
    """Every hop's ``edge_ptr`` (K + 1) and new nodes per sub-batch (K), hop
    after hop: what the host reads of a super-batch, in one tensor."""
    return torch.cat([t for e, m in hops for t in (e.edge_ptr, m.num_new_per_batch[:num_batches])])


def sub_batch_of(batch_ptr: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The sub-batch of each seed position (``batch_ptr``: ``K + 1``), on the
    device with no sync (empty sub-batches too)."""
    return torch.bucketize(positions, batch_ptr[1:], right=True)


class CapturedHops:
    """A CUDA graph of the hops of one shape, K sub-batches of ``batch_size``
    seeds in all, with the buffers it reads: ``seeds``, ``rng`` (per-hop,
    per-sub-batch Philox seeds) and, for K > 1, ``batch_ptr`` (the seeds'
    sub-batches are worked out from it in the graph) are written before
    each replay; ``hops`` are overwritten by it. How the seeds split among
    the K sub-batches lives in those buffers, so one graph serves every
    split of the same total."""

    def __init__(self, sampler, batch_size: int, num_batches: int = 1):
        device = self.device = sampler.device
        # weakly: the sampler keeps its graphs (``_captured``), and a cycle
        # would keep the sampler, and its adjacency in pinned host memory,
        # past the loader until the cyclic GC next runs
        self._sampler = weakref.ref(sampler)
        self.seeds = torch.zeros(batch_size, dtype=torch.int64, device=device)
        # a disjoint batch's B sub-batches are one batch: its hops' seeds
        # (one a hop, each slot's made from it in the graph) and sizes
        self.disjoint = sampler.disjoint
        streams = 1 if self.disjoint else num_batches
        self.rng = torch.zeros(len(sampler.num_neighbors), streams, dtype=torch.int64, device=device)
        # the Philox seeds staged in pinned memory: from pageable memory the
        # copy may wait for the stream to drain first (CUDA's rule for
        # staged copies), which on the loop's thread (``pipeline``) would
        # wait for the batches replayed before. Written again only after the
        # host has waited for the replay that read it (its sizes).
        self.rng_host = pinned_empty(tuple(self.rng.shape), torch.int64, device)
        self.batch_ptr = self.ptr_host = self._positions = None
        if num_batches > 1:  # a valid split for the warm-up run: every seed in sub-batch 0
            self.batch_ptr = torch.full((num_batches + 1,), batch_size, dtype=torch.int64, device=device)
            self.batch_ptr[0] = 0
            self.ptr_host = pinned_empty((num_batches + 1,), torch.int64, device)  # staged as rng_host is
            self._positions = torch.arange(batch_size, device=device)
        # its own hash table, sized so that no hop needs to grow it (a sync),
        # or the sampler's direct table
        self.id_map = sampler._new_id_map(sampler._keys_bound(batch_size, num_batches), num_batches)
        self.num_batches = num_batches
        self.graph = None
        if device.type == "cuda":
            self.graph, _ = capture(self._run)
        else:  # (``PackedBatch`` on a CPU: each replay runs the hops)
            self._run()

    def _run(self):
        """The captured work: every hop and what the host reads after a
        replay (``sizes``: ``hop_sizes``, or ``hop_bounds`` for K > 1 but
        a disjoint batch)."""
        # the seeds' sub-batches from batch_ptr, in the graph: one input fewer to write
        seeds_batch = None if self.batch_ptr is None else sub_batch_of(self.batch_ptr, self._positions)
        self.hops = self._sampler()._hops(self.seeds, self.rng, None, self.id_map, seeds_batch, self.batch_ptr)
        self.sizes = None if not self.hops else hop_sizes(self.hops) \
            if self.num_batches == 1 or self.disjoint else hop_bounds(self.hops, self.num_batches)

    def replay(self, seeds, rng: torch.Tensor, batch_ptr: torch.Tensor | None = None):
        """Run the graph on these inputs: ``seeds`` (a tensor, or for K > 1
        the K sub-batches' tensors, written end to end into its buffer),
        ``rng`` and, for K > 1, ``batch_ptr`` (``K + 1``), both on the CPU
        (staged in pinned memory: no copy here waits for the stream); returns
        ``(hops, sizes)``, the hops' buffers and the sizes (``hop_sizes``, or
        ``hop_bounds`` for K > 1) in one tensor."""
        if isinstance(seeds, torch.Tensor):
            self.seeds.copy_(seeds)
        else:
            torch.cat(list(seeds), out=self.seeds)
        self.rng_host.copy_(rng)
        self.rng.copy_(self.rng_host, non_blocking=True)
        if self.batch_ptr is not None:
            self.ptr_host.copy_(batch_ptr)
            self.batch_ptr.copy_(self.ptr_host, non_blocking=True)
        if self.graph is None:
            self._run()  # (the map's ``start`` counts the batch)
        else:
            if self.id_map.direct is not None:
                self.id_map.direct.next_batch()  # the replay takes the next tag
            self.graph.replay()
        return self.hops, self.sizes


class PackedBatch(CapturedHops):
    """One batch's hops and its copy-out in one graph: after the hops, the
    batch's ``node`` (seeds, then each hop's new nodes) and its edges
    (``edges[:E]`` the rows, ``edges[E:2E]`` the columns: ``edge_index`` as
    one ``[2, E]`` view) are packed into buffers of their own, sized by the
    hops' bounds, at offsets the device computes
    (``kernels.pack_prefixes``), with ``return_eid`` the edges' ids too
    (``eid``: their CSC positions, mapped through the graph's
    ``edge_perm`` where it has one, in the graph: ``kernels.edge_ids``
    over the packed prefix, its length read on the device), and every hop's
    sizes are copied to pinned host memory (``sizes_host``). What a replay
    leaves is then read after one wait on the replay's stream, with no
    launch: the batch's tensors are views (``outputs``). A replay overwrites
    them: the loader's ``ReplayedBatches`` (``tritongnn.loader.replay``)
    keeps a ring of these, one per batch in flight or held.

    On a CPU (tests, under Triton's interpreter) nothing is captured: each
    replay runs the same work eagerly into the same buffers.
    """

    def __init__(self, sampler, batch_size: int):
        self.node = self.edges = self.eid = self.sizes_host = None
        self._with_eid = sampler.return_eid
        super().__init__(sampler, batch_size)

    def _run(self):
        super()._run()
        hops, device = self.hops, self.device
        if self.node is None:  # the first (uncaptured) run: the hops' bounds size the buffers
            node_bound = self.seeds.numel() + sum(m.new_nodes.numel() for _, m in hops)
            edge_bound = sum(m.local.numel() for _, m in hops)
            # zeros: past a batch's nodes stay ids of earlier batches, in range
            # for every lookup that runs over the whole buffer
            self.node = torch.zeros(node_bound, dtype=torch.int64, device=device)
            self.edges = torch.empty(2 * edge_bound, dtype=torch.int64, device=device)
            if self._with_eid:
                self.eid = torch.empty(edge_bound, dtype=torch.int64, device=device)
            # (registered in place, not torch's caching host allocator: a
            # copy into its blocks records an event, which a capture refuses)
            self.sizes_host = pinned_empty((2 * len(hops),), torch.int64, device)
            self._num_seeds = torch.full((1,), self.seeds.numel(), dtype=torch.int64, device=device)
        self.num_nodes = pack_prefixes([self.seeds] + [m.new_nodes for _, m in hops],
                                       [self._num_seeds] + [m.num_new for _, m in hops], self.node)
        counts = [e.num_edges for e, _ in hops]
        self.num_edges = pack_prefixes([m.local for _, m in hops], counts, self.edges)
        pack_prefixes([e.dst for e, _ in hops], counts, self.edges, start=self.num_edges)
        if self.eid is not None:
            num_edges = pack_prefixes([e.eid for e, _ in hops], counts, self.eid)
            sampler = self._sampler()
            if sampler._edge_perm is not None:
                edge_ids(self.eid, sampler._edge_perm, sampler._hot_edge_perm, count=num_edges, out=self.eid)
        if hops:
            self.sizes_host.copy_(self.sizes, non_blocking=True)

    def outputs(self) -> tuple[SamplerOutput, torch.Tensor]:
        """The replayed batch as ``NeighborSampler.sample`` returns it, and
        its ``edge_index``: ``node``, ``row``, ``col`` and ``edge_index``
        views of this graph's buffers (valid until its next replay). Call
        once the replay's stream has run it (the sizes are read from
        ``sizes_host``)."""
        sizes = self.sizes_host.tolist()
        num_edges, num_new = sizes[0::2], sizes[1::2]
        num_seeds = self.seeds.numel()
        n, e = num_seeds + sum(num_new), sum(num_edges)
        edge_index = self.edges[:2 * e].view(2, e)
        out = SamplerOutput(node=self.node[:n], row=edge_index[0], col=edge_index[1],
                            edge=None if self.eid is None else self.eid[:e],
                            num_sampled_nodes=[num_seeds] + num_new, num_sampled_edges=num_edges)
        return out, edge_index
