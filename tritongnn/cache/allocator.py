"""Budget allocator: one GPU byte budget split between the adjacency cache
and the feature cache (GARDEN's AHFCA, DUCATI's dual cache).

Nodes are renamed once so that both caches are prefixes of one order: the
feature rows of new ids ``< F`` and the neighbour lists of new ids ``< A``
live in GPU memory, and "cached?" is one comparison in the kernels.

The split is greedy by marginal utility per byte, in two passes.

1. How much each cache gets: rows stream in hot-first order (descending
   profiled eq. (4) feature weight), lists in descending list utility; both
   grow in chunks of nodes, and the next chunk taken is the one, of the two,
   that saves the most host time per GPU byte it costs, until the budget is
   spent or no chunk with accesses fits. Host time is counted in bytes of
   row gathers. A cached row costs ``row_bytes`` and saves them
   (sector-rounded) at every profiled gather of the row; a cached list costs
   ``degree * index_bytes`` plus its indptr entry and saves, at every
   profiled read, what sampling reads from a host list (its indptr pair and,
   per pick, one 32-byte sector, as picks are random positions; or the whole
   list, sector-rounded, when the fanout takes every neighbour), each
   32-byte sector charged as one row gather (``pick_cost``): through UVA a
   scattered read costs per access, not per byte.
2. One order for both: the F hottest nodes (whose rows are cached, in any
   order among themselves), then the rest, each part by list utility; the
   adjacency cache is the longest prefix of it that pass 1's bytes pay for.

Why both: the head of the hot-first order is hubs, whose lists cost hundreds
of KB yet move some 15 sectors per read; an adjacency prefix of the
feature order, with a whole list read counted as one row gather, leaves the
adjacency cache empty at 8 GB of a 30 GB graph, sampling all through UVA
(bench/results). Budget left when no profiled
access remains goes to the unprofiled rest (rows first), so a budget that
holds everything caches everything.

The dynamic feature cache (``cache.dynamic``), when there is one, is paid
for by the feature cache alone. The split is made for the whole budget, and
the dynamic cache's bytes come out of, in turn:
1. what the split left unspent;
2. the static feature cache's least-used rows: pass 2 then takes, of two
   orders, the one whose prefixes save more profiled host bytes, either
   the lists the whole budget planned with the hottest rows among their
   nodes and the other cached rows, or its usual order for the fewer rows
   (the lists then fall where the shorter feature prefix lets them);
3. only past those, the adjacency cache.

Why: a dynamic cache refills its rows with the most gathered of the rows the
static cache misses, so it makes up for static rows it displaces, while
nothing makes up for a list that is not cached. Planning the static split
on the budget minus the dynamic cache's bytes shrinks the adjacency cache
too: at 8 GB of the 50M-node graph, adjacency hits 0.670 against 0.710 and
an epoch 1.82 s against 1.56, for a +0.8 point feature gain (bench/results).
Taking the feature prefix's tail regardless of lists gives 0.701.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_positive_int
from ..memory import device_free_bytes, size
from .profile import AccessProfile


@dataclass
class CachePlan:
    """Where the dual cache draws its lines.

    Attributes:
        order: ``[N]`` int64, ``order[new] = old``: the hot-first renaming.
        num_adjacency: A, nodes (new ids ``< A``) whose neighbour lists are cached.
        num_feature: F, nodes (new ids ``< F``) whose feature rows are cached.
        adjacency_bytes: bytes of the cached lists.
        feature_bytes: bytes of the cached rows.
        budget: the budget split.
        adjacency_hit_rate: share of the profiled neighbour-list reads the
            cache serves.
        feature_hit_rate: share of the profiled row gathers the cache serves.
    """
    order: torch.Tensor
    num_adjacency: int
    num_feature: int
    adjacency_bytes: int
    feature_bytes: int
    budget: int
    adjacency_hit_rate: float
    feature_hit_rate: float

    def __str__(self) -> str:
        return (f"cache plan: budget {size(self.budget)} -> adjacency of {self.num_adjacency:,} nodes "
                f"({size(self.adjacency_bytes)}, expected hit rate {self.adjacency_hit_rate:.3f}), "
                f"features of {self.num_feature:,} nodes ({size(self.feature_bytes)}, expected hit "
                f"rate {self.feature_hit_rate:.3f})")


# bytes of temporaries a node the planner holds at its peak: about twenty
# [N] 8-byte arrays (gains, bytes, orders, their prefix sums) and a sort's
PLAN_BYTES_PER_NODE = 200


def planning_device(device: torch.device, num_nodes: int) -> torch.device:
    """Where to plan for ``num_nodes``: ``device``, unless it is a GPU with
    less than twice ``PLAN_BYTES_PER_NODE`` a node left to the process."""
    if device.type == "cuda" and 2 * PLAN_BYTES_PER_NODE * num_nodes > device_free_bytes(device):
        return torch.device("cpu")
    return device


def check_budget(budget, name: str = "budget") -> int:
    """``budget`` when it is an int >= 0 (bytes; not a bool), else an error
    naming ``name`` and the value."""
    if not isinstance(budget, int) or isinstance(budget, bool):
        raise TypeError(f"{name} must be an int number of bytes, got {type(budget).__name__} {budget!r}")
    if budget < 0:
        raise ValueError(f"{name} must be >= 0 bytes, got {budget}")
    return budget


def hot_first_order(profile: AccessProfile) -> torch.Tensor:
    """``[N]`` int64 ``order[new] = old``: nodes by descending eq. (4) feature
    weight, then descending neighbour-list reads, then id."""
    by_adjacency = torch.argsort(profile.adjacency, descending=True, stable=True)
    by_feature = torch.argsort(profile.feature[by_adjacency], descending=True, stable=True)
    return by_adjacency[by_feature]


def prefix_share(counts: torch.Tensor, cached: int) -> float:
    """The share of ``counts`` (in cache order) its first ``cached`` entries hold."""
    total = float(counts.sum())
    return float(counts[:cached].sum()) / total if total else 1.0


_SECTOR = 32  # bytes: the unit a GPU reads through UVA

# What one 32-byte sector of a host list read is charged (``pick_cost``), in
# bytes of host feature rows; by default one row gather's bytes
# (sector-rounded), i.e. UVA reads charged per access. A list read is small and scattered (a node's
# indptr pair, then its picks at random positions, or its whole short list);
# a missed row, one access too. Measured on the H200 with 512-byte rows
# (papers100M-scale graph, 128 float32 features, recommended loader,
# the end-to-end benchmark over pick costs, bytes per sector):
# charging a sector its 32 bytes gave 5.84-5.89 s an epoch at 8 GB and
# 3.53-3.55 s at 24 GB; 96 gave 4.75 / 3.26; every cost from 256 to 4096
# gave 4.07-4.14 / 3.17-3.23 s (at 8 GB, adjacency hit rate 0.28 at 32 and
# 0.86-0.94 on the plateau, feature 0.43 and 0.26-0.31). One row's 512 is
# inside the plateau: ``plan_cache``'s default (``pick_cost=None``).


def _sectors(nbytes):
    return (nbytes + _SECTOR - 1) // _SECTOR * _SECTOR


def list_read_bytes(degree: torch.Tensor, num_neighbors, index_bytes: int = 4,
                    indptr_bytes: int = 8, pick_cost: float = _SECTOR) -> torch.Tensor:
    """``[N]`` float64: what one sampling read of each node's list costs,
    averaged over the hops (module docstring): the bytes it reads, charged
    ``pick_cost`` per 32 (the default, 32: the bytes themselves). Without
    fanouts (``num_neighbors`` empty), the whole list."""
    degree = degree.to(torch.int64)
    whole = _sectors(degree * index_bytes)
    fanouts = list(num_neighbors) or [-1]
    read = torch.zeros(degree.shape, dtype=torch.float64, device=degree.device)
    for fanout in fanouts:
        read += whole if fanout < 0 else torch.where(degree <= fanout, whole, fanout * _SECTOR)
    return (read / len(fanouts) + 2 * indptr_bytes) * (pick_cost / _SECTOR)


def plan_cache(profile: AccessProfile, degree: torch.Tensor, row_bytes: int, budget: int,
               index_bytes: int = 4, chunks: int = 4096, indptr_bytes: int = 8,
               dynamic_bytes: int = 0, pick_cost: float | None = None) -> CachePlan:
    """Split ``budget`` bytes between the two caches (module docstring).

    Args:
        profile: per-node access counts (``profile_accesses``).
        degree: ``[N]`` in-degree of every node (``CSCGraph.degree()``).
        row_bytes: bytes of one feature row.
        budget: GPU bytes for both caches.
        index_bytes: bytes of one neighbour id (4 for int32 indices).
        indptr_bytes: bytes of one indptr entry: a cached list also costs
            its entry of the GPU ``hot_indptr``.
        chunks: granularity of the greedy split, in chunks of ``N / chunks`` nodes.
        dynamic_bytes: bytes of ``budget`` the dynamic feature cache holds,
            taken from the feature cache's share (module docstring); the
            plan's ``budget`` is what is left for the two static caches.
        pick_cost: bytes of row gathers one 32-byte sector of a list read
            is charged as; None (default): one row's (sector-rounded).

    Returns:
        ``CachePlan``.
    """
    budget = check_budget(budget)
    if not isinstance(dynamic_bytes, int) or isinstance(dynamic_bytes, bool) or not 0 <= dynamic_bytes <= budget:
        raise ValueError(f"dynamic_bytes must be an int in [0, budget={budget}], got {dynamic_bytes!r}")
    num_nodes = profile.num_nodes
    if degree.dim() != 1 or degree.numel() != num_nodes:
        raise ValueError(f"degree must be [{num_nodes}], got shape {tuple(degree.shape)}")
    for name, value in (("row_bytes", row_bytes), ("index_bytes", index_bytes), ("chunks", chunks)):
        check_positive_int(name, value)
    # on the profile's GPU where its temporaries fit half the memory left there (sorting 10^8
    # nodes takes a GPU milliseconds, a CPU tens of seconds), else on the CPU
    device = planning_device(profile.inputs.device, num_nodes)
    profile = profile.to(device)
    hot = hot_first_order(profile)  # the feature order, eq. (4)
    degree = degree.to(device)[hot].to(torch.int64)
    # host time (in bytes of rows) each node's cached row / list would have
    # saved when profiled; a list's sectors charged per access (pick_cost)
    row_gain = profile.inputs[hot].double() * _sectors(row_bytes)
    pick_cost = _sectors(row_bytes) if pick_cost is None else pick_cost
    list_gain = profile.adjacency[hot].double() * \
        list_read_bytes(degree, profile.num_neighbors, index_bytes, indptr_bytes, pick_cost)
    list_bytes = degree * index_bytes + indptr_bytes
    list_utility = list_gain / list_bytes.double()
    # Pass 1: how many bytes each cache deserves. Rows stream in the feature
    # order, lists by their own utility (the feature order's head is hubs,
    # whose lists cost the most per byte saved).
    by_list = torch.argsort(list_utility, descending=True, stable=True)
    num_feature, adjacency_budget, left = _greedy_split(
        {"feature": (row_gain, torch.full((num_nodes,), row_bytes, dtype=torch.int64, device=device)),
         "adjacency": (list_gain[by_list], list_bytes[by_list])}, budget, chunks)
    whole_feature = num_feature
    num_feature, adjacency_budget, left = _pay_dynamic(num_feature, adjacency_budget, left, row_bytes,
                                                       dynamic_bytes)
    # Pass 2: one order for both caches. Any order of the F cached rows keeps
    # the feature cache; ordering them, then the rest, by list utility makes
    # the adjacency prefix the best lists the budget split allows.
    final, cum_lists, num_adjacency = _one_order(by_list, list_bytes, whole_feature, adjacency_budget)
    if num_feature < whole_feature:
        # The dynamic cache took static rows. Of two orders, the one whose
        # prefixes save more profiled host bytes: the lists the whole budget
        # planned, with the hottest rows among theirs and the other cached
        # ones; or pass 2 redone for the rows left (lists freer to move).
        def saved(candidate):
            order, _, lists = candidate
            return float(row_gain[order[:num_feature]].sum() + list_gain[order[:lists]].sum())
        final, cum_lists, num_adjacency = max(
            (_keep_lists(final, num_adjacency, whole_feature, list_bytes, adjacency_budget),
             _one_order(by_list, list_bytes, num_feature, adjacency_budget)), key=saved)
    left += adjacency_budget - int(cum_lists[num_adjacency])
    # Budget left once no profiled access remains: the unprofiled rest too (a
    # node the profile never met may still be drawn), rows first.
    more_rows = min(num_nodes - num_feature, left // row_bytes)
    num_feature, left = num_feature + more_rows, left - more_rows * row_bytes
    num_adjacency = _longest_paid(cum_lists, int(cum_lists[num_adjacency]) + left)
    # Past both prefixes, the rest hot-first by rows: the rows a warm copy
    # packs and a feature cache grown later takes (``DualCache.grow_features``)
    # are then the hottest left, and neither prefix moves.
    head = max(num_feature, num_adjacency)
    rest = torch.ones(num_nodes, dtype=torch.bool, device=final.device)
    rest[final[:head]] = False  # the positions past both prefixes, in order: a mask, not a sort of 10^8
    final = torch.cat([final[:head], rest.nonzero().view(-1)])
    order = hot[final]
    return CachePlan(order=order.cpu(), num_adjacency=num_adjacency, num_feature=num_feature,
                     adjacency_bytes=int(cum_lists[num_adjacency]),
                     feature_bytes=num_feature * row_bytes, budget=budget - dynamic_bytes,
                     adjacency_hit_rate=prefix_share(profile.adjacency[order], num_adjacency),
                     feature_hit_rate=prefix_share(profile.inputs[order], num_feature))


def _cumulative(nbytes: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.int64, device=nbytes.device), nbytes.cumsum(0)])


def _longest_paid(cumulative: torch.Tensor, nbytes: int) -> int:
    """The longest prefix whose cumulative bytes (``cumulative[k]``: the
    first ``k`` items) ``nbytes`` pays for (any int: past the total, all)."""
    nbytes = min(int(nbytes), int(cumulative[-1]))  # a budget past int64 is still every item
    return int(torch.searchsorted(cumulative, nbytes, right=True)) - 1


def _one_order(by_list: torch.Tensor, list_bytes: torch.Tensor, num_feature: int, adjacency_budget: int):
    """Pass 2's order (positions of the hot-first order): the first
    ``num_feature`` positions, then the rest, each by list utility; the
    cumulative list bytes along it; the longest prefix ``adjacency_budget``
    pays for."""
    cached = by_list < num_feature
    final = by_list[torch.argsort((~cached).to(torch.int8), stable=True)]
    cum_lists = _cumulative(list_bytes[final])
    return final, cum_lists, _longest_paid(cum_lists, adjacency_budget)


def _keep_lists(final: torch.Tensor, num_adjacency: int, whole_feature: int, list_bytes: torch.Tensor,
                adjacency_budget: int):
    """Pass 2's order for the whole budget (``final``; its first
    ``whole_feature`` positions cached, its first ``num_adjacency`` lists)
    with those first positions reordered so that the lists' nodes come
    first, hot-first, then the other cached rows, hot-first: a shorter
    feature prefix keeps the rows of the lists' nodes, then the hottest of
    the others, and the list prefix stays what the whole budget planned (as
    far as ``adjacency_budget`` still pays)."""
    num_nodes = final.numel()
    position = torch.arange(num_nodes, device=final.device)
    if num_adjacency <= whole_feature:  # the lists' nodes are among the cached rows
        listed = torch.zeros(num_nodes, dtype=torch.bool, device=final.device)
        listed[final[:num_adjacency]] = True
        head = torch.cat([position[listed], position[(position < whole_feature) & ~listed]])
    else:  # every cached row's node has its list cached
        head = position[:whole_feature]
    final = torch.cat([head, final[whole_feature:]])
    cum_lists = _cumulative(list_bytes[final])
    return final, cum_lists, _longest_paid(cum_lists, adjacency_budget)


def _pay_dynamic(num_feature: int, adjacency_budget: int, left: int, row_bytes: int,
                 dynamic_bytes: int) -> tuple[int, int, int]:
    """Take ``dynamic_bytes`` out of a split for the whole budget: from the
    bytes ``left`` unspent, then the feature prefix's last rows, then the
    adjacency's bytes (module docstring). Returns the split shrunk so."""
    owed = dynamic_bytes
    spare = min(left, owed)
    left, owed = left - spare, owed - spare
    rows = min(num_feature, -(-owed // row_bytes))  # whole rows: any excess goes back to left
    num_feature, owed = num_feature - rows, owed - rows * row_bytes
    left -= min(owed, 0)
    return num_feature, adjacency_budget - max(owed, 0), left


def _greedy_split(streams: dict, budget: int, chunks: int) -> tuple[int, int, int]:
    """Greedy by gain per byte over two streams of ``(gain, bytes)`` per
    item, each taken as a prefix in chunks. Returns the feature prefix
    length, the adjacency prefix's bytes and the bytes left."""
    num_nodes = streams["feature"][0].numel()
    device = streams["feature"][0].device
    zero = torch.zeros(1, dtype=torch.float64, device=device)
    # cumulative gain and bytes of each prefix, indexed by its length
    cum = {name: (torch.cat([zero, gain.cumsum(0)]), torch.cat([zero.long(), nbytes.cumsum(0)]))
           for name, (gain, nbytes) in streams.items()}
    bounds = torch.unique(torch.linspace(0, num_nodes, chunks + 1).round().long()).tolist()
    # the loop reads the prefix sums at the chunk bounds only: on the host, read once
    at = torch.tensor(bounds, device=device)
    at_bounds = {name: (gains[at].tolist(), nbytes[at].tolist()) for name, (gains, nbytes) in cum.items()}
    taken = {"feature": 0, "adjacency": 0}  # prefix lengths
    chunk = {"feature": 0, "adjacency": 0}  # next chunk of each stream
    done = {"feature": num_nodes == 0, "adjacency": num_nodes == 0}
    left = budget

    def next_chunk(name):
        gains, nbytes = at_bounds[name]
        i = chunk[name]
        return gains[i + 1] - gains[i], nbytes[i + 1] - nbytes[i], bounds[i + 1]

    while not all(done.values()):
        best, best_utility = None, -1.0
        for name in ("feature", "adjacency"):
            if done[name]:
                continue
            gain, cost, _ = next_chunk(name)
            gains = at_bounds[name][0]  # taken[name] is bounds[chunk[name]] while not done
            if gains[-1] - gains[chunk[name]] <= 0:  # no access further along
                done[name] = True
                continue
            utility = float("inf") if cost == 0 else gain / cost
            if utility > best_utility:
                best, best_utility = name, utility
        if best is None:
            break
        gain, cost, hi = next_chunk(best)
        if cost <= left:
            taken[best], left = hi, left - cost
            chunk[best] += 1
            done[best] = chunk[best] == len(bounds) - 1
        else:  # the longest part of the chunk that fits, then this prefix stops
            nbytes = cum[best][1]
            fits = _longest_paid(nbytes, int(nbytes[taken[best]]) + left)
            left -= int(nbytes[fits] - nbytes[taken[best]])
            taken[best] = fits
            done[best] = True
    return taken["feature"], int(cum["adjacency"][1][taken["adjacency"]]), left


def plan_by_degree(profile: AccessProfile | None, degree: torch.Tensor, row_bytes: int,
                   budget: int) -> CachePlan:
    """The common baseline (PaGraph, Quiver): a feature cache of the nodes
    with the highest ``degree`` filling the whole budget, no adjacency
    cache. For sampling, the degree that predicts accesses is the number of
    neighbour lists a node appears in (its out-degree when lists hold
    in-neighbours); the loader passes that. Expected hit rates are measured
    against ``profile`` (NaN without one)."""
    budget = check_budget(budget)
    check_positive_int("row_bytes", row_bytes)
    num_nodes = degree.numel()
    if profile is not None and profile.num_nodes != num_nodes:
        raise ValueError(f"degree has {num_nodes} entries, the profile counts {profile.num_nodes} nodes")
    order = torch.argsort(degree, descending=True, stable=True)  # where degree is: a GPU sorts fast
    num_feature = min(num_nodes, budget // row_bytes)
    nan = float("nan")
    if profile is not None:
        order = order.to(profile.inputs.device)
    return CachePlan(order=order.cpu(), num_adjacency=0, num_feature=num_feature, adjacency_bytes=0,
                     feature_bytes=num_feature * row_bytes, budget=budget,
                     adjacency_hit_rate=nan if profile is None else prefix_share(profile.adjacency[order], 0),
                     feature_hit_rate=nan if profile is None else prefix_share(profile.inputs[order], num_feature))
