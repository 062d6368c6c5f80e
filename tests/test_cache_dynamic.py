"""The dynamic feature cache (ADFC): EWMA scores, top-K refresh, stop rules,
and batches that stay bit for bit what they are without it."""
import pytest
import torch

from tritongnn import NeighborLoader
from tritongnn.cache import DynamicCache, DynamicCacheConfig

from test_cache_loader import epoch, row_bytes
from test_loader import random_data


def make_cache(num_nodes=50, num_static=10, capacity=8, width=3, **config):
    x = torch.arange(num_nodes * width, dtype=torch.float32).reshape(num_nodes, width)
    return x, DynamicCache(x, num_static, capacity, DynamicCacheConfig(**config), "cpu")


def test_scores_follow_eq5():
    # Score(v, t) = gamma * Score(v, t - 1) + 1(v missed by the static cache);
    # stored lazily times gamma ** -t: the ratio to the explicit EWMA is one
    # common factor, so the ranking is the same
    _, cache = make_cache(decay=0.5, update_every=100)
    batches = [torch.tensor([0, 12, 13]), torch.tensor([12, 3]), torch.tensor([14, 13, 12, 9])]
    explicit = torch.zeros(40, dtype=torch.float64)
    for node in batches:
        cache.observe(node)
        explicit *= 0.5
        cold = node[node >= 10] - 10
        explicit[cold] += 1
    stored = cache.score.double() / cache._scale
    assert torch.allclose(stored, explicit)
    assert explicit[2] == 1 + 0.5 + 0.25  # node 12: in every batch


def test_scores_stay_finite_with_a_tiny_decay():
    # the stored scale grows by 1 / decay a batch: rescaled before it leaves
    # float32's range (it overflowed after the add: every score NaN)
    _, cache = make_cache(decay=1e-20, update_every=100)
    for node in (torch.tensor([12, 13]), torch.tensor([13, 14]), torch.tensor([14, 15])):
        cache.observe(node)
    stored = cache.score.double() / cache._scale
    assert torch.isfinite(cache.score).all()
    assert torch.allclose(stored[4:6], torch.ones(2, dtype=torch.float64))  # the last batch's
    assert stored[2] < 1e-30 and stored[3] < 1e-19  # faded by decay per batch since


def test_refresh_caches_the_top_scores_and_keeps_the_map_consistent():
    x, cache = make_cache(capacity=4, update_every=2, max_replace=1.0)
    for _ in range(2):
        cache.before_batch()
        cache.observe(torch.tensor([20, 21, 22, 23, 24, 5]))
        cache.observe(torch.tensor([20, 21, 22, 23]))  # 20..23 score higher than 24
    cache.before_batch()  # commits the refresh started on the batch before
    assert cache.refreshes == 1
    cached = set((cache.occupant[cache.occupant >= 0] + 10).tolist())
    assert cached == {20, 21, 22, 23}
    for s, node in enumerate(cache.occupant.tolist()):
        assert cache.slot[node] == s and torch.equal(cache.rows[s], x[10 + node])
    assert int((cache.slot >= 0).sum()) == 4


def test_refresh_reads_a_table_in_other_ids_through_row_map():
    # the dual cache hands the user's host table and its map: a refresh
    # stores internal row F + j, which is the user's row row_map[F + j]
    logical = torch.arange(150, dtype=torch.float32).reshape(50, 3)
    row_map = torch.randperm(50, generator=torch.Generator().manual_seed(2))
    user = torch.empty_like(logical)
    user[row_map] = logical
    cache = DynamicCache(user, 10, 4, DynamicCacheConfig(update_every=1, max_replace=1.0), "cpu",
                         row_map=row_map)
    for _ in range(2):
        cache.before_batch()
        cache.observe(torch.tensor([20, 21, 22, 23]))
    cache.before_batch()  # commits the refresh started on the batch before
    assert set((cache.occupant + 10).tolist()) == {20, 21, 22, 23}
    for s, node in enumerate(cache.occupant.tolist()):
        assert torch.equal(cache.rows[s], logical[10 + node])


def test_refresh_replaces_at_most_max_replace_and_evicts_the_cold():
    x, cache = make_cache(capacity=4, update_every=1, max_replace=0.5, decay=0.1, min_gain=-1.0)
    cache.before_batch()
    cache.observe(torch.tensor([20, 21, 22, 23]))
    cache.before_batch()  # refresh 1 chose 2 of them (max_replace 0.5 of 4)
    cache.observe(torch.tensor([20, 21, 22, 23]))
    cache.before_batch()
    assert cache.rows_replaced == 2 and int((cache.slot >= 0).sum()) == 2
    for _ in range(4):  # the accesses move to 30..33: old nodes fade (decay 0.1)
        cache.observe(torch.tensor([30, 31, 32, 33]))
        cache.before_batch()
    cached = set((cache.occupant[cache.occupant >= 0] + 10).tolist())
    assert cached == {30, 31, 32, 33}
    assert int((cache.slot >= 0).sum()) == 4  # evicted nodes left the map
    for s, node in enumerate(cache.occupant.tolist()):
        assert cache.slot[node] == s and torch.equal(cache.rows[s], x[10 + node])


def test_observe_counts_rows_served():
    _, cache = make_cache(capacity=4, update_every=1, max_replace=1.0)
    cache.before_batch()
    cache.observe(torch.tensor([20, 21]))
    cache.before_batch()
    cache.before_batch()  # committed
    assert int(cache.observe(torch.tensor([20, 21, 22, 3]))) == 2


def test_updates_stop_after_max_epochs():
    _, cache = make_cache(max_epochs=2, update_every=1)
    for _ in range(2):
        cache.new_epoch()
        assert cache.active
    cache.new_epoch()
    assert not cache.active and "max_epochs" in cache.stopped_because
    before = cache.score.clone()
    cache.observe(torch.tensor([20, 30]))  # frozen: no more scoring
    assert torch.equal(cache.score, before)


def test_updates_stop_when_the_gain_stalls():
    # the same accesses every batch: after the first refresh the hit rate
    # stops rising, so with patience 2 the updates stop
    _, cache = make_cache(capacity=4, update_every=1, max_replace=1.0, min_gain=0.01, patience=2)
    for _ in range(12):
        cache.before_batch()
        cache.observe(torch.tensor([20, 21, 22, 23, 40, 41]))
        if not cache.active:
            break
    assert not cache.active and "min_gain" in cache.stopped_because
    assert cache._rates[-1] == pytest.approx(4 / 6)


@pytest.mark.parametrize("kwargs,match", [
    (dict(fraction=0.0), "fraction"), (dict(fraction=1.0), "fraction"), (dict(decay=1.5), "decay"),
    (dict(update_every=0), "update_every"), (dict(max_epochs=1.5), "max_epochs"),
    (dict(max_replace=0), "max_replace"), (dict(min_gain="x"), "min_gain"), (dict(decay=1e-31), "decay"),
    (dict(decay=float("nan")), "decay"),
])
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DynamicCacheConfig(**kwargs)


def test_resolve_and_capacity():
    assert DynamicCacheConfig.resolve(None) is None and DynamicCacheConfig.resolve(False) is None
    assert DynamicCacheConfig.resolve(True) == DynamicCacheConfig()
    assert DynamicCacheConfig.resolve({"decay": 0.5}).decay == 0.5
    with pytest.raises(ValueError, match="unknown settings"):
        DynamicCacheConfig.resolve({"gamma": 0.5})
    with pytest.raises(TypeError, match="dynamic_cache"):
        DynamicCacheConfig.resolve(0.1)
    with pytest.raises(ValueError, match="capacity"):
        make_cache(num_nodes=20, num_static=15, capacity=6)


def skewed_data():
    data = random_data(num_nodes=3000, num_edges=30_000)
    g = torch.Generator().manual_seed(1)
    data.edge_index[0] = (torch.rand(30_000, generator=g) ** 3 * 3000).long()
    return data


def test_loader_with_dynamic_cache_gives_the_same_batches(device):
    # The dynamic cache changes where rows are read from, never what a batch
    # holds; it serves some rows the static cache misses.
    data = skewed_data()
    args = dict(num_neighbors=[3, 2], batch_size=64, profile_epochs=1)
    _, plain = epoch(data, device=device, **args)
    loader, cached = epoch(data, device=device, placement="host", cache_budget=300 * row_bytes(data),
                           dynamic_cache=dict(fraction=0.3, update_every=2, max_replace=1.0, min_gain=-1.0),
                           **args)
    assert len(plain) == len(cached)
    for a, b in zip(plain, cached):
        for key in ("n_id", "x", "edge_index", "y"):
            assert torch.equal(a[key], b[key]), key
    stats = loader.stats
    dynamic = loader.cache.dynamic
    assert dynamic.capacity == int(300 * row_bytes(data) * 0.3) // row_bytes(data)
    assert loader.cache.plan.feature_bytes + loader.cache.plan.adjacency_bytes + dynamic.nbytes \
        <= 300 * row_bytes(data)
    assert stats["dynamic_refreshes"] >= 2 and stats["dynamic_feature_hit_rate"] > 0.0
    assert stats["feature_hit_rate"] == pytest.approx(stats["static_feature_hit_rate"]
                                                      + stats["dynamic_feature_hit_rate"])
    rows = stats["feature_rows"]
    assert stats["feature_rows_from_host"] == round(rows * (1 - stats["feature_hit_rate"]))
    assert stats["host_bytes"] == stats["feature_bytes_from_host"] + stats["adjacency_bytes_from_host"] \
        + stats["dynamic_refresh_bytes_this_epoch"]


def test_dynamic_cache_off_when_everything_fits():
    data = random_data()
    loader, _ = epoch(data, device="cpu", placement="host", cache_budget=10**6 * row_bytes(data),
                      dynamic_cache=True, profile_epochs=1)
    assert loader.cache.dynamic is None and loader.cache.plan.num_feature == data.num_nodes


def test_dynamic_cache_needs_a_budget():
    with pytest.raises(ValueError, match="cache_budget"):
        NeighborLoader(random_data(), [2], batch_size=8, dynamic_cache=True)


def test_degree_policy(device):
    # the baseline: features of the nodes in the most neighbour lists, no
    # adjacency cache, no profiling; batches unchanged
    data = skewed_data()
    args = dict(num_neighbors=[3, 2], batch_size=64)
    _, plain = epoch(data, device=device, **args)
    loader, cached = epoch(data, device=device, placement="host", cache_budget=300 * row_bytes(data),
                           cache_policy="degree", **args)
    for a, b in zip(plain, cached):
        assert torch.equal(a.x, b.x) and torch.equal(a.n_id, b.n_id)
    plan = loader.cache.plan
    assert plan.num_adjacency == 0 and plan.num_feature == 300
    appearances = torch.bincount(data.edge_index[0], minlength=data.num_nodes)
    top = appearances[plan.order[:300]]
    assert int(top.min()) >= int(appearances[plan.order[300:]].max())
    assert loader.cache_profile is None and loader.stats["feature_hit_rate"] > 0.25


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_dynamic_cache_on_the_gpu_with_prefetch():
    # side-stream refreshes and commits between prefetched batches: every
    # batch still equals the uncached one, and refreshes happened
    data = skewed_data()
    args = dict(num_neighbors=[3, 2], batch_size=32, profile_epochs=1)
    _, plain = epoch(data, device="cuda", **args)
    loader, cached = epoch(data, device="cuda", placement="host", cache_budget=300 * row_bytes(data),
                           dynamic_cache=dict(fraction=0.3, update_every=2, min_gain=-1.0), prefetch=3,
                           **args)
    for a, b in zip(plain, cached):
        assert torch.equal(a.x, b.x) and torch.equal(a.n_id, b.n_id)
    for _ in range(2):  # more epochs: the refresh keeps running
        cached = list(loader)
    stats = loader.stats
    assert stats["dynamic_refreshes"] >= 10 and stats["dynamic_feature_hit_rate"] > 0.0
    assert stats["dynamic_refresh_gpu_seconds"] > 0.0


def test_refresh_ranks_a_snapshot_of_the_scores_on_a_gpu(monkeypatch):
    # on a GPU the refresh's topk runs on a side stream while the loader's
    # stream may still add the last batch into cache.score: CUDA's multi-block
    # topk reads its input more than once and leaves output slots unwritten
    # when it changes in between (garbage ids: an index out of bounds in
    # member[node] = wanted, seen at the papers100M scale with super_batch=8);
    # so topk must rank a copy, never the live tensor
    _, cache = make_cache(capacity=4, update_every=2, max_replace=1.0)
    cache.observe(torch.tensor([20, 21, 22, 23, 24]))
    cache.observe(torch.tensor([20, 21, 22, 23]))  # 20..23 rank above 24
    seen = []
    real_topk = torch.topk

    def recording_topk(t, *args, **kwargs):
        seen.append(t)
        return real_topk(t, *args, **kwargs)

    monkeypatch.setattr(torch, "topk", recording_topk)
    cache._cuda = True  # the branch a GPU cache takes (_choose itself runs on any device)
    newcomers, free, staged = cache._choose()
    assert len(seen) == 1 and seen[0].data_ptr() != cache.score.data_ptr()
    assert torch.equal(seen[0], cache.score)
    assert sorted((newcomers + 10).tolist()) == [20, 21, 22, 23]
