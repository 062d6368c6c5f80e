"""Aggregation kernel against PyG's scatter, forward and backward; the
drop-in SAGEConv and GraphSAGE against PyG's."""
import importlib

import pytest
import torch
from hypothesis import given, strategies as st
from torch_geometric.nn import GCNConv as PyGGCNConv
from torch_geometric.nn import GraphSAGE as PyGGraphSAGE
from torch_geometric.nn import SAGEConv as PyGSAGEConv
from torch_geometric.nn import SimpleConv as PyGSimpleConv
from torch_geometric.utils import scatter

from tritongnn.kernels._launch import reference_on_cpu
from tritongnn.kernels.aggregate import aggregate
from tritongnn.nn import GCNConv, GraphSAGE, SAGEConv, SimpleConv

agg = importlib.import_module("tritongnn.kernels.aggregate")  # the module, not the function


@st.composite
def blocks(draw):
    """A sampled block: sources, destinations, edges grouped or not, with
    destinations that have no edge and sometimes one huge row."""
    num_src = draw(st.integers(1, 24))
    num_dst = draw(st.integers(1, 10))
    num_edges = draw(st.integers(0, 60))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=g)
    dst = torch.randint(0, max(1, num_dst // 2), (num_edges,), generator=g)  # the upper half: no edges
    if draw(st.booleans()):  # one destination with a row far longer than the rest
        hub = torch.randint(0, num_src, (draw(st.integers(100, 300)),), generator=g)
        src, dst = torch.cat([src, hub]), torch.cat([dst, torch.full_like(hub, num_dst - 1)])
    if draw(st.booleans()):  # grouped by destination, as the sampler emits them
        order = torch.argsort(dst, stable=True)
        src, dst = src[order], dst[order]
    width = draw(st.sampled_from([1, 3, 64, 127, 130]))
    return num_src, num_dst, torch.stack([src, dst]), width, seed


def scatter_reference(x, edge_index, num_dst, reduce, w, grad):
    """Output and input gradients of the aggregation, in float64."""
    x = x.double().requires_grad_()
    w = w.double().requires_grad_() if w is not None else None
    messages = x[edge_index[0]] if w is None else w[:, None] * x[edge_index[0]]
    out = scatter(messages, edge_index[1], dim=0, dim_size=num_dst, reduce=reduce)
    out.backward(grad.double())
    grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in (x, w) if t is not None]
    return [out.detach()] + grads


@given(block=blocks(), reduce=st.sampled_from(["sum", "mean"]), weighted=st.booleans())
def test_aggregate_matches_scatter_forward_and_backward(device, block, reduce, weighted):
    num_src, num_dst, edge_index, width, seed = block
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(num_src, width, generator=g)
    grad = torch.randn(num_dst, width, generator=g)
    w = torch.rand(edge_index.size(1), generator=g) if weighted else None
    ours_x = x.clone().to(device).requires_grad_()
    ours_w = w.clone().to(device).requires_grad_() if weighted else None
    out = aggregate(ours_x, edge_index.to(device), num_dst, reduce, ours_w)
    out.backward(grad.to(device))
    ours = [out.detach(), ours_x.grad] + ([ours_w.grad] if weighted else [])
    ours = [t.cpu().double() if t is not None else torch.zeros(1, dtype=torch.float64) for t in ours]
    # Exact values in float64, and the same sums over |terms|: a float32 sum
    # of n terms in any order is within n * 2^-24 * sum|terms| of the exact
    # one (the backward adds with atomics, in no fixed order), while a lost
    # or doubled edge moves it by a whole term.
    exact = scatter_reference(x, edge_index, num_dst, reduce, w, grad)
    size = scatter_reference(x.abs(), edge_index, num_dst, reduce, w.abs() if weighted else None, grad.abs())
    terms = max(width, int(torch.bincount(edge_index.flatten()).max()) if edge_index.numel() else 1)
    for name, got, want, bound in zip(("out", "x.grad", "w.grad"), ours, exact, size):
        err = (got.expand_as(want) - want).abs()
        allowed = 2 * (terms + 2) * 2.0**-24 * bound + 1e-7
        assert bool((err <= allowed).all()), \
            f"{name}: error {float((err - allowed).max()):.3g} past the float32 summation bound"


@pytest.mark.parametrize("use", ["both", "out", "root"])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_aggregate_with_root_adds_the_roots_gradient_in_place(device, use, reduce):
    # with_root: the destinations' own rows (x[:num_dst]) come back as a
    # view, and the backward adds their gradient into x's leading rows: the
    # gradients are those of slicing x outside, whichever outputs are used
    g = torch.Generator().manual_seed(7)
    num_src, num_dst = 30, 11
    edge_index = torch.stack([torch.randint(0, num_src, (90,), generator=g),
                              torch.randint(0, num_dst, (90,), generator=g)]).to(device)
    x = torch.randn(num_src, 20, generator=g)
    grad_out, grad_root = torch.randn(num_dst, 20, generator=g), torch.randn(num_dst, 20, generator=g)
    results = []
    for with_root in (True, False):
        leaf = x.clone().to(device).requires_grad_()
        h = leaf * 2  # not a leaf: as a hidden layer's output
        if with_root:
            out, root = aggregate(h, edge_index, num_dst, reduce, with_root=True)
            assert root._base is h and root.data_ptr() == h.data_ptr() and root.shape == (num_dst, 20)
        else:
            out, root = aggregate(h, edge_index, num_dst, reduce), h[:num_dst]
        loss = 0
        if use in ("both", "out"):
            loss = loss + (out * grad_out.to(device)).sum()
        if use in ("both", "root"):
            loss = loss + (root * grad_root.to(device)).sum()
        loss.backward()
        results.append((out.detach().cpu(), root.detach().cpu(), leaf.grad.cpu()))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert results[0][2][num_dst:].abs().sum() > 0 or use == "root"
    with pytest.raises(ValueError, match="with_root needs"):
        aggregate(x.to(device), edge_index, num_src + 1, with_root=True)


def test_grouping_is_shared_by_layers_and_renewed_on_change(device):
    # The layers of a model share one edge_index: sorted once, reused while
    # it lives unchanged; an in-place change regroups.
    g = torch.Generator().manual_seed(3)
    edge_index = torch.stack([torch.randint(0, 9, (40,), generator=g),
                              torch.randint(0, 5, (40,), generator=g)]).to(device)
    x = torch.randn(9, 4, generator=g).to(device)
    first = agg._grouping(edge_index, edge_index[0], edge_index[1], 9, 5)
    assert agg._grouping(edge_index, edge_index[0], edge_index[1], 9, 5) is first
    assert agg._grouping(edge_index, edge_index[0], edge_index[1], 9, 6) is not first  # other sizes
    edge_index[0] = edge_index[0].flip(0).clone()
    expected = scatter(x[edge_index[0]], edge_index[1], dim=0, dim_size=5, reduce="sum")
    torch.testing.assert_close(aggregate(x, edge_index, 5), expected)
    assert agg._grouping(edge_index, edge_index[0], edge_index[1], 9, 5) is not first
    key = id(edge_index)
    del edge_index
    assert key not in agg._GROUPINGS  # freed with its edge_index


def test_known_destination_order(device, monkeypatch):
    # A marked edge_index, its leading slices and a checked edge_index found
    # sorted skip the check (a host sync); another slice, an in-place change
    # or an unsorted edge_index do not, and the sums are right either way.
    g = torch.Generator().manual_seed(5)
    dst = torch.randint(0, 6, (50,), generator=g).sort().values
    edge_index = torch.stack([torch.randint(0, 9, (50,), generator=g), dst]).to(device)
    x = torch.randn(9, 4, generator=g).to(device)
    checks = []
    check = agg.Grouping.__init__

    def counting(self, dst, num_src, num_dst, presorted=None, src=None):
        checks.append(presorted is None)
        check(self, dst, num_src, num_dst, presorted, src)
    monkeypatch.setattr(agg.Grouping, "__init__", counting)

    def expected(e, num_dst):
        return scatter(x[e[0]], e[1], dim=0, dim_size=num_dst, reduce="mean")

    assert agg.mark_sorted_by_dst(edge_index) is edge_index
    head = edge_index[:, :30]
    for e in (edge_index, head, edge_index.narrow(1, 0, 12)):
        torch.testing.assert_close(aggregate(x, e, 6, "mean"), expected(e, 6))
    assert checks == [False, False, False]
    assert not agg._known_sorted(edge_index[:, 5:])  # not a leading slice
    edge_index[0, 0] = 1  # in place: the record is stale
    assert not agg._known_sorted(edge_index) and not agg._known_sorted(head)
    # checked and found sorted: recorded, so its leading slices skip the check
    checked = torch.stack([torch.randint(0, 9, (40,), generator=g),
                           torch.randint(0, 6, (40,), generator=g).sort().values]).to(device)
    aggregate(x, checked, 6)
    aggregate(x, checked[:, :20], 6)
    unsorted = checked.flip(1)
    torch.testing.assert_close(aggregate(x, unsorted, 6, "mean"), expected(unsorted, 6))
    assert not agg._known_sorted(unsorted)
    assert checks[3:] == [True, False, True]
    aggregate(x, checked[:, :12], 6, known_order=False)  # the record not trusted: checked
    assert checks[-1] is True
    with pytest.raises(TypeError, match="edge_index must be"):
        agg.mark_sorted_by_dst([[0, 1], [0, 0]])


def test_marked_views_of_a_flat_buffer_pass_their_mark_to_leading_slices():
    # a replayed batch's edge_index is a [2, E] view of a flat buffer (rows
    # then columns): its leading slices (trim_to_layer's) skip the check too
    flat = torch.zeros(40, dtype=torch.int64)
    edge_index = flat[:20].view(2, 10)
    edge_index[1] = torch.arange(10)
    agg.mark_sorted_by_dst(edge_index)
    assert agg._known_sorted(edge_index) and agg._known_sorted(edge_index[:, :4])
    assert not agg._known_sorted(flat[:8].view(2, 4))  # other strides: other memory
    assert not agg._known_sorted(flat[20:30].view(2, 5))
    flat[25] = 7  # the buffer written through itself: views share the counter
    assert not agg._known_sorted(edge_index[:, :4])
    again = flat[:20].view(2, 10)  # marked anew at the same address: the old record goes
    agg.mark_sorted_by_dst(again)
    del edge_index
    assert agg._known_sorted(again[:, :3])


def test_loader_batches_are_marked_sorted(device):
    from test_loader import random_data
    from tritongnn import NeighborLoader
    data = random_data()
    for batch in NeighborLoader(data, [4, 3], batch_size=64, device=device, seed=0):
        assert agg._known_sorted(batch.edge_index)
        dst = batch.edge_index[1]
        assert bool((dst[1:] >= dst[:-1]).all())  # what the mark promises


def test_aggregate_half_precision_accumulates_in_float32(device):
    x = torch.full((300, 4), 0.1, dtype=torch.bfloat16)
    edge_index = torch.stack([torch.arange(300), torch.zeros(300, dtype=torch.int64)])
    out = aggregate(x.to(device), edge_index.to(device), 1, "sum")
    assert out.dtype == torch.bfloat16
    assert abs(float(out[0, 0]) - 300 * float(x[0, 0])) < 0.5  # bfloat16 running sums would drift


def test_aggregate_bad_arguments():
    x = torch.randn(4, 2)
    with pytest.raises(ValueError, match="reduce"):
        aggregate(x, torch.zeros(2, 1, dtype=torch.int64), 1, "max")
    with pytest.raises(ValueError, match="edge_index"):
        aggregate(x, torch.zeros(3, 1, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match="edge_weight"):
        aggregate(x, torch.zeros(2, 3, dtype=torch.int64), 1, edge_weight=torch.ones(2))
    with pytest.raises(ValueError, match="x must be 2-D"):
        aggregate(x[0], torch.zeros(2, 3, dtype=torch.int64), 1)
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        aggregate(x.double(), torch.zeros(2, 3, dtype=torch.int64), 1)
    for num_dst in (-1, 2.5, "3", True):
        with pytest.raises(ValueError, match="num_dst"):
            aggregate(x, torch.zeros(2, 3, dtype=torch.int64), num_dst)
    # ids out of range, in the check of an edge_index of unknown order
    with pytest.raises(ValueError, match=r"edge_index\[1\] holds node id 9, outside \[0, 6\)"):
        aggregate(x, torch.tensor([[0, 1, 2], [0, 1, 9]]), 6)
    with pytest.raises(ValueError, match=r"edge_index\[0\] holds node id 1000000, outside \[0, 4\)"):
        aggregate(x, torch.tensor([[0, 1, 1000000], [0, 1, 1]]), 6)


def test_strided_edge_index_and_weights(device):
    # a transposed [E, 2] (the common torch.tensor(pairs).t()) and a column
    # of edge_attr as edge_weight: the kernels read rows of stride 1
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 4, generator=g).to(device)
    # the views made on the device (.to() of a view that is not dense copies it dense)
    edge_index = torch.tensor([[1, 0], [2, 0], [3, 1], [4, 2], [5, 2]]).to(device).t()
    weight = torch.rand(5, 2, generator=g).to(device)[:, 0]
    assert not edge_index[0].is_contiguous() and not weight.is_contiguous()
    for w in (None, weight):
        expected = PyGSimpleConv("sum")(x, edge_index, w)
        torch.testing.assert_close(SimpleConv("sum")(x, edge_index, w), expected)


def test_layers_leave_what_the_kernel_does_not_take_to_pyg():
    # float64 (the kernels accumulate in float32), int32 ids, [E, 1]
    # weights: PyG's own propagate, with its results; a size that does not
    # match x: PyG's error
    torch.manual_seed(0)
    x = torch.randn(50, 8, dtype=torch.float64)
    edge_index = torch.randint(0, 50, (2, 400))
    torch.testing.assert_close(SimpleConv("sum")(x, edge_index), PyGSimpleConv("sum")(x, edge_index))
    ours, theirs = pair("mean")
    x32 = x.float()[:, :1].expand(50, 12).contiguous()
    torch.testing.assert_close(ours(x32, edge_index.int()), theirs(x32, edge_index.int()))
    w = torch.rand(400, 1)
    torch.testing.assert_close(SimpleConv("sum")(x.float(), edge_index, w),
                               PyGSimpleConv("sum")(x.float(), edge_index, w))
    with pytest.raises(ValueError, match="expected size 3"):
        ours((x32, x32[:1]), torch.tensor([[0, 1, 2, 3], [0, 1, 2, 2]]), size=(50, 3))


# The layers' own tests: PyG's contract, on the CPU through the reference
# aggregation (the kernel is tested above), compiled on the GPU.
def pair(aggr, **kwargs):
    torch.manual_seed(0)
    ours = SAGEConv(12, 7, aggr=aggr, **kwargs)
    theirs = PyGSAGEConv(12, 7, aggr=aggr, **kwargs)
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def assert_same_layer(ours, theirs, device, seed, with_weight=False):
    """Both layers on one random graph: the same outputs, and the same
    gradients to x (and edge weights) and to every parameter."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(40, 12, generator=g)
    edge_index = torch.randint(0, 40, (2, 150), generator=g)
    edge_weight = torch.rand(150, generator=g) if with_weight else None
    outs, grads = [], []
    with reference_on_cpu():
        for layer in (ours.to(device), theirs.to(device)):
            leaves = [x.clone().to(device).requires_grad_()]
            if with_weight:
                leaves.append(edge_weight.clone().to(device).requires_grad_())
            out = layer(leaves[0], edge_index.to(device), *leaves[1:])
            out.square().sum().backward()
            outs.append(out.detach().cpu())
            grads.append([t.grad.cpu() for t in leaves] + [p.grad.cpu() for p in layer.parameters()])
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-5)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("aggr", ["mean", "sum"])
@pytest.mark.parametrize("kwargs", [{}, {"root_weight": False}, {"normalize": True}, {"project": True}])
def test_sageconv_is_a_drop_in(device, aggr, kwargs):
    assert_same_layer(*pair(aggr, **kwargs), device, seed=3)


@pytest.mark.parametrize("kwargs", [{}, {"improved": True}, {"add_self_loops": False},
                                    {"normalize": False}])
def test_gcnconv_is_a_drop_in(device, kwargs):
    torch.manual_seed(0)
    ours, theirs = GCNConv(12, 7, **kwargs), PyGGCNConv(12, 7, **kwargs)
    theirs.load_state_dict(ours.state_dict())
    assert_same_layer(ours, theirs, device, seed=4, with_weight=True)


@pytest.mark.parametrize("improved", [False, True])
@pytest.mark.parametrize("with_weight", [False, True])
def test_gcnconv_keeps_edge_index_and_adds_the_loops_itself(device, monkeypatch, improved, with_weight):
    # the normalised layer aggregates over the edges as given (no loops
    # appended, no resort): existing self loops, repeated ones included,
    # and nodes without edges give PyG's outputs and gradients
    from tritongnn.nn import conv
    seen = []
    real = conv.aggregate
    monkeypatch.setattr(conv, "aggregate", lambda x, ei, *a, **k: seen.append(ei) or real(x, ei, *a, **k))
    g = torch.Generator().manual_seed(9)
    edge_index = torch.randint(0, 30, (2, 120), generator=g)  # nodes 30..39: no edges
    loops = torch.tensor([[3, 3, 7, 12], [3, 3, 7, 12]])  # node 3's loop twice
    edge_index = torch.cat([edge_index, loops], 1)
    weight = torch.rand(edge_index.size(1), generator=g)
    weight[-4:-2] = 0.5  # node 3's two loops alike: the one kept is PyG's either way
    x = torch.randn(40, 12, generator=g)
    torch.manual_seed(0)
    ours, theirs = GCNConv(12, 7, improved=improved), PyGGCNConv(12, 7, improved=improved)
    theirs.load_state_dict(ours.state_dict())
    results = []
    for layer in (ours.to(device), theirs.to(device)):
        leaves = [x.clone().to(device).requires_grad_()] + \
            ([weight.clone().to(device).requires_grad_()] if with_weight else [])
        with reference_on_cpu():
            out = layer(leaves[0], edge_index.to(device), *leaves[1:])
        out.square().sum().backward()
        results.append([out.detach().cpu()] + [t.grad.cpu() for t in leaves] +
                       [p.grad.cpu() for p in layer.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert len(seen) == 1 and seen[0].shape == edge_index.shape  # the edges as given


@pytest.mark.parametrize("channels, x_grad, first", [
    ((12, 7), True, False),   # 12 x 3 columns aggregated against 7 x 3: PyG's order
    ((12, 7), False, True),   # input features: no gradient through the aggregation
    ((7, 12), True, True),    # narrower in than out
    ((40, 7), False, False),  # 40 columns forward against 7 x 3
])
@pytest.mark.parametrize("with_weight", [False, True])
def test_gcnconv_aggregates_in_the_cheaper_order(device, monkeypatch, channels, x_grad, first, with_weight):
    # (A x) W or A (x W), whichever moves fewer columns through the
    # aggregation: PyG's outputs and gradients either way
    from tritongnn.nn import conv
    widths = []
    real = conv.aggregate
    monkeypatch.setattr(conv, "aggregate", lambda x, *a, **k: widths.append(x.size(1)) or real(x, *a, **k))
    g = torch.Generator().manual_seed(5)
    x = torch.randn(40, channels[0], generator=g)
    edge_index = torch.randint(0, 40, (2, 150), generator=g)
    # one self loop a node: of repeated ones with other weights, which one
    # gcn_norm keeps is not defined on a GPU (nor which one ours keeps)
    edge_index = torch.cat([edge_index[:, edge_index[0] != edge_index[1]], torch.tensor([[4, 9], [4, 9]])], 1)
    weight = torch.rand(edge_index.size(1), generator=g)
    torch.manual_seed(0)
    ours, theirs = GCNConv(*channels), PyGGCNConv(*channels)
    theirs.load_state_dict(ours.state_dict())
    results = []
    for layer in (ours.to(device), theirs.to(device)):
        leaf = x.clone().to(device).requires_grad_(x_grad)
        with reference_on_cpu():
            out = layer(leaf, edge_index.to(device), weight.to(device) if with_weight else None)
        out.square().sum().backward()
        results.append([out.detach().cpu()] + ([leaf.grad.cpu()] if x_grad else []) +
                       [p.grad.cpu() for p in layer.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert widths == [channels[0] if first else channels[1]]


def test_gcnconv_takes_the_pairs_of_trimming():
    # (x, x[:k]), as TrimToDestinations hands it: PyG's output rows 0..k-1
    # and its gradients, in either order; a pair that is not x's leading
    # rows is PyG's to refuse
    g = torch.Generator().manual_seed(6)
    x = torch.randn(30, 12, generator=g)
    edge_index = torch.stack([torch.randint(0, 30, (90,), generator=g), torch.randint(0, 11, (90,), generator=g)])
    edge_index = torch.cat([edge_index, torch.tensor([[3], [3]])], 1)
    torch.manual_seed(0)
    ours, theirs = GCNConv(12, 7), PyGGCNConv(12, 7)
    theirs.load_state_dict(ours.state_dict())
    for x_grad in (False, True):
        results = []
        for layer in (ours, theirs):
            leaf = x.clone().requires_grad_(x_grad)
            h = leaf * 2 if x_grad else leaf
            with reference_on_cpu():
                out = layer((h, h[:11]), edge_index) if layer is ours else layer(h, edge_index)[:11]
            assert out.shape == (11, 7)
            out.square().sum().backward()
            results.append([out.detach()] + ([leaf.grad] if x_grad else []) +
                           [p.grad.clone() for p in layer.parameters()])
            layer.zero_grad()
        for a, b in zip(*results):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    for bad in ((x, x[5:16]), (x, x[:11].clone()), (x, x[:11], x)):
        with pytest.raises(ValueError, match="bipartite"), reference_on_cpu():
            ours(bad, edge_index)
    leaf = x.clone().requires_grad_()
    with pytest.raises(ValueError, match="bipartite"), reference_on_cpu():
        ours((leaf, leaf.detach()[:11]), edge_index)  # its gradient would not reach leaf


def test_fused_forwards_refuse_a_bad_edge_index():
    # the layers' own forwards make PyG's checks first: a clear ValueError
    x = torch.randn(5, 4)
    for layer in (GCNConv(4, 3), SAGEConv(4, 3)):
        with pytest.raises(ValueError, match="'edge_index' to have size '2'"), reference_on_cpu():
            layer(x, torch.zeros(3, 4, dtype=torch.int64))


class _Scaled(torch.nn.Module):  # SimpleConv has no parameters: give the test one
    def __init__(self, conv):
        super().__init__()
        self.conv, self.lin = conv, torch.nn.Linear(12, 7)

    def forward(self, x, edge_index, edge_weight=None):
        return self.lin(self.conv(x, edge_index, edge_weight))


@pytest.mark.parametrize("aggr", ["mean", "sum"])
def test_simpleconv_is_a_drop_in(device, aggr):
    torch.manual_seed(0)
    ours, theirs = _Scaled(SimpleConv(aggr)), _Scaled(PyGSimpleConv(aggr))
    theirs.load_state_dict(ours.state_dict())
    assert_same_layer(ours, theirs, device, seed=5, with_weight=True)


@reference_on_cpu()
def test_sageconv_bipartite_and_fallback():
    ours, theirs = pair("mean")
    x_src, x_dst = torch.randn(30, 12), torch.randn(9, 12)
    edge_index = torch.stack([torch.randint(0, 30, (80,)), torch.randint(0, 9, (80,))])
    torch.testing.assert_close(ours((x_src, x_dst), edge_index), theirs((x_src, x_dst), edge_index))
    torch.testing.assert_close(ours((x_src, None), edge_index, size=(30, 9)),
                               theirs((x_src, None), edge_index, size=(30, 9)))
    ours_max, theirs_max = pair("max")  # not the kernel's: PyG's own path
    x = torch.randn(30, 12)
    ei = torch.randint(0, 30, (2, 60))
    torch.testing.assert_close(ours_max(x, ei), theirs_max(x, ei))


@pytest.mark.parametrize("fanouts, layers", [([4, 3], 2), ([4, 3, 2], 3), ([4, 3, 2], 2)])
def test_graphsage_with_trimmed_layers_matches_pyg(fanouts, layers):
    # the loader's batches, PyG's layer-wise trimming: the seeds' outputs and
    # every gradient are PyG's, though each of our layers computes only the
    # rows a later layer reads (TrimToDestinations), also with more hops
    # than layers
    from test_loader import random_data
    from tritongnn import NeighborLoader
    from tritongnn.nn.conv import TrimToDestinations
    data = random_data()
    with reference_on_cpu():
        batch = next(iter(NeighborLoader(data, fanouts, batch_size=16, seed=0, device="cpu")))
    torch.manual_seed(0)
    ours = GraphSAGE(data.num_features, 16, num_layers=layers, out_channels=5)
    theirs = PyGGraphSAGE(data.num_features, 16, num_layers=layers, out_channels=5)
    assert all(isinstance(conv, SAGEConv) for conv in ours.convs)
    assert isinstance(ours._trim, TrimToDestinations)
    with reference_on_cpu():
        assert_trimmed_model_matches(ours, theirs, batch, len(fanouts), layers)
    kwargs = dict(num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                  num_sampled_edges_per_hop=batch.num_sampled_edges)
    # untrimmed, and with a normalisation that sees every row: PyG's trimming
    with reference_on_cpu():
        a = ours(batch.x, batch.edge_index)[:batch.batch_size]
    torch.testing.assert_close(a, theirs(batch.x, batch.edge_index)[:batch.batch_size], rtol=1e-4, atol=1e-5)
    # one count list without the other: PyG's error
    with pytest.raises(ValueError, match="num_sampled_edges_per_hop"), reference_on_cpu():
        ours(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes)
    deeper = GraphSAGE(data.num_features, 16, num_layers=len(fanouts) + 1, out_channels=5)
    with pytest.raises(ValueError, match="num_sampled_nodes_per_hop holds"), reference_on_cpu():
        deeper(batch.x, batch.edge_index, **kwargs)  # more layers than hops: no silent empty output
    normed = GraphSAGE(data.num_features, 16, num_layers=layers, out_channels=5, norm="batch_norm")
    assert not isinstance(normed._trim, TrimToDestinations)
    normed_pyg = PyGGraphSAGE(data.num_features, 16, num_layers=layers, out_channels=5, norm="batch_norm")
    normed_pyg.load_state_dict(normed.state_dict())
    with reference_on_cpu():
        a = normed(batch.x, batch.edge_index, **kwargs)
    torch.testing.assert_close(a, normed_pyg(batch.x, batch.edge_index, **kwargs), rtol=1e-4, atol=1e-5)


def assert_trimmed_model_matches(ours, theirs, batch, hops, layers, grad_atol=1e-5):
    """``ours`` (trimmed to destinations) and ``theirs`` (PyG's, same weights)
    on one sampled batch: the output's rows (the nodes of the hops no layer
    reached), the seeds' outputs and every parameter's gradient."""
    theirs.load_state_dict(ours.state_dict())
    kwargs = dict(num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                  num_sampled_edges_per_hop=batch.num_sampled_edges)
    out = ours(batch.x, batch.edge_index, **kwargs)
    expected = theirs(batch.x, batch.edge_index, **kwargs)
    assert out.size(0) == sum(batch.num_sampled_nodes[:hops + 1 - layers])
    torch.testing.assert_close(out[:batch.batch_size], expected[:batch.batch_size], rtol=1e-4, atol=1e-5)
    grad = torch.randn(batch.batch_size, out.size(1), device=out.device)
    out[:batch.batch_size].backward(grad)
    expected[:batch.batch_size].backward(grad)
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=grad_atol, msg=name)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("fanouts, layers", [([4, 3], 2), ([4, 3, 2], 3), ([4, 3, 2], 2)])
@pytest.mark.parametrize("model", ["GraphSAGE", "GCN", "GAT"])
def test_trimmed_models_match_pyg_on_the_gpu(fanouts, layers, model):
    # the same, compiled: the aggregation kernels on bipartite layers, on a GPU
    from test_loader import random_data
    from torch_geometric import nn as pyg_nn
    from tritongnn import NeighborLoader
    from tritongnn import nn as our_nn
    data = random_data(num_nodes=3000, num_edges=60000)
    batch = next(iter(NeighborLoader(data, fanouts, batch_size=256, seed=0, device="cuda")))
    torch.manual_seed(0)
    kwargs = dict(heads=4) if model == "GAT" else {}
    ours = getattr(our_nn, model)(data.num_features, 32, num_layers=layers, out_channels=5, **kwargs).cuda()
    theirs = getattr(pyg_nn, model)(data.num_features, 32, num_layers=layers, out_channels=5, **kwargs).cuda()
    assert torch.get_float32_matmul_precision() == "highest"  # float32 against float32
    assert_trimmed_model_matches(ours, theirs, batch, len(fanouts), layers, grad_atol=1e-4)


@pytest.mark.parametrize("fanouts, layers", [([4, 3], 2), ([4, 3, 2], 3), ([4, 3, 2], 2)])
def test_gcn_with_trimmed_layers_matches_pyg(fanouts, layers):
    # GCN trims to destinations too: the seeds' outputs and every gradient
    # are PyG's (degrees over each trimmed layer's edges, as PyG counts them)
    from test_loader import random_data
    from tritongnn import NeighborLoader
    from torch_geometric.nn import GCN as PyGGCN
    from tritongnn.nn import GCN
    from tritongnn.nn.conv import TrimToDestinations
    data = random_data()
    with reference_on_cpu():
        batch = next(iter(NeighborLoader(data, fanouts, batch_size=16, seed=0, device="cpu")))
    torch.manual_seed(0)
    ours, theirs = GCN(data.num_features, 16, num_layers=layers, out_channels=5), \
        PyGGCN(data.num_features, 16, num_layers=layers, out_channels=5)
    assert all(isinstance(conv, GCNConv) for conv in ours.convs)
    assert isinstance(ours._trim, TrimToDestinations)
    with reference_on_cpu():
        assert_trimmed_model_matches(ours, theirs, batch, len(fanouts), layers)
    with reference_on_cpu():  # untrimmed
        a = ours(batch.x, batch.edge_index)[:batch.batch_size]
    torch.testing.assert_close(a, theirs(batch.x, batch.edge_index)[:batch.batch_size], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make_dst", ["slice", "detached", "copy", "changed", "view_of_view"])
def test_sageconv_root_fusion_only_for_true_leading_rows(monkeypatch, make_dst):
    # the fused root (aggregate's with_root) only where x_dst is a slice of
    # x_src's leading rows in memory and in autograd (also after an in-place
    # change of x_src: a view follows its base); a detached or copied x_dst
    # takes the plain path; the outputs and gradients are PyG's either way
    from tritongnn.nn import conv
    calls = []
    real = conv.aggregate
    monkeypatch.setattr(conv, "aggregate", lambda *a, **k: calls.append(k.get("with_root", False)) or real(*a, **k))
    ours, theirs = pair("mean")
    g = torch.Generator().manual_seed(11)
    x = torch.randn(30, 12, generator=g)
    edge_index = torch.stack([torch.randint(0, 20, (80,), generator=g), torch.randint(0, 9, (80,), generator=g)])
    grads = []
    for layer in (ours, theirs):
        leaf = x.clone().requires_grad_()
        h = leaf * 3
        if make_dst == "slice":
            pair_ = (h, h[:9])
        elif make_dst == "detached":
            pair_ = (h, h.detach()[:9])
        elif make_dst == "copy":
            pair_ = (h, h[:9].clone())
        elif make_dst == "changed":
            h = h * 1
            dst = h[:9]
            h.mul_(2)  # dst sees the change: still h's leading rows
            pair_ = (h, dst)
        else:
            part = h[:20]
            pair_ = (part, part[:9])
        with reference_on_cpu():
            out = layer(pair_, edge_index)
        out.square().sum().backward()
        grads.append((out.detach(), leaf.grad, [p.grad for p in layer.parameters()]))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-5, atol=1e-5)
    for a, b in zip(grads[0][2], grads[1][2]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert calls == [make_dst in ("slice", "changed", "view_of_view")]


def test_layers_route_through_the_kernel(monkeypatch):
    # the drop-ins really aggregate with kernels.aggregate (not PyG's path),
    # except where they must fall back
    from tritongnn.nn import conv
    calls = []
    real = conv.aggregate
    monkeypatch.setattr(conv, "aggregate", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    x = torch.randn(20, 12)
    edge_index = torch.randint(0, 20, (2, 50))
    with reference_on_cpu():
        SAGEConv(12, 4)(x, edge_index)
        SAGEConv(12, 4, aggr="sum")(x, edge_index)
        GCNConv(12, 4)(x, edge_index)
        SimpleConv("mean")(x, edge_index)
        SAGEConv(12, 4, aggr="max")(x, edge_index)  # falls back
    assert calls == ["mean", "sum", "sum", "mean"]


def test_sageconv_under_autocast(monkeypatch):
    # autocast takes PyG's forward (still the kernel's propagate): the same
    # outputs as PyG's layer
    from tritongnn.nn import conv
    calls = []
    real = conv.aggregate
    monkeypatch.setattr(conv, "aggregate", lambda *a, **k: calls.append(k.get("with_root", False)) or real(*a, **k))
    ours, theirs = pair("mean")
    x = torch.randn(20, 12, requires_grad=True)
    edge_index = torch.randint(0, 20, (2, 50))
    with reference_on_cpu():
        fused = ours(x * 1, edge_index)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cast = ours(x, edge_index)
            expected = theirs(x, edge_index)
    assert calls == [True, False]
    torch.testing.assert_close(fused, theirs(x * 1, edge_index), rtol=1e-4, atol=1e-4)
    assert cast.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(cast, expected)
