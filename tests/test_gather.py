"""Feature gather: bit-exact rows for every dtype and width, both tiers."""
import pytest
import torch
from hypothesis import given, strategies as st

from tritongnn.kernels import gather_rows, reference

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def table(num_rows, width, dtype, seed):
    x = torch.randn(num_rows, width, generator=torch.Generator().manual_seed(seed)).to(dtype)
    flat = x.view(-1)
    flat[::7] = -0.0  # a sum-based select would turn these into +0.0
    flat[::11] = float("nan")
    return x


def in_other_ids(x, mapped, seed):
    """``(table, row_map)``: ``x`` itself, or its rows shuffled into other
    ids with the map the gather takes (``table[row_map[i]] == x[i]``), as
    the dual cache reads the user's host table in hot-first ids."""
    if not mapped:
        return x, None
    row_map = torch.randperm(x.size(0), generator=torch.Generator().manual_seed(seed))
    table = torch.empty_like(x)
    table[row_map] = x
    return table, row_map


def assert_bits_equal(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert torch.equal(a.view(BITS[a.dtype]), b.view(BITS[b.dtype]))


@given(num_rows=st.integers(1, 200), width=st.sampled_from([1, 3, 127, 128, 257, 1433]),
       dtype=st.sampled_from(DTYPES), num_ids=st.integers(0, 300), data=st.data())
def test_gather_matches_index_select(device, num_rows, width, dtype, num_ids, data):
    x = table(num_rows, width, dtype, num_ids)
    ids = torch.randint(0, num_rows, (num_ids,), generator=torch.Generator().manual_seed(width))
    num_hot = data.draw(st.integers(0, num_rows))
    hot = x[:num_hot].to(device).clone()
    user, row_map = in_other_ids(x, data.draw(st.booleans()), num_rows)
    source = user.pin_memory() if device.type == "cuda" and data.draw(st.booleans()) else user.to(device)
    out = torch.full((num_ids, width), 3.0, dtype=dtype, device=device)  # poisoned
    gather_rows(source, ids.to(device), out, hot=hot, num_hot=num_hot,
                row_map=None if row_map is None else row_map.to(device))
    assert_bits_equal(out.cpu(), x[ids])


def test_gather_reads_the_hot_rows_from_hot(device):
    # the hot tier differs from the table under it: rows < num_hot must come
    # from hot (a gather reading the table everywhere matched every test)
    x = torch.arange(40, dtype=torch.float32).view(10, 4)
    hot = (x[:4] + 1000).to(device)
    ids = torch.tensor([0, 9, 3, 5, 1, 3])
    out = gather_rows(x.to(device), ids.to(device), hot=hot, num_hot=4)
    expected = torch.where((ids < 4)[:, None], x[ids] + 1000, x[ids])
    assert torch.equal(out.cpu(), expected)


@given(num_rows=st.integers(1, 150), width=st.sampled_from([1, 5, 128, 257]),
       dtype=st.sampled_from(DTYPES), num_ids=st.integers(0, 200), data=st.data())
def test_gather_three_tiers(device, num_rows, width, dtype, num_ids, data):
    # static cache rows < num_hot, dynamic cache rows through slot, the rest
    # from the table: every row bit for bit whichever tier serves it
    x = table(num_rows, width, dtype, num_ids + 1)
    g = torch.Generator().manual_seed(num_rows)
    ids = torch.randint(0, num_rows, (num_ids,), generator=g)
    num_hot = data.draw(st.integers(0, num_rows - 1))
    num_cold = num_rows - num_hot
    capacity = data.draw(st.integers(1, num_cold))
    cached = torch.randperm(num_cold, generator=g)[:data.draw(st.integers(0, capacity))]
    slot = torch.full((num_cold,), -1, dtype=torch.int32)
    where = torch.randperm(capacity, generator=g)[:cached.numel()]
    slot[cached] = where.to(torch.int32)
    dynamic = torch.zeros(capacity, width, dtype=dtype)
    dynamic[where] = x[num_hot + cached]
    reuse = {}
    if data.draw(st.booleans()):  # and a previous batch's rows: a 4th tier (FastGL's reuse)
        kept = torch.randperm(num_cold, generator=g)[:data.draw(st.integers(0, num_cold))]
        prev_slot = torch.full((num_cold + 1,), -1, dtype=torch.int32)  # one spare entry allowed
        prev_slot[kept] = torch.arange(kept.numel(), dtype=torch.int32)
        reuse = dict(previous=x[num_hot + kept].to(device), prev_slot=prev_slot.to(device))
    user, row_map = in_other_ids(x, data.draw(st.booleans()), num_ids)
    source = user.pin_memory() if device.type == "cuda" and data.draw(st.booleans()) else user.to(device)
    out = torch.full((num_ids, width), 3.0, dtype=dtype, device=device)
    gather_rows(source, ids.to(device), out, hot=x[:num_hot].to(device), num_hot=num_hot,
                dynamic=dynamic.to(device), slot=slot.to(device), **reuse,
                row_map=None if row_map is None else row_map.to(device))
    assert_bits_equal(out.cpu(), x[ids])


WIDENINGS = [(torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.float64),
             (torch.float16, torch.float64)]


@given(num_rows=st.integers(1, 120), width=st.sampled_from([1, 5, 128]), widening=st.sampled_from(WIDENINGS),
       num_ids=st.integers(0, 150), data=st.data())
def test_gather_widens_stored_rows_into_out(device, num_rows, width, widening, num_ids, data):
    # features stored narrow (the loader's feature_dtype) come out in a wider
    # floating out, from every tier: each row equals the stored row
    # converted (exact: every narrow value is one of the wider dtype's);
    # NaN stays NaN, -0.0 stays -0.0; previous rows in either dtype
    stored, wide = widening
    x = table(num_rows, width, stored, num_ids + 2)
    g = torch.Generator().manual_seed(num_rows + 1)
    ids = torch.randint(0, num_rows, (num_ids,), generator=g)
    num_hot = data.draw(st.integers(0, num_rows - 1))
    num_cold = num_rows - num_hot
    cached = torch.randperm(num_cold, generator=g)[:data.draw(st.integers(0, num_cold))]
    slot = torch.full((num_cold,), -1, dtype=torch.int32)
    slot[cached] = torch.arange(cached.numel(), dtype=torch.int32)
    dynamic = torch.full((max(1, cached.numel()), width), 7.0, dtype=stored)
    dynamic[:cached.numel()] = x[num_hot + cached]
    kept = torch.randperm(num_cold, generator=g)[:data.draw(st.integers(0, num_cold))]
    prev_slot = torch.full((num_cold,), -1, dtype=torch.int32)
    prev_slot[kept] = torch.arange(kept.numel(), dtype=torch.int32)
    previous = x[num_hot + kept].to(data.draw(st.sampled_from([stored, wide])))
    poisoned = x.clone()  # rows a GPU tier serves must be read there
    poisoned[:num_hot] = 5.0
    poisoned[num_hot + cached] = 5.0
    source = poisoned.pin_memory() if device.type == "cuda" and data.draw(st.booleans()) else poisoned.to(device)
    out = torch.full((num_ids, width), 3.0, dtype=wide, device=device)
    gather_rows(source, ids.to(device), out, hot=x[:num_hot].to(device), num_hot=num_hot,
                dynamic=dynamic.to(device), slot=slot.to(device), previous=previous.to(device),
                prev_slot=prev_slot.to(device))
    # and the pure-torch path (a CPU without Triton) the same
    by_reference = reference.gather_rows(source.cpu(), ids, torch.full((num_ids, width), 3.0, dtype=wide),
                                         x[:num_hot], num_hot, dynamic, slot, previous, prev_slot)
    want = x[ids].to(wide)
    for got in (out.cpu(), by_reference):
        assert got.dtype == wide
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.signbit(), want.signbit())
        assert torch.equal(torch.nan_to_num(got, nan=0.0), torch.nan_to_num(want, nan=0.0))


def test_gather_refuses_outputs_that_narrow(device):
    x = torch.randn(10, 4, dtype=torch.float16, device=device)
    ids = torch.tensor([1, 2], device=device)
    for dtype in (torch.bfloat16, torch.int16, torch.int32):
        with pytest.raises(ValueError, match="out must be a \\[2, 4\\] tensor of torch.float16"):
            gather_rows(x, ids, torch.empty(2, 4, dtype=dtype, device=device))
    with pytest.raises(ValueError, match="out must be"):
        gather_rows(x.float(), ids, torch.empty(2, 4, dtype=torch.float16, device=device))
    with pytest.raises(TypeError, match="previous must have table's dtype torch.float16 or out's torch.float32"):
        gather_rows(x, ids, torch.empty(2, 4, device=device), hot=x[:4], num_hot=4,
                    previous=torch.zeros(2, 4, dtype=torch.float64, device=device),
                    prev_slot=torch.full((6,), -1, dtype=torch.int32, device=device))
    with pytest.raises(TypeError, match="hot must have table's dtype"):
        gather_rows(x, ids, torch.empty(2, 4, device=device), hot=x[:4].float(), num_hot=4)


def test_gather_three_tiers_reads_the_dynamic_rows():
    # the dynamic tier is really read: poison the table where a row is cached
    x = torch.arange(40.0).reshape(10, 4)
    table_poisoned = x.clone()
    table_poisoned[7] = -1.0
    slot = torch.full((6,), -1, dtype=torch.int32)
    slot[7 - 4] = 1
    dynamic = torch.zeros(2, 4)
    dynamic[1] = x[7]
    ids = torch.tensor([7, 0, 5, 7])
    out = gather_rows(table_poisoned, ids, hot=x[:4], num_hot=4, dynamic=dynamic, slot=slot)
    assert torch.equal(out, x[ids])


def test_gather_reads_the_previous_batch_after_the_caches():
    # order: static cache, dynamic cache, previous batch, host; poison every
    # later tier so that a wrong order shows
    x = torch.arange(40.0).reshape(10, 4)
    slot = torch.full((6,), -1, dtype=torch.int32)
    slot[7 - 4] = 0  # row 7 in the dynamic cache
    prev_slot = torch.full((6,), -1, dtype=torch.int32)
    prev_slot[[7 - 4, 5 - 4]] = torch.tensor([0, 1], dtype=torch.int32)  # rows 7 and 5 in the previous batch
    previous = torch.stack([torch.full((4,), -2.0), x[5]])  # row 7's copy there is never read
    ids = torch.tensor([7, 0, 5, 7, 9])
    table = x.clone()
    table[[5, 7]] = -3.0  # read from host only if the tiers above were skipped
    out = gather_rows(table, ids, hot=x[:4], num_hot=4, dynamic=x[7][None].clone(), slot=slot,
                      previous=previous, prev_slot=prev_slot)
    assert torch.equal(out, x[ids])


def test_gather_three_tiers_bad_arguments():
    x = torch.randn(10, 4)
    ids = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(ValueError, match="row_map must be"):
        gather_rows(x, ids, hot=x[:4], num_hot=4, row_map=torch.arange(9))
    with pytest.raises(ValueError, match="row_map must be"):
        gather_rows(x, ids, hot=x[:4], num_hot=4, row_map=torch.arange(10, dtype=torch.int32))
    with pytest.raises(ValueError, match="together"):
        gather_rows(x, ids, hot=x[:4], num_hot=4, dynamic=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="slot must be"):
        gather_rows(x, ids, hot=x[:4], num_hot=4, dynamic=torch.zeros(2, 4),
                    slot=torch.full((10,), -1, dtype=torch.int32))
    with pytest.raises(ValueError, match="together"):
        gather_rows(x, ids, hot=x[:4], num_hot=4, previous=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="prev_slot must be"):
        gather_rows(x, ids, hot=x[:4], num_hot=4, previous=torch.zeros(2, 4),
                    prev_slot=torch.full((5,), -1, dtype=torch.int32))
    with pytest.raises(ValueError, match="dynamic must hold"):
        gather_rows(x, ids, hot=x[:4], num_hot=4, dynamic=torch.zeros(2, 3),
                    slot=torch.full((6,), -1, dtype=torch.int32))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="UVA needs a CUDA GPU")
@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_from_pinned_host_memory(dtype):
    x = table(100_000, 128, dtype, 0).pin_memory()
    ids = torch.randint(0, x.size(0), (50_000,), device="cuda")
    assert_bits_equal(gather_rows(x, ids).cpu(), x[ids.cpu()])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gather_refuses_pageable_host_memory():
    x = torch.randn(10, 4)  # not pinned: a kernel cannot read it
    with pytest.raises(ValueError, match="pinned"):
        gather_rows(x, torch.zeros(3, dtype=torch.int64, device="cuda"))


def test_gather_bad_arguments():
    x = torch.randn(10, 4)
    with pytest.raises(ValueError, match="2-D"):
        gather_rows(x[0], torch.zeros(1, dtype=torch.int64))
    with pytest.raises(TypeError, match="int64"):
        gather_rows(x, torch.zeros(1, dtype=torch.int32))
    with pytest.raises(ValueError, match="out must be"):
        gather_rows(x, torch.zeros(2, dtype=torch.int64), out=torch.empty(3, 4))
    for ids, bad in ((torch.tensor([-1, 0]), -1), (torch.tensor([3, 10**7]), 10**7)):
        with pytest.raises(ValueError, match=rf"ids holds row id {bad}, outside \[0, 10\)"):
            gather_rows(x, ids)
    with pytest.raises(TypeError, match="hot must have table's dtype"):
        gather_rows(x, torch.zeros(1, dtype=torch.int64), hot=x[:2].half(), num_hot=2)


def test_gather_strided_ids(device):
    table = torch.arange(20.).view(5, 4).to(device)
    ids = torch.tensor([[4, 0], [1, 0], [3, 0]]).to(device)[:, 0]  # stride 2 (sliced on the device)
    assert not ids.is_contiguous()
    assert torch.equal(gather_rows(table, ids), table[ids])


def test_gather_persistent_grid(monkeypatch):
    # On a GPU, rows read through UVA are walked by a grid smaller than the
    # number of row blocks; each program loops. Force that loop here.
    from tritongnn.kernels import gather
    monkeypatch.setattr(gather, "_num_programs", lambda *args: 3)
    x = table(500, 40, torch.float32, 1)
    ids = torch.randint(0, 500, (2000,), generator=torch.Generator().manual_seed(0))
    num_blocks = -(-ids.numel() // gather._launch_settings(160, 4, True)[0])
    assert num_blocks > 3  # several blocks per program
    for num_hot in (0, 200, 500):
        out = torch.zeros(2000, 40)
        gather_rows(x, ids, out, hot=x[:num_hot].clone(), num_hot=num_hot)
        assert_bits_equal(out, x[ids])
    # a gather whose length the device holds (a replayed batch's): on a GPU
    # a persistent grid walks the count's rows, not a grid over all ids
    count = torch.tensor([1234])
    out = torch.full((2000, 40), 7.0)
    gather_rows(x, ids, out, count=count)
    assert_bits_equal(out[:1234], x[ids[:1234]])
    assert bool((out[1234:] == 7.0).all())  # past the count: left as they were


def host_table(device, monkeypatch, mapped, seed):
    """``(x, table, row_map)``: 500 x 40 rows ``x``, and the table the
    gather reads them from as host memory (in other ids when ``mapped``):
    pinned on a GPU; on the CPU made to count as another device's, with a
    UVA grid of 3 programs."""
    from tritongnn.kernels import gather
    x = table(500, 40, torch.float32, seed)
    user, row_map = in_other_ids(x, mapped, seed + 1)
    if device.type == "cpu":
        monkeypatch.setattr(gather, "_reads_host", lambda *args: True)
        monkeypatch.setattr(gather, "_num_programs", lambda n, rows, from_host, device, bounded=False:
                            3 if from_host or bounded else -(-n // rows))
    else:
        user = user.pin_memory()
    return x, user, row_map


def gpu_tiers(x):
    """The dynamic cache and previous batch tiers over rows 200 .. 499 of
    ``x`` (id 217 in both: the dynamic cache serves it)."""
    slot = torch.full((300,), -1, dtype=torch.int32)
    slot[torch.tensor([5, 17, 250])] = torch.tensor([0, 1, 2], dtype=torch.int32)
    prev_slot = torch.full((300,), -1, dtype=torch.int32)
    prev_slot[torch.tensor([17, 40, 299])] = torch.tensor([2, 0, 1], dtype=torch.int32)
    return dict(dynamic=x[200 + torch.tensor([5, 17, 250])].clone(), slot=slot,
                previous=torch.stack([x[240], x[499], x[217]]), prev_slot=prev_slot)


def host_paths(device, monkeypatch, mapped, seed):
    """A host table (``host_table``) and its GPU tiers on ``device``."""
    x, user, row_map = host_table(device, monkeypatch, mapped, seed)
    return x, user, row_map, {k: v.to(device) for k, v in gpu_tiers(x).items()}


@pytest.mark.parametrize("mapped", [False, True])
def test_gather_host_rows_first(device, monkeypatch, mapped):
    # A table read through UVA with cached rows: the host's rows are visited
    # first, at their sorted rows, by the small UVA grid, then the cached
    # rows by a full grid, each launch reading its bounds on the device;
    # with no GPU tier at all one pass reads every row at its sorted row. On
    # the CPU the table is made to count as another device's; every tier is
    # in play.
    x, user, row_map, on = host_paths(device, monkeypatch, mapped, 2)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 500, (2000,), generator=g)
    for num_hot in (0, 1, 200, 499, 500):
        out = torch.full((2000, 40), 3.0, device=device)
        gather_rows(user, ids.to(device), out, hot=x[:num_hot].to(device), num_hot=num_hot,
                    row_map=None if row_map is None else row_map.to(device), **(on if num_hot == 200 else {}))
        assert_bits_equal(out.cpu(), x[ids])
    # no static tier, the previous batch's rows only (reuse without a cache)
    prev_slot = torch.full((500,), -1, dtype=torch.int32)
    prev_slot[torch.tensor([217, 240, 499])] = torch.tensor([2, 0, 1], dtype=torch.int32)
    out = torch.full((2000, 40), 3.0, device=device)
    gather_rows(user, ids.to(device), out, hot=x[:0].to(device), num_hot=0, previous=on["previous"],
                prev_slot=prev_slot.to(device), row_map=None if row_map is None else row_map.to(device))
    assert_bits_equal(out.cpu(), x[ids])


@pytest.mark.parametrize("mapped", [False, True])
def test_gather_reads_the_warm_copy(device, monkeypatch, mapped):
    # ids num_hot .. num_hot + W - 1 that no GPU tier serves are read from
    # the warm copy (made different here, so the test sees which copy a row
    # came from), the others as before; the reference says the same.
    from tritongnn.kernels import reference
    x, user, row_map = host_table(device, monkeypatch, mapped, 5)
    ids = torch.randint(0, 500, (2000,), generator=torch.Generator().manual_seed(7))
    tiers = gpu_tiers(x)  # slots of ids 205 and 217 fall in the warm copies of 100 rows from 200
    slot, prev_slot = tiers["slot"], tiers["prev_slot"]
    for num_hot, num_warm, with_tiers in ((0, 150, False), (200, 100, True), (200, 300, True), (200, 300, False),
                                          (499, 1, False), (200, 0, True)):
        warm = -x[num_hot:num_hot + num_warm] - 1.0  # not the rows: which copy was read shows
        on = {k: v.to(device) for k, v in tiers.items()} if with_tiers else {}
        args = dict(hot=x[:num_hot].to(device), num_hot=num_hot, **on,
                    row_map=None if row_map is None else row_map.to(device))
        out = torch.full((2000, 40), 3.0, device=device)
        gather_rows(user.to(device) if device.type == "cpu" else user, ids.to(device), out,
                    warm=warm.pin_memory() if device.type == "cuda" else warm, **args)
        expect = reference.gather_rows(user, ids, torch.empty(2000, 40), warm=warm,
                                       **{k: v.cpu() if torch.is_tensor(v) else v for k, v in args.items()})
        assert_bits_equal(out.cpu(), expect)
        served = (ids < num_hot)
        if with_tiers:
            served |= (slot[(ids - num_hot).clamp(min=0, max=299)] >= 0) & (ids >= num_hot)
            served |= (prev_slot[(ids - num_hot).clamp(min=0, max=299)] >= 0) & (ids >= num_hot)
        from_warm = ~served & (ids >= num_hot) & (ids < num_hot + num_warm)
        assert_bits_equal(out.cpu()[from_warm], warm[ids[from_warm] - num_hot])
        assert_bits_equal(out.cpu()[~from_warm], x[ids[~from_warm]])
    with pytest.raises(ValueError, match="warm must hold at most 300 rows"):
        gather_rows(user, ids, hot=x[:200], num_hot=200, warm=x[:301])


def test_cold_first_order():
    from tritongnn.kernels.gather import _cold_first_order
    ids = torch.tensor([7, 1, 9, 3, 8, 0, 5])
    host_row = torch.tensor([70, 10, 90, 30, 80, 0, 50])
    order, bounds, rows = _cold_first_order(ids, host_row, num_hot=4, num_rows=100)
    assert bounds.tolist() == [0, 0, 4, 7]
    assert rows[:4].tolist() == host_row[order[:4]].tolist() == [50, 70, 80, 90]  # the host rows, as visited
    assert ids[order].tolist() == [5, 7, 8, 9, 0, 1, 3]  # host rows (>= 4) in host order, then the cached
    assert sorted(order.tolist()) == list(range(7))
    # rows another GPU tier serves (a slot >= 0: the dynamic cache, the
    # previous batch) go with the cached rows, whichever tier it is
    slot = torch.full((6,), -1, dtype=torch.int32)
    slot[8 - 4] = 0
    prev_slot = torch.full((7,), -1, dtype=torch.int32)  # a spare entry, as the reuse tier allows
    prev_slot[5 - 4] = 2
    order, bounds, rows = _cold_first_order(ids, host_row, num_hot=4, num_rows=100, slots=[slot, prev_slot])
    assert bounds.tolist() == [0, 0, 2, 7]
    assert ids[order].tolist() == [7, 9, 0, 1, 3, 5, 8]
    # a warm copy of ids 4 .. 7: those not served on the GPU come first, in
    # id order, at their rows of the copy; then the host table's rows
    order, bounds, rows = _cold_first_order(ids, host_row, num_hot=4, num_rows=100, slots=[slot, prev_slot],
                                            num_warm=4)
    assert bounds.tolist() == [0, 1, 2, 7]
    assert ids[order].tolist()[:2] == [7, 9]
    assert rows[:2].tolist() == [7 - 4, 90]
    # positions past a count (gather_rows's count=5: ids 0 and 5 not
    # gathered, whatever tier they would come from) sort last, past bounds[3]
    order, bounds, rows = _cold_first_order(ids, host_row, num_hot=4, num_rows=100, slots=[slot, prev_slot],
                                            num_warm=4, valid=torch.arange(7) < 5)
    assert bounds.tolist() == [0, 1, 2, 5]
    assert ids[order].tolist()[:5] == [7, 9, 1, 3, 8]
    assert sorted(order[5:].tolist()) == [5, 6]
    assert rows[:2].tolist() == [7 - 4, 90]


def test_gather_one_tier_for_the_benchmarks(device):
    # the launch the benchmarks time (naive and sorted UVA gathers) stays in
    # step with the kernel's signature (a bare launch: on a CPU only under
    # Triton's interpreter, which a GPU machine's test run does not switch on)
    from tritongnn.kernels._launch import INTERPRET
    from tritongnn.kernels.gather import _gather_one_tier
    if device.type == "cpu" and not INTERPRET:
        pytest.skip("a bare kernel launch on CPU tensors needs TRITON_INTERPRET=1")
    x = table(50, 40, torch.float32, 4).to(device)
    ids = torch.randint(0, 50, (77,), generator=torch.Generator().manual_seed(2)).to(device)
    for order in (None, torch.argsort(ids)):
        out = torch.zeros(77, 40, device=device)
        assert_bits_equal(_gather_one_tier(x, ids, out, order, grid=3, block_rows=16), x[ids])
    # ids in visiting order: out[order[j]] = x[sorted_ids[j]]
    sorted_ids, order = torch.sort(ids)
    out = torch.zeros(77, 40, device=device)
    assert_bits_equal(_gather_one_tier(x, sorted_ids, out, order, grid=3, block_rows=16, ids_sorted=True), x[ids])


def test_gather_bad_num_hot():
    x = torch.randn(10, 4)
    with pytest.raises(ValueError, match="num_hot"):
        gather_rows(x, torch.zeros(2, dtype=torch.int64), hot=x[:3], num_hot=5)
    with pytest.raises(ValueError, match="num_hot"):
        gather_rows(x, torch.zeros(2, dtype=torch.int64), hot=x, num_hot=11)


# gather_rows(..., count=): only ids[:count] into out[:count], whatever ids
# hold past count (ids a bound-sized buffer inside a CUDA graph); the rows of
# out from count on untouched
COUNT_IDS = 1200


def bounded_ids(num_rows, count, seed):
    """``COUNT_IDS`` ids: valid ones up to ``count``, then ids no table
    holds (a never-written buffer): a path reading them fails or shows."""
    ids = torch.randint(0, num_rows, (COUNT_IDS,), generator=torch.Generator().manual_seed(seed))
    ids[count:] = torch.tensor([-5, 10**9, num_rows]).repeat(COUNT_IDS)[:COUNT_IDS - count]
    return ids


def check_count(device, gather, want_rows, count, dtype=torch.float32, width=40):
    """``gather(ids, out, count)`` over a sentinel-filled out: its first
    ``count`` rows equal ``want_rows(ids[:count])``, the others untouched."""
    ids = bounded_ids(500, count, count)
    out = torch.full((COUNT_IDS, width), 3.0, dtype=dtype, device=device)
    gather(ids.to(device), out, torch.tensor([count], device=device))
    got, want = out.cpu()[:count], want_rows(ids[:count])
    if want.dtype == dtype:
        assert_bits_equal(got, want)
    else:  # widened: the values (NaN payloads may change)
        want = want.to(dtype)
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.signbit(), want.signbit())
        assert torch.equal(torch.nan_to_num(got, nan=0.0), torch.nan_to_num(want, nan=0.0))
    assert torch.equal(out.cpu()[count:], torch.full((COUNT_IDS - count, width), 3.0, dtype=dtype))


@pytest.mark.parametrize("tiers", ["one", "hot", "dynamic", "reuse", "widen"])
@pytest.mark.parametrize("path", ["kernel", "reference"])
def test_gather_count_from_gpu_memory(device, tiers, path):
    # every tier in GPU memory (a single bounded pass): the kernel reads
    # [0, count) on the device; the CPU reference slices
    import contextlib
    from tritongnn.kernels._launch import reference_on_cpu
    stored, wide = (torch.float16, torch.float32) if tiers == "widen" else (torch.float32, torch.float32)
    x = table(500, 40, stored, 8)
    args = {}
    if tiers != "one":
        args = dict(hot=x[:200].to(device), num_hot=200)
    if tiers in ("dynamic", "reuse", "widen"):
        args.update({k: v.to(device) for k, v in gpu_tiers(x).items()
                     if tiers != "dynamic" or k in ("dynamic", "slot")})
    poisoned = x.clone()  # rows the GPU tiers serve read there, not from the table
    poisoned[:200 if tiers != "one" else 0] = 5.0
    with reference_on_cpu() if path == "reference" else contextlib.nullcontext():
        for count in (0, 901, COUNT_IDS):
            check_count(device, lambda ids, out, c: gather_rows(poisoned.to(device), ids, out, validate=False,
                                                                count=c, **args),
                        lambda ids: x[ids], count, wide)


@pytest.mark.parametrize("mapped", [False, True])
def test_gather_count_with_host_rows(device, monkeypatch, mapped):
    # rows read from the host, both paths: host rows first (warm copy, host
    # table, GPU tiers, each pass bounded by _cold_first_order's bounds), or
    # all rows from the host at their sorted rows; the positions past count
    # sort last and no pass visits them
    x, user, row_map, on = host_paths(device, monkeypatch, mapped, 9)
    prev_only = torch.full((500,), -1, dtype=torch.int32)
    prev_only[torch.tensor([217, 240, 499])] = torch.tensor([2, 0, 1], dtype=torch.int32)
    cases = [(0, {}, 0), (1, {}, 0), (200, on, 0), (200, on, 100), (200, {}, 300), (0, {}, 150), (500, {}, 0),
             (0, dict(previous=on["previous"], prev_slot=prev_only.to(device)), 0)]
    for num_hot, tiers, num_warm in cases:
        warm = -x[num_hot:num_hot + num_warm] - 1.0  # not the rows: which copy was read shows
        args = dict(hot=x[:num_hot].to(device), num_hot=num_hot, row_map=None if row_map is None else row_map.to(device),
                    **tiers)
        host = dict(warm=warm.pin_memory() if device.type == "cuda" else warm) if num_warm else {}

        def want(ids):
            return reference.gather_rows(user.cpu(), ids, torch.empty(ids.numel(), 40), warm=warm,
                                         **{k: v.cpu() if torch.is_tensor(v) else v for k, v in args.items()})

        for count in (0, 901, COUNT_IDS):
            check_count(device, lambda ids, out, c: gather_rows(user.to(device) if device.type == "cpu" else user,
                                                                ids, out, validate=False, count=c, **args, **host),
                        want, count)


def test_gather_count_is_checked(device):
    x = torch.randn(10, 4, device=device)
    ids = torch.tensor([1, 2, 99], device=device)  # 99: past count, never read
    out = torch.zeros(3, 4, device=device)
    gather_rows(x, ids, out, count=torch.tensor([2], device=device))  # validate: ids[:count] only
    assert torch.equal(out[:2], x[ids[:2]]) and not out[2].any()
    with pytest.raises(ValueError, match="ids holds row id 99"):
        gather_rows(x, ids, out, count=torch.tensor([3], device=device))
    for bad in (-1, 4):
        with pytest.raises(ValueError, match=rf"count = {bad} is outside \[0, 3\]"):
            gather_rows(x, ids, out, count=torch.tensor([bad], device=device))
    # without validate, clamped to [0, n] on the device
    ok = torch.tensor([1, 2, 3], device=device)
    for bad, rows in ((-1, 0), (7, 3)):
        out = torch.zeros(3, 4, device=device)
        gather_rows(x, ok, out, validate=False, count=torch.tensor([bad], device=device))
        assert torch.equal(out[:rows], x[ok[:rows]]) and not out[rows:].any()
    gather_rows(x, ok, out, count=torch.tensor(2, device=device))  # 0-d: fine
    with pytest.raises(TypeError, match="count must be an int64 tensor, got torch.int32"):
        gather_rows(x, ids, out, count=torch.tensor([2], dtype=torch.int32, device=device))
    with pytest.raises(TypeError, match="count must be an int64 tensor, got int"):
        gather_rows(x, ids, out, count=2)
    with pytest.raises(ValueError, match=r"count must be a \[1\] int64 tensor on ids's device"):
        gather_rows(x, ids, out, count=torch.tensor([1, 2], device=device))
    with pytest.raises(ValueError, match="count must be a .* on meta"):
        gather_rows(x, ids, out, count=torch.tensor([2], device="meta"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("pinned", [False, True])
def test_gather_count_in_a_cuda_graph(pinned):
    # no host sync with a count: the gather is captured, each replay
    # gathers the prefix the device holds then (pinned: the host paths' sort)
    x = table(1000, 64, torch.float32, 3)
    source = x.pin_memory() if pinned else x.cuda()
    hot = x[:300].cuda()
    ids = torch.randint(0, 1000, (4096,), device="cuda")
    count = torch.tensor([0], device="cuda")
    out = torch.full((4096, 64), 3.0, device="cuda")
    gather_rows(source, ids, out, hot=hot, num_hot=300, validate=False, count=count)  # compiled first
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gather_rows(source, ids, out, hot=hot, num_hot=300, validate=False, count=count)
    for c in (4096, 17, 2500, 0):
        out.fill_(3.0)
        ids.copy_(torch.randint(0, 1000, (4096,), device="cuda"))
        count.fill_(c)
        graph.replay()
        assert_bits_equal(out[:c].cpu(), x[ids[:c].cpu()])
        assert (out[c:] == 3.0).all()


@pytest.mark.parametrize("value", [
    torch.arange(50) * 7 % 13,                                # int64 labels
    torch.arange(50) % 3 == 0,                                # a bool mask
    torch.randn(50, 3, 2, generator=torch.Generator().manual_seed(0)).half(),  # trailing shape
    torch.randn(50, 2, generator=torch.Generator().manual_seed(2), dtype=torch.complex64),  # moved as int64
    torch.randn(50, generator=torch.Generator().manual_seed(3), dtype=torch.complex128),  # 16 bytes: index_select
    torch.arange(150, dtype=torch.int32).view(50, 3).t().contiguous().t(),   # not contiguous
    torch.empty(50, 0),                                        # rows of no bytes
])
def test_take_node_rows_reads_the_first_count_ids(device, value, monkeypatch):
    from tritongnn.kernels import gather as gather_module
    from tritongnn.kernels.gather import take_node_rows
    value = value.to(device)
    ids = torch.randint(0, 50, (40,), generator=torch.Generator().manual_seed(1)).to(device)
    calls = []
    monkeypatch.setattr(gather_module, "gather_rows", lambda *a, **k: calls.append(1) or gather_rows(*a, **k))
    want = value.index_select(0, ids)
    out = torch.zeros_like(want)
    assert take_node_rows(value, ids, out, count=torch.tensor([25], device=device)) is out
    assert torch.equal(out[:25], want[:25])
    # the Triton gather where the rows are contiguous and hold bytes: the
    # rest of out untouched; else index_select of every id
    gathered = value.is_contiguous() and value.numel() > 0 and value.element_size() <= 8
    assert bool(calls) == gathered
    assert torch.equal(out[25:], torch.zeros_like(want[25:]) if gathered else want[25:])
