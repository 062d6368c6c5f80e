"""CSC construction and validation."""
import pytest
import torch

from tritongnn import CSCGraph


def test_from_edge_index_groups_sources_by_target():
    edge_index = torch.tensor([[0, 2, 1, 2, 3, 0], [1, 1, 0, 3, 3, 1]])
    g = CSCGraph.from_edge_index(edge_index, 5, keep_edge_perm=True)
    assert g.indptr.tolist() == [0, 1, 4, 4, 6, 6]
    assert g.indptr.dtype == torch.int64 and g.indices.dtype == torch.int32
    # stable: parallel edges keep their input order
    assert g.indices.tolist() == [1, 0, 2, 0, 2, 3]
    assert torch.equal(edge_index[0, g.edge_perm], g.indices.long())
    assert torch.equal(edge_index[1, g.edge_perm], torch.repeat_interleave(torch.arange(5), g.degree()))


def test_from_csr_transposes():
    # CSR by source: 0 -> {1, 2}, 2 -> {0}
    g = CSCGraph.from_csr(torch.tensor([0, 2, 2, 3]), torch.tensor([1, 2, 0]))
    assert g.indptr.tolist() == [0, 1, 2, 3] and g.indices.tolist() == [2, 0, 0]


def test_input_not_modified():
    edge_index = torch.tensor([[3, 1, 2], [0, 0, 1]])
    before = edge_index.clone()
    CSCGraph.from_edge_index(edge_index, 4)
    assert torch.equal(edge_index, before)


@pytest.mark.parametrize("indptr, indices, match", [
    ([1, 2], [0], r"indptr\[0\] must be 0"),
    ([0, 2], [0], r"indptr\[-1\] must equal"),
    ([0, 2, 1, 2], [0, 0], "non-decreasing"),
    ([0, 1, 2], [0, 5], "outside"),
    ([0, 1, 2], [0, -1], "outside"),
])
def test_bad_csc(indptr, indices, match):
    with pytest.raises(ValueError, match=match):
        CSCGraph(torch.tensor(indptr), torch.tensor(indices))


def test_bad_types():
    with pytest.raises(TypeError, match="indices"):
        CSCGraph(torch.tensor([0, 1]), torch.tensor([0.0]))
    with pytest.raises(TypeError, match="edge_index"):
        CSCGraph.from_edge_index([[0], [1]], 2)
    with pytest.raises(ValueError, match=r"shape \[2, E\]"):
        CSCGraph.from_edge_index(torch.zeros(3, 4, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="outside"):
        CSCGraph.from_edge_index(torch.tensor([[0], [7]]), 3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_placement():
    g = CSCGraph.from_edge_index(torch.tensor([[0, 1], [1, 0]]), 2)
    assert g.pin_memory().is_pinned and g.to("cuda").device.type == "cuda"
