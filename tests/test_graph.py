"""CSC construction and validation."""
import pytest
import torch
from hypothesis import given, strategies as st

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


@given(num_nodes=st.integers(1, 30), num_edges=st.integers(0, 80), seed=st.integers(0, 1000))
def test_from_edge_index_sorted_by_target_takes_no_sort_and_builds_the_same(num_nodes, num_edges, seed):
    # edges already grouped by target skip the sort (they are CSC order):
    # the same graph as from the same edges shuffled, with e_id their positions
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    edge_index = edge_index[:, torch.argsort(edge_index[1], stable=True)]
    shuffled = torch.randperm(num_edges, generator=g)
    sort, argsort = torch.sort, torch.argsort
    try:  # the grouped edges take no sort at all (a stable sort of them is arange too)
        torch.sort = torch.argsort = None
        fast = CSCGraph.from_edge_index(edge_index, num_nodes, keep_edge_perm=True)
    finally:
        torch.sort, torch.argsort = sort, argsort
    slow = CSCGraph.from_edge_index(edge_index[:, shuffled], num_nodes, keep_edge_perm=True)
    assert torch.equal(fast.indptr, slow.indptr) and torch.equal(fast.edge_perm, torch.arange(num_edges))
    for node in range(num_nodes):  # each list, up to the order of parallel edges
        a, b = fast.indptr[node], fast.indptr[node + 1]
        assert torch.equal(fast.indices[a:b].sort().values, slow.indices[a:b].sort().values)
    assert torch.equal(edge_index[0, fast.edge_perm], fast.indices.long())
    assert num_edges == 0 or fast.indices.data_ptr() != edge_index.data_ptr()
    ids32 = edge_index.int()
    as_int32 = CSCGraph.from_edge_index(ids32, num_nodes)  # int32 ids: still a copy, not a view
    assert torch.equal(as_int32.indices, fast.indices)
    assert num_edges == 0 or as_int32.indices.untyped_storage().data_ptr() != ids32.untyped_storage().data_ptr()


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


@given(num_nodes=st.integers(1, 40), num_edges=st.integers(0, 200), seed=st.integers(0, 2**16),
       keep=st.booleans())
def test_relabel_renames_nodes_and_keeps_rows(num_nodes, num_edges, seed, keep):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    graph = CSCGraph.from_edge_index(edge_index, num_nodes, keep_edge_perm=keep)
    order = torch.randperm(num_nodes, generator=g)
    new = graph.relabel(order)
    new._validate()
    new_id = torch.empty_like(order)
    new_id[order] = torch.arange(num_nodes)
    for i in range(num_nodes):  # row i of the new graph is row order[i] of the old, renamed, in order
        old_row = graph.indices[graph.indptr[order[i]]:graph.indptr[order[i] + 1]].long()
        assert torch.equal(new.indices[new.indptr[i]:new.indptr[i + 1]].long(), new_id[old_row])
    # edge_perm leads back to the user's edges: (src, dst) in new ids = renamed edge_index
    dst = torch.repeat_interleave(torch.arange(num_nodes), new.degree())
    if keep:
        e_id = new.edge_perm
        assert torch.equal(edge_index[0, e_id], order[new.indices.long()])
        assert torch.equal(edge_index[1, e_id], order[dst])
    else:  # edge ids are the old graph's CSC positions
        assert torch.equal(graph.indices[new.edge_perm].long(), order[new.indices.long()])
    # relabelling back by the inverse order gives the original graph
    back = new.relabel(new_id)
    assert torch.equal(back.indptr, graph.indptr) and torch.equal(back.indices, graph.indices)


@pytest.mark.parametrize("order,match", [(torch.tensor([0, 1]), "shape"), (torch.tensor([0, 0, 1]), "repeats"),
                                         (torch.tensor([0, 1, 3]), "outside"),
                                         (torch.tensor([0.0, 1.0, 2.0]), "integer")])
def test_relabel_rejects_non_permutations(order, match):
    graph = CSCGraph.from_edge_index(torch.tensor([[0, 1], [1, 2]]), 3)
    with pytest.raises((ValueError, TypeError), match=match):
        graph.relabel(order)


def test_ids_past_int32_are_checked_before_narrowing():
    # a cast to int32 first would wrap 2^32 + 1 to 1, inside the graph
    with pytest.raises(ValueError, match="node id 8589934594"):
        CSCGraph(torch.tensor([0, 1, 2, 2]), torch.tensor([2**32 + 1, 2**33 + 2]))
    assert CSCGraph(torch.tensor([0, 1, 2, 2]), torch.tensor([1, 2])).indices.dtype == torch.int32


def test_bad_edge_perm_and_negative_ids():
    with pytest.raises(ValueError, match="edge_perm holds edge id 7"):
        CSCGraph(torch.tensor([0, 1]), torch.tensor([0]), edge_perm=torch.tensor([7]))
    with pytest.raises(ValueError, match="edge_perm must be 1-D"):
        CSCGraph(torch.tensor([0, 1]), torch.tensor([0]), edge_perm=torch.tensor([[0]]))
    with pytest.raises(ValueError, match="edge_index holds node id -3"):  # not "num_nodes", never given
        CSCGraph.from_edge_index(torch.tensor([[-3], [-2]]))


def test_row_prefix_copies_the_first_rows_and_checks_num_rows():
    g = CSCGraph.from_edge_index(torch.tensor([[0, 2, 1, 2, 3, 0], [1, 1, 0, 3, 3, 1]]), 5)  # indptr 0 1 4 4 6 6
    for num_rows, (indptr, indices) in ((0, ([0], [])), (2, ([0, 1, 4], [1, 0, 2, 0])), (5, (g.indptr.tolist(),
                                                                                            g.indices.tolist()))):
        hot_indptr, hot_indices = g.row_prefix(num_rows, "cpu")
        assert hot_indptr.tolist() == indptr and hot_indices.tolist() == indices
        assert hot_indptr.dtype == g.indptr.dtype and hot_indices.dtype == g.indices.dtype
        assert hot_indptr.data_ptr() != g.indptr.data_ptr()  # copies: the graph's arrays stay its own
    assert g.row_prefix(torch.tensor(2), "cpu")[0].tolist() == [0, 1, 4]  # any integer
    for bad, error in ((-1, ValueError), (6, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="num_rows"):
            g.row_prefix(bad, "cpu")


def _relabel_reference(graph, order):
    """The relabelled graph built whole, with E-sized temporaries."""
    from tritongnn.graph import inverse_permutation
    num_nodes, num_edges = graph.num_nodes, graph.num_edges
    new_id, degree = inverse_permutation(order), graph.degree()[order]
    indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    torch.cumsum(degree, 0, out=indptr[1:])
    row = torch.repeat_interleave(torch.arange(num_nodes), degree, output_size=num_edges)
    old = graph.indptr[order][row] + (torch.arange(num_edges) - indptr[row])
    return indptr, new_id[graph.indices[old].long()], graph.edge_perm[old]


@given(num_nodes=st.integers(1, 40), num_edges=st.integers(0, 120), chunk=st.integers(1, 130),
       seed=st.integers(0, 1000))
def test_building_and_relabelling_in_chunks_is_the_whole_stable_sort(num_nodes, num_edges, chunk, seed):
    # the counting sort by target, chunk by chunk, is a stable argsort of
    # the targets (parallel edges and duplicates kept in input order), and
    # the chunked relabel is the relabel built whole
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    before = edge_index.clone()
    graph = CSCGraph.from_edge_index(edge_index, keep_edge_perm=True, chunk_edges=chunk)
    perm = torch.argsort(edge_index[1], stable=True)
    assert torch.equal(edge_index, before)  # not modified
    assert graph.num_nodes == (int(edge_index.max()) + 1 if num_edges else 0)
    assert torch.equal(graph.edge_perm, perm) and torch.equal(graph.indices.long(), edge_index[0, perm])
    if num_edges:
        assert torch.equal(graph.degree(), torch.bincount(edge_index[1], minlength=graph.num_nodes))
        order = torch.randperm(graph.num_nodes, generator=g)
        relabelled = graph.relabel(order, chunk_edges=chunk)
        indptr, indices, edge_perm = _relabel_reference(graph, order)
        assert torch.equal(relabelled.indptr, indptr) and torch.equal(relabelled.indices.long(), indices)
        assert torch.equal(relabelled.edge_perm, edge_perm)
        assert relabelled.indices.dtype == graph.indices.dtype


def test_a_graph_past_the_gpu_memory_left_is_refused_before_allocating(monkeypatch):
    from tritongnn import graph as graph_module
    monkeypatch.setattr(graph_module, "device_free_bytes", lambda device: 2 * 10**9)
    graph_module._check_fits(torch.device("cuda", 0), False, "the CSC graph", 10**9)  # fits
    with pytest.raises(ValueError, match=r"the CSC graph takes 7.40 GB on cuda:0, .* 2.00 GB more .*placement='host'"):
        graph_module._check_fits(torch.device("cuda", 0), False, "the CSC graph", 7.4e9)
    graph_module._check_fits(torch.device("cuda", 0), True, "the CSC graph", 7.4e9)  # pinned host memory: not GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("keep", [False, True])
def test_host_graphs_built_and_relabelled_on_the_gpu_equal_the_cpus(keep):
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 500, (2, 5000), generator=g)
    on_cpu = CSCGraph.from_edge_index(edge_index, 500, keep_edge_perm=keep)
    pinned = CSCGraph.from_edge_index(edge_index, 500, keep_edge_perm=keep, device="cpu", work="cuda", pin=True)
    assert pinned.is_pinned
    order = torch.randperm(500, generator=g)
    relabelled = (on_cpu.relabel(order, keep), pinned.relabel(order, keep, "cpu", pin=True, work="cuda"))
    for a, b in ((on_cpu, pinned), relabelled):
        assert b.is_pinned and torch.equal(a.indptr, b.indptr) and torch.equal(a.indices, b.indices)
        assert (a.edge_perm is None) == (b.edge_perm is None)
        if keep:
            assert torch.equal(a.edge_perm, b.edge_perm)
