"""Where a profiled step's GPU time goes, stream by stream.

Reads a Chrome trace written by ``torch.profiler`` (``bench_end_to_end.py
--parts profile --profile-trace``) and prints, for each CUDA stream, its
kernels' (and copies', and fills') total time per step and the top entries
by time, so that the model's stream and the loader's can be set side by
side::

    python bench/trace_streams.py /tmp/trace_0gb.json --steps 30 [--top 15] [--json out.json]
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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--steps", type=int, required=True, help="training steps the trace holds")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--json", default=None, help="write the whole table here")
    args = p.parse_args(argv)
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    streams = per_stream(events, args.steps)
    for stream, entry in sorted(streams.items(), key=lambda kv: -kv[1]["total_ms"]):
        print(f"stream {stream}: {entry['total_ms']:.3f} ms a step")
        for name, ms, launches in entry["kernels"][:args.top]:
            print(f"  {ms:8.4f} ms  {launches:6.1f}x  {name[:110]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(streams, f)


if __name__ == "__main__":
    main()
