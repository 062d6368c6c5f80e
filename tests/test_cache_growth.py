"""The feature cache grown after the first pass into the GPU memory it left
(``loader.growth``): the next-hottest rows cached, the batches unchanged."""
import pytest
import torch

from tritongnn import NeighborLoader
from tritongnn.loader import growth

from test_loader import random_data
from test_saved_build import assert_same

ROW = 12 * 4  # random_data's rows: 12 float32


def loader_of(data, device, budget_rows):
    return NeighborLoader(data, [4, 3], batch_size=40, shuffle=True, seed=3, input_nodes=data.train_mask,
                          device=device, placement="host", profile_epochs=1, cache_budget=budget_rows * ROW)


def with_room(monkeypatch, rows):
    """The process may use its GPU peak, a margin of 1 byte and ``rows`` rows."""
    monkeypatch.setattr(growth, "MIN_MARGIN", 0)
    monkeypatch.setattr(growth, "MARGIN_SHARE", 10**9)
    monkeypatch.setattr(growth, "MIN_GROWTH", ROW)
    monkeypatch.setattr(growth, "device_total_bytes", lambda device: 10**9)
    monkeypatch.setattr(growth, "pass_need_bytes", lambda device: 10**9 - rows * ROW - 1)


def test_the_cache_grows_once_after_a_whole_pass_into_the_next_hottest_rows(device, monkeypatch):
    data = random_data()
    grown, plain = loader_of(data, device, 20), loader_of(data, device, 20)
    planned = grown.cache.plan.num_feature
    grown.growth = growth.CacheGrowth(grown.cache, grown.device, eligible=True)
    with_room(monkeypatch, 30)
    for epoch in range(3):
        assert_same([b for b in plain], [b for b in grown])  # exact before and after
        assert grown.cache.plan.num_feature == (planned if epoch == 0 else planned + 30)
    cache = grown.cache
    assert torch.equal(cache.hot_x.cpu(), data.x[cache.order[:planned + 30].cpu()])
    assert cache.plan.feature_bytes == (planned + 30) * ROW
    assert "features of 30 more nodes" in grown.stats["cache_grown"]
    # the rows it took are the hottest the plan left: a higher expected hit rate, and measured
    assert cache.plan.feature_hit_rate > plain.cache.plan.feature_hit_rate
    assert grown.stats["static_feature_hit_rate"] > plain.stats["static_feature_hit_rate"]
    assert grown.stats["host_bytes"] < plain.stats["host_bytes"]


def test_a_part_of_a_pass_measures_nothing(device, monkeypatch):
    loader = loader_of(random_data(), device, 20)
    planned = loader.cache.plan.num_feature
    loader.growth = growth.CacheGrowth(loader.cache, loader.device, eligible=True)
    with_room(monkeypatch, 30)
    assert len([b for _, b in zip(range(2), loader)]) == 2
    list(loader)
    assert loader.cache.plan.num_feature == planned and loader.stats["cache_grown"] is None
    list(loader)
    assert loader.cache.plan.num_feature == planned + 30


def test_too_little_room_grows_nothing_and_says_so(device, monkeypatch):
    data = random_data()
    loader = loader_of(data, device, 20)
    planned = loader.cache.plan.num_feature
    loader.growth = growth.CacheGrowth(loader.cache, loader.device, eligible=True)
    with_room(monkeypatch, 30)
    monkeypatch.setattr(growth, "MIN_GROWTH", 31 * ROW)
    for _ in range(2):
        list(loader)
    assert loader.cache.plan.num_feature == planned and loader.stats["cache_grown"].startswith("not grown")


def test_only_the_automatic_budget_grows(device):
    data = random_data()
    loader = loader_of(data, device, 20)  # a budget the user stated stays
    assert not loader.growth.pending and loader.stats["cache_grown"] is None
    with pytest.raises(ValueError, match="num_feature"):
        loader.cache.grow_features(loader.cache.plan.num_feature)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_refused_growth_leaves_the_cache_as_it_was(monkeypatch):
    from tritongnn.cache import dual
    data = random_data()
    grown, plain = loader_of(data, "cuda", 20), loader_of(data, "cuda", 20)
    planned = grown.cache.plan.num_feature
    grown.growth = growth.CacheGrowth(grown.cache, grown.device, eligible=True)
    with_room(monkeypatch, 30)
    real, calls = dual.gather_rows, []

    def refuse_once(table, ids, *args, **kwargs):
        calls.append(ids.numel())
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (refused by the test)")
        return real(table, ids, *args, **kwargs)
    monkeypatch.setattr(dual, "gather_rows", refuse_once)
    for _ in range(2):
        assert_same([b for b in plain], [b for b in grown])
    assert calls == [planned + 30, planned]
    assert grown.cache.plan.num_feature == planned and grown.cache.hot_x.size(0) == planned
    assert "the GPU refused" in grown.stats["cache_grown"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_pass_is_measured_by_its_own_peaks_and_the_pieces_it_could_not_hand_back():
    """The build's temporaries set a peak no pass repeats: the loader notes
    it and starts the pass's counters afresh; a free piece of a segment
    still in use (fragmentation) counts as needed."""
    device = torch.device("cuda", torch.cuda.current_device())
    meter = growth.CacheGrowth(None, device, eligible=False)
    meter.pending = True  # (a cache that may grow)
    build = torch.empty(1 << 28, dtype=torch.uint8, device=device)  # 256 MB of build temporaries
    del build
    torch.cuda.empty_cache()
    meter.start()
    assert meter.build_peak["allocated"] >= 1 << 28 and meter.build_peak["reserved"] >= 1 << 28
    base = torch.cuda.memory_allocated(device)
    assert growth.pass_need_bytes(device) < 1 << 28
    # two 4 MB blocks split from one 20 MB segment, the first freed: a piece the allocator cannot hand back
    first = torch.empty(4 << 20, dtype=torch.uint8, device=device)
    second = torch.empty(4 << 20, dtype=torch.uint8, device=device)
    del first
    need = growth.pass_need_bytes(device)
    assert need >= base + (8 << 20) + (4 << 20), (need, base)
    assert need < 1 << 28
    del second
