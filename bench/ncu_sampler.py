"""Nsight Compute on the sampling kernels: the foundation kernel against the
grouped one (GARDEN's GPS) and the fused one (a whole hop in one launch), one
batch's hops, adjacency in GPU memory.

The driver runs this same file under ``ncu --clock-control none`` (clocks
as in a real run, not locked to base) once per graph; the profiled process
builds the graph, finds one batch's hop frontiers (``--batch-size`` seeds,
``--num-neighbors``) and samples every hop once with each method, so ncu
sees one launch of ``_sample_kernel``, ``_grouped_kernel`` and
``_fused_kernel`` per hop (the classifier's kernels, which the first two
follow, are not profiled: the fused kernel's row is a whole hop, the
others' their sampling kernel alone). Reported per launch:

* global load efficiency: useful bytes per 32-byte sector loaded
  (``smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct``), and
  sectors per load request;
* achieved memory throughput: DRAM bytes read per second and the SOL memory
  throughput (% of peak), plus the kernel's duration under the profiler.

Usage (GPU machine, ncu on the PATH)::

    python bench/ncu_sampler.py --cnr2000 path/cnr2000.npz --commit <sha> --out bench/results/ncu_sampler.json
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = {"_sample_kernel": "foundation", "_grouped_kernel": "grouped", "_fused_kernel": "fused"}
METRICS = {
    "gpu__time_duration.sum": "duration_ns",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct": "load_efficiency_pct",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "load_sectors",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "load_requests",
    "dram__bytes_read.sum.per_second": "dram_read_bytes_per_s",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
}


def target(args):
    """The profiled process: every hop of one batch, once per method."""
    import torch
    sys.path.insert(0, os.path.join(HERE, ".."))
    sys.path.insert(0, HERE)
    from bench_sampler_kernel import frontiers
    from tritongnn import CSCGraph
    from tritongnn.datasets import chung_lu, load_npz
    from tritongnn.kernels import sample_neighbors
    device = torch.device("cuda")
    if args.graph == "chung_lu":
        data = chung_lu(args.nodes, args.edges, num_features=1, train_fraction=0.0, val_fraction=0.0,
                        test_fraction=0.0, device=device, seed=0)
    else:
        data = load_npz(args.cnr2000)
    csc = CSCGraph.from_edge_index(data.edge_index, data.num_nodes)
    cpu = CSCGraph(csc.indptr.cpu(), csc.indices.to(torch.int32).cpu(), validate=False)
    del data, csc
    graph = cpu.to(device)
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))[:args.batch_size]
    # the frontiers from the CPU path, so that ncu sees no sampling launch but the measured ones
    layers = frontiers(cpu, seeds, args.num_neighbors, torch.device("cpu"))
    for frontier, fanout in zip(layers, args.num_neighbors):
        frontier = frontier.to(device)
        n = frontier.numel()
        local = torch.arange(n, device=device)
        num = torch.tensor([n], device=device)
        seed = torch.tensor([12345], device=device)
        for method in KERNELS.values():
            sample_neighbors(graph.indptr, graph.indices, frontier, local, num, fanout, return_eid=True,
                             seed=seed, method=method, d_max=args.d_max)
        torch.cuda.synchronize()
        print(f"hop frontier {n}, fanout {fanout}", flush=True)


def profile(graph, args):
    """Run ncu on the target for ``graph``; one dict per profiled launch."""
    cmd = [args.ncu, "--clock-control", "none", "--csv", "--page", "raw",
           "--kernel-name", "regex:" + "|".join(KERNELS), "--metrics", ",".join(METRICS),
           sys.executable, os.path.abspath(__file__), "--target", "--graph", graph,
           "--nodes", str(args.nodes), "--edges", str(args.edges), "--batch-size", str(args.batch_size),
           "--d-max", str(args.d_max), "--cnr2000", args.cnr2000 or "",
           "--num-neighbors", *map(str, args.num_neighbors)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..")))
    text = done.stdout
    start = text.find('"ID"')
    if done.returncode or start < 0:
        raise SystemExit(f"ncu failed ({done.returncode}):\n{text[-3000:]}\n{done.stderr[-3000:]}")
    table = list(csv.DictReader(io.StringIO(text[start:])))
    rows = []
    for line in table[1:]:  # the first line after the header holds units
        name = next((k for k in KERNELS if k in line["Kernel Name"]), None)
        if name is None:
            continue
        row = dict(graph=graph, kernel=name, method=KERNELS[name])
        for metric, key in METRICS.items():
            value = line.get(metric, "").replace(",", "")
            row[key] = float(value) if value not in ("", "n/a") else None
        rows.append(row)
    hops = [r for r in rows if r["method"] == "foundation"]
    for method in KERNELS.values():
        for hop, r in enumerate(r for r in rows if r["method"] == method):
            r["hop"], r["fanout"] = hop + 1, args.num_neighbors[hop % len(args.num_neighbors)]
    assert len(hops) == len(args.num_neighbors), f"expected one foundation launch per hop, got {len(hops)}"
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--graph", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--graphs", nargs="+", default=["chung_lu", "cnr2000"])
    parser.add_argument("--nodes", type=int, default=50_000_000)
    parser.add_argument("--edges", type=int, default=1_000_000_000)
    parser.add_argument("--cnr2000", default=None, help="path of cnr2000.npz")
    parser.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=8000)
    parser.add_argument("--d-max", type=int, default=64)
    parser.add_argument("--ncu", default="ncu", help="the ncu executable")
    parser.add_argument("--out", default=None, help="append the record to this JSON file")
    parser.add_argument("--commit", default=None)
    args = parser.parse_args()
    if args.target:
        return target(args)
    import torch
    sys.path.insert(0, HERE)
    from _record import append_record, new_record
    rows = []
    for graph in args.graphs:
        if graph == "cnr2000" and not (args.cnr2000 and os.path.isfile(args.cnr2000)):
            print("cnr2000 skipped: pass --cnr2000 PATH", flush=True)
            continue
        rows += profile(graph, args)
    print(f"{'graph':9s} {'hop':>3s} {'fanout':>6s} {'method':10s} {'us':>8s} {'ld eff %':>8s} "
          f"{'sect/req':>8s} {'DRAM GB/s':>9s} {'DRAM %':>7s} {'mem %':>6s} {'occup %':>7s}")
    for r in rows:
        per_req = r["load_sectors"] / r["load_requests"] if r["load_requests"] else float("nan")
        r["sectors_per_request"] = per_req

        def f(key, scale=1.0, width=8, digits=1):
            return f"{'-':>{width}s}" if r[key] is None else f"{r[key] * scale:{width}.{digits}f}"

        print(f"{r['graph']:9s} {r['hop']:3d} {r['fanout']:6d} {r['method']:10s} {f('duration_ns', 1e-3)} "
              f"{f('load_efficiency_pct')} {per_req:8.2f} {f('dram_read_bytes_per_s', 1e-9, 9)} "
              f"{f('dram_throughput_pct', width=7)} {f('memory_throughput_pct', width=6)} "
              f"{f('achieved_occupancy_pct', width=7)}")
    settings = dict(nodes=args.nodes, edges=args.edges, num_neighbors=args.num_neighbors,
                    batch_size=args.batch_size, d_max=args.d_max, placement="device", indices="int32",
                    ncu="--clock-control none, one launch per hop and method")
    append_record(args.out, new_record("ncu_sampler", torch.device("cuda"), args.commit, settings=settings,
                                       rows=rows))


if __name__ == "__main__":
    main()
