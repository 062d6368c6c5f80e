"""The one-pass sampler (``method="fused"``): its look-back scan on its own,
and its hops against the foundation kernel's across many blocks.

``test_sample_grouped.py`` runs the fused method through every grouped test
(bit-identity with the foundation kernel, the distribution tests); its
frontiers fit one block of the interpreter's tile, so the look-back is
trivial there. Here frontiers span many blocks, super-batches cross block
edges, and the look-back walks status words a block's predecessors left in
every state a GPU run can leave them in (under the interpreter, programs run
one after another, so each finds its predecessors done).
"""
import itertools

import pytest
import torch
import triton
import triton.language as tl

from graphs import csc_from_degrees
from tritongnn.kernels import sample_neighbors
from tritongnn.kernels.sample_fused import LOOK_BACK, _look_back, _publish_sum


@triton.jit
def _look_back_probe(status, ticket, block_sum, out, WINDOW: tl.constexpr):
    _publish_sum(status, tl.load(ticket), tl.load(block_sum))
    tl.store(out, _look_back(status, tl.load(ticket), tl.load(block_sum), WINDOW))


def published(values, flags):
    return [(v << 2) | f for v, f in zip(values, flags)]


# (blocks before the one probed, where the nearest inclusive prefix is or
# None): a prefix just before, inside the first window, one window back
# exactly, several windows back, and none at all (every block only its sum)
@pytest.mark.parametrize("ticket, nearest", [(0, None), (1, 0), (5, 4), (5, 0), (LOOK_BACK, 0),
                                             (LOOK_BACK + 1, 0), (LOOK_BACK + 1, 1), (3 * LOOK_BACK + 7, 12),
                                             (3 * LOOK_BACK + 7, None), (2 * LOOK_BACK, LOOK_BACK - 1)])
def test_look_back_adds_sums_back_to_the_nearest_prefix(device, ticket, nearest):
    gen = torch.Generator().manual_seed(ticket)
    sums = torch.randint(0, 1000, (ticket,), generator=gen).tolist()
    flags = [1] * ticket
    expect = sum(sums)
    if nearest is not None:
        # the nearest prefix carries the sum of blocks 0..nearest (plus noise
        # the walk must not add twice: blocks before it hold only their sums)
        flags[nearest] = 2
        sums[nearest] = sum(sums[:nearest + 1])
        expect = sum(sums[nearest:])
    status = torch.tensor([ticket + 1] + published(sums, flags) + [0, 0], dtype=torch.int64, device=device)
    out = torch.empty(1, dtype=torch.int64, device=device)
    _look_back_probe[(1,)](status, torch.tensor([ticket], device=device), torch.tensor([77], device=device), out,
                           WINDOW=LOOK_BACK)
    assert int(out) == expect
    assert int(status[1 + ticket]) == ((expect + 77) << 2) | 2  # its own inclusive prefix, published
    assert status[1:1 + ticket].tolist() == published(sums, flags)  # predecessors untouched


def hop(graph, frontier, fanout, replace, device, method, bound_slack=7, **kw):
    n = frontier.numel()
    padded = torch.cat([frontier, torch.full((bound_slack,), 10**12)]).to(device)
    indices = graph.indices.to(torch.int32).to(device)
    return sample_neighbors(graph.indptr.to(device), indices, padded, torch.arange(n + bound_slack, device=device) + 5,
                            torch.tensor([n], device=device), fanout, replace, return_eid=True, method=method,
                            d_max=16, **kw)


def assert_same_hop(a, b):
    assert torch.equal(a.edge_ptr.cpu(), b.edge_ptr.cpu())
    e = int(a.num_edges)
    assert int(b.num_edges) == e
    for x, y in ((a.src, b.src), (a.dst, b.dst), (a.eid, b.eid), (a.batch, b.batch)):
        assert (x is None and y is None) or torch.equal(x[:e].cpu(), y[:e].cpu())


def many_block_graph(seed=0):
    gen = torch.Generator().manual_seed(seed)
    degrees = torch.randint(0, 40, (3000,), generator=gen).tolist()
    return csc_from_degrees(degrees, len(degrees), gen), gen


# fanout 33: past the 32 draws a node the lane path unrolls, on the tile; degrees reach 39
@pytest.mark.parametrize("fanout, replace", [(3, False), (10, False), (3, True), (33, False)])
def test_fused_hops_across_many_blocks_are_the_foundation_hops(device, fanout, replace):
    graph, gen = many_block_graph()
    frontier = torch.randint(0, graph.num_nodes, (2000,), generator=gen)  # 8+ blocks of the interpreter's 256
    seed = torch.tensor([5], device=device)
    assert_same_hop(hop(graph, frontier, fanout, replace, device, "foundation", seed=seed),
                    hop(graph, frontier, fanout, replace, device, "fused", seed=seed))


@pytest.mark.parametrize("replace", [False, True])  # each sub-batch's seed in Floyd's steps, and in i.i.d. draws
@pytest.mark.parametrize("sizes", [[300, 0, 900, 800], [256, 256, 1488], [1, 1999], [2000]])
def test_fused_super_batch_hops_are_the_foundation_hops(device, sizes, replace):
    # sub-batches of any length, empty ones, edges on block boundaries
    graph, gen = many_block_graph(1)
    n = sum(sizes)
    frontier = torch.randint(0, graph.num_nodes, (n,), generator=gen)
    ptr = torch.tensor([0] + list(itertools.accumulate(sizes)), device=device)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes), output_size=n)
    kw = dict(frontier_batch=torch.cat([batch, batch.new_full((7,), len(sizes) - 1)]).to(device), batch_ptr=ptr,
              seed=torch.arange(len(sizes), device=device) + 11)
    assert_same_hop(hop(graph, frontier, 4, replace, device, "foundation", **kw),
                    hop(graph, frontier, 4, replace, device, "fused", **kw))


@pytest.mark.parametrize("n, slack", [(0, 5), (256, 0), (512, 0), (255, 1), (700, 0)])
def test_fused_hop_at_buffer_and_block_ends(device, n, slack):
    # the end marker (position num_frontier) on a block boundary, at the
    # buffer's end, and an empty frontier: edge_ptr is still written
    graph, gen = many_block_graph(2)
    frontier = torch.randint(0, graph.num_nodes, (n,), generator=gen)
    seed = torch.tensor([3], device=device)
    got = hop(graph, frontier, 5, False, device, "fused", bound_slack=slack, seed=seed)
    assert_same_hop(hop(graph, frontier, 5, False, device, "foundation", bound_slack=slack, seed=seed), got)
    assert int(got.edge_ptr[0]) == 0


def test_fused_count_past_the_buffer_is_the_buffer(device):
    # num_frontier larger than the frontier buffer: every slot counts, as the
    # classifier clamps it
    graph, gen = many_block_graph(3)
    frontier = torch.randint(0, graph.num_nodes, (600,), generator=gen).to(device)
    args = (graph.indptr.to(device), graph.indices.to(device), frontier, torch.arange(600, device=device),
            torch.tensor([10**6], device=device), 6)
    seed = torch.tensor([1], device=device)
    a = sample_neighbors(*args, seed=seed)
    b = sample_neighbors(*args, seed=seed, method="fused")
    assert_same_hop(a, b)
    assert int(b.num_edges) > 0


def test_auto_takes_the_fused_kernel_where_every_row_is_in_gpu_memory(device):
    from tritongnn.kernels.sample import auto_method
    graph, gen = many_block_graph(4)
    indices = graph.indices.to(device)
    gpu = device.type == "cuda"
    assert auto_method(indices, None, device) == ("fused" if gpu else "foundation")  # (the interpreter: foundation)
    if gpu:  # every row via UVA: GARDEN's grouped kernels, one kernel where the frontier is read in node order
        host = graph.indices.pin_memory()
        assert auto_method(host, None, device) == "grouped_split"
        assert auto_method(host, None, device, sorted_visits=True) == "grouped"
        # an adjacency cache (hot rows in GPU memory, cold ones via UVA): the
        # foundation kernel in frontier order, the grouped one in node order
        assert auto_method(host, indices[:10], device) == "foundation"
        assert auto_method(host, indices[:10], device, sorted_visits=True) == "grouped"
    # node order asked for in GPU memory: not the fused kernel, which cannot read in it
    assert auto_method(indices, None, device, sorted_visits=True) == ("grouped" if gpu else "foundation")
    # and "auto" samples the same hop as either
    frontier = torch.randint(0, graph.num_nodes, (900,), generator=gen)
    seed = torch.tensor([2], device=device)
    assert_same_hop(hop(graph, frontier, 5, False, device, "foundation", seed=seed),
                    hop(graph, frontier, 5, False, device, "auto", seed=seed))


@pytest.mark.parametrize("num_frontier", [3, torch.tensor([3], dtype=torch.int32), torch.tensor([1, 2])])
def test_fused_refuses_a_bad_count(device, num_frontier):
    # the fused path skips the classifier, whose check this was: it checks the count itself
    graph, _ = many_block_graph(5)
    frontier = torch.arange(4, device=device)
    if isinstance(num_frontier, torch.Tensor):
        num_frontier = num_frontier.to(device)
    with pytest.raises(TypeError, match="num_frontier must be a"):
        sample_neighbors(graph.indptr.to(device), graph.indices.to(device), frontier, frontier, num_frontier, 3,
                         seed=torch.tensor([1], device=device), method="fused")
