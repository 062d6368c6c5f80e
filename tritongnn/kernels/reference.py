"""Pure-torch references of every kernel: the tests' oracle and the CPU path.

Each function has the signature and output contract of its Triton launcher.
Sampling draws from the same distributions as the kernels (not the same random
stream); the id map and the gather are deterministic and must match the
kernels element for element.
"""
from __future__ import annotations

import torch

from .outputs import ClassifiedFrontier, HopSample, MappedHop


def sample_counts(degree: torch.Tensor, fanout: int, replace: bool) -> torch.Tensor:
    """Neighbours drawn per node: ``degree`` for fanout -1, ``fanout`` (0 when
    isolated) with replacement, ``min(degree, fanout)`` without."""
    if fanout == -1:
        return degree.clone()
    if replace:
        return torch.where(degree > 0, fanout, 0).to(torch.int64)
    return degree.clamp(max=fanout)


def floyd_sample(degree: torch.Tensor, fanout: int, generator=None) -> torch.Tensor:
    """``[n, fanout]`` distinct positions in ``[0, degree_i)`` per row, every
    ``fanout``-subset equally likely (Robert Floyd's algorithm). Requires
    ``degree > fanout`` on every row."""
    n = degree.numel()
    chosen = torch.full((n, fanout), -1, dtype=torch.int64, device=degree.device)
    for s in range(fanout):
        top = degree - fanout + s  # draw t uniform in [0, top]
        u = torch.rand(n, generator=generator, dtype=torch.float64, device=degree.device)
        t = (u * (top + 1).to(torch.float64)).long().clamp(max=top)
        seen = (chosen == t[:, None]).any(1)
        chosen[:, s] = torch.where(seen, top, t)
    return chosen


def full_nodes(degree: torch.Tensor, fanout: int, replace: bool) -> torch.Tensor:
    """Nodes that take their whole row with no random draw: every node for
    fanout -1, ``degree <= fanout`` without replacement, isolated nodes."""
    if fanout == -1:
        return torch.ones_like(degree, dtype=torch.bool)
    if replace:
        return degree == 0
    return degree <= fanout


def classify_frontier(indptr, frontier, num_frontier, fanout, replace=False, frontier_batch=None,
                      batch_ptr=None, bounds=None) -> ClassifiedFrontier:
    """Reference of ``kernels.classify.classify_frontier`` (outputs sized to
    the valid prefix, except ``edge_ptr``/``num_full``)."""
    n = int(num_frontier.reshape(-1)[0])
    nodes = frontier[:n]
    if bounds is None:
        start = indptr[nodes]
        degree = indptr[nodes + 1] - start
    else:
        start, degree = bounds[0][:n], bounds[1][:n]
    count = sample_counts(degree, fanout, replace)
    full = full_nodes(degree, fanout, replace)
    if frontier_batch is None:
        batch = torch.zeros(n, dtype=torch.int64, device=nodes.device)
        batch_ptr = torch.tensor([0, n], dtype=torch.int64, device=nodes.device)
    else:
        batch = frontier_batch[:n]
    # stable: by sub-batch, full nodes (key 0) before random ones (key 1), then frontier order
    order = torch.sort(batch * 2 + (~full).long(), stable=True).indices
    num_batches = batch_ptr.numel() - 1
    edges = torch.zeros(num_batches, dtype=torch.int64, device=nodes.device).index_add_(0, batch, count)
    edge_ptr = torch.cat([edges.new_zeros(1), torch.cumsum(edges, 0)])
    num_full = torch.zeros(num_batches, dtype=torch.int64, device=nodes.device).index_add_(0, batch, full.long())
    return ClassifiedFrontier(start, degree, torch.cumsum(count, 0), order, edge_ptr, num_full)


def sample_neighbors(indptr, indices, frontier, frontier_local, num_frontier, fanout,
                     replace=False, generator=None, return_eid=False, frontier_batch=None,
                     batch_ptr=None) -> HopSample:
    """Reference of ``kernels.sample.sample_neighbors`` (exactly sized outputs)."""
    n = int(num_frontier.reshape(-1)[0])
    start = indptr[frontier[:n]]
    return _sample_rows(indices, start, indptr[frontier[:n] + 1] - start, frontier_local, fanout, replace,
                        generator, return_eid, frontier_batch, batch_ptr)


def _sample_rows(indices, start, degree, frontier_local, fanout, replace, generator, return_eid,
                 frontier_batch, batch_ptr) -> HopSample:
    """Uniform sampling of the rows ``start[i] .. start[i] + degree[i] - 1``
    of the ``n = start.numel()`` valid frontier slots."""
    n = start.numel()
    device = start.device
    count = sample_counts(degree, fanout, replace)
    total = int(count.sum())
    if fanout == -1:
        width = int(degree.max()) if n else 0
        pick = torch.arange(width, device=device).expand(n, width)
    elif replace:
        u = torch.rand(n, fanout, generator=generator, dtype=torch.float64, device=device)
        pick = (u * degree[:, None].to(torch.float64)).long()
        pick = torch.minimum(pick, (degree[:, None] - 1).clamp(min=0))
    else:
        pick = torch.arange(fanout, device=device).repeat(n, 1)
        m_random = degree > fanout
        if m_random.any():
            pick[m_random] = floyd_sample(degree[m_random], fanout, generator)
    width = pick.size(1)
    m_edge = torch.arange(width, device=device)[None, :] < count[:, None]
    pos = (start[:, None] + pick)[m_edge]  # row-major: grouped by node, in frontier order
    src = indices[pos].to(torch.int64)
    dst = frontier_local[:n, None].expand(n, width)[m_edge]
    num_edges = torch.tensor([total], dtype=torch.int64, device=device)
    batch = None
    edge_ptr = torch.tensor([0, total], dtype=torch.int64, device=device)
    if frontier_batch is not None:
        batch = frontier_batch[:n, None].expand(n, width)[m_edge].contiguous()
        edges = torch.zeros(batch_ptr.numel() - 1, dtype=torch.int64, device=device)
        edges.index_add_(0, frontier_batch[:n], count)
        edge_ptr = torch.cat([edges.new_zeros(1), torch.cumsum(edges, 0)])
    return HopSample(src, dst.contiguous(), pos if return_eid else None, num_edges, batch, edge_ptr)


def time_windows(indptr, indices, frontier, num_frontier, seed_time, fanout, temporal_strategy,
                 node_time=None, edge_time=None):
    """Reference of ``kernels.sample_temporal.time_windows`` (sized to the
    valid prefix): the admissible positions counted one by one (time <=
    the slot's seed time), so on rows sorted by time the prefix the
    kernel's binary search finds; with ``"last"`` its last ``fanout``."""
    n = int(num_frontier.reshape(-1)[0])
    nodes = frontier[:n]
    start = indptr[nodes]
    degree = indptr[nodes + 1] - start
    owner, pos = _row_positions(start, degree)
    time = edge_time[pos] if edge_time is not None else node_time[indices[pos].long()]
    admissible = torch.zeros(n, dtype=torch.int64, device=nodes.device).index_add_(
        0, owner, (time <= seed_time[:n][owner]).long())
    if temporal_strategy == "last" and fanout >= 0:
        skip = (admissible - fanout).clamp(min=0)
        start, admissible = start + skip, admissible - skip
    return start, admissible


def sample_temporal(indptr, indices, frontier, frontier_local, num_frontier, fanout, replace, generator,
                    return_eid, frontier_batch, batch_ptr, seed_time, temporal_strategy, node_time=None,
                    edge_time=None) -> HopSample:
    """Reference of ``kernels.sample.sample_neighbors`` with a time
    (``kernels.sample_temporal``'s semantics): each slot's window sampled
    as a row (exactly sized outputs)."""
    start, degree = time_windows(indptr, indices, frontier, num_frontier, seed_time, fanout, temporal_strategy,
                                 node_time, edge_time)
    return _sample_rows(indices, start, degree, frontier_local, fanout, replace, generator, return_eid,
                        frontier_batch, batch_ptr)


def _row_positions(start, degree):
    """``(owner, pos)``: every CSC position of the rows ``start[i] ..
    start[i] + degree[i] - 1``, row after row, and the row each is of."""
    owner = torch.repeat_interleave(torch.arange(degree.numel(), device=degree.device), degree)
    first = torch.cumsum(degree, 0) - degree
    return owner, start[owner] + torch.arange(owner.numel(), device=degree.device) - first[owner]


def weighted_picks(weight, degree, fanout, replace, generator=None) -> torch.Tensor:
    """``[n, fanout]`` row positions drawn by weight for rows of ``degree``
    (``>= 1``; ``> fanout`` without replacement) whose weights are
    ``weight`` end to end: i.i.d. draws, each ``i`` with probability ``w_i /
    W`` (a row of zero total weight: uniform), or Efraimidis and Spirakis'
    ``fanout`` smallest keys ``-log(u) / w`` (zero weights last, in random
    order), smallest first."""
    n, device = degree.numel(), degree.device
    owner = torch.repeat_interleave(torch.arange(n, device=device), degree)
    first = torch.cumsum(degree, 0) - degree
    w = weight.to(torch.float64)
    if replace:
        cum = torch.cumsum(w, 0)
        end = cum[first + degree - 1]
        base = end - torch.zeros(n, dtype=torch.float64, device=device).index_add_(0, owner, w)
        u = torch.rand(n, fanout, generator=generator, dtype=torch.float64, device=device)
        # the first position whose prefix sum passes the target: a zero weight never does
        pos = torch.searchsorted(cum, base[:, None] + u * (end - base)[:, None], right=True)
        pick = torch.minimum(pos - first[:, None], degree[:, None] - 1)
        uniform = torch.minimum((u * degree[:, None]).long(), degree[:, None] - 1)
        return torch.where((end > base)[:, None], pick, uniform)
    u = torch.rand(w.numel(), generator=generator, dtype=torch.float64, device=device)
    key = torch.where(w > 0, -torch.log1p(-u) / w.clamp(min=torch.finfo(torch.float64).tiny), torch.inf)
    tie = torch.rand(w.numel(), generator=generator, dtype=torch.float64, device=device)
    order = torch.argsort(tie)  # zero weights (key +inf) in random order; then by key, then by row
    order = order[torch.argsort(key[order], stable=True)]
    order = order[torch.argsort(owner[order], stable=True)]
    rank = torch.arange(order.numel(), device=device) - first[owner[order]]
    keep = rank < fanout
    pick = torch.empty(n, fanout, dtype=torch.int64, device=device)
    pick[owner[order][keep], rank[keep]] = order[keep] - first[owner[order][keep]]
    return pick


def sample_weighted(indptr, indices, edge_weight, frontier, frontier_local, num_frontier, fanout,
                    replace=False, generator=None, return_eid=False, frontier_batch=None,
                    batch_ptr=None) -> HopSample:
    """Reference of ``kernels.sample.sample_neighbors`` with ``edge_weight``
    (``kernels.sample_weighted``'s semantics; exactly sized outputs)."""
    n = int(num_frontier.reshape(-1)[0])
    nodes = frontier[:n]
    start = indptr[nodes]
    degree = indptr[nodes + 1] - start
    if fanout <= 0:  # every neighbour (weights unread), or none
        return sample_neighbors(indptr, indices, frontier, frontier_local, num_frontier, fanout, replace,
                                generator, return_eid, frontier_batch, batch_ptr)
    count = sample_counts(degree, fanout, replace)
    pick = torch.arange(fanout, device=nodes.device).repeat(n, 1)
    m_draw = degree > 0 if replace else degree > fanout
    if m_draw.any():
        _, pos = _row_positions(start[m_draw], degree[m_draw])
        pick[m_draw] = weighted_picks(edge_weight[pos], degree[m_draw], fanout, replace, generator)
    m_edge = torch.arange(fanout, device=nodes.device)[None, :] < count[:, None]
    pos = (start[:, None] + pick)[m_edge]
    total = int(count.sum())
    batch, edge_ptr = None, torch.tensor([0, total], dtype=torch.int64, device=nodes.device)
    if frontier_batch is not None:
        batch = frontier_batch[:n, None].expand(n, fanout)[m_edge].contiguous()
        edge_ptr = classify_frontier(indptr, frontier, num_frontier, fanout, replace, frontier_batch,
                                     batch_ptr).edge_ptr
    return HopSample(indices[pos].to(torch.int64), frontier_local[:n, None].expand(n, fanout)[m_edge].contiguous(),
                     pos if return_eid else None, torch.tensor([total], dtype=torch.int64, device=nodes.device),
                     batch, edge_ptr)


class IdMap:
    """Reference of ``kernels.id_map.IdMap``: sorted keys + searchsorted
    (``hop_major``: local ids numbered over all sub-batches, hop by hop)."""

    def __init__(self, num_nodes: int, num_batches: int, device, hop_major: bool = False):
        self.num_nodes, self.num_batches = int(num_nodes), int(num_batches)
        self.hop_major = bool(hop_major)
        self.device = torch.device(device)
        self.base = torch.zeros(self.num_batches, dtype=torch.int64, device=self.device)
        self.known_keys = torch.empty(0, dtype=torch.int64, device=self.device)
        self.known_local = torch.empty(0, dtype=torch.int64, device=self.device)
        self.closed = False  # a hop was inserted with last=True since the last start

    capacity = float("inf")

    @property
    def num_nodes_per_batch(self) -> torch.Tensor:
        return self.base

    def _keys(self, nodes, batch):
        return nodes if batch is None else batch * self.num_nodes + nodes

    def start(self, seeds, seeds_batch=None):
        count = seeds.numel()
        batch = torch.zeros_like(seeds) if seeds_batch is None else seeds_batch
        per_batch = torch.bincount(batch, minlength=self.num_batches)
        first = torch.cumsum(per_batch, 0) - per_batch
        local = torch.arange(count, device=self.device)
        if not self.hop_major:
            local = local - first[batch]
        keys, inverse = torch.unique(self._keys(seeds, seeds_batch), return_inverse=True)
        first_pos = torch.full((keys.numel(),), count, dtype=torch.int64, device=self.device)
        first_pos.scatter_reduce_(0, inverse, torch.arange(count, device=self.device), "amin")
        self.known_keys, self.known_local = keys, local[first_pos]
        self.base = per_batch
        self.total = count  # nodes so far, over every sub-batch (hop-major ids)
        self.closed = False
        return local

    def insert(self, cand, num_cand, cand_batch=None, cand_ptr=None, last=False) -> MappedHop:
        # cand_ptr: unused (counts are taken on the host here)
        if self.closed:
            raise ValueError("insert after a hop inserted with last=True: start a new batch first")
        self.closed = last
        m = int(num_cand.reshape(-1)[0])
        cand = cand[:m]
        batch = None if cand_batch is None else cand_batch[:m]
        keys = self._keys(cand, batch)
        idx = torch.searchsorted(self.known_keys, keys)
        found = idx < self.known_keys.numel()
        found[found.clone()] = self.known_keys[idx[found]] == keys[found]
        pos_new = torch.nonzero(~found).flatten()
        uniq, inverse = torch.unique(keys[pos_new], return_inverse=True)
        first_pos = torch.full((uniq.numel(),), m, dtype=torch.int64, device=self.device)
        first_pos.scatter_reduce_(0, inverse, pos_new, "amin")
        order = torch.argsort(first_pos)  # new nodes in order of first appearance
        rank_of = torch.empty_like(order)
        rank_of[order] = torch.arange(order.numel(), device=self.device)
        new_keys = uniq[order]
        new_batch = new_keys // self.num_nodes
        per_batch = torch.bincount(new_batch, minlength=self.num_batches)
        first_rank = torch.cumsum(per_batch, 0) - per_batch
        if self.hop_major:  # after every node so far, in order of first appearance
            new_local = self.total + torch.arange(new_keys.numel(), device=self.device)
        else:
            new_local = self.base[new_batch] + torch.arange(new_keys.numel(), device=self.device) \
                - first_rank[new_batch]
        local = torch.empty(m, dtype=torch.int64, device=self.device)
        local[found] = self.known_local[idx[found]]
        local[pos_new] = new_local[rank_of[inverse]]
        self.known_keys, perm = torch.sort(torch.cat([self.known_keys, new_keys]))
        self.known_local = torch.cat([self.known_local, new_local])[perm]
        self.base = self.base + per_batch
        self.total += new_keys.numel()
        num_new = torch.tensor([new_keys.numel()], dtype=torch.int64, device=self.device)
        return MappedHop(local, new_keys % self.num_nodes, None if last else new_local,
                         None if cand_batch is None or (last and not self.hop_major) else new_batch,
                         num_new, per_batch)


def gather_rows(table, ids, out, hot=None, num_hot=0, dynamic=None, slot=None, previous=None,
                prev_slot=None, row_map=None, warm=None, count=None):
    """Reference of ``kernels.gather.gather_rows`` (tiers in the same order;
    rows converted to ``out``'s dtype; with ``count``, clamped to ``[0, n]``
    on the host, ``ids[:count]`` only, into ``out[:count]``)."""
    if count is not None:
        n = min(max(int(count.reshape(-1)[0]), 0), ids.numel())
        gather_rows(table, ids[:n], out[:n], hot, num_hot, dynamic, slot, previous, prev_slot, row_map, warm)
        return out
    rows = ids if row_map is None else row_map[ids]
    out.copy_(table.index_select(0, rows.to(table.device)))
    if warm is not None:
        m_warm = (ids >= num_hot) & (ids < num_hot + warm.size(0))
        out[m_warm] = warm.index_select(0, (ids[m_warm] - num_hot).to(warm.device)).to(out.device, out.dtype)
    if hot is not None and num_hot > 0:
        m_hot = ids < num_hot
        out[m_hot] = hot.index_select(0, ids[m_hot].to(hot.device)).to(out.device, out.dtype)
    if dynamic is not None:
        cold = ids >= num_hot
        row = torch.full_like(ids, -1)
        row[cold] = slot.to(ids.device)[ids[cold] - num_hot].long()
        m_dyn = row >= 0
        out[m_dyn] = dynamic.index_select(0, row[m_dyn].to(dynamic.device)).to(out.device, out.dtype)
    if previous is not None:
        cold = ids >= num_hot
        if dynamic is not None:
            cold &= ~m_dyn
        row = torch.full_like(ids, -1)
        row[cold] = prev_slot.to(ids.device)[ids[cold] - num_hot].long()
        m_prev = row >= 0
        out[m_prev] = previous.index_select(0, row[m_prev].to(previous.device)).to(out.device, out.dtype)
    return out


def pack_prefixes(parts, counts, out, start=None):
    """Reference of ``kernels.pack.pack_prefixes`` (host syncs: each count
    read on the host). Part ``k`` starts where part ``k - 1`` started plus
    its count; it copies ``min(max(count, 0), numel)`` elements, and only
    those landing in ``[0, out.numel())``."""
    offset = 0 if start is None else int(start.reshape(-1)[0])
    for part, count in zip(parts, counts):
        c = int(count.reshape(-1)[0])
        n = min(max(c, 0), part.numel())
        lo, hi = max(offset, 0), min(offset + n, out.numel())  # the positions inside out
        if lo < hi:
            out[lo:hi] = part[lo - offset:hi - offset]
        offset += c
    return torch.tensor([offset], dtype=torch.int64, device=out.device)


def segment_sum(x, indptr, index, weight, out, mean=False):
    """Reference of ``kernels.aggregate.segment_sum`` (float32 accumulation;
    ``mean``: each sum divided by its segment's size, at least 1)."""
    num_segments = indptr.numel() - 1
    counts = indptr[1:] - indptr[:-1]
    segment = torch.repeat_interleave(torch.arange(num_segments, device=x.device), counts,
                                      output_size=index.numel())
    rows = x.index_select(0, index).float()
    if weight is not None:
        rows = rows * weight[:, None]
    acc = torch.zeros((num_segments, x.size(1)), dtype=torch.float32, device=x.device)
    acc.index_add_(0, segment, rows)
    if mean:
        acc /= counts.clamp(min=1).to(torch.float32)[:, None]
    return out.copy_(acc)


def scatter_add(grad, indptr, index, weight, out, mean=False):
    """Reference of ``kernels.aggregate.scatter_add``: ``out[index[e]] +=
    weight[e] * grad[segment of e]`` (``out`` float32, zeroed; ``mean``:
    ``grad[s]`` divided by segment ``s``'s size, at least 1)."""
    counts = indptr[1:] - indptr[:-1]
    segment = torch.repeat_interleave(torch.arange(indptr.numel() - 1, device=grad.device), counts,
                                      output_size=index.numel())
    rows = grad.float()
    if mean:
        rows = rows / counts.clamp(min=1).to(torch.float32)[:, None]
    rows = rows.index_select(0, segment)
    if weight is not None:
        rows = rows * weight[:, None]
    return out.index_add_(0, index, rows)


def attend(xs, a_src, a_dst, edge_index, num_dst, negative_slope, num_loops, self_loops):
    """Reference of ``kernels.attention.attend`` in plain torch ops
    (differentiable by autograd): per-edge logits, a softmax per destination
    and head, the weighted sum of the source rows."""
    src, dst = edge_index[0], edge_index[1]
    if self_loops:  # existing loops dropped, one per destination below num_loops
        keep = src != dst
        loop = torch.arange(num_loops, device=xs.device)
        src, dst = torch.cat([src[keep], loop]), torch.cat([dst[keep], loop])
    logit = torch.nn.functional.leaky_relu(a_src.float()[src] + a_dst.float()[dst], negative_slope)  # [E, H]
    index = dst[:, None].expand_as(logit)
    top = torch.full((num_dst, logit.size(1)), float("-inf"), device=xs.device)
    top = top.scatter_reduce(0, index, logit, "amax", include_self=True)
    p = (logit - top[dst]).exp()
    total = torch.zeros_like(top).index_add(0, dst, p)
    alpha = p / total[dst]
    out = torch.zeros((num_dst,) + tuple(xs.shape[1:]), dtype=torch.float32, device=xs.device)
    return out.index_add(0, dst, alpha[:, :, None] * xs.float()[src]).to(xs.dtype)


def column_sum(x):
    """Reference of ``kernels.reduce.column_sum``: ``x.sum(0)`` accumulated
    in float32 (float64 for a float64 ``x``)."""
    return x.sum(0, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)


def induced_edges(indptr, indices, nodes, return_eid=False, rows=None, row_owner=None):
    """Reference of ``kernels.subgraph.induced_edges``: torch-sparse's loop
    (``neighbor_sample(directed=False)``) in tensor ops: for each node in
    local order (or each of ``rows``, for node ``row_owner``), its row in
    CSC order, the neighbours among ``nodes`` kept (a repeated node answers
    with its first position)."""
    device = nodes.device
    n = nodes.numel()
    if rows is None:
        rows, row_owner = nodes, torch.arange(n, device=device)
    start = indptr[rows]
    degree = indptr[rows + 1] - start
    row = torch.repeat_interleave(torch.arange(rows.numel(), device=device), degree)
    first = torch.cumsum(degree, 0) - degree
    pos = start[row] + torch.arange(row.numel(), device=device) - first[row]
    src = indices[pos].to(torch.int64)
    order = torch.sort(nodes, stable=True)
    at = torch.searchsorted(order.values, src).clamp(max=max(n - 1, 0))
    hit = order.values[at] == src  # (no candidate when there is no node)
    edge_index = torch.stack([order.indices[at][hit], row_owner[row][hit]])
    return edge_index[0], edge_index[1], pos[hit] if return_eid else None


def edge_ids(positions, edge_perm, hot_edge_perm=None, count=None, out=None):
    """``edge_perm[positions]`` as int64 (``hot_edge_perm`` serving the
    positions below its length), -1 outside ``[0, E)``, over the first
    ``count`` positions only (or all)."""
    out = torch.empty_like(positions) if out is None else out
    valid = positions.numel() if count is None else max(0, min(int(count), positions.numel()))
    pos = positions[:valid].to(edge_perm.device)
    inside = (pos >= 0) & (pos < edge_perm.numel())
    ids = torch.where(inside, edge_perm[pos.clamp(0, max(0, edge_perm.numel() - 1))].to(torch.int64)
                      if edge_perm.numel() else torch.zeros_like(pos), -1)
    if hot_edge_perm is not None and hot_edge_perm.numel():
        hot = inside & (pos < hot_edge_perm.numel())
        ids = torch.where(hot, hot_edge_perm.to(pos.device)[pos.clamp(0, hot_edge_perm.numel() - 1)].to(torch.int64),
                          ids)
    out[:valid] = ids.to(out.device)
    return out
