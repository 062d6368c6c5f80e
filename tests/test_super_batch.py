"""Super-batching: K batches sampled in one pass are, bit for bit, the K
batches sampled one after another; the loader's super_batch changes no batch."""
import pytest
import torch

from tritongnn import CSCGraph, NeighborLoader, NeighborSampler
from tritongnn.kernels import sample as sample_module

from test_loader import check_batch, random_data

FIELDS = ("node", "row", "col", "edge", "num_sampled_nodes", "num_sampled_edges")


def assert_same_output(a, b):
    for key in FIELDS:
        x, y = getattr(a, key), getattr(b, key)
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x.cpu(), y.cpu()), key
        else:
            assert x == y, key


def split_seeds(num_nodes, sizes, device, seed=0):
    order = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))
    return [s.to(device) for s in order[:sum(sizes)].split(sizes)]


@pytest.mark.parametrize("num_batches, num_neighbors, replace", [
    (1, [4, 3], False), (2, [4, 3], False), (3, [4, 3], False), (8, [4, 3], False),
    (3, [3, 0, 2], True), (8, [2, -1], False), (2, [], False)])
def test_sample_many_is_each_batch_alone(device, num_batches, num_neighbors, replace):
    data = random_data()
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True).to(device)
    sampler = NeighborSampler(graph, num_neighbors, replace, device, return_eid=True)
    # full batches and a short last one; a node may be a seed of two sub-batches
    sizes = [13] * (num_batches - 1) + [5]
    seeds = split_seeds(data.num_nodes, sizes, device)
    if num_batches > 1:
        seeds[1][0] = seeds[0][0]
    one, many = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    alone = [sampler.sample(s, one) for s in seeds]
    together = sampler.sample_many(seeds, many)
    assert len(together) == num_batches
    for a, b in zip(alone, together):
        assert_same_output(a, b)
    # the stream moved on exactly as much: the next batch is the same too
    assert_same_output(sampler.sample(seeds[0], one), sampler.sample(seeds[0], many))


@pytest.mark.parametrize("method", ["foundation", "grouped", "grouped_split", "fused"])
@pytest.mark.parametrize("num_neighbors, replace", [([4, 3], False), ([3, 0, 2], True)])
def test_every_kernel_samples_super_batches_as_each_batch_alone(device, method, num_neighbors, replace):
    # each kernel's super-batch (K sub-batches in one launch a hop, each with
    # its own seed and Philox positions) against its own batches one by one;
    # d_max 4: the grouped kernels stage some rows and pick others' from memory
    data = random_data()
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True).to(device)
    assert int(graph.degree().max()) > 4
    sampler = NeighborSampler(graph, num_neighbors, replace, device, return_eid=True, method=method, d_max=4)
    seeds = split_seeds(data.num_nodes, [13, 13, 5], device, seed=3)
    one, many = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    alone = [sampler.sample(s, one) for s in seeds]
    for a, b in zip(alone, sampler.sample_many(seeds, many), strict=True):
        assert_same_output(a, b)


@pytest.mark.parametrize("method", ["foundation", "grouped", "grouped_split"])
def test_node_order_visits_change_no_super_batch(device, method, monkeypatch):
    # a super-batch read in node-id order (as where rows cross PCIe: a node of
    # several sub-batches side by side) against its batches in frontier order
    data = random_data()
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True).to(device)
    sampler = NeighborSampler(graph, [4, 3], False, device, return_eid=True, method=method, d_max=4)
    seeds = split_seeds(data.num_nodes, [13, 13, 5], device, seed=4)
    seeds[2][0] = seeds[0][0]
    one, many = torch.Generator().manual_seed(6), torch.Generator().manual_seed(6)
    monkeypatch.setattr(sample_module, "sorts_frontier", lambda *args, **kwargs: False)
    alone = [sampler.sample(s, one) for s in seeds]
    monkeypatch.setattr(sample_module, "sorts_frontier",
                        lambda indptr, indices, device, hot_indptr=None, hot_indices=None, uva_reads=None: True)
    for a, b in zip(alone, sampler.sample_many(seeds, many), strict=True):
        assert_same_output(a, b)


def test_direct_and_hash_id_maps_give_the_same_batches(device, monkeypatch):
    # the sampler's maps on its one direct table (where it fits; with and
    # without the seen filter) or on hash tables: the same batches, alone
    # and in super-batches, batch after batch
    from tritongnn.kernels import id_map
    data = random_data()
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True).to(device)
    seeds = split_seeds(data.num_nodes, [13, 13, 5], device)

    def batches():
        sampler = NeighborSampler(graph, [4, 3], device=device, return_eid=True)
        gen = torch.Generator().manual_seed(4)
        outs = [sampler.sample(s, gen) for s in seeds] + sampler.sample_many(seeds, gen) + \
            sampler.sample_many(seeds[:2], gen)
        return outs, sampler
    monkeypatch.setattr(id_map, "SEEN_MIN_NODES", 1 << 62)
    direct, sampler = batches()
    kernels = sampler._id_map is not None and sampler._id_map._ref is None  # not the reference's map
    if kernels:
        assert sampler._id_map.direct is not None and sampler._id_map.direct is sampler._direct
        assert sampler._id_map._seen is None
    monkeypatch.setattr(id_map, "SEEN_MIN_NODES", 0)
    seen, sampler = batches()
    assert not kernels or sampler._id_map._seen is not None
    monkeypatch.setattr(id_map, "DIRECT_MAX_BYTES", 0)
    hashed, sampler = batches()
    assert sampler._direct is None
    for a, b, c in zip(direct, seen, hashed, strict=True):
        assert_same_output(a, b)
        assert_same_output(a, c)


def test_a_larger_direct_table_frees_the_old_one(device, monkeypatch):
    # K grows: the sampler's direct table is replaced, and the old one is
    # freed before the new one is allocated (no peak of both); a K too large
    # for a direct table goes in passes of the K that fits, on that table
    import weakref
    from tritongnn.kernels import id_map
    from tritongnn.sampling import sampler as sampler_module
    alive, held_at_allocation = [], []

    class Recorded(id_map.DirectTable):
        def __init__(self, num_keys, device):
            held_at_allocation.append([t().num_keys for t in alive if t() is not None])
            super().__init__(num_keys, device)
            alive.append(weakref.ref(self))
    monkeypatch.setattr(sampler_module, "DirectTable", Recorded)
    data = random_data()
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes).to(device)
    sampler = NeighborSampler(graph, [3, 2], device=device)
    seeds = split_seeds(data.num_nodes, [10, 10, 10, 10], device)
    gen = torch.Generator().manual_seed(0)
    sampler.sample(seeds[0], gen)
    if sampler._direct is None:  # the reference maps (no Triton on this device)
        pytest.skip("no Triton on this device")
    sampler.sample_many(seeds[:3], gen)
    assert sampler._direct.num_keys == 3 * data.num_nodes
    assert held_at_allocation == [[], []]  # the 1-batch table was gone when the 3-batch one was made
    monkeypatch.setattr(id_map, "DIRECT_MAX_BYTES", 8 * 3 * data.num_nodes)  # K = 4 does not fit
    sampler.sample_many(seeds, gen)
    # 3 + 1 batches: no map of 4 (eager, the sampler's own, or captured on CUDA)
    maps = [sampler._id_map] + [c.id_map for c in sampler._captured.values() if c is not None]
    assert all(m.num_batches <= 3 and m.direct is sampler._direct for m in maps if m is not None)
    assert sampler._direct.num_keys == 3 * data.num_nodes
    assert held_at_allocation == [[], []]  # no table allocated since


def test_super_batches_past_the_direct_table_go_in_passes_that_fit(device, monkeypatch):
    # K x num_nodes words past DIRECT_MAX_BYTES, one batch's within: the K
    # batches go as super-batches of the most that fit (a hash map's insert
    # is ~5x the direct table's), with the outputs and generator state of K
    # batches sampled one by one; where one batch does not fit either, all
    # K go in one pass, on a hash map
    from tritongnn.kernels import id_map
    from tritongnn.sampling import sampler as sampler_module
    data = random_data()
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True).to(device)
    seeds = split_seeds(data.num_nodes, [9, 9, 9, 9, 9, 4], device)
    passes = []  # sub-batches of each pass (each draws its per-hop seeds once)
    original = sampler_module.NeighborSampler.draw_rng

    def recorded(self, generator, num_batches=1):
        passes.append(num_batches)
        return original(self, generator, num_batches)
    monkeypatch.setattr(sampler_module.NeighborSampler, "draw_rng", recorded)

    def run():
        sampler = NeighborSampler(graph, [4, 3], device=device, return_eid=True)
        gen = torch.Generator().manual_seed(9)
        outs = sampler.sample_many(seeds, gen)
        return outs, int(torch.randint(0, 1 << 30, (1,), generator=gen)), sampler
    one_by_one = NeighborSampler(graph, [4, 3], device=device, return_eid=True)
    gen = torch.Generator().manual_seed(9)
    want = [one_by_one.sample(s, gen) for s in seeds]
    want_next = int(torch.randint(0, 1 << 30, (1,), generator=gen))
    monkeypatch.setattr(id_map, "DIRECT_MAX_BYTES", 8 * 4 * data.num_nodes)  # up to K = 4
    passes.clear()
    got, got_next, sampler = run()
    assert sampler._super_batch_step(6) == 4 and sampler._super_batch_step(3) == 3
    for a, b in zip(got, want, strict=True):
        assert_same_output(a, b)
    assert got_next == want_next
    if sampler._id_map is not None and sampler._id_map._ref is None:  # the kernels ran (not the reference)
        assert passes == [4, 2]
    monkeypatch.setattr(id_map, "DIRECT_MAX_BYTES", 0)  # one batch does not fit either: hash maps, one pass
    passes.clear()
    got, got_next, sampler = run()
    assert sampler._super_batch_step(6) == 6
    for a, b in zip(got, want, strict=True):
        assert_same_output(a, b)
    assert got_next == want_next
    if sampler._id_map is not None and sampler._id_map._ref is None:
        assert passes == [6]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_replays_and_eager_batches_share_the_direct_table(monkeypatch):
    # replayed and eager batches take turns on one direct table whose tags
    # run out every 3 batches (TAG_MAX lowered): each replay counts (the
    # table is cleared on time, the tag never passes TAG_MAX) and every
    # batch equals the hash maps' batch
    from tritongnn.kernels import id_map
    data = random_data(num_nodes=3000, num_edges=40_000)
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes).to("cuda")
    batches = split_seeds(data.num_nodes, [128] * 12, "cuda")

    def run():
        sampler = NeighborSampler(graph, [5, 3], device="cuda")
        gen, outs, tags = torch.Generator().manual_seed(2), [], []
        for i, seeds in enumerate(batches):
            sampler.cuda_graph = i % 3 != 2  # every third batch eager, on the same table
            outs.append(sampler.sample(seeds, gen))
            tags.append(None if sampler._direct is None else int(sampler._direct.tag))
        return sampler, outs, tags
    monkeypatch.setattr(id_map, "TAG_MAX", 3)
    sampler, direct, tags = run()
    assert sampler._captured[128] is not None and sampler._id_map.direct is sampler._direct
    assert max(tags) <= 3 and tags.count(1) >= 4  # cleared every 3 batches (incl. the capture's warm-up)
    monkeypatch.setattr(id_map, "DIRECT_MAX_BYTES", 0)
    _, hashed, _ = run()
    for a, b in zip(direct, hashed, strict=True):
        assert_same_output(a, b)


@pytest.mark.parametrize("num_batches", [1, 3])
def test_frontier_cut_to_the_graph_changes_no_batch(device, num_batches, monkeypatch):
    # fanouts whose product passes the graph's size: every hop past the
    # first is cut to K x num_nodes slots (no sync), or trimmed to its real
    # frontier (a sync), and the batches are those of buffers sized by the
    # fanouts alone
    from tritongnn.sampling import sampler as sampler_module
    data = random_data(num_nodes=60, num_edges=900)
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True).to(device)
    seeds = split_seeds(data.num_nodes, [20] * num_batches, device)

    def batches(sync_above=None):
        sampler = NeighborSampler(graph, [6, 5, 4], device=device, return_eid=True)
        if sync_above is not None:
            sampler.sync_above = sync_above
        gen = torch.Generator().manual_seed(5)
        return sampler.sample_many(seeds, gen) + [sampler.sample(seeds[0], gen)], sampler
    cut, sampler = batches()
    assert sampler._keys_bound(20 * num_batches, num_batches) == 20 * num_batches * (1 + 6) + \
        num_batches * 60 * (5 + 4)
    trimmed, sampler = batches(sync_above=4)  # every hop past the first trimmed with a sync
    assert sampler._keys_bound(20 * num_batches, num_batches) == 0
    monkeypatch.setattr(sampler_module.NeighborSampler, "_frontier_cap", lambda self, k: 1 << 40)
    whole, sampler = batches()
    assert sampler._keys_bound(20 * num_batches, num_batches) == 20 * num_batches * (1 + 6 + 30 + 120)
    for a, b, c in zip(cut, trimmed, whole, strict=True):
        assert_same_output(a, c)
        assert_same_output(b, c)


def test_super_batches_captured_only_on_direct_tables(monkeypatch):
    # single batches are captured on either map; a super-batch only where
    # its K x num_nodes words fit a direct table (on a hash map it runs
    # eagerly: its launches are already shared by K batches)
    from tritongnn.kernels import id_map
    from tritongnn.sampling import sampler as sampler_module
    monkeypatch.setattr(sampler_module, "CapturedHops", lambda sampler, size, k=1: ("captured", size, k))
    data = random_data()
    sampler = NeighborSampler(CSCGraph.from_edge_index(data.edge_index, data.num_nodes), [3, 2], device="cpu")
    monkeypatch.setattr(id_map, "DIRECT_MAX_BYTES", 8 * 2 * data.num_nodes)  # up to K = 2
    assert sampler._replayable(64) == ("captured", 64, 1)
    assert sampler._replayable(64, 2) == ("captured", 64, 2)
    assert sampler._replayable(64, 3) is None  # a hash map
    monkeypatch.setattr(id_map, "DIRECT_MAX_BYTES", 0)
    assert sampler._replayable(32) == ("captured", 32, 1)  # hash maps: single batches still
    assert sampler._replayable(32, 2) is None


def test_sample_many_repeated_seeds_and_id_spaces(device):
    # The same seeds in every sub-batch: each sub-batch has its own local ids
    # (duplicates across sub-batches are separate nodes), a repeated seed
    # keeps its slot in n_id, as sampling the batch alone gives.
    data = random_data()
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes).to(device)
    sampler = NeighborSampler(graph, [5, 5], device=device)
    seeds = torch.tensor([7, 3, 7, 250, 3], device=device)
    outs = sampler.sample_many([seeds, seeds, seeds[:2]], torch.Generator().manual_seed(1))
    alone = NeighborSampler(graph, [5, 5], device=device).sample_many([seeds], torch.Generator().manual_seed(1))
    assert_same_output(outs[0], alone[0])
    for out in outs:
        assert torch.equal(out.node[:out.num_sampled_nodes[0]].cpu(), seeds[:out.num_sampled_nodes[0]].cpu())
        assert int(out.row.max()) < out.node.numel() and int(out.col.max()) < out.node.numel()
        assert out.node[out.num_sampled_nodes[0]:].unique().numel() == out.node.numel() - out.num_sampled_nodes[0]


def test_sample_many_bad_arguments():
    graph = CSCGraph.from_edge_index(random_data().edge_index, 300)
    sampler = NeighborSampler(graph, [2], device="cpu")
    with pytest.raises(TypeError, match="seeds_list"):
        sampler.sample_many(torch.arange(4))
    with pytest.raises(ValueError, match="empty"):
        sampler.sample_many([])
    with pytest.raises(TypeError, match=r"seeds_list\[1\]"):
        sampler.sample_many([torch.arange(3), torch.arange(3, dtype=torch.int32)])


def epoch_batches(loader):
    return [b.to("cpu") for b in loader]


def assert_same_batches(base, other):
    """The same batches: the same keys, tensors of the same dtype and
    values (on any device), other values equal."""
    assert len(base) == len(other)
    for a, b in zip(base, other):
        assert set(a.keys()) == set(b.keys())
        for key in a.keys():
            x, y = a[key], b[key]
            if isinstance(x, torch.Tensor):
                assert x.dtype == y.dtype and torch.equal(x.cpu(), y.cpu()), key
            else:
                assert x == y, key


_PLAIN = {}


def plain_epochs(data, **args):
    """Two epochs of the super_batch=1 loader, computed once per device."""
    device = args["device"]
    if device not in _PLAIN:
        loader = NeighborLoader(data, **args)
        _PLAIN[device] = [epoch_batches(loader), epoch_batches(loader)]
    return _PLAIN[device]


@pytest.mark.parametrize("super_batch", [2, 3, 8])
def test_loader_super_batch_same_batches(device, super_batch):
    # 154 train seeds in batches of 20: 8 batches, the last one of 14; with
    # K = 3 the last super-batch holds 2 batches, with K = 8 it is the only one.
    data = random_data(edge_attr=True)
    args = dict(num_neighbors=[4, 3], input_nodes=data.train_mask, batch_size=20, shuffle=True, seed=4,
                device=device)
    loader = NeighborLoader(data, super_batch=super_batch, **args)
    input_nodes = torch.nonzero(data.train_mask).flatten()
    for plain in plain_epochs(data, **args):  # the second epoch reshuffles: still the same
        batches = epoch_batches(loader)
        assert_same_batches(plain, batches)
        for batch in batches:
            check_batch(batch, data, input_nodes, [4, 3], False, mask=True)
        seeds = torch.cat([b.input_id for b in batches])
        assert torch.equal(seeds.sort().values, input_nodes)  # every seed once (node ids: a mask's)
        assert input_nodes.numel() == 154 and batches[-1].batch_size == 14
        stats = loader.stats  # sampling time spread over the batches of each super-batch
        assert stats["batches"] == len(loader) == len(batches) == 8 and stats["sampling_seconds"] > 0


def test_loader_super_batch_gathers_each_batch(device, monkeypatch):
    # a super-batch's batches are sampled in one pass, each gathered on its
    # own: one gather a batch, of its own nodes
    from tritongnn.loader import assemble
    data = random_data(edge_attr=True)
    args = dict(num_neighbors=[4, 3], input_nodes=data.train_mask, batch_size=20, shuffle=True, seed=4,
                device=device, super_batch=3)
    calls = []
    gather = assemble.gather_rows
    monkeypatch.setattr(assemble, "gather_rows", lambda *a, **k: calls.append(a[1].numel()) or gather(*a, **k))
    loader = NeighborLoader(data, **args)
    batches = epoch_batches(loader)
    assert calls == [b.n_id.numel() for b in batches] and len(calls) == 8
    assert loader.stats["gather_seconds"] > 0 and loader.stats["batches"] == 8
    assert_same_batches(plain_epochs(data, **dict(args, super_batch=1))[0], batches)


@pytest.mark.parametrize("kernel", ["grouped", "grouped_split", "fused"])
def test_loader_sample_kernel_same_batches(device, kernel):
    # GARDEN's grouped sampler behind the loader: the batches of the default
    # kernel, alone and in super-batches
    data = random_data(edge_attr=True)
    args = dict(num_neighbors=[4, 3], input_nodes=data.train_mask, batch_size=20, shuffle=True, seed=4,
                device=device)
    plain = plain_epochs(data, **args)[0]
    assert_same_batches(plain, epoch_batches(NeighborLoader(data, sample_kernel=kernel, **args)))
    assert_same_batches(plain, epoch_batches(NeighborLoader(data, sample_kernel=kernel, super_batch=3, **args)))
    with pytest.raises(ValueError, match="sample_kernel must be one of"):
        NeighborLoader(data, sample_kernel="fast", **args)


def test_loader_super_batch_drop_last_ranks_and_reorder(device):
    data = random_data()
    args = dict(num_neighbors=[3, 2], batch_size=48, shuffle=True, seed=2, device=device, drop_last=True)
    assert_same_batches(epoch_batches(NeighborLoader(data, **args)),
                        epoch_batches(NeighborLoader(data, super_batch=4, **args)))
    ranks = dict(args, batch_size=16, drop_last=False, rank=1, world_size=3)
    assert_same_batches(epoch_batches(NeighborLoader(data, **ranks)),
                        epoch_batches(NeighborLoader(data, super_batch=3, **ranks)))
    # groups of 3 reordered, sampled 2 at a time (a super-batch straddles two
    # groups): the reordered epoch is unchanged
    host = dict(args, drop_last=False, placement="host", reuse=True, reorder_group=3)
    assert_same_batches(epoch_batches(NeighborLoader(data, **host)),
                        epoch_batches(NeighborLoader(data, super_batch=2, **host)))
    # the dual cache (adjacency and rows read from two tiers) and the dynamic
    # cache; a budget of 400 rows (48 B each) caches some of both
    cached = dict(args, drop_last=False, placement="host", cache_budget=400 * 48, profile_epochs=1,
                  dynamic_cache=dict(fraction=0.3, update_every=2))
    loader = NeighborLoader(data, super_batch=3, **cached)
    plan = loader.cache.plan
    assert 0 < plan.num_adjacency < data.num_nodes and 0 < plan.num_feature < data.num_nodes
    assert_same_batches(epoch_batches(NeighborLoader(data, **cached)), epoch_batches(loader))


@pytest.mark.parametrize("super_batch", [0, -1, 2.0, True, "2"])
def test_bad_super_batch(super_batch):
    with pytest.raises(ValueError, match="super_batch"):
        NeighborLoader(random_data(), [2], batch_size=8, super_batch=super_batch)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("placement, seen", [("device", False), ("host", False), ("device", True)])
def test_super_batch_cuda_graph_replay_matches_eager(placement, seen, monkeypatch):
    # Captured super-batches (one graph per (K, total seeds)) replay the very
    # batches of eager single-batch sampling, super-batch after super-batch,
    # for a full and a short last super-batch; ``seen``: the replays'
    # direct map keeps the seen filter (zeroed in the graph), the eager one not.
    from tritongnn.kernels import id_map
    monkeypatch.setattr(id_map, "SEEN_MIN_NODES", 1 << 62)
    data = random_data(num_nodes=20_000, num_edges=400_000)
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True).to("cuda")
    graph = graph.pin_memory() if placement == "host" else graph
    seeds = torch.randperm(20_000, generator=torch.Generator().manual_seed(0)).to("cuda")[:10 * 256 + 100]
    batches = list(seeds.split(256))
    eager = NeighborSampler(graph, [6, 4, 3], device="cuda", return_eid=True, cuda_graph=False)
    gen = torch.Generator().manual_seed(3)
    want = [eager.sample(b, gen) for b in batches]
    if seen:
        monkeypatch.setattr(id_map, "SEEN_MIN_NODES", 0)
    sampler = NeighborSampler(graph, [6, 4, 3], device="cuda", return_eid=True, cuda_graph=True)
    gen = torch.Generator().manual_seed(3)
    got = []
    for first in range(0, len(batches), 4):
        got += sampler.sample_many(batches[first:first + 4], gen)
    assert sampler._captured[(4, 1024)] is not None and sampler._captured[(3, 612)] is not None
    assert (sampler._captured[(4, 1024)].id_map._seen is not None) == seen
    for a, b in zip(want, got):
        assert_same_output(a, b)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_loader_super_batch_prefetch_and_host_placement():
    # Prefetched on side streams, read through UVA, with the cache: the same
    # batches as the plain loader.
    data = random_data(num_nodes=5000, num_edges=100_000, edge_attr=True)
    args = dict(num_neighbors=[5, 4], batch_size=256, shuffle=True, seed=9)
    base = epoch_batches(NeighborLoader(data, placement="device", prefetch=0, **args))
    for kwargs in (dict(placement="device", prefetch=3), dict(placement="host", prefetch=2),
                   dict(placement="host", cache_budget=200_000, dynamic_cache=True, reuse=True)):
        assert_same_batches(base, epoch_batches(NeighborLoader(data, super_batch=8, **kwargs, **args)))
