"""Budget allocator: greedy split by accesses per byte, within the budget."""
import itertools

import pytest
import torch
from hypothesis import given, strategies as st

from tritongnn.cache import AccessProfile, allocator
from tritongnn.cache.allocator import hot_first_order, list_read_bytes, plan_by_degree, plan_cache


def profile_of(feature, adjacency, inputs=None):
    feature = torch.tensor(feature, dtype=torch.float64)
    adjacency = torch.tensor(adjacency, dtype=torch.int64)
    inputs = adjacency.clone() + 1 if inputs is None else torch.tensor(inputs)
    return AccessProfile(feature, inputs, adjacency, epochs=1, num_batches=1, seconds=0.0)


def test_hot_first_order_sorts_by_feature_then_adjacency_then_id():
    p = profile_of([1.0, 5.0, 5.0, 0.0, 5.0], [0, 1, 3, 9, 3])
    assert hot_first_order(p).tolist() == [2, 4, 1, 0, 3]


def test_everything_fits_and_nothing_fits():
    p = profile_of([3.0, 2.0, 1.0], [4, 0, 2])
    degree = torch.tensor([2, 5, 1])
    full = plan_cache(p, degree, row_bytes=16, budget=10**6)
    assert (full.num_feature, full.num_adjacency) == (3, 3)
    assert full.feature_hit_rate == full.adjacency_hit_rate == 1.0
    assert full.feature_bytes == 48 and full.adjacency_bytes == 8 * 4 + 3 * 8  # lists and indptr entries
    empty = plan_cache(p, degree, row_bytes=16, budget=0)
    assert (empty.num_feature, empty.num_adjacency, empty.feature_hit_rate) == (0, 0, 0.0)


def test_leftover_budget_takes_the_unprofiled_nodes():
    # nodes the profile never met may still be drawn: a budget that holds
    # everything caches everything, and leftover bytes go to features first
    p = profile_of([3.0, 0.0, 0.0], [4, 0, 0], inputs=[2, 0, 0])
    degree = torch.tensor([2, 5, 1])
    full = plan_cache(p, degree, row_bytes=16, budget=10**6)
    assert (full.num_feature, full.num_adjacency) == (3, 3)
    some = plan_cache(p, degree, row_bytes=16, budget=16 + 16 + 16)  # row 0, list 0, one more row
    assert (some.num_feature, some.num_adjacency) == (2, 1)
    assert some.feature_bytes + some.adjacency_bytes <= 48


def test_list_read_bytes_prices_picks_by_sector():
    degree = torch.tensor([0, 3, 15, 16, 1000])
    # at 32 bytes a sector, the bytes read: fanout 15 reads lists up to 15
    # whole (sector-rounded), longer ones 15 sectors; the indptr pair 16 bytes
    assert list_read_bytes(degree, [15], pick_cost=32).tolist() == [16, 16 + 32, 16 + 64, 16 + 480, 16 + 480]
    assert list_read_bytes(degree, [-1], pick_cost=32).tolist() == [16, 48, 80, 80, 16 + 4000]
    assert list_read_bytes(degree, [15, 5], pick_cost=32).tolist()[-1] == 16 + (480 + 160) / 2
    assert list_read_bytes(degree, [15]).tolist() == list_read_bytes(degree, [15], pick_cost=32).tolist()
    # charged as a 512-byte row, 16 times as much
    assert list_read_bytes(degree, [15], pick_cost=512).tolist() == \
        [16 * x for x in [16, 16 + 32, 16 + 64, 16 + 480, 16 + 480]]


def test_costlier_picks_move_the_budget_to_lists():
    # two nodes whose rows are gathered as often as their lists are sampled;
    # 1000 bytes hold one row (512 B) or one list (200 x 4 + 8 B). Counted by
    # the byte (pick_cost=32), a row saves 1 byte per byte cached, a list's
    # 15 picks and indptr pair (496 B a read) 0.61: the row is cached.
    # Counted per access (the default: a sector charged as a row, 512 B), a
    # list saves 16x as much and takes the budget.
    p = profile_of([5.0, 4.0], [10, 10], inputs=[10, 10])
    p.num_neighbors = [15]
    degree = torch.tensor([200, 200])
    per_access = plan_cache(p, degree, row_bytes=512, budget=1000, chunks=2)
    assert (per_access.num_feature, per_access.num_adjacency) == (0, 1)
    by_byte = plan_cache(p, degree, row_bytes=512, budget=1000, chunks=2, pick_cost=32)
    assert (by_byte.num_feature, by_byte.num_adjacency) == (1, 0)


def test_small_budget_caches_hot_short_lists():
    # a list read often and short saves more per byte than a rarely read row
    p = profile_of([9.0, 8.0, 1.0], [100, 0, 0], inputs=[1, 1, 1])
    p.num_neighbors = [15]
    plan = plan_cache(p, torch.tensor([10, 10, 10]), row_bytes=512, budget=48, chunks=3)
    assert (plan.num_feature, plan.num_adjacency) == (0, 1)


def test_hub_lists_do_not_block_the_adjacency_cache():
    # the hottest node is a hub (1000 neighbours, 15 picks a read): its list
    # saves little per byte; the short hot list of node 1 is cached instead,
    # and the rows cached are still those of the two hottest nodes
    p = profile_of([10.0, 9.0, 8.0, 7.0], [10, 10, 10, 0], inputs=[5, 5, 5, 5])
    p.num_neighbors = [15]
    plan = plan_cache(p, torch.tensor([1000, 2, 2, 2]), row_bytes=512, budget=2 * 512 + 32, chunks=4)
    assert plan.num_feature == 2 and set(plan.order[:2].tolist()) == {0, 1}
    assert plan.num_adjacency == 1 and plan.order[0] == 1 and plan.adjacency_bytes == 16


@given(st.data())
def test_greedy_is_near_optimal_when_utility_falls_along_the_order(data):
    # Equal degrees and accesses falling along the hot-first order: greedy by
    # host bytes saved per byte at node granularity, against every pair of
    # prefixes.
    n = data.draw(st.integers(1, 7))
    feature = sorted(data.draw(st.lists(st.integers(1, 50), min_size=n, max_size=n)), reverse=True)
    adjacency = sorted(data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)), reverse=True)
    p = profile_of([float(f) for f in feature], adjacency)
    degree = torch.full((n,), data.draw(st.integers(1, 8)))
    row_bytes = data.draw(st.integers(1, 64))
    budget = data.draw(st.integers(0, 400))
    plan = plan_cache(p, degree, row_bytes, budget, chunks=n)
    order = plan.order
    list_bytes = int(degree[0]) * 4 + 8
    # the utilities the allocator maximises: host bytes saved when profiled
    f = p.inputs[order].double() * (-(-row_bytes // 32) * 32)
    a = p.adjacency[order].double() * list_read_bytes(degree, [], 4)

    def value(nf, na):
        return float(f[:nf].sum() + a[:na].sum())

    best = max(value(nf, na) for nf, na in itertools.product(range(n + 1), repeat=2)
               if nf * row_bytes + na * list_bytes <= budget)
    assert plan.feature_bytes + plan.adjacency_bytes <= budget
    # greedy by density: within one item of the best (the fractional bound)
    assert value(plan.num_feature, plan.num_adjacency) >= best - 1e-9 - max(float(f.max()), float(a.max()))
    # and the best when every item fits
    if n * (row_bytes + list_bytes) <= budget:  # unread lists too: they may be read in training
        assert (plan.num_feature, plan.num_adjacency) == (n, n)


@given(n=st.integers(1, 300), budget=st.integers(0, 20000), chunks=st.integers(1, 64), seed=st.integers(0, 99))
def test_plan_stays_within_budget(n, budget, chunks, seed):
    g = torch.Generator().manual_seed(seed)
    p = profile_of((torch.rand(n, generator=g) ** 4 * 100).tolist(),
                   torch.randint(0, 20, (n,), generator=g).tolist())
    degree = torch.randint(0, 50, (n,), generator=g)
    plan = plan_cache(p, degree, row_bytes=64, budget=budget, chunks=chunks)
    assert plan.feature_bytes + plan.adjacency_bytes <= budget
    assert plan.feature_bytes == plan.num_feature * 64
    assert plan.adjacency_bytes == int(degree[plan.order[:plan.num_adjacency]].sum()) * 4 + 8 * plan.num_adjacency
    assert sorted(plan.order.tolist()) == list(range(n))
    assert 0.0 <= plan.feature_hit_rate <= 1.0 and 0.0 <= plan.adjacency_hit_rate <= 1.0
    # past both prefixes, hot-first by rows: what a warm copy or a grown feature cache takes next
    rank = torch.empty(n, dtype=torch.int64)
    rank[hot_first_order(p)] = torch.arange(n)
    tail = rank[plan.order[max(plan.num_feature, plan.num_adjacency):]]
    assert bool((tail[1:] > tail[:-1]).all())


def test_dynamic_bytes_come_out_of_the_feature_cache():
    # everything fits: the dynamic cache's row is the least-used static row,
    # the adjacency cache keeps every list
    p = profile_of([5.0, 4.0, 3.0, 2.0], [10, 10, 10, 10])
    degree = torch.full((4,), 2)  # a list costs 2 * 4 + 8 = 16 bytes, as a row
    whole = plan_cache(p, degree, row_bytes=16, budget=128)
    assert (whole.num_feature, whole.num_adjacency) == (4, 4)
    plan = plan_cache(p, degree, row_bytes=16, budget=128, dynamic_bytes=16)
    assert (plan.num_feature, plan.num_adjacency, plan.budget) == (3, 4, 112)
    assert sorted(plan.order[:3].tolist()) == [0, 1, 2]
    # past the feature cache's rows, the adjacency cache pays the rest
    plan = plan_cache(p, degree, row_bytes=16, budget=128, dynamic_bytes=80)
    assert (plan.num_feature, plan.num_adjacency) == (0, 3)


def test_dynamic_bytes_keep_the_adjacency_cache():
    # Rows hot-first 0, 1, 2, 3; node 3's list is read the most. The whole
    # budget caches the four rows and node 3's list. A dynamic cache of one
    # row: keeping node 3's list (and row) and dropping row 2 saves more
    # profiled bytes than dropping row 3 and caching a list among nodes 0-2,
    # so the adjacency cache stays as the whole budget planned it. (A
    # 16-byte row is charged one sector: a list read saves as a row.)
    p = profile_of([4.0, 3.0, 2.0, 1.0], [1, 1, 1, 50])
    degree = torch.full((4,), 2)  # 16 bytes a list, as a row
    whole = plan_cache(p, degree, row_bytes=16, budget=80, chunks=4)
    assert (whole.num_feature, whole.num_adjacency, whole.order[0].item()) == (4, 1, 3)
    plan = plan_cache(p, degree, row_bytes=16, budget=80, chunks=4, dynamic_bytes=16)
    assert (plan.num_feature, plan.num_adjacency, plan.order[0].item()) == (3, 1, 3)
    assert sorted(plan.order[:3].tolist()) == [0, 1, 3]
    assert plan.adjacency_hit_rate == whole.adjacency_hit_rate


@given(n=st.integers(1, 200), budget=st.integers(0, 20000), share=st.floats(0, 1), chunks=st.integers(1, 32),
       seed=st.integers(0, 99))
def test_dynamic_bytes_shrink_the_hottest_rows_only(n, budget, share, chunks, seed):
    g = torch.Generator().manual_seed(seed)
    p = profile_of((torch.rand(n, generator=g) ** 4 * 100).tolist(),
                   torch.randint(0, 20, (n,), generator=g).tolist())
    degree = torch.randint(0, 50, (n,), generator=g)
    dynamic_bytes = int(budget * share)
    whole = plan_cache(p, degree, row_bytes=64, budget=budget, chunks=chunks)
    plan = plan_cache(p, degree, row_bytes=64, budget=budget, chunks=chunks, dynamic_bytes=dynamic_bytes)
    assert plan.feature_bytes + plan.adjacency_bytes <= plan.budget == budget - dynamic_bytes
    assert sorted(plan.order.tolist()) == list(range(n))
    if dynamic_bytes <= whole.feature_bytes:
        # the rows pay: the static rows kept are among the whole budget's,
        # at most the dynamic cache's bytes fewer (rounded up to a row)
        assert set(plan.order[:plan.num_feature].tolist()) <= set(whole.order[:whole.num_feature].tolist())
        assert plan.num_feature >= whole.num_feature - -(-dynamic_bytes // 64)


def test_bad_dynamic_bytes():
    p = profile_of([1.0], [1])
    for bad in (-1, 101, 1.5, True):
        with pytest.raises(ValueError, match="dynamic_bytes"):
            plan_cache(p, torch.tensor([1]), 4, 100, dynamic_bytes=bad)


def test_plan_by_degree_fills_features_by_degree():
    p = profile_of([1.0, 1.0, 1.0, 1.0], [0, 0, 0, 0], inputs=[1, 7, 1, 1])
    plan = plan_by_degree(p, torch.tensor([1, 9, 3, 0]), row_bytes=10, budget=25)
    assert plan.order.tolist()[:2] == [1, 2] and plan.num_feature == 2 and plan.num_adjacency == 0
    assert plan.feature_hit_rate == pytest.approx(8 / 10)
    assert "cache plan" in str(plan)


@pytest.mark.parametrize("budget,error", [(-1, ValueError), (1.5, TypeError), ("8GB", TypeError),
                                          (True, TypeError)])
def test_bad_budget(budget, error):
    p = profile_of([1.0], [1])
    with pytest.raises(error, match="budget"):
        plan_cache(p, torch.tensor([1]), 4, budget)


def test_bad_shapes():
    p = profile_of([1.0, 2.0], [1, 1])
    with pytest.raises(ValueError, match="degree"):
        plan_cache(p, torch.tensor([1]), 4, 100)
    with pytest.raises(ValueError, match="row_bytes"):
        plan_cache(p, torch.tensor([1, 1]), 0, 100)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("budget", [0, 3000, 40000, 10**7])
def test_plan_on_the_gpu_equals_the_plan_on_the_cpu(budget):
    # a profile on the GPU (as the loader takes it) is planned there: the same plan
    g = torch.Generator().manual_seed(budget)
    n = 5000
    p = profile_of((torch.rand(n, generator=g) ** 4 * 100).round().tolist(),
                   torch.randint(0, 20, (n,), generator=g).tolist())
    on_gpu = AccessProfile(p.feature.cuda(), p.inputs.cuda(), p.adjacency.cuda(), epochs=1, num_batches=1,
                           seconds=0.0)
    degree = torch.randint(0, 50, (n,), generator=g)
    for plan_of in (lambda q, d: plan_cache(q, d, row_bytes=64, budget=budget, chunks=64),
                    lambda q, d: plan_by_degree(q, d, row_bytes=64, budget=budget)):
        cpu, gpu = plan_of(p, degree), plan_of(on_gpu, degree.cuda())
        assert gpu.order.device.type == "cpu" and torch.equal(cpu.order, gpu.order)
        assert (cpu.num_feature, cpu.num_adjacency, cpu.adjacency_bytes) == \
            (gpu.num_feature, gpu.num_adjacency, gpu.adjacency_bytes)
        assert cpu.feature_hit_rate == pytest.approx(gpu.feature_hit_rate)


def test_a_plan_that_does_not_fit_the_gpu_is_made_on_the_cpu(monkeypatch):
    # GPU memory faked (CPU): 10^6 nodes need 2 x 200 MB left on the GPU to be planned there
    monkeypatch.setattr(allocator, "device_free_bytes", lambda device: 4 * 10**8)
    cuda = torch.device("cuda", 0)
    assert allocator.planning_device(cuda, 10**6) == cuda
    assert allocator.planning_device(cuda, 10**6 + 1) == torch.device("cpu")
    assert allocator.planning_device(torch.device("cpu"), 10**12) == torch.device("cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_planner_stays_within_its_bytes_a_node():
    # what planning allocates on the GPU, at its peak, is within PLAN_BYTES_PER_NODE a node
    n = 4_000_000
    g = torch.Generator(device="cuda").manual_seed(0)
    feature = torch.rand(n, device="cuda", generator=g, dtype=torch.float64) ** 4 * 100
    p = AccessProfile(feature, feature.round().long(), torch.randint(0, 20, (n,), device="cuda", generator=g),
                      epochs=1, num_batches=1, seconds=0.0)
    degree = torch.randint(0, 50, (n,), device="cuda", generator=g)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    plan = plan_cache(p, degree, row_bytes=512, budget=n * 100)
    assert 0 < plan.num_feature < n
    assert torch.cuda.max_memory_allocated() - base <= allocator.PLAN_BYTES_PER_NODE * n
