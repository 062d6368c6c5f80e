"""Grouped sampler (GARDEN's GPS, ``method="grouped"``): the foundation
kernel's edges bit for bit, and uniform draws of its own.

Bit-identity is the strong check: both kernels draw the same Philox numbers
and run the same Floyd's algorithm, so any difference is a wrong read (staged
tile, hub fallback, tier, mask). The distribution tests then look at the
grouped kernel alone. Each chi-square test compares against the p = 1e-4
critical value with fixed seeds: the outcome is deterministic, and a correct
sampler fails one such test with probability 1e-4 per fresh seed (about
1.5 % for the ~150 run here, each set of seeds fixed once), while a bias of
a few percent in a cell fails it for sure at these draw counts.
"""
import itertools
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from conftest import FakeStream
from graphs import csc_from_degrees, graphs
from test_sample import chi_square, chi_square_critical
from tritongnn import CSCGraph, NeighborSampler
from tritongnn.kernels import sample_neighbors
from tritongnn.kernels.sample import sorts_frontier, visits_in_node_order

GROUPED = ["grouped", "grouped_split", "fused"]


def sample(graph, frontier, fanout, replace, device, method, d_max=64, seed=0, return_eid=True,
           index_dtype=torch.int32, num_hot=None, slack=5, sort_frontier=None):
    """One hop of ``method`` over ``frontier`` (CPU int64), with ``slack``
    garbage slots after it (ids far out of range: an unmasked read crashes or
    shows). ``num_hot``: the first rows come from a GPU-style hot copy and the
    cold copy's prefix is poisoned, so a read from the wrong tier shows up."""
    n = frontier.numel()
    indptr, indices = graph.indptr.clone(), graph.indices.to(index_dtype, copy=True)  # poisoned below
    tiers = {}
    if num_hot is not None:
        hot_edges = int(indptr[num_hot])
        tiers = dict(hot_indptr=indptr[:num_hot + 1].clone().to(device),
                     hot_indices=indices[:hot_edges].clone().to(device))
        indptr[:num_hot] = -(10**9)
        indices[:hot_edges] = -7
    padded = torch.cat([frontier, torch.full((slack,), 10**12)]).to(device)
    hop = sample_neighbors(indptr.to(device), indices.to(device), padded,
                           torch.arange(n + slack, device=device) + 100, torch.tensor([n], device=device),
                           fanout, replace, torch.Generator().manual_seed(seed), return_eid=return_eid,
                           method=method, d_max=d_max, sort_frontier=sort_frontier, **tiers)
    e = int(hop.num_edges)
    eid = hop.eid[:e].cpu() if return_eid else None
    return hop.src[:e].cpu(), hop.dst[:e].cpu() - 100, eid


def spanning_graph(fanout, d_max, seed=0):
    """Degrees through every path of the grouped kernel: isolated, 1, below,
    at and just above the fanout, inside the staged width, at D_MAX, just
    above it and far above it (hubs), then random ones."""
    gen = torch.Generator().manual_seed(seed)
    edges = [0, 1, max(fanout - 1, 0), fanout, fanout + 1, (fanout + d_max) // 2, d_max - 1, d_max,
             d_max + 1, 3 * d_max + 5]
    degrees = edges + torch.randint(0, 2 * d_max + 2, (14,), generator=gen).tolist()
    graph = csc_from_degrees(degrees, len(degrees), gen)
    # every node twice, shuffled, and some more repeats
    nodes = torch.cat([torch.arange(len(degrees)).repeat(2),
                       torch.randint(0, len(degrees), (23,), generator=gen)])
    return graph, nodes[torch.randperm(nodes.numel(), generator=gen)]


# (fanout, d_max, index dtype, hot prefix of the adjacency, return_eid): each
# fanout/d_max relation (d_max above, far above, below the fanout, fanout 1)
# once without and once with the adjacency cache, both id widths, with and
# without edge ids.
CASES = [(5, 16, torch.int32, None, True), (5, 16, torch.int64, 9, False),
         (3, 64, torch.int64, None, True), (3, 64, torch.int32, 13, False),
         (13, 8, torch.int32, None, False), (13, 8, torch.int64, 9, True),
         (1, 2, torch.int64, None, False), (1, 2, torch.int32, 13, True)]


@pytest.mark.parametrize("method", GROUPED)
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_grouped_matches_foundation(device, method, replace, case):
    fanout, d_max, index_dtype, num_hot, return_eid = CASES[case]
    graph, frontier = spanning_graph(fanout, d_max)
    args = (graph, frontier, fanout, replace, device)
    kw = dict(d_max=d_max, seed=fanout, return_eid=return_eid, index_dtype=index_dtype)
    expect = sample(*args, "foundation", **kw)
    got = sample(*args, method, num_hot=num_hot, **kw)
    assert expect[0].numel() > 0
    for a, b in zip(expect, got):
        assert (a is None and b is None) or torch.equal(a, b)


@pytest.mark.parametrize("method", ["foundation", "grouped", "grouped_split"])
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("case", [0, 1, 4, 5])  # without and with the adjacency cache
def test_node_order_visits_change_no_edge(device, method, replace, case):
    # sort_frontier: row bounds and rows read in node-id order (where rows
    # cross PCIe); every edge still goes to its frontier position's slots with
    # its position's draws. The frontier repeats nodes (equal keys side by side).
    fanout, d_max, index_dtype, num_hot, return_eid = CASES[case]
    graph, frontier = spanning_graph(fanout, d_max, seed=case)
    args = (graph, frontier, fanout, replace, device)
    kw = dict(d_max=d_max, seed=fanout, return_eid=return_eid, index_dtype=index_dtype, num_hot=num_hot)
    expect = sample(*args, "foundation", sort_frontier=False, **kw)
    got = sample(*args, method, sort_frontier=True, **kw)
    assert expect[0].numel() > 0
    for a, b in zip(expect, got):
        assert (a is None and b is None) or torch.equal(a, b)


def test_bad_sort_frontier():
    graph, frontier = spanning_graph(3, 4)
    args = (graph.indptr, graph.indices, frontier, frontier, torch.tensor([frontier.numel()]), 3)
    with pytest.raises(ValueError, match="sort_frontier=True"):
        sample_neighbors(*args, method="fused", sort_frontier=True)
    with pytest.raises(TypeError, match="sort_frontier"):
        sample_neighbors(*args, sort_frontier=1)
    assert not sorts_frontier(graph.indptr, graph.indices, torch.device("cpu"))  # frontier order on the CPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("method", ["auto", "foundation"])
def test_bad_arrays_on_the_gpu_are_named_before_the_visit_rule(method):
    # on a GPU the visit-order rule and "auto" read where the arrays live and
    # their sizes: a wrong array is named first, not met as an AttributeError
    cuda = torch.device("cuda")
    graph, frontier = spanning_graph(3, 4)
    frontier = frontier.to(cuda)
    args = (frontier, frontier, torch.tensor([frontier.numel()], device=cuda), 3)
    for indptr, indices, name in [(graph.indptr.tolist(), graph.indices, "indptr"),
                                  (graph.indptr.to(cuda), graph.indices.tolist(), "indices")]:
        with pytest.raises(TypeError, match=f"^{name} must be"):
            sample_neighbors(indptr, indices, *args, method=method)


def test_the_fused_kernel_never_visits_in_node_order(monkeypatch):
    # where the rule sorts, every method but the fused one (its look-back
    # scan) visits in node order; where it does not, none does
    from tritongnn.kernels import sample as sample_module
    arrays = (torch.zeros(2, dtype=torch.int64), torch.zeros(4, dtype=torch.int32), torch.device("cpu"))
    for rule in (True, False):
        monkeypatch.setattr(sample_module, "sorts_frontier",
                            lambda indptr, indices, device, hot_indptr=None, hot_indices=None, uva_reads=None: rule)
        assert {m: visits_in_node_order(m, *arrays) for m in ("foundation", "grouped", "grouped_split", "auto",
                                                               "fused")} == \
            {"foundation": rule, "grouped": rule, "grouped_split": rule, "auto": rule, "fused": False}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_rows_through_uva_past_the_l2_are_read_in_node_order():
    cuda = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(cuda).L2_cache_size
    indptr = torch.zeros(2, dtype=torch.int64).pin_memory()
    large = torch.empty(l2 // 4 + 1, dtype=torch.int32).pin_memory()
    assert sorts_frontier(indptr, large, cuda)
    assert not sorts_frontier(indptr, large[:16], cuda)  # stays in the L2
    assert not sorts_frontier(indptr.to(cuda), large.to(cuda), cuda)  # GPU memory
    # the adjacency cache: what is read through UVA, past its GPU prefix, counts
    twice = torch.empty(l2 // 2 + 1, dtype=torch.int32).pin_memory()  # twice the L2
    hot_indptr, quarter = indptr[:1].to(cuda), twice.numel() // 4
    assert sorts_frontier(indptr, twice, cuda, hot_indptr, twice[:quarter].to(cuda))  # 1.5 L2 left: sorted
    assert not sorts_frontier(indptr, twice, cuda, hot_indptr, twice[:3 * quarter].to(cuda))  # half an L2 left
    # past the L2, but too small a share of the edges read through UVA
    from tritongnn.kernels import sample as sample_module
    large = torch.empty(2 * l2, dtype=torch.int32).pin_memory()  # eight times the L2
    share = sample_module.SORT_MIN_UVA_SHARE
    for cold in (share + 0.02, share - 0.02):
        hot = large[:int((1 - cold) * large.numel())].to(cuda)
        assert sorts_frontier(indptr, large, cuda, hot_indptr, hot) == (cold >= share)


# Every compiled variant the random-graph test below draws from, each once:
# that test meets about 40 of them a run, a different 40 each time (a
# failing example of one variant may not recur in the next run).
# A compilation each (~1 s), so on the GPU only; the interpreter compiles
# nothing and gains nothing from the grid that the tests above lack.
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("method", GROUPED)
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("d_max", [1, 2, 4, 16, 64, 1024])
@pytest.mark.parametrize("fanout", [1, 2, 5, 13, 16])
def test_grouped_matches_foundation_at_every_variant(fanout, d_max, replace, method):
    graph, frontier = spanning_graph(fanout, d_max, seed=fanout * d_max)
    args = (graph, frontier, fanout, replace, torch.device("cuda"))
    expect = sample(*args, "foundation", d_max=d_max, seed=d_max)
    got = sample(*args, method, d_max=d_max, seed=d_max)
    assert expect[0].numel() > 0
    for a, b in zip(expect, got):
        assert torch.equal(a, b)


# On the GPU nearly every example is a new (fanout, d_max, replace, method)
# and so new compilations: at the gpu profile's 150 examples this one test
# outlasted 100 s of a 10-minute device call; 40 still meet most of the 168.
@settings(max_examples=min(40, settings.default.max_examples))
@given(graph=graphs(max_degree=80), fanout=st.sampled_from([-1, 0, 1, 2, 5, 13, 16]),
       replace=st.booleans(), method=st.sampled_from(GROUPED),
       d_max=st.sampled_from([1, 2, 4, 16, 64, 1024]), data=st.data())
def test_grouped_matches_foundation_on_random_graphs(device, graph, fanout, replace, method, d_max, data):
    # self-loops, repeated edges, single nodes (graphs()), any d_max vs fanout
    n = data.draw(st.integers(1, 2 * graph.num_nodes))
    frontier = torch.randint(0, graph.num_nodes, (n,), generator=torch.Generator().manual_seed(n))
    expect = sample(graph, frontier, fanout, replace, device, "foundation", d_max, seed=n)
    got = sample(graph, frontier, fanout, replace, device, method, d_max, seed=n)
    for a, b in zip(expect, got):
        assert torch.equal(a, b)


def distinct_row_graph(degrees):
    """Rows whose entries are all different (source id = CSC position), so
    a sampled source names the position it was read from."""
    degrees = torch.as_tensor(degrees)
    indptr = torch.zeros(degrees.numel() + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(degrees, 0)
    num_nodes = max(int(indptr[-1]), degrees.numel())
    indptr = torch.cat([indptr, indptr[-1].repeat(num_nodes - degrees.numel())])
    return CSCGraph(indptr, torch.arange(int(indptr[-1])))


def subsets_of(dst, src, start, count):
    """Bit mask of the row positions each frontier slot drew."""
    return torch.zeros(count, dtype=torch.int64).index_add_(0, dst, 1 << (src - start[dst]))


@pytest.mark.parametrize("method", GROUPED)
@pytest.mark.parametrize("d_max", [64, 2])  # 64: every row staged; 2: rows of degree >= 3 are hubs
def test_small_degree_subsets_are_uniform_exhaustively(device, method, d_max):
    # Every (degree, fanout) with degree <= 6: a node of degree <= fanout
    # takes its row in order; above, every one of the C(degree, fanout)
    # subsets appears, equally often (chi-square, p = 1e-4). Degree 6,
    # fanout 3 has 20 subsets.
    copies = 1200
    degrees = [1, 2, 3, 4, 5, 6]
    graph = distinct_row_graph(degrees)
    for fanout in range(1, 6):
        frontier = torch.arange(len(degrees)).repeat_interleave(copies)
        src, dst, eid = sample(graph, frontier, fanout, False, device, method, d_max, seed=fanout)
        assert torch.equal(src, eid)  # staged or not, the source read is the position drawn
        start, degree = graph.indptr[frontier], graph.degree()[frontier]
        count = degree.clamp(max=fanout)
        assert torch.equal(dst, torch.repeat_interleave(torch.arange(frontier.numel()), count))
        masks = subsets_of(dst, src, start, frontier.numel())
        for node, d in enumerate(degrees):
            mine = masks[frontier == node]
            if d <= fanout:
                assert bool((mine == (1 << d) - 1).all())
                continue
            values, counts = torch.unique(mine, return_counts=True)
            num_subsets = math.comb(d, fanout)
            assert values.numel() == num_subsets, (d, fanout)
            size = (torch.bitwise_and(values[:, None], 1 << torch.arange(d)) != 0).sum(1)
            assert bool((size == fanout).all())
            assert chi_square(counts.double(), copies / num_subsets) < chi_square_critical(num_subsets - 1), \
                (d, fanout)


@pytest.mark.parametrize("method", GROUPED)
@pytest.mark.parametrize("d_max", [64, 4])  # 4: the degree-5 row is a hub, the degree-3 row staged
def test_replacement_draws_are_iid_uniform(device, method, d_max):
    # With replacement every draw is uniform over the row, independently of
    # the others: each position's marginal and each pair of positions' joint
    # law are uniform (chi-square, p = 1e-4). Degree 3 < fanout 4 repeats.
    copies, fanout = 3000, 4
    degrees = [5, 3]
    graph = distinct_row_graph(degrees)
    frontier = torch.arange(len(degrees)).repeat_interleave(copies)
    src, dst, eid = sample(graph, frontier, fanout, True, device, method, d_max, seed=9)
    assert torch.equal(src, eid)
    assert torch.equal(dst, torch.arange(frontier.numel()).repeat_interleave(fanout))
    pick = (src - graph.indptr[frontier[dst]]).view(-1, fanout)  # [slots, fanout] positions
    for node, d in enumerate(degrees):
        mine = pick[frontier == node]
        for j in range(fanout):
            counts = torch.bincount(mine[:, j], minlength=d).double()
            assert chi_square(counts, copies / d) < chi_square_critical(d - 1), (d, j)
        for j, k in itertools.combinations(range(fanout), 2):
            counts = torch.bincount(mine[:, j] * d + mine[:, k], minlength=d * d).double()
            assert chi_square(counts, copies / d**2) < chi_square_critical(d * d - 1), (d, j, k)


@pytest.mark.parametrize("method", GROUPED)
@pytest.mark.parametrize("replace", [False, True])
def test_positions_uniform_around_d_max(device, method, replace):
    # Rows inside the staged width (40), at it (64), just above (65) and a
    # hub (300): every position drawn equally often, and read from the right
    # place. Lanes at the tile's edge (63, 64) are where an off-by-one shows.
    copies, fanout = 1500, 10
    degrees = [40, 64, 65, 300]
    graph = distinct_row_graph(degrees)
    frontier = torch.arange(len(degrees)).repeat_interleave(copies)
    src, dst, eid = sample(graph, frontier, fanout, replace, device, method, 64, seed=4)
    assert torch.equal(src, eid)
    assert torch.equal(dst, torch.arange(frontier.numel()).repeat_interleave(fanout))
    pos = src - graph.indptr[frontier[dst]]
    if not replace:
        assert (dst * 1000 + pos).unique().numel() == pos.numel()
    for node, d in enumerate(degrees):
        counts = torch.bincount(pos[frontier[dst] == node], minlength=d).double()
        assert counts.numel() == d
        assert chi_square(counts, copies * fanout / d) < chi_square_critical(d - 1), d


@pytest.mark.parametrize("d_max", [0, 3, 48, -64, 2048, 64.0, True, "64"])
def test_bad_d_max(d_max):
    graph = csc_from_degrees([3], 1, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="d_max"):
        sample_neighbors(graph.indptr, graph.indices, torch.zeros(1, dtype=torch.int64),
                         torch.zeros(1, dtype=torch.int64), torch.ones(1, dtype=torch.int64), 2,
                         method="grouped", d_max=d_max)


@pytest.mark.parametrize("method", ["Grouped", "gps", None])
def test_bad_method(method):
    graph = csc_from_degrees([3], 1, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="method"):
        sample_neighbors(graph.indptr, graph.indices, torch.zeros(1, dtype=torch.int64),
                         torch.zeros(1, dtype=torch.int64), torch.ones(1, dtype=torch.int64), 2,
                         method=method)


@pytest.mark.parametrize("method", GROUPED)
def test_neighbor_sampler_batches_do_not_depend_on_the_method(device, method):
    # Three hops through the sampler (id map, frontiers of new nodes): the
    # grouped kernels give the foundation kernel's batch exactly.
    gen = torch.Generator().manual_seed(1)
    degrees = torch.randint(0, 40, (120,), generator=gen)
    degrees[:4] = torch.tensor([0, 100, 16, 17])
    graph = csc_from_degrees(degrees, 120, gen).to(device)
    seeds = torch.randperm(120, generator=gen)[:24].to(device)
    out = [NeighborSampler(graph, [6, 4, 3], device=device, method=m, d_max=16, return_eid=True)
           .sample(seeds, torch.Generator().manual_seed(5)) for m in ("foundation", method)]
    for name in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(out[0], name), getattr(out[1], name)), name
    assert out[0].num_sampled_nodes == out[1].num_sampled_nodes
    assert out[0].num_sampled_edges == out[1].num_sampled_edges
    assert out[0].num_sampled_edges[0] > 0


def test_neighbor_sampler_bad_method():
    graph = csc_from_degrees([3], 1, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="method"):
        NeighborSampler(graph, [2], device="cpu", method="gps")
    with pytest.raises(ValueError, match="d_max"):
        NeighborSampler(graph, [2], device="cpu", method="grouped", d_max=100)


@pytest.mark.parametrize("rate, error", [("0.5", TypeError), (True, TypeError), (1.5, ValueError),
                                         (-0.1, ValueError)])
def test_neighbor_sampler_bad_adjacency_hit_rate(rate, error):
    graph = csc_from_degrees([3], 1, torch.Generator().manual_seed(0))
    with pytest.raises(error, match="adjacency_hit_rate"):
        NeighborSampler(graph, [2], device="cpu", adjacency_hit_rate=rate)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_cache_plans_hit_rate_sets_the_visit_order():
    # with the adjacency cache, the sampler sorts each hop's frontier where
    # enough of the expected row reads cross PCIe (the plan's hit rate),
    # else (no rate known, or NaN: a plan without a profile) where enough of
    # the edges lie past the cache; the batches are the same either way
    from tritongnn.kernels import sample as sample_module
    cuda = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(cuda).L2_cache_size
    num_nodes = l2 // 16  # eight edges a node: indices twice the L2
    graph = csc_from_degrees([8] * num_nodes, num_nodes, torch.Generator().manual_seed(0))
    host = graph.pin_memory()
    hot_rows = graph.num_nodes // 2  # half the edges in the cache
    tiers = dict(hot_indptr=graph.indptr[:hot_rows + 1].to(cuda),
                 hot_indices=graph.indices[:int(graph.indptr[hot_rows])].to(cuda))
    share = sample_module.SORT_MIN_UVA_SHARE
    made = {rate: NeighborSampler(host, [3, 2], device=cuda, **tiers, adjacency_hit_rate=rate)
            for rate in (None, float("nan"), 1 - share - 0.05, 1 - share + 0.05)}
    assert [s._kernel.get("sort_frontier") for s in made.values()] == [None, None, True, False]
    seeds = torch.arange(0, graph.num_nodes, 997, device=cuda)
    outs = [s.sample(seeds, torch.Generator().manual_seed(3)) for s in made.values()]
    for out in outs[1:]:
        for name in ("node", "row", "col"):
            assert torch.equal(getattr(out, name), getattr(outs[0], name)), name


def test_each_launching_stream_has_its_own_side_stream(stream_pool):
    # full nodes run on a side stream: one per stream launching on it, so a
    # capture on one stream cannot take in another thread's launches on a
    # shared side stream; a capture stream's side stream is reserved as it is.
    # Streams are compared by handle, as torch's (CUDA's streams faked: this
    # runs on CPU too)
    from tritongnn.kernels import sample_grouped
    from tritongnn.kernels._launch import new_stream, reserved
    producer, capture = new_stream("cuda:0"), new_stream("cuda:0", reserve=True)
    side = sample_grouped._side_stream(producer)
    again = FakeStream("cuda:0", producer.cuda_stream)  # torch.cuda.current_stream(): a new object each call
    assert sample_grouped._side_stream(again) is side  # kept, by handle
    capture_side = sample_grouped._side_stream(capture)
    assert capture_side != side and capture_side.device == side.device == torch.device("cuda", 0)
    assert reserved(capture_side) and not reserved(side)
    assert len({s.cuda_stream for s in (producer, capture, side, capture_side)}) == 4


def test_threads_launching_on_one_stream_draw_one_side_stream(stream_pool, monkeypatch):
    # the first launches of several threads on one stream, at once: one side
    # stream is drawn, and every thread gets it (a loser's stream would stay
    # counted as in use for good)
    import threading
    import time
    from tritongnn.kernels import sample_grouped
    from tritongnn.kernels._launch import new_stream
    drawn = []

    def slow_new_stream(*args, **kwargs):  # widens the window between the check and the draw
        time.sleep(0.05)
        drawn.append(new_stream(*args, **kwargs))
        return drawn[-1]
    monkeypatch.setattr(sample_grouped, "new_stream", slow_new_stream)
    producer = new_stream("cuda:0")
    start, got = threading.Barrier(4), []

    def launch():
        start.wait()
        got.append(sample_grouped._side_stream(FakeStream("cuda:0", producer.cuda_stream)))
    threads = [threading.Thread(target=launch) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(drawn) == 1 and len(got) == 4 and all(side is drawn[0] for side in got)
