"""Super-batch degree classifier: the multi-block prefix sum against
``torch.cumsum`` across block boundaries, and the classification and
placement against the torch reference, with garbage past the valid prefix."""
import pytest
import torch
from hypothesis import given, strategies as st

from graphs import graphs
from tritongnn.kernels import classify_frontier, prefix_sum, reference
from tritongnn.kernels._launch import use_triton

BLOCK = 16  # small blocks: a few dozen elements cross many of them


def sizes_around(block):
    """0, 1, block - 1, block, block + 1 and many blocks (with a ragged end)."""
    return st.sampled_from([0, 1, block - 1, block, block + 1, 2 * block + 3]) | st.integers(0, 40 * block)


@given(data=st.data(), block=st.sampled_from([2, BLOCK, 128]))
def test_prefix_sum_matches_torch_cumsum(device, data, block):
    n = data.draw(sizes_around(block))
    g = torch.Generator().manual_seed(n)
    values = torch.randint(-5, 1 << 40, (n,), generator=g)  # large values: carries need int64
    got = prefix_sum(values.to(device), block=block).cpu()
    assert torch.equal(got, torch.cumsum(values, 0))


def test_prefix_sum_default_block(device):
    # sizes around the default block of the backend (1024 compiled, 4096 interpreted)
    for n in (1023, 1024, 1025, 4095, 4096, 4097, 3 * 4096 + 5):
        values = torch.randint(0, 100, (n,), generator=torch.Generator().manual_seed(n))
        assert torch.equal(prefix_sum(values.to(device)).cpu(), torch.cumsum(values, 0)), n


def test_prefix_sum_bad_input():
    with pytest.raises(TypeError, match="int64"):
        prefix_sum(torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="block"):
        prefix_sum(torch.zeros(3, dtype=torch.int64), block=12)


def split_sizes(draw, total, num_batches):
    """``num_batches`` sizes summing to ``total``, empty sub-batches allowed."""
    cuts = sorted(draw(st.lists(st.integers(0, total), min_size=num_batches - 1, max_size=num_batches - 1)))
    edges = [0] + cuts + [total]
    return [b - a for a, b in zip(edges, edges[1:])]


@given(graph=graphs(), fanout=st.sampled_from([-1, 0, 1, 3, 13]), replace=st.booleans(),
       num_batches=st.sampled_from([1, 2, 3, 8]), block=st.sampled_from([2, BLOCK, None]), data=st.data())
def test_classify_matches_reference(device, graph, fanout, replace, num_batches, block, data):
    n = data.draw(st.sampled_from([0, 1]) | st.integers(1, 3 * BLOCK + 5))
    slack = data.draw(st.integers(0, 9))  # garbage slots: must be neither read nor placed
    g = torch.Generator().manual_seed(n * 31 + slack)
    frontier = torch.cat([torch.randint(0, graph.num_nodes, (n,), generator=g),
                          torch.full((slack,), 10**12)])
    sizes = split_sizes(data.draw, n, num_batches)
    batch = torch.cat([torch.repeat_interleave(torch.arange(num_batches), torch.tensor(sizes)),
                       torch.full((slack,), 10**6)])
    batch_ptr = torch.tensor([0] + torch.tensor(sizes).cumsum(0).tolist())
    if num_batches == 1 and data.draw(st.booleans()):
        batch = batch_ptr = None  # one batch, no sub-batch arrays
    count = torch.tensor([n])
    # the adjacency cache: rows of nodes < A from a hot copy, the cold copy's poisoned there
    num_hot = data.draw(st.integers(0, graph.num_nodes))
    cold = graph.indptr.clone()
    cold[:num_hot] = -(10**9)
    hot = graph.indptr[:num_hot + 1].to(device) if num_hot else None
    sort_by_node = data.draw(st.booleans())  # row bounds read in node-id order: the same outputs
    got = classify_frontier((cold if num_hot else graph.indptr).to(device), frontier.to(device),
                            count.to(device), fanout, replace, None if batch is None else batch.to(device),
                            None if batch_ptr is None else batch_ptr.to(device), hot_indptr=hot, block=block,
                            sort_by_node=sort_by_node)
    want = reference.classify_frontier(graph.indptr, frontier, count, fanout, replace, batch, batch_ptr)
    if sort_by_node and use_triton(torch.device(device)):  # (the pure-torch path reads in frontier order)
        visit = got.visit.cpu()
        assert torch.equal(visit.sort().values, torch.arange(n + slack))  # a permutation of the slots
        assert bool((visit[:n] < n).all())                                # the valid ones first
        assert bool((frontier[visit[:n]].diff() >= 0).all())              # in node-id order
    else:
        assert got.visit is None
    assert torch.equal(got.row_start[:n].cpu(), want.row_start)
    assert torch.equal(got.degree[:n].cpu(), want.degree)
    assert torch.equal(got.offsets[:n].cpu(), want.offsets)  # the multi-block scan of the counts
    assert torch.equal(got.order[:n].cpu(), want.order)      # stable: full first, per sub-batch
    assert torch.equal(got.edge_ptr.cpu(), want.edge_ptr)
    assert torch.equal(got.num_full.cpu(), want.num_full)


def test_classify_semantics(device):
    # degrees 0, 5, 2, 9 | 1, 7 with fanout 3: full = {0, 2} | {1}
    degrees = torch.tensor([0, 5, 2, 9, 1, 7])
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), degrees.cumsum(0)])
    frontier = torch.arange(6)
    out = classify_frontier(indptr.to(device), frontier.to(device), torch.tensor([6], device=device), 3,
                            frontier_batch=torch.tensor([0, 0, 0, 0, 1, 1], device=device),
                            batch_ptr=torch.tensor([0, 4, 6], device=device), block=2)
    assert out.order.tolist() == [0, 2, 1, 3, 4, 5]
    assert out.num_full.tolist() == [2, 1]
    assert out.offsets.tolist() == [0, 3, 5, 8, 9, 12]  # counts 0 3 2 3 | 1 3
    assert out.edge_ptr.tolist() == [0, 8, 12]


def test_classify_bad_arguments():
    indptr = torch.tensor([0, 2, 3])
    args = (indptr, torch.zeros(2, dtype=torch.int64), torch.tensor([2]))
    with pytest.raises(ValueError, match="fanout"):
        classify_frontier(*args, -2)
    with pytest.raises(ValueError, match="together"):
        classify_frontier(*args, 2, frontier_batch=torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="batch_ptr"):
        classify_frontier(*args, 2, frontier_batch=torch.zeros(2, dtype=torch.int64),
                          batch_ptr=torch.zeros(1, dtype=torch.int64))
    with pytest.raises(TypeError, match="num_frontier must be a"):
        classify_frontier(indptr, torch.zeros(2, dtype=torch.int64), 2, 2)


def test_count_past_the_buffer_is_the_buffer():
    # the kernels never read or place past the frontier's buffer, whatever
    # the device scalar says (it is not checked: that would be a sync)
    indptr = torch.tensor([0, 2, 3, 7, 12])
    frontier = torch.tensor([3, 0, 2])
    whole = classify_frontier(indptr, frontier, torch.tensor([3]), 2)
    past = classify_frontier(indptr, frontier, torch.tensor([5]), 2)
    for a, b in zip((whole.order, whole.edge_ptr, whole.degree), (past.order, past.edge_ptr, past.degree)):
        assert torch.equal(a, b)


def test_strided_frontier(device):
    # a frontier with stride 2 (a column of a [n, 2] tensor) reads as its values
    indptr = torch.tensor([0, 2, 3, 7, 12]).to(device)
    frontier = torch.tensor([[3, 0], [0, 0], [2, 0]]).to(device)[:, 0]  # sliced on the device
    assert not frontier.is_contiguous()
    got = classify_frontier(indptr, frontier, torch.tensor([3], device=device), 2)
    want = reference.classify_frontier(indptr.cpu(), frontier.contiguous().cpu(), torch.tensor([3]), 2)
    assert got.degree.cpu().tolist() == want.degree.tolist() == [5, 2, 4]
    assert torch.equal(got.edge_ptr.cpu(), want.edge_ptr)
