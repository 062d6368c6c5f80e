"""Match-reorder: batches sharing most nodes follow each other; the same
batches, each seed once per epoch."""
import pytest
import torch

from tritongnn import NeighborLoader
from tritongnn.cache.reorder import MatchReorder

from test_cache_dynamic import skewed_data


def test_shared_counts_and_greedy_order():
    nodes = [torch.tensor([0, 1, 2, 3]), torch.tensor([7, 8]), torch.tensor([3, 2, 1, 9]),
             torch.tensor([8, 7, 6])]
    r = MatchReorder(10, 4, "cpu")
    shared = r.shared(nodes)
    expected = torch.tensor([[len(set(a.tolist()) & set(b.tolist())) for b in nodes] for a in nodes])
    assert torch.equal(shared, expected)
    # 0 -> 2 (shares 3 of its 4), then 2 -> 1 or 3 (none shared), ...
    order = r.order(nodes)
    assert order[:2] == [0, 2] and sorted(order) == [0, 1, 2, 3]
    assert order == [0, 2, 1, 3]  # after 1 (7, 8), batch 3 holds both
    s = r.as_dict()
    assert s["reorder_shared_rows_after"] == 3 + 0 + 2
    assert s["reorder_shared_rows_before"] == 0 + 0 + 0
    assert not r._mask.any()  # the masks are cleared for the next group
    # nodes of the static cache (0..3 here) do not count: batches 0 and 2 share none of the rest
    cached = MatchReorder(10, 4, "cpu", num_static=4).shared(nodes)
    assert cached[0, 2] == 0 and cached[2, 2] == 1 and cached[1, 3] == 2


def test_shared_counts_with_repeated_seeds_and_a_full_group():
    # a repeated seed is two rows of one node: its bit is set once (an add
    # carried into the next batch's bit), and each of its rows counts
    r = MatchReorder(10, 2, "cpu")
    assert r.shared([torch.tensor([1, 1, 2]), torch.tensor([1, 3])]).tolist() == [[3, 2], [1, 2]]
    assert r.order([torch.tensor([1, 1, 2]), torch.tensor([1, 3])]) == [0, 1]
    assert r.as_dict()["reorder_shared_rows_before"] == 1  # batch 1's row of node 1, which batch 0 holds
    # 63 batches (bits 0 .. 62), every one holding node 5 twice: no carry, no overflow
    full = MatchReorder(10, 63, "cpu")
    assert torch.equal(full.shared([torch.tensor([5, 5])] * 63), torch.full((63, 63), 2))


def test_bad_group():
    for group in (0, 64, 2.0, True):
        with pytest.raises(ValueError, match="reorder_group"):
            MatchReorder(10, group, "cpu")
    with pytest.raises(ValueError, match="reorder_group"):
        NeighborLoader(skewed_data(), [2], batch_size=8, reorder_group=100)


def test_loader_reorders_the_same_batches(device):
    data = skewed_data()
    args = dict(num_neighbors=[3, 2], batch_size=64, shuffle=True, seed=2, device=device,
                input_nodes=data.train_mask, placement="host")
    plain = list(NeighborLoader(data, **args))
    loader = NeighborLoader(data, reorder_group=4, reuse=True, **args)
    reordered = list(loader)
    key = lambda b: tuple(b.input_id.tolist())  # noqa: E731
    by_seeds = {key(b): b for b in plain}
    assert len(reordered) == len(plain) and set(map(key, reordered)) == set(by_seeds)
    for b in reordered:  # the same batch, only at another place in the epoch
        a = by_seeds[key(b)]
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)
    seeds = torch.cat([b.input_id for b in reordered])
    assert torch.equal(seeds.sort().values, data.train_mask.nonzero().flatten().to(seeds.device))  # a mask's node ids
    assert [key(b) for b in reordered] != [key(b) for b in plain]
    s = loader.stats
    assert s["reorder_match_after"] >= s["reorder_match_before"]
    assert s["reorder_shared_rows_after"] > s["reorder_shared_rows_before"]
    plain_reuse = NeighborLoader(data, reuse=True, **args)
    list(plain_reuse)
    assert s["reused_rows"] > plain_reuse.stats["reused_rows"]  # reordering feeds reuse
