"""Node and edge attributes that are not tensors, as PyG 2.8's
``filter_data`` treats them: lists and tuples of node or edge length
refused (PyG's loader raises on them), other lengths copied; TensorFrames
(here a stand-in: torch_frame is not installed) sliced by ``n_id`` /
``e_id``. PyG's own ``NodeLoader`` is the reference, made to see the
stand-in as its ``TensorFrame``."""
import pytest
import torch
import torch_geometric.data.storage
import torch_geometric.loader.utils
from torch_geometric.loader import NodeLoader

from tritongnn import NeighborLoader, PyGSampler

from test_loader import assert_same_batches
from test_pipeline import replaying
from test_pyg_parity import small_data  # 60 nodes, 400 edges, an edge_attr: batches carry e_id


class Frame:
    """A TensorFrame stand-in: columns of equal rows, indexed by a tensor of
    rows (``torch_frame.TensorFrame``'s ``num_rows``, ``__getitem__``,
    ``device``, ``to``, ``__eq__``); counts what is asked of it."""

    def __init__(self, columns: dict, calls=None):
        self.columns, self.calls = columns, calls if calls is not None else []

    @property
    def num_rows(self) -> int:
        return len(next(iter(self.columns.values())))

    def __len__(self) -> int:
        return self.num_rows

    @property
    def device(self):
        return next(iter(self.columns.values())).device

    def __getitem__(self, index):
        self.calls.append(("getitem", index.dtype, index.device.type))
        return Frame({key: value[index] for key, value in self.columns.items()})

    def to(self, *args, **kwargs):
        self.calls.append(("to",))
        return Frame({key: value.to(*args, **kwargs) for key, value in self.columns.items()})

    def __eq__(self, other):
        return isinstance(other, Frame) and self.columns.keys() == other.columns.keys() and all(
            torch.equal(value.cpu(), other.columns[key].cpu()) for key, value in self.columns.items())


def frame_of(rows, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Frame({"numerical": torch.randn(rows, 3, generator=g), "categorical": torch.randint(0, 5, (rows, 2),
                                                                                               generator=g)})


@pytest.fixture
def pyg_sees_frames(monkeypatch):
    # PyG tells a frame by isinstance(value, TensorFrame): its placeholder
    # class where torch_frame is missing, here the stand-in
    monkeypatch.setattr(torch_geometric.data.storage, "TensorFrame", Frame)
    monkeypatch.setattr(torch_geometric.loader.utils, "TensorFrame", Frame)


def pyg_loader(data, device, **kwargs):
    return NodeLoader(data, PyGSampler(data, [3, 2], device=device, seed=7), **kwargs)


def test_frames_sliced_as_pyg_slices_a_tensorframe(device, pyg_sees_frames):
    data = small_data()
    data.table = frame_of(60)
    data.edge_table = frame_of(400, seed=1)
    data.graph_table = frame_of(7, seed=2)  # neither length: copied whole
    ours = NeighborLoader(data, [3, 2], input_nodes=data.train_mask, batch_size=8, device=device, seed=7)
    assert not ours._replays_batches()
    assert_same_batches(ours, pyg_loader(data, device, input_nodes=data.train_mask, batch_size=8))
    for batch in ours:
        assert batch.table == data.table[batch.n_id.cpu()] and batch.table.device == batch.x.device
        assert batch.edge_table == data.edge_table[batch.e_id.cpu()]
        assert batch.graph_table is data.graph_table


@pytest.mark.parametrize("tiers", [dict(), dict(placement="host", cache_budget=4 * 5 * 20, profile_epochs=1),
                                   dict(super_batch=3), dict(reorder_group=2)],
                         ids=["device", "cache", "super-batch", "reorder"])
def test_frames_through_the_pipelines(tiers):
    # a cache renames nodes internally: frames are sliced by the user's n_id
    data = small_data()
    data.table = frame_of(60)
    loader = replaying(NeighborLoader(data, [3, 2], batch_size=8, shuffle=True, device="cpu", seed=3, **tiers))
    assert not loader._replays_batches()
    count = 0
    for batch in loader:
        assert batch.table == data.table[batch.n_id] and torch.equal(batch.x, data.x[batch.n_id])
        count += 1
    assert count == len(loader)


def test_frames_not_modified_nor_moved_whole():
    data = small_data()
    data.table = frame_of(60)
    kept = Frame(dict(data.table.columns))
    batch = NeighborLoader(data, [3, 2], batch_size=8, device="cpu", seed=3)([5, 1])
    assert batch.table == data.table[batch.n_id] and data.table == kept
    # the user's frame is only indexed (by int64 rows on its own device), never converted
    assert set(data.table.calls) == {("getitem", torch.int64, "cpu")}


@pytest.mark.parametrize("key, value, what", [
    ("names", [f"node {i}" for i in range(60)], "node"), ("tags", tuple(range(60)), "node"),
    ("edge_names", ["e"] * 400, "edge")])
def test_sequences_of_node_or_edge_length_raise_as_pyg(key, value, what):
    data = small_data()
    data[key] = value
    assert data.is_node_attr(key) if what == "node" else data.is_edge_attr(key)  # what PyG takes it for
    with pytest.raises(ValueError, match=f"data.{key} is a {type(value).__name__} of {len(value)} entries, "
                                         f"one a {what}"):
        NeighborLoader(data, [3, 2], batch_size=8, device="cpu")
    with pytest.raises(ValueError, match="Encountered invalid feature tensor type"):  # PyG, at its first batch
        next(iter(pyg_loader(data, "cpu", batch_size=8)))


def test_sequences_of_other_lengths_are_copied_as_pyg(device):
    data = small_data()
    data.classes = ["a", "b", "c"]
    data.meta = ("graph", 1)
    ours = NeighborLoader(data, [3, 2], batch_size=8, device=device, seed=7)
    assert_same_batches(ours, pyg_loader(data, device, batch_size=8))
    batch = ours([0])
    assert batch.classes == ["a", "b", "c"] and batch.meta == ("graph", 1)
