"""GAT's attention aggregation (``kernels.attention``) against its pure-torch
reference, and ``tritongnn.nn.GATConv`` / ``GAT`` against PyG's, outputs and
gradients."""
import contextlib

import pytest
import torch
from hypothesis import given, strategies as st
from torch_geometric.nn import GAT as PyGGAT
from torch_geometric.nn import GATConv as PyGGATConv

from tritongnn.kernels import reference
from tritongnn.kernels._launch import reference_on_cpu
from tritongnn.kernels.attention import attend
from tritongnn.nn import GAT, GATConv


def outputs_and_grads(fn, leaves, seed=1):
    for t in leaves:
        t.grad = None
    out = fn()
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out.device)
    (out * grad).sum().backward()
    return [out.detach().cpu()] + [t.grad.cpu() for t in leaves]


@st.composite
def graphs(draw):
    """A block with sources, destinations (some without edges), repeated
    edges, existing self loops, and sometimes one destination far past a
    block of edges."""
    num_src = draw(st.integers(1, 30))
    num_dst = draw(st.integers(1, 12))
    num_edges = draw(st.integers(0, 60))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    src = torch.randint(0, num_src, (num_edges,), generator=g)
    dst = torch.randint(0, max(1, num_dst - 2), (num_edges,), generator=g)
    if draw(st.booleans()):  # a hub destination
        hub = torch.randint(0, num_src, (draw(st.integers(20, 80)),), generator=g)
        src, dst = torch.cat([src, hub]), torch.cat([dst, torch.zeros_like(hub)])
    loops = torch.arange(min(num_src, num_dst, 3))
    src, dst = torch.cat([src, loops, loops]), torch.cat([dst, loops, loops])  # each loop twice
    if draw(st.booleans()):
        order = torch.argsort(dst, stable=True)
        src, dst = src[order], dst[order]
    heads = draw(st.sampled_from([1, 3, 8]))
    channels = draw(st.sampled_from([1, 5, 8, 40]))
    return num_src, num_dst, torch.stack([src, dst]), heads, channels, g


@given(graphs(), st.booleans(), st.sampled_from([0.2, 0.0]))
def test_attend_matches_its_reference(graph, self_loops, slope):
    num_src, num_dst, edge_index, heads, channels, g = graph
    xs = torch.randn(num_src, heads, channels, generator=g).requires_grad_()
    a_src = (3 * torch.randn(num_src, heads, generator=g)).requires_grad_()  # logits far apart: the running max
    a_dst = torch.randn(num_dst, heads, generator=g).requires_grad_()
    leaves = [xs, a_src, a_dst]
    ours = outputs_and_grads(lambda: attend(xs, a_src, a_dst, edge_index, slope, self_loops), leaves)
    theirs = outputs_and_grads(lambda: reference.attend(xs, a_src, a_dst, edge_index, num_dst, slope,
                                                        min(num_src, num_dst) if self_loops else 0, self_loops),
                               leaves)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_attend_refuses_bad_input_by_name():
    xs, a_src, a_dst = torch.randn(6, 2, 3), torch.randn(6, 2), torch.randn(4, 2)
    edge_index = torch.tensor([[0, 5], [1, 3]])
    with pytest.raises(ValueError, match="xs must be"):
        attend(xs.double(), a_src, a_dst, edge_index)
    with pytest.raises(ValueError, match="xs must be"):
        attend(xs[:, 0], a_src, a_dst, edge_index)
    with pytest.raises(ValueError, match=r"a_src must be \[6, 2\]"):
        attend(xs, a_src[:, :1], a_dst, edge_index)
    with pytest.raises(ValueError, match="a_dst"):
        attend(xs, a_src, a_dst[:, :1], edge_index)
    with pytest.raises(ValueError, match=r"edge_index must be a \[2, E\] int64"):
        attend(xs, a_src, a_dst, edge_index.int())
    for path in (contextlib.nullcontext(), reference_on_cpu()):  # the kernel's launch and the CPU path
        with pytest.raises(ValueError, match=r"edge_index\[1\] holds node id 4, outside \[0, 4\)"), path:
            attend(xs, a_src, a_dst, torch.tensor([[0, 5], [1, 4]]))  # the kernel would read past a_dst


def layer_pair(*args, **kwargs):
    torch.manual_seed(0)
    ours, theirs = GATConv(*args, **kwargs), PyGGATConv(*args, **kwargs)
    theirs.load_state_dict(ours.state_dict())
    with torch.no_grad():  # a bias that is not zero, so its gradient path is exercised
        for layer in (ours, theirs):
            if layer.bias is not None:
                layer.bias.copy_(torch.linspace(-1, 1, layer.bias.numel()))
    return ours, theirs


def graph_for_layers(num_nodes=40, num_edges=160, seed=4):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes - 5, (2, num_edges), generator=g)  # the last 5: loops only
    edge_index = torch.cat([edge_index, torch.tensor([[3, 3, 9], [3, 3, 9]])], 1)
    return torch.randn(num_nodes, 12, generator=g), edge_index


@pytest.mark.parametrize("kwargs", [dict(heads=3), dict(heads=3, concat=False), dict(heads=2, add_self_loops=False),
                                    dict(heads=1, negative_slope=0.05, bias=False), dict(heads=2, residual=True),
                                    dict(heads=4, dropout=0.5)])
@pytest.mark.parametrize("trained", [True, False])
def test_gatconv_is_a_drop_in(kwargs, trained):
    # PyG's outputs and gradients (x and every parameter), whether the
    # kernel runs (dropout only while evaluating) or PyG's path does
    ours, theirs = layer_pair(12, 5, **kwargs)
    x, edge_index = graph_for_layers()
    results = []
    for layer in (ours, theirs):
        layer.train(trained and kwargs.get("dropout", 0) == 0)
        leaf = x.clone().requires_grad_()
        results.append(outputs_and_grads(lambda: layer(leaf, edge_index), [leaf] + list(layer.parameters())))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_gatconv_runs_the_kernel_where_it_applies(monkeypatch):
    from tritongnn.nn import conv
    calls = []
    real = conv.attend
    monkeypatch.setattr(conv, "attend", lambda *a, **k: calls.append(1) or real(*a, **k))
    x, edge_index = graph_for_layers()
    layer = GATConv(12, 5, heads=2)
    layer(x, edge_index)
    assert len(calls) == 1
    layer(x, edge_index, return_attention_weights=True)  # PyG's: it returns the per-edge weights
    layer(x, edge_index, size=(40, 40))
    GATConv(12, 5, heads=2).double()(x.double(), edge_index)  # the kernels take no float64
    GATConv(12, 5, heads=2, dropout=0.3)(x, edge_index)  # training: dropout on the attention
    GATConv(12, 300)(x, edge_index)  # heads wider than MAX_CHANNELS
    assert len(calls) == 1


def test_gatconv_takes_pairs():
    # (x, x[:k]), as trimming hands it, and an unrelated pair: PyG's rows
    ours, theirs = layer_pair(12, 5, heads=2)
    x, edge_index = graph_for_layers()
    edge_index = edge_index[:, edge_index[1] < 11]
    other = torch.randn(11, 12, generator=torch.Generator().manual_seed(8))
    for make in (lambda t: (t, t[:11]), lambda t: (t, other)):
        results = []
        for layer in (ours, theirs):
            leaf = x.clone().requires_grad_()
            results.append(outputs_and_grads(lambda: layer(make(leaf * 2), edge_index),
                                             [leaf] + list(layer.parameters())))
            assert results[-1][0].shape == (11, 10)
        for a, b in zip(*results):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="'edge_index' to have size '2'"):
        ours(x, torch.zeros(3, 4, dtype=torch.int64))


def test_gatconv_initialised_bipartite():
    # separate maps of sources and destinations (in_channels a pair), with
    # and without gradients: PyG's outputs and gradients
    ours, theirs = layer_pair((12, 10), 5, heads=3)
    g = torch.Generator().manual_seed(9)
    x_src, x_dst = torch.randn(30, 12, generator=g), torch.randn(11, 10, generator=g)
    edge_index = torch.stack([torch.randint(0, 30, (90,), generator=g), torch.randint(0, 11, (90,), generator=g)])
    results = []
    for layer in (ours, theirs):
        leaves = [x_src.clone().requires_grad_(), x_dst.clone().requires_grad_()]
        results.append(outputs_and_grads(lambda: layer(tuple(leaves), edge_index), leaves + list(layer.parameters())))
        with torch.no_grad():
            results[-1].append(layer((x_src, x_dst), edge_index))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fanouts, layers", [([4, 3], 2), ([4, 3, 2], 3)])
def test_gat_with_trimmed_layers_matches_pyg(fanouts, layers):
    from test_aggregate import assert_trimmed_model_matches
    from test_loader import random_data
    from tritongnn import NeighborLoader
    from tritongnn.nn.conv import TrimToDestinations
    data = random_data()
    with reference_on_cpu():
        batch = next(iter(NeighborLoader(data, fanouts, batch_size=16, seed=0, device="cpu")))
    torch.manual_seed(0)
    ours = GAT(data.num_features, 16, num_layers=layers, out_channels=5, heads=4)
    theirs = PyGGAT(data.num_features, 16, num_layers=layers, out_channels=5, heads=4)
    assert all(isinstance(conv, GATConv) for conv in ours.convs) and isinstance(ours._trim, TrimToDestinations)
    assert_trimmed_model_matches(ours, theirs, batch, len(fanouts), layers)  # the kernel (interpreted)
    assert type(GAT(8, 16, num_layers=2, v2=True).convs[0]).__name__ == "GATv2Conv"  # PyG's


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("heads, channels", [(8, 8), pytest.param(8, 172, marks=pytest.mark.slow),
                                             pytest.param(3, 5, marks=pytest.mark.slow)])
def test_attend_matches_its_reference_on_the_gpu(heads, channels):
    g = torch.Generator().manual_seed(2)
    num_src, num_dst = 5000, 1200
    dst = torch.sort(torch.randint(0, num_dst - 50, (60000,), generator=g)).values
    edge_index = torch.stack([torch.randint(0, num_src, (60000,), generator=g), dst]).cuda()
    xs = torch.randn(num_src, heads, channels, generator=g).cuda().requires_grad_()
    a_src = (3 * torch.randn(num_src, heads, generator=g)).cuda().requires_grad_()
    a_dst = torch.randn(num_dst, heads, generator=g).cuda().requires_grad_()
    leaves = [xs, a_src, a_dst]
    ours = outputs_and_grads(lambda: attend(xs, a_src, a_dst, edge_index), leaves)
    theirs = outputs_and_grads(lambda: reference.attend(xs, a_src, a_dst, edge_index, num_dst, 0.2, num_dst, True),
                               leaves)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
