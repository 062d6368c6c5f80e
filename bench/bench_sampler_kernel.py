"""Sampling kernel benchmark: one hop of the foundation kernel against the
grouped ones (GARDEN's GPS, ``method="grouped"`` / ``"grouped_split"``) and
the fused one (``method="fused"``, a hop in one launch; staged too, with
``sample.FUSED_STAGE``, drawing in the grouped tile instead of one node a
lane with ``--fused-lanes 0``, and at other tile shapes, register caps and
look-back windows with ``--fused-shapes``).

For each graph (a synthetic Chung-Lu power law and the cnr2000 web crawl),
adjacency placement (GPU memory, pinned host memory read through UVA, there
with the frontier in sampling order and, ``--frontier-orders``, in node-id
order: ``sort_frontier=True``, not for the fused kernel) and hop
of ``--num-neighbors`` (fanouts 15, 10, 5 by default), the frontier is the one
a real batch gives: ``--batch-size`` random seeds, then the new nodes of each
hop as ``NeighborSampler`` finds them. One ``sample_neighbors`` call (the
classifier's three passes, then the sampling kernel or kernels) is
captured in a CUDA graph, so host launch cost is out, and timed with CUDA
events by ``triton.testing.do_bench``: median over many replays after
warm-up, L2 flushed before each ("cold"), plus the mean of 20 back-to-back
calls captured in one graph ("warm": cnr2000's int32 ids, 13 MB, fit the
H200's L2). Every method's edges are first checked bit for bit against the
foundation kernel's (same seed); a method whose check fails gets no rate.

Each row also gives the frontier's mix: full nodes (degree <= fanout),
staged random nodes (fanout < degree <= d_max) and hubs (degree > d_max).
Each hop also times a floor (``--floor``, on by default): a kernel that
only reads what any exact sampler of these edges must read from memory,
each frontier node's row bounds (``indptr[v]``, ``indptr[v + 1]``) and
each sampled edge's neighbour id at its CSC position (the foundation's own
``eid``, so the very sectors it picks from), and writes them: no random
numbers, no classification, one load per edge in flight. A sampler that
draws these edges reads at least those sectors, so foundation / floor
bounds, roughly, any method's speedup on that hop from reading memory more
cleverly (GARDEN's staging reads whole rows: the same sectors or more).
Roughly: the floor reads the positions (8 coalesced bytes an edge) that a
sampler computes, and writes 4-8 bytes an edge where the samplers here
write 24 (source, target and position), or 16 without positions
(``--return-eid 0``: what the loader asks for on a graph without edge
attributes; each setting's rows have their own foundation baseline, the
floor's ratio is against the last).

The foundation kernel is also timed at the grouped kernel's small tiles
(``--foundation-block-nodes``, 16 and 32 nodes a program against its 128-256;
48-80 registers at fanout 15 against 158, ``bench/kernel_registers.py``), so that a
gain from occupancy alone is not credited to staging.

Usage (GPU machine)::

    python bench/bench_sampler_kernel.py --commit <sha> --out bench/results/sampler_kernel.json

``--device cpu`` is a smoke test of the script (Triton's interpreter, tiny
graphs, no timing worth reading).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def shape(text):
    """``NODES:WARPS[:MAXNREG[:LOOK_BACK]]``: a register cap (ptxas spills
    past it; 0 none) and the fused kernel's look-back window (0: its
    default)."""
    nodes, warps, maxnreg, look_back = ([int(x) for x in text.split(":")] + [0, 0])[:4]
    return nodes, warps, maxnreg or None, look_back or None


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the script (interpreter)")
    parser.add_argument("--nodes", type=int, default=None, help="Chung-Lu nodes (default 2^24; cpu 3000)")
    parser.add_argument("--edges", type=int, default=None, help="Chung-Lu edges (default 2^28; cpu 30000)")
    parser.add_argument("--cnr2000", default=None,
                        help="path of cnr2000.npz (default: shared/data/ in or beside the checkout)")
    parser.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=None, help="seeds (default 8000; cpu 32)")
    parser.add_argument("--d-max", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--foundation-block-nodes", type=int, nargs="*", default=[16, 32],
                        help="also time the foundation kernel at these tile heights (its default: 128-256)")
    parser.add_argument("--fused-shapes", type=shape, nargs="*", default=[],
                        help="also time method='fused' at these NODES:WARPS[:MAXNREG[:LOOK_BACK]] (nodes a "
                             "program, its warps, a register cap, the look-back's window; 0: the default)")
    parser.add_argument("--fused-lanes", type=int, nargs="*", default=[], choices=[0, 1],
                        help="also time method='fused' drawing one node a lane (1) or in the grouped tile (0) "
                             "(sample_fused.LANES)")
    parser.add_argument("--replace", action="store_true")
    parser.add_argument("--return-eid", type=int, nargs="+", default=[1], choices=[0, 1],
                        help="time with each edge's CSC position written (1) and/or not (0: the loader's "
                             "setting for graphs without edge attributes)")
    parser.add_argument("--floor", type=int, default=1, choices=[0, 1],
                        help="also time the reads alone (module docstring); 0: not")
    parser.add_argument("--placements", nargs="+", default=["device", "host"], choices=["device", "host"])
    parser.add_argument("--frontier-orders", nargs="+", default=["frontier", "sorted"],
                        choices=["frontier", "sorted"],
                        help="through UVA, each method's rows also read in node-id order (sort_frontier=True; "
                             "not the fused kernel); ratios against the first order's foundation kernel")
    parser.add_argument("--out", default=None, help="append the record to this JSON file")
    parser.add_argument("--commit", default=None)
    args = parser.parse_args()
    cpu = args.device == "cpu"
    args.nodes = args.nodes or (3000 if cpu else 1 << 24)
    args.edges = args.edges or (30_000 if cpu else 1 << 28)
    args.batch_size = args.batch_size or (32 if cpu else 8000)
    return args


def find_cnr2000(path):
    candidates = [path] if path else [os.path.join(HERE, "..", "shared", "data", "cnr2000.npz"),
                                      os.path.join(HERE, "..", "..", "shared", "data", "cnr2000.npz")]
    return next((p for p in candidates if os.path.isfile(p)), None)


def frontiers(graph, seeds, num_neighbors, device):
    """The frontier of every hop of one batch: the seeds, then each hop's
    new nodes, as the sampler finds them."""
    from tritongnn import NeighborSampler
    out = NeighborSampler(graph, num_neighbors, device=device, cuda_graph=False).sample(
        seeds, torch.Generator().manual_seed(0))
    bounds = torch.tensor(out.num_sampled_nodes).cumsum(0).tolist()
    starts = [0] + bounds[:-1]
    return [out.node[a:b] for a, b in zip(starts, bounds)][:len(num_neighbors)]


def timed(fn, device):
    """(cold ms, warm ms) of ``fn``: see the module docstring."""
    if device.type != "cuda":
        fn()
        start = time.perf_counter()
        fn()
        ms = (time.perf_counter() - start) * 1e3
        return ms, ms
    from triton.testing import do_bench
    fn()  # compile outside the capture
    torch.cuda.synchronize(device)
    one = torch.cuda.CUDAGraph()
    with torch.cuda.graph(one):
        fn()
    cold = do_bench(one.replay, warmup=25, rep=200, return_mode="median")
    reps = 20
    many = torch.cuda.CUDAGraph()
    with torch.cuda.graph(many):
        for _ in range(reps):
            fn()
    many.replay()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        many.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    del one, many
    return cold, sorted(times)[len(times) // 2]


@contextlib.contextmanager
def tile_height(block_nodes):
    """The foundation (or fused) kernel at another tile height (``(nodes,
    warps)`` for another warp count too): its registers
    (and so its programs an SM) fall with it, which a faster grouped kernel
    might owe to its small tiles rather than to staging. This baseline tells
    them apart; for the fused kernel, the height also sets its look-back's
    chain length."""
    from tritongnn.kernels import sample as sample_module, sample_fused
    saved = sample_module._launch_settings, sample_fused._launch_settings, sample_fused.LOOK_BACK
    if block_nodes:
        nodes, warps, maxnreg, look_back = block_nodes if isinstance(block_nodes, tuple) \
            else (block_nodes, 4, None, None)
        sample_module._launch_settings = lambda fanout_pad: (nodes, warps)
        sample_fused._launch_settings = lambda fanout_pad, d_max, stage: (nodes, warps, maxnreg)
        sample_fused.LOOK_BACK = look_back or sample_fused.LOOK_BACK
    try:
        yield
    finally:
        sample_module._launch_settings, sample_fused._launch_settings, sample_fused.LOOK_BACK = saved


@contextlib.contextmanager
def fused_staging(stage, lanes=None):
    """``method="fused"`` with its rows staged (``sample.FUSED_STAGE``) or
    not, and drawing and storing its way ``lanes`` (``sample_fused.LANES``;
    None: the default)."""
    from tritongnn.kernels import sample, sample_fused
    old = sample.FUSED_STAGE, sample_fused.LANES
    sample.FUSED_STAGE = stage
    sample_fused.LANES = sample_fused.LANES if lanes is None else bool(lanes)
    try:
        yield
    finally:
        sample.FUSED_STAGE, sample_fused.LANES = old


@functools.cache
def floor_kernel():
    """The floor's Triton kernel, defined once the interpreter switch is set
    (``main``: ``triton.jit`` reads it when it decorates)."""
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
    """The floor (module docstring): ``(degree, neighbours)``, each frontier
    node's degree and ``indices[eid[:num_edges]]``, in one launch of a
    program per block of nodes and edges."""
    import triton
    n, e, block = frontier.numel(), num_edges, 1024
    degree = torch.empty(n, dtype=indptr.dtype, device=frontier.device)
    out = torch.empty(e, dtype=indices.dtype, device=frontier.device)
    floor_kernel()[(triton.cdiv(max(n, e, 1), block),)](indptr, indices, frontier, eid, degree, out, n, e,
                                                         BLOCK=block)
    return degree, out


def bench_graph(name, graph, args, device, rows):
    from tritongnn.kernels import sample_neighbors
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))[:args.batch_size]
    layers = frontiers(graph.to(device), seeds.to(device), args.num_neighbors, device)
    degree_all = graph.degree().to(device)
    # (label, method, d_max, foundation tile height, (fused staging, fused lanes)); the first is the baseline
    plain = (False, None)
    configs = [("foundation", "foundation", None, None, plain)] + \
        [(f"foundation BN={b}", "foundation", None, b, plain) for b in args.foundation_block_nodes] + \
        [(f"{m} d_max={d}", m, d, None, plain) for m in ("grouped", "grouped_split") for d in args.d_max] + \
        [("fused", "fused", None, None, plain)] + \
        [(f"fused lanes={lanes}", "fused", None, None, (False, lanes)) for lanes in args.fused_lanes] + \
        [(f"fused BN={b} w{w}" + (f" r{r}" if r else "") + (f" lb{lb}" if lb else ""), "fused", None,
          (b, w, r, lb), plain) for b, w, r, lb in args.fused_shapes] + \
        [(f"fused staged d_max={d}", "fused", d, None, (True, None)) for d in args.d_max]
    for placement in args.placements:
        if placement == "host" and device.type != "cuda":
            continue
        g = graph.to(device) if placement == "device" else graph.pin_memory()
        for hop, (frontier, fanout) in enumerate(zip(layers, args.num_neighbors)):
            n = frontier.numel()
            local = torch.arange(n, device=device)
            num = torch.tensor([n], device=device)
            seed = torch.tensor([12345], device=device)
            degree = degree_all[frontier]
            full = int((degree <= fanout).sum())

            def call(method, d_max, block_nodes, stage=plain, eid=True, order="frontier"):
                with tile_height(block_nodes), fused_staging(*stage):
                    return sample_neighbors(g.indptr, g.indices, frontier, local, num, fanout, args.replace,
                                            return_eid=eid, seed=seed, method=method, d_max=d_max or 64,
                                            sort_frontier=order == "sorted")

            def report(label, method, cold, warm, correct, wrong, d_max=None, block_nodes=None, mix="", **extra):
                """One timed row of this hop, against the baseline's ``base``."""
                rows.append(dict(graph=name, placement=placement, hop=hop + 1, fanout=fanout, frontier=n, edges=e,
                                 frontier_order=extra.pop("order", "frontier"),
                                 method=method, d_max=d_max, foundation_block_nodes=block_nodes, full_nodes=full,
                                 ms_cold=cold, ms_warm=warm, medges_per_s_cold=e / cold / 1e3,
                                 medges_per_s_warm=e / warm / 1e3, speedup_cold=base[0] / cold,
                                 speedup_warm=base[1] / warm, correct=correct, **extra))
                print(f"{name:9s} {placement:6s} hop {hop + 1} fanout {fanout:2d} frontier {n:8d} "
                      f"edges {e:9d} | {label:24s} cold {cold:8.3f} ms {e / cold / 1e3:8.1f} M/s "
                      f"x{base[0] / cold:5.2f} | warm {warm:8.3f} ms x{base[1] / warm:5.2f}"
                      f"{'' if correct else '  ' + wrong}{mix}", flush=True)

            ref = call("foundation", None, None)
            e = int(ref.num_edges)
            ref = (ref.src[:e].clone(), ref.dst[:e].clone(), ref.eid[:e].clone())
            orders = args.frontier_orders if placement == "host" else ["frontier"]
            for eid, order, (label, method, d_max, block_nodes, stage) in itertools.product(
                    args.return_eid, orders, configs):
                if order == "sorted" and method == "fused":
                    continue  # its look-back scan reads the frontier in its own order
                if (order, label) == (orders[0], configs[0][0]):
                    base = None  # each return_eid setting's first row is its baseline
                label = label + (" sorted" if order == "sorted" else "")
                got = call(method, d_max, block_nodes, stage, bool(eid), order)
                correct = int(got.num_edges) == e and all(
                    torch.equal(a, b[:e]) for a, b in zip(ref, (got.src, got.dst, got.eid)) if b is not None)
                del got
                cold, warm = timed(lambda: call(method, d_max, block_nodes, stage, bool(eid), order), device) \
                    if correct else (float("nan"),) * 2
                base = base or (cold, warm)
                extra, mix = {}, ""
                if d_max is not None:
                    extra = dict(staged_random_nodes=int(((degree > fanout) & (degree <= d_max)).sum()),
                                 hubs=int((degree > max(d_max, fanout)).sum()))
                    mix = f"  (full {full / n:.0%}, staged {extra['staged_random_nodes'] / n:.0%}, " \
                          f"hubs {extra['hubs'] / n:.0%})"
                report(label + ("" if eid else " no eid"), method, cold, warm, correct, "WRONG EDGES", d_max,
                       block_nodes, mix, fused_stage=stage[0], fused_lanes=stage[1], return_eid=bool(eid),
                       order=order, **extra)
            if args.floor:
                eid = ref[2]
                degree, got = picks_floor(g.indptr, g.indices, frontier, eid, e)
                at = g.indptr.device  # checked where the graph lives (pinned host memory through UVA)
                f = frontier.to(at)
                correct = torch.equal(degree.to(at), g.indptr[f + 1] - g.indptr[f]) \
                    and torch.equal(got.to(at), g.indices[eid.to(at)])
                del degree, got
                cold, warm = timed(lambda: picks_floor(g.indptr, g.indices, frontier, eid, e), device) \
                    if correct else (float("nan"),) * 2
                report("floor: the reads alone", "floor", cold, warm, correct, "WRONG READS")

def main():
    args = parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":  # the kernels run through the interpreter; set before tritongnn loads
        os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, os.path.join(HERE, ".."))
    sys.path.insert(0, HERE)
    from tritongnn import CSCGraph
    from tritongnn.datasets import chung_lu, load_npz
    from _record import append_record, new_record

    rows = []
    start = time.perf_counter()
    data = chung_lu(args.nodes, args.edges, num_features=1, train_fraction=0.0, val_fraction=0.0,
                    test_fraction=0.0, device=device, seed=0)
    csc = CSCGraph.from_edge_index(data.edge_index, args.nodes)
    del data
    graphs = [("chung_lu", CSCGraph(csc.indptr, csc.indices.to(torch.int32), validate=False).to("cpu"))]
    del csc
    cnr = find_cnr2000(args.cnr2000)
    if cnr:
        data = load_npz(cnr)
        csc = CSCGraph.from_edge_index(data.edge_index, data.num_nodes)
        graphs.append(("cnr2000", CSCGraph(csc.indptr, csc.indices.to(torch.int32), validate=False)))
    else:
        print("cnr2000.npz not found (pass --cnr2000): only the synthetic graph", flush=True)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    settings = dict(graphs={n: dict(nodes=g.num_nodes, edges=g.num_edges, indices="int32") for n, g in graphs},
                    chung_lu="exponent 2.5, homophily 0.8, seed 0", num_neighbors=args.num_neighbors,
                    batch_size=args.batch_size, d_max=args.d_max, replace=args.replace,
                    return_eid=args.return_eid, foundation_block_nodes=args.foundation_block_nodes,
                    timing="one sample_neighbors call in a CUDA graph; cold: do_bench median, L2 flushed; "
                           "warm: 20 calls in one graph, median of 5")
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none (interpreter smoke test)"
    print(f"GPU {gpu}, torch {torch.__version__}; graphs ready in {time.perf_counter() - start:.1f} s; "
          f"settings {settings}", flush=True)
    for name, graph in graphs:
        bench_graph(name, graph, args, device, rows)
    wrong = [r for r in rows if not r["correct"]]
    if wrong:
        print(f"{len(wrong)} configurations gave edges other than the foundation kernel's: no rate for them")
    append_record(args.out, new_record("sampler_kernel", device, args.commit, settings=settings, rows=rows))


if __name__ == "__main__":
    main()
