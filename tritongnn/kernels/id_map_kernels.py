"""The id map's device passes (``kernels.id_map``'s docstring): the seen
filter's marks, the insert, the flag of first occurrences and the assign,
for both kinds of table (``DIRECT``: one tagged word a key; else the hash
table's rows of four words).

A direct map's flag pass works from what each candidate's insert found (its
atomic's old word, ``prior``, and ``displaced``: marked by whichever
later-arriving candidate of the hop beat its claim), not by reading the
table back, and the assign reads the table only for a new node's later
occurrences. The insert's atomics then return their old word, which the
flag pass's random reads outweigh. Measured on the H200
(bench_super_batch.py, Chung-Lu 5x10^7 nodes / 10^9 edges, batch 8000,
[15, 10, 5], K = 1, the sampler alone, median of 5 passes of 160 batches;
reading back / from the insert / reading back in one call): 1.22 / 0.90 /
0.97 ms a batch, for 9 bytes a candidate more (sampler peak 0.95 against
0.90 GB). On a CPU (Triton's interpreter) lanes run in position order, so
no claim is ever beaten there (tests/test_id_map.py checks the protocol
over any arrival order in Python).
"""
from __future__ import annotations

import triton
import triton.language as tl

from ._launch import interpreted_block

# A direct word is tag << 37 | kind << 36 | low (``kernels.id_map``'s docstring).
TAG_SHIFT = 37
LOCAL_BIT = 1 << 36          # kind 1: low is the node's local id; kind 0: LOW_MAX - the claimant's position
LOW_MAX = (1 << 36) - 1      # positions and local ids below 2^36 (far past any GPU's memory)
_TAG_SHIFT, _LOCAL_BIT, _LOW_MAX = tl.constexpr(TAG_SHIFT), tl.constexpr(LOCAL_BIT), tl.constexpr(LOW_MAX)
# Candidates a program and its warps, per pass. Measured on the H200 (the id
# map alone replaying 20 real batches' hops, Chung-Lu 5x10^7 nodes, batch
# 8000, [15, 10, 5], 4.5M candidates a batch): the assign at 256 / 4 took
# 0.131 ms a batch against 0.161 at 1024 / 4 (128 / 2: 0.127, 512 / 4:
# 0.136, 256 / 1: 0.156), the flag at 512 / 4 0.021 against 0.028; the
# insert did not move with its shape (256 to 4096 candidates, 2 to 16
# warps: 0.279-0.312 ms, 1024 / 4 among the fastest). Under the
# interpreter, larger programs (its cost is per operation).
# Slower on the same hops: a direct insert that reads the word first and
# skips the atomic where the word already beats its claim (0.325 against
# 0.278 ms: the added dependent read costs more than the atomics it saves);
# nodes relabelled hot-first, so that hot words share sectors (insert 0.316,
# atomics on shared sectors queue; 0.297 with the read first); a compact
# hash table the L2 could mostly hold (64-bit key-and-claim words, a CAS
# then a max: 0.76 ms a batch at 64 MB and 0.57 at 512 MB against the
# direct insert's 0.29); a sort of the candidates for locality (0.25 alone).
_INSERT_BLOCK, _INSERT_WARPS = 1024, 4
_FLAG_BLOCK, _FLAG_WARPS = interpreted_block(512, 1024), 4
_ASSIGN_BLOCK, _ASSIGN_WARPS = interpreted_block(256, 1024), 4


@triton.jit
def _home_slot(key, cap_mask, hash_shift):
    # Fibonacci hashing: the top bits of key * 2^64 / phi
    return ((key.to(tl.uint64) * 0x9E3779B97F4A7C15) >> hash_shift).to(tl.int64) & cap_mask


@triton.jit
def _slot_of(table, key, m, cap_mask, hash_shift, EMPTY: tl.constexpr):
    # probe linearly from the key's home slot until the key or an empty
    # slot is met. The table is at most half full.
    b_slot = _home_slot(key, cap_mask, hash_shift)
    b_key = key.to(table.dtype.element_ty)
    b_active = m
    while tl.max(b_active.to(tl.int32), axis=0) > 0:
        # tl.atomic_cas has no mask: finished lanes compare with -3, which
        # never equals a stored key, so they write nothing.
        b_cmp = tl.where(b_active, EMPTY, -3).to(table.dtype.element_ty)
        b_prev = tl.atomic_cas(table + b_slot * 4, b_cmp, b_key, sem="relaxed")
        b_done = b_active & ((b_prev == EMPTY) | (b_prev == b_key))
        b_active = b_active & ~b_done
        b_slot = tl.where(b_active, (b_slot + 1) & cap_mask, b_slot)
    return b_slot


@triton.jit
def _lookup_local(table, tag, key, m, cap_mask, hash_shift, EMPTY: tl.constexpr, DIRECT: tl.constexpr):
    """The local id of each ``key`` (``[BLOCK]`` int64) in the map, -1 where
    it holds none: read only (``IdMap.lookup_args``). A direct word answers
    when it is a local word of this batch's tag; a hash probe stops at the
    key or at an empty slot."""
    if DIRECT:
        b_word = tl.load(table + key, mask=m, other=0)
        b_hit = m & ((b_word >> _TAG_SHIFT) == tl.load(tag)) & ((b_word & _LOCAL_BIT) != 0)
        b_local = tl.where(b_hit, b_word & _LOW_MAX, -1)
    else:
        b_slot = _home_slot(key, cap_mask, hash_shift)
        b_key = key.to(table.dtype.element_ty)
        b_local = tl.zeros_like(key) - 1
        b_active = m
        while tl.max(b_active.to(tl.int32), axis=0) > 0:
            b_stored = tl.load(table + b_slot * 4, mask=b_active, other=EMPTY)
            b_hit = b_active & (b_stored == b_key)
            b_local = tl.where(b_hit, tl.load(table + b_slot * 4 + 2, mask=b_hit, other=0).to(tl.int64), b_local)
            b_active = b_active & (b_stored != b_key) & (b_stored != EMPTY)
            b_slot = tl.where(b_active, (b_slot + 1) & cap_mask, b_slot)
    return b_local


@triton.jit
def _position_word(tag, pos):
    # a direct table's word for "claimed by the candidate at ``pos``"
    return (tag << _TAG_SHIFT) | (_LOW_MAX - pos)


@triton.jit
def _program_keys(cand, cand_batch, num_cand, bound, num_nodes, HAS_BATCH: tl.constexpr, BLOCK: tl.constexpr):
    # this program's candidate positions, which are valid, and their keys
    # (``sub_batch * num_nodes + node``)
    i_c = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_c = (i_c < bound) & (i_c < tl.load(num_cand))
    b_key = tl.load(cand + i_c, mask=m_c, other=0)
    if HAS_BATCH:
        b_key += tl.load(cand_batch + i_c, mask=m_c, other=0) * num_nodes
    return i_c, m_c, b_key


@triton.jit
def _seen_word(seen, key):
    # the filter's word of ``key`` and the shift of its two bits
    return seen + (key >> 4), ((key & 15) * 2).to(tl.int32)


@triton.jit(do_not_specialize=["bound", "num_nodes"])
def _seen_kernel(
    seen,        # [ceil(K * num_nodes / 16)] int32: two bits a key (module docstring)
    cand, cand_batch, num_cand,  # as _insert_kernel's
    bound, num_nodes,
    HAS_BATCH: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i_c, m_c, b_key = _program_keys(cand, cand_batch, num_cand, bound, num_nodes, HAS_BATCH, BLOCK)
    p_word, b_shift = _seen_word(seen, b_key)
    # relaxed: the insert reads the bits in a later launch
    b_old = tl.atomic_or(p_word, 1 << b_shift, mask=m_c, sem="relaxed")
    m_again = m_c & (((b_old >> b_shift) & 3) == 1)  # met once before: now more than once
    tl.atomic_or(p_word, 2 << b_shift, mask=m_again, sem="relaxed")


@triton.jit(do_not_specialize=["bound", "num_nodes", "stamp_base", "cap_mask", "hash_shift"])
def _insert_kernel(
    table,       # hash: [cap, 4] int32/int64 rows: key (EMPTY = free), stamp (min of its claimants), local id;
                 # DIRECT: [K * num_nodes] int64 words (module docstring)
    tag,         # [1] int64 device: this batch's tag (DIRECT)
    cand,        # [bound] int64 global node ids
    cand_batch,  # [bound] int64 sub-batch of each candidate (if HAS_BATCH)
    num_cand,    # [1] int64 device scalar: valid prefix
    out_slot,    # [bound] int32 (tables of < 2^31 slots) or int64 out: slot of each candidate
    prior,       # [bound] int64 out (PRIOR): the word each candidate's atomic found
    displaced,   # [bound] int8, zeroed (PRIOR): set for a claim a later-arriving earlier candidate beat
    seen,        # SEEN: the seen filter, after this hop's _seen_kernel
    bound,
    num_nodes,   # key = sub_batch * num_nodes + node
    stamp_base,  # stamp of the candidate at position 0
    cap_mask,    # table size - 1 (a power of two)
    hash_shift,  # 64 - log2(table size)
    EMPTY: tl.constexpr,
    HAS_BATCH: tl.constexpr,
    DIRECT: tl.constexpr,
    PRIOR: tl.constexpr,  # DIRECT only: write the words found (every hop but the seeds')
    SEEN: tl.constexpr,   # DIRECT and PRIOR only: keys met once so far skip the table
    BLOCK: tl.constexpr,
):
    i_c, m_c, b_key = _program_keys(cand, cand_batch, num_cand, bound, num_nodes, HAS_BATCH, BLOCK)
    # Relaxed atomics (Triton's default is acq_rel, a fence per atomic): no
    # lane reads what another wrote in this kernel except through the atomic
    # itself, and the flag and assign passes read the table in later launches.
    if DIRECT:  # the key is the slot: one atomic, no probing
        b_slot = b_key
        b_tag = tl.load(tag)
        b_claim = _position_word(b_tag, stamp_base + i_c)
        if PRIOR:
            # The word found tells the flag pass (module docstring) what it would
            # read back: a claim below ours (another batch's, or one of this
            # hop's later candidates) left us holding the word, for now; a
            # claim of this hop we beat is not its node's first occurrence.
            m_table = m_c
            if SEEN:  # a key whose bits read 1: its node's only candidate yet, and new
                p_word, b_shift = _seen_word(seen, b_key)
                b_bits = (tl.load(p_word, mask=m_c, other=0) >> b_shift) & 3
                m_table = m_c & (b_bits == 3)
            b_old = tl.atomic_max(table + b_slot, b_claim, mask=m_table, sem="relaxed")
            b_old = tl.where(m_table, b_old, 0)  # the empty word: the flag pass makes it a representative
            tl.store(prior + i_c, b_old, mask=m_c)
            b_beaten = (b_old >> _TAG_SHIFT == b_tag) & ((b_old & _LOCAL_BIT) == 0)
            b_pos = _LOW_MAX - (b_old & _LOW_MAX) - stamp_base
            m_beaten = m_table & b_beaten & (b_old < b_claim) & (b_pos >= 0) & (b_pos < bound)
            tl.store(displaced + b_pos, tl.full([BLOCK], 1, tl.int8), mask=m_beaten)
        else:
            tl.atomic_max(table + b_slot, b_claim, mask=m_c, sem="relaxed")
    else:
        b_slot = _slot_of(table, b_key, m_c, cap_mask, hash_shift, EMPTY)
        tl.atomic_min(table + b_slot * 4 + 1, (stamp_base + i_c).to(table.dtype.element_ty), mask=m_c,
                      sem="relaxed")
    tl.store(out_slot + i_c, b_slot.to(out_slot.dtype.element_ty), mask=m_c)


@triton.jit(do_not_specialize=["bound", "stamp_base"])
def _flag_kernel(
    table, tag, out_slot, num_cand,
    prior, displaced,  # from _insert_kernel (DIRECT)
    flags,       # [bound] int32 out: 1 iff the candidate is its node's first occurrence this hop
    bound, stamp_base,
    DIRECT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i_c = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_slot = i_c < bound
    m_c = m_slot & (i_c < tl.load(num_cand))
    if DIRECT:  # no read of the table: it held the word when it came, and nothing beat it since
        b_prior = tl.load(prior + i_c, mask=m_c, other=0)
        b_beaten = tl.load(displaced + i_c, mask=m_c, other=0)
        b_first = (b_prior < _position_word(tl.load(tag), stamp_base + i_c)) & (b_beaten == 0)
    else:
        b_slot = tl.load(out_slot + i_c, mask=m_c, other=0).to(tl.int64)
        b_stamp = tl.load(table + b_slot * 4 + 1, mask=m_c, other=-1).to(tl.int64)
        b_first = b_stamp == stamp_base + i_c
    tl.store(flags + i_c, (m_c & b_first).to(tl.int32), mask=m_slot)


@triton.jit(do_not_specialize=["bound", "stamp_base"])
def _assign_kernel(
    table,       # hash: [cap, 4] rows: key, stamp, local id (of the slot's node); DIRECT: words
    tag,         # [1] int64 device (DIRECT)
    out_slot, cand, cand_batch, num_cand,
    flags,       # [bound] int32 from _flag_kernel (PRIOR)
    prior,       # [bound] int64 from _insert_kernel (PRIOR: a direct map's hop after the seeds)
    rank,        # [bound] int32/int64 inclusive cumsum of flags (SEEDS: unused)
    base,        # [K] int64 nodes each sub-batch had before this hop
    first_rank,  # [K] int64 SEEDS: position of the sub-batch's first seed;
                 #   else: new nodes of earlier sub-batches this hop
    out_local,   # [bound] int64 out: local id of each candidate
    new_nodes,   # [bound] int64 out: global id of each new node, in rank order
    new_local,   # [bound] int64 out: its local id (unless LAST)
    new_batch,   # [bound] int64 out: its sub-batch (BATCH_OUT)
    bound, stamp_base,
    SEEDS: tl.constexpr,  # hop 0: every seed takes the next id, duplicates included
    LAST: tl.constexpr,   # no hop follows: the table and new_local are not written
    BATCH_OUT: tl.constexpr,  # write new_batch (HAS_BATCH; a last hop's only for a hop-major map)
    HAS_BATCH: tl.constexpr,
    DIRECT: tl.constexpr,
    PRIOR: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i_c = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_c = (i_c < bound) & (i_c < tl.load(num_cand))
    b_slot = tl.load(out_slot + i_c, mask=m_c, other=0).to(tl.int64)
    if DIRECT:
        # a position word: claimed this hop, by the candidate at LOW_MAX - low;
        # a local word: the node's local id (an earlier hop's node, or this
        # hop's whose representative has already written it)
        b_tag = tl.load(tag)
        if PRIOR:
            # read only by this hop's later occurrences of its new nodes: a
            # representative's word is its own claim, and an earlier hop's
            # node's local word was what the insert found
            b_rep_here = m_c & (tl.load(flags + i_c, mask=m_c, other=0) != 0)
            b_prior = tl.load(prior + i_c, mask=m_c, other=0)
            b_known = (b_prior >> _TAG_SHIFT == b_tag) & ((b_prior & _LOCAL_BIT) != 0)
            b_word = tl.load(table + b_slot, mask=m_c & ~b_rep_here & ~b_known, other=0)
            b_word = tl.where(b_rep_here, _position_word(b_tag, stamp_base + i_c),
                              tl.where(b_known, b_prior, b_word))
        else:
            b_word = tl.load(table + b_slot, mask=m_c, other=0)
        b_low = b_word & _LOW_MAX
        b_is_current = (b_word & _LOCAL_BIT) == 0
        b_stamp = _LOW_MAX - b_low
    else:
        b_row = table + b_slot * 4
        b_stamp = tl.load(b_row + 1, mask=m_c, other=0).to(tl.int64)
        b_is_current = b_stamp >= stamp_base  # claimed in this hop, not earlier
    if HAS_BATCH:
        b_batch = tl.load(cand_batch + i_c, mask=m_c, other=0)
    else:
        b_batch = tl.zeros_like(i_c)
    b_base = tl.load(base + b_batch, mask=m_c, other=0)
    b_first = tl.load(first_rank + b_batch, mask=m_c, other=0)
    b_rep = b_stamp - stamp_base
    b_is_rep = m_c & b_is_current & (b_rep == i_c)
    if SEEDS:
        b_local = b_base + i_c - b_first
        b_rank = i_c
    else:
        b_rep_rank = tl.load(rank + b_rep, mask=m_c & b_is_current, other=0).to(tl.int64) - 1
        if DIRECT:
            b_old = b_low
        else:
            b_old = tl.load(b_row + 2, mask=m_c & ~b_is_current, other=0).to(tl.int64)
        b_local = tl.where(b_is_current, b_base + b_rep_rank - b_first, b_old)
        b_rank = b_rep_rank
    if not LAST:  # later hops find the node's local id in its slot
        if DIRECT:
            tl.store(table + b_slot, (b_tag << _TAG_SHIFT) | _LOCAL_BIT | b_local, mask=b_is_rep)
        else:
            tl.store(b_row + 2, b_local.to(table.dtype.element_ty), mask=b_is_rep)
    tl.store(out_local + i_c, b_local, mask=m_c)
    if not SEEDS:
        tl.store(new_nodes + b_rank, tl.load(cand + i_c, mask=b_is_rep, other=0), mask=b_is_rep)
        if not LAST:  # the next hop's frontier: its local ids and sub-batches
            tl.store(new_local + b_rank, b_local, mask=b_is_rep)
        if BATCH_OUT:
            tl.store(new_batch + b_rank, b_batch, mask=b_is_rep)
