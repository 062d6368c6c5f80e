"""Registers, spills and shared memory of the sampling kernels, without a GPU.

Triton compiles for a named target on any machine (ptxas and cuobjdump ship
with the triton wheel), so the launch shapes of ``kernels/sample.py``,
``kernels/sample_grouped.py`` and ``kernels/sample_fused.py`` can be weighed where no GPU is at hand: a
kernel that waits on memory runs as many programs per SM as its registers
allow (65536 registers an SM on Hopper, ``registers * 32 * num_warps`` a
program). Prints one line per kernel variant at the shapes the launchers
choose (``--block-nodes`` overrides them, to try others).

Usage::

    python bench/kernel_registers.py                 # sm_90, fanouts 15 10 5
    python bench/kernel_registers.py --arch 80 --fanouts 10 --d-max 64 --ids i64
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)  # compile for real, whatever the shell says
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from tritongnn.kernels import sample, sample_fused, sample_grouped  # noqa: E402
from tritongnn.kernels._launch import next_power_of_2  # noqa: E402

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def resources(fn, signature, constants, num_warps, arch, maxnreg=None):
    compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constants),
                              target=GPUTarget("cuda", arch, 32), options=dict(num_warps=num_warps, maxnreg=maxnreg))
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(compiled.asm["cubin"])
    try:
        usage = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True,
                               text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    regs, stack = (int(re.search(rf"{key}:(\d+)", usage).group(1)) for key in ("REG", "STACK"))
    return regs, stack, compiled.metadata.shared


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--d-max", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--ids", nargs="+", default=["i32", "i64"], choices=["i32", "i64"])
    parser.add_argument("--block-nodes", type=int, default=None)
    parser.add_argument("--num-warps", type=int, default=None)
    parser.add_argument("--maxnreg", type=int, default=None, help="a register cap for every kernel (ptxas spills past it)")
    args = parser.parse_args()
    print(f"sm_{args.arch}: registers a thread, stack bytes, shared bytes; programs an SM = "
          f"65536 // (registers * 32 * warps)")
    for ids in args.ids:
        for fanout in args.fanouts:
            fanout_pad = next_power_of_2(fanout)
            for tiered in (False, True):
                arrays = {"indices": f"*{ids}", "hot_indices": f"*{ids}", "frontier_local": "*i64",
                          "row_start": "*i64", "degree": "*i64", "offsets": "*i64", "num_frontier": "*i64",
                          "out_src": "*i64", "out_dst": "*i64", "out_eid": "*i64", "bound": "i64",
                          "seed": "*i64", "num_hot_edges": "i64"}
                variants = []
                block, warps = sample._launch_settings(fanout_pad)
                foundation = dict(arrays, order="*i64", frontier_batch="*i64", batch_ptr="*i64",
                                  out_batch="*i64")
                variants.append(("foundation", sample._sample_kernel, foundation,
                                 dict(FANOUT=fanout, FANOUT_PAD=fanout_pad, REPLACE=False, WRITE_EID=True,
                                      TIERED=tiered, HAS_BATCH=False), block, warps))
                for d_max in args.d_max:
                    for nodes in ("all", "random", "full"):
                        stage = d_max > fanout and nodes != "full"
                        block, warps = sample_grouped._launch_settings(fanout_pad, d_max, stage)
                        variants.append((f"grouped[{nodes}] d_max={d_max}", sample_grouped._grouped_kernel,
                                         dict(arrays, order="*i64", num_full="*i64"),
                                         dict(FANOUT=fanout, FANOUT_PAD=fanout_pad, D_MAX=d_max,
                                              TILE=max(d_max, fanout_pad), STAGE=stage,
                                              REPLACE=False, WRITE_EID=True, TIERED=tiered, NODES=nodes),
                                         block, warps))
                block, warps, maxnreg = sample_fused._launch_settings(fanout_pad, 1, False)
                fused = {"indptr": "*i64", "hot_indptr": "*i64", "indices": f"*{ids}", "hot_indices": f"*{ids}",
                         "frontier": "*i64", "frontier_local": "*i64", "num_frontier": "*i64",
                         "frontier_batch": "*i64", "batch_ptr": "*i64", "seed": "*i64", "status": "*i64",
                         "out_src": "*i64", "out_dst": "*i64", "out_eid": "*i64", "out_batch": "*i64",
                         "edge_ptr": "*i64", "bound": "i64", "num_hot": "i64", "num_hot_edges": "i64",
                         "num_batches": "i64"}
                for lanes in (True, False):  # one node a lane (the default), the grouped tile
                    variants.append((f"fused ({'lanes' if lanes else 'tile'})", sample_fused._fused_kernel, fused,
                                     dict(FANOUT=fanout, FANOUT_PAD=fanout_pad, D_MAX=1, TILE=fanout_pad,
                                          STAGE=False, REPLACE=False, WRITE_EID=True, TIERED=tiered,
                                          HAS_BATCH=False, BLOCK_K=2, LOOK_BACK=sample_fused.LOOK_BACK,
                                          LANES=lanes and fanout <= 32), block, warps, maxnreg))
                for name, fn, signature, constants, block, warps, *maxnreg in variants:
                    block, warps = args.block_nodes or block, args.num_warps or warps
                    constants = dict(constants, BLOCK_NODES=block)
                    signature = dict(signature, **{k: "constexpr" for k in constants})
                    maxnreg = args.maxnreg or (maxnreg or [None])[0]
                    regs, stack, shared = resources(fn, signature, constants, warps, args.arch, maxnreg)
                    print(f"ids {ids} fanout {fanout:2d} {'two tiers' if tiered else 'one tier '} "
                          f"{name:28s} BN {block:3d} warps {warps}: {regs:3d} registers, stack {stack}, "
                          f"shared {shared}, {65536 // (regs * 32 * warps)} programs an SM", flush=True)


if __name__ == "__main__":
    main()
