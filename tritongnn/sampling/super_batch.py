"""Super-batching (GARDEN's super-batch degree classifier) of ``NeighborSampler``:
``sample_many`` samples K batches in one pass. Their seeds are laid end to end with a
sub-batch id per node (``seeds_batch``, ``batch_ptr``); each hop is one
classification pass (``kernels.classify``, three small launches), one
sampling launch (``kernels.sample``) and one id-map insert (its three
passes; keys ``sub_batch * N + node``: each sub-batch keeps its own ids, a
node in two sub-batches is two nodes) for all K, as for a single batch.
The per-hop Philox seeds are drawn per sub-batch exactly as ``sample``
draws them for consecutive batches, and a node's draws are keyed by its
position within its sub-batch, so every sub-batch comes out bit for bit as
``sample`` gives it alone. The host reads every hop's boundaries per
sub-batch in one sync per super-batch; ``sampling.outputs`` slices the K
``SamplerOutput``s out of the hops' buffers.
What is saved is per-launch cost: K batches take the launches and host
decisions of one, with K times the work per launch. What it costs is
memory: buffers and the id map are sized for K batches at once.
Super-batches are captured into CUDA graphs too, one per (K, total seeds).
On the H200 a replayed batch of 8000 seeds on a 5x10^7-node graph takes
about 0.57 ms of GPU time at any K (the id map's passes are most of it, and
their work is per candidate), so what replaying K at once saves is K = 1's
host share (0.08-0.32 ms a batch, with the host's speed): K = 8 samples
1.03-1.51x as fast as K = 1 there, 1.24-1.79x at batches of 1024-4000 seeds
(less GPU work to hide that share), and 1.36-2.84x on cnr2000, whose
batches overlap and leave the GPU idle more (bench/results/README.md). The
replay is most of what super-batching gives: with ``cuda_graph=False``
K = 1 takes 2.3-3.1 ms a batch there and K = 8 is 2.2-3.4x as fast. Where
rows cross PCIe the K frontiers, read in node-id order together, touch each
host page more densely: 1.43-1.48x through UVA, 1.38-1.71x with the
adjacency cache holding a quarter to half of the edges (1.14-1.28x with
three quarters or more, most reads then served).

``SuperBatches`` holds the two methods; ``NeighborSampler`` takes them as
a mixin (its ``_hops``, id maps and captured graphs do the work).
"""
from __future__ import annotations

import torch
from torch_geometric.sampler import SamplerOutput

from ..kernels._launch import check_ids_in_range, host_list, on_device_of, use_triton
from ..kernels.id_map import direct_fits
from .captured import hop_bounds, sub_batch_of
from .outputs import super_batch_outputs


class SuperBatches:
    """``NeighborSampler.sample_many`` and its pass size (module docstring)."""

    def _super_batch_step(self, num_batches: int) -> int:
        """Sub-batches ``sample_many`` maps in one pass: all K where their
        K x num_nodes words fit a direct id map (``id_map.direct_fits``), else
        the most that do, the K batches going as consecutive super-batches
        of that many. A hash map's insert takes ~5x the direct table's time
        (H200, 5x10^7 nodes: a super-batch of 16 on a hash map sampled at
        2.13-2.30 ms a batch, one of 8 on a direct table at 0.97-1.08 ms).
        Where not even one batch's words fit, every map is a hash map, and
        the K go in one pass."""
        num_nodes = self.graph.num_nodes
        if direct_fits(num_nodes, num_batches) or not direct_fits(num_nodes, 1):
            return num_batches
        step = 1
        while direct_fits(num_nodes, step + 1):
            step += 1
        return step

    @on_device_of("self")
    def sample_many(self, seeds_list, generator: torch.Generator | None = None,
                    validate: bool = True) -> list[SamplerOutput]:
        """Sample K batches in one pass (a super-batch); the same outputs, bit
        for bit, as ``[self.sample(seeds, generator) for seeds in seeds_list]``,
        and the generator ends in the same state.

        Args:
            seeds_list: K tensors of seeds (``[B_k]`` int64 on ``device``,
                ids in range; sizes may differ, e.g. a short last batch).
            generator: the CPU ``torch.Generator`` the per-hop seeds come from.
            validate: check the ids' range (one host sync), as ``sample``.

        Returns:
            K ``SamplerOutput``s, each in the contract of ``sample``. Past
            what a direct id map holds, the K go in consecutive passes of
            fewer (``_super_batch_step``), with the same outputs. On the
            GPU (and under Triton's interpreter) a pass's outputs are
            disjoint views of one node and one edge buffer: writing into
            one batch's tensors leaves the others as they are, and the
            buffers are freed once every batch of the pass is.

        Example:
            >>> outs = sampler.sample_many(list(seeds.split(8000))[:8], torch.Generator().manual_seed(0))
            >>> outs[3].node          # n_id of the fourth batch
        """
        if not isinstance(seeds_list, (list, tuple)):
            raise TypeError(f"seeds_list must be a list of seed tensors, got {type(seeds_list).__name__}")
        if not seeds_list:
            raise ValueError("seeds_list is empty: give at least one batch of seeds")
        for k, seeds in enumerate(seeds_list):
            self._check_seeds(seeds, f"seeds_list[{k}]")
        num_batches = len(seeds_list)
        sizes = [seeds.numel() for seeds in seeds_list]
        total = sum(sizes)
        if validate and total:
            check_ids_in_range(torch.cat(list(seeds_list)), self.graph.num_nodes, "seeds_list")
        if num_batches == 1 or total == 0 or not use_triton(self.device) or self.disjoint:
            # the CPU path's reference draws every number from the generator in turn
            return [self.sample(seeds, generator, validate=False) for seeds in seeds_list]
        step = self._super_batch_step(num_batches)
        if step < num_batches:  # consecutive super-batches draw the same numbers in the same order
            return [out for first in range(0, num_batches, step)
                    for out in self.sample_many(list(seeds_list[first:first + step]), generator, validate=False)]

        rng = self.draw_rng(generator, num_batches)
        ptr = torch.tensor([0] + sizes, dtype=torch.int64).cumsum(0)
        captured = self._replayable(total, num_batches) if self.cuda_graph else None
        if captured is not None:
            hops, bounds = captured.replay(seeds_list, rng, ptr)
            seeds = captured.seeds
        else:
            seeds = torch.cat(list(seeds_list))
            batch_ptr = ptr.to(self.device)
            seeds_batch = sub_batch_of(batch_ptr, torch.arange(total, device=self.device))
            id_map = self._map_for(sum(self._node_bound(b) for b in sizes), num_batches)
            hops = self._hops(seeds, self._rng_on_device(rng), generator, id_map, seeds_batch, batch_ptr)
            bounds = hop_bounds(hops, num_batches) if hops else None

        # The one sync of the super-batch: how many edges and new nodes each
        # sub-batch has in every hop.
        bounds = host_list(bounds) if hops else []
        outs = super_batch_outputs(seeds, hops, bounds, sizes, self.device, self.return_eid, self._edge_perm,
                                   self._hot_edge_perm)
        return [self._subgraph(out) for out in outs]
