"""PyG's ``disjoint=True``: every seed of a batch samples a subgraph of its own.

Nodes are keyed by (seed slot, node): a node reached from two seeds is two
nodes, a seed given twice is two subgraphs. PyG 2.8 samples it with
pyg-lib's ``neighbor_sample(disjoint=True)``; its layout, which this module
gives, is that of one batch over all the seeds:

- ``node`` (``n_id``): the B seeds in their order (repeats kept), then each
  hop's new nodes, hop by hop; within a hop, seed slot by seed slot, each
  slot's in the order its frontier meets them (pyg-lib walks the frontier
  in order, and a hop's frontier is grouped by slot because the one before
  was);
- ``batch``: the seed slot (``0 .. B - 1``) of every node;
- ``row`` / ``col``: local ids into ``node`` of each sampled edge's
  neighbour and of the node it was sampled for, hop by hop, grouped by
  target in frontier order; an edge never joins two slots;
- ``num_sampled_nodes`` (``[B, new nodes of hop 1, ...]``) and
  ``num_sampled_edges`` per hop, over all slots.

``NeighborSampler(disjoint=True)`` runs a batch as a super-batch of B
sub-batches of one seed each (``sampling.sampler``'s docstring): the same
launches, caches and UVA reads, one classification, sampling launch and
id-map insert a hop for all B. The id map keeps the keys per sub-batch but
numbers them hop-major over all of them (``kernels.id_map``, ``hop_major``),
so the hop buffers already are the layout above and a batch is sliced out
as a single batch is; the last hop's map also returns each new node's
sub-batch, the ``batch`` of its nodes. Each slot draws from its own Philox
stream: the hop's seed with the slot in its upper 32 bits (``seed_slots``),
so a batch draws L numbers from the generator, as a batch of another
sampler does. During a hop the sampler's ``frontier_batch`` is each
frontier node's seed slot (``NeighborSampler._hops``): where sampling
depends on the seed (a seed's time), that is where it is read.

``sample_many`` samples a disjoint sampler's batches one after another
(each is already B sub-batches in one pass); link-level disjoint batches
(PyG's ``edge_sample``) are ``sample`` of the endpoints, each its own
seed; ``sample_endpoints`` (which deduplicates them) raises.

As in PyG: ``subgraph_type="induced"`` is refused (PyG routes it to
torch-sparse, which has no disjoint sampling); ``"bidirectional"`` adds the
reverses of the sampled edges, which stay within a slot.
"""
from __future__ import annotations

import torch
from torch_geometric.sampler import SamplerOutput

from ..kernels._launch import host_list
from .captured import hop_sizes
from .outputs import batch_output

SLOT_SHIFT = 32  # a slot's Philox key: the hop's seed (< 2^31) | slot << SLOT_SHIFT


def check_disjoint(disjoint, subgraph_type: str) -> bool:
    """``disjoint`` as a bool: TypeError for another type, ValueError with
    ``subgraph_type="induced"`` (as PyG 2.8's sampler)."""
    if not isinstance(disjoint, bool):
        raise TypeError(f"disjoint must be a bool, got {type(disjoint).__name__} {disjoint!r}")
    if disjoint and subgraph_type == "induced":
        raise ValueError("disjoint=True is not supported with subgraph_type='induced' (nor directed=False), "
                         "as in PyG: take subgraph_type='directional' or 'bidirectional'")
    return disjoint


def disjoint_method(method: str, indices: torch.Tensor, hot_indices: torch.Tensor | None) -> str:
    """The sampling kernels of a disjoint sampler: ``method``, but
    ``"foundation"`` for ``"fused"`` and for ``"auto"`` where it would fuse
    (every row in GPU memory: ``kernels.sample.auto_method``). The fused
    kernel writes each sub-batch's ``edge_ptr`` from a ``[K + 1, block]``
    tile in every program: with K = B sub-batches (thousands) that tile
    passes what a program holds. Every method draws the same edges."""
    if method == "fused" or (method == "auto" and indices.is_cuda and hot_indices is None):
        return "foundation"
    return method


def disjoint_capacity(per_seed_bound: int, batch_size: int) -> int:
    """Keys a disjoint batch's id map is first sized for: every seed's
    subgraph bounded on its own (the sampler's node bound of one seed)."""
    return max(1, per_seed_bound * batch_size)


def seed_slots(rng: torch.Tensor, num_slots: int) -> torch.Tensor:
    """``[L, num_slots]`` Philox seeds of the hops' slots from the ``[L, 1]``
    seeds of the hops: slot ``k`` of hop ``h`` keys ``rng[h] | k << 32``, a
    key no other (hop seed, slot) pair has. On the device, without a sync
    (inside a captured graph too)."""
    slots = torch.arange(num_slots, dtype=torch.int64, device=rng.device) << SLOT_SHIFT
    return rng[:, :1] + slots[None, :]


def disjoint_output(seeds: torch.Tensor, hops, sizes: list[int], device, return_eid: bool,
                    edge_perm: torch.Tensor | None, hot_edge_perm: torch.Tensor | None = None) -> SamplerOutput:
    """A disjoint batch's ``SamplerOutput`` (module docstring) from its hops'
    buffers, ``sizes`` being the host's copy of ``captured.hop_sizes``: the
    single-batch layout, and ``batch`` from each hop's ``new_batch`` (all 0
    where the map had one sub-batch: a batch of one seed)."""
    out = batch_output(seeds, hops, sizes, device, return_eid, edge_perm, hot_edge_perm)
    parts = [torch.arange(seeds.numel(), dtype=torch.int64, device=device)]
    for (_, mapped), num_new in zip(hops, sizes[1::2]):
        if mapped.new_batch is None:
            parts.append(torch.zeros(num_new, dtype=torch.int64, device=device))
        else:
            parts.append(mapped.new_batch[:num_new])
    out.batch = torch.cat(parts)
    return out


def sample_disjoint(sampler, seeds: torch.Tensor, rng, generator, seed_time=None) -> SamplerOutput:
    """``NeighborSampler.sample`` of a disjoint sampler: its seeds as B
    sub-batches of one (one, empty, for no seed), replayed from a CUDA graph
    per B where one is captured (``CapturedHops``), else run eagerly. A
    temporal batch (``seed_time``, the seeds' times) runs eagerly: a
    captured graph takes no times as inputs."""
    num_seeds = seeds.numel()
    num_slots = max(num_seeds, 1)
    captured = sampler._replayable(num_seeds, num_slots) \
        if sampler.cuda_graph and num_seeds and seed_time is None else None
    if captured is not None:
        hops, sizes = captured.replay(seeds, rng, torch.arange(num_slots + 1))
    else:
        batch_ptr = torch.arange(num_slots + 1, device=sampler.device).clamp_(max=num_seeds)
        seeds_batch = torch.arange(num_seeds, device=sampler.device)
        id_map = sampler._map_for(disjoint_capacity(sampler._node_bound(1), num_seeds), num_slots)
        hops = sampler._hops(seeds, sampler._rng_on_device(rng), generator, id_map, seeds_batch, batch_ptr,
                             seed_time=seed_time)
        sizes = hop_sizes(hops) if hops else None
    sizes = host_list(sizes) if hops else []  # the one sync of the batch
    return disjoint_output(seeds, hops, sizes, sampler.device, sampler.return_eid, sampler._edge_perm,
                           sampler._hot_edge_perm)
