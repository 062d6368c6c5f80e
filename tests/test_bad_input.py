"""Bad input gets an error naming the argument and what was passed, before
anything is built: ``data.edge_index`` that is no ``[2, E]`` integer tensor
with data, ``data.x`` of a dtype the gather does not move, and a GCN
``edge_weight`` that is not one weight per edge. What was passed is left
as it was."""
import numpy as np
import pytest
import torch
from torch_geometric.nn import GCNConv as PyGGCNConv

from tritongnn import NeighborLoader
from tritongnn.nn import GCN, GCNConv

from test_loader import random_data


@pytest.mark.parametrize("make, error, match", [
    (lambda ei: ei[0].clone(), ValueError, r"data.edge_index must have shape \[2, num_edges\], got \(3000,\)"),
    (lambda ei: torch.cat([ei, ei[:1]]), ValueError, r"must have shape \[2, num_edges\], got \(3, 3000\)"),
    (lambda ei: ei.view(2, 3000, 1), ValueError, r"got \(2, 3000, 1\)"),
    (lambda ei: ei.numpy(), TypeError, "data.edge_index must be a torch.Tensor .* got numpy.ndarray"),
    (lambda ei: ei.tolist(), TypeError, "data.edge_index must be a torch.Tensor .* got builtins.list"),
    (lambda ei: ei.to("meta"), ValueError, r"data.edge_index is a meta tensor of shape \(2, 3000\)"),
    (lambda ei: ei.float(), TypeError, "data.edge_index must hold integer node ids, got dtype torch.float32"),
    (lambda ei: ei.bool(), TypeError, "got dtype torch.bool"),
    (lambda ei: ei.to_sparse(), TypeError, "data.edge_index must be a dense tensor"),
], ids=["1-D", "3 rows", "3-D", "numpy", "list", "meta", "float", "bool", "sparse"])
def test_bad_edge_index_is_named(make, error, match):
    data = random_data()
    data.edge_index = make(data.edge_index)
    kept = data.edge_index
    with pytest.raises(error, match=match):
        NeighborLoader(data, [2], batch_size=8, device="cpu")
    assert data.edge_index is kept


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2])
def test_x_of_a_dtype_the_gather_cannot_move_is_named(dtype):
    data = random_data()
    data.x = torch.randn(300, 4).to(dtype)
    with pytest.raises(TypeError, match=f"data.x has dtype {dtype}"):
        NeighborLoader(data, [2], batch_size=8, device="cpu")
    data.x = np.zeros((300, 4), dtype=np.complex64)  # as numpy too
    with pytest.raises(TypeError, match="data.x has dtype torch.complex64"):
        NeighborLoader(data, [2], batch_size=8, device="cpu")


def test_meta_x_is_named():
    data = random_data()
    data.x = torch.empty(300, 4, device="meta")
    with pytest.raises(ValueError, match=r"data.x is a meta tensor of shape \(300, 4\)"):
        NeighborLoader(data, [2], batch_size=8, device="cpu")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int16, torch.uint8, torch.bool, torch.float64])
def test_integer_bool_and_double_x_are_gathered(dtype):
    data = random_data()
    data.x = (torch.randn(300, 3) * 4).to(dtype)
    batch = next(iter(NeighborLoader(data, [2], batch_size=8, device="cpu", seed=0)))
    assert batch.x.dtype == dtype and torch.equal(batch.x, data.x[batch.n_id])


@pytest.mark.parametrize("shape", [(29,), (31,), (2, 15), (30, 2), ()], ids=["short", "long", "2x15", "Ex2", "0-d"])
def test_gcn_edge_weight_of_the_wrong_shape_is_named(shape):
    torch.manual_seed(0)
    x, edge_index = torch.randn(10, 4), torch.randint(0, 10, (2, 30))
    weight = torch.rand(shape)
    kept = weight.clone()
    match = rf"edge_weight must have shape \[30\] .*edge_index \(2, 30\)\), got {re_shape(shape)}"
    with pytest.raises(ValueError, match=match):
        GCNConv(4, 3)(x, edge_index, weight)
    with pytest.raises(ValueError, match=match):
        GCN(4, 8, 2, 3)(x, edge_index, edge_weight=weight)
    assert torch.equal(weight, kept)


def re_shape(shape):
    return "\\(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + "\\)"


def test_gcn_edge_weight_of_one_column_as_pyg():
    # PyG's normalisation takes [E, 1] weights and gives the output of [E]
    torch.manual_seed(0)
    x, edge_index, weight = torch.randn(10, 4), torch.randint(0, 10, (2, 30)), torch.rand(30)
    pyg, ours = PyGGCNConv(4, 3), GCNConv(4, 3)
    ours.load_state_dict(pyg.state_dict())
    expected = pyg(x, edge_index, weight)
    torch.testing.assert_close(ours(x, edge_index, weight[:, None]), expected)
    torch.testing.assert_close(ours(x, edge_index, weight), expected)
    with pytest.raises(TypeError, match="edge_weight must be a tensor"):
        ours(x, edge_index, weight.tolist())
