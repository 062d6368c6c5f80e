"""Why the UVA gather is shaped as it is: the experiments behind
``tritongnn/kernels/gather.py``'s launch settings, in one run.

On a 2^24 x 128 float32 table (8 GB) in pinned host memory, gathering rows in
sorted id order with ``kernels.gather._gather_kernel``:

1. grid size x rows per block x warps, at 2^17 (sparse: about a batch) and
   2^20 (dense) random ids;
2. the host memory kind: torch's pinned memory (cudaHostAlloc), transparent
   huge pages registered with cudaHostRegister, write-combined cudaHostAlloc;
3. evenly spaced sorted ids, 1 to 4096 rows apart (512 B to 2 MB): where the
   rate falls as reads spread out;
4. the dual cache's gather (``gather_rows`` with a GPU tier of the first
   ``num_hot`` ids, the host table in other ids through ``row_map``), 50-90 %
   of the ids cached: the host's rows first in a launch of their own
   (``HOST_ROWS_FIRST``, the default since this timed it faster) against one
   pass over all rows in host order, and the host rows' launch reading its
   rows resolved (``RESOLVED_ROWS``);
5. rows resolved: a gather of host rows only, shaped as ``gather_rows``
   launches it (a quarter of the SMs' programs, 16-row blocks), with each
   block's host reads behind the loads of its positions and then its ids
   (the chain ``gather_rows`` runs), against behind one load of the rows
   sorted (``RESOLVED_ROWS``). ``--mixed-only`` runs 4 and 5 alone (about
   two minutes).
6. ``--vmm`` alone: torch's pinned memory against host memory allocated
   through CUDA's virtual memory API with 2 MB granularity
   (``vmm_host_table``), on random and evenly spaced ids.

Usage (GPU machine)::

    python bench/gather_uva_sweep.py --out bench/results/gather_uva_sweep.json
    python bench/gather_uva_sweep.py --mixed-only --out bench/results/gather_uva_sweep.json  # 4 and 5
    python bench/gather_uva_sweep.py --vmm --out bench/results/gather_uva_sweep.json  # 6
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import mmap
import os
import sys

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tritongnn.kernels import gather as gather_module  # noqa: E402
from tritongnn.kernels.gather import _gather_one_tier, gather_rows  # noqa: E402
from _record import append_record, new_record  # noqa: E402

N, D = 1 << 24, 128


def rate(table, ids, x_gpu, grid, block_rows=32, num_warps=4):
    """GB/s of useful bytes, sorting included; NaN if the rows are wrong."""
    out = torch.zeros(ids.numel(), D, device="cuda")
    grid = grid or triton.cdiv(ids.numel(), block_rows)

    def run():
        _gather_one_tier(table, ids, out, torch.argsort(ids), grid, block_rows, num_warps)
    run()
    if not torch.equal(out, x_gpu[ids]):
        return float("nan")
    return ids.numel() * D * 4 / do_bench(run, warmup=10, rep=40, return_mode="median") / 1e6


def host_tables(x_gpu):
    """Yield (kind, pinned table) for each host memory kind, freeing each after use."""
    size = x_gpu.numel() * 4
    table = torch.empty(N, D, pin_memory=True).copy_(x_gpu)
    yield "cudaHostAlloc (torch pinned)", table
    del table

    buf = mmap.mmap(-1, size + (2 << 20), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf.madvise(mmap.MADV_HUGEPAGE)
    raw = torch.frombuffer(buf, dtype=torch.uint8)
    start = (-raw.data_ptr()) % (2 << 20)
    table = raw[start:start + size].view(torch.float32).view(N, D)
    table.copy_(x_gpu)
    assert int(torch.cuda.cudart().cudaHostRegister(table.data_ptr(), size, 0)) == 0
    yield "huge pages + cudaHostRegister", table
    torch.cuda.cudart().cudaHostUnregister(table.data_ptr())
    del table, raw

    libs = glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "**", "libcudart.so*"),
                     recursive=True)
    if libs:
        cudart, ptr = ctypes.CDLL(libs[0]), ctypes.c_void_p()
        if cudart.cudaHostAlloc(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_uint(4)) == 0:
            table = torch.frombuffer((ctypes.c_float * (N * D)).from_address(ptr.value),
                                     dtype=torch.float32).view(N, D)
            table.copy_(x_gpu)
            yield "cudaHostAlloc write-combined", table
            del table
            cudart.cudaFreeHost(ptr)


def vmm_host_table(x_gpu):
    """Context of a copy of ``x_gpu`` in host memory allocated through CUDA's
    virtual memory API (``cuMemCreate`` with a host location: 2 MB
    granularity, mapped into the GPU's address space by the driver), as a
    CUDA tensor the kernels read. The question it answers: whether the UVA
    gather's per-region cost is the GPU's page size for host memory, which
    torch's pinned memory (``cudaHostAlloc``) leaves to the driver. Through
    ``ctypes`` on ``libcuda``, as ``pinned_empty`` calls ``cudaHostRegister``."""
    import contextlib

    cuda = ctypes.CDLL("libcuda.so.1")

    class Location(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

    class Flags(ctypes.Structure):
        _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                    ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]

    class Prop(ctypes.Structure):  # CUmemAllocationProp
        _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                    ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", Flags)]

    class Access(ctypes.Structure):  # CUmemAccessDesc
        _fields_ = [("location", Location), ("flags", ctypes.c_int)]

    def check(rc, call):
        if rc != 0:
            raise RuntimeError(f"{call} failed: CUresult {rc}")

    @contextlib.contextmanager
    def allocate():
        # CU_MEM_ALLOCATION_TYPE_PINNED = 1, CU_MEM_LOCATION_TYPE_HOST = 2
        prop = Prop(type=1, location=Location(2, 0))
        granularity = ctypes.c_size_t()
        check(cuda.cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop), 1),
              "cuMemGetAllocationGranularity")
        size = -(-x_gpu.nbytes // granularity.value) * granularity.value
        handle, ptr = ctypes.c_ulonglong(), ctypes.c_ulonglong()
        check(cuda.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop),
                               ctypes.c_ulonglong(0)), "cuMemCreate")
        check(cuda.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), granularity,
                                       ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)), "cuMemAddressReserve")
        check(cuda.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, ctypes.c_ulonglong(0)),
              "cuMemMap")
        access = Access(Location(1, torch.cuda.current_device()), 3)  # the GPU, read-write
        check(cuda.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1)),
              "cuMemSetAccess")
        interface = dict(shape=tuple(x_gpu.shape), typestr="<f4", data=(ptr.value, False), version=3)
        table = torch.as_tensor(type("HostVMM", (), {"__cuda_array_interface__": interface})(), device="cuda")
        table.copy_(x_gpu)
        try:
            yield table, granularity.value
        finally:
            del table
            torch.cuda.synchronize()
            cuda.cuMemUnmap(ptr, ctypes.c_size_t(size))
            cuda.cuMemRelease(handle)
            cuda.cuMemAddressFree(ptr, ctypes.c_size_t(size))
    return allocate()


def vmm_rates(x_gpu, sms):
    """``--vmm``: torch's pinned memory against ``vmm_host_table``, the best
    of four grids per id set: random ids (about a batch's n_id, 2^17, 2^20)
    and evenly spaced ones (64 KB and 2 MB apart, each row its own region)."""
    id_sets = {"1e5 random": torch.randint(0, N, (100_000,), device="cuda"),
               "2^17 random": torch.randint(0, N, (1 << 17,), device="cuda"),
               "2^20 random": torch.randint(0, N, (1 << 20,), device="cuda"),
               "2^17 spaced 64 KB": torch.arange(1 << 17, device="cuda") * 128,
               "2^12 spaced 2 MB": torch.arange(N // 4096, device="cuda") * 4096}
    rows = []

    def measure(kind, table):
        for name, ids in id_sets.items():
            rates = [rate(table, ids, x_gpu, grid) for grid in (sms // 4, sms // 2, sms, 0)]
            rows.append(dict(experiment="vmm host memory", memory=kind, ids=name, gbs=max(rates),
                             correct=all(r == r for r in rates)))
            print(rows[-1], flush=True)
    table = torch.empty(N, D, pin_memory=True).copy_(x_gpu)
    measure("cudaHostAlloc (torch pinned)", table)
    del table
    with vmm_host_table(x_gpu) as (table, granularity):
        measure(f"cuMemCreate host, {granularity >> 20} MB granularity", table)
    return rows


def mixed_tiers(x_gpu, table):
    """Experiment 4: rows per gather, % cached, order -> ms, host GB/s, correct."""
    rows, default = [], (gather_module.HOST_ROWS_FIRST, gather_module.RESOLVED_ROWS)
    row_map = torch.randperm(N, device="cuda")  # internal id i reads host row row_map[i]
    for cached in (0.5, 0.7, 0.9):
        num_hot = int(cached * N)
        hot = x_gpu[row_map[:num_hot]]
        for n in (1 << 20, 3 << 20):  # 3 x 2^20: the rows of a papers100M-scale batch
            ids = torch.randint(0, N, (n,), device="cuda")
            expected = x_gpu[row_map[ids]]
            host_bytes = int((ids >= num_hot).sum()) * D * 4
            out = torch.empty(n, D, device="cuda")
            for first, resolved in ((True, False), (True, True), (False, False)):
                gather_module.HOST_ROWS_FIRST, gather_module.RESOLVED_ROWS = first, resolved

                def run():
                    gather_rows(table, ids, out, hot=hot, num_hot=num_hot, row_map=row_map, validate=False)
                out.zero_()
                run()
                correct = torch.equal(out, expected)
                ms = do_bench(run, warmup=10, rep=40, return_mode="median")
                order = ("host rows first, resolved" if resolved else "host rows first") if first \
                    else "one pass, host order"
                rows.append(dict(experiment="mixed tiers", ids=n, cached=cached, order=order, ms=ms,
                                 host_gbs=host_bytes / ms / 1e6 if correct else float("nan"), correct=correct))
                print(rows[-1], flush=True)
    gather_module.HOST_ROWS_FIRST, gather_module.RESOLVED_ROWS = default
    return rows


def resolved_rows(x_gpu, table, sms):
    """Experiment 5: host rows only, in gather_rows's UVA launch shape; each
    block's reads behind the chain order -> ids, or behind the sorted rows."""
    rows = []
    block_rows = gather_module._launch_settings(D * 4, 4, True)[0]
    for n in (1 << 17, 1 << 20, 3 << 20):
        ids = torch.randint(0, N, (n,), device="cuda")
        expected = x_gpu[ids]
        out = torch.empty(n, D, device="cuda")
        for resolved in (False, True):
            def run():
                if resolved:
                    sorted_ids, order = torch.sort(ids)
                    _gather_one_tier(table, sorted_ids, out, order, sms // 4, block_rows, ids_sorted=True)
                else:
                    _gather_one_tier(table, ids, out, torch.argsort(ids), sms // 4, block_rows)
            out.zero_()
            run()
            correct = torch.equal(out, expected)
            ms = do_bench(run, warmup=10, rep=40, return_mode="median")
            rows.append(dict(experiment="rows resolved", ids=n, resolved=resolved, grid=sms // 4,
                             block_rows=block_rows, ms=ms,
                             gbs=n * D * 4 / ms / 1e6 if correct else float("nan"), correct=correct))
            print(rows[-1], flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="append the results to this JSON file")
    parser.add_argument("--commit", default=None)
    parser.add_argument("--mixed-only", action="store_true", help="experiments 4 and 5 alone")
    parser.add_argument("--vmm", action="store_true",
                        help="only torch's pinned memory against host memory from cuMemCreate (vmm_rates)")
    args = parser.parse_args()
    torch.manual_seed(0)
    x_gpu = torch.randn(N, D, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ids = {n: torch.randint(0, N, (n,), device="cuda") for n in (1 << 17, 1 << 20)}
    rows = vmm_rates(x_gpu, sms) if args.vmm else []
    for kind, table in ([] if args.vmm else host_tables(x_gpu)):
        if kind.startswith("cudaHostAlloc ("):
            rows += mixed_tiers(x_gpu, table)
            rows += resolved_rows(x_gpu, table, sms)
        if args.mixed_only:
            break
        for n, id_set in ids.items():
            shapes = [(g, b, w) for g in (sms // 4, sms // 2, sms, 0) for b in (16, 32, 64) for w in (4, 8)] \
                if kind.startswith("cudaHostAlloc (") else [(sms // 2, 32, 4), (0, 32, 4)]
            for grid, block_rows, num_warps in shapes:
                rows.append(dict(memory=kind, ids=n, grid=grid or "all blocks", block_rows=block_rows,
                                 num_warps=num_warps, gbs=rate(table, id_set, x_gpu, grid, block_rows, num_warps)))
                print(rows[-1], flush=True)
        if kind.startswith("cudaHostAlloc ("):
            for spacing in (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096):
                n = min(N // spacing, 1 << 17)
                spaced = torch.arange(n, device="cuda") * spacing
                rows.append(dict(memory=kind, ids=n, spacing_rows=spacing, grid=sms // 2, block_rows=32,
                                 num_warps=4, gbs=rate(table, spaced, x_gpu, sms // 2)))
                print(rows[-1], flush=True)
    record = new_record("gather_uva_sweep", torch.device("cuda"), args.commit,
                        settings=f"{N} x {D} float32 table in pinned host memory, sorted ids, argsort included",
                        rows=rows)
    append_record(args.out, record)
    print(f"\n{record['gpu']}  commit {record['commit']}  {record['date']}")
    print(f"{'memory':32s} {'ids':>8s} {'spacing':>8s} {'grid':>11s} {'rows':>5s} {'warps':>5s} {'GB/s':>7s}")
    for r in rows:
        if r.get("experiment") == "mixed tiers":
            print(f"mixed tiers: {r['ids']:8d} ids, {r['cached']:.0%} cached, {r['order']:26s} "
                  f"{r['ms']:7.2f} ms, host rows {r['host_gbs']:6.1f} GB/s")
        if r.get("experiment") == "vmm host memory":
            print(f"{r['memory']:40s} {r['ids']:18s} {r['gbs']:6.1f} GB/s")
        if r.get("experiment") == "rows resolved":
            print(f"host rows only: {r['ids']:8d} ids, {'rows resolved' if r['resolved'] else 'order -> ids':14s} "
                  f"{r['ms']:7.2f} ms, {r['gbs']:6.1f} GB/s")
    rows_shapes = [r for r in rows if "experiment" not in r]
    best = {}
    for r in rows_shapes:
        key = (r["memory"], r["ids"], r.get("spacing_rows"))
        if key not in best or r["gbs"] > best[key]["gbs"]:
            best[key] = r
    for r in best.values():  # the best shape per memory kind, id count and spacing
        print(f"{r['memory']:32s} {r['ids']:8d} {str(r.get('spacing_rows', '-')):>8s} {str(r['grid']):>11s} "
              f"{r['block_rows']:5d} {r['num_warps']:5d} {r['gbs']:7.1f}")


if __name__ == "__main__":
    main()
