"""PyG's ``subgraph_type``: the induced kernel against its torch reference
and a brute-force count over ``edge_index``, bidirectional edges against
PyG's own ``to_bidirectional``, the loader's batches (with and without the
cache, super-batched, through PyG's ``NodeLoader``), and bad values."""
import collections
import warnings

import pytest
import torch
from hypothesis import given, strategies as st
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import SamplerOutput
from torch_geometric.sampler.base import SubgraphType

from tritongnn import CSCGraph, NeighborLoader, PyGSampler
from tritongnn.kernels import IdMap, reference
from tritongnn.kernels._launch import reference_on_cpu
from tritongnn.kernels.subgraph import bidirectional_edges, induced_edges
from tritongnn.sampling import NeighborSampler

from graphs import graphs
from test_loader import assert_same_batches, random_data
from test_pyg_parity import small_data


def brute_induced(edge_index, n_id):
    """``Counter`` of ``(target position, source position)``: every edge of
    ``edge_index`` (``[2, E]`` global) between two of ``n_id``, as often as
    the graph holds it; a repeated node's first position is its source id,
    every position of it is a target of its own."""
    first = {}
    for i, v in enumerate(n_id.tolist()):
        first.setdefault(v, i)
    count = collections.Counter()
    for i, v in enumerate(n_id.tolist()):
        for u in edge_index[0][edge_index[1] == v].tolist():
            if u in first:
                count[(i, first[u])] += 1
    return count


def counter_of(src, dst):
    return collections.Counter(zip(dst.tolist(), src.tolist()))


@given(graph=graphs(), data=st.data())
def test_induced_edges_equal_the_reference_and_every_edge_between_the_nodes(device, graph, data):
    # nodes drawn with repeats (a repeated seed keeps its own position);
    # the first A rows read from a GPU copy while the full arrays' copies of
    # them are poisoned, so a read from the wrong tier shows
    n = data.draw(st.integers(0, 2 * graph.num_nodes))
    nodes = torch.randint(0, graph.num_nodes, (n,), generator=torch.Generator().manual_seed(n))
    kind = data.draw(st.sampled_from(["direct", "hash"]))
    num_hot = data.draw(st.integers(0, graph.num_nodes))
    want = reference.induced_edges(graph.indptr, graph.indices, nodes, return_eid=True)
    pos = want[2]
    # the reference is torch-sparse's loop: each edge of the graph between two nodes, once per CSC entry
    targets = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.degree())
    csc_edges = torch.stack([graph.indices.long(), targets])
    assert counter_of(*want[:2]) == brute_induced(csc_edges, nodes)
    assert torch.equal(nodes[want[0]], graph.indices[pos].long()) and bool((want[1][1:] >= want[1][:-1]).all())
    tiers = {}
    indptr, indices = graph.indptr.clone(), graph.indices.clone()
    if num_hot:
        hot_edges = int(graph.indptr[num_hot])
        tiers = dict(hot_indptr=graph.indptr[:num_hot + 1].to(device), hot_indices=graph.indices[:hot_edges].to(device))
        indptr[:num_hot] = -(10**9)
        indices[:hot_edges] = -7
    if device.type == "cuda" and data.draw(st.booleans()):
        indptr, indices = indptr.pin_memory(), indices.pin_memory()  # read through UVA
    else:
        indptr, indices = indptr.to(device), indices.to(device)
    id_map = IdMap(graph.num_nodes, 1, 4, device, kind=kind)
    for _ in range(2):  # the map restarted: the second batch forgets the first
        got = induced_edges(indptr, indices, nodes.to(device), id_map, return_eid=True, **tiers)
        for a, b in zip(want, got):
            assert a.dtype == b.dtype and torch.equal(a, b.cpu())
    src, dst, none = induced_edges(graph.indptr.to(device), graph.indices.to(device), nodes.to(device))
    assert none is None and torch.equal(src.cpu(), want[0]) and torch.equal(dst.cpu(), want[1])


def pyg_bidirectional(row, col, edge):
    out = SamplerOutput(node=torch.arange(int(max(row.max(), col.max())) + 1 if row.numel() else 0), row=row,
                        col=col, edge=edge, num_sampled_nodes=[1], num_sampled_edges=[row.numel()])
    return out.to_bidirectional()


@pytest.mark.parametrize("num_edges", [0, 1, 7, 200])
def test_bidirectional_edges_as_pyg_to_bidirectional(device, num_edges):
    g = torch.Generator().manual_seed(num_edges)
    row, col = torch.randint(0, 12, (2, num_edges), generator=g)
    row[::5] = col[::5]  # self-loops: their reverse is themselves
    if num_edges > 4:
        row[3], col[3] = col[2], row[2]  # a pair sampled both ways
        row[4], col[4] = row[2], col[2]  # a repeated edge
    edge = torch.randperm(1000, generator=g)[:num_edges]
    pyg = pyg_bidirectional(row, col, edge)
    src, dst, e_id = bidirectional_edges(row.to(device), col.to(device), edge.to(device), 12)
    assert torch.equal(src.cpu(), pyg.row) and torch.equal(dst.cpu(), pyg.col)
    assert pyg.num_sampled_nodes is None and pyg.num_sampled_edges is None
    # PyG keeps any id of a pair's copies (reduce="any"); ours: the first
    # sampled edge of the pair, else its first reverse
    ids = collections.defaultdict(list)
    for r, c, e in zip(row.tolist(), col.tolist(), edge.tolist()):
        ids[(r, c)].append(e)
    for r, c, e in zip(row.tolist(), col.tolist(), edge.tolist()):
        ids[(c, r)].append(e)
    assert [ids[pair][0] for pair in zip(src.tolist(), dst.tolist())] == e_id.tolist()
    assert src.shape == dst.shape == e_id.shape
    assert bidirectional_edges(row, col, None, 12)[2] is None


def loader(data, subgraph_type, device="cpu", **kwargs):
    args = dict(num_neighbors=[3, 2], batch_size=16, shuffle=True, seed=5, input_nodes=data.train_mask,
                device=device, subgraph_type=subgraph_type)
    args.update(kwargs)
    return NeighborLoader(data, **args)


def check_induced(batch, data):
    n_id = batch.n_id.cpu()
    src, dst = batch.edge_index.cpu()
    assert counter_of(src, dst) == brute_induced(data.edge_index, n_id)
    assert bool((dst[1:] >= dst[:-1]).all())  # grouped by target in local order
    assert "num_sampled_nodes" not in batch and "num_sampled_edges" not in batch
    if "e_id" in batch:  # each edge is the graph's edge e_id, its attributes those of it
        e_id = batch.e_id.cpu()
        assert torch.equal(data.edge_index[:, e_id], n_id[batch.edge_index.cpu()])
        assert "edge_attr" not in data or torch.equal(batch.edge_attr.cpu(), data.edge_attr[e_id])
        assert e_id.unique().numel() == e_id.numel()  # each of the graph's edges at most once


def check_bidirectional(batch, directional, data):
    assert torch.equal(batch.n_id, directional.n_id) and torch.equal(batch.x, directional.x)
    src, dst = directional.edge_index.cpu()
    want = set(zip(src.tolist(), dst.tolist())) | set(zip(dst.tolist(), src.tolist()))
    pairs = list(zip(*batch.edge_index.cpu().tolist()))
    assert len(pairs) == len(set(pairs)) and set(pairs) == want
    assert pairs == sorted(pairs, key=lambda p: (p[1], p[0]))
    assert "num_sampled_nodes" not in batch and "num_sampled_edges" not in batch
    if "e_id" in batch:  # the id of the edge sampled, or of the one it reverses
        n_id = batch.n_id.cpu()
        ends = data.edge_index[:, batch.e_id.cpu()]
        global_pairs = n_id[batch.edge_index.cpu()]
        assert bool(((ends == global_pairs).all(0) | (ends == global_pairs.flip(0)).all(0)).all())
        assert "edge_attr" not in data or torch.equal(batch.edge_attr.cpu(), data.edge_attr[batch.e_id.cpu()])


@pytest.mark.parametrize("edge_attr", [False, True])
def test_loader_subgraph_types_keep_the_nodes_and_give_their_edges(device, edge_attr):
    data = random_data(num_nodes=120, num_edges=900, edge_attr=edge_attr)
    directional = list(loader(data, "directional", device))
    induced = list(loader(data, "induced", device))
    bidirectional = list(loader(data, SubgraphType.bidirectional, device))
    assert len(directional) == len(induced) == len(bidirectional)
    for d, i, b in zip(directional, induced, bidirectional, strict=True):
        assert torch.equal(i.n_id, d.n_id) and torch.equal(i.x, d.x) and torch.equal(i.y, d.y)
        assert i.batch_size == d.batch_size and torch.equal(i.input_id, d.input_id)
        assert "e_id" in i and "e_id" in b  # with edge attributes or without, as PyG's
        check_induced(i, data)
        check_bidirectional(b, d, data)


def test_subgraph_types_on_the_cpu_path():
    # without Triton's interpreter the loader runs the kernels' references
    data = random_data(num_nodes=120, num_edges=900, edge_attr=True)
    with reference_on_cpu():
        batches = zip(loader(data, "directional"), loader(data, "induced"), loader(data, "bidirectional"),
                      strict=True)
        for directional, induced, bidirectional in batches:
            assert torch.equal(induced.n_id, directional.n_id)
            check_induced(induced, data)
            check_bidirectional(bidirectional, directional, data)


@pytest.mark.parametrize("subgraph_type", ["induced", "bidirectional"])
@pytest.mark.parametrize("budget_rows", [0, 40, 10**6])
def test_cached_subgraph_batches_equal_uncached(device, subgraph_type, budget_rows):
    # the cache's relabelled ids (and its GPU prefix of the adjacency) are
    # invisible: the same batches, in user ids
    data = random_data(num_nodes=150, num_edges=1200, edge_attr=True)
    plain = list(loader(data, subgraph_type, device))
    cached_loader = loader(data, subgraph_type, device, placement="host", profile_epochs=1,
                           cache_budget=budget_rows * data.x.size(1) * data.x.element_size())
    cached = list(cached_loader)
    assert_same_batches(cached, plain)
    assert cached_loader.stats["batches"] == len(cached)  # the cache's counters take these batches too
    if subgraph_type == "induced":
        for batch in cached:
            check_induced(batch, data)


@pytest.mark.parametrize("subgraph_type", ["induced", "bidirectional"])
def test_super_batched_subgraph_batches_equal_single_ones(subgraph_type):
    data = random_data(num_nodes=150, num_edges=1200, edge_attr=True)
    assert_same_batches(list(loader(data, subgraph_type, super_batch=3)), list(loader(data, subgraph_type)))


@pytest.mark.parametrize("subgraph_type", ["induced", "bidirectional"])
def test_subgraph_batches_are_never_replayed(subgraph_type):
    # the replayed batch (hops, copy-out and gather in graphs) has no pass for
    # the subgraph's edges: the loader builds these batches as it would
    # without replay, the sampler gives no PackedBatch
    data = random_data(num_nodes=120, num_edges=900)
    directional = loader(data, "directional")
    directional.replay.eager_on_cpu = True
    assert directional._replays_batches() and directional.sampler.packed_batch(16) is not None
    ours = loader(data, subgraph_type)
    ours.replay.eager_on_cpu = True
    assert not ours._replays_batches() and ours.sampler.packed_batch(16) is None
    assert_same_batches(list(ours), list(loader(data, subgraph_type)))


class PyGBidirectional(PyGSampler):
    """Our directional sampler, its outputs made bidirectional by PyG's own
    ``SamplerOutput.to_bidirectional`` (what PyG's ``NeighborSampler`` does
    for ``subgraph_type="bidirectional"``)."""

    def sample_from_nodes(self, index, **kwargs):
        out = super().sample_from_nodes(index, **kwargs)
        return out.to_bidirectional()


def test_bidirectional_batches_as_pyg_makes_them():
    # PyG's NodeLoader over PyG's to_bidirectional: the same batches, but for
    # e_id, of which PyG keeps an unspecified copy of a pair sampled both ways
    data = small_data()
    ours = NeighborLoader(data, [3, 2], batch_size=8, device="cpu", seed=7, subgraph_type="bidirectional")
    pyg = NodeLoader(data, PyGBidirectional(data, [3, 2], device="cpu", seed=7), batch_size=8)
    for a, b in zip(ours, pyg, strict=True):
        assert set(a.keys()) == set(b.keys())
        for key in b.keys():
            if key in ("e_id", "edge_attr"):
                continue
            assert torch.equal(a[key], b[key]) if isinstance(b[key], torch.Tensor) else a[key] == b[key], key
        ends = data.edge_index[:, a.e_id]
        pairs = a.n_id[a.edge_index]
        assert bool(((ends == pairs).all(0) | (ends == pairs.flip(0)).all(0)).all())
        # where a pair has one id to keep, PyG's is ours
        single = a.e_id == b.e_id
        assert bool(single.float().mean() > 0.5) and torch.equal(a.edge_attr[single], b.edge_attr[single])


def torch_sparse_induced(data, n_id):
    """torch-sparse's ``neighbor_sample(directed=False)`` edge loop over
    PyG's own CSC (``torch_geometric.sampler.utils.to_csc``), in Python:
    ``(row, col, e_id)``."""
    from torch_geometric.sampler.utils import to_csc
    colptr, row, perm = to_csc(data, device="cpu")
    local = {}
    for i, v in enumerate(n_id.tolist()):
        local.setdefault(v, i)
    rows, cols, edges = [], [], []
    for i, w in enumerate(n_id.tolist()):
        for offset in range(int(colptr[w]), int(colptr[w + 1])):
            v = int(row[offset])
            if v in local:
                rows.append(local[v]), cols.append(i), edges.append(int(perm[offset]))
    return torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long), torch.tensor(edges)


def test_induced_batches_as_torch_sparse_gives_them():
    # PyG samples induced subgraphs with torch-sparse (not installed here):
    # its loop over PyG's CSC, for our batches' nodes. Targets in local
    # order; a target's edges in CSC order (ours: edge_index order, PyG's
    # that of its unstable sort), compared as e_ids per target.
    data = small_data()
    ours = NeighborLoader(data, [3, 2], batch_size=8, device="cpu", seed=7, subgraph_type="induced")
    for batch in ours:
        row, col, e_id = torch_sparse_induced(data, batch.n_id)
        assert torch.equal(batch.edge_index[1], col)
        per_target = collections.defaultdict(list)
        for c, e in zip(col.tolist(), e_id.tolist()):
            per_target[c].append(e)
        for c in per_target:
            mine = batch.e_id[batch.edge_index[1] == c]
            assert sorted(mine.tolist()) == sorted(per_target[c])
            assert mine.tolist() == sorted(mine.tolist())  # the graph's order: edge_index's, stable
        src_of = dict(zip(e_id.tolist(), row.tolist()))
        assert [src_of[e] for e in batch.e_id.tolist()] == batch.edge_index[0].tolist()


@pytest.mark.parametrize("subgraph_type", ["induced", "bidirectional"])
def test_pyg_sampler_gives_the_loader_batches(subgraph_type):
    # the two seams, our loader and PyG's NodeLoader over PyGSampler, agree
    data = small_data()
    ours = NeighborLoader(data, [3, 2], batch_size=8, device="cpu", seed=7, subgraph_type=subgraph_type)
    pyg = NodeLoader(data, PyGSampler(data, [3, 2], device="cpu", seed=7, subgraph_type=subgraph_type),
                     batch_size=8)
    assert_same_batches(ours, pyg)


def test_directed_false_is_pyg_deprecated_induced():
    data = small_data()
    with pytest.warns(UserWarning, match="The usage of the 'directed' argument in 'NeighborSampler' is "
                                         "deprecated. Use `subgraph_type='induced'` instead.") as record:
        # (as PyG's, directed=False wins over subgraph_type)
        old = NeighborLoader(data, [3, 2], batch_size=8, device="cpu", seed=7, directed=False,
                             subgraph_type="bidirectional")
    assert record[0].filename == __file__  # pointing at the caller's line
    assert old.sampler.subgraph_type == "induced"
    assert_same_batches(old, NeighborLoader(data, [3, 2], batch_size=8, device="cpu", seed=7,
                                            subgraph_type="induced"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        NeighborLoader(data, [3], batch_size=8, device="cpu", directed=True, subgraph_type="directional")


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(subgraph_type="undirected"), ValueError, "subgraph_type must be one of .*'undirected'"),
    (dict(subgraph_type="Induced"), ValueError, "subgraph_type .*'Induced'"),
    (dict(subgraph_type=None), TypeError, "subgraph_type must be .* got NoneType None"),
    (dict(subgraph_type=2), TypeError, "subgraph_type .* got int 2"),
    (dict(directed="no"), TypeError, "directed must be a bool.* got str 'no'"),
])
def test_bad_subgraph_type(kwargs, error, match):
    with pytest.raises(error, match=match):
        NeighborLoader(small_data(), [3], batch_size=8, device="cpu", **kwargs)
    if "subgraph_type" in kwargs:
        with pytest.raises(error, match=match):
            NeighborSampler(CSCGraph.from_edge_index(small_data().edge_index, 60), [3], device="cpu", **kwargs)


def test_induced_edges_bad_arguments():
    indptr, indices = torch.tensor([0, 1, 2]), torch.tensor([1, 0])
    with pytest.raises(TypeError, match="nodes must be a 1-D int64"):
        induced_edges(indptr, indices, torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(TypeError, match="indptr"):
        induced_edges(indptr.int(), indices, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="hot_indptr and hot_indices"):
        induced_edges(indptr, indices, torch.tensor([0, 1]), hot_indptr=indptr[:2])
