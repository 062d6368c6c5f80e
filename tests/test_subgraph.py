"""PyG's ``subgraph_type``: the induced kernel against its torch reference
and a brute-force count over ``edge_index``, bidirectional edges against
PyG's own ``to_bidirectional``."""
import collections

import pytest
import torch
from hypothesis import given, strategies as st
from torch_geometric.sampler import SamplerOutput

from tritongnn.kernels import IdMap, reference
from tritongnn.kernels.subgraph import bidirectional_edges, induced_edges

from graphs import graphs


def brute_induced(edge_index, n_id):
    """``Counter`` of ``(target position, source position)``: every edge of
    ``edge_index`` (``[2, E]`` global) between two of ``n_id``, as often as
    the graph holds it; a repeated node's first position is its source id,
    every position of it is a target of its own."""
    first = {}
    for i, v in enumerate(n_id.tolist()):
        first.setdefault(v, i)
    count = collections.Counter()
    for i, v in enumerate(n_id.tolist()):
        for u in edge_index[0][edge_index[1] == v].tolist():
            if u in first:
                count[(i, first[u])] += 1
    return count


def counter_of(src, dst):
    return collections.Counter(zip(dst.tolist(), src.tolist()))


@given(graph=graphs(), data=st.data())
def test_induced_edges_equal_the_reference_and_every_edge_between_the_nodes(device, graph, data):
    # nodes drawn with repeats (a repeated seed keeps its own position);
    # the first A rows read from a GPU copy while the full arrays' copies of
    # them are poisoned, so a read from the wrong tier shows
    n = data.draw(st.integers(0, 2 * graph.num_nodes))
    nodes = torch.randint(0, graph.num_nodes, (n,), generator=torch.Generator().manual_seed(n))
    kind = data.draw(st.sampled_from(["direct", "hash"]))
    num_hot = data.draw(st.integers(0, graph.num_nodes))
    want = reference.induced_edges(graph.indptr, graph.indices, nodes, return_eid=True)
    pos = want[2]
    # the reference is torch-sparse's loop: each edge of the graph between two nodes, once per CSC entry
    targets = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.degree())
    csc_edges = torch.stack([graph.indices.long(), targets])
    assert counter_of(*want[:2]) == brute_induced(csc_edges, nodes)
    assert torch.equal(nodes[want[0]], graph.indices[pos].long()) and bool((want[1][1:] >= want[1][:-1]).all())
    tiers = {}
    indptr, indices = graph.indptr.clone(), graph.indices.clone()
    if num_hot:
        hot_edges = int(graph.indptr[num_hot])
        tiers = dict(hot_indptr=graph.indptr[:num_hot + 1].to(device), hot_indices=graph.indices[:hot_edges].to(device))
        indptr[:num_hot] = -(10**9)
        indices[:hot_edges] = -7
    if device.type == "cuda" and data.draw(st.booleans()):
        indptr, indices = indptr.pin_memory(), indices.pin_memory()  # read through UVA
    else:
        indptr, indices = indptr.to(device), indices.to(device)
    id_map = IdMap(graph.num_nodes, 1, 4, device, kind=kind)
    for _ in range(2):  # the map restarted: the second batch forgets the first
        got = induced_edges(indptr, indices, nodes.to(device), id_map, return_eid=True, **tiers)
        for a, b in zip(want, got):
            assert a.dtype == b.dtype and torch.equal(a, b.cpu())
    src, dst, none = induced_edges(graph.indptr.to(device), graph.indices.to(device), nodes.to(device))
    assert none is None and torch.equal(src.cpu(), want[0]) and torch.equal(dst.cpu(), want[1])


def pyg_bidirectional(row, col, edge):
    out = SamplerOutput(node=torch.arange(int(max(row.max(), col.max())) + 1 if row.numel() else 0), row=row,
                        col=col, edge=edge, num_sampled_nodes=[1], num_sampled_edges=[row.numel()])
    return out.to_bidirectional()


@pytest.mark.parametrize("num_edges", [0, 1, 7, 200])
def test_bidirectional_edges_as_pyg_to_bidirectional(device, num_edges):
    g = torch.Generator().manual_seed(num_edges)
    row, col = torch.randint(0, 12, (2, num_edges), generator=g)
    row[::5] = col[::5]  # self-loops: their reverse is themselves
    if num_edges > 4:
        row[3], col[3] = col[2], row[2]  # a pair sampled both ways
        row[4], col[4] = row[2], col[2]  # a repeated edge
    edge = torch.randperm(1000, generator=g)[:num_edges]
    pyg = pyg_bidirectional(row, col, edge)
    src, dst, e_id = bidirectional_edges(row.to(device), col.to(device), edge.to(device), 12)
    assert torch.equal(src.cpu(), pyg.row) and torch.equal(dst.cpu(), pyg.col)
    assert pyg.num_sampled_nodes is None and pyg.num_sampled_edges is None
    # PyG keeps any id of a pair's copies (reduce="any"); ours: the first
    # sampled edge of the pair, else its first reverse
    ids = collections.defaultdict(list)
    for r, c, e in zip(row.tolist(), col.tolist(), edge.tolist()):
        ids[(r, c)].append(e)
    for r, c, e in zip(row.tolist(), col.tolist(), edge.tolist()):
        ids[(c, r)].append(e)
    assert [ids[pair][0] for pair in zip(src.tolist(), dst.tolist())] == e_id.tolist()
    assert src.shape == dst.shape == e_id.shape
    assert bidirectional_edges(row, col, None, 12)[2] is None


def test_induced_edges_bad_arguments():
    indptr, indices = torch.tensor([0, 1, 2]), torch.tensor([1, 0])
    with pytest.raises(TypeError, match="nodes must be a 1-D int64"):
        induced_edges(indptr, indices, torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(TypeError, match="indptr"):
        induced_edges(indptr.int(), indices, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="hot_indptr and hot_indices"):
        induced_edges(indptr, indices, torch.tensor([0, 1]), hot_indptr=indptr[:2])
