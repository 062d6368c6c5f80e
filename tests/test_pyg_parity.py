"""Where ``tritongnn.NeighborLoader`` must behave as PyG's ``NeighborLoader``:
PyG's own loader is the reference (its ``NodeLoader`` driving our sampler
through ``PyGSampler``, as PyG itself samples only with pyg-lib or
torch-sparse)."""
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
from torch_geometric.loader import NodeLoader

from tritongnn import NeighborLoader, PyGSampler

from test_loader import assert_same_batches


def small_data(num_nodes=60, num_edges=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    data = Data(x=torch.randn(num_nodes, 5, generator=g), y=torch.randint(0, 3, (num_nodes,), generator=g),
                edge_index=torch.randint(0, num_nodes, (2, num_edges), generator=g))
    data.train_mask = torch.rand(num_nodes, generator=g) < 0.4
    data.edge_attr = torch.randn(num_edges, 2, generator=g)  # PyGSampler's batches carry e_id: ours too
    return data


def pyg_loader(data, input_nodes, device, **kwargs):
    return NodeLoader(data, PyGSampler(data, [3, 2], device=device, seed=7), input_nodes=input_nodes, **kwargs)


def mask_of(num_nodes, ids):
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[ids] = True
    return mask


@pytest.mark.parametrize("kind", ["mask", "index", "none"])
def test_input_id_as_pyg_gives_it(device, kind):
    # a mask's input_id holds node ids (mask.nonzero()), an index tensor's
    # and None's the seeds' positions
    data = small_data()
    input_nodes = {"mask": data.train_mask, "index": torch.tensor([7, 3, 41, 3 + 20, 59]), "none": None}[kind]
    ours = NeighborLoader(data, [3, 2], input_nodes=input_nodes, batch_size=8, device=device, seed=7)
    assert_same_batches(ours, pyg_loader(data, input_nodes, device, batch_size=8))


def test_input_id_of_a_mask_is_the_node_ids():
    data = small_data(num_nodes=6)
    mask = mask_of(6, [2, 5])
    batch = next(iter(NeighborLoader(data, [2], input_nodes=mask, batch_size=4, device="cpu")))
    assert batch.input_id.tolist() == [2, 5]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG's warning that pyg-lib is missing
        pyg = PyGNeighborLoader(data, [2], input_nodes=mask, batch_size=4)
    assert pyg.input_data[torch.arange(2)].input_id.tolist() == [2, 5]  # what PyG's batch carries


@pytest.mark.parametrize("seeds", [[7, 3, 41, 23, 59], (7, 3, 41, 23, 59), range(10, 40, 3)],
                         ids=["list", "tuple", "range"])
def test_input_nodes_as_a_list_tuple_or_range(device, seeds):
    # PyG turns them into a tensor of ids (torch.tensor(nodes, dtype=long))
    data = small_data()

    def ours(input_nodes):
        return NeighborLoader(data, [3, 2], input_nodes=input_nodes, batch_size=4, device=device, seed=7)
    assert_same_batches(ours(seeds), pyg_loader(data, seeds, device, batch_size=4))
    assert_same_batches(ours(seeds), ours(torch.tensor(list(seeds))))


def test_repr_as_pyg():
    data = small_data()
    ours = NeighborLoader(data, [3, 2], batch_size=4, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pyg = PyGNeighborLoader(data, [3, 2], batch_size=4)
    assert str(ours) == repr(ours) == str(pyg) == "NeighborLoader()"


@pytest.mark.parametrize("value", [True, False, None])
def test_filter_per_worker_warns_as_the_worker_settings_do(value):
    # where PyG filters (in the workers or the main process) makes no
    # difference here: there are no workers
    data = small_data()
    with pytest.warns(UserWarning, match=f"filter_per_worker={value!r} has no effect"):
        loader = NeighborLoader(data, [3, 2], batch_size=4, device="cpu", filter_per_worker=value, seed=7)
    assert_same_batches(loader, NeighborLoader(data, [3, 2], batch_size=4, device="cpu", seed=7))


def same_batch(a, b):
    assert_same_batches([a], [b])


@pytest.mark.parametrize("kind", ["mask", "index", "none"])
@pytest.mark.parametrize("as_type", [list, tuple, torch.tensor, np.array], ids=["list", "tuple", "tensor", "numpy"])
def test_call_gives_pyg_batch_of_the_positions(device, kind, as_type):
    # PyG's NodeLoader.__call__: input_data[index], index being positions
    # into the seeds (repeats and any order allowed)
    data = small_data()
    input_nodes = {"mask": data.train_mask, "index": torch.tensor([7, 3, 41, 23, 59, 12]), "none": None}[kind]
    index = as_type([4, 0, 2, 2])
    ours = NeighborLoader(data, [3, 2], input_nodes=input_nodes, batch_size=8, device=device, seed=7)
    pyg = pyg_loader(data, input_nodes, device, batch_size=8)
    batch = ours(index)
    same_batch(batch.to("cpu"), pyg(index).to("cpu"))
    seeds = torch.arange(60) if input_nodes is None else \
        (input_nodes.nonzero().flatten() if input_nodes.dtype == torch.bool else input_nodes)
    assert torch.equal(batch.n_id[:batch.batch_size].cpu(), seeds[[4, 0, 2, 2]]) and batch.batch_size == 4


def test_call_as_pyg_with_a_range_and_transform():
    data = small_data()

    def transform(batch):
        batch.seen = 1
        return batch
    ours = NeighborLoader(data, [3, 2], batch_size=8, device="cpu", seed=7, transform=transform)
    pyg = NodeLoader(data, PyGSampler(data, [3, 2], device="cpu", seed=7), batch_size=8, transform=transform)
    same_batch(ours(range(5, 17, 3)), pyg(list(range(5, 17, 3))))


def test_call_ends_the_open_pass(device):
    # one pass at a time: the call ends the pass still open (its iterator
    # stops), and the next pass is whole
    data = small_data()
    loader = NeighborLoader(data, [3, 2], batch_size=8, shuffle=True, device=device, seed=7)
    open_pass = iter(loader)
    first = next(open_pass)
    batch = loader([9, 1])
    assert batch.input_id.tolist() == [9, 1] and batch.n_id[:2].tolist() == [9, 1]
    with pytest.raises(StopIteration):
        next(open_pass)
    seen = torch.cat([b.input_id.cpu() for b in loader])
    assert torch.equal(seen.sort().values, torch.arange(60)) and first.batch_size == 8


@pytest.mark.parametrize("index, error, match", [
    ([1.0, 2.0], TypeError, "integer positions"), (torch.tensor([True, False]), TypeError, "integer positions"),
    ([[1, 2]], ValueError, "1-D"), ([], ValueError, "empty"), ([3, 6], ValueError, "position 6, outside"),
    ([-1], ValueError, "position -1, outside"), (3, TypeError, "got int"), ("0", TypeError, "got str")])
def test_call_refuses_bad_index(index, error, match):
    data = small_data()
    loader = NeighborLoader(data, [3, 2], input_nodes=torch.arange(6), batch_size=8, device="cpu")
    with pytest.raises(error, match=match):
        loader(index)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_one_dimensional_x_as_pyg_slices_it(device, dtype):
    # x as node ids for an nn.Embedding (or one feature a node): x[n_id],
    # 1-D, its dtype, as PyG's filter_data gives it; data.x left as it was
    data = small_data()
    data.x = torch.arange(60, dtype=dtype) * 3 if dtype == torch.int64 else torch.randn(60)
    kept = data.x.clone()
    ours = NeighborLoader(data, [3, 2], input_nodes=data.train_mask, batch_size=8, device=device, seed=7)
    assert_same_batches(ours, pyg_loader(data, data.train_mask, device, batch_size=8))
    batch = ours([0, 1])
    assert batch.x.shape == (batch.num_nodes,) and batch.x.dtype == dtype
    assert torch.equal(data.x, kept) and data.x.dim() == 1


@pytest.mark.parametrize("tiers", [dict(placement="device"), dict(placement="host"),
                                   dict(placement="host", cache_budget=4 * 20, profile_epochs=1),
                                   dict(placement="host", cache_budget=4 * 20, profile_epochs=1, warm_budget=4 * 10,
                                        dynamic_cache=True, reuse=True),
                                   dict(placement="host", cache_budget=4 * 20, profile_epochs=1, reuse="group",
                                        super_batch=2)],
                         ids=["device", "host", "cache", "cache-warm-dynamic-reuse", "group-reuse"])
def test_one_dimensional_x_through_every_tier(tiers):
    # gathered as one column through the caches, staging and host rows,
    # handed out 1-D: the batches of the loader without tiers
    data = small_data()
    data.x = torch.randn(60)
    plain = NeighborLoader(data, [3, 2], batch_size=8, shuffle=True, device="cpu", seed=3)
    tiered = NeighborLoader(data, [3, 2], batch_size=8, shuffle=True, device="cpu", seed=3, **tiers)
    count = 0
    for a, b in zip(plain, tiered, strict=True):
        assert b.x.dim() == 1 and torch.equal(a.n_id, b.n_id) and torch.equal(b.x, data.x[b.n_id])
        count += 1
    assert count == len(plain)


def test_one_dimensional_numpy_x_and_feature_dtype():
    data = small_data()
    values = torch.randn(60)
    data.x = values.numpy()
    batch = next(iter(NeighborLoader(data, [3, 2], batch_size=8, device="cpu", seed=3,
                                     feature_dtype=torch.bfloat16, placement="host")))
    assert batch.x.shape == (batch.num_nodes,) and batch.x.dtype == torch.float32
    assert torch.equal(batch.x, values[batch.n_id].to(torch.bfloat16).float())
    assert isinstance(data.x, np.ndarray) and data.x.shape == (60,)


@pytest.mark.parametrize("kwargs", [dict(), dict(placement="host", cache_budget=10**6)], ids=["device", "all-cached"])
def test_one_dimensional_x_replayed(device, kwargs):
    # batches replayed into slots (tritongnn.loader.replay) hand x out 1-D too
    from test_loader import random_data
    from test_pipeline import batches, loaders
    data = random_data()
    data.x = torch.arange(300) * 7
    replayed, built = loaders(data, device, **kwargs)
    got = batches(replayed)
    assert_same_batches(got, batches(built))
    assert all(b.x.dim() == 1 and torch.equal(b.x, data.x[b.n_id]) for b in got)


def grouped_by_target(data):
    """``data`` with its edges sorted by target and no edge attributes:
    its CSC positions are its edge ids."""
    data = data.clone()
    del data.edge_attr
    data.edge_index = data.edge_index[:, data.edge_index[1].argsort(stable=True)]
    return data


def check_e_id(batch, data):
    # PyG's contract: e_id names the columns of data.edge_index the batch's edges are
    assert batch.e_id.dtype == torch.int64
    assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])


@pytest.mark.parametrize("kwargs", [dict(), dict(super_batch=3), dict(placement="host"), dict(prefetch=0)])
def test_e_id_without_edge_attributes_where_it_costs_no_map(device, kwargs):
    # edge_index grouped by target: PyG's batches, e_id included, with no
    # map from CSC positions to edge ids kept
    data = grouped_by_target(small_data())
    ours = NeighborLoader(data, [3, 2], batch_size=8, device=device, seed=7, **kwargs)
    assert ours.graph.edge_perm is None
    assert_same_batches(ours, pyg_loader(data, None, device, batch_size=8))
    for batch in ours:
        check_e_id(batch.to("cpu"), data)
    check_e_id(ours([3, 1]).to("cpu"), data)


def test_e_id_replayed():
    from test_pipeline import batches, loaders
    data = grouped_by_target(small_data())
    replayed, built = loaders(data, "cpu", batch_size=6)
    got = batches(replayed)
    assert_same_batches(got, batches(built))
    assert replayed.replay.slots[6]  # replayed into slots, not built
    for batch in got:
        check_e_id(batch, data)


def test_e_id_where_positions_are_not_edge_ids():
    # any other order, or a cache that renames the graph: the graph keeps
    # the map, and the batches are PyG's, e_id included
    data = small_data()
    del data.edge_attr
    plain = NeighborLoader(data, [3, 2], batch_size=8, device="cpu", seed=7)
    assert plain.graph.edge_perm is not None
    assert_same_batches(plain, pyg_loader(data, None, "cpu", batch_size=8))
    grouped = grouped_by_target(small_data())
    cached = NeighborLoader(grouped, [3, 2], batch_size=8, device="cpu", placement="host", cache_budget=20 * 20,
                            profile_epochs=1)
    assert cached.graph.edge_perm is not None
    for loader, source in ((plain, data), (cached, grouped)):
        for batch in loader:
            check_e_id(batch, source)


def test_in_target_order_reads_chunk_by_chunk():
    from tritongnn.graph import in_target_order
    dst = torch.tensor([0, 0, 1, 2, 2, 2, 5, 5])
    for chunk in (1, 3, 8):
        assert in_target_order(torch.stack([dst.flip(0), dst]), chunk)
        for at in range(1, 8):  # one step down anywhere, across a chunk's border too
            bad = dst.clone()
            bad[at] = dst[at - 1] - 1
            assert not in_target_order(torch.stack([dst, bad]), chunk)
    assert in_target_order(torch.empty(2, 0, dtype=torch.int64))
