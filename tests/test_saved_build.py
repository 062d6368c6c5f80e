"""build_dir: a loader's CSC graph, profile and relabelled graph saved and read back."""
import os

import pytest
import torch

from tritongnn import NeighborLoader
from tritongnn.loader.saved import graph_key

from test_loader import random_data

KEYS = ("n_id", "x", "edge_index", "y", "e_id", "edge_attr", "input_id")


def epoch(data, device, **kwargs):
    args = dict(num_neighbors=[4, 3], batch_size=40, shuffle=True, seed=5, input_nodes=data.train_mask,
                device=device)
    args.update(kwargs)
    loader = NeighborLoader(data, **args)
    return loader, [b for b in loader]


def assert_same(plain, other):
    assert len(plain) == len(other)
    for a, b in zip(plain, other, strict=True):
        for key in KEYS:
            if key in a:
                assert torch.equal(a[key], b[key]), key
        assert a.num_sampled_nodes == b.num_sampled_nodes


def test_the_graph_is_saved_once_and_read_back(device, tmp_path):
    data = random_data(edge_attr=True)
    edge_index = data.edge_index.clone()
    _, plain = epoch(data, device)
    first, built = epoch(data, device, build_dir=tmp_path)
    second, read = epoch(data, device, build_dir=tmp_path)
    assert first.build_loaded == [] and second.build_loaded == ["graph"]
    assert_same(plain, built)
    assert_same(plain, read)
    assert torch.equal(data.edge_index, edge_index)  # the input untouched
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]  # no half-written file left


@pytest.mark.parametrize("budget_rows", [0, 40, 10**6])
def test_a_cached_loader_reads_its_profile_and_relabelled_graph_back(device, tmp_path, budget_rows):
    # The second loader sorts, profiles and relabels nothing: it reads the
    # profile and the relabelled graph, never the graph in the user's ids,
    # and its batches are those of a loader that built everything.
    data = random_data(edge_attr=True)
    budget = budget_rows * data.x.size(1) * data.x.element_size()
    kwargs = dict(placement="host", profile_epochs=1, cache_budget=budget)
    _, plain = epoch(data, device, **kwargs)
    first, built = epoch(data, device, build_dir=tmp_path, **kwargs)
    second, read = epoch(data, device, build_dir=tmp_path, **kwargs)
    assert first.build_loaded == []
    assert second.build_loaded == ["profile", "relabelled graph"]
    stats = second.stats  # what the loader chose, beside its counts
    assert stats["build_loaded"] == second.build_loaded and stats["cache_plan"] == str(second.cache.plan)
    assert stats["placement"] == "host" and stats["placement_reason"] == second.placement_reason
    assert torch.equal(first.cache.plan.order, second.cache.plan.order)
    assert first.cache.plan.num_feature == second.cache.plan.num_feature
    assert torch.equal(first.cache_profile.inputs.cpu(), second.cache_profile.inputs.cpu())
    assert_same(plain, built)
    assert_same(plain, read)


def test_a_saved_plan_serves_a_budget_slightly_above_it_only(tmp_path):
    data = random_data()
    row = data.x.size(1) * data.x.element_size()
    kwargs = dict(placement="host", profile_epochs=1, build_dir=tmp_path)
    first, _ = epoch(data, "cpu", cache_budget=100 * row, **kwargs)
    spent = first.cache.plan.feature_bytes + first.cache.plan.adjacency_bytes
    assert 0 < spent <= 100 * row
    near, _ = epoch(data, "cpu", cache_budget=101 * row, **kwargs)  # 1 % more: the saved plan
    assert near.build_loaded == ["profile", "relabelled graph"] and near.cache.plan.budget == 100 * row
    held, _ = epoch(data, "cpu", cache_budget=spent, **kwargs)  # less, still holding the plan: the saved plan
    assert "relabelled graph" in held.build_loaded and held.cache.plan.budget == 100 * row
    below, _ = epoch(data, "cpu", cache_budget=spent - 1, **kwargs)  # less: planned anew, never past it
    assert "relabelled graph" not in below.build_loaded and below.cache.plan.budget == spent - 1
    far, _ = epoch(data, "cpu", cache_budget=120 * row, **kwargs)
    assert "relabelled graph" not in far.build_loaded and far.cache.plan.budget == 120 * row


def test_another_profile_is_planned_anew(tmp_path):
    data = random_data()
    kwargs = dict(placement="host", cache_budget=60 * data.x.size(1) * 4, build_dir=tmp_path)
    epoch(data, "cpu", profile_epochs=1, **kwargs)
    other, batches = epoch(data, "cpu", profile_epochs=2, **kwargs)
    assert other.build_loaded == ["graph"]  # the graph, but neither that profile nor its plan
    _, plain = epoch(data, "cpu")
    assert_same(plain, batches)


def test_another_graph_of_the_same_size_is_built_anew(tmp_path):
    data = random_data()
    epoch(data, "cpu", build_dir=tmp_path)
    other = data.clone()
    other.edge_index = data.edge_index.flip(0)  # same size and dtype, other edges
    assert graph_key(other.edge_index, other.num_nodes, False) != graph_key(data.edge_index, data.num_nodes, False)
    loader, batches = epoch(other, "cpu", build_dir=tmp_path)
    _, plain = epoch(other, "cpu")
    assert loader.build_loaded == []
    assert_same(plain, batches)


def test_a_damaged_save_is_built_again(tmp_path):
    data = random_data()
    epoch(data, "cpu", build_dir=tmp_path)
    kwargs = dict(placement="host", profile_epochs=1, cache_budget=50 * data.x.size(1) * 4)
    epoch(data, "cpu", build_dir=tmp_path, **kwargs)
    for name in os.listdir(tmp_path):
        if name.endswith(".indices.npy") or name.endswith(".pt"):
            (tmp_path / name).write_bytes(b"not an array")
    # the graph built and saved again; then the profile and the relabelled graph
    for extra, loaded in (({}, []), (kwargs, ["graph"])):
        loader, batches = epoch(data, "cpu", build_dir=tmp_path, **extra)
        _, plain = epoch(data, "cpu", **extra)
        assert loader.build_loaded == loaded
        assert_same(plain, batches)
    assert epoch(data, "cpu", build_dir=tmp_path, **kwargs)[0].build_loaded == ["profile", "relabelled graph"]


def test_a_disk_that_refuses_warns_and_builds(tmp_path, monkeypatch):
    data = random_data()

    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("numpy.save", refuse)
    with pytest.warns(RuntimeWarning, match="not kept"):
        loader, batches = epoch(data, "cpu", build_dir=tmp_path)
    _, plain = epoch(data, "cpu")
    assert_same(plain, batches)
    assert not list(tmp_path.iterdir())


def test_bad_build_dir(tmp_path):
    data = random_data()
    with pytest.raises(TypeError, match="build_dir"):
        NeighborLoader(data, [2], batch_size=4, device="cpu", build_dir=3)
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(ValueError, match="build_dir"):
        NeighborLoader(data, [2], batch_size=4, device="cpu", build_dir=a_file)


def test_build_seconds_name_each_stage_once(monkeypatch):
    """Each stage is timed exclusive of the stages it calls (profiling builds
    the graph it samples: that time is the graph's)."""
    import time

    from tritongnn.loader import tiers
    clock = tiers.BuildClock(torch.device("cpu"))
    with clock("outer"):
        time.sleep(0.05)
        with clock("inner"):
            time.sleep(0.2)
    assert 0.05 <= clock.seconds["outer"] < 0.2 <= clock.seconds["inner"]

    real = tiers.CSCGraph.from_edge_index

    def slow_graph(*args, **kwargs):
        time.sleep(0.3)
        return real(*args, **kwargs)
    monkeypatch.setattr(tiers.CSCGraph, "from_edge_index", slow_graph)
    data = random_data()
    seconds = epoch(data, "cpu", cache_budget=4000)[0].stats["build_seconds"]
    assert set(seconds) == {"features", "graph", "profile", "plan", "cache"} and seconds["graph"] >= 0.3
    assert set(epoch(data, "cpu")[0].stats["build_seconds"]) == {"features", "graph"}
