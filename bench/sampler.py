"""Sampling benchmark: the sampling kernels on one hop, and super-batches
of the multi-hop sampler.

Scenarios (``--scenario``), on a Chung-Lu power-law graph and the cnr2000
web crawl (``--cnr2000``, skipped when absent), the adjacency in GPU memory
and in pinned host memory read through UVA (``--placements``):

* ``hop``: each hop's real frontier (``--batch-size`` random seeds, then
  the new nodes of each hop of ``--num-neighbors`` as ``NeighborSampler``
  finds them) sampled by one ``kernels.sample_neighbors`` call per method
  (``foundation``; ``grouped`` and ``grouped_split``, GARDEN's staged
  rows, at each ``--d-max``; ``fused``, a hop in one launch), captured in
  a CUDA graph and timed by ``do_bench``: median with L2 flushed ("cold")
  and the mean of 20 calls in one graph ("warm"). Every method's edges are
  checked bit for bit against the foundation kernel's first; one that
  differs gets no rate. A ``floor`` row times a kernel that only reads what
  any exact sampler of these edges must read (each frontier node's row
  bounds, each sampled edge's neighbour at the foundation's CSC position):
  foundation / floor bounds what reading memory more cleverly can give.
* ``super_batch``: the epoch's batches sampled K at a time
  (``NeighborSampler.sample_many``, GARDEN's super-batch classifier) for
  each K of ``--ks``, method and fanouts: seconds of sampling per epoch
  (median of ``--repeats`` passes after a warm-up that compiles and
  captures), peak GPU memory above the graph, the speedup against K = 1;
  with ``--cuda-graphs on off``, also with the sampler's CUDA graphs off
  (``cuda_graph=False``). Each configuration first checks that K batches
  sampled together equal them sampled one by one; one that fails gets no
  speedup.

    python bench/sampler.py --scenario hop --out bench/results/sampler_kernel.json
    python bench/sampler.py --scenario super_batch --out bench/results/super_batch.json --csv bench/results/super_batch.csv

``--device cpu`` is a smoke test (Triton's interpreter, tiny graphs).
"""
from __future__ import annotations

import argparse
import csv
import functools
import gc
import itertools
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import HERE, append_record, new_record, print_settings, sync  # noqa: E402

SCENARIOS = ("hop", "super_batch")
GIB = 2**30


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of the script (interpreter)")
    p.add_argument("--nodes", type=int, default=None, help="Chung-Lu nodes (default 2^24; cpu 3000)")
    p.add_argument("--edges", type=int, default=None, help="Chung-Lu edges (default 2^28; cpu 30000)")
    p.add_argument("--cnr2000", default=None, help="path of cnr2000.npz (default: shared/data/ beside the checkout)")
    p.add_argument("--placements", nargs="+", default=["device", "host"], choices=["device", "host"])
    p.add_argument("--num-neighbors", nargs="+", default=["15,10,5"],
                   help="fanout lists, comma-separated (hop: the first; super_batch: each a configuration)")
    p.add_argument("--batch-size", type=int, default=None, help="seeds a batch (default 8000; cpu 32)")
    p.add_argument("--d-max", type=int, nargs="+", default=[32, 64, 128], help="grouped kernels' staged degree")
    p.add_argument("--return-eid", type=int, nargs="+", default=[1], choices=[0, 1],
                   help="hop: with each edge's CSC position written (1) and/or not (0)")
    p.add_argument("--floor", type=int, default=1, choices=[0, 1], help="hop: also time the reads alone")
    p.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="super_batch: batches a pass")
    p.add_argument("--methods", nargs="+", default=["foundation", "grouped", "fused"],
                   choices=["auto", "foundation", "grouped", "grouped_split", "fused"], help="super_batch")
    p.add_argument("--cuda-graphs", nargs="+", default=["on"], choices=["on", "off"], help="super_batch")
    p.add_argument("--max-batches", type=int, default=480,
                   help="super_batch: batches a timed pass (0: the epoch); times scaled to the epoch")
    p.add_argument("--repeats", type=int, default=3, help="super_batch: timed passes")
    p.add_argument("--profile", type=int, default=0, metavar="TOP",
                   help="super_batch: one more pass under torch.profiler, the TOP kernels' ms a batch")
    p.add_argument("--out", default=None, help="append the record to this JSON file")
    p.add_argument("--csv", default=None, help="super_batch: append one row per configuration")
    p.add_argument("--commit", default=None)
    args = p.parse_args(argv)
    cpu = args.device == "cpu"
    args.nodes = args.nodes or (3000 if cpu else 1 << 24)
    args.edges = args.edges or (30_000 if cpu else 1 << 28)
    args.batch_size = args.batch_size or (32 if cpu else 8000)
    if cpu:
        args.placements, args.max_batches, args.repeats = ["device"], min(args.max_batches, 4), 1
    args.fanouts = [[int(f) for f in text.split(",")] for text in args.num_neighbors]
    if 1 not in args.ks:
        args.ks = [1] + args.ks  # the baseline every speedup needs
    return args


def load_graphs(args, device):
    """``[(name, CSCGraph on the CPU with int32 indices)]``."""
    from tritongnn import CSCGraph
    from tritongnn.datasets import chung_lu, load_npz
    data = chung_lu(args.nodes, args.edges, num_features=1, train_fraction=0.0, val_fraction=0.0,
                    test_fraction=0.0, device=device, seed=0)
    csc = CSCGraph.from_edge_index(data.edge_index, args.nodes)
    graphs = [("chung_lu", CSCGraph(csc.indptr, csc.indices.to(torch.int32), validate=False).to("cpu"))]
    del data, csc
    candidates = [args.cnr2000] if args.cnr2000 else [os.path.join(HERE, "..", "shared", "data", "cnr2000.npz"),
                                                      os.path.join(HERE, "..", "..", "shared", "data", "cnr2000.npz")]
    path = next((c for c in candidates if os.path.isfile(c)), None)
    if path:
        data = load_npz(path)
        csc = CSCGraph.from_edge_index(data.edge_index, data.num_nodes)
        graphs.append(("cnr2000", CSCGraph(csc.indptr, csc.indices.to(torch.int32), validate=False)))
    else:
        print("cnr2000.npz not found (--cnr2000 PATH): the synthetic graph only", flush=True)
    return graphs


def placed(graph, placement, device):
    return graph.to(device) if placement == "device" else graph.pin_memory()


# ------------------------------------------------------------------- hop

def cold_warm_ms(fn, device) -> tuple[float, float]:
    """(cold, warm) ms of ``fn``: a CUDA graph's replay timed by ``do_bench``
    (L2 flushed), and the mean of 20 calls captured in one graph."""
    if device.type != "cuda":
        fn()
        start = time.perf_counter()
        fn()
        ms = (time.perf_counter() - start) * 1e3
        return ms, ms
    from triton.testing import do_bench
    fn()
    sync(device)
    one = torch.cuda.CUDAGraph()
    with torch.cuda.graph(one):
        fn()
    cold = do_bench(one.replay, warmup=25, rep=200, return_mode="median")
    many = torch.cuda.CUDAGraph()
    with torch.cuda.graph(many):
        for _ in range(20):
            fn()
    many.replay()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        many.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 20)
    return cold, statistics.median(times)


@functools.cache
def floor_kernel():
    """The floor's kernel, defined once ``TRITON_INTERPRET`` is settled."""
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(indptr, indices, frontier, eid, degree, out, n, e, BLOCK: tl.constexpr):
        o = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m_n = o < n  # the frontier's row bounds
        v = tl.load(frontier + o, mask=m_n, other=0)
        start = tl.load(indptr + v, mask=m_n, other=0)
        end = tl.load(indptr + v + 1, mask=m_n, other=0)
        tl.store(degree + o, end - start, mask=m_n)
        m_e = o < e  # the picks, at the CSC positions the foundation drew
        p = tl.load(eid + o, mask=m_e, other=0)
        tl.store(out + o, tl.load(indices + p, mask=m_e, other=0), mask=m_e)
    return kernel


def picks_floor(indptr, indices, frontier, eid, num_edges):
    """``(degree, indices[eid])`` of the frontier, in one launch."""
    import triton
    n, block = frontier.numel(), 1024
    degree = torch.empty(n, dtype=indptr.dtype, device=frontier.device)
    out = torch.empty(num_edges, dtype=indices.dtype, device=frontier.device)
    floor_kernel()[(triton.cdiv(max(n, num_edges, 1), block),)](indptr, indices, frontier, eid, degree, out, n,
                                                                num_edges, BLOCK=block)
    return degree, out


def hop_scenario(name, graph, args, device, emit):
    from tritongnn import NeighborSampler
    from tritongnn.kernels import sample_neighbors
    fanouts = args.fanouts[0]
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))[:args.batch_size]
    out = NeighborSampler(graph.to(device), fanouts, device=device, cuda_graph=False).sample(
        seeds.to(device), torch.Generator().manual_seed(0))
    bounds = torch.tensor(out.num_sampled_nodes).cumsum(0).tolist()
    layers = [out.node[a:b] for a, b in zip([0] + bounds[:-1], bounds)][:len(fanouts)]
    degree_all = graph.degree().to(device)
    methods = [("foundation", "foundation", 64)] + [(f"{m} d_max={d}", m, d) for m in ("grouped", "grouped_split")
                                                    for d in args.d_max] + [("fused", "fused", 64)]
    for placement in [p for p in args.placements if p == "device" or device.type == "cuda"]:
        g = placed(graph, placement, device)
        for hop, (frontier, fanout) in enumerate(zip(layers, fanouts), 1):
            n = frontier.numel()
            local, num = torch.arange(n, device=device), torch.tensor([n], device=device)
            seed = torch.tensor([12345], device=device)
            degree = degree_all[frontier]
            common = dict(scenario="hop", graph=name, placement=placement, hop=hop, fanout=fanout, frontier=n,
                          full_nodes=int((degree <= fanout).sum()))

            def call(method, d_max, eid=True):
                return sample_neighbors(g.indptr, g.indices, frontier, local, num, fanout, return_eid=eid,
                                        seed=seed, method=method, d_max=d_max)
            ref = call("foundation", 64)
            e = int(ref.num_edges)
            ref = (ref.src[:e].clone(), ref.dst[:e].clone(), ref.eid[:e].clone())
            for eid in args.return_eid:
                base = None
                for label, method, d_max in methods:
                    got = call(method, d_max, bool(eid))
                    correct = int(got.num_edges) == e and all(
                        torch.equal(a, b[:e]) for a, b in zip(ref, (got.src, got.dst, got.eid)) if b is not None)
                    del got
                    cold, warm = cold_warm_ms(lambda: call(method, d_max, bool(eid)), device) if correct \
                        else (float("nan"),) * 2
                    base = base or (cold, warm)
                    emit(dict(common, method=method, label=label + ("" if eid else " no eid"), d_max=d_max,
                              return_eid=bool(eid), edges=e, correct=correct, ms_cold=cold, ms_warm=warm,
                              medges_per_s_cold=e / cold / 1e3, speedup_cold=base[0] / cold,
                              speedup_warm=base[1] / warm))
            if args.floor:
                degree_got, picks = picks_floor(g.indptr, g.indices, frontier, ref[2], e)
                at = g.indptr.device  # checked where the graph lives
                f = frontier.to(at)
                correct = torch.equal(degree_got.to(at), g.indptr[f + 1] - g.indptr[f]) and \
                    torch.equal(picks.to(at), g.indices[ref[2].to(at)])
                cold, warm = cold_warm_ms(lambda: picks_floor(g.indptr, g.indices, frontier, ref[2], e), device) \
                    if correct else (float("nan"),) * 2
                emit(dict(common, method="floor", label="floor: the reads alone", d_max=None, return_eid=True,
                          edges=e, correct=correct, ms_cold=cold, ms_warm=warm, medges_per_s_cold=e / cold / 1e3,
                          speedup_cold=base[0] / cold, speedup_warm=base[1] / warm))


# ------------------------------------------------------------ super_batch

def run_pass(sampler, batches, k, generator):
    for first in range(0, len(batches), k):
        group = batches[first:first + k]
        if len(group) == 1:
            sampler.sample(group[0], generator, validate=False)
        else:
            sampler.sample_many(group, generator, validate=False)


def same_batches(sampler, batches, k) -> bool:
    """The first K batches as one super-batch equal them sampled one by one."""
    together = sampler.sample_many(batches[:k], torch.Generator().manual_seed(123))
    gen = torch.Generator().manual_seed(123)
    for a, b in zip([sampler.sample(s, gen) for s in batches[:k]], together):
        if not all(torch.equal(getattr(a, key), getattr(b, key)) for key in ("node", "row", "col")) or \
                a.num_sampled_nodes != b.num_sampled_nodes or a.num_sampled_edges != b.num_sampled_edges:
            return False
    return True


def kernel_times(sampler, batches, k, device, top: int) -> dict:
    """One more pass under torch.profiler: each kernel's (on a CPU, each
    operator's) own ms a batch, the ``top`` largest, and their ``total``."""
    from torch.profiler import ProfilerActivity, profile
    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        run_pass(sampler, batches, k, torch.Generator().manual_seed(99))
        sync(device)
    times = {}
    for event in prof.key_averages():
        if cuda and event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = event.self_device_time_total if cuda else event.self_cpu_time_total
        if us > 0:
            times[event.key] = times.get(event.key, 0.0) + us / 1e3 / len(batches)
    return dict(total=sum(times.values()), top=dict(sorted(times.items(), key=lambda kv: -kv[1])[:top]))


def super_batch_scenario(name, graph, args, device, emit):
    from tritongnn import NeighborSampler
    seeds = torch.arange(graph.num_nodes, device=device)
    order = torch.randperm(seeds.numel(), generator=torch.Generator().manual_seed(0)).to(device)
    every = list(seeds[order].split(args.batch_size))
    batches = every[:args.max_batches] if args.max_batches else every
    cuda = device.type == "cuda"
    for placement, fanouts, method, graphs in itertools.product(args.placements, args.fanouts, args.methods,
                                                                args.cuda_graphs):
        if placement == "host" and not cuda:
            continue
        g = placed(graph, placement, device)
        base = None
        for k in args.ks:
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
                sync(device)
                before = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
            sampler = NeighborSampler(g, fanouts, device=device, method=method, cuda_graph=graphs == "on")
            correct = same_batches(sampler, batches, k)
            run_pass(sampler, batches[:2 * k] + batches[(len(batches) - 1) // k * k:], k,
                     torch.Generator().manual_seed(1))  # compile and capture, the last short group's too
            seconds = []
            for rep in range(args.repeats):
                gen = torch.Generator().manual_seed(2 + rep)
                sync(device)
                start = time.perf_counter()
                run_pass(sampler, batches, k, gen)
                sync(device)
                seconds.append(time.perf_counter() - start)
            peak = (torch.cuda.max_memory_allocated(device) - before) / GIB if cuda else 0.0
            kernels = kernel_times(sampler, batches, k, device, args.profile) if args.profile else None
            del sampler
            epoch = statistics.median(seconds) * len(every) / len(batches)
            base = base or epoch
            emit(dict(scenario="super_batch", graph=name, placement=placement, num_neighbors=fanouts,
                      method=method + ("" if graphs == "on" else " eager"), cuda_graph=graphs == "on", K=k,
                      correct=correct, seconds=seconds, epoch_seconds=epoch,
                      ms_per_batch=1e3 * statistics.median(seconds) / len(batches), peak_gb=peak,
                      speedup_vs_k1=base / epoch if correct else None,
                      **({"kernels_ms_per_batch": kernels} if kernels else {})))
        del g


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":  # the kernels through the interpreter; set before tritongnn loads
        os.environ.setdefault("TRITON_INTERPRET", "1")
    start = time.perf_counter()
    graphs = load_graphs(args, device)
    settings = dict(scenario=args.scenario, graphs={n: dict(nodes=g.num_nodes, edges=g.num_edges) for n, g in graphs},
                    chung_lu="exponent 2.5, homophily 0.8, seed 0", num_neighbors=args.fanouts,
                    batch_size=args.batch_size, placements=args.placements, d_max=args.d_max, ks=args.ks,
                    methods=args.methods, cuda_graphs=args.cuda_graphs, max_batches=args.max_batches,
                    repeats=args.repeats, graphs_seconds=round(time.perf_counter() - start, 1))
    print_settings(device, settings)
    rows = []

    def emit(row):
        rows.append(row)
        if row["scenario"] == "hop":
            print(f"hop {row['graph']:9s} {row['placement']:6s} hop {row['hop']} fanout {row['fanout']:2d} "
                  f"frontier {row['frontier']:8d} | {row['label']:22s} cold {row['ms_cold']:8.3f} ms "
                  f"x{row['speedup_cold']:5.2f} | warm {row['ms_warm']:8.3f} ms x{row['speedup_warm']:5.2f}"
                  f"{'' if row['correct'] else '  WRONG'}", flush=True)
        else:
            speedup = f"x{row['speedup_vs_k1']:5.2f}" if row["speedup_vs_k1"] else "WRONG"
            print(f"super_batch {row['graph']:9s} {row['placement']:6s} {row['num_neighbors']} "
                  f"{row['method']:18s} K={row['K']:2d} {row['epoch_seconds']:8.3f} s/epoch {speedup} vs K=1 "
                  f"peak {row['peak_gb']:.2f} GiB", flush=True)

    for name, graph in graphs:
        if "hop" in args.scenario:
            hop_scenario(name, graph, args, device, emit)
        if "super_batch" in args.scenario:
            super_batch_scenario(name, graph, args, device, emit)
    wrong = [r for r in rows if not r["correct"]]
    if wrong:
        print(f"{len(wrong)} configurations gave edges other than the reference: no rate for them", flush=True)
    record = new_record("sampler", device, args.commit, settings=settings, rows=rows)
    append_record(args.out, record)
    if args.csv:  # appended under the file's own header, when it has one (peak_gb in GiB)
        columns = ["gpu", "commit", "date", "graph", "placement", "num_neighbors", "method", "batch_size", "K",
                   "epoch_seconds", "ms_per_batch", "speedup_vs_k1", "peak_gb", "cuda_graph", "correct"]
        if os.path.exists(args.csv):
            with open(args.csv) as f:
                columns = next(csv.reader(f), columns)
        new = not os.path.exists(args.csv)
        with open(args.csv, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(columns)
            for r in (r for r in rows if r["scenario"] == "super_batch"):
                flat = dict(r, gpu=record["gpu"], commit=record["commit"], date=record["date"],
                            batch_size=args.batch_size, num_neighbors=",".join(map(str, r["num_neighbors"])))
                w.writerow([flat.get(c, "") for c in columns])

if __name__ == "__main__":
    main()
