"""Super-batching: K batches sampled in one pass are, bit for bit, the K
batches sampled one after another; the loader's super_batch changes no batch."""
import pytest
import torch

from tritongnn import CSCGraph, NeighborSampler

from test_loader import random_data

FIELDS = ("node", "row", "col", "edge", "num_sampled_nodes", "num_sampled_edges")


def assert_same_output(a, b):
    for key in FIELDS:
        x, y = getattr(a, key), getattr(b, key)
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x.cpu(), y.cpu()), key
        else:
            assert x == y, key


def split_seeds(num_nodes, sizes, device, seed=0):
    order = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))
    return [s.to(device) for s in order[:sum(sizes)].split(sizes)]


@pytest.mark.parametrize("num_neighbors, replace", [([4, 3], False), ([3, 0, 2], True), ([2, -1], False), ([], False)])
@pytest.mark.parametrize("num_batches", [1, 2, 3, 8])
def test_sample_many_is_each_batch_alone(device, num_batches, num_neighbors, replace):
    data = random_data()
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True).to(device)
    sampler = NeighborSampler(graph, num_neighbors, replace, device, return_eid=True)
    # full batches and a short last one; a node may be a seed of two sub-batches
    sizes = [13] * (num_batches - 1) + [5]
    seeds = split_seeds(data.num_nodes, sizes, device)
    if num_batches > 1:
        seeds[1][0] = seeds[0][0]
    one, many = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    alone = [sampler.sample(s, one) for s in seeds]
    together = sampler.sample_many(seeds, many)
    assert len(together) == num_batches
    for a, b in zip(alone, together):
        assert_same_output(a, b)
    # the stream moved on exactly as much: the next batch is the same too
    assert_same_output(sampler.sample(seeds[0], one), sampler.sample(seeds[0], many))


def test_sample_many_repeated_seeds_and_id_spaces(device):
    # The same seeds in every sub-batch: each sub-batch has its own local ids
    # (duplicates across sub-batches are separate nodes), a repeated seed
    # keeps its slot in n_id, as sampling the batch alone gives.
    data = random_data()
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes).to(device)
    sampler = NeighborSampler(graph, [5, 5], device=device)
    seeds = torch.tensor([7, 3, 7, 250, 3], device=device)
    outs = sampler.sample_many([seeds, seeds, seeds[:2]], torch.Generator().manual_seed(1))
    alone = NeighborSampler(graph, [5, 5], device=device).sample_many([seeds], torch.Generator().manual_seed(1))
    assert_same_output(outs[0], alone[0])
    for out in outs:
        assert torch.equal(out.node[:out.num_sampled_nodes[0]].cpu(), seeds[:out.num_sampled_nodes[0]].cpu())
        assert int(out.row.max()) < out.node.numel() and int(out.col.max()) < out.node.numel()
        assert out.node[out.num_sampled_nodes[0]:].unique().numel() == out.node.numel() - out.num_sampled_nodes[0]


def test_sample_many_bad_arguments():
    graph = CSCGraph.from_edge_index(random_data().edge_index, 300)
    sampler = NeighborSampler(graph, [2], device="cpu")
    with pytest.raises(TypeError, match="seeds_list"):
        sampler.sample_many(torch.arange(4))
    with pytest.raises(ValueError, match="empty"):
        sampler.sample_many([])
    with pytest.raises(TypeError, match=r"seeds_list\[1\]"):
        sampler.sample_many([torch.arange(3), torch.arange(3, dtype=torch.int32)])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("placement", ["device", "host"])
def test_super_batch_cuda_graph_replay_matches_eager(placement):
    # Captured super-batches (one graph per (K, total seeds)) replay the very
    # batches of eager single-batch sampling, super-batch after super-batch,
    # for a full and a short last super-batch.
    data = random_data(num_nodes=20_000, num_edges=400_000)
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True).to("cuda")
    graph = graph.pin_memory() if placement == "host" else graph
    seeds = torch.randperm(20_000, generator=torch.Generator().manual_seed(0)).to("cuda")[:10 * 256 + 100]
    batches = list(seeds.split(256))
    eager = NeighborSampler(graph, [6, 4, 3], device="cuda", return_eid=True, cuda_graph=False)
    gen = torch.Generator().manual_seed(3)
    want = [eager.sample(b, gen) for b in batches]
    sampler = NeighborSampler(graph, [6, 4, 3], device="cuda", return_eid=True, cuda_graph=True)
    gen = torch.Generator().manual_seed(3)
    got = []
    for first in range(0, len(batches), 4):
        got += sampler.sample_many(batches[first:first + 4], gen)
    assert sampler._captured[(4, 1024)] is not None and sampler._captured[(3, 612)] is not None
    for a, b in zip(want, got):
        assert_same_output(a, b)
