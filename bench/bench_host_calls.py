"""Host time of the calls a loader's producer makes for each batch.

The no-budget step is bound by the host (bench/results/README.md,
twenty-third session), and the producer's Python shares one interpreter
lock with the training loop: each of these calls, made once or more a
batch, costs the loop about its own time. This prints the host
microseconds per call of each, on an idle GPU, small sizes (the launch,
not the work)::

    python bench/bench_host_calls.py [--calls 2000] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import triton
from torch_geometric.data import Data

from tritongnn.kernels import gather as gather_module
from tritongnn.kernels._launch import host_list
from tritongnn.sampling.sampler import _edge_rows


def per_call(fn, calls: int, device) -> float:
    """Host µs per call of ``fn`` (its GPU work is not waited for, but the
    GPU drains before and after, so that no queue fills)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    seconds = time.perf_counter() - start
    torch.cuda.synchronize(device)
    return seconds / calls * 1e6


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_host_calls.py times the host side of CUDA launches: it needs a GPU")
    device = torch.device("cuda")
    n, rows, width = 4096, 1 << 16, 128
    table = torch.randn(rows, width, device=device)
    ids = torch.randint(0, rows, (n,), device=device)
    order = torch.randperm(rows, device=device)
    y = torch.randint(0, 100, (rows,), device=device)
    parts = [ids[:1000], ids[1000:2500], ids[2500:]]
    out = torch.empty(n, width, device=device)
    side = torch.cuda.Stream(device)
    block_rows, block_d, warps = gather_module._launch_settings(width * 4, 4, False)

    grid = triton.cdiv(n, block_rows)
    args_in_order = (table, table, table, ids, table, ids, ids, ids, ids, ids, out, n, 0, grid, width,
                     table.stride(0), table.stride(0), table.stride(0), table.stride(0), out.stride(0))
    constexprs = dict(TIERS=1, REUSE=False, MAPPED=False, ORDERED=False, BOUNDED=False, IDS_SORTED=False,
                      BLOCK_ROWS=block_rows, BLOCK_D=block_d)

    def raw_launch():  # returns the compiled kernel (Triton's run does)
        return gather_module._gather_kernel[(grid,)](*args_in_order, **constexprs, num_warps=warps)

    edge_index = torch.stack([ids, ids])
    compiled = raw_launch()
    positional = args_in_order + tuple(constexprs.values())  # every parameter in order, constexprs too

    def compiled_launch():  # past Triton's binder and cache lookup
        compiled[(grid, 1, 1)](*positional)

    out.zero_()
    try:
        compiled_launch()
        print("the compiled launcher gathers right:", torch.equal(out, table[ids]), flush=True)
    except Exception as error:
        print(f"the compiled launcher failed: {type(error).__name__}: {error}", flush=True)

    def event_record():
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(device))

    def data_build():
        batch = Data(edge_index=edge_index, n_id=ids)
        batch.x = out
        batch.y = ids
        batch.input_id = ids
        batch.batch_size = 8000
        batch.num_sampled_nodes = [1, 2, 3, 4]
        batch.num_sampled_edges = [1, 2, 3]

    zero = ids.new_zeros(6)

    def stats_add():
        z = ids.new_zeros(())
        zero.add_(torch.stack([z, z, z, z, z, z]))

    calls = {
        "gather_rows (one GPU tier, validate=False)": lambda: gather_module.gather_rows(table, ids, out, validate=False),
        "_gather_kernel[grid](...) alone": raw_launch,
        "the compiled kernel's own launcher": compiled_launch,
        "torch.empty (x of a batch)": lambda: torch.empty(n, width, device=device),
        "slice t[:k]": lambda: ids[:1000],
        "torch.cat of 4 slices (with the slicing)": lambda: torch.cat([ids[:100], ids[:200], ids[:300], ids[:50]]),
        "_edge_rows of 3 hops (the sampler's row/col)": lambda: _edge_rows(parts, parts, device),
        "order[node] (n_id)": lambda: order[ids],
        "y.index_select(0, n_id)": lambda: y.index_select(0, ids),
        "host_list of 6 sizes": lambda: host_list(ids[:6]),
        "torch.cuda.Event(timing) + record": event_record,
        "stream.wait_stream": lambda: side.wait_stream(torch.cuda.current_stream(device)),
        "tensor.record_stream": lambda: ids.record_stream(side),
        "Data with 8 attributes": data_build,
        "stats: new_zeros + stack + add_": stats_add,
        "torch.randint(3) + .to(device)": lambda: torch.randint(0, 2**31 - 1, (3,)).to(device),
    }
    results = {}
    for name, fn in calls.items():
        try:
            results[name] = per_call(fn, args.calls, device)
        except Exception as error:  # (the compiled launcher is Triton's internal API)
            print(f"   failed  {name}: {type(error).__name__}: {error}", flush=True)
            continue
        print(f"{results[name]:8.2f} µs  {name}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(device), torch=torch.__version__,
                           triton=triton.__version__, us_per_call=results), f, indent=1)


if __name__ == "__main__":
    main()
