"""Full-link offline access profiling (GARDEN section IV-B, eq. 4): a few
pre-sampling epochs of the real sampler over the training seeds, counted
per node into a ``cache.profile.AccessProfile`` (the weights and what each
count means are in that module's docstring)."""
from __future__ import annotations

import time

import torch

from .._checks import check_positive_int
from ..cache.profile import AccessProfile, depth_weights, lists_read
from .sampler import NeighborSampler


def profile_accesses(sampler: NeighborSampler, input_nodes: torch.Tensor, batch_size: int,
                     epochs: int = 3, layer_weights=None,
                     generator: torch.Generator | None = None) -> AccessProfile:
    """Run ``epochs`` pre-sampling epochs of ``sampler`` over shuffled
    ``input_nodes`` and count accesses (``cache.profile``'s docstring).

    Args:
        sampler: the sampler training will use (same graph, fanouts, device).
        input_nodes: ``[S]`` int64 training seeds, on the sampler's device.
        batch_size: seeds per batch, as in training.
        epochs: pre-sampling epochs (GARDEN uses a few; default 3).
        layer_weights: ``w_1 .. w_L`` of eq. (4), default all 1.
        generator: CPU generator for the shuffles and the sampling.

    Returns:
        ``AccessProfile`` with counts on the sampler's device.
    """
    check_positive_int("epochs", epochs)
    check_positive_int("batch_size", batch_size)
    num_layers = len(sampler.num_neighbors)
    layer_weights = [1.0] * num_layers if layer_weights is None else [float(w) for w in layer_weights]
    weights = depth_weights(num_layers, layer_weights)
    device = sampler.device
    num_nodes = sampler.graph.num_nodes
    feature = torch.zeros(num_nodes, dtype=torch.float64, device=device)
    adjacency = torch.zeros(num_nodes, dtype=torch.int64, device=device)
    inputs = torch.zeros(num_nodes, dtype=torch.int64, device=device)
    weights_dev = weights.to(device)
    start, num_batches = time.perf_counter(), 0
    for _ in range(epochs):
        order = torch.randperm(input_nodes.numel(), generator=generator).to(input_nodes.device)
        for seeds in input_nodes[order].split(batch_size):
            out = sampler.sample(seeds, generator)
            sizes = torch.tensor(out.num_sampled_nodes, device=device)
            depth = torch.repeat_interleave(torch.arange(num_layers + 1, device=device), sizes,
                                            output_size=out.node.numel())
            feature.index_add_(0, out.node, weights_dev[depth])
            inputs.index_add_(0, out.node, torch.ones_like(out.node))
            expanded = out.node[:lists_read(out.num_sampled_nodes)]
            adjacency.index_add_(0, expanded, torch.ones_like(expanded))
            num_batches += 1
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return AccessProfile(feature, inputs, adjacency, epochs, num_batches, time.perf_counter() - start,
                         list(sampler.num_neighbors), layer_weights)
