"""Weighted neighbour sampling (``sample_neighbors(edge_weight=...)``):
invariants, PyG's zero-weight rules, distributions against the weights and
against the torch reference, reproducibility, tiers, super-batches, bad input."""
import pytest
import torch
from hypothesis import given, strategies as st

from graphs import csc_from_degrees, graphs
from test_sample import chi_square, chi_square_critical
from tritongnn.kernels import reference, sample_neighbors
from tritongnn.kernels._launch import INTERPRET

FANOUTS = st.sampled_from([-1, 0, 1, 2, 5, 13, 40])


def random_weights(num_edges, seed, zeros=0.3):
    """Weights in (0, 1] with a share of exact zeros."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.rand(num_edges, generator=g) + 1e-3
    return torch.where(torch.rand(num_edges, generator=g) < zeros, 0.0, weight).float()


def run(graph, weight, frontier, fanout, replace, device, seed=0, slack=7, arrays=None, **kwargs):
    """One hop on ``device`` with ``slack`` garbage frontier slots (an unmasked
    read of them crashes or shows as a wrong edge), over ``graph``'s arrays or
    ``arrays`` (indptr, indices); ``(src, dst, eid)``."""
    n = frontier.numel()
    padded = torch.cat([frontier, torch.full((slack,), 10**12)]).to(device)
    indptr, indices = arrays or (graph.indptr, graph.indices)
    hop = sample_neighbors(indptr.to(device), indices.to(device), padded,
                           torch.arange(n + slack, device=device) + 100, torch.tensor([n], device=device), fanout,
                           replace, torch.Generator().manual_seed(seed), return_eid=True,
                           edge_weight=weight.to(device), **kwargs)
    e = int(hop.num_edges)
    return hop.src[:e].cpu(), hop.dst[:e].cpu() - 100, hop.eid[:e].cpu()


def check_hop(graph, weight, frontier, fanout, replace, src, dst, eid):
    degree = graph.degree()[frontier]
    count = reference.sample_counts(degree, fanout, replace)
    # grouped by target in frontier order, as many as uniform sampling takes (PyG's counts)
    assert torch.equal(dst, torch.repeat_interleave(torch.arange(frontier.numel()), count))
    target = frontier[dst]
    assert bool(((eid >= graph.indptr[target]) & (eid < graph.indptr[target + 1])).all())
    assert torch.equal(src, graph.indices[eid].to(torch.int64))
    positive = torch.zeros(graph.num_nodes, dtype=torch.int64).index_add_(
        0, torch.repeat_interleave(torch.arange(graph.num_nodes), graph.degree()), (weight > 0).long())[frontier]
    if fanout == -1:  # every neighbour, weights unread
        assert torch.equal(eid, torch.cat([torch.arange(graph.indptr[v], graph.indptr[v + 1])
                                           for v in frontier.tolist()]))
        return
    if replace:  # a zero weight is never drawn where the row has a positive one
        assert bool((weight[eid] > 0)[positive[dst] > 0].all())
        return
    assert (dst * graph.num_edges + eid).unique().numel() == eid.numel()  # no position twice for a node
    full = degree <= fanout
    whole = torch.repeat_interleave(full, count)
    # degree <= fanout: the whole row in order, zero weights included (pyg-lib's full neighbourhood)
    expect = torch.cat([torch.arange(graph.indptr[v], graph.indptr[v + 1]) for v in frontier[full].tolist()]
                       or [torch.empty(0, dtype=torch.int64)])
    assert torch.equal(eid[whole], expect)
    # past it, zero weights only fill what the positive ones cannot: every positive one is taken first
    taken = torch.zeros(frontier.numel(), dtype=torch.int64).index_add_(0, dst, (weight[eid] > 0).long())
    assert torch.equal(taken[~full], torch.minimum(positive[~full], torch.tensor(fanout)))


@given(graph=graphs(), fanout=FANOUTS, replace=st.booleans(), data=st.data())
def test_weighted_invariants(device, graph, fanout, replace, data):
    n = data.draw(st.integers(1, 2 * graph.num_nodes))
    weight = random_weights(graph.num_edges, n, zeros=data.draw(st.sampled_from([0.0, 0.3, 0.9])))
    frontier = torch.randint(0, graph.num_nodes, (n,), generator=torch.Generator().manual_seed(n))
    check_hop(graph, weight, frontier, fanout, replace, *run(graph, weight, frontier, fanout, replace, device))
    # the torch reference (the CPU path without the interpreter) keeps the same contract
    hop = reference.sample_weighted(graph.indptr, graph.indices, weight, frontier, torch.arange(n),
                                    torch.tensor([n]), fanout, replace, torch.Generator().manual_seed(1), True)
    check_hop(graph, weight, frontier, fanout, replace, hop.src, hop.dst, hop.eid)


HUB_WEIGHTS = torch.cat([torch.zeros(5), torch.arange(1, 76, dtype=torch.float32) ** 1.5])[torch.randperm(
    80, generator=torch.Generator().manual_seed(9))]  # 80 positions: 5 zero weights, the rest spread 1..650


def hub(device, fanout, replace, draws, seed=3):
    graph = csc_from_degrees([HUB_WEIGHTS.numel()], 1, torch.Generator().manual_seed(0))
    return run(graph, HUB_WEIGHTS, torch.zeros(draws, dtype=torch.int64), fanout, replace, device, seed=seed)[2]


def assert_follows_weights(eid, draws):
    positive = HUB_WEIGHTS > 0
    observed = torch.bincount(eid, minlength=HUB_WEIGHTS.numel()).double()
    assert observed[~positive].sum() == 0  # a zero weight never drawn
    expected = draws * HUB_WEIGHTS.double() / HUB_WEIGHTS.sum()
    df = int(positive.sum()) - 1
    assert chi_square(observed[positive], expected[positive]) < chi_square_critical(df)


@pytest.mark.parametrize("fanout", [1, 7, 40])  # 40: past the padded tile of 32
def test_with_replacement_draws_follow_the_weights(device, fanout):
    draws = 3000 // fanout + 1
    eid = hub(device, fanout, True, draws)
    assert eid.numel() == draws * fanout
    assert_follows_weights(eid, draws * fanout)


def test_single_pick_without_replacement_follows_the_weights(device):
    # fanout 1 without replacement: the first pick of successive sampling, w_i / W
    eid = hub(device, 1, False, 3000)
    assert eid.numel() == 3000
    assert_follows_weights(eid, 3000)


def two_sample_chi_square(a, b):
    """Statistic of two count vectors drawn from one distribution (equal totals)."""
    m = (a + b) > 0
    return float(((a - b)[m] ** 2 / (a + b)[m]).sum()), int(m.sum()) - 1


@pytest.mark.parametrize("fanout", [5, 20])
def test_inclusion_without_replacement_matches_the_reference(device, fanout):
    # fanout > 1 without replacement: each position's inclusion frequency as
    # in a Monte Carlo of the torch reference's Efraimidis-Spirakis sample
    draws = 1500
    eid = hub(device, fanout, False, draws)
    degree = torch.tensor([HUB_WEIGHTS.numel()])
    picks = reference.weighted_picks(HUB_WEIGHTS.repeat(draws), degree.repeat(draws), fanout, False,
                                     torch.Generator().manual_seed(5))
    kernel = torch.bincount(eid, minlength=HUB_WEIGHTS.numel()).double()
    monte_carlo = torch.bincount(picks.flatten(), minlength=HUB_WEIGHTS.numel()).double()
    assert kernel.sum() == monte_carlo.sum() == draws * fanout
    assert kernel[HUB_WEIGHTS == 0].sum() == 0  # 75 positive weights, more than the fanout
    statistic, df = two_sample_chi_square(kernel, monte_carlo)
    assert statistic < chi_square_critical(df)


def test_reference_follows_the_weights():
    # the reference itself against the weights (with replacement, and the first pick without)
    degree = torch.tensor([HUB_WEIGHTS.numel()]).repeat(3000)
    for replace in (True, False):
        picks = reference.weighted_picks(HUB_WEIGHTS.repeat(3000), degree, 1, replace,
                                         torch.Generator().manual_seed(6))
        assert_follows_weights(picks.flatten(), 3000)


def test_zero_weights_fill_uniformly_after_the_positive_ones(device):
    # 3 positive weights, fanout 5: the three always, then 2 of the 7 zero weights, each equally often
    weight = torch.tensor([0, 2.0, 0, 0, 5.0, 0, 0, 0, 1.0, 0])
    graph = csc_from_degrees([10], 1, torch.Generator().manual_seed(0))
    draws = 1400
    _, _, eid = run(graph, weight, torch.zeros(draws, dtype=torch.int64), 5, False, device, seed=2)
    counts = torch.bincount(eid, minlength=10).double()
    assert torch.equal(counts[weight > 0], torch.full((3,), float(draws)))
    assert chi_square(counts[weight == 0], draws * 2 / 7) < chi_square_critical(6)


def test_zero_total_weight_with_replacement_stays_in_the_row(device):
    # no distribution to draw from (the loader refuses it): uniform over the row, never out of it
    graph = csc_from_degrees([4, 6], 2, torch.Generator().manual_seed(0))
    weight = torch.tensor([0.0] * 4 + [1.0] * 6)
    _, dst, eid = run(graph, weight, torch.zeros(300, dtype=torch.int64), 3, True, device)
    assert eid.numel() == 900 and bool((eid < 4).all())
    assert torch.bincount(eid, minlength=4).min() > 150


def test_same_seed_same_sample(device):
    graph = csc_from_degrees([30, 0, 7, 100, 200], 5, torch.Generator().manual_seed(0))
    weight = random_weights(graph.num_edges, 4)
    frontier = torch.tensor([3, 0, 2, 1, 3, 4])
    for replace in (False, True):
        first = run(graph, weight, frontier, 5, replace, device, seed=11)
        again = run(graph, weight, frontier, 5, replace, device, seed=11)
        other = run(graph, weight, frontier, 5, replace, device, seed=12)
        assert all(torch.equal(a, b) for a, b in zip(first, again))
        assert not torch.equal(first[2], other[2])


@given(graph=graphs(), fanout=st.sampled_from([1, 3, 13]), replace=st.booleans(), data=st.data())
def test_tiers_visit_order_and_method_give_the_same_edges(device, graph, fanout, replace, data):
    # the adjacency cache's GPU prefix (the cold copy's prefix poisoned), the
    # frontier read in node-id order, or any method named: the same edges
    if device.type == "cpu" and not INTERPRET:
        pytest.skip("the torch reference draws from the generator: only the kernels are bit for bit")
    n = data.draw(st.integers(1, 2 * graph.num_nodes))
    weight = random_weights(graph.num_edges, n)
    frontier = torch.randint(0, graph.num_nodes, (n,), generator=torch.Generator().manual_seed(n))
    plain = run(graph, weight, frontier, fanout, replace, device)
    num_hot = data.draw(st.integers(0, graph.num_nodes))
    hot_edges = int(graph.indptr[num_hot])
    cold_indptr, cold_indices = graph.indptr.clone(), graph.indices.clone()
    cold_indptr[:num_hot] = -(10**9)
    cold_indices[:hot_edges] = -7
    tiered = run(graph, weight, frontier, fanout, replace, device, arrays=(cold_indptr, cold_indices),
                 hot_indptr=graph.indptr[:num_hot + 1].to(device), hot_indices=graph.indices[:hot_edges].to(device))
    assert all(torch.equal(a, b) for a, b in zip(plain, tiered))
    for kwargs in (dict(sort_frontier=True), dict(method="fused"), dict(method="grouped", d_max=4)):
        other = run(graph, weight, frontier, fanout, replace, device, **kwargs)
        assert all(torch.equal(a, b) for a, b in zip(plain, other)), kwargs


@given(graph=graphs(), fanout=st.sampled_from([1, 4, 13]), replace=st.booleans(),
       num_batches=st.sampled_from([2, 3]), data=st.data())
def test_super_batch_hop_is_each_batch_alone(device, graph, fanout, replace, num_batches, data):
    if device.type == "cpu" and not INTERPRET:
        pytest.skip("the torch reference draws from the generator, not from Philox seeds")
    sizes = data.draw(st.lists(st.integers(0, 10), min_size=num_batches, max_size=num_batches))
    n = sum(sizes)
    g = torch.Generator().manual_seed(n)
    frontier = torch.randint(0, graph.num_nodes, (n,), generator=g)
    seeds = torch.randint(0, 2**31 - 1, (num_batches,), generator=g)
    weight = random_weights(graph.num_edges, n).to(device)
    batch_ptr = torch.tensor([0] + torch.tensor(sizes).cumsum(0).tolist())
    indptr, indices = graph.indptr.to(device), graph.indices.to(device)
    hop = sample_neighbors(indptr, indices, frontier.to(device), torch.arange(n, device=device),
                           torch.tensor([n], device=device), fanout, replace, return_eid=True, seed=seeds.to(device),
                           frontier_batch=torch.repeat_interleave(torch.arange(num_batches),
                                                                  torch.tensor(sizes)).to(device),
                           batch_ptr=batch_ptr.to(device), edge_weight=weight)
    edge_ptr = hop.edge_ptr.tolist()
    for k in range(num_batches):
        lo, hi = int(batch_ptr[k]), int(batch_ptr[k + 1])
        alone = sample_neighbors(indptr, indices, frontier[lo:hi].to(device), torch.arange(lo, hi, device=device),
                                 torch.tensor([hi - lo], device=device), fanout, replace, return_eid=True,
                                 seed=seeds[k:k + 1].to(device), edge_weight=weight)
        e = int(alone.num_edges)
        part = slice(edge_ptr[k], edge_ptr[k + 1])
        assert edge_ptr[k + 1] - edge_ptr[k] == e
        assert torch.equal(hop.eid[part].cpu(), alone.eid[:e].cpu())
        assert torch.equal(hop.dst[part].cpu(), alone.dst[:e].cpu())


def test_bad_edge_weight():
    graph = csc_from_degrees([3, 2], 2, torch.Generator().manual_seed(0))
    args = (graph.indptr, graph.indices, torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64),
            torch.ones(1, dtype=torch.int64), 2)
    with pytest.raises(TypeError, match="edge_weight must be a 1-D tensor of torch.float32"):
        sample_neighbors(*args, edge_weight=torch.ones(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="edge_weight has 4 entries, indices 5"):
        sample_neighbors(*args, edge_weight=torch.ones(4))
    with pytest.raises(ValueError, match="edge_weight must be contiguous"):
        sample_neighbors(*args, edge_weight=torch.ones(10)[::2])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: run with -m gpu on the GPU machine")
@pytest.mark.parametrize("replace", [False, True])
def test_weights_read_through_uva(replace):
    # the graph and its weights in pinned host memory (placement="host"): the
    # same edges as with both on the GPU
    graph = csc_from_degrees([300, 5, 0, 90] * 50, 200, torch.Generator().manual_seed(0))
    weight = random_weights(graph.num_edges, 3)
    frontier = torch.randint(0, 200, (500,), generator=torch.Generator().manual_seed(1)).cuda()

    def hop(indptr, indices, w):
        out = sample_neighbors(indptr, indices, frontier, torch.arange(500, device="cuda"),
                               torch.tensor([500], device="cuda"), 10, replace, torch.Generator().manual_seed(2),
                               return_eid=True, edge_weight=w)
        return out.eid[:int(out.num_edges)].cpu()

    on_gpu = hop(graph.indptr.cuda(), graph.indices.cuda(), weight.cuda())
    pinned = hop(graph.indptr.pin_memory(), graph.indices.pin_memory(), weight.pin_memory())
    assert torch.equal(on_gpu, pinned)
