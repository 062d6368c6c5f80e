"""Full-link access profiling: counts equal a brute-force count over the same batches."""
import pytest
import torch

from tritongnn import CSCGraph, NeighborSampler
from tritongnn.cache import AccessProfile, depth_weights
from tritongnn.sampling import profile_accesses
from tritongnn.kernels._launch import reference_on_cpu


def small_graph(num_nodes=60, num_edges=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.stack([torch.randint(0, num_nodes, (num_edges,), generator=g),
                              (torch.rand(num_edges, generator=g) ** 2 * num_nodes).long()])
    return CSCGraph.from_edge_index(edge_index, num_nodes)


def brute_force(batches, num_nodes, layer_weights):
    """Eq. (4) and neighbour-list reads from the layer sets of each batch."""
    feature = torch.zeros(num_nodes, dtype=torch.float64)
    adjacency = torch.zeros(num_nodes, dtype=torch.int64)
    inputs = torch.zeros(num_nodes, dtype=torch.int64)
    num_layers = len(layer_weights)
    for out in batches:
        ends = torch.tensor(out.num_sampled_nodes).cumsum(0).tolist()
        layer = [set(out.node[:end].tolist()) for end in ends]  # V_0 .. V_L
        for v in range(num_nodes):
            w = float(v in layer[num_layers])  # V_in = V_L
            for ell in range(1, num_layers + 1):
                w += layer_weights[ell - 1] * (v in layer[ell]) + (v in layer[ell - 1])
            feature[v] += w
            inputs[v] += v in layer[num_layers]
        # lists read: the frontier of each hop = the new nodes of the hop before
        starts = [0] + ends[:-1]
        for ell in range(num_layers):
            for v in out.node[starts[ell]:ends[ell]].tolist():
                adjacency[v] += 1
    return feature, inputs, adjacency


@pytest.mark.parametrize("num_neighbors,layer_weights", [([3, 2], None), ([4, 2, 2], [0.5, 1.0, 2.0]),
                                                          ([-1], None), ([2], [3.0])])
def test_profile_matches_brute_force(num_neighbors, layer_weights):
    graph = small_graph()
    seeds = torch.arange(0, 60, 2)
    with reference_on_cpu():
        sampler = NeighborSampler(graph, num_neighbors, device="cpu")
        profile = profile_accesses(sampler, seeds, batch_size=7, epochs=2, layer_weights=layer_weights,
                                   generator=torch.Generator().manual_seed(1))
        # the same batches again, from the same random stream
        gen = torch.Generator().manual_seed(1)
        batches = []
        for _ in range(2):
            order = torch.randperm(seeds.numel(), generator=gen)
            batches += [sampler.sample(b, gen) for b in seeds[order].split(7)]
    weights = layer_weights or [1.0] * len(num_neighbors)
    feature, inputs, adjacency = brute_force(batches, 60, weights)
    assert profile.num_batches == len(batches) == 2 * 5
    assert torch.allclose(profile.feature, feature)
    assert torch.equal(profile.adjacency, adjacency)
    assert torch.equal(profile.inputs, inputs)
    assert profile.seconds >= 0 and profile.layer_weights == weights


def test_depth_weights():
    # L = 2, w = (1, 1): a seed is an input, a source of both layers and a
    # destination of both; a node of hop 2 only an input and a source of layer 2.
    assert depth_weights(2).tolist() == [5.0, 4.0, 2.0]
    assert depth_weights(2, [0.5, 2.0]).tolist() == [1 + 2.5 + 2, 1 + 2.5 + 1, 1 + 2.0]
    with pytest.raises(ValueError, match="one per hop"):
        depth_weights(2, [1.0])
    with pytest.raises(ValueError, match=">= 0"):
        depth_weights(1, [-1.0])


def test_profile_save_load(tmp_path):
    graph = small_graph()
    with reference_on_cpu():
        profile = profile_accesses(NeighborSampler(graph, [3, 2], device="cpu"), torch.arange(20), 8,
                                   epochs=1, generator=torch.Generator().manual_seed(0))
    path = tmp_path / "profile.pt"
    profile.save(path)
    again = AccessProfile.load(path, num_nodes=60, num_neighbors=[3, 2])
    assert torch.equal(again.inputs, profile.inputs)
    assert torch.equal(again.feature, profile.feature) and torch.equal(again.adjacency, profile.adjacency)
    assert (again.epochs, again.num_batches, again.num_neighbors) == (1, 3, [3, 2])
    with pytest.raises(ValueError, match="counts 60 nodes"):
        AccessProfile.load(path, num_nodes=61)
    with pytest.raises(ValueError, match="num_neighbors"):
        AccessProfile.load(path, num_neighbors=[5])
    torch.save({"x": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a saved AccessProfile"):
        AccessProfile.load(tmp_path / "other.pt")


@pytest.mark.parametrize("kwargs,match", [(dict(epochs=0), "epochs"), (dict(epochs=1.5), "epochs"),
                                          (dict(batch_size=0), "batch_size")])
def test_profile_bad_arguments(kwargs, match):
    sampler = NeighborSampler(small_graph(), [2], device="cpu")
    args = dict(batch_size=4, epochs=1) | kwargs
    with pytest.raises(ValueError, match=match):
        profile_accesses(sampler, torch.arange(8), **args)
