"""Temporal neighbour sampling (``sample_neighbors(seed_time=, node_time= |
edge_time=)``): no edge from the future, PyG's counts, uniform draws among
the admissible positions, ``"last"`` the most recent ones, the windows
against the torch reference, tiers / visit order / methods / super-batches
giving the same edges, bad input."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from graphs import csc_from_degrees, graphs
from test_sample import chi_square, chi_square_critical
from tritongnn.kernels import reference, sample_neighbors
from tritongnn.kernels._launch import INTERPRET
from tritongnn.kernels.sample_temporal import rows_sorted_by_time, time_windows

FANOUTS = st.sampled_from([-1, 0, 1, 2, 5, 13])


def sort_rows(indptr, indices, key):
    """``(indices, perm)``: each row reordered by ``key`` (one value a CSC
    position), stably, as PyG's ``to_csc`` sorts a temporal graph."""
    owner = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr[1:] - indptr[:-1])
    perm = torch.argsort(key, stable=True)
    perm = perm[torch.argsort(owner[perm], stable=True)]
    return indices[perm], perm


def temporal_graph(graph, seed, edge_level, span=6, dtype=torch.int64):
    """``(indptr, indices, node_time, edge_time)``: ``graph`` with times in
    ``[0, span)`` (few values: ties), each row sorted by time."""
    g = torch.Generator().manual_seed(seed)
    if edge_level:
        edge_time = torch.randint(0, span, (graph.num_edges,), generator=g).to(dtype)
        indices, perm = sort_rows(graph.indptr, graph.indices, edge_time)
        return graph.indptr, indices, None, edge_time[perm].contiguous()
    node_time = torch.randint(0, span, (graph.num_nodes,), generator=g).to(dtype)
    indices, _ = sort_rows(graph.indptr, graph.indices, node_time[graph.indices.long()])
    return graph.indptr, indices, node_time, None


def run(arrays, frontier, seed_time, fanout, replace, device, strategy="uniform", seed=0, slack=7, **kwargs):
    """One hop on ``device`` with ``slack`` garbage frontier slots (garbage
    ids and times: an unmasked read of them crashes or shows as a wrong
    edge); ``(src, dst, eid)``."""
    indptr, indices, node_time, edge_time = arrays
    n = frontier.numel()
    padded = torch.cat([frontier, torch.full((slack,), 10**12)]).to(device)
    times = torch.cat([seed_time, torch.full((slack,), 10**6, dtype=seed_time.dtype)]).to(device)
    hop = sample_neighbors(indptr.to(device), indices.to(device), padded, torch.arange(n + slack, device=device) + 100,
                           torch.tensor([n], device=device), fanout, replace, torch.Generator().manual_seed(seed),
                           return_eid=True, seed_time=times,
                           node_time=None if node_time is None else node_time.to(device),
                           edge_time=None if edge_time is None else edge_time.to(device),
                           temporal_strategy=strategy, **kwargs)
    e = int(hop.num_edges)
    return hop.src[:e].cpu(), hop.dst[:e].cpu() - 100, hop.eid[:e].cpu()


def position_times(arrays):
    """The time of every CSC position."""
    indptr, indices, node_time, edge_time = arrays
    return edge_time if edge_time is not None else node_time[indices.long()]


def admissible(arrays, frontier, seed_time):
    """Admissible positions per slot, counted one by one (no use of the sort)."""
    indptr = arrays[0]
    times = position_times(arrays)
    return torch.tensor([int((times[indptr[v]:indptr[v + 1]] <= t).sum())
                         for v, t in zip(frontier.tolist(), seed_time.tolist())], dtype=torch.int64)


def check_hop(arrays, frontier, seed_time, fanout, replace, strategy, src, dst, eid):
    indptr, indices = arrays[0], arrays[1]
    times = position_times(arrays)
    adm = admissible(arrays, frontier, seed_time)
    window = adm if fanout == -1 or strategy == "uniform" else adm.clamp(max=fanout)
    count = reference.sample_counts(window, fanout, replace)
    # grouped by target in frontier order, PyG's counts: min(fanout, admissible) without replacement
    assert torch.equal(dst, torch.repeat_interleave(torch.arange(frontier.numel()), count))
    target = frontier[dst]
    assert bool(((eid >= indptr[target]) & (eid < indptr[target + 1])).all())
    assert torch.equal(src, indices[eid].to(torch.int64))
    assert bool((times[eid] <= seed_time[dst]).all())  # nothing from the future
    # every pick in its slot's window: the admissible prefix, for "last" its last positions
    first = indptr[target] + adm[dst] - window[dst]
    assert bool(((eid >= first) & (eid < indptr[target] + adm[dst])).all())
    if not replace:
        assert (dst * max(1, indices.numel()) + eid).unique().numel() == eid.numel()  # no position twice
        fits = (window <= fanout) | (fanout == -1)
        whole = torch.repeat_interleave(fits, count)
        # a window that fits is taken whole, in row (time) order
        expect = [torch.arange(int(indptr[v] + a - w), int(indptr[v] + a))
                  for v, a, w in zip(frontier[fits].tolist(), adm[fits], window[fits])]
        assert torch.equal(eid[whole], torch.cat(expect or [torch.empty(0, dtype=torch.int64)]))


@given(graph=graphs(), fanout=FANOUTS, replace=st.booleans(), strategy=st.sampled_from(["uniform", "last"]),
       edge_level=st.booleans(), data=st.data())
def test_temporal_invariants(device, graph, fanout, replace, strategy, edge_level, data):
    n = data.draw(st.integers(1, 2 * graph.num_nodes))
    arrays = temporal_graph(graph, n, edge_level)
    g = torch.Generator().manual_seed(n + 1)
    frontier = torch.randint(0, graph.num_nodes, (n,), generator=g)
    seed_time = torch.randint(-1, 7, (n,), generator=g)  # -1: nothing admissible; 6: everything
    out = run(arrays, frontier, seed_time, fanout, replace, device, strategy)
    check_hop(arrays, frontier, seed_time, fanout, replace, strategy, *out)
    # the torch reference (the CPU path without the interpreter) keeps the same contract
    hop = reference.sample_temporal(arrays[0], arrays[1], frontier, torch.arange(n), torch.tensor([n]), fanout,
                                    replace, torch.Generator().manual_seed(1), True, None, None, seed_time, strategy,
                                    arrays[2], arrays[3])
    check_hop(arrays, frontier, seed_time, fanout, replace, strategy, hop.src, hop.dst, hop.eid)


@settings(max_examples=6)
@given(graph=graphs(), fanout=st.sampled_from([-1, 2, 5]), strategy=st.sampled_from(["uniform", "last"]),
       edge_level=st.booleans(), dtype=st.sampled_from([torch.int64, torch.int32, torch.float32]), data=st.data())
def test_windows_match_the_reference(device, graph, fanout, strategy, edge_level, dtype, data):
    # the kernel's binary search against the reference's count, with the
    # adjacency cache's GPU prefix (the cold copy's prefix poisoned) and in node-id order
    if device.type == "cpu" and not INTERPRET:
        pytest.skip("time_windows is the kernel's: the CPU path without the interpreter is the reference's")
    n = data.draw(st.integers(1, 2 * graph.num_nodes))
    indptr, indices, node_time, edge_time = temporal_graph(graph, n, edge_level, dtype=dtype)
    g = torch.Generator().manual_seed(n)
    frontier = torch.randint(0, graph.num_nodes, (n,), generator=g)
    seed_time = torch.randint(-1, 7, (n,), generator=g).to(dtype)
    expect = reference.time_windows(indptr, indices, frontier, torch.tensor([n]), seed_time, fanout, strategy,
                                    node_time, edge_time)
    num_hot = data.draw(st.integers(0, graph.num_nodes))
    hot_edges = int(indptr[num_hot])
    cold_indptr, cold_indices = indptr.clone(), indices.clone()
    cold_indptr[:num_hot] = -(10**9)
    cold_indices[:hot_edges] = -7
    to = dict(device=device)
    times = dict(node_time=None if node_time is None else node_time.to(device),
                 edge_time=None if edge_time is None else edge_time.to(device))
    f = frontier.to(device)
    for args in ((indptr, indices, None, None), (cold_indptr, cold_indices, indptr[:num_hot + 1], indices[:hot_edges])):
        for visit in (None, torch.argsort(frontier, stable=True)):
            start, degree = time_windows(*(a.to(device) for a in args[:2]), f, torch.tensor([n], **to),
                                         seed_time.to(device), fanout, strategy,
                                         hot_indptr=None if args[2] is None else args[2].to(device),
                                         hot_indices=None if args[3] is None else args[3].to(device),
                                         visit=None if visit is None else visit.to(device), **times)
            assert torch.equal(start.cpu(), expect[0]) and torch.equal(degree.cpu(), expect[1])


@pytest.mark.parametrize("edge_level", [False, True])
@pytest.mark.parametrize("replace", [False, True])
def test_uniform_among_admissible(device, edge_level, replace):
    # one hub of degree 200 sampled by 1000 slots (each its own draws): its
    # 120 admissible positions equally often, the 80 later ones never
    degree, draws, fanout, cut = 200, 1000, 10, 119
    graph = csc_from_degrees([degree] + [0] * (degree - 1), degree, torch.Generator().manual_seed(0))
    if edge_level:
        arrays = (graph.indptr, graph.indices, None, torch.arange(degree))
    else:  # node v's time is v, and the hub's row lists its sources by time
        arrays = (graph.indptr, torch.sort(graph.indices).values, torch.arange(degree), None)
    frontier = torch.zeros(draws, dtype=torch.int64)
    times = position_times(arrays)
    seed_time = torch.full((draws,), int(times[cut]))
    _, _, eid = run(arrays, frontier, seed_time, fanout, replace, device, seed=3)
    assert eid.numel() == draws * fanout
    first_late = int((times <= times[cut]).sum())
    observed = torch.bincount(eid, minlength=degree).double()
    assert observed[first_late:].sum() == 0
    assert chi_square(observed[:first_late], draws * fanout / first_late) < chi_square_critical(first_late - 1)


@pytest.mark.parametrize("edge_level", [False, True])
def test_last_takes_the_most_recent(device, edge_level):
    # times along the row 0 1 1 2 3 3 3 5 (ties at the cut); seed times cut it at every place
    row_times = torch.tensor([0, 1, 1, 2, 3, 3, 3, 5])
    if edge_level:  # node 0 with in-edges from nodes 1..8
        arrays = (torch.tensor([0, 8] + [8] * 8), torch.arange(1, 9), None, row_times)
    else:
        node_time = torch.cat([torch.zeros(1, dtype=torch.int64), row_times])  # node v + 1: row_times[v]
        arrays = (torch.tensor([0, 8] + [8] * 8), torch.arange(1, 9), node_time, None)
    seed_time = torch.tensor([-1, 0, 1, 2, 3, 4, 5, 9])
    frontier = torch.zeros(seed_time.numel(), dtype=torch.int64)
    for fanout, replace in ((2, False), (3, False), (-1, False), (2, True)):
        _, dst, eid = run(arrays, frontier, seed_time, fanout, replace, device, "last", seed=fanout)
        for slot, t in enumerate(seed_time.tolist()):
            adm = int((row_times <= t).sum())
            keep = adm if fanout == -1 else min(adm, fanout)
            got = eid[dst == slot]
            if replace:  # fanout draws from the last min(adm, fanout) positions
                assert got.numel() == (fanout if adm else 0)
                assert bool(((got >= adm - keep) & (got < adm)).all())
            else:  # the most recent ones, in row (time) order
                assert got.tolist() == list(range(adm - keep, adm)), (fanout, t)


@settings(max_examples=6)
@given(graph=graphs(), fanout=st.sampled_from([1, 3, 13]), replace=st.booleans(),
       strategy=st.sampled_from(["uniform", "last"]), edge_level=st.booleans(), data=st.data())
def test_tiers_visit_order_and_method_give_the_same_edges(device, graph, fanout, replace, strategy, edge_level,
                                                          data):
    if device.type == "cpu" and not INTERPRET:
        pytest.skip("the torch reference draws from the generator: only the kernels are bit for bit")
    n = data.draw(st.integers(1, 2 * graph.num_nodes))
    arrays = temporal_graph(graph, n, edge_level)
    g = torch.Generator().manual_seed(n)
    frontier = torch.randint(0, graph.num_nodes, (n,), generator=g)
    seed_time = torch.randint(0, 6, (n,), generator=g)
    plain = run(arrays, frontier, seed_time, fanout, replace, device, strategy)
    indptr, indices = arrays[0], arrays[1]
    num_hot = data.draw(st.integers(0, graph.num_nodes))
    hot_edges = int(indptr[num_hot])
    cold_indptr, cold_indices = indptr.clone(), indices.clone()
    cold_indptr[:num_hot] = -(10**9)
    cold_indices[:hot_edges] = -7
    tiered = run((cold_indptr, cold_indices) + arrays[2:], frontier, seed_time, fanout, replace, device, strategy,
                 hot_indptr=indptr[:num_hot + 1].to(device), hot_indices=indices[:hot_edges].to(device))
    assert all(torch.equal(a, b) for a, b in zip(plain, tiered))
    for kwargs in (dict(sort_frontier=True), dict(method="fused"), dict(method="grouped", d_max=4)):
        other = run(arrays, frontier, seed_time, fanout, replace, device, strategy, **kwargs)
        assert all(torch.equal(a, b) for a, b in zip(plain, other)), kwargs


def test_super_batch_hop_is_each_batch_alone(device):
    # disjoint subgraphs as super-batches: each seed its own sub-batch and seed time
    if device.type == "cpu" and not INTERPRET:
        pytest.skip("the torch reference draws from the generator, not from Philox seeds")
    graph = csc_from_degrees([0, 3, 9, 20, 1, 14], 6, torch.Generator().manual_seed(2))
    arrays = [a.to(device) if a is not None else None for a in temporal_graph(graph, 5, edge_level=False)]
    sizes = [3, 0, 4, 2]
    n, k = sum(sizes), len(sizes)
    g = torch.Generator().manual_seed(4)
    frontier = torch.randint(0, 6, (n,), generator=g).to(device)
    seed_time = torch.randint(0, 6, (n,), generator=g).to(device)
    seeds = torch.randint(0, 2**31 - 1, (k,), generator=g).to(device)
    batch_ptr = torch.tensor([0] + torch.tensor(sizes).cumsum(0).tolist(), device=device)
    batch = torch.repeat_interleave(torch.arange(k), torch.tensor(sizes)).to(device)
    common = dict(return_eid=True, node_time=arrays[2], temporal_strategy="uniform")
    hop = sample_neighbors(arrays[0], arrays[1], frontier, torch.arange(n, device=device),
                           torch.tensor([n], device=device), 4, False, seed=seeds, frontier_batch=batch,
                           batch_ptr=batch_ptr, seed_time=seed_time, **common)
    edge_ptr = hop.edge_ptr.tolist()
    for b in range(k):
        lo, hi = int(batch_ptr[b]), int(batch_ptr[b + 1])
        alone = sample_neighbors(arrays[0], arrays[1], frontier[lo:hi], torch.arange(lo, hi, device=device),
                                 torch.tensor([hi - lo], device=device), 4, False, seed=seeds[b:b + 1],
                                 seed_time=seed_time[lo:hi], **common)
        e = int(alone.num_edges)
        assert edge_ptr[b + 1] - edge_ptr[b] == e
        assert torch.equal(hop.eid[edge_ptr[b]:edge_ptr[b + 1]].cpu(), alone.eid[:e].cpu())


def test_rows_sorted_by_time():
    graph = csc_from_degrees([4, 0, 3, 1], 4, torch.Generator().manual_seed(0))
    indptr, indices, node_time, _ = temporal_graph(graph, 1, edge_level=False)
    assert rows_sorted_by_time(indptr, indices, node_time=node_time)
    edge_time = torch.tensor([0, 1, 1, 2, 0, 1, 5, 0])  # steps down only where a row starts: sorted
    assert rows_sorted_by_time(indptr, indices, edge_time=edge_time)
    assert not rows_sorted_by_time(indptr, indices, edge_time=torch.tensor([0, 1, 1, 2, 0, 5, 1, 0]))


def test_bad_temporal_arguments():
    graph = csc_from_degrees([3, 2], 2, torch.Generator().manual_seed(0))
    args = (graph.indptr, graph.indices, torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64),
            torch.ones(1, dtype=torch.int64), 2)
    t1, node_time = torch.zeros(1, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)
    with pytest.raises(ValueError, match="temporal_strategy must be one of"):
        sample_neighbors(*args, seed_time=t1, node_time=node_time, temporal_strategy="first")
    with pytest.raises(ValueError, match="seed_time is given without node_time or edge_time"):
        sample_neighbors(*args, seed_time=t1)
    with pytest.raises(ValueError, match="node_time and edge_time exclude each other"):
        sample_neighbors(*args, seed_time=t1, node_time=node_time, edge_time=torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match="need seed_time"):
        sample_neighbors(*args, node_time=node_time)
    with pytest.raises(ValueError, match="edge_weight and temporal sampling exclude each other"):
        sample_neighbors(*args, seed_time=t1, node_time=node_time, edge_weight=torch.ones(5))
    with pytest.raises(ValueError, match="node_time has 3 entries, expected 2"):
        sample_neighbors(*args, seed_time=t1, node_time=torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="edge_time has 4 entries, expected 5"):
        sample_neighbors(*args, seed_time=t1, edge_time=torch.zeros(4, dtype=torch.int64))
    with pytest.raises(TypeError, match="edge_time must be a 1-D tensor of"):
        sample_neighbors(*args, seed_time=t1, edge_time=torch.zeros(5, dtype=torch.bool))
    with pytest.raises(TypeError, match="seed_time must be a 1-D tensor of node_time's dtype torch.int64"):
        sample_neighbors(*args, seed_time=t1.float(), node_time=node_time)
    with pytest.raises(ValueError, match="seed_time has 2 slots, the frontier 1"):
        sample_neighbors(*args, seed_time=torch.zeros(2, dtype=torch.int64), node_time=node_time)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: run with -m gpu on the GPU machine")
@pytest.mark.parametrize("edge_level", [False, True])
def test_times_read_through_uva(edge_level):
    # the graph and its times in pinned host memory (placement="host"): the
    # same edges as with all of them on the GPU
    graph = csc_from_degrees([300, 5, 0, 90] * 50, 200, torch.Generator().manual_seed(0))
    indptr, indices, node_time, edge_time = temporal_graph(graph, 3, edge_level, span=400)
    frontier = torch.randint(0, 200, (500,), generator=torch.Generator().manual_seed(1)).cuda()
    seed_time = torch.randint(0, 400, (500,), generator=torch.Generator().manual_seed(2)).cuda()

    def hop(place):
        out = sample_neighbors(place(indptr), place(indices), frontier, torch.arange(500, device="cuda"),
                               torch.tensor([500], device="cuda"), 10, False, torch.Generator().manual_seed(2),
                               return_eid=True, seed_time=seed_time,
                               node_time=None if node_time is None else place(node_time),
                               edge_time=None if edge_time is None else place(edge_time))
        return out.eid[:int(out.num_edges)].cpu()

    assert torch.equal(hop(lambda t: t.cuda()), hop(lambda t: t.pin_memory()))
