"""GPU memory the process may still use, chunks of work sized by it, and
where ``placement="auto"`` puts the graph."""
import types

import pytest
import torch
from torch_geometric.data import Data

from tritongnn import memory
from tritongnn.memory import model_reserve
from tritongnn import NeighborLoader
from tritongnn.loader.placement import choose_placement
from tritongnn.loader.tiers import resolve_budget


def test_chunks_are_sized_by_the_memory_left():
    assert memory.chunk_items("cpu", 100, 10) == 10  # all of a small graph
    assert memory.chunk_items("cpu", 100, 10**10) == memory._CPU_ITEMS


def fake_capped_card(monkeypatch):
    """torch's CUDA queries faked (CPU): a process capped at 30 % of an 80
    GB card that has reserved 10 GB (6 GB of it in use)."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (60 * 10**9, 80 * 10**9))
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda device=None: 0.3, raising=False)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 10 * 10**9)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 6 * 10**9)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: types.SimpleNamespace(total_memory=80 * 10**9))
    cuda = torch.device("cuda", 0)
    assert memory.device_free_bytes(cuda) == 18 * 10**9
    assert memory.device_total_bytes(cuda) == 24 * 10**9
    assert memory.chunk_items(cuda, 100, 10**12) == 18 * 10**9 // 400
    auto = resolve_budget("auto", cuda, "auto")
    assert auto == 18 * 10**9 - (4 << 30)
    stated = resolve_budget("auto", cuda, 10**9)
    assert stated == 17 * 10**9


def test_auto_placement_puts_on_the_gpu_what_fits_with_the_reserve(monkeypatch):
    fake_capped_card(monkeypatch)
    cuda, gb = torch.device("cuda", 0), 10**9
    fits = choose_placement("auto", cuda, 5 * gb, 7 * gb, gb, cache_budget=None, host_only=False, reserve="auto")
    assert (fits.placement, fits.cache_budget) == ("device", None)
    # 5 + 7 + 1 GB and a 4 GiB reserve fit the 18 GB left, not with a 6 GB reserve
    tight = choose_placement("auto", cuda, 5 * gb, 7 * gb, gb, cache_budget=None, host_only=False, reserve=6 * gb)
    assert (tight.placement, tight.cache_budget) == ("host", "auto")
    assert "18.00 GB free" in tight.reason and "reserve 6.00 GB" in tight.reason
    # arguments of host placement, or host placement asked for, win
    cached = choose_placement("auto", cuda, gb, gb, 0, cache_budget=10**8, host_only=True, reserve="auto")
    assert (cached.placement, cached.cache_budget) == ("host", 10**8)
    asked = choose_placement("host", cuda, gb, gb, 0, cache_budget=None, host_only=False, reserve="auto")
    assert (asked.placement, asked.cache_budget) == ("host", None)


def test_device_placement_that_cannot_fit_names_the_sizes(monkeypatch):
    fake_capped_card(monkeypatch)
    gb = 10**9
    with pytest.raises(ValueError, match=r"graph \(10.00 GB\) and the features \(57.00 GB\) on cuda:0, "
                                         r"and the process may use 18.00 GB more.*placement='auto' or 'host'"):
        choose_placement("device", torch.device("cuda", 0), 10 * gb, 57 * gb, 0, cache_budget=None,
                         host_only=False, reserve="auto")
    # it fits (the reserve is the user's to mind with an explicit placement)
    placed = choose_placement("device", torch.device("cuda", 0), 10 * gb, 7 * gb, 0, cache_budget=None,
                              host_only=False, reserve="auto")
    assert placed.placement == "device"


@pytest.mark.parametrize("reserve", [-1, 1.5, "lots", True])
def test_a_bad_memory_reserve_is_refused_by_name(monkeypatch, reserve):
    with pytest.raises(ValueError, match="memory_reserve must be"):
        NeighborLoader(Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2), [2], device="cpu",
                       memory_reserve=reserve)
    fake_capped_card(monkeypatch)
    with pytest.raises(ValueError, match="memory_reserve must be"):
        model_reserve(torch.device("cuda", 0), reserve)


def test_on_a_cpu_device_auto_is_host_memory():
    chosen = choose_placement("auto", torch.device("cpu"), 10**12, 10**12, 0, cache_budget=None,
                              host_only=False, reserve="auto")
    assert chosen.placement == "device" and chosen.cache_budget is None


def test_a_batch_holds_at_most_what_its_fanouts_allow():
    # 8000 seeds at [15, 10, 5]: 8000 * (1 + 15 + 150 + 750) nodes, 8000 * 915 edges
    assert memory.batch_bound(8000, [15, 10, 5], 10**9, 10**10) == (8000 * 916, 8000 * 915)
    assert memory.batch_bound(8000, [15, 10, 5], 10**6, 5 * 10**6) == (10**6, 5 * 10**6)  # within the graph
    assert memory.batch_bound(10, [-1], 100, 1000) == (100, 1000)  # every neighbour: the whole graph at most
    # each batch's rows and edges (edge_index and e_id, int64), and a model's
    # first layer over one batch (float32, both directions)
    assert memory.batch_working_set(100, 300, 512, 128, 3) == 3 * (100 * 520 + 300 * 24) + 2 * 400 * 512


def test_the_auto_reserve_and_budget_leave_the_batches_working_set(monkeypatch):
    fake_capped_card(monkeypatch)  # 18 GB left, 24 GB in all
    cuda, gb = torch.device("cuda", 0), 10**9
    assert model_reserve(cuda, "auto", 9 * gb) == 9 * gb
    assert model_reserve(cuda, "auto", gb) == 4 << 30  # at least 4 GiB
    assert model_reserve(cuda, 2 * gb, 9 * gb) == 2 * gb  # a stated reserve is the user's
    # the cache's own bytes per node, then the eager working set; the replayed one where all would fit
    budget = resolve_budget("auto", cuda, "auto", num_nodes=10**8, whole=20 * gb, eager=6 * gb, replayed=8 * gb)
    assert budget == 18 * gb - memory.CACHE_BYTES_PER_NODE * 10**8 - 6 * gb
    small = resolve_budget("auto", cuda, "auto", num_nodes=10**6, whole=3 * gb, eager=5 * gb, replayed=8 * gb)
    assert small == 18 * gb - memory.CACHE_BYTES_PER_NODE * 10**6 - 8 * gb
    # a graph whose features fit, not with its batches' working set: host memory and a cache
    chosen = choose_placement("auto", cuda, 2 * gb, 8 * gb, 0, cache_budget=None, host_only=False,
                              reserve="auto", working=9 * gb)
    assert (chosen.placement, chosen.cache_budget) == ("host", "auto") and "reserve 9.00 GB" in chosen.reason


def test_the_loader_reserves_its_batches_working_set(monkeypatch):
    # the 18 GB the fake card leaves hold a 2 GB x, not with 8000-seed batches' slots beside it
    fake_capped_card(monkeypatch)
    from tritongnn.loader import neighbor_loader
    seen = {}

    def choose(*args, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("chosen")
    monkeypatch.setattr(neighbor_loader, "choose_placement", choose)
    n = 10**6
    data = Data(x=torch.empty((n, 500), dtype=torch.float32, device="meta"),
                edge_index=torch.zeros((2, 3), dtype=torch.long), num_nodes=n)
    with pytest.raises(RuntimeError, match="chosen"):
        NeighborLoader(data, [15, 10, 5], batch_size=8000, device="cuda:0")
    expected = memory.batch_working_set(n, 3, 2000, 500, 8)  # 6 slots of 1.25 batches; n nodes at most
    assert seen["working"] == expected > 18 * 10**9


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_device_without_an_index_is_the_current_one():
    # torch.cuda.get_per_process_memory_fraction wants an index: "cuda" alone raised there
    index = torch.cuda.current_device()
    assert memory.device_total_bytes("cuda") == memory.device_total_bytes(torch.device("cuda", index))
    assert memory.device_free_bytes(torch.device("cuda")) > 0
    from tritongnn import CSCGraph
    graph = CSCGraph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3, device="cuda")
    assert graph.indptr.device.type == "cuda"
