"""Feature gather benchmark: ``tritongnn.kernels.gather_rows`` against
PyTorch's, checked against ``table[ids]`` before it is timed (a gather
whose check fails gets no rate).

Scenarios (``--scenario``):

* ``random``: GB/s of useful bytes (rows read once, written once) at
  uniform random ids of several counts (a batch has ~10^5 nodes) and at a
  real batch's ``n_id``: from GPU memory against ``torch.index_select``
  (both replayed from a CUDA graph: kernel time), and from pinned host
  memory through UVA (the argsort of the ids included) against a bulk
  host-to-device copy of as many contiguous rows, the PCIe ceiling.
* ``bounded``: the gather a replayed batch runs, ``gather_rows(...,
  count=)`` over an ids buffer sized by the sampler's bound (papers100M
  scale, batch 8000, [15, 10, 5]: 7.3x10^6 slots) of which the first
  ``count`` are gathered, against ``gather_rows`` of exactly ``count`` ids.

    python bench/gather.py --scenario random --out bench/results/gather.json
    python bench/gather.py --scenario bounded --out bench/results/gather_bounded.json

``--device cpu`` is a smoke test (Triton's interpreter, tiny sizes).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import append_record, kernel_ms, new_record, print_ratios, print_settings  # noqa: E402

SCENARIOS = ("random", "bounded")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of the script (interpreter)")
    p.add_argument("--rows", type=int, default=None, help="table rows (default 2^24; cpu 2^10)")
    p.add_argument("--width", type=int, default=128, help="float32 columns")
    p.add_argument("--counts", type=int, nargs="+", default=None, help="random: ids gathered (default 2^16..2^20)")
    p.add_argument("--bounded-counts", type=int, nargs="+", default=None,
                   help="bounded: ids gathered of the bound (default 1M, 3M, the bound)")
    p.add_argument("--bound", type=int, default=None, help="bounded: slots of the ids buffer (default 7,328,000)")
    p.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5], help="random: the batch's fanouts")
    p.add_argument("--batch-size", type=int, default=8000, help="random: the batch's seeds")
    p.add_argument("--out", default=None, help="append the record to this JSON file")
    p.add_argument("--commit", default=None)
    args = p.parse_args(argv)
    cpu = args.device == "cpu"
    args.rows = args.rows or (1 << 10 if cpu else 1 << 24)
    args.bound = args.bound or (300 if cpu else 7_328_000)
    args.counts = args.counts or ([100, 200] if cpu else [1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20])
    args.bounded_counts = args.bounded_counts or ([100, 300] if cpu else [1_000_000, 3_000_000, 7_328_000])
    args.batch_size = min(args.batch_size, args.rows // 8)
    return args


def useful_gb_s(n: int, width: int, elem: int, ms: float) -> float:
    return n * width * elem / ms / 1e6


def random_ids(args, table, device, gather_rows, emit):
    """The ``random`` scenario: each id set gathered four ways."""
    from tritongnn import CSCGraph, NeighborSampler
    from tritongnn.datasets import rmat
    width, elem = table.size(1), table.element_size()
    scale = max(4, (args.rows - 1).bit_length())
    data = rmat(scale, 16 * (1 << scale), num_features=1, device=device, seed=0)
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, device=device)
    seeds = torch.randperm(args.rows, device=device)[:args.batch_size]
    n_id = NeighborSampler(graph, args.num_neighbors, device=device).sample(
        seeds, torch.Generator().manual_seed(1)).node
    del data, graph
    gen = torch.Generator(device=device).manual_seed(2)
    id_sets = [(f"{n} random ids", torch.randint(0, args.rows, (n,), device=device, generator=gen))
               for n in args.counts]
    id_sets.insert(1, ("n_id of a batch", n_id))
    host = table.cpu().pin_memory() if device.type == "cuda" else None
    for label, ids in id_sets:
        out = torch.empty(ids.numel(), width, dtype=table.dtype, device=device)
        expected = table[ids]
        ways = [("gather_rows HBM", lambda: gather_rows(table, ids, out, validate=False), True),
                ("index_select HBM", lambda: torch.index_select(table, 0, ids, out=out), True)]
        if host is not None:
            ways.append(("gather_rows UVA", lambda: gather_rows(host, ids, out, validate=False), False))
        for name, fn, graph_ok in ways:
            out.zero_()
            fn()
            correct = bool(torch.equal(out, expected))
            ms = kernel_ms(fn, device, cuda_graph=graph_ok) if correct else float("nan")
            emit(dict(scenario="random", ids=label, count=ids.numel(), way=name, ms=ms, correct=correct,
                      gb_s=useful_gb_s(ids.numel(), width, elem, ms)))
        if host is not None:  # as many contiguous rows at once: the PCIe ceiling
            n = ids.numel()
            ms = kernel_ms(lambda: out.copy_(host[:n], non_blocking=True), device, cuda_graph=False)
            emit(dict(scenario="random", ids=label, count=n, way="bulk copy host->GPU", ms=ms, correct=True,
                      gb_s=useful_gb_s(n, width, elem, ms)))


def bounded(args, table, device, gather_rows, emit):
    """The ``bounded`` scenario: ``count=`` over the bound against exact ids."""
    width, elem = table.size(1), table.element_size()
    g = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(0, args.rows, (args.bound,), device=device, generator=g)
    out = torch.empty(args.bound, width, dtype=table.dtype, device=device)
    for count in args.bounded_counts:
        count = min(count, args.bound)
        n = torch.tensor([count], device=device)
        expected = table.index_select(0, ids[:count])
        ways = [("exact ids", lambda: gather_rows(table, ids[:count], out[:count], validate=False)),
                ("count= over the bound", lambda: gather_rows(table, ids, out, validate=False, count=n))]
        for name, fn in ways:
            out.fill_(float("nan"))
            fn()
            correct = bool(torch.equal(out[:count], expected))
            ms = kernel_ms(fn, device) if correct else float("nan")
            emit(dict(scenario="bounded", ids=f"{count} of {args.bound}", count=count, way=name, ms=ms,
                      correct=correct, gb_s=useful_gb_s(count, width, elem, ms)))


def ratios(rows) -> dict:
    out = {}
    by = {(r["scenario"], r["ids"], r["way"]): r for r in rows}
    for (scenario, ids, way), r in by.items():
        base = {"gather_rows HBM": "index_select HBM", "gather_rows UVA": "bulk copy host->GPU",
                "count= over the bound": "exact ids"}.get(way)
        if base and (scenario, ids, base) in by and r["correct"]:
            out[f"{scenario} {ids}: {way} / {base} (GB/s)"] = r["gb_s"] / by[scenario, ids, base]["gb_s"]
    return out


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":  # the kernels through the interpreter; set before triton.jit decorates them
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from tritongnn.kernels import gather_rows
    settings = dict(scenario=args.scenario, rows=args.rows, width=args.width, dtype="float32",
                    counts=args.counts, bounded_counts=args.bounded_counts, bound=args.bound,
                    timing="do_bench median; HBM gathers replayed from a CUDA graph")
    print_settings(device, settings)
    g = torch.Generator(device=device).manual_seed(0)
    table = torch.randn(args.rows, args.width, device=device, generator=g)
    rows = []

    def emit(row):
        rows.append(row)
        print(f"{row['scenario']:8s} {row['ids']:22s} {row['way']:24s} {row['ms']:9.4f} ms "
              f"{row['gb_s']:8.1f} GB/s useful  correct={row['correct']}", flush=True)

    if "random" in args.scenario:
        random_ids(args, table, device, gather_rows, emit)
    if "bounded" in args.scenario:
        bounded(args, table, device, gather_rows, emit)
    found = ratios(rows)
    print_ratios(found)
    wrong = [r for r in rows if not r["correct"]]
    if wrong:
        print(f"{len(wrong)} gathers gave rows other than table[ids]: no rate for them", flush=True)
    append_record(args.out, new_record("gather", device, args.commit, settings=settings, rows=rows, ratios=found))


if __name__ == "__main__":
    main()
