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
against ``index_select``. Usage (GPU machine)::

    python bench/bench_gather_bounded.py --out bench/results/gather_bounded.json
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from _record import append_record, new_record  # noqa: E402
from tritongnn.kernels import gather as gather_module  # noqa: E402
from tritongnn.kernels.gather import gather_rows  # noqa: E402


def timed(fn) -> float:
    """Median ms of ``fn`` replayed from a CUDA graph."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return do_bench(graph.replay, warmup=25, rep=200, return_mode="median")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1 << 26, help="table rows (128 float32 each: 32 GB at 2^26)")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--bound", type=int, default=7_328_000, help="slots of the ids buffer")
    p.add_argument("--counts", type=int, nargs="+", default=[1_000_000, 3_000_000, 7_328_000])
    p.add_argument("--per-sm", type=int, nargs="+", default=[2, 4, 8, 16, 32])
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
    record = new_record("gather_bounded", device, args.commit, rows_in_table=args.rows, width=args.width,
                        bound=args.bound, default_per_sm=default, rows=rows)
    append_record(args.out, record)


if __name__ == "__main__":
    main()
