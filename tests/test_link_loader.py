"""``tritongnn.LinkNeighborLoader`` and ``PyGSampler.sample_from_edges`` as PyG
2.8's link loader: positives are the supervision edges, negatives follow the
asked distribution, labels and triplet indices line up with ``n_id``, and
the layout is PyG's (PyG's own ``edge_sample`` and ``LinkLoader`` as the
references: PyG itself samples only with pyg-lib or torch-sparse)."""
import math

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import LinkLoader
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, SamplerOutput
from torch_geometric.sampler.neighbor_sampler import edge_sample

from tritongnn import LinkNeighborLoader, PyGSampler
from tritongnn.sampling.link import LinkBatches, draw_nodes

from test_loader import assert_same_batches
from test_sample import chi_square, chi_square_critical


def link_data(num_nodes=30, num_edges=120, seed=0):
    g = torch.Generator().manual_seed(seed)
    data = Data(x=torch.randn(num_nodes, 4, generator=g),
                edge_index=torch.randint(0, num_nodes, (2, num_edges), generator=g))
    data.edge_attr = torch.arange(num_edges, dtype=torch.float32)  # batches carry e_id with it
    return data


def pairs(edge_index):
    return set(map(tuple, edge_index.t().tolist()))


def check_subgraph(batch, data):
    """Seeds first, every sampled edge a real edge (by ``e_id`` too)."""
    batch = batch.to("cpu")
    assert batch.n_id.unique().numel() == batch.n_id.numel()
    glob = batch.n_id[batch.edge_index]
    assert torch.equal(glob, data.edge_index[:, batch.e_id])
    assert batch.num_sampled_nodes is None or sum(batch.num_sampled_nodes) == batch.n_id.numel()
    assert torch.equal(batch.x, data.x[batch.n_id])


@pytest.mark.parametrize("mode", [None, "binary", "triplet"])
def test_positives_negatives_and_labels_line_up(device, mode):
    data = link_data()
    label_index = torch.randint(0, 30, (2, 21), generator=torch.Generator().manual_seed(1))
    label_index[:, :10] = data.edge_index[:, :10]  # some real edges among them
    neg = None if mode is None else NegativeSampling(mode, 2)
    before = label_index.clone()
    loader = LinkNeighborLoader(data, [3, 2], edge_label_index=label_index, neg_sampling=neg, batch_size=8,
                                shuffle=True, device=device, seed=3)
    assert len(loader) == 3 and str(loader) == "LinkNeighborLoader()"
    seen = []
    for batch in loader:
        check_subgraph(batch, data)
        b = batch.to("cpu")
        num_pos = b.input_id.numel()
        seen.append(b.input_id)
        assert "batch_size" not in b
        pos = label_index[:, b.input_id]
        seeds = b.n_id[:b.num_sampled_nodes[0]]
        if mode == "triplet":
            assert torch.equal(b.n_id[b.src_index], pos[0]) and torch.equal(b.n_id[b.dst_pos_index], pos[1])
            assert b.dst_neg_index.shape == (num_pos, 2) and "edge_label_index" not in b
            ends = torch.cat([pos.reshape(-1), b.n_id[b.dst_neg_index].reshape(-1)])
        else:
            eli = b.n_id[b.edge_label_index]
            assert torch.equal(eli[:, :num_pos], pos)
            if mode is None:
                assert eli.size(1) == num_pos and "edge_label" not in b
            else:
                assert eli.size(1) == 3 * num_pos
                assert b.edge_label.dtype == torch.float32
                assert b.edge_label.tolist() == [1.0] * num_pos + [0.0] * (2 * num_pos)
            ends = eli.reshape(-1)
        # the seeds are the distinct endpoints, in order of first appearance
        assert seeds.tolist() == list(dict.fromkeys(ends.tolist()))
    assert sorted(torch.cat(seen).tolist()) == list(range(21))
    assert torch.equal(label_index, before)


def full_sample_fn(data):
    """PyG's ``sample_fn`` for ``edge_sample`` sampling every neighbour, two
    hops (fanout -1: a deterministic subgraph), as a ``SamplerOutput``."""
    src, dst = data.edge_index

    def sample(seed, seed_time):
        node = seed.tolist()
        where = {n: i for i, n in enumerate(node)}
        frontier, rows, cols, eids, counts, ecounts = list(node), [], [], [], [len(node)], []
        for _ in range(2):
            new, edges = [], 0
            for v in frontier:
                for e in torch.nonzero(dst == v).flatten().tolist():
                    u = int(src[e])
                    if u not in where:
                        where[u] = len(node)
                        node.append(u)
                        new.append(u)
                    rows.append(where[u])
                    cols.append(where[v])
                    eids.append(e)
                    edges += 1
            frontier = new
            counts.append(len(new))
            ecounts.append(edges)
        return SamplerOutput(node=torch.tensor(node), row=torch.tensor(rows, dtype=torch.long),
                             col=torch.tensor(cols, dtype=torch.long), edge=torch.tensor(eids, dtype=torch.long),
                             num_sampled_nodes=counts, num_sampled_edges=ecounts)
    return sample


@pytest.mark.parametrize("with_label", [False, True])
def test_all_neighbours_match_pyg_edge_sample(device, with_label):
    # fanout -1: PyG's edge_sample over a full sampler gives the same nodes,
    # hop by hop, the same edges and the same supervision pairs
    data = link_data(num_nodes=16, num_edges=40)
    label_index = torch.randint(0, 16, (2, 10), generator=torch.Generator().manual_seed(2))
    edge_label = torch.randint(0, 3, (10,), generator=torch.Generator().manual_seed(4)) if with_label else None
    ours = LinkNeighborLoader(data, [-1, -1], edge_label_index=label_index, edge_label=edge_label, batch_size=4,
                              device=device)
    sample = full_sample_fn(data)
    for batch, first in zip(ours, range(0, 10, 4), strict=True):
        b = batch.to("cpu")
        index = torch.arange(first, min(first + 4, 10))
        ref = edge_sample(EdgeSamplerInput(None, label_index[0], label_index[1],
                                           None if edge_label is None else edge_label)[index], sample, 16, False)
        assert b.input_id.tolist() == ref.metadata[0].tolist()
        assert b.num_sampled_nodes == ref.num_sampled_nodes and b.num_sampled_edges == ref.num_sampled_edges
        at = [0]
        for n in ref.num_sampled_nodes:
            at.append(at[-1] + n)
        for lo, hi in zip(at, at[1:]):  # each hop's nodes, as a set
            assert set(b.n_id[lo:hi].tolist()) == set(ref.node[lo:hi].tolist())
        assert pairs(torch.stack([b.e_id, b.n_id[b.edge_index[1]]])) == \
            pairs(torch.stack([ref.edge, ref.node[ref.col]]))
        assert torch.equal(b.n_id[b.edge_label_index], ref.node[ref.metadata[1]])
        if with_label:
            assert torch.equal(b.edge_label, ref.metadata[2])
        else:
            assert "edge_label" not in b


@pytest.mark.parametrize("neg", [None, "binary", dict(mode="triplet", amount=2)])
def test_same_batches_as_pyg_link_loader_over_our_sampler(neg):
    # PyG's LinkLoader driving PyGSampler (its filter_fn and layout) and our
    # loader, on one seed, give the same batches key for key
    data = link_data()
    kwargs = dict(neg_sampling=neg, batch_size=30)
    pyg = LinkLoader(data, PyGSampler(data, [3, 2], device="cpu", seed=5), **kwargs)
    ours = LinkNeighborLoader(data, [3, 2], device="cpu", seed=5, **kwargs)
    assert len(ours) == len(pyg)
    assert_same_batches(ours, pyg)
    index = [5, 2, 9]  # loader(index) as PyG's, from a fresh generator on both sides
    ours = LinkNeighborLoader(data, [3, 2], device="cpu", seed=5, **kwargs)
    pyg = LinkLoader(data, PyGSampler(data, [3, 2], device="cpu", seed=5), **kwargs)
    assert_same_batches([ours(index)], [pyg(index)])


def chi_square_ok(counts: torch.Tensor, expected: torch.Tensor) -> bool:
    keep = expected > 0
    assert counts[~keep].sum() == 0  # a weight of 0 is never drawn
    return chi_square(counts[keep], expected[keep]) < chi_square_critical(int(keep.sum()) - 1)  # p = 1e-4


@pytest.mark.parametrize("weighted", [False, True])
def test_negatives_follow_the_distribution(device, weighted):
    num_nodes, draws = 12, 24000
    weight = torch.tensor([0.0, 1, 2, 3, 0, 5, 1, 1, 2, 0.5, 4, 1]) if weighted else None
    batches = LinkBatches(NegativeSampling("binary", draws // 4, src_weight=weight, dst_weight=weight),
                          num_nodes, device)
    g = torch.Generator().manual_seed(0)
    src = torch.tensor([1, 2], device=device)
    ends = batches.endpoints(src, torch.tensor([3, 4], device=device), g).cpu()
    assert ends.numel() == 2 * (2 + draws // 2) and ends[:2].tolist() == [1, 2]
    negatives = torch.cat([ends[2:2 + draws // 2], ends[4 + draws // 2:]])
    p = torch.full((num_nodes,), 1.0 / num_nodes) if weight is None else weight / weight.sum()
    assert chi_square_ok(torch.bincount(negatives, minlength=num_nodes).double(), p.double() * negatives.numel())
    # another batch draws other negatives; the same seed the same ones
    again = batches.endpoints(src, torch.tensor([3, 4], device=device), g).cpu()
    assert not torch.equal(again, ends)
    replay = batches.endpoints(src, torch.tensor([3, 4], device=device), torch.Generator().manual_seed(0)).cpu()
    assert torch.equal(replay, ends)


def test_negatives_through_the_loader_are_uniform():
    # triplet negatives of a whole pass, read back through n_id
    data = link_data(num_nodes=10, num_edges=60)
    loader = LinkNeighborLoader(data, [1], neg_sampling=dict(mode="triplet", amount=20), batch_size=30,
                                device="cpu", seed=1)
    negatives = torch.cat([b.n_id[b.dst_neg_index].reshape(-1) for b in loader])
    assert negatives.numel() == 60 * 20
    assert chi_square_ok(torch.bincount(negatives, minlength=10).double(),
                         torch.full((10,), negatives.numel() / 10.0, dtype=torch.float64))


def test_draw_nodes_weighted_edges_of_the_range():
    cdf = torch.cumsum(torch.tensor([0.0, 0.0, 1.0, 0.0]), 0).double()
    out = draw_nodes(500, 4, cdf, torch.Generator().manual_seed(0), "cpu")
    assert out.unique().tolist() == [2]


def test_binary_labels_shift_as_pyg():
    data = link_data()
    label = torch.zeros(120, dtype=torch.long)
    label[::2] = 1
    loader = LinkNeighborLoader(data, [2], edge_label=label, neg_sampling_ratio=1.0, batch_size=10, device="cpu")
    batch = next(iter(loader))
    assert batch.edge_label.dtype == torch.long
    assert batch.edge_label.tolist() == (label[:10] + 1).tolist() + [0] * 10
    assert label.max() == 1  # the caller's labels are not shifted in place


def test_with_cache_and_host_placement():
    # the dual cache renames nodes hot-first: supervision edges and negatives
    # are mapped into its ids and back through n_id
    data = link_data(num_nodes=40, num_edges=200)
    row = data.x.element_size() * data.x.size(1)
    loader = LinkNeighborLoader(data, [3, 2], neg_sampling="binary", batch_size=16, device="cpu", seed=2,
                                placement="host", cache_budget=12 * row, profile_epochs=1)
    assert loader.cache is not None
    for batch in loader:
        check_subgraph(batch, data)
        eli = batch.n_id[batch.edge_label_index]
        assert torch.equal(eli[:, :batch.input_id.numel()], data.edge_index[:, batch.input_id])


def test_pure_torch_path():
    # the pure-torch references (the CPU path without Triton) give the same layout
    from tritongnn.kernels import reference
    from tritongnn.kernels._launch import reference_on_cpu
    data = link_data()
    with reference_on_cpu():
        loader = LinkNeighborLoader(data, [2, 2], neg_sampling="triplet", batch_size=50, device="cpu")
        for batch in loader:
            check_subgraph(batch, data)
            assert torch.equal(batch.n_id[batch.src_index], data.edge_index[0, batch.input_id])
        assert isinstance(loader.sampler._id_map._ref, reference.IdMap)


def test_bad_arguments():
    data = link_data()
    with pytest.raises(ValueError, match="edge_label"):
        LinkNeighborLoader(data, [2], edge_label=torch.ones(5), device="cpu")
    with pytest.raises(ValueError, match="triplet"):
        LinkNeighborLoader(data, [2], edge_label=torch.ones(120), neg_sampling="triplet", device="cpu")
    with pytest.raises(ValueError, match="edge_label_index"):
        LinkNeighborLoader(data, [2], edge_label_index=torch.tensor([[0, 1], [2, 99]]), device="cpu")
    with pytest.raises(ValueError, match="shape"):
        LinkNeighborLoader(data, [2], edge_label_index=torch.tensor([0, 1]), device="cpu")
    with pytest.raises(TypeError, match="edge_label_index"):
        LinkNeighborLoader(data, [2], edge_label_index=torch.zeros(2, 3), device="cpu")
    with pytest.raises(TypeError, match="neg_sampling"):
        LinkNeighborLoader(data, [2], neg_sampling=3, device="cpu")
    with pytest.raises(ValueError, match="neg_sampling"):
        LinkNeighborLoader(data, [2], neg_sampling="sideways", device="cpu")
    with pytest.raises(ValueError, match="src_weight"):
        LinkNeighborLoader(data, [2], neg_sampling=NegativeSampling("binary", src_weight=torch.ones(3)),
                           device="cpu")
    with pytest.raises(ValueError, match="dst_weight"):
        LinkNeighborLoader(data, [2], neg_sampling=NegativeSampling("triplet", dst_weight=torch.zeros(30)),
                           device="cpu")
    with pytest.raises(ValueError, match="time_attr"):
        LinkNeighborLoader(data, [2], edge_label_time=torch.ones(120), device="cpu")
    with pytest.raises(ValueError, match="time"):  # (data has no attribute "time": test_link_temporal's)
        LinkNeighborLoader(data, [2], device="cpu", time_attr="time", edge_label_time=torch.ones(120))
    with pytest.raises(NotImplementedError, match="super_batch"):
        LinkNeighborLoader(data, [2], super_batch=2, device="cpu")
    with pytest.raises(ValueError, match="batch_size"):
        LinkNeighborLoader(data, [2], batch_size=0, device="cpu")


def test_len_drop_last_and_call():
    data = link_data()
    loader = LinkNeighborLoader(data, [2], batch_size=50, drop_last=True, device="cpu")
    assert len(loader) == 2 and [b.input_id.numel() for b in loader] == [50, 50]
    batch = loader(torch.tensor([7, 3]))
    assert batch.input_id.tolist() == [7, 3]
    assert torch.equal(batch.n_id[batch.edge_label_index], data.edge_index[:, [7, 3]])
    with pytest.raises(ValueError, match="index"):
        loader([120])
    assert math.ceil(120 / 50) == len(LinkNeighborLoader(data, [2], batch_size=50, device="cpu"))


@pytest.mark.parametrize("mode", [None, "binary", "triplet"])
def test_disjoint_link_batches_in_pyg_layout(device, mode):
    """disjoint: every endpoint its own subgraph, the endpoints first in
    PyG's order, label indices arange (triplet negatives k -> k % P), each
    node's batch its positive's slot; every edge within one slot."""
    data = link_data()
    neg = None if mode is None else NegativeSampling(mode, amount=2)
    loader = LinkNeighborLoader(data, [3, 2], batch_size=16, neg_sampling=neg, disjoint=True, shuffle=True,
                                device=device, seed=5)
    graph = set(map(tuple, data.edge_index.t().tolist()))
    for batch in loader:
        n_id, slot, p = batch.n_id.cpu(), batch.batch.cpu(), batch.input_id.numel()
        src, dst = loader.edge_label_index[:, batch.input_id].cpu()
        seeds = 2 * p + (2 * 2 * p if mode == "binary" else 2 * p if mode == "triplet" else 0)
        assert seeds == batch.num_sampled_nodes[0]
        assert torch.equal(slot[:seeds], torch.arange(seeds) % p)
        row, col = batch.edge_index.cpu()
        assert torch.equal(slot[row], slot[col])
        assert all((int(a), int(b)) in graph for a, b in zip(n_id[row], n_id[col]))
        if mode == "triplet":
            assert torch.equal(batch.src_index.cpu(), torch.arange(p))
            assert torch.equal(n_id[batch.src_index.cpu()], src) and torch.equal(n_id[batch.dst_pos_index.cpu()], dst)
            neg_index = batch.dst_neg_index.cpu()
            assert neg_index.shape == (p, 2) and torch.equal(slot[neg_index], torch.arange(p)[:, None].expand(p, 2))
        else:
            index = batch.edge_label_index.cpu()
            assert torch.equal(index.reshape(-1), torch.arange(index.numel()))
            assert torch.equal(n_id[index[0, :p]], src) and torch.equal(n_id[index[1, :p]], dst)
