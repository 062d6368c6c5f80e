"""Fused id map: equal to the torch reference element for element, with
separate id spaces per sub-batch, across hops and table growth."""
import torch
import pytest
from hypothesis import given, strategies as st

from tritongnn.kernels import IdMap, reference
from tritongnn.kernels import id_map as id_map_module

@pytest.fixture(params=["direct", "direct_seen", "hash"])
def kind(request, monkeypatch):
    """The map's kind; "direct_seen": a direct map with the seen filter at
    any size (``id_map.SEEN_MIN_NODES``; "direct" has none on these small
    graphs)."""
    if request.param == "direct_seen":
        monkeypatch.setattr(id_map_module, "SEEN_MIN_NODES", 0)
        return "direct"
    monkeypatch.setattr(id_map_module, "SEEN_MIN_NODES", 1 << 62)
    return request.param


def grouped(batch_sizes, device):
    return torch.repeat_interleave(torch.arange(len(batch_sizes)), torch.tensor(batch_sizes)).to(device)


def run_hops(id_map, seeds, seeds_batch, hops, last=False):
    """Start with the seeds, insert each hop; hop = (cand, count, cand_batch,
    cand_ptr or None). ``last``: the final hop is inserted with last=True
    (no new_local / new_batch back)."""
    out = [id_map.start(seeds, seeds_batch).cpu()]
    for i, (cand, count, cand_batch, cand_ptr) in enumerate(hops):
        final = last and i == len(hops) - 1
        h = id_map.insert(cand, count, cand_batch, cand_ptr, last=final)
        e, n = int(count), int(h.num_new)
        out += [h.local[:e], h.new_nodes[:n], h.num_new_per_batch]
        if final:
            assert h.new_local is None and h.new_batch is None
        else:
            out.append(h.new_local[:n])
            if h.new_batch is not None:
                out.append(h.new_batch[:n])
    out.append(id_map.num_nodes_per_batch)
    return [t.cpu() for t in out]


@given(num_nodes=st.integers(1, 300), num_batches=st.integers(1, 3), data=st.data(),
       capacity=st.sampled_from([1, 16, 4096]))
def test_id_map_matches_reference(device, kind, num_nodes, num_batches, capacity, data):
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    k = num_batches
    seed_sizes = data.draw(st.lists(st.integers(1, 20), min_size=k, max_size=k))
    seeds = torch.randint(0, num_nodes, (sum(seed_sizes),), generator=g).to(device)
    hops = []
    for _ in range(data.draw(st.integers(1, 3))):
        sizes = data.draw(st.lists(st.integers(0, 80), min_size=k, max_size=k))
        total = sum(sizes)
        slack = 5  # garbage past the count: must be ignored
        cand = torch.randint(0, num_nodes, (total + slack,), generator=g).to(device)
        batch = torch.cat([grouped(sizes, device), torch.full((slack,), 7, device=device)])
        # the sub-batches' starts (the sampler's edge_ptr), or counted from cand_batch
        ptr = torch.tensor([0] + sizes).cumsum(0).to(device) if k > 1 and data.draw(st.booleans()) else None
        hops.append((cand, torch.tensor([total], device=device), batch if k > 1 else None, ptr))
    sb = grouped(seed_sizes, device) if k > 1 else None
    last = data.draw(st.booleans())  # the sampler's last hop: no local ids stored
    got = run_hops(IdMap(num_nodes, k, capacity, device, kind=kind), seeds, sb, hops, last)
    want = run_hops(reference.IdMap(num_nodes, k, "cpu"), seeds.cpu(), None if sb is None else sb.cpu(),
                    [(c.cpu(), n.cpu(), None if b is None else b.cpu(), None) for c, n, b, _ in hops], last)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_id_map_semantics(device, kind):
    # Two sub-batches share node 5 and node 7 but keep their own ids.
    m = IdMap(10, 2, 4, device, kind=kind)
    seeds = torch.tensor([5, 1, 5, 7], device=device)
    local = m.start(seeds, torch.tensor([0, 0, 1, 1], device=device))
    assert local.tolist() == [0, 1, 0, 1]
    cand = torch.tensor([7, 5, 7, 2, 5, 7, 3, 3], device=device)
    hop = m.insert(cand, torch.tensor([8], device=device), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1], device=device))
    # batch 0 knows {5: 0, 1: 1}: 7 -> 2 (new), 5 -> 0, 2 -> 3 (new)
    # batch 1 knows {5: 0, 7: 1}: 3 -> 2 (new)
    assert hop.local.tolist() == [2, 0, 2, 3, 0, 1, 2, 2]
    n = int(hop.num_new)
    assert hop.new_nodes[:n].tolist() == [7, 2, 3]
    assert hop.new_local[:n].tolist() == [2, 3, 2]
    assert hop.new_batch[:n].tolist() == [0, 0, 1]
    assert m.num_nodes_per_batch.tolist() == [4, 3]


def test_no_insert_after_the_last_hop(device, kind):
    # a last hop stores no local ids: a hop after it would miss its nodes,
    # so it is refused until the next batch starts
    for m in (IdMap(10, 1, 16, device, kind=kind), reference.IdMap(10, 1, device)):
        m.start(torch.tensor([1, 2], device=device))
        count = torch.tensor([3], device=device)
        hop = m.insert(torch.tensor([3, 1, 3], device=device), count, last=True)
        assert hop.local.tolist() == [2, 0, 2] and hop.new_local is None
        with pytest.raises(ValueError, match="insert after a hop inserted with last=True"):
            m.insert(torch.tensor([3], device=device), torch.tensor([1], device=device))
        m.start(torch.tensor([3], device=device))  # a new batch: inserts again
        assert m.insert(torch.tensor([3, 4], device=device), torch.tensor([2], device=device)).local.tolist() == [0, 1]


def test_slots_are_int32_where_the_table_allows(device):
    # the passes read each candidate's slot twice: int32 halves those bytes
    m = IdMap(10, 1, 16, device, kind="direct")
    if m.direct is None:
        pytest.skip("no Triton on this device")
    assert m._insert(torch.tensor([3], device=device), None, torch.tensor([1], device=device), 1, 0).dtype \
        == torch.int32


def test_per_batch_counts_from_cand_ptr_equal_the_counted_ones(device, kind):
    # the sampler passes each hop's edge_ptr: the same map as counting the
    # candidates of each sub-batch one by one
    g = torch.Generator().manual_seed(11)
    seeds = torch.randint(0, 50, (12,), generator=g).to(device)
    seeds_batch = grouped([5, 0, 7], device)
    sizes = [30, 0, 44]
    cand = torch.randint(0, 50, (sum(sizes) + 3,), generator=g).to(device)
    batch = torch.cat([grouped(sizes, device), torch.full((3,), 9, device=device)])
    count = torch.tensor([sum(sizes)], device=device)
    ptr = torch.tensor([0] + sizes).cumsum(0).to(device)
    with_ptr = run_hops(IdMap(50, 3, 64, device, kind=kind), seeds, seeds_batch, [(cand, count, batch, ptr)])
    counted = run_hops(IdMap(50, 3, 64, device, kind=kind), seeds, seeds_batch, [(cand, count, batch, None)])
    for a, b in zip(with_ptr, counted):
        assert torch.equal(a, b)


def random_hops(num_nodes, seed_sizes, hop_sizes, device, seed=0):
    """Seeds and hops (each ``[sizes per sub-batch]``) of random candidates,
    with garbage past each hop's count."""
    g = torch.Generator().manual_seed(seed)
    k = len(seed_sizes)
    seeds = torch.randint(0, num_nodes, (sum(seed_sizes),), generator=g).to(device)
    hops = []
    for sizes in hop_sizes:
        total = sum(sizes)
        cand = torch.randint(0, num_nodes, (total + 3,), generator=g).to(device)
        batch = torch.cat([grouped(sizes, device), torch.full((3,), 7, device=device)])
        hops.append((cand, torch.tensor([total], device=device), batch if k > 1 else None, None))
    return seeds, (grouped(seed_sizes, device) if k > 1 else None), hops


def assert_matches_reference(id_map, num_nodes, seeds, seeds_batch, hops, last=False):
    got = run_hops(id_map, seeds, seeds_batch, hops, last)
    want = run_hops(reference.IdMap(num_nodes, id_map.num_batches, "cpu"), seeds.cpu(),
                    None if seeds_batch is None else seeds_batch.cpu(),
                    [(c.cpu(), n.cpu(), None if b is None else b.cpu(), None) for c, n, b, _ in hops], last)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_id_map_table_is_int64_when_keys_pass_int32(device):
    # K x num_nodes past 2^31 - 1: keys (sub_batch * num_nodes + node) need
    # 64 bits; the ids drawn stay small, the keys of sub-batch 1 do not
    num_nodes = 2**31 + 5
    m = IdMap(num_nodes, 2, 64, device)  # "auto": 2^32 words would not fit a direct table
    assert m.direct is None or device.type == "cpu"
    m = IdMap(num_nodes, 2, 64, device, kind="hash")
    assert m.table.dtype == torch.int64 and m.table.shape[1] == 4
    seeds, seeds_batch, hops = random_hops(200, [6, 9], [[40, 25], [70, 90]], device, seed=3)
    assert_matches_reference(m, num_nodes, seeds, seeds_batch, hops)
    narrow = IdMap(1000, 2, 64, device, kind="hash")
    assert narrow.table.dtype == torch.int32  # 16 B a slot


def test_id_map_widens_to_int64_before_stamps_pass_int32(device, monkeypatch):
    # stamps grow with every candidate of a batch: an int32 table is
    # rehashed into int64 words before they would pass the limit (lowered
    # here from 2^31 - 1), in the seeds or between hops, and a new batch
    # starts from the widened table
    monkeypatch.setattr(id_map_module, "_INT32_LIMIT", 150)
    for seed_sizes, hop_sizes in (([20, 30], [[30, 20], [40, 50], [10, 5]]),  # widens before hop 2
                                  ([90, 70], [[12, 8]])):                       # widens in the seeds
        m = IdMap(60, 2, 16, device, kind="hash")  # 120 < 150: int32 keys
        assert m.table.dtype == torch.int32
        seeds, seeds_batch, hops = random_hops(60, seed_sizes, hop_sizes, device, seed=5)
        assert_matches_reference(m, 60, seeds, seeds_batch, hops)
        assert m.table.dtype == torch.int64
        assert_matches_reference(m, 60, seeds, seeds_batch, hops)  # the same map, a second batch


def test_map_of_k_started_without_sub_batches(device, kind):
    # a map sized for K sub-batches used for one batch (no seeds_batch): the
    # seeds and the later hops' nodes are sub-batch 0's, counts stay [K]
    seeds = torch.tensor([4, 5], device=device)
    hops = [(torch.tensor([6, 7, 4, 9], device=device), torch.tensor([4], device=device), None, None),
            (torch.tensor([6, 1], device=device), torch.tensor([2], device=device),
             torch.tensor([0, 1], device=device), None)]
    assert_matches_reference(IdMap(10, 3, 16, device, kind=kind), 10, seeds, None, hops)


def test_a_batch_sees_nothing_of_the_batches_before(device, kind):
    # one map, batch after batch: every batch equals the reference's fresh
    # map (a direct table's words of earlier batches must read as free),
    # with overlapping nodes so that stale words would be found
    m = IdMap(40, 2, 16, device, kind=kind)
    for seed in range(4):
        seeds, seeds_batch, hops = random_hops(40, [7, 5], [[30, 20], [60, 45]], device, seed=seed)
        assert_matches_reference(m, 40, seeds, seeds_batch, hops)


def test_direct_table_is_cleared_when_its_tags_run_out(device, monkeypatch):
    # tags of 26 bits: the host counts batches and clears the words and the
    # tag before it would pass TAG_MAX (lowered here to 3); every batch still
    # matches the reference, and the tag restarts
    monkeypatch.setattr(id_map_module, "TAG_MAX", 3)
    m = IdMap(30, 1, 16, device, kind="direct")
    if m.direct is None:  # the CPU path without the interpreter: the reference map
        pytest.skip("no Triton on this device")
    for seed in range(7):
        seeds, _, hops = random_hops(30, [6], [[25], [40]], device, seed=seed)
        assert_matches_reference(m, 30, seeds, None, hops)
        assert int(m.direct.tag) == seed % 3 + 1


def test_maps_sharing_a_direct_table(device):
    # two maps of one table (as a sampler's captured graphs share it), used
    # in turn: each batch equals the reference's
    m1 = IdMap(50, 2, 16, device, kind="direct")
    if m1.direct is None:
        pytest.skip("no Triton on this device")
    m2 = IdMap(50, 1, 16, device, kind="direct", direct=m1.direct)
    assert m2.table is m1.table
    for seed in range(3):
        seeds, seeds_batch, hops = random_hops(50, [5, 4], [[20, 30]], device, seed=seed)
        assert_matches_reference(m1, 50, seeds, seeds_batch, hops)
        seeds, _, hops = random_hops(50, [9], [[35], [50]], device, seed=10 + seed)
        assert_matches_reference(m2, 50, seeds, None, hops)
    with pytest.raises(ValueError, match="direct table of 50 keys"):
        IdMap(50, 2, 16, device, kind="direct", direct=id_map_module.DirectTable(50, device))


def test_id_map_kind_is_checked(device):
    with pytest.raises(ValueError, match="kind must be"):
        IdMap(10, 1, 16, device, kind="array")


def test_direct_map_refuses_positions_past_its_word(device, monkeypatch):
    # a direct word holds candidate positions below 2^36 (LOW_MAX, lowered
    # here on the host side): a batch past it is refused with a ValueError,
    # counted from its own seeds (not from the batch before)
    m = IdMap(30, 1, 16, device, kind="direct")
    if m.direct is None:
        pytest.skip("no Triton on this device")
    monkeypatch.setattr(id_map_module, "LOW_MAX", 100)
    seeds, _, hops = random_hops(30, [60], [[35]], device, seed=1)
    assert_matches_reference(m, 30, seeds, None, hops)  # 95 positions
    assert_matches_reference(m, 30, seeds, None, hops)  # the next batch starts again at 0
    with pytest.raises(ValueError, match="candidates: a direct id map takes at most 100"):
        m.start(seeds)
        m.insert(*hops[0][:2])
        m.insert(*hops[0][:2])


def test_the_seen_filter_keeps_a_batch_s_only_candidates_off_the_table(device, monkeypatch):
    # with the filter, a node met once in the batch (here in the last hop,
    # which writes no local ids) never touches its word; nodes met twice,
    # or met before, do; the batch still equals the reference's. Bits of
    # every position of a filter word (node % 16 up to 15) are used.
    monkeypatch.setattr(id_map_module, "SEEN_MIN_NODES", 0)
    m = IdMap(40, 2, 16, device, kind="direct")
    if m.direct is None:
        pytest.skip("no Triton on this device")
    seeds = torch.tensor([3, 15, 31, 15], device=device)
    seeds_batch = torch.tensor([0, 0, 1, 1], device=device)
    # sub-batch 0: 16 and 31 once, 3 (a seed) and 20 twice; sub-batch 1: 3 and 15 (a seed) once, 20 once,
    # 7 twice (key 47: the word's top two bits)
    cand = torch.tensor([16, 3, 20, 31, 20, 3, 3, 15, 7, 20, 7], device=device)
    cand_batch = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1], device=device)
    hops = [(cand, torch.tensor([11], device=device), cand_batch, None)]
    assert_matches_reference(m, 40, seeds, seeds_batch, hops, last=True)
    tag = int(m.direct.tag)
    words = m.table.cpu()
    touched = {(b, v) for b in range(2) for v in range(40) if int(words[b * 40 + v]) >> 37 == tag}
    assert touched == {(0, 3), (0, 15), (0, 20), (1, 31), (1, 15), (1, 7)}
    bits = m._seen.cpu()
    state = {(b, v): (int(bits[(b * 40 + v) >> 4]) >> (2 * ((b * 40 + v) & 15))) & 3
             for b, v in [(0, 16), (0, 31), (0, 20), (0, 3), (0, 15), (1, 3), (1, 20), (1, 15), (1, 7), (0, 7)]}
    assert state == {(0, 16): 1, (0, 31): 1, (0, 20): 3, (0, 3): 3, (0, 15): 1, (1, 3): 1, (1, 20): 1, (1, 15): 3,
                     (1, 7): 3, (0, 7): 0}


def test_the_seen_filter_follows_the_l2(monkeypatch):
    # by default: where one sub-batch's words take more than twice the L2,
    # on a GPU; never without one
    monkeypatch.setattr(id_map_module, "SEEN_MIN_NODES", None)
    assert not id_map_module.seen_filters(10**9, "cpu")
    monkeypatch.setattr(id_map_module, "SEEN_MIN_NODES", 100)
    assert id_map_module.seen_filters(100, "cpu") and not id_map_module.seen_filters(99, "cpu")


def test_a_direct_table_given_to_a_hash_map_is_refused(device):
    table = id_map_module.DirectTable(100, device)
    with pytest.raises(ValueError, match="a direct table was given for a hash map"):
        IdMap(50, 2, 16, device, kind="hash", direct=table)


@given(keys=st.lists(st.integers(0, 5), min_size=1, max_size=40), data=st.data())
def test_prior_words_flag_first_occurrences_in_any_arrival_order(keys, data):
    # The direct map's flag protocol (the insert and flag kernels' arithmetic, in
    # Python): each candidate's atomic max returns the word it found; a claim
    # of this hop it beat is marked displaced; a candidate is its node's first
    # occurrence iff it found a smaller word and was never displaced. Triton's
    # interpreter runs lanes in position order, where no claim is ever
    # beaten: here the arrival order is any permutation (a GPU's)
    shift, local_bit, low_max = id_map_module.TAG_SHIFT, id_map_module.LOCAL_BIT, id_map_module.LOW_MAX
    tag, stamp_base = 5, 7  # a later hop of the batch: positions start past the earlier hops'
    table = {k: data.draw(st.sampled_from([0, (tag - 1) << shift | 3,  # free, an earlier batch's word
                                           tag << shift | local_bit | 2]))  # an earlier hop's node
             for k in set(keys)}
    known = {k for k, word in table.items() if word & local_bit and word >> shift == tag}

    def claim(i):
        return tag << shift | (low_max - (stamp_base + i))
    order = data.draw(st.permutations(range(len(keys))))
    prior, displaced = [0] * len(keys), [0] * len(keys)
    for i in order:
        old = table[keys[i]]
        table[keys[i]] = max(old, claim(i))
        prior[i] = old
        pos = low_max - (old & low_max) - stamp_base
        if old < claim(i) and old >> shift == tag and not old & local_bit and 0 <= pos < len(keys):
            displaced[pos] = 1
    flags = [prior[i] < claim(i) and not displaced[i] for i in range(len(keys))]
    first = [keys[i] not in known and keys.index(keys[i]) == i for i in range(len(keys))]
    assert flags == first
