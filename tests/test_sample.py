"""Neighbour sampling kernel: invariants on random graphs, and uniformity."""
import math

import pytest
import torch
from hypothesis import given, strategies as st

from graphs import csc_from_degrees, graphs
from tritongnn.kernels import reference, sample_neighbors

FANOUTS = st.sampled_from([-1, 0, 1, 2, 5, 13, 16, 40])  # 40: Floyd as a loop, not unrolled


def run(graph, frontier, fanout, replace, device, seed=0, slack=7, index_dtype=torch.int32):
    """Sample with ``slack`` garbage slots after the frontier: ids far out of
    range, which any unmasked read would turn into a crash or a wrong edge."""
    n = frontier.numel()
    padded = torch.cat([frontier, torch.full((slack,), 10**12)]).to(device)
    local = torch.arange(n + slack, device=device) + 100
    indices = graph.indices.to(device, index_dtype)  # int64 once N passes 2^31
    hop = sample_neighbors(graph.indptr.to(device), indices, padded, local,
                           torch.tensor([n], device=device), fanout, replace,
                           torch.Generator().manual_seed(seed), return_eid=True)
    e = int(hop.num_edges)
    return hop.src[:e].cpu(), hop.dst[:e].cpu() - 100, hop.eid[:e].cpu()


@given(graph=graphs(), fanout=FANOUTS, replace=st.booleans(), data=st.data(),
       index_dtype=st.sampled_from([torch.int32, torch.int64]))
def test_sample_invariants(device, graph, fanout, replace, data, index_dtype):
    n = data.draw(st.integers(1, 2 * graph.num_nodes))
    frontier = torch.randint(0, graph.num_nodes, (n,), generator=torch.Generator().manual_seed(n))
    src, dst, eid = run(graph, frontier, fanout, replace, device, index_dtype=index_dtype)
    degree = graph.degree()[frontier]
    count = reference.sample_counts(degree, fanout, replace)
    # edges grouped by target, in frontier order, the right number for each
    assert torch.equal(dst, torch.repeat_interleave(torch.arange(n), count))
    # every sampled edge exists: its position lies in its target's row
    target = frontier[dst]
    assert bool(((eid >= graph.indptr[target]) & (eid < graph.indptr[target + 1])).all())
    assert torch.equal(src, graph.indices[eid].to(torch.int64))
    if not replace:  # no position drawn twice for one node
        assert (dst * graph.num_edges + eid).unique().numel() == eid.numel()
    if fanout == -1 or (not replace and fanout >= 0):
        full = degree <= fanout if fanout >= 0 else torch.ones_like(degree, dtype=torch.bool)
        # a node with degree <= fanout takes its whole row, in order
        whole = torch.repeat_interleave(full, count)
        expect = torch.cat([torch.arange(graph.indptr[v], graph.indptr[v + 1])
                            for v in frontier[full].tolist()] or [torch.empty(0, dtype=torch.int64)])
        assert torch.equal(eid[whole], expect)


def chi_square_critical(df, z=3.719):
    """Wilson-Hilferty upper quantile of chi-square(df); z = 3.719 is p = 1e-4."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def chi_square(observed, expected):
    return float(((observed - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanout", [10, 40])  # 40: past the unrolled draws
def test_hub_sampling_is_uniform(device, replace, fanout):
    # One node of degree 500 sampled 2000 times in one launch (each frontier
    # slot draws its own numbers): every neighbour position equally often.
    degree, draws = 500, 2000
    graph = csc_from_degrees([degree], 1, torch.Generator().manual_seed(0))
    _, _, eid = run(graph, torch.zeros(draws, dtype=torch.int64), fanout, replace, device, seed=3)
    assert eid.numel() == draws * fanout
    observed = torch.bincount(eid, minlength=degree).double()
    expected = draws * fanout / degree
    assert chi_square(observed, expected) < chi_square_critical(degree - 1)


def test_small_degree_subsets_are_uniform(device):
    # Degree 6, fanout 3: all 20 subsets equally likely (Floyd's guarantee).
    draws = 4000
    graph = csc_from_degrees([6], 1, torch.Generator().manual_seed(0))
    _, dst, eid = run(graph, torch.zeros(draws, dtype=torch.int64), 3, False, device, seed=5)
    mask = torch.zeros(draws, dtype=torch.int64).index_add_(0, dst, 1 << eid)
    subsets = torch.unique(mask, return_counts=True)
    assert subsets[0].numel() == math.comb(6, 3)
    assert chi_square(subsets[1].double(), draws / 20) < chi_square_critical(19)


def test_same_generator_state_same_sample(device):
    graph = csc_from_degrees([30, 0, 7, 100], 4, torch.Generator().manual_seed(0))
    frontier = torch.tensor([3, 0, 2, 1, 3])
    first = run(graph, frontier, 5, False, device, seed=11)
    again = run(graph, frontier, 5, False, device, seed=11)
    other = run(graph, frontier, 5, False, device, seed=12)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[2], other[2])


@pytest.mark.parametrize("fanout", [-2, 2.5, True, 1025])
def test_bad_fanout(fanout):
    graph = csc_from_degrees([3], 1, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="fanout"):
        sample_neighbors(graph.indptr, graph.indices, torch.zeros(1, dtype=torch.int64),
                         torch.zeros(1, dtype=torch.int64), torch.ones(1, dtype=torch.int64), fanout)


@given(graph=graphs(), fanout=FANOUTS, replace=st.booleans(), data=st.data())
def test_adjacency_cache_tiers_read_the_same_rows(device, graph, fanout, replace, data):
    # With the first A rows in a separate "hot" copy, sampling gives exactly the
    # edges of the single-tier graph; the cold copy's first A rows are poisoned,
    # so a read from the wrong tier shows up as a wrong or out-of-range edge.
    num_hot = data.draw(st.integers(0, graph.num_nodes))
    n = data.draw(st.integers(1, 2 * graph.num_nodes))
    frontier = torch.randint(0, graph.num_nodes, (n,), generator=torch.Generator().manual_seed(n)).to(device)
    hot_edges = int(graph.indptr[num_hot])
    hot_indptr, hot_indices = graph.indptr[:num_hot + 1].clone(), graph.indices[:hot_edges].clone()
    cold_indptr, cold_indices = graph.indptr.clone(), graph.indices.clone()
    cold_indptr[:num_hot] = -(10**9)
    cold_indices[:hot_edges] = -7

    def sample(*arrays, **hot):
        hop = sample_neighbors(*[a.to(device) for a in arrays], frontier, torch.arange(n, device=device),
                               torch.tensor([n], device=device), fanout, replace,
                               torch.Generator().manual_seed(3), return_eid=True,
                               **{k: v.to(device) for k, v in hot.items()})
        e = int(hop.num_edges)
        return hop.src[:e].cpu(), hop.dst[:e].cpu(), hop.eid[:e].cpu()

    plain = sample(graph.indptr, graph.indices)
    tiered = sample(cold_indptr, cold_indices, hot_indptr=hot_indptr, hot_indices=hot_indices)
    for a, b in zip(plain, tiered):
        assert torch.equal(a, b)


def test_adjacency_cache_bad_tiers():
    graph = csc_from_degrees([3, 2], 2, torch.Generator().manual_seed(0))
    args = (graph.indptr, graph.indices, torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64),
            torch.ones(1, dtype=torch.int64), 2)
    with pytest.raises(ValueError, match="together"):
        sample_neighbors(*args, hot_indptr=graph.indptr[:2])
    with pytest.raises(TypeError, match="dtypes"):
        sample_neighbors(*args, hot_indptr=graph.indptr[:2], hot_indices=graph.indices[:3].long())
    with pytest.raises(ValueError, match="prefixes"):
        sample_neighbors(*args, hot_indptr=torch.zeros(4, dtype=torch.int64), hot_indices=graph.indices[:3])


@given(graph=graphs(), fanout=FANOUTS, replace=st.booleans(), num_batches=st.sampled_from([1, 2, 3, 8]),
       data=st.data())
def test_super_batch_hop_is_each_batch_alone(device, graph, fanout, replace, num_batches, data):
    # K sub-batches sampled in one launch: sub-batch k's slice of the output
    # (edge_ptr) is bit for bit what sampling its frontier alone with seed[k]
    # gives, because its Philox counters count from its own first node.
    sizes = data.draw(st.lists(st.integers(0, 12), min_size=num_batches, max_size=num_batches))
    n, slack = sum(sizes), 5
    g = torch.Generator().manual_seed(n)
    frontier = torch.randint(0, graph.num_nodes, (n,), generator=g)
    local = torch.randint(0, 1000, (n + slack,), generator=g)
    seeds = torch.randint(0, 2**31 - 1, (num_batches,), generator=g)
    batch = torch.repeat_interleave(torch.arange(num_batches), torch.tensor(sizes))
    batch_ptr = torch.tensor([0] + torch.tensor(sizes).cumsum(0).tolist())
    indptr, indices = graph.indptr.to(device), graph.indices.to(device)
    pad = lambda t, value: torch.cat([t, torch.full((slack,), value)]).to(device)  # noqa: E731
    hop = sample_neighbors(indptr, indices, pad(frontier, 10**12), local.to(device),
                           torch.tensor([n], device=device), fanout, replace, return_eid=True,
                           seed=seeds.to(device), frontier_batch=pad(batch, 10**6),
                           batch_ptr=batch_ptr.to(device))
    edge_ptr = hop.edge_ptr.tolist()
    assert edge_ptr[-1] == int(hop.num_edges) and len(edge_ptr) == num_batches + 1
    for k in range(num_batches):
        lo, hi = int(batch_ptr[k]), int(batch_ptr[k + 1])
        alone = sample_neighbors(indptr, indices, pad(frontier[lo:hi], 10**12), local[lo:].to(device),
                                 torch.tensor([hi - lo], device=device), fanout, replace, return_eid=True,
                                 seed=seeds[k:k + 1].to(device))
        e = int(alone.num_edges)
        assert edge_ptr[k + 1] - edge_ptr[k] == e
        part = slice(edge_ptr[k], edge_ptr[k + 1])
        if device.type == "cpu" and not _interpreted():
            continue  # the torch reference draws from the generator, not from Philox seeds
        assert torch.equal(hop.src[part].cpu(), alone.src[:e].cpu())
        assert torch.equal(hop.dst[part].cpu(), alone.dst[:e].cpu())
        assert torch.equal(hop.eid[part].cpu(), alone.eid[:e].cpu())
        assert bool((hop.batch[part] == k).all())


def _interpreted():
    from tritongnn.kernels._launch import INTERPRET
    return INTERPRET


def test_super_batch_bad_arguments():
    graph = csc_from_degrees([3, 2], 2, torch.Generator().manual_seed(0))
    args = (graph.indptr, graph.indices, torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int64),
            torch.tensor([2]), 2)
    with pytest.raises(ValueError, match="together"):
        sample_neighbors(*args, frontier_batch=torch.zeros(2, dtype=torch.int64))
    with pytest.raises(TypeError, match="frontier_batch"):
        sample_neighbors(*args, frontier_batch=torch.zeros(2, dtype=torch.int32), batch_ptr=torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="slots"):
        sample_neighbors(*args, frontier_batch=torch.zeros(3, dtype=torch.int64), batch_ptr=torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="one Philox seed per sub-batch"):
        sample_neighbors(*args, frontier_batch=torch.tensor([0, 1]), batch_ptr=torch.tensor([0, 1, 2]),
                         seed=torch.tensor([3]))


def test_host_list_reads_what_the_stream_wrote(device):
    # the sampler's per-batch sizes copy (pinned, asynchronous, event-waited)
    # sees the values the kernels before it wrote, as .tolist() does
    from tritongnn.kernels._launch import host_list
    sizes = torch.arange(7, dtype=torch.int64, device=device)
    sizes.mul_(3).add_(2**40)  # queued on the stream right before the copy
    assert host_list(sizes) == sizes.cpu().tolist() == [2**40 + 3 * i for i in range(7)]
    assert host_list(sizes[:0]) == []
    # the thread's pinned buffer, reused: larger, smaller, 2-D, other dtypes,
    # each call reading its own values, not the last call's
    for values in (torch.arange(300, device=device) * 7, torch.tensor([5, -1], device=device),
                   torch.arange(6, device=device).view(2, 3), torch.tensor([1.5, 2.5], device=device),
                   torch.tensor([9], dtype=torch.int32, device=device)):
        values.add_(1)
        assert host_list(values) == values.cpu().tolist()


def test_adjacency_and_seed_refused_unless_dense_and_typed():
    # the kernels read indptr/indices as dense arrays: a strided view read
    # with stride 1 gave wrong sources (indices) or heap corruption (indptr)
    ip, ix = torch.tensor([0, 3, 5, 9]), torch.tensor([1, 2, 0, 0, 2, 0, 1, 2, 1])
    args = (torch.tensor([0, 1, 2]), torch.arange(3), torch.tensor([3]), 2)
    with pytest.raises(ValueError, match="indices must be contiguous"):
        sample_neighbors(ip, torch.stack([ix, ix], 1)[:, 0], *args)
    with pytest.raises(ValueError, match="indptr must be contiguous"):
        sample_neighbors(torch.stack([ip, ip], 1)[:, 0], ix, *args)
    with pytest.raises(TypeError, match="indices must be a 1-D tensor of torch.int32 or torch.int64"):
        sample_neighbors(ip, ix.float(), *args)
    with pytest.raises(TypeError, match="indptr must be a 1-D tensor of torch.int64"):
        sample_neighbors(ip.int(), ix, *args)
    with pytest.raises(TypeError, match="seed must be an int64 tensor"):
        sample_neighbors(ip, ix, *args, seed=torch.tensor([5.0]))


@pytest.mark.parametrize("replace", [False, True])
def test_reference_hub_sampling_is_uniform(replace):
    # the pure-torch sampler is the loader's CPU path without the interpreter:
    # its draws are uniform too (the kernel's test above runs the kernel here)
    degree, fanout, draws = 200, 10, 2000
    graph = csc_from_degrees([degree], 1, torch.Generator().manual_seed(0))
    hop = reference.sample_neighbors(graph.indptr, graph.indices, torch.zeros(draws, dtype=torch.int64),
                                     torch.arange(draws), torch.tensor([draws]), fanout, replace,
                                     torch.Generator().manual_seed(4), True, None, None)
    eid = hop.eid[:int(hop.num_edges)]
    assert eid.numel() == draws * fanout
    if not replace:  # no position twice for one slot
        assert (hop.dst[:eid.numel()] * degree + eid).unique().numel() == eid.numel()
    observed = torch.bincount(eid, minlength=degree).double()
    assert chi_square(observed, draws * fanout / degree) < chi_square_critical(degree - 1)
