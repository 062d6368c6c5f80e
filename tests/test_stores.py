"""``data`` as PyG's ``(FeatureStore, GraphStore)`` pair: the batches of
PyG's own loader over the same stores (its ``NodeLoader`` filtering them
with ``filter_custom_store``, our sampler behind the ``BaseSampler`` seam,
as PyG itself samples only with pyg-lib or torch-sparse), in every layout
the graph store may hold; the stores left as they were; errors named."""
import warnings

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.testing import MyFeatureStore, MyGraphStore

from tritongnn import NeighborLoader, PyGSampler

from test_loader import assert_same_batches

N, E = 60, 400


def graph(seed=0):
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(N, 5, generator=g), y=torch.randint(0, 3, (N,), generator=g),
                edge_index=torch.randint(0, N, (2, E), generator=g), mask=torch.rand(N, generator=g) < 0.4)


def in_layout(edge_index, layout):
    """``(edge_index as the store holds it, its COO in the store's order)``."""
    row, col = edge_index
    if layout == "coo":
        return (row, col), edge_index
    if layout == "csr":  # by source; within a source, in edge_index's order
        order = row.argsort(stable=True)
        ptr = torch.zeros(N + 1, dtype=torch.int64)
        ptr[1:] = torch.bincount(row, minlength=N).cumsum(0)
        return (ptr, col[order]), edge_index[:, order]
    order = col.argsort(stable=True)  # csc, and coo sorted by target
    if layout == "coo_sorted":
        return (row[order], col[order]), edge_index[:, order]
    ptr = torch.zeros(N + 1, dtype=torch.int64)
    ptr[1:] = torch.bincount(col, minlength=N).cumsum(0)
    return (row[order], ptr), edge_index[:, order]


class HostFeatureStore(MyFeatureStore):
    """PyG's test store, its rows looked up by ids from any device: PyG's
    loader asks it for the GPU sampler's ids, and its lookup compares them
    with its own CPU index."""

    def _get_tensor(self, attr):
        if isinstance(attr.index, torch.Tensor):
            attr.index = attr.index.cpu()
        return super()._get_tensor(attr)


def stores(layout="coo", size=(N, N), group_name=None, seed=0, **extra):
    """A ``HostFeatureStore`` (``x``, ``y``, ``extra``) and a ``MyGraphStore``
    holding the graph in ``layout``, and that graph's COO in store order."""
    parts = graph(seed)
    feature_store, graph_store = HostFeatureStore(), MyGraphStore()
    for name, value in dict(x=parts["x"], y=parts["y"], **extra).items():
        feature_store.put_tensor(value, group_name=group_name, attr_name=name, index=None)
    held, coo = in_layout(parts["edge_index"], layout)
    graph_store.put_edge_index(held, edge_type=None, layout=layout.split("_")[0], size=size,
                               is_sorted=layout == "coo_sorted")
    return feature_store, graph_store, coo, parts


def pyg_loader(pair, input_nodes=None, **kwargs):
    input_nodes = torch.arange(N) if input_nodes is None else input_nodes  # (PyG needs them for stores)
    return NodeLoader(pair, PyGSampler(pair, [3, 2], device=kwargs.pop("device", "cpu"), seed=7),
                      input_nodes=input_nodes, **kwargs)


def check_e_id(batch, coo):
    # PyG's e_id: the column of the store's COO (GraphStore.coo) each edge is
    assert torch.equal(batch.n_id[batch.edge_index], coo[:, batch.e_id])


@pytest.mark.parametrize("layout", ["coo", "coo_sorted", "csr", "csc"])
def test_batches_as_pyg_over_the_stores(device, layout):
    # a node tensor with "index" in its name: PyG's store path slices it by
    # rows, where a Data's would be sliced along its last dim
    pair_index = torch.arange(2 * N).view(N, 2)
    feature_store, graph_store, coo, parts = stores(layout, pair_index=pair_index)
    pair = (feature_store, graph_store)
    ours = NeighborLoader(pair, [3, 2], input_nodes=parts["mask"], batch_size=8, device=device, seed=7)
    pyg = pyg_loader(pair, parts["mask"], batch_size=8, device=device)
    assert torch.equal(torch.stack(graph_store.coo()[:2]), coo)  # PyG's own COO of the store, in its order
    assert_same_batches(ours, pyg)  # e_id included, in every layout
    for batch in ours:
        batch = batch.to("cpu")
        assert torch.equal(batch.x, parts["x"][batch.n_id]) and torch.equal(batch.pair_index, pair_index[batch.n_id])
        assert batch.num_nodes == batch.n_id.numel()
        check_e_id(batch, coo)


def test_same_batches_as_the_data_of_the_stores(device):
    feature_store, graph_store, coo, parts = stores("csr")
    data = Data(x=parts["x"], y=parts["y"], edge_index=coo, num_nodes=N)
    for kwargs in (dict(), dict(placement="host", cache_budget=4 * 20 * 5, profile_epochs=1)):
        ours = NeighborLoader((feature_store, graph_store), [3, 2], batch_size=8, shuffle=True, device=device,
                              seed=3, **kwargs)
        assert_same_batches(ours, NeighborLoader(data, [3, 2], batch_size=8, shuffle=True, device=device, seed=3,
                                                 **kwargs))
        assert ours([4, 2]).n_id[:2].tolist() == [4, 2]


def test_pyg_data_as_both_stores(device):
    # PyG's Data is a FeatureStore and a GraphStore; its loader cannot read
    # a homogeneous one so (its edge attr has no size, its tensor attrs no
    # group_name): here it gives the Data's own batches
    parts = graph()
    data = Data(x=parts["x"], y=parts["y"], edge_index=in_layout(parts["edge_index"], "coo_sorted")[1], num_nodes=N)
    ours = NeighborLoader((data, data), [3, 2], batch_size=8, device=device, seed=7)
    assert_same_batches(ours, NeighborLoader(data, [3, 2], batch_size=8, device=device, seed=7))
    assert data.get_all_edge_attrs()[0].size is None and "_edge_attrs" not in data.__dict__
    with pytest.raises(ValueError, match="not fully specified"):
        next(iter(pyg_loader((data, data), batch_size=8)))


def test_x_is_the_stores_own_tensor_fetched_once():
    class Counting(MyFeatureStore):
        def __init__(self):
            super().__init__()
            self.reads = []

        def _get_tensor(self, attr):
            self.reads.append((attr.attr_name, attr.index))
            return super()._get_tensor(attr)
    feature_store, graph_store, _, parts = stores("csc")
    counting = Counting()
    counting.store = feature_store.store
    loader = NeighborLoader((counting, graph_store), [3, 2], batch_size=8, device="cpu", placement="host")
    assert sorted(counting.reads) == [("x", None), ("y", None)]
    for _ in loader:
        pass
    assert len(counting.reads) == 2  # batches read the loader's tiers, never the store
    assert loader.x.data_ptr() == feature_store.store[(None, "x")][1].data_ptr()  # the host tier: no copy


def test_stores_left_as_they_were():
    feature_store, graph_store, coo, parts = stores("csr")
    before = {key: tuple(t.clone() for t in value) for key, value in graph_store.store.items()}
    features = {key: value[1].clone() for key, value in feature_store.store.items()}
    attrs = feature_store.get_all_tensor_attrs()
    loader = NeighborLoader((feature_store, graph_store), [3, 2], batch_size=8, device="cpu")
    for _ in loader:
        pass
    assert all(all(torch.equal(a, b) for a, b in zip(graph_store.store[key], value)) for key, value in before.items())
    assert all(torch.equal(feature_store.store[key][1], value) for key, value in features.items())
    assert [a.index for a in attrs] == [a.index for a in feature_store.get_all_tensor_attrs()]


def test_one_node_type_is_homogeneous():
    # edges of edge_type None and features of one group: PyG's homogeneous
    # path (it keys each batch's tensors by attr_name)
    feature_store, graph_store, _, parts = stores("coo_sorted", group_name="paper")
    ours = NeighborLoader((feature_store, graph_store), [3, 2], batch_size=8, device="cpu", seed=7)
    assert_same_batches(ours, pyg_loader((feature_store, graph_store), batch_size=8))


def test_size_none_infers_the_nodes():
    feature_store, graph_store, coo, parts = stores("csc", size=None)
    batch = NeighborLoader((feature_store, graph_store), [3, 2], batch_size=8, device="cpu")([0, 59])
    assert torch.equal(batch.x, parts["x"][batch.n_id])


def typed_edges():
    feature_store, graph_store, _, _ = stores()
    graph_store.put_edge_index((torch.tensor([0]), torch.tensor([1])), edge_type=("a", "to", "b"), layout="coo",
                               size=(2, 2))
    return feature_store, graph_store


def two_node_types():
    feature_store, graph_store, _, _ = stores()
    feature_store.put_tensor(torch.zeros(N), group_name="author", attr_name="x", index=None)
    return feature_store, graph_store


def bad_pointer():
    feature_store, graph_store, _, parts = stores("csc")
    (row, ptr), = graph_store.store.values()
    graph_store.store = {key: (row, ptr.flip(0)) for key in graph_store.store}
    return feature_store, graph_store


def a_scalar():
    feature_store, graph_store, _, _ = stores()
    feature_store.store[(None, "z")] = (torch.arange(1), torch.tensor(3.0))  # (put_tensor wants rows)
    return feature_store, graph_store


def hetero_data_as_both():
    # PyG's test_custom_neighbor_loader pattern: HeteroData as both stores
    from torch_geometric.data import HeteroData
    data = HeteroData()
    data["paper"].x = torch.randn(4, 2)
    data["paper", "cites", "paper"].edge_index = torch.tensor([[0, 1], [1, 2]])
    return data, data


def test_typed_edges_read_as_a_hetero_data():
    # PyG's test_custom_neighbor_loader pattern: a HeteroData as both stores
    data = hetero_data_as_both()[0]
    batch = next(iter(NeighborLoader((data, data), [-1], input_nodes=("paper", [1]), batch_size=1, device="cpu")))
    assert batch["paper"].n_id.tolist() == [1, 0] and batch["paper"].num_nodes == 2  # (set: stores give it)
    assert torch.equal(batch["paper"].x, data["paper"].x[[1, 0]])
    assert batch["paper", "cites", "paper"].e_id.tolist() == [0]
    with pytest.raises(NotImplementedError, match="read by NeighborLoader only"):
        PyGSampler((data, data), [2])


def no_edges():
    feature_store, _, _, _ = stores()
    return feature_store, MyGraphStore()


@pytest.mark.parametrize("make, error, match", [
    (typed_edges, ValueError, r"mixes typed edges \('a', 'to', 'b'\) and untyped ones"),
    (two_node_types, ValueError, r"several node types \(None, author\) over untyped edges"),
    (lambda: stores(z=torch.zeros(N - 1))[:2], ValueError, "'z' has 59 rows, expected one row a node"),
    (a_scalar, ValueError, "'z' is a scalar"),
    (lambda: stores(size=(40, 40))[:2], ValueError, r"graph store's edge index \(\w+\) holds node id \d+, outside"),
    (lambda: stores("csr", size=(50, 50))[:2], ValueError, "pointer covers 60 nodes"),
    (bad_pointer, ValueError, "CSC column pointer must run from 0"),
    (no_edges, ValueError, "holds no edge index"),
    (lambda: (Data(), 3), TypeError, r"\(FeatureStore, GraphStore\) pair, got \(Data, int\)"),
])
def test_bad_stores_are_named(make, error, match):
    with pytest.raises(error, match=match):
        NeighborLoader(make(), [3, 2], batch_size=8, device="cpu")


def test_pyg_refuses_what_we_infer():
    # PyG's sampler needs the edge attr's size (max(size)): we infer it
    from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler
    feature_store, graph_store, _, _ = stores(size=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its warning that pyg-lib is missing
        with pytest.raises(TypeError):
            PyGNeighborSampler((feature_store, graph_store), [3, 2])
