"""A gather whose length the device holds, against one sized by the host.

A batch replayed from a CUDA graph (``sampling/pipeline.py``) gathers its
feature rows with ``gather_rows(..., count=)``: the ids buffer is sized by
the sampler's bound (papers100M scale, batch 8000, [15, 10, 5]: 7.3x10^6
slots) and only the first ``count`` (~3x10^6 nodes) are gathered. A grid
over the bound launches a block per 16 slots, most of which exit at once;
a persistent grid of ``BOUNDED_PROGRAMS_PER_SM`` programs a multiprocessor
walks the ``count`` rows instead. This times, from GPU memory, in one run:

* ``exact``: ``gather_rows`` of exactly ``count`` ids (the producer path);
* ``bounded, full grid``: the bound-sized grid (as before the cap);
* ``bounded, P per SM``: the persistent grid at several P;

each the median of ``do_bench`` replays of a CUDA graph, outputs checked
against ``index_select``. With ``--labels``, also a node attribute of one
int64 a node (labels of ``--label-rows`` nodes): ``torch.index_select`` of
exactly ``count`` ids and over the whole bound, against ``gather_rows`` of
exactly ``count`` and ``take_node_rows`` (``count=``, the replayed slot's
lookup), each with its host time a call (mean of eager calls). Usage (GPU
machine)::

    python bench/bench_gather_bounded.py --labels --out bench/results/gather_bounded.json
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from _record import append_record, new_record  # noqa: E402
from tritongnn.kernels import gather as gather_module  # noqa: E402
from tritongnn.kernels.gather import gather_rows, take_node_rows  # noqa: E402


def timed(fn) -> float:
    """Median ms of ``fn`` replayed from a CUDA graph."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return do_bench(graph.replay, warmup=25, rep=200, return_mode="median")


def host_us(fn, calls: int = 2000) -> float:
    """Mean host microseconds of an eager call of ``fn``."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def label_rows(num_nodes: int, bound: int, counts, device) -> list[dict]:
    """One int64 a node gathered four ways (module docstring)."""
    g = torch.Generator(device=device).manual_seed(1)
    y = torch.randint(0, 172, (num_nodes,), device=device, generator=g)
    ids = torch.randint(0, num_nodes, (bound,), device=device, generator=g)
    out = torch.empty(bound, dtype=torch.int64, device=device)
    rows = []
    for count in counts:
        n = torch.tensor([count], device=device)
        settings = {
            "index_select, exact": lambda: torch.index_select(y, 0, ids[:count], out=out[:count]),
            "index_select, the bound": lambda: torch.index_select(y, 0, ids, out=out),
            "gather_rows, exact": lambda: gather_rows(y.view(-1, 1), ids[:count], out[:count].view(-1, 1),
                                                      validate=False),
            "take_node_rows, count": lambda: take_node_rows(y, ids, out, count=n),
        }
        expected = y[ids[:count]]
        for name, fn in settings.items():
            out.fill_(-1)
            ms = timed(fn)
            correct = bool(torch.equal(out[:count], expected))
            rows.append(dict(part="labels", count=count, setting=name, ms=ms, host_us=host_us(fn),
                             correct=correct))
            print(f"labels count {count:>9,}  {name:<24} {ms:7.4f} ms  {rows[-1]['host_us']:6.1f} us host  "
                  f"correct={correct}", flush=True)
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1 << 26, help="table rows (128 float32 each: 32 GB at 2^26)")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--bound", type=int, default=7_328_000, help="slots of the ids buffer")
    p.add_argument("--counts", type=int, nargs="+", default=[1_000_000, 3_000_000, 7_328_000])
    p.add_argument("--per-sm", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    p.add_argument("--labels", action="store_true", help="also time a node attribute's lookup (int64 labels)")
    p.add_argument("--label-rows", type=int, default=111_059_956, help="nodes of --labels (papers100M's)")
    p.add_argument("--label-counts", type=int, nargs="+", default=[3_000_000])
    p.add_argument("--commit", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    device = torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    table = torch.randn(args.rows, args.width, device=device, generator=g)
    ids = torch.randint(0, args.rows, (args.bound,), device=device, generator=g)
    out = torch.empty(args.bound, args.width, device=device)
    row_bytes = args.width * table.element_size()
    rows, default = [], gather_module.BOUNDED_PROGRAMS_PER_SM
    try:
        for count in args.counts:
            n = torch.tensor([count], device=device)
            expected = table.index_select(0, ids[:count])
            settings = [("exact", None)] + [("bounded, full grid", 1 << 30)] + \
                [(f"bounded, {per} per SM", per) for per in args.per_sm]
            for name, per in settings:
                out.fill_(float("nan"))
                if per is None:
                    fn = lambda: gather_rows(table, ids[:count], out[:count], validate=False)  # noqa: E731
                else:
                    gather_module.BOUNDED_PROGRAMS_PER_SM = per
                    fn = lambda: gather_rows(table, ids, out, validate=False, count=n)  # noqa: E731
                ms = timed(fn)
                correct = bool(torch.equal(out[:count], expected))
                rows.append(dict(count=count, setting=name, per_sm=per, ms=ms, correct=correct,
                                 useful_tb_s=count * row_bytes / ms / 1e9))
                print(f"count {count:>9,}  {name:<22} {ms:7.3f} ms  {rows[-1]['useful_tb_s']:5.2f} TB/s  "
                      f"correct={correct}", flush=True)
    finally:
        gather_module.BOUNDED_PROGRAMS_PER_SM = default
    extra = {}
    if args.labels:
        rows += label_rows(args.label_rows, args.bound, args.label_counts, device)
        extra = dict(label_rows=args.label_rows)
    record = new_record("gather_bounded", device, args.commit, rows_in_table=args.rows, width=args.width,
                        bound=args.bound, default_per_sm=default, rows=rows, **extra)
    append_record(args.out, record)


if __name__ == "__main__":
    main()
