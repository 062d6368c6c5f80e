"""Fused global-to-local id mapping (FastGL's Fused-Map), keyed by sub-batch.

Every sampled neighbour must become a local id of its mini-batch: an old one if
the node is already in the batch, else the next free one, in order of first
appearance (seeds first, then each hop's new nodes in the order PyG's sampler
meets them). One table holds the batch's nodes across all hops; its key is
``sub_batch * num_nodes + node``, so K mini-batches sampled in one launch
(super-batching) keep separate id spaces in one table. The table is one of
two kinds:

* **direct** (where ``K x num_nodes`` int64 words take at most
  ``DIRECT_MAX_BYTES``, 4 GiB: 537M node-sub-batches; ogbn-papers100M's 111M
  nodes up to K = 4, 5x10^7 nodes up to K = 10): one word per key, the key
  is the slot. A word is
  ``tag << 37 | kind << 36 | low``; the tag is the batch's (a device counter
  each ``start`` adds one to), so the words of every earlier batch read as
  free without a memset of the table (a batch touches ~10^6 of its 10^8
  words). Kind 0 is a claim, ``low = 2^36 - 1 - position``, so
  ``atomic_max`` keeps the first claimant and a later batch's claim beats
  any earlier batch's word; kind 1 holds the node's local id, written by its
  representative, and beats every claim of its batch (later hops' nodes
  find it). One atomic per candidate, no probing. The tag has 26 bits: the
  host counts batches and clears the table once every ``TAG_MAX`` (67M).
* **hash** (open addressing with atomic CAS): ``2 x`` the keys a batch can
  ask at most, reset by a fill per batch. For graphs too large for a
  direct table: it needs memory per key asked, not per node.

Why not "first insert takes ``atomic_add(counter)``" (FastGL): which
duplicate wins the race changes run to run, so local ids would be
nondeterministic under a fixed seed. Instead each hop runs three passes:

1. ``_insert_kernel``: CAS the key into its slot (linear probing), then
   ``atomic_min`` the slot's stamp with the candidate's stamp, ``stamp_base
   + position``; ``stamp_base`` grows with every hop's candidates, so a node
   already present from an earlier hop keeps its smaller stamp.
2. ``_flag_kernel``: a candidate is its node's representative (first
   occurrence) iff the slot's stamp is its own; ``torch.cumsum`` of the flags
   ranks the new nodes in order of first appearance (the atomic-free prefix
   sum, on the new nodes only).
3. ``_assign_kernel``: every candidate reads its local id: old nodes from the
   slot, new nodes as ``base[b] + rank of their representative`` (computed,
   not read, so no pass has to wait for another's writes). Representatives
   write the slot's local id and append the node to the hop's new nodes.

Candidates' slots are int32 and the ranks too, where they fit (``_INT32_LIMIT``):
the flag and assign passes read each slot, and the assign reads a
representative's rank at a random position, from half the bytes. A
hop inserted with ``last=True`` (the sampler's last) writes no local ids
back to the table, nor ``new_local``: no later hop looks them up.

A direct table runs the same passes on its words: the insert is one
``atomic_max`` of the candidate's claim, the flag compares the word with the
candidate's own claim without reading the table back (from the word its
insert's atomic found: ``id_map_kernels``), and in the assign a
candidate that reads a local word (kind 1) takes its id: a node of an
earlier hop, or one of this hop whose representative wrote its word first,
which is the id the candidate would compute.

On a graph whose words outgrow the L2 the direct map also keeps a **seen
filter** (``SEEN_MIN_NODES``): two bits a key in an int32 array 1/32 the
words' size (12.5 MB a sub-batch at 5x10^7 nodes), which the L2 holds.
Before a hop's insert, ``_seen_kernel`` sets each candidate's first bit and,
where the bit was already set, its second: after it, a key's bits read 1
only for a node met once so far in the batch, in this hop. Such a
candidate is its node's first occurrence and no earlier hop's node: the
insert leaves the table alone (the random HBM atomic) and hands the flag
pass an empty prior word, which makes it the representative. Only keys
read 3 (an earlier hop's node, or several candidates of this hop) take the
atomic. The seeds are marked the same way, so the filter is zeroed, not
tagged, at each ``start``. Same ids, candidate for candidate.

Hash table layout: one row of four words per slot (key, stamp, local id,
unused), int32 where the keys fit (``K x num_nodes < 2^31 - 1``: 16 B a slot), else
int64 (32 B). A row never straddles a 32 B sector, so a candidate's CAS and
min, its flag's read and its assignment each touch one sector of the table,
where three separate arrays took five (a batch of 8000 at [15, 10, 5] asks
7.3M keys: its table is far past the L2, and every touch is an HBM access).
An empty slot's key and a free stamp are both the word's largest value: the
reset is one fill of the table.

**Hop-major numbering** (``hop_major=True``, PyG's ``disjoint`` layout):
keys stay per sub-batch, but local ids count over all K sub-batches in
hop-major order: seed ``i`` is id ``i``, and each hop's new nodes take the
next ids, sub-batch by sub-batch. The assign pass computes ``base[b] + rank
- first[b]`` either way; a hop-major map passes ``nodes so far + first[b]``
as ``base`` (one add of K words a hop). Its last hop also returns each new
node's sub-batch (``new_batch``).

The device passes are in ``id_map_kernels``; this module holds the tables
and the map that launches them. Deterministic for a given candidate list,
and equal, element for element, to the pure-torch ``reference.IdMap``.
"""
from __future__ import annotations

import torch
import triton

from . import reference
from .outputs import MappedHop
from ._launch import l2_bytes, next_power_of_2, on_device, on_device_of, use_triton
from .id_map_kernels import (LOCAL_BIT, LOW_MAX, TAG_SHIFT, _ASSIGN_BLOCK, _ASSIGN_WARPS, _FLAG_BLOCK, _FLAG_WARPS,
                             _INSERT_BLOCK, _INSERT_WARPS, _assign_kernel, _flag_kernel, _insert_kernel, _seen_kernel)

__all__ = ["IdMap", "DirectTable", "direct_fits", "seen_filters", "DIRECT_MAX_BYTES", "TAG_MAX", "TAG_SHIFT",
           "LOCAL_BIT", "LOW_MAX"]

_ROW = 4              # words per slot: key, stamp, local id, unused (a row within one 32 B sector)
_KEY, _STAMP, _LOCAL = 0, 1, 2
# int32 tables: keys below 2^31 - 1 (the empty key) and stamps too (past it a
# batch's map widens to int64); a module constant so tests can lower it
_INT32_LIMIT = 2**31 - 1

# A direct table (module docstring) when K x num_nodes words take at most
# this. Measured on the H200, a replayed super-batch of 8 x 8000 seeds on a
# 5x10^7-node graph: the hash map's insert took 1.33 ms a batch, the direct
# table's (3.2 GB) 0.29 ms, and the batch 2.45 against 1.42 ms in all.
DIRECT_MAX_BYTES = 4 << 30
TAG_MAX = (1 << 26) - 1      # batches between two clears of the table (a module constant: tests lower it)
# The seen filter (module docstring) on direct maps of at least this many
# nodes; None: where one sub-batch's words (8 B a node) take more than twice
# the GPU's L2 (off under Triton's interpreter, where tests set it).
# Measured on the H200, 20 real batches' hops replayed (Chung-Lu 5x10^7
# nodes, batch 8000, [15, 10, 5]): the insert 0.288 ms a batch, the filter
# and an insert of the 24.5 % of candidates it leaves 0.229-0.235 (the
# filter's L2 atomics alone 0.136); the sampler alone (fused kernel, without
# / with) K=1 0.82 -> 0.74-0.76 ms a batch, K=8 0.68-0.72 -> 0.60. On
# cnr2000 (325k nodes, a table the L2 holds) forced on, it cost K=1 up to a
# quarter: hence the rule. Between the two (Chung-Lu at 20 edges a node,
# [15, 10, 5], without / with in turn in one process, ms a batch): 8M nodes
# (off by the rule) K=1 0.761 / 0.765 without against 0.777 / 0.808 with,
# K=8 0.562 / 0.567 against 0.584 / 0.555; 16M (on) K=1 0.679 / 0.687
# against 0.640 / 0.682, K=8 0.605 / 0.605 against 0.557 / 0.560; 25M (on)
# K=1 0.849 / 0.849 against 0.790 / 0.805, K=8 0.673 / 0.674 against 0.618 /
# 0.615. Marking the filter in the fused sampling kernel as it stores a
# hop's candidates, instead of this pass, does not pay: the kernel grows by
# what the pass takes (K=1 0.202 ms a batch against 0.118 + 0.083) and the
# sampler's wall does not move; the filter's time is its L2 atomics.
SEEN_MIN_NODES: int | None = None


def _empty_word(dtype: torch.dtype) -> int:
    """The empty key and the free stamp of a table of ``dtype``."""
    return torch.iinfo(dtype).max


def seen_filters(num_nodes: int, device) -> bool:
    """Whether direct maps over ``num_nodes`` nodes on ``device`` keep the
    seen filter (``SEEN_MIN_NODES``)."""
    if SEEN_MIN_NODES is not None:
        return int(num_nodes) >= SEEN_MIN_NODES
    device = torch.device(device)
    if device.type != "cuda":
        return False
    return 8 * int(num_nodes) > 2 * l2_bytes(device)


def direct_fits(num_nodes: int, num_batches: int) -> bool:
    """Whether a map of K sub-batches over ``num_nodes`` nodes takes a
    direct table (``DIRECT_MAX_BYTES``)."""
    return 8 * int(num_nodes) * int(num_batches) <= DIRECT_MAX_BYTES


class DirectTable:
    """The words of direct id maps: one int64 per (sub-batch, node), tagged
    by batch (module docstring), shareable by every map of one sampler whose
    batches run one after another on one stream.

    Args:
        num_keys: K x num_nodes, the keys it serves (maps of K' <= K too).
        device: where it lives.
    """

    def __init__(self, num_keys: int, device):
        self.words = torch.zeros(int(num_keys), dtype=torch.int64, device=device)
        self.tag = torch.zeros(1, dtype=torch.int64, device=device)  # the current batch's, on the device
        self._batches = 0  # batches since the last clear, counted on the host
        self.seen: torch.Tensor | None = None  # the seen filter's bits, once a map asks (``seen_bits``)

    def seen_bits(self) -> torch.Tensor:
        """The seen filter's words (two bits a key), allocated at the first
        call: a map asks when it is made, not inside a CUDA graph capture."""
        if self.seen is None:
            self.seen = torch.zeros((self.num_keys + 15) // 16, dtype=torch.int32, device=self.words.device)
        return self.seen

    @property
    def num_keys(self) -> int:
        return self.words.numel()

    def next_batch(self) -> None:
        """Count a batch about to take the next tag (a map's ``start``, run
        or replayed); before the tag would pass ``TAG_MAX``, clear the words
        and the tag. Not inside a CUDA graph capture (the capture records the
        tag's increment; the replay counts it)."""
        if self.words.is_cuda and torch.cuda.is_current_stream_capturing():
            return
        self._batches += 1
        if self._batches > TAG_MAX:
            self.words.zero_()
            self.tag.zero_()
            self._batches = 1


class IdMap:
    """Global-to-local id map of one (super-)batch, grown hop by hop.

    Args:
        num_nodes: nodes in the graph (ids are in ``[0, num_nodes)``).
        num_batches: K, sub-batches sharing the table, each with its own ids.
        capacity: keys a hash table is first sized for (it holds twice that
            many slots, for short probes); it grows, with one host sync, when
            a hop could overflow it. A direct table holds every key.
        device: where the table lives.
        kind: ``"direct"`` (one word per key, ``K x num_nodes`` words),
            ``"hash"``, or ``"auto"``: direct when ``direct_fits``.
        direct: with a direct kind, the ``DirectTable`` to use (shared with
            other maps; at least ``K x num_nodes`` keys); None: its own.
        hop_major: number local ids over all K sub-batches in hop-major
            order (module docstring; PyG's ``disjoint``), not per sub-batch.

    A hash table's words are int32 when every key fits (``num_batches *
    num_nodes < 2^31 - 1``), else int64; an int32 table widens to int64
    (one sync) before a batch's stamps would pass 2^31 - 1 (more candidates
    in one batch than that).

    Example:
        >>> m = IdMap(num_nodes, 1, capacity=4096, device="cuda")
        >>> m.start(seeds)                      # seeds take ids 0 .. B-1
        >>> hop = m.insert(neighbours, count)   # hop.local: their local ids
    """

    def __init__(self, num_nodes: int, num_batches: int, capacity: int, device, kind: str = "auto",
                 direct: DirectTable | None = None, hop_major: bool = False):
        self.device = torch.device(device)
        self.num_nodes = int(num_nodes)
        self.num_batches = int(num_batches)
        self.hop_major = bool(hop_major)
        if self.num_batches < 1:
            raise ValueError(f"num_batches must be >= 1, got {num_batches}")
        if kind not in ("auto", "direct", "hash"):
            raise ValueError(f"kind must be 'auto', 'direct' or 'hash', got {kind!r}")
        if not use_triton(self.device):
            self._ref = reference.IdMap(num_nodes, num_batches, self.device, hop_major=self.hop_major)
            self.direct = self._seen = None
            return
        self._ref = None
        keys = self.num_batches * self.num_nodes
        if kind == "direct" or (kind == "auto" and direct_fits(self.num_nodes, self.num_batches)):
            if direct is None:
                direct = DirectTable(keys, self.device)
            elif direct.num_keys < keys or not on_device(direct.words, self.device):
                raise ValueError(f"direct table of {direct.num_keys} keys on {direct.words.device}: "
                                 f"this map needs {keys} on {self.device}")
            self.direct = direct
            self.table, self._tag = direct.words, direct.tag
            # this map's keys' words of the filter (zeroed at each start)
            self._seen = direct.seen_bits()[:(keys + 15) // 16] if seen_filters(num_nodes, self.device) else None
        else:
            if direct is not None:
                raise ValueError(f"a direct table was given for a hash map (kind={kind!r}, {keys} keys: "
                                 f"direct_fits is {direct_fits(self.num_nodes, self.num_batches)})")
            self.direct = None
            self._seen = None
            self._tag = torch.zeros(1, dtype=torch.int64, device=self.device)  # unused by the hash kernels
            narrow = keys < _INT32_LIMIT
            self._allocate(capacity, torch.int32 if narrow else torch.int64)
        self.base = torch.zeros(self.num_batches, dtype=torch.int64, device=self.device)
        self._total = None  # hop-major: [1] nodes of every sub-batch so far (set by ``start``)
        self._closed = False  # a hop was inserted with last=True since the last start
        self._keys_bound = 0  # host-side upper bound on the keys inserted so far
        self._stamp_base = 0  # stamp of the next hop's first candidate: every hop's come after the last's

    @property
    def capacity(self) -> int | float:
        """Keys the map holds before it must grow (a direct map: every key)."""
        if self._ref or self.direct is not None:
            return float("inf")
        return self.table.shape[0] // 2

    @property
    def num_nodes_per_batch(self) -> torch.Tensor:
        """``[K]`` int64: nodes each sub-batch holds so far."""
        return self._ref.base if self._ref else self.base

    def lookup_args(self) -> tuple:
        """``(table, tag, cap_mask, hash_shift, EMPTY, DIRECT)``: what
        ``id_map_kernels._lookup_local`` reads the map's local ids with (a
        kernel of another module looking nodes up after ``start``)."""
        if self._ref:
            raise ValueError("a reference id map (no Triton) has no table to look up in a kernel")
        size = self.table.shape[0]
        return (self.table, self._tag, size - 1, 65 - size.bit_length(), _empty_word(self.table.dtype),
                self.direct is not None)

    def _buffers(self, bound):
        def empty():
            return torch.empty(bound, dtype=torch.int64, device=self.device)
        return empty

    @on_device_of("self")
    def start(self, seeds: torch.Tensor, seeds_batch: torch.Tensor | None = None) -> torch.Tensor:
        """Reset the map and insert the seeds; seed ``i`` of a sub-batch takes
        local id ``i`` (a repeated seed keeps its own slot in ``n_id``; later
        hops map to its first occurrence, as PyG's sampler does).

        Args:
            seeds: ``[B]`` int64 global ids, grouped by sub-batch.
            seeds_batch: ``[B]`` int64 sub-batch of each seed (None: one batch).

        Returns:
            ``[B]`` int64 local id of each seed (``hop_major``: its position).
        """
        if self._ref:
            return self._ref.start(seeds, seeds_batch)
        bound = seeds.numel()
        if self.direct is not None:
            self._check_positions(0, bound)
            self.direct.next_batch()
            self._tag.add_(1)  # a new tag: every word of an earlier batch reads as free
        else:
            wide = self.table.dtype == torch.int32 and bound >= _INT32_LIMIT  # the seeds' stamps past int32
            if bound > self.capacity or wide:
                self._allocate(max(bound, self.capacity), torch.int64 if wide else self.table.dtype)
            self.table.fill_(_empty_word(self.table.dtype))  # every key empty, every stamp free
        self._keys_bound = bound
        self._stamp_base = bound
        count = torch.full((1,), bound, dtype=torch.int64, device=self.device)
        if seeds_batch is None:  # all in sub-batch 0 (of a map of K)
            first = torch.zeros(1, dtype=torch.int64, device=self.device)
            self.base = torch.cat([count, count.new_zeros(self.num_batches - 1)])
        else:
            # not bincount: on a GPU it reads the max back (a sync, which a
            # CUDA graph capture of a super-batch cannot hold)
            per_batch = torch.zeros(self.num_batches, dtype=torch.int64, device=self.device)
            per_batch.scatter_add_(0, seeds_batch, torch.ones_like(seeds_batch))
            first = torch.cumsum(per_batch, 0) - per_batch
            self.base = per_batch
        if self.hop_major:  # seed i takes id i, whatever its sub-batch
            self._total = count
            first = torch.zeros_like(first)
        if self._seen is not None:  # every seed's key met: a candidate of it takes the table
            self._seen.zero_()
            self._mark_seen(seeds, seeds_batch, count, bound)
        slot = self._insert(seeds, seeds_batch, count, bound, 0)
        local = torch.empty(bound, dtype=torch.int64, device=self.device)
        if bound:
            _assign_kernel[(triton.cdiv(bound, _ASSIGN_BLOCK),)](
                self.table, self._tag, slot, seeds, seeds_batch, count, slot, slot,
                slot, torch.zeros_like(first), first, local, local, local, local,
                bound, 0, SEEDS=True, LAST=False, BATCH_OUT=False, HAS_BATCH=seeds_batch is not None,
                DIRECT=self.direct is not None, PRIOR=False, BLOCK=_ASSIGN_BLOCK, num_warps=_ASSIGN_WARPS)
        self._closed = False
        return local

    @staticmethod
    def _check_positions(stamp_base: int, bound: int) -> None:
        # a direct word holds positions below 2^36 (550 GB of candidate ids)
        if stamp_base + bound > LOW_MAX:
            raise ValueError(f"a batch of {stamp_base + bound} candidates: a direct id map "
                             f"takes at most {LOW_MAX}")

    def _allocate(self, capacity: int, dtype: torch.dtype) -> None:
        size = next_power_of_2(max(2 * int(capacity), 64))
        self.table = None  # free the old table before the new one is allocated
        self.table = torch.full((size, _ROW), _empty_word(dtype), dtype=dtype, device=self.device)

    def _grow(self, incoming: int, dtype: torch.dtype) -> None:
        # A full table would make the probe loop spin forever: before a hop
        # that could overflow it, count the keys (one sync) and rehash them
        # into a larger table if needed (or a wider one: ``dtype``).
        held = int(self.base.sum().item())
        self._keys_bound = held
        if held + incoming <= self.capacity and dtype == self.table.dtype:
            return
        rows = self.table[self.table[:, _KEY] != _empty_word(self.table.dtype)].to(torch.int64)
        self._allocate(max(held + incoming, self.capacity), dtype)
        count = torch.full((1,), rows.shape[0], dtype=torch.int64, device=self.device)
        # Keys already carry their sub-batch: insert them as plain ids.
        slot = self._insert(rows[:, _KEY].contiguous(), None, count, rows.shape[0], 0).long()
        self.table[slot, _STAMP] = rows[:, _STAMP].to(dtype)
        self.table[slot, _LOCAL] = rows[:, _LOCAL].to(dtype)

    def _mark_seen(self, cand, cand_batch, count, bound):
        if bound:
            _seen_kernel[(triton.cdiv(bound, _INSERT_BLOCK),)](
                self._seen, cand, cand_batch, count, bound, self.num_nodes,
                HAS_BATCH=cand_batch is not None, BLOCK=_INSERT_BLOCK, num_warps=_INSERT_WARPS)

    def _insert(self, cand, cand_batch, count, bound, stamp_base, prior=None, displaced=None, seen=False):
        # a slot in int32 where the table allows: the passes read it twice
        size = self.table.shape[0]
        slot = torch.empty(bound, dtype=torch.int32 if size < _INT32_LIMIT else torch.int64, device=self.device)
        if bound:
            _insert_kernel[(triton.cdiv(bound, _INSERT_BLOCK),)](
                self.table, self._tag, cand, cand_batch, count, slot,
                cand if prior is None else prior, cand if displaced is None else displaced,
                self._seen if seen else slot,
                bound, self.num_nodes, stamp_base, size - 1, 65 - size.bit_length(),
                EMPTY=_empty_word(self.table.dtype), HAS_BATCH=cand_batch is not None,
                DIRECT=self.direct is not None, PRIOR=prior is not None, SEEN=seen, BLOCK=_INSERT_BLOCK,
                num_warps=_INSERT_WARPS)
        return slot

    @on_device_of("self")
    def insert(self, cand: torch.Tensor, num_cand: torch.Tensor,
               cand_batch: torch.Tensor | None = None, cand_ptr: torch.Tensor | None = None,
               last: bool = False) -> MappedHop:
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
            last: no hop follows before the next ``start``: the new nodes'
                local ids are not written to the table (nothing will look
                them up), and ``new_local`` comes back None (the new nodes'
                local ids are consecutive: ``num_nodes_per_batch`` before the
                hop, plus their rank in the sub-batch; hop-major: the nodes
                before the hop plus their rank), ``new_batch`` too but for a
                hop-major map. A further insert raises ValueError.

        Returns:
            ``MappedHop``. A hash map grows first (one host sync) when
            ``bound`` more keys could overflow it (the caller sizes
            ``capacity`` for the batch); a direct map holds every key and
            raises ValueError past ``LOW_MAX`` candidates in one batch.
        """
        if self._ref:
            return self._ref.insert(cand, num_cand, cand_batch, last=last)  # counts on the CPU: no cand_ptr needed
        if self._closed:
            raise ValueError("insert after a hop inserted with last=True: start a new batch first")
        bound = cand.numel()
        if self.direct is not None:
            self._check_positions(self._stamp_base, bound)
        else:
            wide = self.table.dtype == torch.int32 and self._stamp_base + bound >= _INT32_LIMIT
            if self._keys_bound + bound > self.capacity or wide:
                self._grow(bound, torch.int64 if wide else self.table.dtype)
        self._closed = last  # only once the checks above have passed: a refused hop changes nothing
        self._keys_bound += bound
        stamp_base = self._stamp_base
        self._stamp_base += bound
        prior = displaced = None
        seen = False
        if self.direct is not None:  # the flag pass reads what the insert's atomics found
            prior = torch.empty(bound, dtype=torch.int64, device=self.device)
            displaced = torch.zeros(bound, dtype=torch.int8, device=self.device)
            seen = self._seen is not None
            if seen:
                self._mark_seen(cand, cand_batch, num_cand, bound)
        slot = self._insert(cand, cand_batch, num_cand, bound, stamp_base, prior, displaced, seen)
        flags = torch.empty(bound, dtype=torch.int32, device=self.device)
        empty = self._buffers(bound)
        local, new_nodes = empty(), empty()
        # after the last hop no frontier follows: no buffers for its local ids and sub-batches
        new_local = None if last else empty()
        batch_out = cand_batch is not None and (not last or self.hop_major)
        new_batch = empty() if batch_out else None
        if bound == 0:
            zero = torch.zeros(1, dtype=torch.int64, device=self.device)
            return MappedHop(local, new_nodes, new_local, new_batch, zero,
                             torch.zeros_like(self.base))
        direct = self.direct is not None
        if not direct:
            prior = displaced = slot  # never read
        _flag_kernel[(triton.cdiv(bound, _FLAG_BLOCK),)](
            self.table, self._tag, slot, num_cand, prior, displaced, flags, bound, stamp_base,
            DIRECT=direct, BLOCK=_FLAG_BLOCK, num_warps=_FLAG_WARPS)
        # int32 ranks where they fit: half the scan's bytes, and the assign's
        # reads of a representative's rank (random) hit a smaller array
        rank = torch.cumsum(flags, 0, dtype=torch.int32 if bound < _INT32_LIMIT else torch.int64)
        num_new = rank[-1:].to(torch.int64)
        if cand_batch is None:  # all in sub-batch 0
            per_batch = torch.cat([num_new, num_new.new_zeros(self.num_batches - 1)])
            first = torch.zeros(1, dtype=torch.int64, device=self.device)
        elif cand_ptr is not None:
            # new nodes of sub-batch k: rank at its end minus rank at its start
            # (atomics of every candidate into K counters made a super-batch
            # of 2 sample at 0.45x the speed of 2 batches, measured);
            # the inclusive rank before position p, without copying the ranks
            ptr = cand_ptr.clamp(max=bound)
            at = torch.where(ptr > 0, rank[(ptr - 1).clamp(min=0)].to(torch.int64), 0)
            per_batch = torch.zeros(self.num_batches, dtype=torch.int64, device=self.device)
            per_batch[:cand_ptr.numel() - 1] = at[1:] - at[:-1]
            first = torch.cumsum(per_batch, 0) - per_batch
        else:
            # Slots past num_cand hold garbage sub-batch ids; their flags are 0.
            # (Every candidate adds into one of K counters: contended atomics.)
            per_batch = torch.zeros(self.num_batches + 1, dtype=torch.int64, device=self.device)
            per_batch.scatter_add_(0, cand_batch.clamp(0, self.num_batches), flags.to(torch.int64))
            per_batch = per_batch[:self.num_batches]
            first = torch.cumsum(per_batch, 0) - per_batch
        # hop-major: base + rank - first is the nodes so far plus the hop-wide rank
        base = self.base if not self.hop_major else self._total + first
        _assign_kernel[(triton.cdiv(bound, _ASSIGN_BLOCK),)](
            self.table, self._tag, slot, cand, cand_batch, num_cand, flags, prior, rank,
            base, first, local, new_nodes, local if last else new_local,
            new_batch if new_batch is not None else local,
            bound, stamp_base, SEEDS=False, LAST=last, BATCH_OUT=batch_out, HAS_BATCH=cand_batch is not None,
            DIRECT=direct, PRIOR=direct, BLOCK=_ASSIGN_BLOCK, num_warps=_ASSIGN_WARPS)
        self.base = self.base + per_batch
        if self.hop_major:
            self._total = self._total + num_new
        return MappedHop(local, new_nodes, new_local, new_batch, num_new, per_batch)
