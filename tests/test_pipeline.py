"""Batches replayed from CUDA graphs (``tritongnn.loader.replay``) by the
producer thread: the built batches bit for bit, slots never overwritten
while a batch (or a view of it) is held, and the configurations that keep
the built batches. On a CPU the pipeline runs each "replay" eagerly under
Triton's interpreter (``ReplayState.eager_on_cpu``), in a producer thread
too."""
import gc
import weakref

import pytest
import torch

from test_loader import random_data
from test_super_batch import assert_same_batches
from tritongnn import NeighborLoader
from tritongnn.kernels.aggregate import _known_sorted
from tritongnn.loader import replay as replay_module
from tritongnn.loader.replay import most_slots

ALL_ROWS = 10**6  # a cache budget that holds every row of random_data's graph: no row crosses PCIe
THIRD = 300 * 12 * 4 // 3  # a dual cache of a third of the feature rows


def replaying(loader):
    """``loader``, replaying its batches on a CPU too (eagerly)."""
    loader.replay.eager_on_cpu = True
    return loader


def batches(loader):
    """A pass's batches, copied (a replayed batch kept would hold its slot)."""
    return [batch.clone().to("cpu") for batch in loader]


def loaders(data, device, num_neighbors=(4, 3), batch_size=37, **kwargs):
    """The same loader twice: replaying, and building each batch when asked
    (``prefetch=0``: no batch replayed; the same batches)."""
    kwargs = dict(num_neighbors=list(num_neighbors), input_nodes=data.train_mask, batch_size=batch_size,
                  shuffle=True, seed=3, device=device, **kwargs)
    replayed, built = replaying(NeighborLoader(data, **kwargs)), NeighborLoader(data, **kwargs, prefetch=0)
    assert replayed._replays_batches() and not built._replays_batches()
    return replayed, built


@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(placement="host", cache_budget=ALL_ROWS),  # a dual cache of every row: internal ids
    dict(placement="host", cache_budget=ALL_ROWS, feature_dtype=torch.float16),
])
def test_replayed_batches_are_the_built_ones(device, kwargs):
    data = random_data()
    replayed, built = loaders(data, device, **kwargs)
    for _ in range(2):  # a second pass replays the slots of the first
        want = batches(built)
        got = batches(replayed)
        assert_same_batches(got, want)
    assert got[-1].batch_size < 37  # a short last batch: built
    assert list(replayed.replay.slots) == [37] and not built.replay.slots
    assert 1 <= len(replayed.replay.slots[37]) <= most_slots(replayed.prefetch)
    stats = replayed.stats
    assert stats["batches"] == len(got) and stats["sampling_seconds"] > 0 and stats["gather_seconds"] > 0


def test_held_batches_and_views_are_never_overwritten(device):
    data = random_data()
    replayed, built = loaders(data, device, batch_size=16, drop_last=True)
    want = batches(built)
    # every batch kept: past the slots, the rest are built
    got = list(replayed)
    assert_same_batches(got, want)
    assert len(replayed.replay.slots[16]) == most_slots(replayed.prefetch) < len(got)
    del got
    # a view kept past its batch (and nothing else of it) holds its slot too
    want = batches(built)
    kept = first = None
    for i, batch in enumerate(replayed):
        # marked sorted, and trim_to_layer's leading slices with it (no sync a layer)
        assert _known_sorted(batch.edge_index) and _known_sorted(batch.edge_index[:, :3])
        if i == 0:
            kept, first = batch.x[:5], batch.x[:5].clone()
    assert torch.equal(kept, first) and torch.equal(kept.cpu(), want[0].x[:5])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: run with -m gpu on the GPU machine")
def test_batches_taken_on_two_streams():
    # each batch read on the stream current where it was asked for, after a
    # long kernel there: its slot's next replay must wait for that work
    # (every stream the loop took a batch on)
    data = random_data()
    replayed, built = loaders(data, "cuda", batch_size=16, drop_last=True)
    want = batches(built)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    slow = torch.randn(2048, 2048, device="cuda")
    got = []
    for i, batch in enumerate(replayed):
        with torch.cuda.stream(streams[i % 2]):
            for _ in range(4):  # queued ahead of the copy, so the copy runs late
                slow = slow @ slow / 2048
            got.append(batch.clone())  # on the GPU: the loop goes on before it runs
    torch.cuda.synchronize()
    assert_same_batches([batch.to("cpu") for batch in got], want)


def test_leaving_a_pass_early_then_a_full_pass(device):
    data = random_data()
    replayed, built = loaders(data, device)
    for i, _ in enumerate(replayed):
        if i == 1:
            break
    # the next pass from the same generator state: the same batches
    built.generator.set_state(replayed.generator.get_state())
    built.epoch = replayed.epoch
    want = batches(built)
    assert_same_batches(batches(replayed), want)


@pytest.mark.parametrize("kwargs", [
    dict(super_batch=2), dict(reorder_group=2), dict(prefetch=0),
    dict(placement="host"), dict(placement="host", cache_budget=THIRD),  # rows through PCIe
])
def test_configurations_that_keep_the_built_batches(kwargs):
    data = random_data()
    assert replaying(NeighborLoader(data, [4, 3], batch_size=37, device="cpu"))._replays_batches()
    loader = replaying(NeighborLoader(data, [4, 3], batch_size=37, device="cpu", **kwargs))
    assert not loader._replays_batches()
    with_edges = replaying(NeighborLoader(random_data(edge_attr=True), [4, 3], batch_size=37, device="cpu"))
    assert not with_edges._replays_batches()


def test_a_hop_that_syncs_keeps_the_built_batches():
    data = random_data()
    replayed, built = loaders(data, "cpu", num_neighbors=(4, -1))
    assert replayed.sampler.packed_batch(37) is None
    want = batches(built)
    assert_same_batches(batches(replayed), want)
    assert replayed.replay.failed[37] and not replayed.replay.slots.get(37)


@pytest.mark.parametrize("batch_size", [0, -3, 2.5, True, "8"])
def test_packed_batch_refuses_a_bad_batch_size(batch_size):
    loader = NeighborLoader(random_data(), [4, 3], batch_size=37, device="cpu")
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        loader.sampler.packed_batch(batch_size)


@pytest.mark.parametrize("slot_rows", [0.5, 1.0])
def test_batches_past_a_slots_rows_are_completed(device, slot_rows):
    # a slot holds slot_rows x the nodes of the largest batch seen when it was
    # sized: below 1, every batch outgrows its slot (gathered anew, the slot
    # sized again); at 1, those larger than the first batches do
    data = random_data()
    replayed, built = loaders(data, device, batch_size=16, drop_last=True, placement="host",
                              cache_budget=ALL_ROWS)
    replayed.replay.slot_rows = slot_rows
    sizes = []
    for _ in range(2):
        want = batches(built)
        assert_same_batches(batches(replayed), want)
        sizes += [batch.num_nodes for batch in want]
    slots = replayed.replay.slots[16]
    bound = slots[0].packed.node.numel()
    assert all(slot.rows is None or 1 <= slot.rows < bound for slot in slots)
    assert replayed.replay.most_nodes == max(sizes)


@pytest.mark.parametrize("kwargs", [dict(), dict(placement="host", cache_budget=ALL_ROWS)])
def test_a_gather_graph_refused_keeps_the_batch(monkeypatch, kwargs):
    # a slot whose gather graph cannot be captured: its batch gathered anew,
    # every later batch of the size built (with a cache, the slot never got
    # an n_id buffer of its own)
    def refuse(self, num_nodes, most_seen, slot_rows):
        raise RuntimeError("capture refused")
    monkeypatch.setattr(replay_module._Slot, "size_rows", refuse)
    data = random_data()
    replayed, built = loaders(data, "cpu", batch_size=16, drop_last=True, **kwargs)
    want = batches(built)
    assert_same_batches(batches(replayed), want)
    assert replayed.replay.failed[16] and [slot.rows for slot in replayed.replay.slots[16]] == [0]


@pytest.mark.parametrize("replay", [True, False], ids=["replayed", "built"])
def test_a_dropped_loader_is_freed_at_once(device, replay):
    # no reference cycle keeps a loader, its sampler and their tables (pinned
    # host memory, for the host tiers) past the user's last reference until
    # the cyclic GC next runs: neither its slots (which hold the loader's
    # tiers and the sampler's packed graphs) nor, on a GPU, the sampler's own
    # captured hops (replayed where the cache holds every row; built where
    # rows cross PCIe)
    data = random_data()
    loader = replaying(NeighborLoader(data, num_neighbors=[4, 3], input_nodes=data.train_mask, batch_size=16,
                                      device=device, placement="host", cache_budget=ALL_ROWS if replay else THIRD))
    assert loader._replays_batches() == replay
    gc.collect()
    gc.disable()
    try:
        for _ in range(2):
            for batch in loader:
                pass
        del batch
        assert bool(loader.replay.slots) == replay  # (a pass replayed into slots, or none made)
        if device.type == "cuda":  # the built path replays the sampler's captured hops
            assert replay or any(c is not None for c in loader.sampler._captured.values())
        held = [loader, loader.sampler, loader.sampler.graph.indices]
        held += [loader.x] if loader.x.data_ptr() != data.x.data_ptr() else []  # (not the user's own x)
        refs = [weakref.ref(t) for t in held]
        del held
        del loader
        assert [ref() is None for ref in refs] == [True] * len(refs)
    finally:
        gc.enable()


@pytest.mark.parametrize("kwargs, replays", [
    (dict(), True),  # placement="device": every row in GPU memory
    (dict(placement="host"), False),  # every row through PCIe
    (dict(placement="host", cache_budget=THIRD), False),  # a dual cache, a third of the rows
    (dict(placement="host", cache_budget=ALL_ROWS), True),  # a cache holding every row
])
def test_replayed_where_no_row_crosses_pcie(kwargs, replays):
    # replayed where the step is bound by the host, not where a batch's host
    # rows bound it
    data = random_data()
    loader = replaying(NeighborLoader(data, num_neighbors=[4, 3], input_nodes=data.train_mask, batch_size=16,
                                      device="cpu", **kwargs))
    assert loader._reads_no_host_rows() == replays and loader._replays_batches() == replays
    assert len([batch.clone() for batch in loader]) > 1
    assert bool(loader.replay.slots) == replays  # the pass replayed into slots, or built every batch
