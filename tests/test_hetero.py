"""``NeighborLoader`` over a ``HeteroData`` (``loader.hetero``,
``sampling.hetero``) against a pure-torch reference of PyG's heterogeneous
sampling: every sampled edge is an edge of its type (its ``e_id`` the
column it is), a node draws at most its edge type's fanout from each type
(every in-edge of that type where it has no more), the frontier of a hop is
the nodes new in the hop before, per-type counts in hop order, features and
attributes sliced by ``n_id`` / ``e_id``, the induced subgraph complete,
uniform and weighted draws per type (chi-square); on the CPU and compiled on
the GPU, in GPU and pinned host memory."""
import pytest
import torch
from torch_geometric.data import HeteroData

from tritongnn import NeighborLoader

from test_sample import chi_square, chi_square_critical

PP, PA, AP, AI = ("paper", "cites", "paper"), ("paper", "written_by", "author"), \
    ("author", "writes", "paper"), ("author", "in", "institution")


def hetero_data(seed=0, num_papers=80, num_authors=50, num_institutions=7):
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x = torch.randn(num_papers, 6, generator=g)
    data["paper"].y = torch.randint(0, 4, (num_papers,), generator=g)
    data["paper"].train_mask = torch.rand(num_papers, generator=g) < 0.5
    data["author"].x = torch.randn(num_authors, 3, generator=g).double()
    data["institution"].num_nodes = num_institutions  # featureless
    sizes = {PP: (num_papers, num_papers, 600), PA: (num_papers, num_authors, 300),
             AP: (num_authors, num_papers, 300), AI: (num_authors, num_institutions, 60)}
    for edge_type, (ns, nd, ne) in sizes.items():
        data[edge_type].edge_index = torch.stack([torch.randint(0, ns, (ne,), generator=g),
                                                  torch.randint(0, nd, (ne,), generator=g)])
        data[edge_type].edge_attr = torch.randn(ne, 2, generator=g)
    data.graph_note = torch.tensor([7])  # a graph-level attribute, copied whole
    return data


def global_edges(batch, edge_type):
    src, _, dst = edge_type
    row, col = batch[edge_type].edge_index.cpu()
    return torch.stack([batch[src].n_id.cpu()[row], batch[dst].n_id.cpu()[col]])


def check_batch(data, batch, fanouts, input_type="paper"):
    """The reference: PyG's heterogeneous neighbour sampling, hop by hop."""
    num_hops = len(next(iter(fanouts.values())))
    n_id = {t: batch[t].n_id.cpu() for t in data.node_types}
    for t in data.node_types:
        assert n_id[t].unique().numel() == n_id[t].numel()  # each node once per type
        counts = batch[t].num_sampled_nodes
        assert len(counts) == num_hops + 1 and sum(counts) == n_id[t].numel() == batch[t].num_nodes
        if t != input_type:
            assert counts[0] == 0
        if "x" in data[t]:
            assert torch.equal(batch[t].x.cpu(), data[t].x[n_id[t]])
    assert batch[input_type].num_sampled_nodes[0] == batch[input_type].batch_size
    assert torch.equal(batch["paper"].y.cpu(), data["paper"].y[n_id["paper"]])
    assert torch.equal(batch.graph_note, data.graph_note)
    # hop h's frontier of type t: the nodes of t new in hop h - 1
    frontier = {t: [] for t in data.node_types}
    for t in data.node_types:
        at = 0
        for count in batch[t].num_sampled_nodes:
            frontier[t].append(n_id[t][at:at + count])
            at += count
    sources = {t: [[] for _ in range(num_hops)] for t in data.node_types}
    for edge_type in data.edge_types:
        src, _, dst = edge_type
        e_id = batch[edge_type].e_id.cpu()
        assert torch.equal(global_edges(batch, edge_type), data[edge_type].edge_index[:, e_id])
        assert torch.equal(batch[edge_type].edge_attr.cpu(), data[edge_type].edge_attr[e_id])
        counts = batch[edge_type].num_sampled_edges
        assert len(counts) == num_hops and sum(counts) == e_id.numel()
        edge_index = data[edge_type].edge_index
        at = 0
        for hop, count in enumerate(counts):
            part = e_id[at:at + count]
            at += count
            targets = frontier[dst][hop]
            if part.numel():  # every edge into the hop's frontier of its target type
                assert torch.isin(edge_index[1, part], targets).all()
                assert part.unique().numel() == part.numel()  # without replacement
            fanout = fanouts[edge_type][hop]
            for v in targets.tolist():
                mine = part[edge_index[1, part] == v]
                degree = int((edge_index[1] == v).sum())
                expected = degree if fanout == -1 else min(degree, fanout)
                assert mine.numel() == expected, (edge_type, hop, v)
            sources[src][hop].append(edge_index[0, part])
    for t in data.node_types:  # a hop's new nodes: sources of its edges
        for hop in range(num_hops):
            assert torch.isin(frontier[t][hop + 1], torch.cat(sources[t][hop] + [torch.empty(0).long()])).all()


@pytest.mark.parametrize("placement", ["device", "host"])
def test_batches_follow_pyg_heterogeneous_sampling(device, placement):
    data = hetero_data()
    fanouts = {PP: [3, 2], PA: [2, 2], AP: [4, 0], AI: [1, -1]}  # three launches in hop 1, a type drawing none
    loader = NeighborLoader(data, fanouts, input_nodes=("paper", data["paper"].train_mask), batch_size=16,
                            shuffle=True, device=device, placement=placement, seed=3)
    assert len(loader) == -(-int(data["paper"].train_mask.sum()) // 16)
    seeds = []
    for batch in loader:
        assert isinstance(batch, HeteroData) and batch["paper"].x.device.type == device.type
        check_batch(data, batch, fanouts)
        bs = batch["paper"].batch_size
        assert torch.equal(batch["paper"].n_id[:bs], batch["paper"].input_id)  # a mask's input_id: node ids
        seeds.append(batch["paper"].input_id.cpu())
    assert torch.equal(torch.cat(seeds).sort().values, data["paper"].train_mask.nonzero().flatten())
    assert loader.placement == ("host" if placement == "host" else "device")
    assert repr(loader) == "NeighborLoader()" and isinstance(loader, NeighborLoader)


def test_one_launch_a_hop_for_a_list_of_fanouts(device):
    data = hetero_data(seed=1)
    loader = NeighborLoader(data, [4, 3], input_nodes="author", batch_size=10, device=device, seed=0)
    assert loader.sampler.num_launches == 2  # one a hop, all four edge types in it
    batch = loader([0, 5, 9])
    check_batch(data, batch, {e: [4, 3] for e in data.edge_types}, input_type="author")
    assert batch["author"].input_id.tolist() == [0, 5, 9]
    assert batch["author"].n_id[:3].tolist() == [0, 5, 9]


def test_prefetched_and_eager_passes_are_the_same_batches(device):
    data = hetero_data(seed=2)
    kwargs = dict(input_nodes="paper", batch_size=20, shuffle=True, device=device)
    eager = NeighborLoader(data, [5, 5], prefetch=0, seed=11, **kwargs)
    ahead = NeighborLoader(data, [5, 5], prefetch=3, seed=11, **kwargs)
    for a, b in zip(eager, ahead, strict=True):
        for t in data.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id)
        for e in data.edge_types:
            assert torch.equal(a[e].edge_index, b[e].edge_index) and torch.equal(a[e].e_id, b[e].e_id)
    assert ahead.stats["batches"] == len(ahead)


def test_induced_subgraph_holds_every_edge_between_the_nodes(device):
    data = hetero_data(seed=4)
    loader = NeighborLoader(data, [2, 2], input_nodes="paper", batch_size=12, device=device,
                            subgraph_type="induced", seed=1)
    for batch in loader:
        n_id = {t: batch[t].n_id.cpu() for t in data.node_types}
        for edge_type in data.edge_types:
            src, _, dst = edge_type
            edge_index = data[edge_type].edge_index
            inside = torch.isin(edge_index[0], n_id[src]) & torch.isin(edge_index[1], n_id[dst])
            e_id = batch[edge_type].e_id.cpu()
            assert torch.equal(e_id.sort().values, inside.nonzero().flatten())
            assert torch.equal(global_edges(batch, edge_type), edge_index[:, e_id])
        assert "num_sampled_nodes" not in batch["paper"]


@pytest.mark.filterwarnings("ignore:Cannot convert to bidirectional")  # (PyG's, for author -> institution)
def test_bidirectional_edges_come_with_their_reverses(device):
    data = hetero_data(seed=5)
    loader = NeighborLoader(data, [3, 3], input_nodes="paper", batch_size=12, device=device,
                            subgraph_type="bidirectional", seed=1)
    batch = next(iter(loader))
    pp = global_edges(batch, PP)
    assert set(map(tuple, pp.T.tolist())) == set(map(tuple, pp.flip(0).T.tolist()))
    pa, ap = global_edges(batch, PA), global_edges(batch, AP)  # each other's reverse
    assert pa.size(1) and set(map(tuple, pa.T.tolist())) == set(map(tuple, ap.flip(0).T.tolist()))
    assert "e_id" not in batch[PP]


def test_uniform_draws_within_each_edge_type(device):
    # paper 0 has 12 in-edges of each of two types: 3 drawn from each, uniformly
    data = HeteroData()
    data["paper"].num_nodes, data["author"].num_nodes = 13, 12
    data[PP].edge_index = torch.stack([torch.arange(1, 13), torch.zeros(12, dtype=torch.int64)])
    data[AP].edge_index = torch.stack([torch.arange(12), torch.zeros(12, dtype=torch.int64)])
    loader = NeighborLoader(data, {PP: [3], AP: [3]}, input_nodes=("paper", [0]), batch_size=1, device=device,
                            seed=5)
    counts = {PP: torch.zeros(12), AP: torch.zeros(12)}
    draws = 600 if device.type == "cuda" else 150
    for _ in range(draws):
        batch = loader([0])
        for edge_type in (PP, AP):
            e_id = batch[edge_type].e_id.cpu()
            assert e_id.numel() == 3 and e_id.unique().numel() == 3
            counts[edge_type] += torch.bincount(e_id, minlength=12)
    for edge_type, c in counts.items():
        assert chi_square(c.double(), torch.full((12,), 3.0 * draws / 12, dtype=torch.float64)) \
            < chi_square_critical(11)


def test_weighted_draws_follow_each_types_weights(device):
    data = HeteroData()
    data["paper"].num_nodes, data["author"].num_nodes = 9, 8
    data[PP].edge_index = torch.stack([torch.arange(1, 9), torch.zeros(8, dtype=torch.int64)])
    data[PP].w = torch.tensor([1., 2., 3., 4., 0., 1., 1., 4.])
    data[AP].edge_index = torch.stack([torch.arange(8), torch.zeros(8, dtype=torch.int64)])  # no w: uniform
    loader = NeighborLoader(data, [1], input_nodes=("paper", [0]), batch_size=1, device=device, seed=2,
                            weight_attr="w", replace=True)
    draws = 3000 if device.type == "cuda" else 400
    pp, ap = torch.zeros(8), torch.zeros(8)
    for _ in range(draws):
        batch = loader([0])
        pp += torch.bincount(batch[PP].e_id.cpu(), minlength=8)
        ap += torch.bincount(batch[AP].e_id.cpu(), minlength=8)
    p = data[PP].w / data[PP].w.sum()
    assert pp[4] == 0
    keep = p > 0
    assert chi_square(pp[keep].double(), (p[keep] * draws).double()) < chi_square_critical(int(keep.sum()) - 1)
    assert chi_square(ap.double(), torch.full((8,), draws / 8, dtype=torch.float64)) < chi_square_critical(7)


def test_bad_arguments_are_named():
    data = hetero_data()
    with pytest.raises(ValueError, match="input_nodes"):
        NeighborLoader(data, [2], input_nodes=None, device="cpu")
    with pytest.raises(ValueError, match="'venue'"):
        NeighborLoader(data, [2], input_nodes="venue", device="cpu")
    with pytest.raises(ValueError, match="no fanouts for the edge types"):
        NeighborLoader(data, {PP: [2]}, input_nodes="paper", device="cpu")
    with pytest.raises(ValueError, match="hops must be the same across all"):
        NeighborLoader(data, {PP: [2], PA: [2, 2], AP: [1], AI: [1]}, input_nodes="paper", device="cpu")
    with pytest.raises(NotImplementedError, match="cache_budget"):
        NeighborLoader(data, [2], input_nodes="paper", device="cpu", cache_budget=10**6)
    with pytest.raises(NotImplementedError, match="temporal"):
        NeighborLoader(data, [2], input_nodes="paper", device="cpu", time_attr="time")
    bad = hetero_data()
    bad[PA].edge_index = bad[PA].edge_index.clone()
    bad[PA].edge_index[1, 3] = 50  # 50 authors: ids 0..49
    with pytest.raises(ValueError, match="written_by"):
        NeighborLoader(bad, [2], input_nodes="paper", device="cpu")
    before = data[PP].edge_index.clone()
    next(iter(NeighborLoader(data, [2], input_nodes="paper", device="cpu", batch_size=4)))
    assert torch.equal(data[PP].edge_index, before)  # the user's data untouched
