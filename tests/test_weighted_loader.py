"""NeighborLoader(weight_attr=...): PyG's batch contract with weighted
sampling, with and without the dual cache, reproducibility, bad weights."""
import numpy as np
import pytest
import torch

from test_loader import check_batch, random_data
from tritongnn import NeighborLoader


def weighted_data(zeros=0.2, seed=0):
    data = random_data(edge_attr=True, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    weight = torch.rand(data.num_edges, generator=g) + 1e-3
    data.edge_weight = torch.where(torch.rand(data.num_edges, generator=g) < zeros, 0.0, weight)
    return data


def epoch(data, **kwargs):
    args = dict(num_neighbors=[4, 3], batch_size=60, shuffle=True, seed=5, input_nodes=data.train_mask,
                weight_attr="edge_weight")
    args.update(kwargs)
    return [b for b in NeighborLoader(data, **args)]


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("cache", [False, True])
def test_weighted_batches_keep_the_contract(device, replace, cache):
    # every edge exists (e_id names it), the weights are sliced by e_id like
    # any edge attribute, and with replacement no zero weight is drawn; with
    # the dual cache (hot-first relabelled graph, weights relabelled with it)
    # the batches are those of the loader without it
    data = weighted_data(zeros=0.0 if replace else 0.2)
    cached = dict(placement="host", profile_epochs=1, cache_budget=40 * 48) if cache else {}
    batches = epoch(data, device=device, replace=replace, **cached)
    input_nodes = data.train_mask.nonzero().flatten().to(device)
    for batch in batches:
        check_batch(batch, data.to(device), input_nodes, [4, 3], replace, mask=True)
        assert torch.equal(batch.edge_weight, data.edge_weight.to(device)[batch.e_id])
    if cache:
        plain = epoch(data, device=device, replace=replace)
        for a, b in zip(plain, batches, strict=True):
            for key in ("n_id", "edge_index", "e_id", "edge_weight"):
                assert torch.equal(a[key], b[key]), key


def test_zero_weights_as_pyg_takes_them(device):
    # a zero weight is drawn only where a node has no more positive weights
    # than the fanout (degree <= fanout: the whole row, as pyg-lib)
    data = weighted_data(zeros=0.5)
    fanout = 4
    for batch in epoch(data, device=device, num_neighbors=[fanout]):
        col, w = batch.edge_index[1], batch.edge_weight
        target = batch.n_id[col]
        positive = torch.zeros(data.num_nodes, dtype=torch.int64, device=device).index_add_(
            0, data.edge_index[1].to(device), (data.edge_weight.to(device) > 0).long())
        zero_taken = torch.zeros(data.num_nodes, dtype=torch.int64, device=device).index_add_(
            0, target, (w == 0).long())
        assert bool((zero_taken[positive >= fanout] == 0).all())


def test_weighted_sampling_prefers_heavy_edges():
    # one node with 40 in-edges, half of them 50x heavier: with fanout 4 the
    # heavy half takes nearly every pick (uniform sampling would take half)
    from torch_geometric.data import Data
    src = torch.arange(1, 41)
    data = Data(x=torch.randn(41, 2), edge_index=torch.stack([src, torch.zeros(40, dtype=torch.int64)]),
                num_nodes=41)
    data.edge_weight = torch.where(src % 2 == 0, 50.0, 1.0)
    heavy = total = 0
    for seed in range(20):
        batch = next(iter(NeighborLoader(data, [4], input_nodes=torch.zeros(16, dtype=torch.int64),
                                         batch_size=16, weight_attr="edge_weight", seed=seed, device="cpu")))
        heavy += int((batch.edge_weight == 50).sum())
        total += batch.edge_weight.numel()
    assert total == 20 * 16 * 4 and heavy / total > 0.9


def test_same_seed_same_weighted_batches(device):
    data = weighted_data()
    first, again, other = epoch(data, device=device), epoch(data, device=device), epoch(data, device=device, seed=6)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.e_id, b.e_id)
    assert any(a.e_id.numel() != b.e_id.numel() or not torch.equal(a.e_id, b.e_id) for a, b in zip(first, other))


def test_weights_as_numpy_and_float64_unmodified():
    data = weighted_data()
    weight = data.edge_weight.double()
    data.edge_weight = weight.numpy().copy()
    before = data.edge_weight.copy()
    batch = epoch(data, device="cpu")[0]
    assert np.array_equal(data.edge_weight, before)
    assert torch.equal(batch.edge_weight, torch.from_numpy(before)[batch.e_id])


def with_weight(value):
    data = random_data()
    data.w = value
    return data


E = 3000
BAD = [
    ("missing", random_data(), "missing", ValueError, "weight_attr='missing' is not an attribute of data"),
    ("not a str", random_data(), 3, TypeError, "weight_attr must be the name"),
    ("node attribute", random_data(), "train_mask", ValueError, "must be an edge attribute of shape"),
    ("2-D", with_weight(torch.ones(E, 1)), "w", ValueError, r"shape \[3000\].*got shape \(3000, 1\)"),
    ("a list", with_weight([1.0] * E), "w", ValueError, "data.w is a list of 3000 entries"),
    ("integers", with_weight(torch.ones(E, dtype=torch.int64)), "w", TypeError, "floating-point weights"),
    ("negative", with_weight(torch.ones(E).index_fill(0, torch.tensor([17]), -0.5)), "w", ValueError,
     r"data.w\[17\] = -0.5"),
    ("NaN", with_weight(torch.ones(E).index_fill(0, torch.tensor([3]), float("nan"))), "w", ValueError,
     r"data.w\[3\] = nan"),
    ("inf", with_weight(torch.ones(E).index_fill(0, torch.tensor([4]), float("inf"))), "w", ValueError,
     r"finite.*data.w\[4\] = inf"),
    ("past float32", with_weight(torch.ones(E, dtype=torch.float64).index_fill(0, torch.tensor([5]), 1e300)),
     "w", ValueError, r"data.w\[5\]"),
]


@pytest.mark.parametrize("name, data, weight_attr, error, match", BAD, ids=[b[0] for b in BAD])
def test_bad_weight_attr(name, data, weight_attr, error, match):
    with pytest.raises(error, match=match):
        NeighborLoader(data, [3, 2], batch_size=8, weight_attr=weight_attr, device="cpu")


def test_zero_total_weight_refused_with_replacement_only():
    data = random_data()
    node = int(data.edge_index[1, 0])
    data.w = torch.where(data.edge_index[1] == node, 0.0, 1.0)
    with pytest.raises(ValueError, match=f"replace=True: node {node}'s in-edges all have weight 0"):
        NeighborLoader(data, [3], batch_size=8, weight_attr="w", replace=True, device="cpu")
    NeighborLoader(data, [3], batch_size=8, weight_attr="w", device="cpu")  # without: PyG samples it
