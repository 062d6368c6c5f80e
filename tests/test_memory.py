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
