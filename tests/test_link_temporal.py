"""Temporal link batches (PyG 2.8's ``edge_label_time`` with ``time_attr``):
always disjoint, each endpoint and negative a seed of its positive's time,
no sampled neighbour (node time) or edge (edge time) later than it, checked
against a pure-torch reference of the admissible edges; labels, times and
indices in PyG's layout (PyG's own ``edge_sample`` as the reference of the
seed times); temporal negatives as PyG's ``neg_sample`` draws them."""
import math

import pytest
import torch
from torch_geometric.loader import LinkLoader
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, SamplerOutput
from torch_geometric.sampler.neighbor_sampler import edge_sample

from tritongnn import LinkNeighborLoader, PyGSampler
from tritongnn.kernels._launch import reference_on_cpu
from tritongnn.sampling.link import LinkBatches, draw_not_later

from test_sample import chi_square, chi_square_critical
from test_temporal_loader import HOST_CACHE, admissible, temporal_data

MODES = [None, "binary", "triplet"]


def label_edges(data, num=40, seed=1):
    """Supervision edges and their times: late enough that most of the
    graph is admissible, early enough that some of it is not."""
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(0, data.num_nodes, (2, num), generator=g)
    return index, torch.randint(4, 12, (num,), generator=g)


def neg_of(mode, amount=2):
    return None if mode is None else NegativeSampling(mode, amount)


def slot_times(batch, label_time):
    """``[n]`` the seed time of every node's subgraph: its positive's
    (``batch.batch`` is the positive's slot, PyG's ``batch % P``)."""
    return label_time[batch.input_id][batch.batch]


def check_no_future(data, batch, label_time, edge_level: bool):
    """Every sampled edge within one slot, a real edge, and none later than
    its slot's time (edge-level), or no sampled node later (node-level;
    the seeds themselves are not filtered, as in PyG)."""
    num_seeds = batch.num_sampled_nodes[0]
    assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.time, data.time[batch.n_id])
    assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
    src, dst = batch.edge_index
    assert torch.equal(batch.batch[src], batch.batch[dst])
    times = slot_times(batch, label_time)
    if edge_level:
        assert bool((data.etime[batch.e_id] <= times[dst]).all())
    else:
        assert bool((data.time[batch.n_id[num_seeds:]] <= times[num_seeds:]).all())


def hop1_edges(batch):
    """Each seed's hop-1 edge ids (a set per seed, in seed order)."""
    hop1 = batch.num_sampled_edges[0]
    dst = batch.edge_index[1, :hop1]
    return [set(batch.e_id[:hop1][dst == k].tolist()) for k in range(batch.num_sampled_nodes[0])]


def check_labels(batch, index, label_time, mode, amount=2):
    """Labels and times in PyG's disjoint layout, lined up with ``n_id``;
    returns the seeds' node ids."""
    p = batch.input_id.numel()
    pos, t = index[:, batch.input_id], label_time[batch.input_id]
    seeds = batch.n_id[:batch.num_sampled_nodes[0]]
    if mode == "triplet":
        assert torch.equal(batch.n_id[batch.src_index], pos[0])
        assert torch.equal(batch.n_id[batch.dst_pos_index], pos[1])
        assert torch.equal(batch.seed_time, t) and "edge_label_time" not in batch
        assert batch.dst_neg_index.shape == (p, amount)
        assert torch.equal(batch.batch[batch.dst_neg_index], torch.arange(p)[:, None].expand(p, amount))
        assert seeds.numel() == (2 + amount) * p
    else:
        eli = batch.edge_label_index
        assert torch.equal(eli.reshape(-1), torch.arange(eli.numel()))  # disjoint: every endpoint its own seed
        assert torch.equal(batch.n_id[eli[:, :p]], pos)
        num_pairs = p if mode is None else p + math.ceil(p * amount)
        assert eli.size(1) == num_pairs and "seed_time" not in batch
        assert torch.equal(batch.edge_label_time, t.repeat(1 + math.ceil(amount))[:num_pairs])
        if mode == "binary":
            assert batch.edge_label.tolist() == [1.0] * p + [0.0] * (num_pairs - p)
    assert torch.equal(batch.batch[:seeds.numel()], torch.arange(seeds.numel()) % p)
    return seeds


def _loader(data, index, label_time, device, mode, options=(), **kwargs):
    return LinkNeighborLoader(data, kwargs.pop("num_neighbors", [-1, 2]), edge_label_index=index,
                              edge_label_time=label_time, time_attr=kwargs.pop("time_attr", "time"),
                              neg_sampling=neg_of(mode), batch_size=kwargs.pop("batch_size", 16), shuffle=True,
                              seed=3, device=device, prefetch=0, **dict(options), **kwargs)


@pytest.mark.parametrize("options", [dict(), HOST_CACHE])
@pytest.mark.parametrize("edge_level", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_uniform_takes_every_admissible_neighbour(device, options, edge_level, mode):
    data = temporal_data()
    index, label_time = label_edges(data)
    before = (index.clone(), label_time.clone(), data.time.clone())
    loader = _loader(data, index, label_time, device, mode, options, time_attr="etime" if edge_level else "time")
    seen = []
    for batch in loader:
        batch = batch.to("cpu")
        seen.append(batch.input_id)
        check_no_future(data, batch, label_time, edge_level)
        seeds = check_labels(batch, index, label_time, mode)
        times = slot_times(batch, label_time)
        for k, (seed, hop1) in enumerate(zip(seeds.tolist(), hop1_edges(batch))):  # fanout -1: all admissible
            assert hop1 == set(admissible(data, seed, times[k], edge_level).tolist())
    assert sorted(torch.cat(seen).tolist()) == list(range(index.size(1)))
    assert all(torch.equal(a, b) for a, b in zip(before, (index, label_time, data.time)))


@pytest.mark.parametrize("edge_level", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_last_takes_the_most_recent(device, edge_level, mode):
    data = temporal_data(seed=1)
    index, label_time = label_edges(data, seed=2)
    loader = _loader(data, index, label_time, device, mode, num_neighbors=[3, 2], temporal_strategy="last",
                     time_attr="etime" if edge_level else "time")
    for batch in loader:
        batch = batch.to("cpu")
        check_no_future(data, batch, label_time, edge_level)
        seeds = check_labels(batch, index, label_time, mode)
        times = slot_times(batch, label_time)
        for k, (seed, hop1) in enumerate(zip(seeds.tolist(), hop1_edges(batch))):
            assert hop1 == set(admissible(data, seed, times[k], edge_level)[-3:].tolist())


@pytest.mark.parametrize("mode", ["binary", "triplet"])
def test_negatives_are_never_later_where_one_can_be_drawn(device, mode):
    # node-level time: a negative's node is no later than its positive's time
    data = temporal_data(seed=3)
    index, label_time = label_edges(data, seed=4)
    loader = _loader(data, index, label_time, device, mode, num_neighbors=[2])
    for batch in loader:
        batch = batch.to("cpu")
        p = batch.input_id.numel()
        if mode == "triplet":
            neg = batch.dst_neg_index.reshape(-1)
        else:
            neg = batch.edge_label_index[:, p:].reshape(-1)
        assert bool((data.time[batch.n_id[neg]] <= slot_times(batch, label_time)[neg]).all())


def test_negatives_fall_back_to_the_earliest_node(device):
    # every node later than every edge's time: PyG's fallback, node_time.argmin()
    data = temporal_data(seed=5)
    data.time = data.time + 20
    data.time[17] = 13  # the earliest, still later than the edges
    index, label_time = label_edges(data, seed=6)
    loader = _loader(data, index, label_time, device, "binary", num_neighbors=[2])
    for batch in loader:
        batch = batch.to("cpu")
        p = batch.input_id.numel()
        assert set(batch.n_id[batch.edge_label_index[:, p:]].reshape(-1).tolist()) == {17}
        assert batch.n_id[batch.num_sampled_nodes[0]:].numel() == 0  # every neighbour is later


def neg_sample_law(node_time, seed_time, weight=None):
    """The law of one temporal negative as PyG's ``neg_sample`` draws it: the
    first draw kept where no later than ``seed_time``, up to five redraws
    each kept where strictly earlier (PyG's ``>=`` there), else the
    earliest node."""
    w = torch.ones(node_time.numel(), dtype=torch.float64) if weight is None else weight.double()
    w = w / w.sum()
    first, strict = w * (node_time <= seed_time), w * (node_time < seed_time)
    miss, miss_strict = 1 - first.sum(), 1 - strict.sum()
    law = first + miss * strict * sum(miss_strict ** r for r in range(5))
    law[node_time.argmin()] += miss * miss_strict ** 5
    return law


@pytest.mark.parametrize("weighted", [False, True])
def test_draw_not_later_follows_pyg_neg_sample(device, weighted):
    g = torch.Generator().manual_seed(7)
    node_time = torch.randint(0, 10, (12,), generator=g)
    node_time[3] = 5
    weight = torch.rand(12, generator=g) + 0.1 if weighted else None
    links = LinkBatches(NegativeSampling("binary", src_weight=weight, dst_weight=weight), 12, device,
                        node_time=node_time.to(device))
    links.generator.manual_seed(11)
    draws = 30_000
    seed_time = torch.full((draws,), 5, device=device)
    neg = draw_not_later(seed_time, 1, node_time.to(device), links.src_cdf, links.generator, device).cpu()
    observed = torch.bincount(neg, minlength=12).double()
    expected = draws * neg_sample_law(node_time, 5, weight)
    assert bool((observed[expected == 0] == 0).all())
    keep = expected > 0
    assert chi_square(observed[keep], expected[keep]) < chi_square_critical(int(keep.sum()) - 1)


class _Recorder:
    """A ``sample_fn`` for PyG's ``edge_sample`` that records the seed times
    it is given (its subgraph: the seeds alone)."""

    def __call__(self, seed, seed_time):
        self.seed, self.seed_time = seed, seed_time
        return SamplerOutput(node=seed, row=torch.empty(0, dtype=torch.long), col=torch.empty(0, dtype=torch.long),
                             edge=None, batch=torch.arange(seed.numel()))


@pytest.mark.parametrize("neg", [None, ("binary", 0.5), ("binary", 2), ("triplet", 1), ("triplet", 3)])
def test_seed_times_are_pyg_edge_sample_s(neg):
    # PyG's edge_sample (no node time: its negatives plain) gives the seeds'
    # times and the batch's edge_label_time / seed_time; ours are the same
    ns = None if neg is None else NegativeSampling(*neg)
    g = torch.Generator().manual_seed(8)
    src, dst, time = torch.randint(0, 20, (7,), generator=g), torch.randint(0, 20, (7,), generator=g), \
        torch.randint(0, 50, (7,), generator=g)
    record = _Recorder()
    out = edge_sample(EdgeSamplerInput(torch.arange(7), src, dst, time=time), record, 20, True, None, ns)
    links = LinkBatches(ns, 20, "cpu")
    endpoints = links.endpoints(src, dst, torch.Generator().manual_seed(0), time)
    seed_time, src_time = links.times(time)
    assert endpoints.numel() == record.seed.numel() and torch.equal(seed_time, record.seed_time)
    assert torch.equal(src_time, out.metadata[-1])
    labels = links.labels(torch.arange(7), None, None, endpoints.numel(), src_time).as_metadata()
    assert torch.equal(labels[-1], out.metadata[-1])


def test_reference_path_and_pyg_link_loader_over_pyg_sampler():
    data = temporal_data(num_nodes=50, num_edges=400, seed=9)
    index, label_time = label_edges(data, seed=10)
    with reference_on_cpu():
        batches = list(_loader(data, index, label_time, "cpu", "binary", HOST_CACHE))
    sampler = PyGSampler(data, [-1, 2], device="cpu", time_attr="time")
    pyg = list(LinkLoader(data, sampler, edge_label_index=index, edge_label_time=label_time,
                          neg_sampling=NegativeSampling("binary"), batch_size=16))
    for batch, amount in [(b, 2) for b in batches] + [(b, 1) for b in pyg]:
        check_no_future(data, batch, label_time, False)
        seeds = check_labels(batch, index, label_time, "binary", amount=amount)
        times = slot_times(batch, label_time)
        for k, (seed, hop1) in enumerate(zip(seeds.tolist(), hop1_edges(batch))):
            assert hop1 == set(admissible(data, seed, times[k], False).tolist())


def test_temporal_arguments_refused():
    data = temporal_data()
    index, label_time = label_edges(data)
    with pytest.raises(ValueError, match="'edge_label_time' is set while 'time_attr' is not set"):
        LinkNeighborLoader(data, [2], edge_label_index=index, edge_label_time=label_time, device="cpu")
    with pytest.raises(ValueError, match="'edge_label_time' is not set while 'time_attr' is set"):
        LinkNeighborLoader(data, [2], edge_label_index=index, time_attr="time", device="cpu")
    with pytest.raises(ValueError, match="edge_label_time"):
        LinkNeighborLoader(data, [2], edge_label_index=index, edge_label_time=label_time[:5], time_attr="time",
                           device="cpu")
    with pytest.raises(TypeError, match="edge_label_time"):
        LinkNeighborLoader(data, [2], edge_label_index=index, edge_label_time=label_time.float(),
                           time_attr="time", device="cpu")
    with pytest.raises(ValueError, match="nowhen"):
        LinkNeighborLoader(data, [2], edge_label_index=index, edge_label_time=label_time, time_attr="nowhen",
                           device="cpu")
    with pytest.raises(ValueError, match="temporal_strategy"):
        LinkNeighborLoader(data, [2], edge_label_index=index, edge_label_time=label_time, time_attr="time",
                           temporal_strategy="recent", device="cpu")
    with pytest.raises(ValueError, match="induced"):
        LinkNeighborLoader(data, [2], edge_label_index=index, edge_label_time=label_time, time_attr="time",
                           subgraph_type="induced", device="cpu")
    with pytest.raises(NotImplementedError, match="super_batch"):
        LinkNeighborLoader(data, [2], edge_label_index=index, edge_label_time=label_time, time_attr="time",
                           super_batch=2, device="cpu")
    data.weight = torch.rand(data.num_edges)
    with pytest.raises(ValueError, match="weight_attr"):
        LinkNeighborLoader(data, [2], edge_label_index=index, edge_label_time=label_time, time_attr="time",
                           weight_attr="weight", device="cpu")
    float_data = temporal_data()
    float_data.time = float_data.time.double()  # floating times take integer edge times too
    loader = LinkNeighborLoader(float_data, [2], edge_label_index=index, edge_label_time=label_time,
                                time_attr="time", batch_size=8, device="cpu")
    assert next(iter(loader)).edge_label_time.dtype == torch.float64
