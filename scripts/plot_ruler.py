#!/usr/bin/env python3
"""Plots of `h2okv ruler --jsonl` output (matplotlib; run with Debian's /usr/bin/python3).

  plot_ruler.py budget RULER.jsonl -o acc.png   mean score vs KV budget, one curve per policy, a panel per protocol
                                                (--metric answer_nll: the answers' teacher-forced NLL instead)
  plot_ruler.py depth  RULER.jsonl -o map.png   heat map of the mean score, (policy, budget) x needle depth, a
                                                panel per protocol (tasks with a depth only)

Scores are RULER's string_match_all per trial, averaged over the records that fall in a point or cell (tasks,
lengths, trials; depths too for the budget plot). scripts/gen_results.py uses the same functions.
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_eval import POLICY_ORDER, label, load  # noqa: E402

PROTOCOLS = ["agnostic", "aware"]


def budget_of(row):
    """The budget as a fraction of the run: 1.0 for the full cache."""
    spec = row.get("budget_spec") or ""
    if row["policy_name"] == "full" or not spec:
        return 1.0
    if "." in spec:
        return float(spec)
    return row["budget"] / row["run_length"]


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def cell_means(rows, key, metric="score"):
    cells = {}
    for r in rows:
        cells.setdefault(key(r), []).append(r[metric])
    return {k: mean(v) for k, v in cells.items()}


def policy_rows_order(rows):
    """(label, budget) pairs: full first, then policies in POLICY_ORDER, budgets ascending."""
    pairs = {(label(r), budget_of(r)) for r in rows}
    rank = {p: i for i, p in enumerate(POLICY_ORDER)}
    return sorted(pairs, key=lambda p: (p[0] != "full", rank.get(p[0], len(rank)), p[0], p[1]))


def plot_budget(rows, png, title, metric="score"):
    protocols = [p for p in PROTOCOLS if any(r["protocol"] == p for r in rows)]
    fig, axes = plt.subplots(1, len(protocols), figsize=(4.6 * len(protocols), 3.8), squeeze=False)
    for ax, proto in zip(axes[0], protocols):
        pr = [r for r in rows if r["protocol"] == proto]
        means = cell_means(pr, lambda r: (label(r), budget_of(r)), metric)
        full = means.get(("full", 1.0))
        names = sorted({k[0] for k in means if k[0] != "full"},
                       key=lambda p: POLICY_ORDER.index(p) if p in POLICY_ORDER else len(POLICY_ORDER))
        for p in names:
            pts = sorted((b, s) for (q, b), s in means.items() if q == p)
            ax.plot([b for b, _ in pts], [s for _, s in pts], marker="o", label=p)
        if full is not None:
            ax.axhline(full, color="black", linestyle="--", linewidth=1, label="full cache")
        ax.set_title(f"query-{proto}", fontsize=10)
        ax.set_xlabel("KV budget (fraction of the run)")
        if metric == "score":
            ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("mean score (string match)" if metric == "score" else "answer NLL (nats/token)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def plot_depth(rows, png, title):
    rows = [r for r in rows if r.get("depth") is not None]
    protocols = [p for p in PROTOCOLS if any(r["protocol"] == p for r in rows)]
    depths = sorted({r["depth"] for r in rows})
    ylabels = policy_rows_order(rows)
    fig, axes = plt.subplots(1, len(protocols), figsize=(1.2 + 0.7 * len(depths) * len(protocols) + 2.5,
                                                         0.9 + 0.32 * len(ylabels)), squeeze=False)
    image = None
    for col, (ax, proto) in enumerate(zip(axes[0], protocols)):
        means = cell_means([r for r in rows if r["protocol"] == proto], lambda r: (label(r), budget_of(r), r["depth"]))
        grid = [[means.get((p, b, d), float("nan")) for d in depths] for p, b in ylabels]
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if v == v:
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(depths)), [f"{d:g}" for d in depths])
        names = [p if p == "full" else f"{p} {b:g}" for p, b in ylabels]
        ax.set_yticks(range(len(ylabels)), names if col == 0 else [""] * len(names), fontsize=8)
        ax.set_xlabel("needle depth")
        ax.set_title(f"query-{proto}", fontsize=10)
    if image is not None:
        fig.colorbar(image, ax=list(axes[0]), shrink=0.8, label="mean score")
    fig.suptitle(title, fontsize=10)
    fig.savefig(png, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["budget", "depth"])
    ap.add_argument("jsonl")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("--metric", choices=["score", "answer_nll"], default="score", help="budget plot: what to plot")
    a = ap.parse_args()
    rows = load(a.jsonl)
    title = a.title or os.path.basename(a.jsonl)
    if a.kind == "budget":
        plot_budget(rows, a.output, title, a.metric)
    else:
        plot_depth(rows, a.output, title)


if __name__ == "__main__":
    main()
