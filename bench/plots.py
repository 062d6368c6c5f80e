"""The figures of bench/results/, drawn from the CSVs the benchmarks append
to (matplotlib, headless: the test extra's, not a dependency of the package).

* ``cache``: the cache benchmark's budget sweep (``cache.py --csv``): feature
  and adjacency hit rates, and seconds per epoch (training, and the loader
  alone), against the GPU budget, one line per policy of the CSV's last run
  (or of the commits named);
* ``end_to_end``: the ablation (``--ablation-png``: GraphSAGE's epoch with
  PyG's loader and each ablation step, from the newest ablation run's
  commit, log scale) and the scaling figure (``--scaling-png``: epoch time
  against each scaling axis, a later run's point replacing an earlier one's).

    python bench/plots.py cache bench/results/cache_sweep.csv bench/results/cache_sweep.png
    python bench/plots.py end_to_end bench/results/end_to_end.csv --ablation-png bench/results/end_to_end_ablation.png --scaling-png bench/results/end_to_end_scaling.png
"""
from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def read_csv(path: str) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def cache_figure(path: str, out: str, commits: list[str] | None = None) -> None:
    latest = {}  # (run, policy, budget): the run's latest row
    for row in read_csv(path):
        row = {k: (float(v) if k not in ("policy", "commit") else v) for k, v in row.items()}
        latest[row["commit"], row["policy"], row["budget_gb"]] = row
    if not latest:
        sys.exit(f"{path} holds no rows")
    runs = commits or [list(latest)[-1][0]]
    series, none = defaultdict(list), defaultdict(list)
    for (commit, policy, _), row in latest.items():
        if commit in runs:
            (none[commit] if policy == "none" else series[f"{policy} ({commit})"]).append(row)
    plt = pyplot()
    fig, (hits, times) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, rows in sorted(series.items()):
        rows = none[rows[0]["commit"]] + sorted(rows, key=lambda r: r["budget_gb"])  # budget 0: nothing cached
        budget = [r["budget_gb"] for r in rows]
        marker = "o" if "dynamic" not in label else "s"
        hits.plot(budget, [r["feature_hit_rate"] for r in rows], marker=marker, label=f"{label}: features")
        if any(r["adjacency_hit_rate"] > 0 for r in rows):
            hits.plot(budget, [r["adjacency_hit_rate"] for r in rows], marker=marker, linestyle=":",
                      label=f"{label}: adjacency")
        trained = [r for r in rows if r["train_epochs"] > 0]  # the sweep's extra budgets run the loader alone
        if len(trained) > 1:
            times.plot([r["budget_gb"] for r in trained], [r["epoch_seconds"] for r in trained], marker=marker,
                       label=f"{label}: training")
        times.plot(budget, [r["load_epoch_seconds"] for r in rows], marker=marker, linestyle="--",
                   label=f"{label}: loader alone")
    hits.set(xlabel="GPU cache budget (GB)", ylabel="hit rate", ylim=(0, 1.02), title="Hit rate")
    times.set(xlabel="GPU cache budget (GB)", ylabel="seconds per epoch", ylim=(0, None), title="Epoch time")
    for ax in (hits, times):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def scaling_figure(rows: list[dict], out: str) -> None:
    latest = {}
    for r in rows:
        if r.get("part") == "scaling" and r.get("axis"):
            value = r["value"] if r["axis"] == "fanouts" else float(r["value"])  # "8" and "8.0" are one point
            latest[r["axis"], value] = dict(r, value=value, epoch_seconds=float(r["epoch_seconds"]))
    plt = pyplot()
    fig, panels = plt.subplots(1, 4, figsize=(16, 3.8))
    for axis, ax in zip(["batch_size", "width", "fanouts", "budget_gb"], panels):
        points = [r for (a, _), r in latest.items() if a == axis]
        if axis != "fanouts":
            points.sort(key=lambda r: r["value"])
        ax.plot(range(len(points)), [r["epoch_seconds"] for r in points], marker="o")
        ax.set_xticks(range(len(points)), [r["value"] if axis == "fanouts" else f"{r['value']:g}" for r in points],
                      rotation=20)
        ax.set(title=f"epoch time vs {axis}", ylabel="seconds per epoch", ylim=(0, None))
        ax.grid(alpha=0.3)
    commits = sorted({str(r.get("commit")) for r in latest.values()})
    fig.suptitle(f"GraphSAGE, tritongnn's recommended loader; commit {', '.join(commits)}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def ablation_figure(rows: list[dict], out: str) -> None:
    rows = [dict(r, epoch_seconds=float(r["epoch_seconds"])) for r in rows
            if r.get("model") == "sage" and r.get("part") in ("pyg", "ablation")]
    ablation = [r for r in rows if r["part"] == "ablation"]
    commit = max(ablation, key=lambda r: str(r.get("date")))["commit"] if ablation else None
    latest = {}
    for r in sorted((r for r in rows if r.get("commit") == commit), key=lambda r: str(r.get("date"))):
        latest[r["part"], r["name"]] = r  # a later run of the commit replaces a row it ran again
    pyg = [r for (part, _), r in latest.items() if part == "pyg"]
    shown = []
    if pyg:
        shown.append(("PyG, num_workers=0", next((r for r in pyg if "workers=0 " in r["name"]), pyg[0])))
        best = min(pyg, key=lambda r: r["epoch_seconds"])
        shown.append((f"PyG, best ({best['name'].removeprefix('PyG ')})", best))
    shown += [(name, r) for (part, name), r in latest.items() if part == "ablation"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.36 * len(shown) + 1.2))
    labels, seconds = [n for n, _ in shown][::-1], [r["epoch_seconds"] for _, r in shown][::-1]
    colors = ["tab:gray" if n.startswith("PyG") else "tab:blue" if "no budget" in n or "GPU memory" in n
              else "tab:orange" for n in labels]
    ax.barh(range(len(shown)), seconds, color=colors)
    for i, value in enumerate(seconds):
        ax.text(value, i, f" {value:.1f}", va="center", fontsize=8)
    ax.set_yticks(range(len(shown)), labels, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("seconds per epoch (log scale)")
    ax.set_title(f"GraphSAGE epoch, papers100M-scale graph, one GPU; commit {commit}", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="figure", required=True)
    cache = sub.add_parser("cache")
    cache.add_argument("csv")
    cache.add_argument("png")
    cache.add_argument("--commits", nargs="+", default=None, help="the runs drawn (default: the CSV's last)")
    e2e = sub.add_parser("end_to_end")
    e2e.add_argument("csv")
    e2e.add_argument("--ablation-png", default=None)
    e2e.add_argument("--scaling-png", default=None)
    args = p.parse_args(argv)
    if args.figure == "cache":
        cache_figure(args.csv, args.png, args.commits)
        return
    rows = read_csv(args.csv)
    if args.ablation_png:
        ablation_figure(rows, args.ablation_png)
    if args.scaling_png:
        scaling_figure(rows, args.scaling_png)


if __name__ == "__main__":
    main()
