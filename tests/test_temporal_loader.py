"""Temporal sampling through the loader (PyG's ``time_attr``, ``input_time``,
``temporal_strategy``): no sampled neighbour later than its seed, every
admissible one with fanout -1, ``"last"`` the most recent, ``input_time``
overriding the seeds' node times, ``e_id`` / ``x`` the user's, on the
device's placement and through host memory with a cache; PyG's
``NodeLoader`` over ``PyGSampler``."""
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader

from tritongnn import NeighborLoader
from tritongnn.kernels._launch import reference_on_cpu
from tritongnn.sampling import PyGSampler

HOST_CACHE = dict(placement="host", cache_budget=6_000)


def temporal_data(num_nodes=60, num_edges=500, seed=0):
    g = torch.Generator().manual_seed(seed)
    dst = (torch.rand(num_edges, generator=g) ** 2 * num_nodes).long()
    src = torch.randint(0, num_nodes, (num_edges,), generator=g)
    return Data(x=torch.randn(num_nodes, 4, generator=g), edge_index=torch.stack([src, dst]), num_nodes=num_nodes,
                time=torch.randint(0, 12, (num_nodes,), generator=g),
                etime=torch.randint(0, 12, (num_edges,), generator=g))


def admissible(data, seed: int, seed_time, edge_level: bool) -> torch.Tensor:
    """Edge ids into ``seed`` no later than ``seed_time``, in PyG's row
    order (stably by time: ``lexsort([time, col])``)."""
    eid = (data.edge_index[1] == seed).nonzero().flatten()
    time = data.etime[eid] if edge_level else data.time[data.edge_index[0, eid]]
    order = torch.argsort(time, stable=True)
    eid, time = eid[order], time[order]
    return eid[time <= seed_time]


def check_batch(data, batch, edge_level: bool, seed_time):
    """The invariants of every temporal batch; returns each seed's hop-1 edge ids."""
    n = batch.n_id.numel()
    assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.time, data.time[batch.n_id])
    assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
    assert batch.batch.shape == (n,) and torch.equal(batch.batch[:batch.batch_size], torch.arange(batch.batch_size))
    src, dst = batch.edge_index
    assert torch.equal(batch.batch[src], batch.batch[dst])  # no edge joins two seeds' subgraphs
    slot_time = seed_time[batch.batch]
    if edge_level:
        assert bool((data.etime[batch.e_id] <= slot_time[dst]).all())
    else:  # no sampled node from the future (the seeds themselves are not filtered, as in PyG)
        assert bool((data.time[batch.n_id[batch.batch_size:]] <= slot_time[batch.batch_size:]).all())
    hop1 = batch.num_sampled_edges[0]
    return [set(batch.e_id[:hop1][dst[:hop1] == k].tolist()) for k in range(batch.batch_size)]


def _loader(data, device, options, **kwargs):
    return NeighborLoader(data, kwargs.pop("num_neighbors", [-1, 2]), batch_size=7, shuffle=True, seed=3,
                          device=device, prefetch=0, **options, **kwargs)


@pytest.mark.parametrize("options", [dict(), HOST_CACHE])
@pytest.mark.parametrize("edge_level", [False, True])
def test_uniform_takes_every_admissible_neighbour(device, options, edge_level):
    data = temporal_data()
    input_time = torch.randint(0, 12, (data.num_nodes,), generator=torch.Generator().manual_seed(1))
    kwargs = dict(time_attr="etime", input_time=input_time) if edge_level else dict(time_attr="time")
    batches = list(_loader(data, device, options, **kwargs))
    assert sum(b.batch_size for b in batches) == data.num_nodes
    for batch in batches:
        batch = batch.to("cpu")
        seeds = batch.n_id[:batch.batch_size]
        seed_time = input_time[batch.input_id] if edge_level else data.time[seeds]
        if edge_level:
            assert torch.equal(batch.seed_time, seed_time)
        else:
            assert "seed_time" not in batch  # PyG sets it only where input_time is given
        hop1 = check_batch(data, batch, edge_level, seed_time)
        for k, seed in enumerate(seeds.tolist()):  # fanout -1: the whole admissible prefix
            assert hop1[k] == set(admissible(data, seed, seed_time[k], edge_level).tolist())


@pytest.mark.parametrize("options", [dict(), HOST_CACHE])
def test_last_takes_the_most_recent(device, options):
    data = temporal_data(seed=1)
    input_time = torch.randint(3, 12, (data.num_nodes,), generator=torch.Generator().manual_seed(2))
    for edge_level in (False, True):
        kwargs = dict(time_attr="etime" if edge_level else "time", input_time=input_time)
        for batch in _loader(data, device, options, num_neighbors=[3, 2], temporal_strategy="last", **kwargs):
            batch = batch.to("cpu")
            seed_time = input_time[batch.input_id]
            assert torch.equal(batch.seed_time, seed_time)
            hop1 = check_batch(data, batch, edge_level, seed_time)
            for k, seed in enumerate(batch.n_id[:batch.batch_size].tolist()):
                assert hop1[k] == set(admissible(data, seed, seed_time[k], edge_level)[-3:].tolist())


def test_input_time_overrides_node_times(device):
    data = temporal_data(seed=2)
    seeds = torch.arange(0, 60, 3)
    early = torch.full((seeds.numel(),), 2)
    loader = NeighborLoader(data, [4, 4], input_nodes=seeds, input_time=early, time_attr="time", batch_size=10,
                            device=device, seed=0, prefetch=0)
    batches = [b.to("cpu") for b in loader]
    for batch in batches:
        check_batch(data, batch, False, batch.seed_time)
        assert bool((data.time[batch.n_id[batch.batch_size:]] <= 2).all())
    # without input_time, the seeds' own (mostly later) times let more in
    late = [b.to("cpu") for b in NeighborLoader(data, [4, 4], input_nodes=seeds, time_attr="time", batch_size=10,
                                                device=device, seed=0, prefetch=0)]
    assert sum(b.n_id.numel() for b in late) > sum(b.n_id.numel() for b in batches)


def test_temporal_arguments_refused():
    data = temporal_data()
    with pytest.raises(ValueError, match="input_time"):
        NeighborLoader(data, [2], time_attr="etime", device="cpu")
    with pytest.raises(ValueError, match="'input_time' is set while 'time_attr' is not set"):
        NeighborLoader(data, [2], input_time=torch.zeros(60, dtype=torch.int64), device="cpu")
    with pytest.raises(ValueError, match="super_batch"):
        NeighborLoader(data, [2], time_attr="time", super_batch=2, device="cpu")
    with pytest.raises(ValueError, match="temporal_strategy"):
        NeighborLoader(data, [2], time_attr="time", temporal_strategy="recent", device="cpu")


def test_reference_path_with_cache():
    # the pure-torch references (the loader's assembly over them), cache relabel included
    data = temporal_data(num_nodes=80, num_edges=700, seed=4)
    with reference_on_cpu():
        for options in (dict(), HOST_CACHE):
            loader = _loader(data, "cpu", options, time_attr="time")
            assert (loader.cache is not None) == bool(options)  # the hot-first relabel keeps rows' time order
            for batch in loader:
                seeds = batch.n_id[:batch.batch_size]
                hop1 = check_batch(data, batch, False, data.time[seeds])
                for k, seed in enumerate(seeds.tolist()):
                    assert hop1[k] == set(admissible(data, seed, data.time[seed], False).tolist())


def test_pyg_node_loader_over_pyg_sampler(device):
    data = temporal_data(seed=5)
    input_time = torch.randint(0, 12, (data.num_nodes,), generator=torch.Generator().manual_seed(6))
    sampler = PyGSampler(data, [-1, 2], device=device, time_attr="time")
    loader = NodeLoader(data, sampler, input_time=input_time, batch_size=16)
    for batch in loader:
        batch = batch.to("cpu")
        hop1 = check_batch(data, batch, False, batch.seed_time)
        for k, seed in enumerate(batch.n_id[:batch.batch_size].tolist()):
            assert hop1[k] == set(admissible(data, seed, batch.seed_time[k], False).tolist())
