"""Where a profiled step's GPU time goes, stream by stream.

Reads a Chrome trace written by ``torch.profiler`` (``bench_end_to_end.py
--parts profile --profile-trace``) and prints, for each CUDA stream, its
kernels' (and copies', and fills') total time per step and the top entries
by time, so that the model's stream and the loader's can be set side by
side; and, with ``--idle``, what each host thread was doing while no
stream had work (the GPU idle): the innermost profiled op each thread was
in at those moments, or none (its own Python, or waiting for the
interpreter lock)::

    python bench/trace_streams.py /tmp/trace_0gb.json --steps 30 [--top 15] [--json out.json] [--idle]
"""
from __future__ import annotations

import argparse
import collections
import json

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def per_stream(events, steps: int) -> dict:
    """``{stream: {"total_ms": per step, "kernels": [(name, ms per step,
    launches per step)] by time}}`` of the trace's GPU events."""
    time = collections.defaultdict(collections.Counter)
    count = collections.defaultdict(collections.Counter)
    for event in events:
        if event.get("ph") != "X" or event.get("cat") not in GPU_CATEGORIES:
            continue
        stream = event.get("args", {}).get("stream", event.get("tid"))
        name = event["name"]
        time[stream][name] += event["dur"] / 1e3
        count[stream][name] += 1
    out = {}
    for stream, names in time.items():
        rows = [(name, ms / steps, count[stream][name] / steps) for name, ms in names.most_common()]
        out[str(stream)] = {"total_ms": sum(names.values()) / steps, "kernels": rows}
    return out


def busy_intervals(events) -> list[tuple[float, float]]:
    """The merged ``(start, end)`` intervals (µs) in which some stream ran
    a kernel, a copy or a fill."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES)
    merged: list[list[float]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [tuple(m) for m in merged]


def idle_intervals(busy) -> list[tuple[float, float]]:
    """The gaps between ``busy`` intervals (first to last)."""
    return [(a[1], b[0]) for a, b in zip(busy, busy[1:]) if b[0] > a[1]]


HOST_CATEGORIES = ("cpu_op", "cuda_runtime", "cuda_driver", "user_annotation", "python_function")


def innermost(events, points) -> list[str | None]:
    """For sorted time ``points``, the name of the shortest event of
    ``events`` (one thread's) covering each, or None: a sweep that keeps
    the events open at each point."""
    events = sorted(events, key=lambda e: e["ts"])
    out, open_events, i = [], [], 0
    for t in points:
        while i < len(events) and events[i]["ts"] <= t:
            open_events.append(events[i])
            i += 1
        open_events = [e for e in open_events if e["ts"] + e["dur"] >= t]
        best = min(open_events, key=lambda e: e["dur"], default=None)
        out.append(None if best is None else best["name"])
    return out


def idle_by_thread(events, steps: int, resolution: float = 2.0) -> dict:
    """``{"idle_ms": per step, "span_ms": per step, "threads": {tid: [(op or
    "(no op)", ms per step)]}}``: the GPU's idle time (no stream busy) per
    step, split by the innermost op each host thread was in then (sampled
    every ``resolution`` µs); ``"threads_whole_span"`` splits each
    thread's whole span so."""
    busy = busy_intervals(events)
    if not busy:
        return {"idle_ms": 0.0, "span_ms": 0.0, "threads": {}, "threads_whole_span": {}}
    gaps = idle_intervals(busy)
    points = [a + resolution * (k + 0.5) for a, b in gaps for k in range(int((b - a) / resolution))]
    by_tid = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in HOST_CATEGORIES and "dur" in e:
            by_tid[e["tid"]].append(e)
    span = busy[0][0], busy[-1][1]
    everywhere = [span[0] + resolution * (k + 0.5) for k in range(int((span[1] - span[0]) / resolution))]
    threads, whole = {}, {}
    for tid, mine in by_tid.items():
        for into, at in ((threads, points), (whole, everywhere)):
            names = collections.Counter(name or "(no op)" for name in innermost(mine, at))
            into[str(tid)] = [(name, n * resolution / 1e3 / steps) for name, n in names.most_common()]
    return {"idle_ms": sum(b - a for a, b in gaps) / 1e3 / steps,
            "span_ms": (span[1] - span[0]) / 1e3 / steps, "threads": threads, "threads_whole_span": whole}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--steps", type=int, required=True, help="training steps the trace holds")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--json", default=None, help="write the whole table here")
    p.add_argument("--idle", action="store_true", help="also: what each host thread did while the GPU idled")
    args = p.parse_args(argv)
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    streams = per_stream(events, args.steps)
    for stream, entry in sorted(streams.items(), key=lambda kv: -kv[1]["total_ms"]):
        print(f"stream {stream}: {entry['total_ms']:.3f} ms a step")
        for name, ms, launches in entry["kernels"][:args.top]:
            print(f"  {ms:8.4f} ms  {launches:6.1f}x  {name[:110]}")
    result = dict(streams=streams)
    if args.idle:
        idle = idle_by_thread(events, args.steps)
        result["idle"] = idle
        for key, title in (("threads", f"GPU idle {idle['idle_ms']:.3f} of {idle['span_ms']:.3f} ms a step; "
                                       "the host threads meanwhile:"),
                           ("threads_whole_span", "each host thread over the whole span:")):
            print(title)
            for tid, names in idle[key].items():
                print(f"  thread {tid}:")
                for name, ms in names[:args.top]:
                    print(f"    {ms:8.4f} ms  {name[:100]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result if args.idle else streams, f)


if __name__ == "__main__":
    main()
