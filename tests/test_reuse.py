"""Match-reuse: rows of the previous batch copied on the GPU, never a
different batch, fewer host reads."""
import itertools

import pytest
import torch

from tritongnn import NeighborLoader
from tritongnn.loader.schedule import staging_group_sizes

from test_cache_dynamic import skewed_data
from test_cache_loader import epoch, row_bytes


def assert_same_batches(plain, other):
    assert len(plain) == len(other)
    for a, b in zip(plain, other, strict=True):  # every batch, not the shorter's
        for key in ("n_id", "x", "edge_index", "y"):
            assert torch.equal(a[key], b[key]), key


def test_reuse_changes_no_batch_and_reads_less(device):
    data = skewed_data()
    args = dict(num_neighbors=[3, 2], batch_size=64)
    _, plain = epoch(data, device=device, **args)
    host, _ = epoch(data, device=device, placement="host", **args)
    loader, reused = epoch(data, device=device, placement="host", reuse=True, **args)
    assert_same_batches(plain, reused)
    stats, without = loader.stats, host.stats
    assert without["reused_rows"] == 0 and without["feature_rows_from_host"] == without["feature_rows"]
    assert stats["reused_rows"] > 0.1 * stats["feature_rows"]  # hubs recur batch after batch
    assert stats["feature_rows_from_host"] == stats["feature_rows"] - stats["reused_rows"]
    assert stats["feature_bytes_from_host"] < without["feature_bytes_from_host"]


def test_reuse_after_static_and_dynamic_caches(device):
    data = skewed_data()
    args = dict(num_neighbors=[3, 2], batch_size=64, placement="host", profile_epochs=1,
                cache_budget=150 * row_bytes(data), dynamic_cache=dict(fraction=0.3, update_every=2))
    _, plain = epoch(data, device=device, num_neighbors=[3, 2], batch_size=64)
    cached, _ = epoch(data, device=device, **args)
    loader, both = epoch(data, device=device, reuse=True, **args)
    assert_same_batches(plain, both)
    s = loader.stats
    assert s["reused_rows"] > 0
    assert s["feature_rows_from_host"] == s["feature_rows"] - round(s["feature_rows"] * s["feature_hit_rate"]) \
        - s["reused_rows"]
    assert s["host_bytes"] < cached.stats["host_bytes"]


def test_reuse_survives_a_loop_that_modifies_x():
    # the loop may change batch.x in place: the loader reuses its own copy
    data = skewed_data()
    args = dict(num_neighbors=[3, 2], batch_size=64, device="cpu")
    _, plain = epoch(data, **args)
    loader = NeighborLoader(data, placement="host", reuse=True, shuffle=True, seed=5,
                            input_nodes=data.train_mask, **args)
    for a, b in zip(plain, loader, strict=True):  # every batch, not the shorter's
        assert torch.equal(a.x, b.x)
        b.x.zero_()


def test_reuse_arguments():
    data = skewed_data()
    with pytest.raises(ValueError, match="placement='host'"):
        NeighborLoader(data, [2], batch_size=8, placement="device", reuse=True)
    # the default placement ("auto") takes host memory for it
    assert NeighborLoader(data, [2], batch_size=8, reuse=True).placement == "host"
    with pytest.raises(TypeError, match="reuse must be a bool or 'group'"):
        NeighborLoader(data, [2], batch_size=8, placement="host", reuse="yes")
    with pytest.raises(ValueError, match="super_batch > 1 or reorder_group > 1"):
        NeighborLoader(data, [2], batch_size=8, placement="host", reuse="group")


@pytest.mark.parametrize("group", [dict(reorder_group=4), dict(super_batch=4)])
def test_group_reuse_reads_each_host_row_once_per_group(device, group):
    # reuse="group": the same batches as without it, and exactly the
    # distinct rows of each group of batches (a reorder group, or a
    # super-batch) read from host memory
    data = skewed_data()
    args = dict(num_neighbors=[3, 2], batch_size=64, placement="host", **group)
    _, plain = epoch(data, device=device, **args)
    loader, grouped = epoch(data, device=device, reuse="group", **args)
    assert_same_batches(plain, grouped)
    # a reorder's groups are its own; super-batches' last ones are halved
    sizes = whole_groups(len(grouped), 4) if "reorder_group" in group else staging_group_sizes(len(grouped), 4)
    ends = itertools.accumulate(sizes)
    distinct = sum(torch.unique(torch.cat([b.n_id for b in grouped[end - size:end]])).numel()
                   for size, end in zip(sizes, ends))
    s = loader.stats
    assert s["staged_rows"] == distinct
    assert s["feature_rows_from_host"] == distinct < s["feature_rows"]
    previous, _ = epoch(data, device=device, reuse=True, **args)
    assert s["feature_bytes_from_host"] < previous.stats["feature_bytes_from_host"]


def whole_groups(num_batches, group):
    return [group] * (num_batches // group) + [num_batches % group] * (num_batches % group > 0)


def test_staging_group_sizes_halve_the_last_groups():
    # full groups, then each group half of the batches left: the pass's
    # last steps, which no staging overlaps, are one batch's
    assert staging_group_sizes(150, 16) == [16] * 8 + [11, 6, 3, 1, 1]
    assert staging_group_sizes(16, 16) == [8, 4, 2, 1, 1]
    assert staging_group_sizes(32, 16) == [16, 8, 4, 2, 1, 1]
    assert staging_group_sizes(10, 4) == [4, 3, 2, 1]
    assert staging_group_sizes(1, 16) == [1]
    assert staging_group_sizes(5, 1) == [1] * 5
    assert staging_group_sizes(0, 4) == []


def test_group_reuse_stages_the_last_groups_halved(monkeypatch):
    # the loader stages the groups staging_group_sizes gives
    data = skewed_data()
    loader = NeighborLoader(data, [3, 2], batch_size=128, placement="host", super_batch=4, reuse="group")
    staged = []
    stage = loader.reuse.stage
    monkeypatch.setattr(loader.reuse, "stage", lambda table, nodes, *a: (staged.append(len(nodes)),
                                                                         stage(table, nodes, *a))[1])
    num_batches = sum(1 for _ in loader)
    assert num_batches == len(loader) >= 8
    assert staged == staging_group_sizes(num_batches, 4) != whole_groups(num_batches, 4)


def staging_is_released(loader):
    return all(buf.rows is None and bool((buf.slot == -1).all()) for buf in loader.reuse._buffers)


def test_group_reuse_stages_ahead_and_releases_with_the_pass(device):
    # the next group is staged (into the other buffer) before this one's
    # batches are gathered; a loop that mutates batch.x, a pass left early
    # and a whole epoch: the same batches as without reuse, every staged row
    # freed and every map entry back to -1 when the pass ends
    data = skewed_data()
    args = dict(num_neighbors=[3, 2], batch_size=32, placement="host", super_batch=2)
    _, plain = epoch(data, device=device, **args)
    assert len(plain) >= 6  # three groups at least: each buffer staged twice
    loader = NeighborLoader(data, reuse="group", shuffle=True, seed=5, input_nodes=data.train_mask,
                            device=device, **args)
    grouped = []
    for batch in loader:
        grouped.append(batch.clone())
        batch.x.zero_()  # the loop's own copy: the staged rows are not touched
    assert_same_batches(plain, grouped)
    s = loader.stats  # each group's gathers found all its host rows staged, none read again
    assert s["feature_rows_from_host"] == s["staged_rows"] < s["feature_rows"]
    assert staging_is_released(loader)
    for stop in (3, None):  # a pass left early, then a whole one: rows still the nodes' own
        for i, batch in enumerate(loader):
            assert torch.equal(batch.x.cpu(), data.x[batch.n_id.cpu()])
            if i == stop:
                break
        assert staging_is_released(loader)


def test_group_reuse_left_mid_group_finishes_its_group_before_the_release(monkeypatch):
    # a loop leaving at a group's first batch: that group's gathers are
    # marked issued (``finish``: the event the release waits for on the GPU)
    # before the buffers are released, not after, nor never
    data = skewed_data()
    loader = NeighborLoader(data, [3, 2], batch_size=32, placement="host", super_batch=2, reuse="group",
                            shuffle=True, seed=5, input_nodes=data.train_mask)
    calls = []
    for name in ("use", "finish", "release"):
        method = getattr(loader.reuse, name)
        monkeypatch.setattr(loader.reuse, name,
                            lambda *a, _name=name, _method=method: (calls.append(_name), _method(*a))[1])
    for i, _ in enumerate(loader):
        if i == 2:  # the first batch of the second group
            break
    assert calls == ["use", "finish", "use", "finish", "release"]
    assert staging_is_released(loader)


def test_group_reuse_after_static_and_dynamic_caches(device):
    data = skewed_data()
    args = dict(num_neighbors=[3, 2], batch_size=64, placement="host", profile_epochs=1, reorder_group=3,
                cache_budget=150 * row_bytes(data), dynamic_cache=dict(fraction=0.3, update_every=2))
    cached, plain = epoch(data, device=device, **args)  # the reorder sees the static cache: same order
    loader, grouped = epoch(data, device=device, reuse="group", **args)
    assert_same_batches(plain, grouped)
    s = loader.stats
    assert 0 < s["staged_rows"] < s["reused_rows"]  # each staged row served at least once
    assert s["host_bytes"] < cached.stats["host_bytes"]
