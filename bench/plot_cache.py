"""Figure of the cache benchmark's budget sweep (``bench/bench_cache.py --csv``).

Two panels against the GPU budget: feature and adjacency hit rates, and
seconds per epoch (training where the budget was trained, and the loader
alone), one line per policy; at each budget the CSV's latest row for it.
Needs matplotlib (not a dependency of the package: ``pip install matplotlib``).

Usage::

    python bench/plot_cache.py bench/results/cache_sweep.csv bench/results/cache_sweep.png
"""
from __future__ import annotations

import csv
import sys
from collections import defaultdict


def main(path: str, out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # one line per policy; at each budget its latest row (rows are appended
    # run after run, so a later run's point replaces an earlier one's)
    latest = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            row = {k: (float(v) if k not in ("policy", "commit") else v) for k, v in row.items()}
            latest[row["policy"], row["budget_gb"]] = row
    series = defaultdict(list)
    for (policy, _), row in latest.items():
        series[policy].append(row)
    none = series.pop("none", None)
    fig, (hits, times) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, rows in sorted(series.items()):
        rows = sorted(rows, key=lambda r: r["budget_gb"])
        if none:
            rows = none + rows  # budget 0: nothing cached
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
    times.set(xlabel="GPU cache budget (GB)", ylabel="seconds per epoch", ylim=(0, None),
              title="Epoch time (GraphSAGE, batch 8000, [15, 10, 5])")
    for ax in (hits, times):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
