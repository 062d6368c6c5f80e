"""``e_id`` in every batch, as PyG's: ``n_id[edge_index] == data.edge_index[:, e_id]``.

The map from CSC positions to edge ids (``CSCGraph.edge_perm``, int32 below
2^31 edges) lives where the graph does and is read by ``kernels.edge_ids``
(GPU memory, or pinned host memory through UVA); the adjacency cache keeps
its cached rows' part on the GPU. Edge lists here are unsorted, int64, with
duplicate edges, so a position is never its edge's id by chance.
"""
import pytest
import torch
from hypothesis import given, strategies as st
from torch_geometric.data import Data

from tritongnn import NeighborLoader
from tritongnn.graph import CSCGraph, csc_bytes, edge_id_dtype
from tritongnn.kernels import edge_ids, reference

from test_pipeline import batches, loaders

NUM_NODES = 70


def unsorted_data(num_nodes=NUM_NODES, num_edges=500, seed=0, edge_attr=False):
    """Random edges, skewed targets (rows past the fanouts), 60 of them
    repeated at the end (parallel edges), in no order."""
    g = torch.Generator().manual_seed(seed)
    dst = (torch.rand(num_edges, generator=g) ** 2 * num_nodes).long()
    src = torch.randint(0, num_nodes, (num_edges,), generator=g)
    edge_index = torch.stack([src, dst])
    edge_index = torch.cat([edge_index, edge_index[:, :60]], 1)
    data = Data(x=torch.randn(num_nodes, 4, generator=g), edge_index=edge_index, num_nodes=num_nodes)
    data.train_mask = torch.rand(num_nodes, generator=g) < 0.6
    if edge_attr:
        data.edge_attr = torch.arange(edge_index.size(1), dtype=torch.float32)[:, None].repeat(1, 2)
    return data


def check_e_id(batch, data):
    batch = batch.to("cpu")
    assert batch.e_id.dtype == torch.int64 and batch.e_id.numel() == batch.edge_index.size(1)
    assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])


# -- the kernel ---------------------------------------------------------------

@given(num_edges=st.integers(1, 300), num_positions=st.integers(0, 200), num_hot=st.integers(0, 300),
       wide=st.booleans(), counted=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_edge_ids_match_the_reference(num_edges, num_positions, num_hot, wide, counted, seed):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(num_edges, generator=g).to(torch.int64 if wide else torch.int32)
    # positions in range, and some outside it (-1 out, nothing read)
    positions = torch.randint(-3, num_edges + 3, (num_positions,), generator=g)
    hot = perm[:min(num_hot, num_edges)].clone()
    count = torch.tensor([int(torch.randint(0, num_positions + 2, (1,), generator=g))]) if counted else None
    out = torch.full((num_positions,), -7, dtype=torch.int64)
    got = edge_ids(positions, perm, hot, count=count, out=out)
    assert got is out
    valid = num_positions if count is None else min(int(count), num_positions)
    expect = torch.full((num_positions,), -7, dtype=torch.int64)
    inside = (positions >= 0) & (positions < num_edges)
    expect[:valid] = torch.where(inside, perm[positions.clamp(0, num_edges - 1)].long(), -1)[:valid]
    assert torch.equal(got, expect)
    assert torch.equal(reference.edge_ids(positions, perm, hot, count, torch.full_like(out, -7)), expect)


@pytest.mark.parametrize("num_positions", [1, 1023, 1025, 5000])
def test_edge_ids_in_place_on_each_device(device, num_positions):
    perm = torch.randperm(9973, generator=torch.Generator().manual_seed(num_positions)).to(torch.int32)
    positions = torch.randint(0, 9973, (num_positions,), generator=torch.Generator().manual_seed(1))
    expect = perm[positions].long()
    on = positions.to(device, copy=True)
    assert torch.equal(edge_ids(on, perm.to(device), out=on).cpu(), expect)
    # with the cached prefix: the same ids
    on = positions.to(device)
    assert torch.equal(edge_ids(on, perm.to(device), perm[:4000].to(device)).cpu(), expect)


def test_edge_ids_refuse_bad_arguments():
    positions = torch.tensor([0, 1])
    with pytest.raises(TypeError, match="positions"):
        edge_ids(positions.int(), torch.arange(3, dtype=torch.int32))
    with pytest.raises(TypeError, match="edge_perm"):
        edge_ids(positions, torch.arange(3.0))
    with pytest.raises(TypeError, match="hot_edge_perm"):
        edge_ids(positions, torch.arange(3, dtype=torch.int32), torch.arange(2))
    with pytest.raises(ValueError, match="hot_edge_perm"):
        edge_ids(positions, torch.arange(3, dtype=torch.int32), torch.arange(4, dtype=torch.int32))
    with pytest.raises(ValueError, match="count"):
        edge_ids(positions, torch.arange(3, dtype=torch.int32), count=torch.tensor([1, 2]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: run with -m gpu on the GPU machine")
def test_edge_ids_read_pinned_host_memory_through_uva():
    from tritongnn.host_memory import pinned_copy
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(1 << 20, generator=g).to(torch.int32)
    pinned = pinned_copy(perm, torch.device("cuda"))
    positions = torch.randint(0, 1 << 20, (100_003,), generator=g)
    hot = perm[:1 << 18].cuda()
    count = torch.tensor([77_777], device="cuda")
    out = torch.full((positions.numel(),), -7, dtype=torch.int64, device="cuda")
    edge_ids(positions.cuda(), pinned, hot, count=count, out=out)
    expect = torch.full_like(positions, -7)
    expect[:77_777] = perm[positions[:77_777]].long()
    assert torch.equal(out.cpu(), expect)


# -- the graph's map ----------------------------------------------------------

def test_edge_perm_is_int32_below_2_31_edges_and_counted():
    assert edge_id_dtype(2**31 - 1) == torch.int32 and edge_id_dtype(2**31) == torch.int64
    data = unsorted_data()
    num_edges = data.edge_index.size(1)
    graph = CSCGraph.from_edge_index(data.edge_index, NUM_NODES, keep_edge_perm=True)
    assert graph.edge_perm.dtype == torch.int32
    assert graph.nbytes == csc_bytes(NUM_NODES, num_edges, True) == csc_bytes(NUM_NODES, num_edges) + 4 * num_edges
    # each CSC position names its edge
    src = graph.indices.long()
    dst = torch.repeat_interleave(torch.arange(NUM_NODES), graph.degree())
    assert torch.equal(data.edge_index[:, graph.edge_perm.long()], torch.stack([src, dst]))
    relabelled = graph.relabel(torch.randperm(NUM_NODES, generator=torch.Generator().manual_seed(2)))
    assert relabelled.edge_perm.dtype == torch.int32 and torch.equal(relabelled.edge_perm.sort().values,
                                                                     torch.arange(num_edges, dtype=torch.int32))


# -- the loader ---------------------------------------------------------------

CASES = {
    "device": dict(),
    "host": dict(placement="host"),
    "host-cache": dict(placement="host", cache_budget=NUM_NODES * 4 * 4 // 3, profile_epochs=1),
    "host-cache-all": dict(placement="host", cache_budget=10**6, profile_epochs=1),
    "super-batch": dict(placement="host", cache_budget=NUM_NODES * 4 * 4 // 3, profile_epochs=1, super_batch=3),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_batch_carries_e_id(device, case):
    data = unsorted_data(edge_attr=True)
    edge_index = data.edge_index.clone()
    loader = NeighborLoader(data, [3, 2], batch_size=16, shuffle=True, device=device, seed=4, **CASES[case])
    assert loader.graph.edge_perm.dtype == torch.int32
    if case == "host-cache":  # the cached rows' ids in GPU memory, the rest where the graph is
        hot = loader.sampler._hot_edge_perm
        assert hot is not None and hot.device == loader.device and hot.numel() == loader.cache.hot_indices.numel()
        assert 0 < hot.numel() < loader.graph.num_edges
        assert torch.equal(hot.cpu(), loader.graph.edge_perm[:hot.numel()].cpu())
    for batch in loader:
        check_e_id(batch, data)
        assert torch.equal(batch.edge_attr.cpu(), data.edge_attr[batch.e_id.cpu()])
    check_e_id(loader([5, 0, 9]), data)
    assert torch.equal(data.edge_index, edge_index)  # the user's edges untouched


@pytest.mark.parametrize("case", ["device", "host", "host-cache"])
def test_e_id_without_edge_attributes(device, case):
    # no edge attributes: e_id all the same (PyG's batches always carry it)
    data = unsorted_data()
    loader = NeighborLoader(data, [4, 3], batch_size=20, device=device, seed=1, **CASES[case])
    for batch in loader:
        check_e_id(batch, data)


def test_e_id_through_the_relabel_of_a_graph_in_target_order(device):
    # positions are ids in the user's order (no map kept), the cache's
    # relabel makes one of its own
    data = unsorted_data()
    data.edge_index = data.edge_index[:, data.edge_index[1].argsort(stable=True)]
    plain = NeighborLoader(data, [3, 2], batch_size=16, device=device, seed=2)
    assert plain.graph.edge_perm is None
    cached = NeighborLoader(data, [3, 2], batch_size=16, device=device, seed=2, **CASES["host-cache"])
    assert cached.graph.edge_perm is not None
    for loader in (plain, cached):
        for batch in loader:
            check_e_id(batch, data)


@pytest.mark.parametrize("kwargs", [dict(), dict(placement="host", cache_budget=10**6)])
def test_e_id_replayed(kwargs):
    # a packed batch maps its edges' positions in the graph it replays
    data = unsorted_data()
    replayed, built = loaders(data, "cpu", batch_size=12, **kwargs)
    assert replayed.graph.edge_perm is not None
    got = batches(replayed)
    assert replayed.replay.slots[12]  # replayed into slots, not built
    for a, b in zip(got, batches(built), strict=True):
        assert torch.equal(a.e_id, b.e_id)
        check_e_id(a, data)


def test_e_id_read_back_from_build_dir(tmp_path):
    data = unsorted_data()
    for kwargs in (dict(), CASES["host-cache"]):
        first = NeighborLoader(data, [3, 2], batch_size=16, device="cpu", seed=6, build_dir=tmp_path, **kwargs)
        second = NeighborLoader(data, [3, 2], batch_size=16, device="cpu", seed=6, build_dir=tmp_path, **kwargs)
        assert second.build_loaded and torch.equal(second.graph.edge_perm, first.graph.edge_perm)
        for a, b in zip(first, second, strict=True):
            assert torch.equal(a.e_id, b.e_id)
            check_e_id(b, data)


def test_host_memory_counts_the_map():
    data = unsorted_data()
    loader = NeighborLoader(data, [3, 2], batch_size=16, device="cpu", placement="host")
    graph = loader.graph
    assert loader.host_memory["host_array_bytes"] == graph.nbytes + data.x.nbytes
    assert graph.edge_perm.nbytes == 4 * data.edge_index.size(1)
