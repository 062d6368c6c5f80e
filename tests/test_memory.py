"""GPU memory the process may still use, and chunks of work sized by it."""
import torch


def test_chunks_are_sized_by_the_memory_left():
    from tritongnn import memory
    assert memory.chunk_items("cpu", 100, 10) == 10  # all of a small graph
    assert memory.chunk_items("cpu", 100, 10**10) == memory._CPU_ITEMS


def test_memory_left_honours_the_per_process_fraction(monkeypatch):
    # torch's CUDA queries faked (CPU): a process capped at 30 % of an 80 GB
    # card that has reserved 10 GB (6 GB of it in use) may use 18 GB more,
    # and cache_budget="auto" leaves 4 GiB of that for the model
    import types
    from tritongnn import memory
    from tritongnn.sampling.loader import NeighborLoader
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
    auto = NeighborLoader._resolve_budget(types.SimpleNamespace(device=cuda), "auto")
    assert auto == 18 * 10**9 - (4 << 30)
