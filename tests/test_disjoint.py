"""PyG's ``disjoint=True``: every seed its own subgraph.

The reference is pyg-lib's disjoint loop (``neighbor_kernel.cpp``, what PyG
2.8 calls) written out in Python: nodes keyed by (seed slot, node), the
frontier walked in order, a node's picks in the order drawn. With every
neighbour taken it is deterministic and the sampler must give its output
exactly; with random fanouts the reference replays the picks the sampler
made (``picks_of``), which must each be a valid draw (distinct positions
of the node's own row, ``min(degree, fanout)`` of them), and must then
give back the sampler's layout exactly. Also: the hop-major id map against
its torch reference, the PyG invariants (seeds first, edges within a slot,
real edges, counts), the loader's batches (features by ``n_id``, the
cache, weights, bidirectional edges), PyG's ``NodeLoader`` over
``PyGSampler``, and the refusals.
"""
import collections

import pytest
import torch
from hypothesis import given, strategies as st
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader

from tritongnn import CSCGraph, NeighborLoader, PyGSampler
from tritongnn.kernels import IdMap, reference
from tritongnn.kernels._launch import reference_on_cpu
from tritongnn.sampling import NeighborSampler

from graphs import graphs
from test_loader import random_data


def reference_disjoint(indptr, indices, seeds, num_neighbors, pick):
    """pyg-lib's ``sample<disjoint=true>`` (CSC, directed): ``(node, batch,
    row, col, eid, num_sampled_nodes, num_sampled_edges)`` as lists.
    ``pick(i, slot, v, fanout)`` gives the CSC positions frontier node ``i``
    (global position ``i``, node ``v`` of seed slot ``slot``) takes, in order."""
    nodes = [(slot, int(v)) for slot, v in enumerate(seeds)]
    local = {key: i for i, key in enumerate(nodes)}
    row, col, eid = [], [], []
    num_nodes, num_edges = [len(nodes)], []
    begin, end = 0, len(nodes)
    for fanout in num_neighbors:
        edges_before = len(row)
        for i in range(begin, end):
            slot, v = nodes[i]
            for position in pick(i, slot, v, fanout):
                key = (slot, int(indices[position]))
                if key not in local:
                    local[key] = len(nodes)
                    nodes.append(key)
                row.append(local[key])
                col.append(i)
                eid.append(position)
        num_edges.append(len(row) - edges_before)
        begin, end = end, len(nodes)
        num_nodes.append(end - begin)
    return ([v for _, v in nodes], [s for s, _ in nodes], row, col, eid, num_nodes, num_edges)


def every_neighbour(indptr):
    def pick(i, slot, v, fanout):
        return range(int(indptr[v]), int(indptr[v + 1]))
    return pick


def picks_of(out, indptr, fanouts, replace=False):
    """The reference's ``pick`` replaying ``out``'s draws (its ``edge``: CSC
    positions), each checked to be a valid draw for its node."""
    col, edge = out.col.tolist(), out.edge.tolist()
    by_target = collections.defaultdict(list)
    for target, position in zip(col, edge):
        by_target[target].append(position)
    hop_of = []
    for hop, count in enumerate(out.num_sampled_nodes):
        hop_of += [hop] * count

    def pick(i, slot, v, fanout):
        positions = by_target.get(i, [])
        start, stop = int(indptr[v]), int(indptr[v + 1])
        degree = stop - start
        assert all(start <= p < stop for p in positions), f"node {i}: a pick outside its row"
        if fanout == -1 or (not replace and degree <= fanout):
            assert positions == list(range(start, stop)), f"node {i}: a full row, in order"
        elif replace:
            assert len(positions) == (fanout if degree else 0)
        else:
            assert len(positions) == fanout and len(set(positions)) == fanout, f"node {i}: distinct picks"
        return positions
    return pick


def as_lists(out):
    return [out.node.tolist(), out.batch.tolist(), out.row.tolist(), out.col.tolist(), out.edge.tolist(),
            list(out.num_sampled_nodes), list(out.num_sampled_edges)]


def check_invariants(out, graph, seeds):
    """PyG's invariants of a disjoint batch."""
    node, batch = out.node.cpu(), out.batch.cpu()
    row, col = out.row.cpu(), out.col.cpu()
    n = node.numel()
    assert batch.dtype == torch.int64 and batch.shape == node.shape
    assert torch.equal(node[:seeds.numel()], seeds.cpu())  # seeds first, repeats kept
    assert torch.equal(batch[:seeds.numel()], torch.arange(seeds.numel()))
    assert sum(out.num_sampled_nodes) == n and sum(out.num_sampled_edges) == row.numel()
    assert len(set(zip(batch.tolist(), node.tolist()))) == n  # a node once per slot
    if row.numel():
        assert int(row.max()) < n and int(col.max()) < n
        assert torch.equal(batch[row], batch[col])  # no edge joins two slots
        # every n_id[edge_index] is an edge of the graph (source -> target)
        edges = set(zip(graph.indices.tolist(),
                        torch.repeat_interleave(torch.arange(graph.num_nodes), graph.degree()).tolist()))
        assert set(zip(node[row].tolist(), node[col].tolist())) <= edges
    # within each hop the nodes are grouped by slot (pyg-lib's order)
    at = 0
    for count in out.num_sampled_nodes:
        part = batch[at:at + count]
        assert bool((part[1:] >= part[:-1]).all())
        at += count


@given(graph=graphs(max_nodes=24, max_degree=20), data=st.data())
def test_full_neighbourhoods_equal_pyg_lib_exactly(device, graph, data):
    seeds = torch.tensor(data.draw(st.lists(st.integers(0, graph.num_nodes - 1), min_size=0, max_size=6)),
                         dtype=torch.int64)
    num_neighbors = data.draw(st.lists(st.sampled_from([-1, 64]), min_size=1, max_size=2))
    sampler = NeighborSampler(graph.to(device), num_neighbors, device=device, return_eid=True, disjoint=True)
    out = sampler.sample(seeds.to(device), torch.Generator().manual_seed(0))
    want = reference_disjoint(graph.indptr, graph.indices, seeds.tolist(), num_neighbors,
                              every_neighbour(graph.indptr))
    assert as_lists(out) == list(want)
    check_invariants(out, graph, seeds)


@given(graph=graphs(max_nodes=30, max_degree=40), data=st.data())
def test_random_fanouts_are_valid_draws_in_pyg_lib_s_layout(device, graph, data):
    seeds = torch.tensor(data.draw(st.lists(st.integers(0, graph.num_nodes - 1), min_size=1, max_size=7)),
                         dtype=torch.int64)
    fanouts = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3))
    replace = data.draw(st.booleans())
    sampler = NeighborSampler(graph.to(device), fanouts, replace, device=device, return_eid=True, disjoint=True)
    generator = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    out = sampler.sample(seeds.to(device), generator)
    want = reference_disjoint(graph.indptr, graph.indices, seeds.tolist(), fanouts,
                              picks_of(out, graph.indptr, fanouts, replace))
    assert as_lists(out) == list(want)
    check_invariants(out, graph, seeds)


def test_the_same_seed_twice_is_two_independent_subgraphs(device):
    # one hub with 64 in-neighbours: 8 slots of it drawing 4 each cannot all agree by chance
    indptr = torch.tensor([0, 64] + [64] * 64)
    graph = CSCGraph(indptr, torch.arange(1, 65))
    sampler = NeighborSampler(graph.to(device), [4], device=device, disjoint=True)
    out = sampler.sample(torch.zeros(8, dtype=torch.int64, device=device), torch.Generator().manual_seed(3))
    assert out.num_sampled_nodes == [8, 32] and out.batch.tolist() == [*range(8)] + sum([[k] * 4 for k in range(8)], [])
    picks = {tuple(sorted(out.node[8 + 4 * k:12 + 4 * k].tolist())) for k in range(8)}
    assert len(picks) > 1
    again = sampler.sample(torch.zeros(8, dtype=torch.int64, device=device), torch.Generator().manual_seed(3))
    assert torch.equal(out.node, again.node) and torch.equal(out.row, again.row)


def test_the_reference_path_gives_the_same_layout():
    # the CPU loader's path (no Triton): the pure-torch kernels, disjoint the same way
    graph = random_graph(40, 160, seed=1)
    seeds = torch.tensor([3, 7, 3, 0, 39])
    with reference_on_cpu():
        sampler = NeighborSampler(graph, [3, 2], device="cpu", return_eid=True, disjoint=True)
        out = sampler.sample(seeds, torch.Generator().manual_seed(5))
    want = reference_disjoint(graph.indptr, graph.indices, seeds.tolist(), [3, 2], picks_of(out, graph.indptr, [3, 2]))
    assert as_lists(out) == list(want)
    check_invariants(out, graph, seeds)


def random_graph(num_nodes, num_edges, seed):
    g = torch.Generator().manual_seed(seed)
    return CSCGraph.from_edge_index(torch.randint(0, num_nodes, (2, num_edges), generator=g), num_nodes)


@given(num_nodes=st.integers(1, 60), data=st.data())
def test_hop_major_id_map_matches_reference(device, num_nodes, data):
    k = data.draw(st.integers(1, 5))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    kind = data.draw(st.sampled_from(["direct", "hash"]))
    seeds = torch.randint(0, num_nodes, (k,), generator=g)
    seeds_batch = torch.arange(k)
    maps = [IdMap(num_nodes, k, 4, device, kind=kind, hop_major=True),
            reference.IdMap(num_nodes, k, "cpu", hop_major=True)]
    outs = [[m.start(seeds.to(m.device), seeds_batch.to(m.device)).cpu()] for m in maps]
    num_hops = data.draw(st.integers(1, 3))
    for hop in range(num_hops):
        sizes = data.draw(st.lists(st.integers(0, 12), min_size=k, max_size=k))
        cand = torch.randint(0, num_nodes, (sum(sizes),), generator=g)
        batch = torch.repeat_interleave(torch.arange(k), torch.tensor(sizes))
        ptr = torch.tensor([0] + sizes).cumsum(0)
        count = torch.tensor([cand.numel()])
        last = hop == num_hops - 1
        for m, out in zip(maps, outs):
            dev = m.device
            h = m.insert(cand.to(dev), count.to(dev), batch.to(dev), ptr.to(dev), last=last)
            n = int(h.num_new)
            out += [h.local[:cand.numel()].cpu(), h.new_nodes[:n].cpu(), h.new_batch[:n].cpu(),
                    h.num_new_per_batch.cpu()]
            if not last:
                out.append(h.new_local[:n].cpu())
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    # hop-major: the seeds 0..k-1, then every hop's new nodes after all before them
    assert outs[1][0].tolist() == list(range(k))


def _weighted_data():
    data = random_data()
    g = torch.Generator().manual_seed(2)
    weight = torch.rand(data.edge_index.size(1), generator=g)
    weight[::3] = 0  # never drawn
    data.w = weight
    return data


@pytest.mark.parametrize("options", [dict(), dict(placement="host", cache_budget=40_000),
                                     dict(weight_attr="w"), dict(subgraph_type="bidirectional")])
def test_loader_batches(options):
    data = _weighted_data()
    with reference_on_cpu():  # (the kernels are tested above; this is the loader's assembly)
        loader = NeighborLoader(data, [3, 2], batch_size=6, disjoint=True, shuffle=True, seed=1, device="cpu",
                                **options)
        batches = list(loader)
    assert len(batches) == len(loader)
    for batch in batches:
        n = batch.n_id.numel()
        assert batch.batch.shape == (n,) and batch.batch_size == batch.input_id.numel()
        assert torch.equal(batch.batch[:batch.batch_size], torch.arange(batch.batch_size))
        assert torch.equal(batch.n_id[:batch.batch_size], batch.input_id)  # input_nodes=None: ids are positions
        assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.y, data.y[batch.n_id])
        src, dst = batch.edge_index
        assert torch.equal(batch.batch[src], batch.batch[dst])
        pairs = set(zip(data.edge_index[0].tolist(), data.edge_index[1].tolist()))
        got = set(zip(batch.n_id[src].tolist(), batch.n_id[dst].tolist()))
        if options.get("subgraph_type") == "bidirectional":  # the sampled edges and their reverses
            assert "num_sampled_nodes" not in batch
            assert got <= pairs | {(b, a) for a, b in pairs}
            continue
        assert got <= pairs
        assert sum(batch.num_sampled_nodes) == n and sum(batch.num_sampled_edges) == src.numel()
        assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
        if "weight_attr" in options:
            # a node with at least the hop's fanout of positive weights draws no zero-weight edge
            positive = torch.bincount(data.edge_index[1][data.w > 0], minlength=data.num_nodes)
            fanout = torch.repeat_interleave(torch.tensor([3, 2]), torch.tensor(batch.num_sampled_edges))
            drawn = positive[batch.n_id[dst]] >= fanout
            assert bool(drawn.any()) and bool((data.w[batch.e_id[drawn]] > 0).all())


def test_loader_on_the_triton_path_and_repeated_seeds(device):
    data = random_data()
    loader = NeighborLoader(data, [2, 2], input_nodes=torch.tensor([5, 5, 9, 0, 5]), batch_size=5, disjoint=True,
                            seed=0, device=device, prefetch=0)
    (batch,) = list(loader)
    assert batch.n_id[:5].tolist() == [5, 5, 9, 0, 5] and batch.batch[:5].tolist() == [0, 1, 2, 3, 4]
    assert torch.equal(batch.x.cpu(), data.x[batch.n_id.cpu()])
    sampler = NeighborSampler(CSCGraph.from_edge_index(data.edge_index, data.num_nodes), [2, 2], device="cpu")
    check_invariants(_as_output(batch), sampler.graph, torch.tensor([5, 5, 9, 0, 5]))


def _as_output(batch):
    from torch_geometric.sampler import SamplerOutput
    return SamplerOutput(node=batch.n_id, row=batch.edge_index[0], col=batch.edge_index[1], edge=None,
                         batch=batch.batch,
                         num_sampled_nodes=batch.num_sampled_nodes, num_sampled_edges=batch.num_sampled_edges)


def test_pyg_node_loader_over_pyg_sampler():
    g = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(50, 4, generator=g), edge_index=torch.randint(0, 50, (2, 200), generator=g))
    with reference_on_cpu():
        sampler = PyGSampler(data, [3, 2], device="cpu", disjoint=True)
        batches = list(NodeLoader(data, sampler, input_nodes=torch.arange(12), batch_size=4))
    for batch in batches:
        assert torch.equal(batch.batch[:4], torch.arange(4)) and batch.batch.numel() == batch.n_id.numel()
        assert torch.equal(batch.x, data.x[batch.n_id])
        assert torch.equal(batch.batch[batch.edge_index[0]], batch.batch[batch.edge_index[1]])


def test_refusals():
    graph = random_graph(10, 30, seed=0)
    with pytest.raises(ValueError, match="disjoint=True is not supported with subgraph_type='induced'"):
        NeighborSampler(graph, [2], device="cpu", disjoint=True, subgraph_type="induced")
    with pytest.raises(TypeError, match="disjoint must be a bool"):
        NeighborSampler(graph, [2], device="cpu", disjoint="yes")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: run with -m gpu on the GPU machine")
@pytest.mark.parametrize("num_nodes", [200, 3000])
def test_replayed_disjoint_batches_equal_eager_ones(num_nodes, monkeypatch):
    # captured per batch size, replayed: the same batches as eager hops, on a
    # direct table and (the table made too small for B x N words) a hash map
    from tritongnn.kernels import id_map as id_map_module
    if num_nodes == 3000:
        monkeypatch.setattr(id_map_module, "DIRECT_MAX_BYTES", 8 * num_nodes * 8)
    graph = random_graph(num_nodes, 20 * num_nodes, seed=4).to("cuda")
    replayed = NeighborSampler(graph, [5, 3, 2], device="cuda", disjoint=True, return_eid=True)
    eager = NeighborSampler(graph, [5, 3, 2], device="cuda", disjoint=True, return_eid=True, cuda_graph=False)
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    for step in range(4):
        seeds = torch.randint(0, num_nodes, (64,), generator=torch.Generator().manual_seed(step)).cuda()
        a, b = replayed.sample(seeds, g1), eager.sample(seeds, g2)
        assert as_lists(a) == as_lists(b)
        check_invariants(a, graph.to("cpu"), seeds)
    assert replayed._captured.get((64, 64)) is not None


def test_the_fused_kernel_is_not_taken_for_disjoint_batches():
    # its edge_ptr tile is K + 1 = B + 1 wide in every program: the classifier's kernels instead
    graph = random_graph(10, 30, seed=0)
    assert NeighborSampler(graph, [2], device="cpu", method="fused", disjoint=True)._kernel["method"] == "foundation"
    assert NeighborSampler(graph, [2], device="cpu", method="fused")._kernel["method"] == "fused"
    assert NeighborSampler(graph, [2], device="cpu", method="grouped", disjoint=True)._kernel["method"] == "grouped"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: run with -m gpu on the GPU machine")
def test_large_disjoint_batch_on_the_gpu():
    # thousands of slots in one launch (method "auto" on a graph in GPU memory), with the CUDA graph
    graph = random_graph(50_000, 500_000, seed=5)
    sampler = NeighborSampler(graph.to("cuda"), [10, 5], device="cuda", return_eid=True, disjoint=True)
    seeds = torch.randint(0, 50_000, (4096,), generator=torch.Generator().manual_seed(0)).cuda()
    for _ in range(2):
        out = sampler.sample(seeds, torch.Generator().manual_seed(1))
        check_invariants(out, graph, seeds)
    want = reference_disjoint(graph.indptr, graph.indices, seeds.tolist(), [10, 5],
                              picks_of(out, graph.indptr, [10, 5]))
    assert as_lists(out) == list(want)
