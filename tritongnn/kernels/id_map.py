"""Fused global-to-local id mapping (FastGL's Fused-Map), keyed by sub-batch.

Every sampled neighbour must become a local id of its mini-batch: an old one if
the node is already in the batch, else the next free one, in order of first
appearance (seeds first, then each hop's new nodes in the order PyG's sampler
meets them). One open-addressing hash table holds the batch's nodes across all
hops; its key is ``sub_batch * num_nodes + node``, so K mini-batches sampled
in one launch (super-batching) keep separate id spaces in one table.

Why a hash table with atomic CAS and not an atomic-free flag array + prefix
sum: a flag array needs ``num_nodes`` entries per sub-batch (111M nodes x K
sub-batches) and a memset of all of them per batch, while a batch touches
~10^5 nodes. The table has ``2 x`` the batch's nodes at most, so it stays in
L2 and its reset is a few microseconds.

Why not "first insert takes ``atomic_add(counter)``" (FastGL): which
duplicate wins the race changes run to run, so local ids would be
nondeterministic under a fixed seed. Instead each hop runs three passes:

1. ``_insert_kernel``: CAS the key into its slot (linear probing), then
   ``atomic_min`` the slot's stamp with ``hop << 40 | position``. A node already
   present from an earlier hop keeps its smaller stamp.
2. ``_flag_kernel``: a candidate is its node's representative (first
   occurrence) iff the slot's stamp is its own; ``torch.cumsum`` of the flags
   ranks the new nodes in order of first appearance (the atomic-free prefix
   sum, on the new nodes only).
3. ``_assign_kernel``: every candidate reads its local id: old nodes from the
   slot, new nodes as ``base[b] + rank of their representative`` (computed,
   not read, so no pass has to wait for another's writes). Representatives
   write the slot's local id and append the node to the hop's new nodes.

Deterministic for a given candidate list, and equal, element for element, to
the pure-torch ``reference.IdMap``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import reference
from .outputs import MappedHop
from ._launch import next_power_of_2, use_triton

_EMPTY = -1           # free slot key
_NO_MATCH = -3        # a compare value no key equals: lanes that are done CAS with it (a no-op)
_HOP_SHIFT = 40       # stamp = hop << 40 | candidate position: up to 2^40 candidates a hop
_STAMP_FREE = 2**62   # stamp of a slot no candidate claimed yet


@triton.jit
def _slot_of(keys, key, m, cap_mask, hash_shift):
    # Fibonacci hashing (top bits of key * 2^64 / phi); probe linearly until
    # the key or an empty slot is met. The table is at most half full.
    b_slot = ((key.to(tl.uint64) * 0x9E3779B97F4A7C15) >> hash_shift).to(tl.int64) & cap_mask
    b_active = m
    while tl.max(b_active.to(tl.int32), axis=0) > 0:
        # tl.atomic_cas has no mask: finished lanes compare with _NO_MATCH, which
        # never equals a stored key, so they write nothing.
        b_cmp = tl.where(b_active, -1, -3).to(tl.int64)
        b_prev = tl.atomic_cas(keys + b_slot, b_cmp, key)
        b_done = b_active & ((b_prev == -1) | (b_prev == key))
        b_active = b_active & ~b_done
        b_slot = tl.where(b_active, (b_slot + 1) & cap_mask, b_slot)
    return b_slot


@triton.jit(do_not_specialize=["bound", "num_nodes", "hop_stamp", "cap_mask", "hash_shift"])
def _insert_kernel(
    keys,        # [cap] int64 table keys (-1 = empty)
    stamps,      # [cap] int64 min (hop << 40 | position) of the slot's claimants
    cand,        # [bound] int64 global node ids
    cand_batch,  # [bound] int64 sub-batch of each candidate (if HAS_BATCH)
    num_cand,    # [1] int64 device scalar: valid prefix
    out_slot,    # [bound] int64 out: slot of each candidate
    bound,
    num_nodes,   # key = sub_batch * num_nodes + node
    hop_stamp,   # hop << 40
    cap_mask,    # table size - 1 (a power of two)
    hash_shift,  # 64 - log2(table size)
    HAS_BATCH: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i_c = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_c = (i_c < bound) & (i_c < tl.load(num_cand))
    b_key = tl.load(cand + i_c, mask=m_c, other=0)
    if HAS_BATCH:
        b_key += tl.load(cand_batch + i_c, mask=m_c, other=0) * num_nodes
    b_slot = _slot_of(keys, b_key, m_c, cap_mask, hash_shift)
    tl.atomic_min(stamps + b_slot, hop_stamp + i_c, mask=m_c)
    tl.store(out_slot + i_c, b_slot, mask=m_c)


@triton.jit(do_not_specialize=["bound", "hop_stamp"])
def _flag_kernel(
    stamps, out_slot, num_cand,
    flags,       # [bound] int32 out: 1 iff the candidate is its node's first occurrence this hop
    bound, hop_stamp,
    BLOCK: tl.constexpr,
):
    i_c = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_slot = i_c < bound
    m_c = m_slot & (i_c < tl.load(num_cand))
    b_slot = tl.load(out_slot + i_c, mask=m_c, other=0)
    b_stamp = tl.load(stamps + b_slot, mask=m_c, other=-1)
    tl.store(flags + i_c, (m_c & (b_stamp == hop_stamp + i_c)).to(tl.int32), mask=m_slot)


@triton.jit(do_not_specialize=["bound", "hop_stamp"])
def _assign_kernel(
    stamps, locals_,  # [cap] table columns; locals_ = local id of the slot's node
    out_slot, cand, cand_batch, num_cand,
    rank,        # [bound] int64 inclusive cumsum of flags (SEEDS: unused)
    base,        # [K] int64 nodes each sub-batch had before this hop
    first_rank,  # [K] int64 SEEDS: position of the sub-batch's first seed;
                 #   else: new nodes of earlier sub-batches this hop
    out_local,   # [bound] int64 out: local id of each candidate
    new_nodes,   # [bound] int64 out: global id of each new node, in rank order
    new_local,   # [bound] int64 out: its local id
    new_batch,   # [bound] int64 out: its sub-batch (if HAS_BATCH)
    bound, hop_stamp,
    SEEDS: tl.constexpr,  # hop 0: every seed takes the next id, duplicates included
    HAS_BATCH: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i_c = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_c = (i_c < bound) & (i_c < tl.load(num_cand))
    b_slot = tl.load(out_slot + i_c, mask=m_c, other=0)
    b_stamp = tl.load(stamps + b_slot, mask=m_c, other=0)
    if HAS_BATCH:
        b_batch = tl.load(cand_batch + i_c, mask=m_c, other=0)
    else:
        b_batch = tl.zeros_like(i_c)
    b_base = tl.load(base + b_batch, mask=m_c, other=0)
    b_first = tl.load(first_rank + b_batch, mask=m_c, other=0)
    b_is_current = b_stamp >= hop_stamp  # claimed in this hop, not earlier
    b_rep = b_stamp - hop_stamp
    b_is_rep = m_c & b_is_current & (b_rep == i_c)
    if SEEDS:
        b_local = b_base + i_c - b_first
        b_rank = i_c
    else:
        b_rep_rank = tl.load(rank + b_rep, mask=m_c & b_is_current, other=0) - 1
        b_old = tl.load(locals_ + b_slot, mask=m_c & ~b_is_current, other=0)
        b_local = tl.where(b_is_current, b_base + b_rep_rank - b_first, b_old)
        b_rank = b_rep_rank
    tl.store(locals_ + b_slot, b_local, mask=b_is_rep)
    tl.store(out_local + i_c, b_local, mask=m_c)
    if not SEEDS:
        tl.store(new_nodes + b_rank, tl.load(cand + i_c, mask=b_is_rep, other=0), mask=b_is_rep)
        tl.store(new_local + b_rank, b_local, mask=b_is_rep)
        if HAS_BATCH:
            tl.store(new_batch + b_rank, b_batch, mask=b_is_rep)


class IdMap:
    """Global-to-local id map of one (super-)batch, grown hop by hop.

    Args:
        num_nodes: nodes in the graph (ids are in ``[0, num_nodes)``).
        num_batches: K, sub-batches sharing the table, each with its own ids.
        capacity: keys the table is first sized for (it holds twice that
            many slots, for short probes); it grows, with one host sync, when
            a hop could overflow it.
        device: where the table lives.

    Example:
        >>> m = IdMap(num_nodes, 1, capacity=4096, device="cuda")
        >>> m.start(seeds)                      # seeds take ids 0 .. B-1
        >>> hop = m.insert(neighbours, count)   # hop.local: their local ids
    """

    def __init__(self, num_nodes: int, num_batches: int, capacity: int, device):
        self.device = torch.device(device)
        self.num_nodes = int(num_nodes)
        self.num_batches = int(num_batches)
        if self.num_batches < 1:
            raise ValueError(f"num_batches must be >= 1, got {num_batches}")
        if not use_triton(self.device):
            self._ref = reference.IdMap(num_nodes, num_batches, self.device)
            return
        self._ref = None
        cap = next_power_of_2(max(2 * int(capacity), 64))
        self.keys = torch.empty(cap, dtype=torch.int64, device=self.device)
        self.stamps = torch.empty_like(self.keys)
        self.locals = torch.empty_like(self.keys)
        self.base = torch.zeros(self.num_batches, dtype=torch.int64, device=self.device)
        self.hop = 0
        self._keys_bound = 0  # host-side upper bound on the keys inserted so far

    @property
    def capacity(self) -> int:
        return self._ref.capacity if self._ref else self.keys.numel() // 2

    @property
    def num_nodes_per_batch(self) -> torch.Tensor:
        """``[K]`` int64: nodes each sub-batch holds so far."""
        return self._ref.base if self._ref else self.base

    def _buffers(self, bound):
        def empty():
            return torch.empty(bound, dtype=torch.int64, device=self.device)
        return empty

    def start(self, seeds: torch.Tensor, seeds_batch: torch.Tensor | None = None) -> torch.Tensor:
        """Reset the map and insert the seeds; seed ``i`` of a sub-batch takes
        local id ``i`` (a repeated seed keeps its own slot in ``n_id``; later
        hops map to its first occurrence, as PyG's sampler does).

        Args:
            seeds: ``[B]`` int64 global ids, grouped by sub-batch.
            seeds_batch: ``[B]`` int64 sub-batch of each seed (None: one batch).

        Returns:
            ``[B]`` int64 local id of each seed.
        """
        if self._ref:
            return self._ref.start(seeds, seeds_batch)
        bound = seeds.numel()
        if bound > self.capacity:
            self._allocate(bound)
        self.keys.fill_(_EMPTY)
        self.stamps.fill_(_STAMP_FREE)
        self.hop = 0
        self._keys_bound = bound
        count = torch.full((1,), bound, dtype=torch.int64, device=self.device)
        if seeds_batch is None:
            first = torch.zeros(1, dtype=torch.int64, device=self.device)
            self.base = count.clone()
        else:
            # not bincount: on a GPU it reads the max back (a sync, which a
            # CUDA graph capture of a super-batch cannot hold)
            per_batch = torch.zeros(self.num_batches, dtype=torch.int64, device=self.device)
            per_batch.scatter_add_(0, seeds_batch, torch.ones_like(seeds_batch))
            first = torch.cumsum(per_batch, 0) - per_batch
            self.base = per_batch
        slot = self._insert(seeds, seeds_batch, count, bound)
        local = torch.empty(bound, dtype=torch.int64, device=self.device)
        if bound:
            _assign_kernel[(triton.cdiv(bound, 1024),)](
                self.stamps, self.locals, slot, seeds, seeds_batch, count,
                slot, torch.zeros_like(first), first, local, local, local, local,
                bound, 0, SEEDS=True, HAS_BATCH=seeds_batch is not None, BLOCK=1024)
        return local

    def _allocate(self, capacity: int) -> None:
        size = next_power_of_2(max(2 * int(capacity), 64))
        self.keys = torch.full((size,), _EMPTY, dtype=torch.int64, device=self.device)
        self.stamps = torch.full_like(self.keys, _STAMP_FREE)
        self.locals = torch.empty_like(self.keys)

    def _grow(self, incoming: int) -> None:
        # A full table would make the probe loop spin forever: before a hop
        # that could overflow it, count the keys (one sync) and rehash them
        # into a larger table if needed.
        held = int(self.base.sum().item())
        self._keys_bound = held
        if held + incoming <= self.capacity:
            return
        m_used = self.keys >= 0
        keys, stamps, locals_ = self.keys[m_used], self.stamps[m_used], self.locals[m_used]
        self._allocate(held + incoming)
        count = torch.full((1,), keys.numel(), dtype=torch.int64, device=self.device)
        # Keys already carry their sub-batch: insert them as plain ids.
        slot = self._insert(keys, None, count, keys.numel())
        self.stamps[slot] = stamps
        self.locals[slot] = locals_

    def _insert(self, cand, cand_batch, count, bound):
        slot = torch.empty(bound, dtype=torch.int64, device=self.device)
        if bound:
            _insert_kernel[(triton.cdiv(bound, 1024),)](
                self.keys, self.stamps, cand, cand_batch, count, slot, bound,
                self.num_nodes, self.hop << _HOP_SHIFT, self.keys.numel() - 1,
                65 - self.keys.numel().bit_length(), HAS_BATCH=cand_batch is not None, BLOCK=1024)
        return slot

    def insert(self, cand: torch.Tensor, num_cand: torch.Tensor,
               cand_batch: torch.Tensor | None = None, cand_ptr: torch.Tensor | None = None) -> MappedHop:
        """Map one hop's sampled neighbours to local ids, adding new nodes.

        Args:
            cand: ``[bound]`` int64 global ids; the first ``num_cand`` are valid.
            num_cand: ``[1]`` int64 device scalar.
            cand_batch: ``[bound]`` int64 sub-batch of each candidate, grouped
                (non-decreasing) like the candidates; None for one batch.
            cand_ptr: with ``cand_batch``, ``[K' + 1]`` int64 device: where
                each of the first K' sub-batches' candidates start
                (``cand_ptr[K'] == num_cand``; the sampler's ``edge_ptr``):
                new nodes are then counted per sub-batch by gathers from the
                prefix sum, not by atomics into K counters.

        Returns:
            ``MappedHop``. Raises ValueError when ``bound`` more keys could
            overflow the table (the caller sizes ``capacity`` for the batch).
        """
        if self._ref:
            return self._ref.insert(cand, num_cand, cand_batch)  # counts on the CPU: no cand_ptr needed
        bound = cand.numel()
        if self._keys_bound + bound > self.capacity:
            self._grow(bound)
        self._keys_bound += bound
        self.hop += 1
        hop_stamp = self.hop << _HOP_SHIFT
        slot = self._insert(cand, cand_batch, num_cand, bound)
        flags = torch.empty(bound, dtype=torch.int32, device=self.device)
        empty = self._buffers(bound)
        local, new_nodes, new_local = empty(), empty(), empty()
        new_batch = empty() if cand_batch is not None else None
        if bound == 0:
            zero = torch.zeros(1, dtype=torch.int64, device=self.device)
            return MappedHop(local, new_nodes, new_local, new_batch, zero,
                             torch.zeros_like(self.base))
        grid = (triton.cdiv(bound, 1024),)
        _flag_kernel[grid](self.stamps, slot, num_cand, flags, bound, hop_stamp, BLOCK=1024)
        rank = torch.cumsum(flags, 0)
        num_new = rank[-1:]
        if cand_batch is None:
            per_batch = num_new
            first = torch.zeros(1, dtype=torch.int64, device=self.device)
        elif cand_ptr is not None:
            # new nodes of sub-batch k: rank at its end minus rank at its start
            # (measured at cf91ccd: atomics of every candidate into K counters
            # made a super-batch of 2 sample at 0.45x the speed of 2 batches)
            rank_ex = torch.cat([rank.new_zeros(1), rank])
            per_batch = torch.zeros(self.num_batches, dtype=torch.int64, device=self.device)
            per_batch[:cand_ptr.numel() - 1] = rank_ex[cand_ptr[1:]] - rank_ex[cand_ptr[:-1]]
            first = torch.cumsum(per_batch, 0) - per_batch
        else:
            # Slots past num_cand hold garbage sub-batch ids; their flags are 0.
            # (Every candidate adds into one of K counters: contended atomics.)
            per_batch = torch.zeros(self.num_batches + 1, dtype=torch.int64, device=self.device)
            per_batch.scatter_add_(0, cand_batch.clamp(0, self.num_batches), flags.to(torch.int64))
            per_batch = per_batch[:self.num_batches]
            first = torch.cumsum(per_batch, 0) - per_batch
        _assign_kernel[grid](
            self.stamps, self.locals, slot, cand, cand_batch, num_cand, rank,
            self.base, first, local, new_nodes, new_local, new_batch if new_batch is not None else local,
            bound, hop_stamp, SEEDS=False, HAS_BATCH=cand_batch is not None, BLOCK=1024)
        self.base = self.base + per_batch
        return MappedHop(local, new_nodes, new_local, new_batch, num_new, per_batch)
