"""Super-batching benchmark: sampling time per epoch and peak GPU memory
against K, the batches sampled in one pass (GARDEN's super-batch degree
classifier, ``NeighborSampler.sample_many``).

One run, every number side by side: for each graph (a Chung-Lu power-law
graph, by default 5x10^7 nodes and 10^9 edges; the cnr2000 web crawl), each
adjacency placement (GPU memory; pinned host memory read through UVA; or
``cached``: the adjacency cache, the graph renamed hot-first by degree and
the rows of its first nodes, ``--adj-cache-fraction`` of the edges, copied
to GPU memory, the rest read through UVA), each
``num_neighbors`` ([15, 10, 5] and GARDEN's DGL-order [5, 10, 15]), each K
(1, 2, 4, 8, 16) and, through UVA (with the cache too), each frontier order (``--frontier-orders``:
the package's rule, always node-id order, never, or a letter a hop: ``FFS``
sorts only the third hop's frontier), it samples the epoch's
batches of ``--batch-size`` seeds K at a time with the multi-hop sampler
alone (sampling and id mapping, the per-batch split included; no feature
gather, no model) and reports

* seconds of sampling per epoch (median of ``--repeats`` timed passes after
  a warm-up that compiles the kernels and captures CUDA graphs where the
  sampler does; with ``--max-batches`` the pass covers that many batches and
  the time is scaled to the whole epoch, which the table says),
* peak GPU memory above what was allocated before the sampler was built
  (``torch.cuda.max_memory_allocated``: id map, hop buffers, outputs), and
  its growth against K = 1,
* the speedup against K = 1 of the same graph, placement and fanouts, and
  the K = 8 / K = 1 ratio on its own line (with ``--cuda-graphs on off``,
  also against a K = 1 whose hops are launched eagerly, batch by batch,
  as a sampler without CUDA graphs runs them).

Before timing, each configuration checks that its first K batches sampled as
one super-batch equal, element for element, the same batches sampled one by
one from the same generator state; a configuration that fails gets no
speedup reported.

Usage (GPU machine)::

    python bench/bench_super_batch.py --out bench/results/super_batch.json --csv bench/results/super_batch.csv

Every configuration's row is appended to the CSV (and the run's record to
the JSON), so a run too long for one session can be split, e.g. by
``--graphs`` or ``--placements``, into the same files. ``--nodes 2000000
--edges 40000000 --max-batches 160`` gives a quick run. ``--device cpu`` is
a smoke test of the script on a tiny graph: through the pure-torch path,
where ``sample_many`` samples the batches one after another, or, with
``TRITON_INTERPRET=1``, through the kernels in Triton's interpreter (the
correctness check then tests real super-batches); its times say nothing
about super-batching.
"""
from __future__ import annotations

import argparse
import csv
import gc
import itertools
import os
import re
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tritongnn import CSCGraph, NeighborSampler  # noqa: E402
from tritongnn.datasets import chung_lu, load_npz  # noqa: E402
from tritongnn.graph import inverse_permutation  # noqa: E402
from tritongnn.kernels import id_map as id_map_module  # noqa: E402
from tritongnn.kernels import sample as sample_module  # noqa: E402
from tritongnn.kernels.sample import METHODS  # noqa: E402
from tritongnn.sampling import sampler as sampler_module  # noqa: E402
from _record import append_record, new_record  # noqa: E402
from bench_loader import sync  # noqa: E402

GB = 2**30
# --frontier-orders: sample_neighbors' choice where it is not told
SORTS_FRONTIER = dict(auto=sample_module.sorts_frontier,
                      sorted=lambda indptr, indices, device, *cache: not indices.is_cuda,
                      frontier=lambda indptr, indices, device, *cache: False)

# --seen-filters: id_map.SEEN_MIN_NODES for each choice
SEEN_MIN_NODES = dict(auto=id_map_module.SEEN_MIN_NODES, on=0, off=1 << 62)


def order_rule(order: str, num_hops: int):
    """``sample.sorts_frontier``'s stand-in for ``--frontier-orders order``:
    a rule by name, or a pattern of one letter a hop (S sorted, F frontier
    order; the hops are asked in order, every pass)."""
    if order in SORTS_FRONTIER:
        return SORTS_FRONTIER[order]
    calls = itertools.count()
    return lambda indptr, indices, device, *cache: \
        not indices.is_cuda and order[next(calls) % num_hops] == "S"


CNR2000 = Path(__file__).resolve().parents[2] / "shared" / "data" / "cnr2000.npz"  # shared/ beside the checkout


def load_graphs(args, device):
    """``(name, CSCGraph in device memory, seeds on device)`` of each graph asked for."""
    graphs = []
    for name in args.graphs:
        start = time.perf_counter()
        if name == "chung_lu":
            # one feature column: the features are not read here, only the topology
            data = chung_lu(args.nodes, args.edges, num_classes=2, num_features=1,
                            train_fraction=args.train_fraction, val_fraction=0.0, test_fraction=0.0,
                            device=device)
            seeds = torch.nonzero(data.train_mask).flatten()
            graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, device=device)
            del data
        elif name == "cnr2000":
            path = Path(args.cnr2000)
            if not path.exists():
                print(f"cnr2000 skipped: {path} not found (--cnr2000 PATH)", flush=True)
                continue
            data = load_npz(path)
            graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, device=device)
            seeds = torch.arange(data.num_nodes, device=device)  # no split: every node is a seed
            del data
        else:
            raise ValueError(f"--graphs: unknown graph {name!r} (chung_lu, cnr2000)")
        gc.collect()
        print(f"{name}: {graph}, {seeds.numel()} seeds, built in {time.perf_counter() - start:.1f} s", flush=True)
        graphs.append((name, graph, seeds))
    return graphs


def adjacency_cache(graph, fraction):
    """``(graph renamed hot-first, new_id, tiers)`` for the ``cached``
    placement: nodes in order of falling degree (the share of a frontier's
    row reads a node takes grows with its degree; the loader's cache plan
    orders by profiled reads instead), the renamed graph in pinned host
    memory, and ``tiers``, the sampler's ``hot_indptr``/``hot_indices``: GPU
    copies of the rows of the first A nodes, the most whose rows hold at
    most ``fraction`` of the edges."""
    order = torch.argsort(graph.degree(), descending=True, stable=True)
    renamed = graph.relabel(order, keep_edge_perm=False)
    num_hot = int(torch.searchsorted(renamed.indptr, int(fraction * graph.num_edges), right=True)) - 1
    hot_indptr, hot_indices = renamed.row_prefix(num_hot, renamed.device)  # as the loader's cache slices them
    tiers = dict(hot_indptr=hot_indptr, hot_indices=hot_indices)
    new_id = inverse_permutation(order)
    placed = renamed.pin_memory()
    del renamed
    return placed, new_id, tiers


def epoch_batches(seeds, batch_size, max_batches, seed=0):
    """The epoch's batches (shuffled), at most ``max_batches`` of them, and
    the number of batches in the whole epoch."""
    order = torch.randperm(seeds.numel(), generator=torch.Generator().manual_seed(seed)).to(seeds.device)
    batches = list(seeds[order].split(batch_size))
    return (batches[:max_batches] if max_batches else batches), len(batches)


def run_pass(sampler, batches, k, generator):
    """Sample ``batches`` K at a time; the outputs are dropped as a loader
    would hand them on."""
    for first in range(0, len(batches), k):
        group = batches[first:first + k]
        if len(group) == 1:
            sampler.sample(group[0], generator, validate=False)  # ids of the graph: no check's sync
        else:
            sampler.sample_many(group, generator, validate=False)


def kernel_times(sampler, batches, k, device, top: int) -> dict:
    """One more pass under ``torch.profiler``: each kernel's (or, on the CPU,
    each operator's) own time in ms per batch, the ``top`` largest, and
    ``total``, the sum over all of them. Where a super-batch's time goes
    against K = 1's (the id map's kernels, the sampling kernel, the
    classifier, copies)."""
    from torch.profiler import ProfilerActivity, profile
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        run_pass(sampler, batches, k, torch.Generator().manual_seed(99))
        sync(device)
    times = {}
    for event in prof.key_averages():
        if cuda and event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = event.self_device_time_total if cuda else event.self_cpu_time_total
        if us > 0:
            times[event.key] = times.get(event.key, 0.0) + us / 1e3 / len(batches)
    ranked = dict(sorted(times.items(), key=lambda item: -item[1])[:top])
    return dict(total=sum(times.values()), top=ranked)


def same_batches(sampler, batches, k) -> bool:
    """The first K batches as one super-batch equal them sampled one by one."""
    group = batches[:k]
    together = sampler.sample_many(group, torch.Generator().manual_seed(123))
    gen = torch.Generator().manual_seed(123)
    alone = [sampler.sample(b, gen) for b in group]
    for a, b in zip(alone, together):
        for key in ("node", "row", "col"):
            if not torch.equal(getattr(a, key), getattr(b, key)):
                return False
        if a.num_sampled_nodes != b.num_sampled_nodes or a.num_sampled_edges != b.num_sampled_edges:
            return False
    return True


def run_config(graph, batches, epoch_len, fanouts, k, method, args, device, tiers=None, cuda_graph=True):
    gc.collect()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    sampler = NeighborSampler(graph, fanouts, device=device, method=method, d_max=args.d_max,
                              cuda_graph=cuda_graph, **(tiers or {}))
    correct = same_batches(sampler, batches, k)
    # compile and capture: the first groups and the pass's last, shorter one
    # (its own CUDA graph), so no capture falls in a timed pass
    warm = batches[:2 * k] + (batches[(len(batches) - 1) // k * k:] if len(batches) > 2 * k else [])
    run_pass(sampler, warm, k, torch.Generator().manual_seed(1))
    seconds = []
    for rep in range(args.repeats):
        gen = torch.Generator().manual_seed(2 + rep)
        sync(device)
        start = time.perf_counter()
        run_pass(sampler, batches, k, gen)
        sync(device)
        seconds.append(time.perf_counter() - start)
    peak = (torch.cuda.max_memory_allocated(device) - base) / GB if cuda else 0.0
    kernels = kernel_times(sampler, batches, k, device, args.profile) if args.profile else None
    # graphs of this K's passes (keyed by batch size at K = 1, by (K, seeds)
    # past it), not those of the correctness check's single batches
    captured = sum(v is not None for key, v in sampler._captured.items() if isinstance(key, tuple) == (k > 1))
    del sampler
    median = statistics.median(seconds)
    return dict(K=k, correct=correct, seconds=seconds, median_seconds=median,
                epoch_seconds=median * epoch_len / len(batches), ms_per_batch=1e3 * median / len(batches),
                peak_gb=peak, cuda_graphs=captured, **({"kernels_ms_per_batch": kernels} if kernels else {}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the script only")
    parser.add_argument("--graphs", nargs="+", default=["chung_lu", "cnr2000"])
    parser.add_argument("--nodes", type=int, default=50_000_000, help="Chung-Lu nodes")
    parser.add_argument("--edges", type=int, default=1_000_000_000, help="Chung-Lu edges")
    parser.add_argument("--train-fraction", type=float, default=0.6, help="Chung-Lu seeds: this share of nodes")
    parser.add_argument("--cnr2000", default=str(CNR2000), help="path of cnr2000.npz")
    parser.add_argument("--placements", nargs="+", default=["device", "host"],
                        choices=["device", "host", "cached"],
                        help="cached: the adjacency cache (hot rows in GPU memory, the rest through UVA)")
    parser.add_argument("--adj-cache-fraction", type=float, default=0.25,
                        help="cached: the share of the edges whose rows the cache holds (hot-first by degree)")
    parser.add_argument("--num-neighbors", nargs="+", default=["15,10,5", "5,10,15"],
                        help="fanout lists, comma-separated, one per configuration")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--methods", nargs="+", default=["foundation", "grouped", "fused"], choices=METHODS,
                        help="sampling kernels (auto: the sampler's default for the placement)")
    parser.add_argument("--d-max", type=int, default=64, help="grouped kernels: staged rows up to this degree")
    parser.add_argument("--frontier-orders", nargs="+", default=["auto"],
                        help="through UVA (host and cached), each a configuration: each hop's row bounds and "
                             "rows read in node-id order where the package's rule says so (auto: "
                             "sample.sorts_frontier), always "
                             "(sorted), never (frontier), or per hop (a letter a hop, S sorted, F not: FFS); "
                             "in GPU memory rows are read in frontier order (one configuration)")
    parser.add_argument("--batch-size", type=int, default=8000)
    parser.add_argument("--max-batches", type=int, default=480,
                        help="batches per timed pass (0: the whole epoch); times are scaled to the epoch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0, metavar="TOP",
                        help="after timing, one more pass under torch.profiler per configuration: print and "
                             "record the TOP kernels' ms per batch and the sum of all (0: no profile)")
    # the sampler's limits, for experiments (the defaults are the package's):
    # with both raised, super-batches of 8000-seed batches are captured and
    # replayed as single batches are, at the cost of buffers sized for the
    # untrimmed bound; with a larger direct table, past K = 2 on a 5x10^7-node
    # graph too they take the direct id map
    parser.add_argument("--sync-above-log2", type=int, default=None,
                        help="sampler._SYNC_ABOVE = 2^N: frontier slots past which a hop syncs to trim "
                             "(package: 21)")
    parser.add_argument("--graph-keys-max-log2", type=int, default=None,
                        help="sampler._GRAPH_KEYS_MAX = 2^N: id-map keys past which hops are not captured "
                             "(package: 23)")
    parser.add_argument("--direct-max-gb", type=float, default=None,
                        help="id_map.DIRECT_MAX_BYTES: the largest direct id-map table (package: 4 GiB)")
    parser.add_argument("--seen-filters", nargs="+", default=["auto"], choices=["auto", "on", "off"],
                        help="id_map.SEEN_MIN_NODES per run: the package's rule (auto), 0 (on) or never "
                             "(off); repeat to interleave")
    parser.add_argument("--cuda-graphs", nargs="+", default=["on"], choices=["on", "off"],
                        help="the sampler's CUDA graphs, each a configuration: on (the package's default: "
                             "batches and super-batches replayed where they can be) or off (every hop's "
                             "kernels launched one by one, cuda_graph=False; the method is then labelled "
                             "'METHOD eager')")
    parser.add_argument("--out", default=None, help="append the record to this JSON file")
    parser.add_argument("--csv", default=None, help="append one row per configuration here")
    parser.add_argument("--commit", default=None)
    args = parser.parse_args()
    for name in ("sync_above_log2", "graph_keys_max_log2"):
        if getattr(args, name) is not None and not 0 <= getattr(args, name) <= 40:
            parser.error(f"--{name.replace('_', '-')} must be in [0, 40], got {getattr(args, name)}")
    if not 0 < args.adj_cache_fraction < 1:
        parser.error(f"--adj-cache-fraction must be in (0, 1), got {args.adj_cache_fraction}")
    if args.direct_max_gb is not None and args.direct_max_gb < 0:
        parser.error(f"--direct-max-gb must be >= 0, got {args.direct_max_gb}")
    if args.sync_above_log2 is not None:
        sampler_module._SYNC_ABOVE = 1 << args.sync_above_log2
    if args.graph_keys_max_log2 is not None:
        sampler_module._GRAPH_KEYS_MAX = 1 << args.graph_keys_max_log2
    if args.direct_max_gb is not None:
        id_map_module.DIRECT_MAX_BYTES = int(args.direct_max_gb * GB)
    device = torch.device(args.device)
    if device.type == "cpu":  # smoke test: tiny and quick
        args.nodes, args.edges, args.batch_size = 20_000, 200_000, 256
        args.max_batches, args.repeats = 4, 1
        args.ks = [k for k in args.ks if k <= 4]
        args.placements = ["device"]
    if 1 not in args.ks:
        args.ks = [1] + args.ks  # the baseline every ratio needs
    fanout_lists = [[int(f) for f in s.split(",")] for s in args.num_neighbors]
    for order in args.frontier_orders:
        if order not in SORTS_FRONTIER and not (re.fullmatch("[SF]+", order) and all(
                len(order) == len(f) for f in fanout_lists)):
            parser.error(f"--frontier-orders: {order!r} is neither auto, sorted, frontier nor a letter (S or F) "
                         f"for each hop of every --num-neighbors list")
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "csv", "commit")}
    print(f"settings: {settings}", flush=True)
    t0 = time.perf_counter()

    rows = []
    for name, graph, seeds in load_graphs(args, device):
        batches, epoch_len = epoch_batches(seeds, args.batch_size, args.max_batches)
        for placement in args.placements:
            tiers, placed_batches = None, batches
            if placement == "cached":
                placed, new_id, tiers = adjacency_cache(graph, args.adj_cache_fraction)
                placed_batches = [new_id[b] for b in batches]
                del new_id
                print(f"{name} cached: rows of {tiers['hot_indptr'].numel() - 1} nodes, "
                      f"{tiers['hot_indices'].numel()} edges in GPU memory", flush=True)
            else:
                placed = graph.pin_memory() if placement == "host" else graph
            orders = args.frontier_orders if placement != "device" else ["frontier"]
            for fanouts, k, order, method, (run, seen), graphs in itertools.product(
                    fanout_lists, args.ks, orders, args.methods, enumerate(args.seen_filters), args.cuda_graphs):
                if method == "fused" and order not in ("auto", "frontier"):
                    continue  # the fused kernel reads in frontier order only
                sample_module.sorts_frontier = order_rule(order, len(fanouts))
                id_map_module.SEEN_MIN_NODES = SEEN_MIN_NODES[seen]
                replayed = graphs == "on"
                row = run_config(placed, placed_batches, epoch_len, fanouts, k, method, args, device, tiers,
                                 cuda_graph=replayed)
                # the cache's share of the edges in the placement's name (the CSV has no column for it)
                label = f"cached:{args.adj_cache_fraction:g}" if tiers else placement
                row.update(graph=name, nodes=graph.num_nodes, edges=graph.num_edges, placement=label,
                           # (the CSV has no column for the CUDA graphs either)
                           num_neighbors=fanouts, method=method if replayed else f"{method} eager",
                           cuda_graph=replayed,
                           frontier_order=order if order != "auto" else "auto:" + (
                               "sorted" if sample_module.visits_in_node_order(method, placed.indptr,
                                                                              placed.indices, device,
                                                                              **(tiers or {}))
                               else "frontier"),
                           batch_size=args.batch_size, batches_timed=len(batches), batches_per_epoch=epoch_len,
                           seen_filter=seen if seen != "auto" else "auto:" + (
                               "on" if id_map_module.seen_filters(graph.num_nodes, device) else "off"),
                           seen_run=run)
                rows.append(row)
                print(f"{name} {placement} {fanouts} K={k} {order} {row['method']} seen {row['seen_filter']}: "
                      f"{row['epoch_seconds']:.3f} s/epoch, "
                      f"{row['ms_per_batch']:.2f} ms/batch, peak {row['peak_gb']:.2f} GB, "
                      f"correct={row['correct']}", flush=True)
                if row.get("kernels_ms_per_batch"):
                    kernels = row["kernels_ms_per_batch"]
                    print(f"  {'GPU' if device.type == 'cuda' else 'CPU'} time {kernels['total']:.3f} "
                          f"ms/batch; top: " + ", ".join(f"{name[:40]} {ms:.3f}"
                                                      for name, ms in kernels["top"].items()), flush=True)
            del placed, tiers, placed_batches
        del graph, seeds
        gc.collect()

    # ratios against K = 1 of the same graph, placement, fanouts and method,
    # and against the foundation kernel at the same K
    def same(row, key_k, **fixed):
        return next((r for r in rows if all(r[k] == v for k, v in fixed.items()) and all(
            r[key] == row[key] for key in ("graph", "placement", "num_neighbors", "frontier_order", "seen_run")
            + key_k)), None)

    for row in rows:
        base = same(row, ("method",), K=1)
        ok = row["correct"] and base["correct"]
        # None (JSON null) where there is nothing to compare
        row["speedup_vs_k1"] = base["epoch_seconds"] / row["epoch_seconds"] if ok else None
        row["peak_growth_vs_k1"] = row["peak_gb"] / base["peak_gb"] - 1 if base["peak_gb"] else None
        found = same(row, ("K",), method="foundation" if row["cuda_graph"] else "foundation eager")
        row["speedup_vs_foundation"] = found["epoch_seconds"] / row["epoch_seconds"] \
            if found and found["correct"] and row["correct"] else None

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    scaled = "" if not args.max_batches else f" (timed over {args.max_batches} batches, scaled to the epoch)"
    print(f"\n{gpu}; batch {args.batch_size}; median of {args.repeats}{scaled}")
    header = f"{'graph':9s} {'placement':9s} {'fanouts':11s} {'K':>3s} {'order':13s} {'method':13s} {'seen':8s} " \
             f"{'s/epoch':>9s} " \
             f"{'ms/batch':>9s} {'vs K=1':>8s} {'vs found':>8s} {'peak GB':>8s} {'growth':>8s} {'graphs':>6s} " \
             f"{'correct':>7s}"
    print(header)
    def number(value, width, scale=1.0, suffix=""):
        return f"{'-':>{width}s}" if value is None else f"{scale * value:{width - len(suffix)}.2f}{suffix}"

    for r in rows:
        print(f"{r['graph']:9s} {r['placement']:9s} {','.join(map(str, r['num_neighbors'])):11s} {r['K']:3d} "
              f"{r['frontier_order']:13s} {r['method']:13s} {r['seen_filter']:8s} {r['epoch_seconds']:9.3f} "
              f"{r['ms_per_batch']:9.3f} "
              f"{number(r['speedup_vs_k1'], 8, suffix='x')} {number(r['speedup_vs_foundation'], 8, suffix='x')} "
              f"{r['peak_gb']:8.2f} {number(r['peak_growth_vs_k1'], 8, 100, '%')} {r['cuda_graphs']:6d} "
              f"{str(r['correct']):>7s}")
    ratios = {}
    for r in rows:
        if r["K"] != 8:
            continue
        key = f"{r['graph']} {r['placement']} {r['num_neighbors']} {r['frontier_order']} {r['method']} " \
              f"seen {r['seen_filter']}" + (f" (run {r['seen_run']})" if len(args.seen_filters) > 1 else "")
        if not r["correct"]:
            print(f"K=8 / K=1 {key}: not reported, the correctness check failed")
            continue
        ratios[key] = dict(speedup=r["speedup_vs_k1"], peak_gb=r["peak_gb"], peak_growth=r["peak_growth_vs_k1"])
        growth = "" if r["peak_growth_vs_k1"] is None else f" ({100 * r['peak_growth_vs_k1']:+.1f} % against K=1)"
        print(f"K=8 / K=1 {key}: {r['speedup_vs_k1']:.2f}x faster sampling per epoch, peak GPU memory "
              f"{r['peak_gb']:.2f} GB{growth}")
        eager = r["cuda_graph"] and same(r, (), K=1, method=f"{r['method']} eager")
        if eager and eager["correct"]:  # --cuda-graphs on off: against a K = 1 that replays no graph
            print(f"K=8 / K=1 eager {key}: {eager['epoch_seconds'] / r['epoch_seconds']:.2f}x")

    record = new_record("super_batch", device, args.commit, settings=settings, rows=rows, ratios_k8_k1=ratios,
                        seconds=time.perf_counter() - t0)
    append_record(args.out, record)
    if args.csv:
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        columns = ["graph", "nodes", "edges", "placement", "num_neighbors", "method", "batch_size", "K",
                   "batches_timed", "batches_per_epoch", "median_seconds", "epoch_seconds", "ms_per_batch",
                   "speedup_vs_k1", "speedup_vs_foundation",
                   "peak_gb", "peak_growth_vs_k1", "cuda_graphs", "correct", "frontier_order", "seen_filter"]
        new_file = not os.path.exists(args.csv)
        with open(args.csv, "a", newline="") as f:
            w = csv.writer(f)
            if new_file:
                w.writerow(["gpu", "commit", "date"] + columns)
            for r in rows:
                w.writerow([record["gpu"], record["commit"], record["date"]] +
                           [" ".join(map(str, r[c])) if c == "num_neighbors" else r[c] for c in columns])
    print(f"{record['seconds']:.0f} s in all")


if __name__ == "__main__":
    main()
