"""NeighborLoader: batch invariants, PyG's batch contract, trimming, accuracy,
reproducibility and bad input."""
import contextlib
import threading
import time
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.nn import GAT, GCN, GraphSAGE

from conftest import FakeStream
from tritongnn import NeighborLoader, PyGSampler
from tritongnn.kernels._launch import reference_on_cpu


def random_data(num_nodes=300, num_edges=3000, edge_attr=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    # skewed targets: a few hubs far above the fanout, many small nodes
    dst = (torch.rand(num_edges, generator=g) ** 3 * num_nodes).long()
    src = torch.randint(0, num_nodes, (num_edges,), generator=g)
    data = Data(x=torch.randn(num_nodes, 12, generator=g), y=torch.randint(0, 4, (num_nodes,), generator=g),
                edge_index=torch.stack([src, dst]), num_nodes=num_nodes)
    data.train_mask = torch.rand(num_nodes, generator=g) < 0.5
    if edge_attr:
        data.edge_attr = torch.randn(num_edges, 3, generator=g)
    return data


def check_batch(batch, data, input_nodes, num_neighbors, replace, mask=False):
    """``input_nodes``: the seeds' node ids; ``mask``: they came as a bool
    mask, so ``input_id`` holds node ids (as PyG's), else positions in them."""
    n_id, (row, col) = batch.n_id, batch.edge_index
    bs = batch.batch_size
    seeds = batch.input_id if mask else input_nodes[batch.input_id]
    assert torch.equal(n_id[:bs], seeds)  # seeds first
    assert n_id.unique().numel() == n_id.numel()
    assert int(n_id.min()) >= 0 and int(n_id.max()) < data.num_nodes
    assert sum(batch.num_sampled_nodes) == n_id.numel() == batch.x.size(0)
    assert sum(batch.num_sampled_edges) == row.numel()
    assert batch.num_sampled_nodes[0] == bs
    # edges sorted by target (the loader marks them so: aggregate trusts it)
    assert bool((col[1:] >= col[:-1]).all())
    assert len(batch.num_sampled_edges) == len(num_neighbors)
    assert torch.equal(batch.x, data.x[n_id]) and torch.equal(batch.y, data.y[n_id])
    assert torch.equal(batch.train_mask, data.train_mask[n_id])
    # every sampled edge exists in the graph: e_id names it, its ends match
    assert torch.equal(data.edge_index[0, batch.e_id], n_id[row])
    assert torch.equal(data.edge_index[1, batch.e_id], n_id[col])
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    # hop order: the edges of hop h point into the nodes of hop h - 1 and come
    # from nodes of hops <= h
    node_end = torch.tensor(batch.num_sampled_nodes).cumsum(0).tolist()
    edge_end = [0] + torch.tensor(batch.num_sampled_edges).cumsum(0).tolist()
    for h, fanout in enumerate(num_neighbors):
        r, c = row[edge_end[h]:edge_end[h + 1]], col[edge_end[h]:edge_end[h + 1]]
        lo = 0 if h == 0 else node_end[h - 1]
        assert bool(((c >= lo) & (c < node_end[h])).all()) and bool((r < node_end[h + 1]).all())
        per_target = torch.bincount(c - lo, minlength=node_end[h] - lo)
        if fanout >= 0:
            assert per_target.numel() == 0 or int(per_target.max()) <= fanout
        if not replace:  # no edge drawn twice for one target
            key = c * data.num_edges + batch.e_id[edge_end[h]:edge_end[h + 1]]
            assert key.unique().numel() == key.numel()


@pytest.mark.parametrize("num_neighbors, replace", [([4, 3], False), ([2, -1], False), ([5, 0, 2], True)])
def test_batch_invariants(device, num_neighbors, replace):
    data = random_data(edge_attr=True)
    loader = NeighborLoader(data, num_neighbors, input_nodes=data.train_mask, batch_size=37,
                            shuffle=True, replace=replace, device=device, seed=1)
    input_nodes = torch.nonzero(data.train_mask).flatten()
    seen = []
    for batch in loader:
        batch = batch.to("cpu")
        check_batch(batch, data, input_nodes, num_neighbors, replace, mask=True)
        seen.append(batch.input_id)
    # shuffling still visits every seed once per epoch
    assert torch.equal(torch.cat(seen).sort().values, input_nodes)
    assert len(seen) == len(loader) == -(-input_nodes.numel() // 37)


def test_batches_match_pyg_node_loader(device):
    # PyG's own NodeLoader driving our sampler through the BaseSampler seam
    # builds its batches with PyG's filter_data: same fields, dtypes, values.
    data = random_data(edge_attr=True)
    ours = NeighborLoader(data, [3, 2], batch_size=50, device=device, seed=7)
    pyg = NodeLoader(data, PyGSampler(data, [3, 2], device=device, seed=7), batch_size=50)
    assert_same_batches(ours, pyg)


def assert_same_batches(ours, pyg):
    """Every batch (not the shorter's) with the same fields, dtypes and values."""
    for a, b in zip(ours, pyg, strict=True):
        a, b = a.to("cpu"), b.to("cpu")
        assert set(a.keys()) == set(b.keys())
        for key in b.keys():
            va, vb = a[key], b[key]
            if isinstance(vb, torch.Tensor):
                assert va.dtype == vb.dtype and torch.equal(va, vb), key
            else:
                assert va == vb, key


def test_no_edge_attributes_still_e_id():
    # PyG's batches always carry e_id: the columns of edge_index they are
    data = random_data()
    batch = next(iter(NeighborLoader(data, [2], batch_size=8)))
    assert batch.edge_index.dtype == batch.e_id.dtype == torch.int64
    assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])


@pytest.mark.parametrize("model_cls", [GraphSAGE, GAT, GCN])
def test_pyg_models_run_and_trim(model_cls, device):
    data = random_data()
    batch = next(iter(NeighborLoader(data, [4, 3, 2], batch_size=16, device=device, seed=3)))
    torch.manual_seed(0)
    model = model_cls(12, 16, 3, 4).to(device).eval()
    full = model(batch.x, batch.edge_index)[:batch.batch_size]
    trimmed = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                    num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
    assert trimmed.shape == (16, 4) and bool(torch.isfinite(trimmed).all())
    if model_cls is not GCN:
        # GCN's normalisation counts the degree of the trimmed graph (as on a
        # PyG batch): only SAGE and GAT give the untrimmed output exactly.
        torch.testing.assert_close(trimmed, full)


def test_same_seed_same_batches(device):
    data = random_data()

    def epoch(seed):
        loader = NeighborLoader(data, [3, 3], batch_size=40, shuffle=True, device=device, seed=seed)
        return [(b.n_id.cpu(), b.edge_index.cpu()) for b in loader]

    a, b, c = epoch(5), epoch(5), epoch(6)
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(a, c))


def test_user_data_not_modified():
    data = random_data(edge_attr=True)
    before = {k: v.clone() for k, v in data.to_dict().items() if isinstance(v, torch.Tensor)}
    for batch in NeighborLoader(data, [3, 2], batch_size=64, shuffle=True):
        batch.x.add_(1.0)  # a user writing into a batch must not reach data
    for key, value in before.items():
        assert torch.equal(data[key], value), key


def test_drop_last():
    data = random_data()
    loader = NeighborLoader(data, [2], batch_size=7, drop_last=True)
    sizes = [b.batch_size for b in loader]
    assert len(sizes) == len(loader) == 300 // 7 and set(sizes) == {7}


def test_cora_accuracy():
    from tritongnn.datasets import cora
    data = cora()
    torch.manual_seed(0)
    with reference_on_cpu():  # many batches: the kernels have their own tests
        train = NeighborLoader(data, [10, 10], input_nodes=data.train_mask, batch_size=32,
                               shuffle=True, seed=0, device="cpu")
        test = NeighborLoader(data, [10, 10], input_nodes=data.test_mask, batch_size=500,
                              seed=1, device="cpu")
        model = GraphSAGE(data.num_features, 64, 2, 7, dropout=0.5)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
        for _ in range(20):
            model.train()
            for batch in train:
                optimizer.zero_grad()
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
                optimizer.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for batch in test:
                pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
                correct += int((pred == batch.y[:batch.batch_size]).sum())
    assert correct / int(data.test_mask.sum()) >= 0.78


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(input_nodes=torch.tensor([0, 300])), ValueError, "node id 300"),
    (dict(input_nodes=torch.tensor([-1])), ValueError, "node id -1"),
    (dict(input_nodes=torch.tensor([0.0, 1.0])), TypeError, "float32"),
    (dict(input_nodes=torch.tensor([], dtype=torch.long)), ValueError, "empty"),
    (dict(input_nodes=torch.zeros(300, dtype=torch.bool)), ValueError, "empty"),
    (dict(input_nodes=torch.ones(299, dtype=torch.bool)), ValueError, r"shape \[300\]"),
    (dict(input_nodes=[0.0, 1.0]), TypeError, "input_nodes as a list must hold int node ids"),
    (dict(input_nodes={0, 1}), TypeError, "input_nodes must be a tensor, list or range"),
    (dict(input_nodes=[]), ValueError, "empty"),
    (dict(input_nodes=range(298, 301)), ValueError, "node id 300"),
    (dict(input_nodes=("paper", None)), NotImplementedError, "node type"),
    (dict(num_neighbors=[3, -2]), ValueError, r"num_neighbors\[1\] = -2"),
    (dict(num_neighbors=[3, 1.5]), TypeError, r"num_neighbors\[1\]"),
    (dict(num_neighbors={"a": [1]}), TypeError, r"dict \(by edge type\) is for a HeteroData"),
    (dict(batch_size=0), ValueError, "batch_size"),
    (dict(placement="gpu"), ValueError, "placement"),
    (dict(generator=42), TypeError, "generator"),
    (dict(disjoint=1), TypeError, "disjoint must be a bool"),
    (dict(disjoint=True, subgraph_type="induced"), ValueError, "disjoint=True is not supported with subgraph_type"),
    (dict(disjoint=True, directed=False), ValueError, "disjoint=True is not supported with subgraph_type"),
    (dict(disjoint=True, super_batch=2), ValueError, "super_batch=2 with disjoint=True"),
    (dict(subgraph_type="undirected"), ValueError, "subgraph_type must be one of"),
    (dict(input_time=torch.zeros(300)), ValueError, "'input_time' is set while 'time_attr' is not set"),
    (dict(time_attr="missing"), ValueError, "neither a node-level or edge-level attribute"),
    (dict(time_attr="train_mask"), TypeError, "must hold int64"),
    (dict(weight_attr="w"), ValueError, "weight_attr=.w. is not an attribute of data"),
    (dict(directed="no"), TypeError, "directed must be a bool"),
    (dict(no_such_argument=1), TypeError, "no_such_argument"),
    (dict(input_id=torch.arange(300)), NotImplementedError, "input_id"),  # PyG's NodeLoader's own
    (dict(custom_cls=object), NotImplementedError, "custom_cls"),
    (dict(seed="a"), TypeError, "seed must be an int"),
    (dict(seed=1.9), TypeError, "seed must be an int"),
    (dict(seed=True), TypeError, "seed must be an int"),
    (dict(seed=2**70), ValueError, r"seed must be in \[0, 2\*\*62\)"),
    (dict(seed=-1), ValueError, "seed must be in"),
    (dict(num_neighbors=[5000], replace=True), ValueError, r"num_neighbors\[0\] = 5000: .* at most 1024"),
    (dict(feature_dtype=torch.int8), TypeError, "feature_dtype must be one of"),
    (dict(feature_dtype="float16"), TypeError, "feature_dtype must be one of"),
    (dict(feature_dtype=torch.float8_e5m2), TypeError, "feature_dtype must be one of"),
    (dict(feature_dtype=torch.float64), TypeError, "feature_dtype must be one of"),
])
def test_bad_arguments(kwargs, error, match):
    data = random_data()
    args = dict(num_neighbors=[3, 2], batch_size=8)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        NeighborLoader(data, **args)


def test_pyg_defaults_given_explicitly_are_accepted():
    from torch_geometric.sampler.base import SubgraphType
    data = random_data()
    for kwargs in (dict(subgraph_type=SubgraphType.directional), dict(subgraph_type="directional"),
                   dict(input_id=None, custom_cls=None, directed=True, disjoint=False)):
        NeighborLoader(data, [2], batch_size=8, **kwargs)
    # PyG's enum for the others too (tests/test_subgraph.py has their batches)
    assert NeighborLoader(data, [2], batch_size=8, subgraph_type=SubgraphType.induced).sampler.subgraph_type \
        == "induced"


def test_fanouts_past_the_kernels_take_every_neighbour():
    # without replacement a fanout no node's degree reaches is "all of them":
    # the batches of -1, whatever the fanout (PyG takes such fanouts too)
    data = random_data()
    with reference_on_cpu():
        big = list(NeighborLoader(data, [5000, 2], batch_size=32, seed=3, device="cpu"))
        every = list(NeighborLoader(data, [-1, 2], batch_size=32, seed=3, device="cpu"))
    assert len(big) == len(every)
    for a, b in zip(big, every):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    hubbed = hub_data(hub_degree=2000)  # node 0 gets 2000 more neighbours
    hub = int(torch.bincount(hubbed.edge_index[1], minlength=300).max())
    assert hub > 2000
    with pytest.raises(ValueError, match=f"num_neighbors\\[0\\] = 1500: .*a node here has {hub}"):
        NeighborLoader(hubbed, [1500], batch_size=8, device="cpu")


def hub_data(hub_degree):
    data = random_data()
    extra = torch.stack([torch.randint(0, 300, (hub_degree,), generator=torch.Generator().manual_seed(1)),
                         torch.zeros(hub_degree, dtype=torch.long)])
    data.edge_index = torch.cat([data.edge_index, extra], 1)
    return data


def test_node_attributes_sliced_as_pyg_slices_them(device):
    # numpy arrays are node (edge) attributes too, and a key with "index" in
    # it is sliced along its last dim (PyG's __cat_dim__): as PyG's
    # filter_data gives them, through its NodeLoader and our sampler
    import numpy as np
    data = random_data(edge_attr=True)
    data.a = np.arange(300) * 2
    data.pos_index = torch.arange(600).view(2, 300)
    data.w = np.random.default_rng(0).random(data.num_edges)
    data.note = "a graph attribute"
    ours = NeighborLoader(data, [3, 2], batch_size=50, device=device, seed=7)
    pyg = NodeLoader(data, PyGSampler(data, [3, 2], device=device, seed=7), batch_size=50)
    for a, b in zip(ours, pyg, strict=True):  # every batch, not the shorter's
        a, b = a.to("cpu"), b.to("cpu")
        assert set(a.keys()) == set(b.keys())
        for key in ("a", "pos_index", "w", "edge_attr"):
            assert isinstance(a[key], torch.Tensor) and a[key].dtype == b[key].dtype, key
            assert torch.equal(a[key], b[key]), key
        assert a.pos_index.shape == (2, a.num_nodes) and a.note == b.note
    assert isinstance(data.a, np.ndarray) and data.pos_index.shape == (2, 300)  # untouched


@pytest.mark.parametrize("kind", ["numpy", "memmap", "read-only memmap"])
def test_x_as_a_numpy_array_or_a_memmap(device, kind, tmp_path):
    # x read where it is (a memmap through the page cache), never written;
    # with placement="host" on a GPU, pinned in place or copied once
    import numpy as np
    data = random_data()
    values = data.x.numpy().copy()
    if kind == "numpy":
        x = values.copy()
    else:
        x = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=values.dtype, shape=values.shape)
        x[:] = values
        x.flush()
        if kind == "read-only memmap":
            x = np.load(tmp_path / "x.npy", mmap_mode="r")
    data.x = x
    for placement in ("auto", "host"):
        loader = NeighborLoader(data, [3, 2], batch_size=64, device=device, placement=placement, seed=1)
        for batch in loader:
            assert batch.x.dtype == torch.float32
            assert torch.equal(batch.x.cpu(), torch.from_numpy(values)[batch.n_id.cpu()])
        del loader
    assert type(data.x) is type(x) and np.array_equal(data.x, values)  # untouched


def test_bad_data():
    data = random_data()
    with pytest.raises(ValueError, match="data.x has 299 rows"):
        NeighborLoader(Data(x=data.x[:299], edge_index=data.edge_index, num_nodes=300), [2])
    bad = data.clone()
    bad.y = torch.zeros(10, dtype=torch.long)
    bad.num_nodes = 300
    with pytest.raises(ValueError, match="data.y has 10 rows"):
        NeighborLoader(bad, [2])
    bad = data.clone()
    bad.edge_index[0, 5] = 1000
    with pytest.raises(ValueError, match="node id 1000"):
        NeighborLoader(bad, [2])
    with pytest.raises(TypeError, match="Data"):
        NeighborLoader({"x": data.x}, [2])


def test_worker_arguments_warn():
    with pytest.warns(UserWarning, match="num_workers=4 has no effect"):
        NeighborLoader(random_data(), [2], batch_size=4, num_workers=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        NeighborLoader(random_data(), [2], batch_size=4, is_sorted=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_placements_and_prefetch_agree():
    # UVA reads and GPU reads, prefetched or not, give the same batches.
    data = random_data(num_nodes=5000, num_edges=100_000, edge_attr=True)

    def epoch(**kwargs):
        loader = NeighborLoader(data, [5, 4], batch_size=256, shuffle=True, seed=9, **kwargs)
        return [b for b in loader]

    base = epoch(placement="device", prefetch=0)
    for other in (epoch(placement="device", prefetch=3), epoch(placement="host", prefetch=2)):
        assert len(other) == len(base)
        for a, b in zip(base, other):
            for key in ("n_id", "edge_index", "x", "e_id", "edge_attr", "y"):
                assert torch.equal(a[key], b[key]), key
    input_nodes = torch.arange(5000, device="cuda")
    for batch in base:
        check_batch(batch, data.to("cuda"), input_nodes, [5, 4], False)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_new_pass_ends_the_open_one(device, prefetch):
    # one pass at a time (the passes share the sampler and caches): iter()
    # while a pass is open ends it (with prefetch, its producer too), and the
    # new pass is a whole epoch of valid batches; without prefetch (the
    # generator's state is then exactly one batch on), it equals the next
    # epoch of a loader whose passes never overlapped
    data = random_data(edge_attr=True)  # check_batch reads e_id

    def loader():
        return NeighborLoader(data, [3, 2], batch_size=64, shuffle=True, seed=5, device=device,
                              prefetch=prefetch)

    overlapped, plain = loader(), loader()
    kept = iter(overlapped)
    next(kept)
    for _ in zip(range(1), plain):  # the plain loader's first epoch, left after a batch too
        pass
    second = list(overlapped)
    assert len(second) == len(overlapped)
    with pytest.raises(StopIteration):
        next(kept)
    on_device = data.to(device)
    for batch in second:
        check_batch(batch, on_device, torch.arange(data.num_nodes, device=device), [3, 2], False)
    if prefetch == 0 or torch.device(device).type == "cpu":
        for a, b in zip(second, plain):
            assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
            assert torch.equal(a.x, b.x)
    assert list(zip(overlapped, overlapped)) == []  # the second iter() ended the first before it began


def test_stats_read_while_the_producer_sums_count_each_batch_once():
    # the producer thread sums its batches' marks every 64 batches while the
    # loop may read loader.stats, which sums them too: a mark summed by both
    # was counted twice. The producer's sum is held inside its first mark
    # until the loop's read has begun (or 0.3 s, when the read waits for it)
    from tritongnn.loader.timing import _FOLD_EVERY, StageTimes
    times = StageTimes(torch.device("cpu"))
    summing, read_started = threading.Event(), threading.Event()

    class Mark(float):  # a sampling end mark: 1 s after the start
        def __sub__(self, start):
            if threading.current_thread() is producer:
                summing.set()
                read_started.wait(0.3)
            return 1.0

    def produce():
        for _ in range(_FOLD_EVERY):  # the last one sums all
            times.add_batch(0.0, Mark(1.0), 0.0, 2.0)

    producer = threading.Thread(target=produce)
    producer.start()
    assert summing.wait(10)
    reader = threading.Thread(target=times.as_dict)
    reader.start()
    read_started.set()
    producer.join()
    reader.join()
    stats = times.as_dict()
    assert (stats["batches"], stats["sampling_seconds"], stats["gather_seconds"]) == \
        (_FOLD_EVERY, _FOLD_EVERY, 2 * _FOLD_EVERY)


def test_each_batch_is_ordered_on_the_stream_it_is_asked_for_on(monkeypatch, stream_pool):
    # a loop may run its model under a stream of its own (torch.cuda.stream):
    # each prefetched batch's ready event is waited for on the stream current
    # when the batch is asked for, not the one current when the pass began;
    # when the pass ends both wait for the producer's streams (sampling,
    # gather, staging), which are the loader's own, made once (not three a
    # pass). CUDA's stream calls are faked
    # (this runs on CPU too)
    from tritongnn.loader.pipeline import Prefetcher

    class Event:
        def record(self, stream):
            self.stream = stream

    class Loader:  # the surface the producer uses, the loader's own streams()
        device, prefetch, _streams = torch.device("cuda", 0), 2, None
        streams = NeighborLoader.streams

        def build_batches(self, batches, gather_stream, staging_stream):
            yield from batches

    start, own = FakeStream("cuda:0", -1, "pass start"), FakeStream("cuda:0", -2, "the loop's")
    current = {"stream": start}
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current["stream"])
    loader = Loader()
    batches = [Data(n_id=torch.arange(3)), Data(n_id=torch.arange(4))]
    prefetcher = Prefetcher(loader, batches)
    sampling, gather, staging = prefetcher.stream, prefetcher.gather_stream, prefetcher.staging_stream
    iterator = iter(prefetcher)
    first = next(iterator)
    current["stream"] = own  # the loop switches streams between batches
    second = next(iterator)
    assert (first.n_id.numel(), second.n_id.numel()) == (3, 4)
    events = [e for e in start.waited + own.waited if isinstance(e, Event)]
    assert [e for e in start.waited if isinstance(e, Event)] == events[:1]
    assert [e for e in own.waited if isinstance(e, Event)] == events[1:]
    assert all(e.stream is gather for e in events)
    with pytest.raises(StopIteration):
        next(iterator)
    for stream in (start, own):
        assert stream.waited[-3:] == [sampling, gather, staging], stream.name
    drawn = stream_pool.drawn[0]
    again = Prefetcher(loader, batches)  # the next pass: the same three streams
    assert (again.stream, again.gather_stream, again.staging_stream) == (sampling, gather, staging)
    assert stream_pool.drawn[0] == drawn == 3
    assert len(list(again)) == 2


def test_streams_kept_for_captures_are_never_drawn_again(stream_pool):
    # torch hands streams out round robin from a pool (4 here, 32 per GPU in
    # torch): a stream reserved for captures is never handed to another
    # stream of ours, and is not drawn as one of ours in use, that is whose
    # owner lives (the stream objects themselves are not watched: torch's
    # drop their weak references without calling them back)
    import gc
    import weakref
    from tritongnn.kernels._launch import new_stream, reserved

    class Owner:  # a loader, a cache
        pass

    owner = Owner()
    ours = [new_stream("cuda:0", owner=owner), new_stream("cuda:0", owner=owner)]  # handles 0, 1
    capture = new_stream("cuda:0", reserve=True)  # 2: not 0 or 1, which are in use
    assert capture.cuda_stream == 2 and reserved(capture) and not any(reserved(s) for s in ours)
    later = [new_stream("cuda:0", owner=owner) for _ in range(8)]  # the pool goes round: never 2
    assert 2 not in {s.cuda_stream for s in later}
    assert not any(isinstance(info.weakref(), FakeStream) for info in weakref.finalize._registry.values())
    del ours, later
    gc.collect()  # the streams are gone, their owner is not: still in use
    with pytest.raises(RuntimeError, match="no CUDA stream of cuda:0 is free"):
        new_stream("cuda:0", reserve=True)
    del owner
    gc.collect()  # none of ours in use: a reserve draw may take any free handle
    side = new_stream("cuda:0", reserve=True)
    assert side.cuda_stream != 2 and reserved(side)
    alive = [new_stream("cuda:0") for _ in range(2)]  # the two handles left; no owner: in use for good
    assert {s.cuda_stream for s in alive} == set(range(4)) - {capture.cuda_stream, side.cuda_stream}
    del alive
    gc.collect()
    with pytest.raises(RuntimeError, match="no CUDA stream of cuda:0 is free"):
        new_stream("cuda:0", reserve=True)  # every handle reserved or in use
    assert new_stream("cuda:1").device == torch.device("cuda", 1)  # another GPU, another pool


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_process_that_deleted_its_loaders_exits_cleanly():
    # the stream registry's finalizers once watched torch's stream objects,
    # which drop their weak references without calling them back: a process
    # that had deleted a loader died with SIGSEGV at exit
    import subprocess
    import sys
    script = """
import gc, torch
from torch_geometric.data import Data
from tritongnn import NeighborLoader
n = 20000
data = Data(edge_index=torch.randint(0, n, (2, 200000)), x=torch.randn(n, 16), num_nodes=n)
for kwargs in (dict(), dict(placement="host", cache_budget=1 << 20, dynamic_cache=True), dict(super_batch=4)):
    loader = NeighborLoader(data, [5, 3], batch_size=500, shuffle=True, device="cuda", **kwargs)
    for _ in range(2):
        for batch in loader:
            pass
    del loader, batch
    gc.collect()
torch.cuda.synchronize()
print("done")
"""
    run = subprocess.run([sys.executable, "-X", "faulthandler", "-c", script], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0 and run.stdout.strip() == "done", run.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_epochs_left_early_do_not_overlap_the_next():
    # an epoch left after one batch leaves prefetched batches queued on its
    # producer's streams; the next epoch's batches (same sampler, same id map
    # and captured buffers) must not overlap them: every batch stays valid
    data = random_data(num_nodes=20_000, num_edges=400_000, edge_attr=True)  # check_batch reads e_id
    loader = NeighborLoader(data, [10, 5], batch_size=512, shuffle=True, seed=3, prefetch=4,
                            placement="host")
    input_nodes = torch.arange(20_000, device="cuda")
    on_gpu = data.to("cuda")
    for _ in range(6):
        for i, batch in enumerate(loader):
            check_batch(batch, on_gpu, input_nodes, [10, 5], False)
            if i == 1:
                break
    for batch in loader:
        check_batch(batch, on_gpu, input_nodes, [10, 5], False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_leaving_an_epoch_early_is_prompt():
    # the producer has filled its queue and waits to put the next batch:
    # leaving the loop stops it at once, not at its put's 0.1 s timeout
    data = random_data(num_nodes=5000, num_edges=50_000)
    loader = NeighborLoader(data, [5, 4], batch_size=64, shuffle=True, seed=1, prefetch=2)
    for _ in range(3):
        iterator = iter(loader)
        next(iterator)
        time.sleep(1.0)  # the queue fills, the producer blocks in put (compiled and captured by now)
        start = time.perf_counter()
        iterator.close()  # what leaving a for loop early does
        assert time.perf_counter() - start < 0.05


def test_captured_hops_only_where_no_hop_syncs():
    from tritongnn import CSCGraph, NeighborSampler
    data = random_data()  # 300 nodes
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes)
    sync_above = None

    def keys(fanouts, batch_size=10, num_batches=1):
        sampler = NeighborSampler(graph, fanouts, device="cpu")
        if sync_above is not None:
            sampler.sync_above = sync_above
        return sampler._keys_bound(batch_size, num_batches)

    assert keys([3, 2]) == 10 + 30 + 60
    assert keys([]) == 10
    assert keys([3, -1]) == 0  # fanout -1: sizes known only after a sync
    sync_above = 16
    assert keys([1, 2], batch_size=17) == 0  # the second hop trims its frontier (a sync)
    assert keys([1, 2], batch_size=16) == 16 + 16 + 2 * 16  # up to sync_above it does not
    assert keys([2], batch_size=16) == 16 + 2 * 16  # the last hop never trims
    # per sub-batch: K = 2 trims past 32 frontier slots
    assert keys([1, 2], batch_size=32, num_batches=2) == 32 + 32 + 2 * 32
    assert keys([1, 2], batch_size=33, num_batches=2) == 0
    # a hop's new nodes fill at most K x num_nodes slots: the next hop's
    # candidates are bounded by the graph, not by the product of the fanouts
    sync_above = 1 << 30
    assert keys([15, 10, 5], batch_size=8) == 8 + 120 + 1200 + 5 * 300
    assert keys([15, 10, 5], batch_size=16, num_batches=2) == 16 + 240 + 2400 + 5 * 600
    assert not NeighborSampler(graph, [3], device="cpu").cuda_graph  # CPU: no graphs


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("placement", ["device", "host"])
def test_cuda_graph_replay_matches_eager(placement):
    # Captured-and-replayed hops give the very batches the eager launches give,
    # batch after batch (replays overwrite the graph's buffers), for full and
    # partial batches, with edge ids.
    from tritongnn import CSCGraph, NeighborSampler
    data = random_data(num_nodes=20_000, num_edges=400_000)
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True).to("cuda")
    graph = graph.pin_memory() if placement == "host" else graph
    seeds = torch.randperm(20_000, generator=torch.Generator().manual_seed(0)).to("cuda")[:5 * 512 + 100]
    outputs = {}
    for cuda_graph in (False, True):
        sampler = NeighborSampler(graph, [6, 4, 3], device="cuda", return_eid=True, cuda_graph=cuda_graph)
        gen = torch.Generator().manual_seed(3)
        outputs[cuda_graph] = [sampler.sample(batch, gen) for batch in seeds.split(512)]
        if cuda_graph:
            assert sampler._captured[512] is not None and sampler._captured[100] is not None
    for eager, replayed in zip(outputs[False], outputs[True]):
        for key in ("node", "row", "col", "edge", "num_sampled_nodes", "num_sampled_edges"):
            a, b = getattr(eager, key), getattr(replayed, key)
            assert (torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b), key


def test_edge_index_is_the_samplers_rows_not_a_copy(device):
    # sample and sample_many write row and col as the two rows of one [2, E]
    # tensor: the batch's edge_index is that tensor; any other pair is stacked
    from tritongnn import CSCGraph, NeighborSampler
    from tritongnn.sampling.outputs import edge_index_of, joined
    data = random_data()
    sampler = NeighborSampler(CSCGraph.from_edge_index(data.edge_index, 300).to(device), [3, 2], device=device)
    seeds = torch.arange(40, device=device)
    outs = [sampler.sample(seeds, torch.Generator().manual_seed(0))]
    outs += sampler.sample_many([seeds[:25], seeds[25:], seeds[:0]], torch.Generator().manual_seed(0))
    for out in outs:
        edge_index = edge_index_of(out.row, out.col)
        assert edge_index.shape == (2, out.row.numel()) and edge_index.is_contiguous()
        assert edge_index.data_ptr() == out.row.data_ptr()
        assert torch.equal(edge_index, torch.stack([out.row, out.col]))
    row, col = torch.arange(4), torch.arange(4, 8)
    assert torch.equal(edge_index_of(row, col), torch.stack([row, col]))
    pair = torch.stack([row, col])
    swapped = edge_index_of(pair[1], pair[0])  # rows of one tensor, in the wrong order: a copy
    assert swapped.data_ptr() != pair.data_ptr() and torch.equal(swapped, pair.flip(0))
    # a super-batch's nodes lie end to end: joined, they are one view
    nodes = [out.node for out in outs[1:]]
    assert joined(nodes).data_ptr() == nodes[0].data_ptr() and torch.equal(joined(nodes), torch.cat(nodes))
    apart = [nodes[1], nodes[0]]
    assert joined(apart).data_ptr() != nodes[1].data_ptr() and torch.equal(joined(apart), torch.cat(apart))
    batch = next(iter(NeighborLoader(data, [3, 2], batch_size=40, device=device)))
    assert batch.edge_index.is_contiguous() and batch.edge_index.size(0) == 2


def test_sampler_checks_its_seeds():
    # the loader's seeds were checked as input_nodes; a sampler used alone
    # checks each call's (an id past indptr would be read as a row)
    from tritongnn import CSCGraph, NeighborSampler
    data = random_data()
    sampler = NeighborSampler(CSCGraph.from_edge_index(data.edge_index, 300), [2], device="cpu")
    with pytest.raises(ValueError, match="seeds holds node id 300"):
        sampler.sample(torch.tensor([1, 300]))
    with pytest.raises(ValueError, match="seeds holds node id -1"):
        sampler.sample(torch.tensor([-1]))
    with pytest.raises(TypeError, match="seeds must be a 1-D int64 tensor"):
        sampler.sample(torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(ValueError, match="seeds_list holds node id 301"):
        sampler.sample_many([torch.tensor([1]), torch.tensor([301])])
    with pytest.raises(ValueError, match="holds node id 300"):  # through PyG's NodeLoader
        list(NodeLoader(data, PyGSampler(data, [2], device="cpu"), input_nodes=torch.tensor([300]),
                        batch_size=1))


def test_calls_run_with_their_tensors_gpu_current(monkeypatch):
    # Triton launches on the current GPU's stream: a call on cuda:1 tensors
    # while cuda:0 is current must switch to cuda:1 for its duration (checked
    # here with CUDA's device calls recorded, so it runs without two GPUs)
    import contextlib
    import types
    from tritongnn.kernels import _launch
    entered = []

    @contextlib.contextmanager
    def device(d):
        entered.append(torch.device(d))
        yield
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", device)

    @_launch.on_device_of("where")
    def call(value, where=None):
        return value

    assert call(1, where=types.SimpleNamespace(device=torch.device("cuda", 1))) == 1  # a tensor, a sampler
    call(2, where="cuda:1")                                    # a device= argument
    call(3, torch.device("cuda", 1))
    call(4, where=types.SimpleNamespace(device=torch.device("cuda", 0)))  # current already
    call(5, where="cpu")
    call(6, where="cuda:7")                                    # no such GPU: the call's own checks say so
    call(7, where=True)                                        # not a device
    call(8)
    assert entered == [torch.device("cuda", 1)] * 3


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_loader_on_a_gpu_that_is_not_current(prefetch):
    # built and iterated on cuda:1 while cuda:0 is current: the same batches
    # as with cuda:1 current throughout
    data = random_data(num_nodes=5000, num_edges=100_000, edge_attr=True)

    def epoch():
        loader = NeighborLoader(data, [5, 4], batch_size=256, shuffle=True, seed=9, device="cuda:1",
                                placement="host", cache_budget=200_000, dynamic_cache=True, prefetch=prefetch)
        return [b for b in loader]

    with torch.cuda.device(0):
        other = epoch()
    with torch.cuda.device(1):
        base = epoch()
    assert len(base) == len(other)
    for a, b in zip(base, other):
        for key in ("n_id", "edge_index", "x", "e_id", "edge_attr", "y"):
            assert torch.equal(a[key], b[key]), key


def test_a_graph_without_edge_index_is_a_graph_without_edges(device):
    # PyG's loaders take Data(num_nodes=N) as N isolated nodes; the user's data keeps no edge_index
    data = Data(num_nodes=50, x=torch.randn(50, 3))
    batches = list(NeighborLoader(data, [2, 2], batch_size=8, device=device))
    assert "edge_index" not in data
    assert sum(b.batch_size for b in batches) == 50
    for b in batches:
        assert b.edge_index.shape == (2, 0) and torch.equal(b.n_id.cpu(), b.input_id.cpu())
        assert torch.equal(b.x.cpu(), data.x[b.n_id.cpu()])
    with pytest.raises(ValueError, match="neither edge_index nor num_nodes"):
        NeighborLoader(Data(), [2], device=device)
