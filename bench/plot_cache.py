"""Figure of the cache benchmark's budget sweep (``bench/bench_cache.py --csv``).

Two panels against the GPU budget: feature and adjacency hit rates, and
seconds per epoch (training where the budget was trained, and the loader
alone), one line per policy and run (the CSV's ``commit``; at each budget
that run's latest row): points of different runs are never joined. The
runs drawn: those named, else the CSV's last. Needs matplotlib (the test extra's, not
a dependency of the package: ``pip install -e ".[test]"``).

Usage::

    python bench/plot_cache.py bench/results/cache_sweep.csv bench/results/cache_sweep.png [COMMIT,COMMIT]
"""
from __future__ import annotations

import csv
import sys
from collections import defaultdict


def main(path: str, out: str, commits: list[str] | None = None) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # one line per (run, policy); at each budget the run's latest row
    latest = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            row = {k: (float(v) if k not in ("policy", "commit") else v) for k, v in row.items()}
            latest[row["commit"], row["policy"], row["budget_gb"]] = row
    if not latest:
        sys.exit(f"{path} holds no rows")
    runs = commits or [list(latest)[-1][0]]
    missing = [c for c in runs if not any(key[0] == c for key in latest)]
    if missing:
        sys.exit(f"{path} holds no rows of {', '.join(missing)}")
    series, none = defaultdict(list), defaultdict(list)
    for (commit, policy, _), row in latest.items():
        if commit in runs:
            (none[commit] if policy == "none" else series[f"{policy} ({commit})"]).append(row)
    fig, (hits, times) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, rows in sorted(series.items()):
        rows = sorted(rows, key=lambda r: r["budget_gb"])
        rows = none[rows[0]["commit"]] + rows  # budget 0 of the same run: nothing cached
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
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3].split(",") if len(sys.argv) == 4 else None)
