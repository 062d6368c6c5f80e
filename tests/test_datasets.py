"""Tests for ``tritongnn.datasets``: npz loading, validation and generators (CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import MLP, GraphSAGE
from torch_geometric.utils import degree

from tritongnn.datasets import chung_lu, class_features, cora, load_npz, rmat
from tritongnn.datasets import synthetic

# The repository is cloned with shared/ beside it.
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_shared_data = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason=f"{SHARED_DATA} not found (shared/ beside the checkout)"
)

# Small graphs that take milliseconds on a CPU; rmat(10, .) has 1,024 nodes.
GENERATORS = {
    "chung_lu": lambda **kw: chung_lu(1000, 10_000, device="cpu", **kw),
    "rmat": lambda **kw: rmat(10, 16 * 1024, device="cpu", **kw),
}


def _assert_split(data, sizes):
    """Masks are [N] bool, disjoint, with ``sizes`` = (train, val, test) nodes."""
    masks = [data.train_mask, data.val_mask, data.test_mask]
    for mask, size in zip(masks, sizes):
        assert mask.dtype == torch.bool and mask.shape == (data.num_nodes,)
        assert int(mask.sum()) == size
    assert int(sum(m.to(torch.int64) for m in masks).max()) <= 1, "masks overlap"


def _fraction_sizes(num_nodes, fractions=(0.6, 0.2, 0.2)):
    return [int(fraction * num_nodes) for fraction in fractions]


# ----------------------------------------------------------------------------- npz


def test_cora_matches_planetoid():
    data = cora()
    assert data.num_nodes == 2708
    assert data.edge_index.shape == (2, 10556) and data.edge_index.dtype == torch.int64
    assert data.x.shape == (2708, 1433) and data.x.dtype == torch.float32
    assert data.y.dtype == torch.int64 and set(data.y.tolist()) == set(range(7))
    _assert_split(data, (140, 500, 1000))
    # Cora is stored symmetric: every edge has its reverse.
    forward = set(map(tuple, data.edge_index.t().tolist()))
    assert forward == {(v, u) for u, v in forward}


@needs_shared_data
@pytest.mark.parametrize(
    "name, num_nodes, num_edges, num_features, num_classes, split",
    [
        ("twitch_de", 9498, 306_276, 3170, 2, (5698, 1900, 1900)),
        ("cnr2000", 325_557, 3_216_152, None, None, None),
    ],
)
def test_load_npz_shared(name, num_nodes, num_edges, num_features, num_classes, split):
    data = load_npz(SHARED_DATA / f"{name}.npz")
    assert data.num_nodes == num_nodes
    assert data.edge_index.shape == (2, num_edges) and data.edge_index.dtype == torch.int64
    assert 0 <= int(data.edge_index.min()) and int(data.edge_index.max()) < num_nodes
    if num_features is None:
        assert data.x is None and data.y is None
        # README: max in-degree 18,235; checks that edge_index[1] is the CSR column.
        assert int(torch.bincount(data.edge_index[1]).max()) == 18_235
    else:
        assert data.x.shape == (num_nodes, num_features) and data.x.dtype == torch.float32
        assert int(data.y.max()) + 1 == num_classes
        _assert_split(data, split)


def _write(path, **arrays):
    np.savez(path, **arrays)
    return path


def _small_graph():
    """CSR of 0 -> {1, 2}, 1 -> {}, 2 -> {0}, with uint8 features and labels."""
    return dict(
        indptr=np.array([0, 2, 2, 3], dtype=np.int64),
        indices=np.array([1, 2, 0], dtype=np.int64),
        x=np.array([[1, 0], [0, 1], [1, 1]], dtype=np.uint8),
        y=np.array([0, -1, 1], dtype=np.int64),
        train_mask=np.array([True, False, False]),
        val_mask=np.array([False, True, False]),
        test_mask=np.array([False, False, True]),
    )


def test_load_npz_builds_row_col(tmp_path):
    data = load_npz(_write(tmp_path / "g.npz", **_small_graph()))
    assert data.edge_index.tolist() == [[0, 0, 2], [1, 2, 0]]
    assert data.x.dtype == torch.float32 and data.x.tolist() == [[1, 0], [0, 1], [1, 1]]
    assert data.y.tolist() == [0, -1, 1]
    assert data.train_mask.tolist() == [True, False, False]


def test_load_npz_optional_keys_absent(tmp_path):
    graph = _small_graph()
    data = load_npz(_write(tmp_path / "g.npz", indptr=graph["indptr"], indices=graph["indices"]))
    assert data.num_nodes == 3 and set(data.keys()) == {"edge_index", "num_nodes"}


@pytest.mark.parametrize(
    "change, key",
    [
        (dict(indptr=None), "indptr"),
        (dict(indices=None), "indices"),
        (dict(indptr=np.array([1, 2, 2, 3])), "indptr"),  # does not start at 0
        (dict(indptr=np.array([0, 2, 1, 3])), "indptr"),  # decreasing
        (dict(indptr=np.array([0, 2, 2, 2])), "indptr"),  # last != len(indices)
        (dict(indptr=np.array([[0, 2, 2, 3]])), "indptr"),  # 2-D
        (dict(indices=np.array([1.0, 2.0, 0.0])), "indices"),  # not integer
        (dict(indices=np.array([1, 3, 0])), "indices"),  # id == num_nodes
        (dict(indices=np.array([1, -1, 0])), "indices"),  # negative id
        (dict(x=np.zeros((4, 2), dtype=np.float32)), "x"),
        (dict(x=np.zeros(3, dtype=np.float32)), "x"),
        (dict(y=np.zeros(2, dtype=np.int64)), "y"),
        (dict(y=np.array([0, -2, 1])), "y"),
        (dict(y=np.array([0.0, 1.0, 1.0])), "y"),
        (dict(y=np.array([0, 2**63, 1], dtype=np.uint64)), "'y' holds 9223372036854775808, beyond int64"),
        (dict(train_mask=np.ones(4, dtype=bool)), "train_mask"),
        (dict(val_mask=np.ones(2, dtype=bool)), "val_mask"),
        (dict(test_mask=np.ones(3, dtype=np.int64)), "test_mask"),
    ],
)
def test_load_npz_rejects_malformed(tmp_path, change, key):
    graph = _small_graph()
    graph.update(change)
    path = _write(tmp_path / "bad.npz", **{k: v for k, v in graph.items() if v is not None})
    with pytest.raises(ValueError, match=key) as error:
        load_npz(path)
    assert "bad.npz" in str(error.value)


def test_load_npz_rejects_files_that_are_no_npz_archive(tmp_path):
    import zipfile
    np.save(tmp_path / "a.npy", np.arange(3))
    (tmp_path / "t.npz").write_text("hello")
    with zipfile.ZipFile(tmp_path / "raw.npz", "w") as archive:
        archive.writestr("indptr", b"abc")
    np.savez(tmp_path / "obj.npz", indptr=np.array([0, 1]), indices=np.array([0]),
             x=np.array([{}], dtype=object))
    for name, match in (("a.npy", "an .npy array, not an .npz archive"), ("t.npz", "not an .npz archive"),
                        ("raw.npz", "'indptr' is not a .npy array"), ("obj.npz", "not a plain array")):
        with pytest.raises(ValueError, match=match) as error:
            load_npz(tmp_path / name)
        assert name in str(error.value)


# ----------------------------------------------------------------------- generators


@pytest.mark.parametrize("name", GENERATORS)
def test_generator_shapes_and_dtypes(name):
    data = GENERATORS[name]()
    num_nodes = data.num_nodes
    assert num_nodes == (1000 if name == "chung_lu" else 1024)
    assert data.edge_index.dtype == torch.int64 and data.edge_index.shape[0] == 2
    assert 0 <= int(data.edge_index.min()) and int(data.edge_index.max()) < num_nodes
    assert data.x.shape == (num_nodes, 128) and data.x.dtype == torch.float32
    assert data.y.shape == (num_nodes,) and data.y.dtype == torch.int64
    assert 0 <= int(data.y.min()) and int(data.y.max()) < 16
    _assert_split(data, _fraction_sizes(num_nodes))


@pytest.mark.parametrize("name", GENERATORS)
def test_generator_deterministic_by_seed(name):
    first, again, other = (GENERATORS[name](seed=s) for s in (3, 3, 4))
    for key in ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(first[key], again[key]), key
    assert not torch.equal(first.edge_index, other.edge_index)
    assert not torch.equal(first.x, other.x)


@pytest.mark.parametrize("name", GENERATORS)
def test_generator_power_law_in_degree(name):
    data = GENERATORS[name]()
    in_degree = degree(data.edge_index[1], data.num_nodes)
    assert float(in_degree.max()) > 10 * float(in_degree.mean())


@pytest.mark.parametrize("name", GENERATORS)
def test_generator_options(name):
    data = GENERATORS[name](
        num_classes=3,
        num_features=5,
        dtype=torch.bfloat16,
        train_fraction=0.1,
        val_fraction=0.3,
        test_fraction=0.5,
    )
    assert data.x.shape == (data.num_nodes, 5) and data.x.dtype == torch.bfloat16
    assert int(data.y.max()) < 3
    _assert_split(data, _fraction_sizes(data.num_nodes, (0.1, 0.3, 0.5)))


@pytest.mark.parametrize("homophily", [0.0, 0.5, 1.0])
def test_chung_lu_homophily(homophily):
    num_classes = 4
    data = chung_lu(2000, 40_000, num_classes=num_classes, homophily=homophily, device="cpu")
    source, target = data.edge_index
    same = float((data.y[source] == data.y[target]).to(torch.float64).mean())
    # An edge not drawn within the class still lands in it with probability
    # about 1 / C (classes are uniform, so their weights are near equal).
    expected = homophily + (1 - homophily) / num_classes
    assert same == pytest.approx(expected, abs=0.02)


def test_chunked_generation(monkeypatch):
    """Chunk boundaries (not hit by small graphs) keep ids in range and rules exact."""
    monkeypatch.setattr(synthetic, "_CHUNK", 999)
    data = chung_lu(500, 5000, homophily=1.0, num_features=3, device="cpu")
    source, target = data.edge_index
    assert int(data.edge_index.min()) >= 0 and int(data.edge_index.max()) < 500
    assert torch.equal(data.y[source], data.y[target])
    data = rmat(8, 5000, num_features=3, device="cpu")
    assert int(data.edge_index.min()) >= 0 and int(data.edge_index.max()) < 256


@pytest.mark.parametrize(
    "quadrant, self_loops",
    [(dict(a=1.0, b=0.0, c=0.0, d=0.0), True), (dict(a=0.0, b=1.0, c=0.0, d=0.0), False)],
)
def test_rmat_single_quadrant(quadrant, self_loops):
    # All-a sends every edge to cell (0, 0), all-b to (0, N - 1), before the
    # id permutation: one distinct edge, a self-loop only for a.
    data = rmat(5, 100, device="cpu", **quadrant)
    distinct = torch.unique(data.edge_index, dim=1)
    assert distinct.shape[1] == 1
    assert bool(distinct[0, 0] == distinct[1, 0]) == self_loops


def test_rmat_self_loop_rate():
    # An edge is a self-loop iff every level picks a diagonal quadrant:
    # probability (a + d) ** scale, whatever the id permutation.
    scale, num_edges = 3, 200_000
    data = rmat(scale, num_edges, device="cpu", num_features=1)
    rate = float((data.edge_index[0] == data.edge_index[1]).to(torch.float64).mean())
    expected = (0.57 + 0.05) ** scale
    standard_error = (expected * (1 - expected) / num_edges) ** 0.5
    assert abs(rate - expected) < 5 * standard_error


def test_rmat_label_rule_matches_reference():
    generator = torch.Generator().manual_seed(0)
    num_nodes, num_classes = 300, 5
    edge_index = torch.randint(num_nodes, (2, 3000), generator=generator)
    latent = torch.randint(num_classes, (num_nodes,), generator=generator)
    y = synthetic._in_neighbour_labels(edge_index, latent, num_classes)

    source, target = edge_index.numpy()
    score = np.zeros((num_nodes, num_classes))
    np.add.at(score, (target, latent.numpy()[source]), 1.0)
    score[np.arange(num_nodes), latent.numpy()] += 1.5
    assert y.tolist() == score.argmax(axis=1).tolist()
    assert 0 < int((y != latent).sum()) < num_nodes  # both outcomes occur


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: chung_lu(0, 10, device="cpu"), "num_nodes"),
        (lambda: chung_lu(10, -1, device="cpu"), "num_edges"),
        (lambda: chung_lu(10, 10, num_classes=0, device="cpu"), "num_classes"),
        (lambda: chung_lu(10, 10, num_features=0, device="cpu"), "num_features"),
        (lambda: chung_lu(10, 10, homophily=1.5, device="cpu"), "homophily"),
        (lambda: chung_lu(10, 10, homophily=-0.1, device="cpu"), "homophily"),
        (lambda: chung_lu(10, 10, exponent=1.0, device="cpu"), "exponent"),
        (lambda: chung_lu(10, 10, signal=float("nan"), device="cpu"), "signal"),
        (lambda: chung_lu(10, 10, train_fraction=0.9, device="cpu"), "train_fraction"),
        (lambda: chung_lu(10, 10, val_fraction=-0.2, device="cpu"), "val_fraction"),
        (lambda: rmat(0, 10, device="cpu"), "scale"),
        (lambda: rmat(63, 10, device="cpu"), "scale"),
        (lambda: rmat(4, 0, device="cpu"), "num_edges"),
        (lambda: rmat(4, 10, a=0.5, device="cpu"), "a \\+ b \\+ c \\+ d"),
        (lambda: rmat(4, 10, a=1.2, b=-0.2, c=0.0, d=0.0, device="cpu"), "a must"),
        (lambda: rmat(4, 10, test_fraction=1.5, device="cpu"), "test_fraction"),
    ],
)
def test_generator_rejects_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: chung_lu(10.0, 10, device="cpu"), "num_nodes"),
        (lambda: rmat(True, 10, device="cpu"), "scale"),
        (lambda: chung_lu(10, 10, dtype=torch.int64, device="cpu"), "dtype"),
        (lambda: chung_lu(10, 10, seed=1.5, device="cpu"), "seed"),
        (lambda: rmat(4, 10, seed="1", device="cpu"), "seed"),
        (lambda: chung_lu(10, 10, homophily="0.5", device="cpu"), "homophily"),
        (lambda: chung_lu(10, 10, exponent="2", device="cpu"), "exponent"),
        (lambda: class_features([0, 1], 3, 4), "y must be a 1-D int64 tensor"),
    ],
)
def test_generator_rejects_bad_types(call, match):
    with pytest.raises(TypeError, match=match):
        call()


# ---------------------------------------------------------------- GNN beats MLP


def _test_accuracy(model, data, uses_graph, epochs=50):
    """Full-batch training with fixed settings; returns test accuracy."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def forward():
        return model(data.x, data.edge_index) if uses_graph else model(data.x)

    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(forward()[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        prediction = forward().argmax(dim=1)
    return float((prediction[data.test_mask] == data.y[data.test_mask]).float().mean())


def test_chung_lu_gnn_beats_mlp():
    """The generator's point: labels learnable from neighbours, not from x alone.

    Measured (seeds 0-2): GraphSAGE 0.95-0.98, MLP 0.36-0.41 test accuracy.
    """
    data = chung_lu(2000, 20_000, seed=0, device="cpu")
    num_classes = int(data.y.max()) + 1
    torch.manual_seed(0)
    sage = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=num_classes, dropout=0.5)
    sage_accuracy = _test_accuracy(sage, data, uses_graph=True)
    torch.manual_seed(0)
    mlp = MLP([data.num_features, 32, num_classes], dropout=0.5)
    mlp_accuracy = _test_accuracy(mlp, data, uses_graph=False)
    assert sage_accuracy >= mlp_accuracy + 0.3, (sage_accuracy, mlp_accuracy)
    assert sage_accuracy >= 0.8, sage_accuracy


def test_class_features_fill_out_and_follow_the_classes():
    # the features of a stored topology, written where the caller wants them
    # (a pinned host table on a GPU machine): same values into out or not,
    # and each class's rows centred on its own centroid
    y = torch.randint(0, 4, (3000,), generator=torch.Generator().manual_seed(0))
    x = synthetic.class_features(y, 4, 256, signal=4.0, seed=3)
    out = torch.full((3000, 256), float("nan"), dtype=torch.bfloat16)
    assert synthetic.class_features(y, 4, 256, signal=4.0, dtype=torch.bfloat16, seed=3, out=out) is out
    assert torch.equal(out, x.to(torch.bfloat16))
    means = torch.stack([x[y == c].mean(0) for c in range(4)])  # centroid (length ~4) + mean noise
    assert torch.allclose(means.norm(dim=1), torch.full((4,), 4.0), atol=0.6)
    assert not torch.equal(x, synthetic.class_features(y, 4, 256, signal=4.0, seed=4))
    with pytest.raises(ValueError, match="labels in"):
        synthetic.class_features(y, 3, 16)
    with pytest.raises(ValueError, match="out must be"):
        synthetic.class_features(y, 4, 16, out=torch.empty(3000, 8))
    with pytest.raises(TypeError, match="y must be"):
        synthetic.class_features(y.int(), 4, 16)
