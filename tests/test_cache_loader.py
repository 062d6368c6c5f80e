"""The dual cache behind NeighborLoader: same batches as without it, statistics, bad budgets."""
import pytest
import torch

from tritongnn import NeighborLoader
from tritongnn.cache import AccessProfile

from test_loader import random_data


def epoch(data, **kwargs):
    args = dict(num_neighbors=[4, 3], batch_size=40, shuffle=True, seed=5, input_nodes=data.train_mask)
    args.update(kwargs)
    loader = NeighborLoader(data, **args)
    return loader, [b for b in loader]


def row_bytes(data):
    return data.x.size(1) * data.x.element_size()


@pytest.mark.parametrize("budget_rows", [0, 40, 10**6])
def test_cached_batches_equal_uncached(device, budget_rows):
    # Hot-first relabelling is invisible: n_id, x, edges, labels and edge
    # attributes equal those of the loader without a cache, batch for batch,
    # whatever part of the graph the budget keeps on the device.
    data = random_data(edge_attr=True)
    _, plain = epoch(data, device=device)
    loader, cached = epoch(data, device=device, placement="host", profile_epochs=1,
                           cache_budget=budget_rows * row_bytes(data))
    assert len(plain) == len(cached)
    for a, b in zip(plain, cached, strict=True):  # every batch, not the shorter's
        for key in ("n_id", "x", "edge_index", "y", "e_id", "edge_attr", "input_id", "train_mask"):
            assert torch.equal(a[key], b[key]), key
        assert a.num_sampled_nodes == b.num_sampled_nodes and a.num_sampled_edges == b.num_sampled_edges
    stats = loader.stats
    assert stats["batches"] == len(cached)
    assert stats["feature_rows"] == sum(b.num_nodes for b in cached)
    plan = loader.cache.plan
    # the sampler reads the cached lists from the cache's copy (the batches
    # are the same either way: only this shows the cache is wired in)
    tiers = loader.sampler._tiers
    if 0 < plan.num_adjacency < data.num_nodes:
        assert tiers["hot_indices"] is loader.cache.hot_indices and tiers["hot_indptr"] is loader.cache.hot_indptr
        assert tiers["hot_indptr"].numel() == plan.num_adjacency + 1
    # where the sampler reads two tiers, each hop's visit order follows from
    # the plan's expected hit rate (profiled: a number)
    assert 0 <= plan.adjacency_hit_rate <= 1
    assert ("sort_frontier" in loader.sampler._kernel) == bool(tiers)
    if budget_rows == 0:
        assert stats["feature_hit_rate"] == 0.0 and stats["adjacency_hit_rate"] == 0.0
        assert stats["feature_bytes_from_host"] == stats["feature_rows"] * row_bytes(data)
    elif budget_rows == 10**6:
        assert stats["feature_hit_rate"] == 1.0 and plan.num_feature == data.num_nodes
    else:  # part of it cached, rows or lists as the split found best
        assert 0.0 < stats["feature_hit_rate"] + stats["adjacency_hit_rate"] < 2.0
        assert plan.feature_bytes + plan.adjacency_bytes <= budget_rows * row_bytes(data)


@pytest.mark.parametrize("num_feature, num_adjacency", [(50, 50), (50, 20), (10, 50), (0, 0)])
def test_cache_stats_count_whole_tiers_on_the_host_alike(num_feature, num_adjacency):
    # a tier of every row (or list) is counted on the host, without its
    # kernels: the same statistics as counting each read
    from tritongnn.cache.dual import CacheStats
    g = torch.Generator().manual_seed(2)
    short, full = CacheStats(torch.device("cpu"), 512, num_nodes=50), CacheStats(torch.device("cpu"), 512)
    for _ in range(3):
        node = torch.randperm(50, generator=g)[:30]
        col = torch.randint(0, 12, (40,), generator=g)
        for stats in (short, full):
            stats.record(node, col, [4, 8, 18], num_feature, num_adjacency, reused=torch.tensor(2))
    assert short.as_dict() == full.as_dict()
    if num_feature == 50:
        assert short.as_dict()["feature_hit_rate"] == 1.0 and int(short._counts[0]) == 0  # none on the device
    if num_adjacency == 50:
        assert short.as_dict()["adjacency_hit_rate"] == 1.0 and int(short._counts[2]) == 0


@pytest.mark.parametrize("dynamic", [False, True])
def test_host_features_stay_in_user_ids_uncopied(device, dynamic):
    # Rows the cache leaves in host memory are read where the user's table
    # has them (internal id i at row order[i]): a pinned table, or any table
    # of a CPU loader, is not copied, not reordered and not written.
    data = random_data()
    if device.type == "cuda":
        data.x = data.x.pin_memory()
    before = data.x.clone()
    _, plain = epoch(data, device=device)
    loader, cached = epoch(data, device=device, placement="host", profile_epochs=1,
                           cache_budget=30 * row_bytes(data), cache_policy="degree", dynamic_cache=dynamic)
    assert 0 < loader.cache.plan.num_feature < data.num_nodes
    assert loader.x.data_ptr() == data.x.data_ptr() and loader.cache.row_map is loader.cache.order
    assert torch.equal(loader.cache.hot_x.cpu(), data.x[loader.cache.order[:loader.cache.plan.num_feature].cpu()])
    for a, b in zip(plain, cached, strict=True):  # every batch, not the shorter's
        assert torch.equal(a.x, b.x) and torch.equal(a.n_id, b.n_id)
    assert torch.equal(data.x, before)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("warm_rows", [1, 25, 10**6])
def test_warm_copy_changes_no_batch(device, warm_rows, dynamic):
    # The warm copy (rows F .. F + W - 1 in hot-first order, pinned) is the
    # user's rows, packed: the batches are those of the cache without it. On
    # a GPU the gather reads it (tests/test_gather.py says which rows); a
    # CPU loader makes none (nothing is read through UVA there).
    data = random_data()
    if device.type == "cuda":
        data.x = data.x.pin_memory()
    before = data.x.clone()
    args = dict(device=device, placement="host", profile_epochs=1, cache_budget=30 * row_bytes(data),
                dynamic_cache=dynamic)
    _, plain = epoch(data, **args)
    loader, warm = epoch(data, warm_budget=warm_rows * row_bytes(data) + 3, **args)
    cache = loader.cache
    if device.type == "cuda":
        num_feature = cache.plan.num_feature
        rows = min(warm_rows, data.num_nodes - num_feature)
        assert cache.warm_x.shape == (rows, data.x.size(1)) and cache.warm_x.is_pinned()
        assert torch.equal(cache.warm_x, data.x[cache.order[num_feature:num_feature + rows].cpu()])
    else:
        assert cache.warm_x is None
    for a, b in zip(plain, warm):
        assert torch.equal(a.x, b.x) and torch.equal(a.n_id, b.n_id)
    assert loader.stats["feature_rows"] == sum(b.num_nodes for b in warm)
    assert torch.equal(data.x, before)


def test_whole_table_cached_from_pinned_or_pageable_memory(device):
    # a budget that holds every row: x renamed onto the device by one UVA
    # gather (pinned) or in row chunks (pageable), never permuted on the host
    data = random_data()
    _, plain = epoch(data, device=device)
    for pin in ((False, True) if device.type == "cuda" else (False,)):
        if pin:
            data.x = data.x.pin_memory()
        loader, cached = epoch(data, device=device, placement="host", profile_epochs=1,
                               cache_budget=10**6 * row_bytes(data))
        assert loader.cache.plan.num_feature == data.num_nodes and loader.x.device.type == device.type
        for a, b in zip(plain, cached, strict=True):  # every batch, not the shorter's
            assert torch.equal(a.x, b.x) and torch.equal(a.n_id, b.n_id)


def test_hot_first_cache_beats_its_share(device):
    # With room for 10% of the rows (some of it going to lists), the rows the
    # profiled cache holds serve far more than their share of the gathers
    # when the sampled neighbours are skewed (sources drawn as rand()**3, as
    # power-law graphs have hubs), and about the share its plan expected
    # from the profile.
    data = random_data(num_nodes=3000, num_edges=30_000)
    g = torch.Generator().manual_seed(1)
    data.edge_index[0] = (torch.rand(30_000, generator=g) ** 3 * 3000).long()
    loader, batches = epoch(data, device=device, num_neighbors=[3, 2], batch_size=64, placement="host",
                            profile_epochs=2, cache_budget=300 * row_bytes(data))
    plan = loader.cache.plan
    assert 0 < plan.num_feature <= 300
    assert loader.stats["feature_hit_rate"] > 3 * plan.num_feature / data.num_nodes
    assert abs(loader.stats["feature_hit_rate"] - plan.feature_hit_rate) < 0.1


def test_stats_per_epoch_and_profile_file(tmp_path):
    data = random_data()
    path = tmp_path / "profile.pt"
    loader, _ = epoch(data, device="cpu", placement="host", cache_budget=50 * row_bytes(data),
                      cache_profile=str(path), profile_epochs=1)
    assert path.exists()
    list(loader)  # a second epoch: the first goes to stats_history
    assert len(loader.stats_history) == 1 and loader.stats["batches"] == len(loader)
    again, _ = epoch(data, device="cpu", placement="host", cache_budget=50 * row_bytes(data),
                     cache_profile=str(path))
    assert torch.equal(again.cache.plan.order, loader.cache.plan.order)
    assert torch.equal(again.cache_profile.feature, AccessProfile.load(path).feature)
    plain = NeighborLoader(data, [2], batch_size=8)
    list(plain)
    stats = plain.stats  # no cache: the stage times only
    assert stats["batches"] == len(plain) and "feature_hit_rate" not in stats
    for key in ("sampling_seconds", "gather_seconds", "model_seconds", "wait_seconds"):
        assert stats[key] >= 0.0
    assert stats["epoch_seconds"] == pytest.approx(stats["model_seconds"] + stats["wait_seconds"])


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(cache_budget=-1), ValueError, ">= 0"),
    (dict(cache_budget=1.5), TypeError, "budget"),
    (dict(cache_budget="lots"), ValueError, "'auto'"),
    (dict(cache_budget="auto"), ValueError, "CUDA"),
    (dict(cache_budget=100, placement="device"), ValueError, "placement='host'"),
    (dict(cache_budget=100, cache_profile=3), TypeError, "cache_profile"),
    (dict(cache_budget=100, profile_epochs=0), ValueError, "profile_epochs"),
    (dict(cache_budget=100, cache_policy="lfu"), ValueError, "cache_policy"),
    (dict(cache_budget=100, cache_policy="degree", cache_profile="p.pt"), TypeError, "cache_profile"),
    (dict(cache_budget=100, cache_profile=AccessProfile(torch.zeros(300), torch.zeros(300).long(),
                                                         torch.zeros(300).long(), 1, 1, 0.0, [5])),
     ValueError, r"num_neighbors=\[5\]"),
    (dict(cache_budget=100, cache_profile=AccessProfile(torch.zeros(3), torch.zeros(3).long(),
                                                         torch.zeros(3).long(), 1, 1, 0.0)),
     ValueError, "counts 3 nodes"),
    (dict(cache_budget=100, cache_profile=AccessProfile(torch.zeros(300), torch.zeros(5).long(),
                                                         torch.zeros(300).long(), 1, 1, 0.0, [3, 2])),
     ValueError, "inputs must be a 1-D integer tensor"),
    (dict(cache_budget=100, cache_profile=AccessProfile(torch.zeros(300, 1), torch.zeros(300).long(),
                                                         torch.zeros(300).long(), 1, 1, 0.0, [3, 2])),
     ValueError, "feature must be a 1-D floating-point tensor"),
    (dict(cache_budget=8e9), TypeError, "cache_budget must be an int"),
    (dict(cache_budget=-1), ValueError, "cache_budget must be >= 0"),
    (dict(cache_budget="8GB"), ValueError, "cache_budget must be an int number of bytes or 'auto'"),
    (dict(warm_budget=10**4), ValueError, "warm_budget=10000 .* pass cache_budget"),
    (dict(cache_budget=100, warm_budget=-1), ValueError, "warm_budget must be >= 0"),
    (dict(cache_budget=100, warm_budget=1.5e6), TypeError, "warm_budget must be an int"),
    (dict(cache_budget=100, warm_budget=True), TypeError, "warm_budget must be an int"),
])
def test_bad_cache_arguments(kwargs, error, match):
    data = random_data()
    args = dict(num_neighbors=[3, 2], batch_size=8, device="cpu", placement="host")
    args.update(kwargs)
    with pytest.raises(error, match=match):
        NeighborLoader(data, **args)


def test_stats_time_the_model_and_the_wait():
    # the loop's time between batches is the model's: a step that sleeps
    # 20 ms a batch shows at least that much (the split is not its own sum)
    import time
    data = random_data()
    loader = NeighborLoader(data, [3, 2], batch_size=40, input_nodes=data.train_mask, device="cpu", seed=0)
    for _ in loader:
        time.sleep(0.02)
    stats = loader.stats
    assert stats["model_seconds"] >= 0.02 * (stats["batches"] - 1)
    assert stats["sampling_seconds"] > 0 and stats["gather_seconds"] > 0
    assert stats["epoch_seconds"] >= stats["model_seconds"]


def test_features_without_columns_with_a_cache():
    data = random_data()
    data.x = torch.empty(data.num_nodes, 0)
    with pytest.raises(ValueError, match=r"data.x has shape \(300, 0\)"):
        NeighborLoader(data, [3, 2], batch_size=8, device="cpu", placement="host", cache_budget=1000,
                       dynamic_cache=True)


def test_budget_past_int64_caches_everything():
    # on a CPU loader nothing caps the budget at a device's memory (a GPU
    # loader refuses more than the GPU has): a budget past every byte, and
    # past int64, is the whole graph, not an overflow
    data = random_data()
    loader, _ = epoch(data, device="cpu", placement="host", profile_epochs=1, cache_budget=10**20)
    assert loader.cache.plan.num_feature == loader.cache.plan.num_adjacency == data.num_nodes


def test_column_major_features_with_a_cache(device):
    # a transposed view (rows not contiguous) is read as the user's table is
    data = random_data()
    x = data.x.clone()
    data.x = data.x.t().contiguous().t()
    loader, batches = epoch(data, device=device, placement="host", profile_epochs=1,
                            cache_budget=40 * row_bytes(data))
    assert loader.cache.plan.num_feature < data.num_nodes  # some rows come from the host table
    for batch in batches:
        assert torch.equal(batch.x.cpu(), x[batch.n_id.cpu()])
    assert data.x.stride() == (1, data.num_nodes)  # the user's view untouched


def test_cache_profile_file_that_is_no_profile(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a profile")
    with pytest.raises(ValueError, match="is not a saved AccessProfile"):
        NeighborLoader(random_data(), [3, 2], batch_size=8, device="cpu", placement="host", cache_budget=100,
                       cache_profile=str(path))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_budget_larger_than_the_gpu():
    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(ValueError, match="more than the GPU"):
        NeighborLoader(random_data(), [2], batch_size=8, placement="host", cache_budget=total + 1)


@pytest.mark.parametrize("feature_dtype", [torch.float16, torch.bfloat16])
def test_feature_dtype_batches_hold_the_rounded_features(device, feature_dtype):
    # features stored narrow: every batch is the batch of the same loader
    # given the rounded features in data.x's dtype (float32), in every
    # placement and with the caches and reuse; data.x itself is not touched
    data = random_data(edge_attr=True)
    before = data.x.clone()
    rounded = data.clone()
    rounded.x = data.x.to(feature_dtype).float()
    assert not torch.equal(rounded.x, data.x)  # the rounding is visible: the comparison can fail
    budget = 60 * row_bytes(data)
    configs = [dict(), dict(placement="host"),
               dict(placement="host", profile_epochs=1, cache_budget=budget),
               dict(placement="host", profile_epochs=1, cache_budget=budget, dynamic_cache=True, reuse=True),
               dict(placement="host", profile_epochs=1, cache_budget=budget, reuse="group", super_batch=2,
                    warm_budget=budget)]
    for kwargs in configs:
        _, want = epoch(rounded, device=device, **kwargs)
        loader, got = epoch(data, device=device, feature_dtype=feature_dtype, **kwargs)
        assert loader.x.dtype == feature_dtype, kwargs
        for a, b in zip(want, got, strict=True):
            assert b.x.dtype == torch.float32
            for key in ("n_id", "x", "edge_index", "e_id", "edge_attr"):
                assert torch.equal(a[key], b[key]), (key, kwargs)
    assert torch.equal(data.x, before)


@pytest.mark.parametrize("reuse", [True, "group"])
def test_reuse_is_off_when_every_row_is_cached(device, reuse):
    # a budget that caches every row leaves no host read to save: no reuse,
    # and the same batches; below it, reuse is on
    data = random_data()
    _, want = epoch(data, device=device, placement="host", super_batch=2)
    whole, got = epoch(data, device=device, placement="host", super_batch=2, reuse=reuse, profile_epochs=1,
                       cache_budget=10**6 * row_bytes(data))
    assert whole.cache.plan.num_feature == data.num_nodes and whole.reuse is None
    assert whole.stats["reused_rows"] == 0 and whole.stats["feature_hit_rate"] == 1.0
    for a, b in zip(want, got, strict=True):
        for key in ("n_id", "x", "edge_index"):
            assert torch.equal(a[key], b[key]), key
    part, _ = epoch(data, device=device, placement="host", super_batch=2, reuse=reuse, profile_epochs=1,
                    cache_budget=30 * row_bytes(data))
    assert part.reuse is not None


def test_feature_dtype_past_its_range_is_refused(device):
    # rows wide enough that the conversion runs in several chunks, the bad
    # value past the first: the error names its row; inf and NaN that data.x
    # already holds are kept, not refused (on a GPU the chunks are converted
    # there, from the user's CPU tensor, host storage and GPU storage alike)
    data = random_data(num_nodes=40, num_edges=200)
    data.x = torch.randn(40, 1 << 20, generator=torch.Generator().manual_seed(0))
    data.x[3, 5], data.x[4, 6], data.x[5, 7] = float("inf"), float("-inf"), float("nan")
    data.x[2, 9] = 65519.0  # rounds to float16's largest, 65504
    placements = ["device", "host"] if device.type == "cuda" else ["device"]
    for placement in placements:
        loader = NeighborLoader(data, [3], batch_size=40, feature_dtype=torch.float16, device=device,
                                placement=placement)
        batch = next(iter(loader))
        x = batch.x[torch.argsort(batch.n_id)].cpu()
        assert x[3, 5] == float("inf") and x[4, 6] == float("-inf") and x[5, 7].isnan() and x[2, 9] == 65504.0
        want = data.x.to(torch.float16)  # every chunk converted, as the CPU rounds
        got = loader.x.cpu()
        number = ~want.isnan()  # NaN's bits are the converter's own (a GPU's 0x7fff, the CPU's 0x7e00)
        assert torch.equal(got.isnan(), ~number), placement
        assert torch.equal(got.view(torch.int16)[number], want.view(torch.int16)[number]), placement
    before = data.x.clone()
    data.x[33, 1000] = 65520.0  # past float16's range; bfloat16 holds it
    for placement in placements:
        with pytest.raises(ValueError, match=r"row 33 has values past its range.*pass torch.bfloat16"):
            NeighborLoader(data, [3], batch_size=8, feature_dtype=torch.float16, device=device, placement=placement)
        NeighborLoader(data, [3], batch_size=8, feature_dtype=torch.bfloat16, device=device, placement=placement)
    data.x[33, 1000] = 3.4e38  # past bfloat16's too: no dtype to suggest but None
    with pytest.raises(ValueError, match=r"row 33 .*; pass None"):
        NeighborLoader(data, [3], batch_size=8, feature_dtype=torch.bfloat16, device=device)
    before[33, 1000] = 3.4e38
    assert torch.equal(data.x.view(torch.int32), before.view(torch.int32))  # the user's x untouched


def test_feature_dtype_needs_floating_features():
    data = random_data()
    data.x = torch.randint(0, 5, (data.num_nodes, 4))
    with pytest.raises(ValueError, match="data.x must be floating-point, got torch.int64"):
        NeighborLoader(data, [3], batch_size=8, feature_dtype=torch.float16)
    data.x = torch.randn(data.num_nodes, 4).half()
    with pytest.raises(ValueError, match="must be narrower than data.x's torch.float16"):
        NeighborLoader(data, [3], batch_size=8, feature_dtype=torch.bfloat16)
    data.x = torch.randn(data.num_nodes, 4, dtype=torch.float64)  # float64 stored as float32: batches float64
    batch = next(iter(NeighborLoader(data, [3], batch_size=8, feature_dtype=torch.float32)))
    assert batch.x.dtype == torch.float64 and torch.equal(batch.x, data.x[batch.n_id].float().double())
