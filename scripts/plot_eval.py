#!/usr/bin/env python3
"""Plots of h2okv's evaluation output (matplotlib; run with Debian's /usr/bin/python3).

  plot_eval.py ppl   RESULTS.jsonl -o ppl.png          perplexity vs budget, one curve per policy
  plot_eval.py tasks RESULTS.jsonl -o acc.png          accuracy vs budget, one panel per task
  plot_eval.py trace TRACE.jsonl [--unit K] -o map.png  kept positions of one (layer, KV head) over time

RESULTS.jsonl: what `h2okv perplexity --jsonl` / `h2okv tasks --jsonl` append; TRACE.jsonl: `h2okv generate
--kv-trace`. scripts/gen_results.py uses the same functions for docs/RESULTS.md.
"""
import argparse
import json
import re
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# The display order of policy labels; labels not listed (a policy added to the registry later) follow, sorted.
POLICY_ORDER = ["full", "window", "streaming", "h2o", "h2o+decay", "tova", "tova (head)", "scissorhands", "keyformer",
                "snapkv", "l2norm", "keydiff"]


def policy_order(labels):
    """The labels present in `labels` (any container), in display order: POLICY_ORDER's, then the rest sorted."""
    present = set(labels)
    return [p for p in POLICY_ORDER if p in present] + sorted(present - set(POLICY_ORDER))


def load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def label(row):
    """A short policy label: h2o with decay < 1 gets its own curve, and so does a granularity other than the
    policy's default (the spec names it then: tova, whose default is layer, per KV head is tova (head))."""
    name = row["policy_name"]
    if name == "h2o" and "decay=" in row["policy"] and "decay=1," not in row["policy"] + ",":
        name = "h2o+decay"
    gran = re.search(r"granularity=(\w+)", row["policy"])
    return f"{name} ({gran.group(1)})" if gran else name


def line_style(i):
    """Solid for the first ten curves (matplotlib's ten colours), dashed once the colours repeat."""
    return "-" if i < 10 else "--"


def budget_fraction(row):
    """The budget as a fraction of the run: 1.0 for the full cache."""
    spec = row.get("budget_spec") or ""
    if row["policy_name"] == "full" or not spec:
        return 1.0
    if "." in spec:
        return float(spec)
    return row["budget"] / row["n_tokens"]


def plot_perplexity(rows, png, title):
    full = [r["perplexity"] for r in rows if r["policy_name"] == "full"]
    curves = {}
    for r in rows:
        if r["policy_name"] != "full":
            curves.setdefault(label(r), []).append((budget_fraction(r), r["perplexity"]))
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, p in enumerate(policy_order(curves)):
        pts = sorted(curves[p])
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=p, linestyle=line_style(i))
    if full:
        ax.axhline(full[0], color="black", linestyle="--", linewidth=1, label="full cache")
    ax.set_xlabel("KV budget (fraction of the sequence)")
    ax.set_ylabel("perplexity")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def plot_accuracy(rows, png, title):
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.2 * len(tasks), 3.4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        task_rows = [r for r in rows if r["task"] == task]
        full = [r for r in task_rows if r["policy_name"] == "full"]
        curves = {}
        for r in task_rows:
            if r["policy_name"] != "full":
                curves.setdefault(label(r), []).append((budget_fraction(r), r["acc"]))
        for i, p in enumerate(policy_order(curves)):
            pts = sorted(curves[p] + [(1.0, full[0]["acc"])] if full else curves[p])
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=p, linestyle=line_style(i))
        ax.set_title(f"{task} ({task_rows[0]['n_items']} items)", fontsize=9)
        ax.set_xlabel("KV budget (fraction)")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("accuracy")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def plot_kept_map(rows, png, unit, title):
    xs, ys = [], []
    for r in rows:
        for p in r["kept"][unit]:
            xs.append(r["pos"])
            ys.append(p)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.scatter(xs, ys, s=0.3, color="tab:blue")
    ax.set_xlabel("step (position of the newest token)")
    ax.set_ylabel("kept position")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["ppl", "tasks", "trace"])
    ap.add_argument("jsonl")
    ap.add_argument("-o", "--out", required=True, help="PNG file to write")
    ap.add_argument("--unit", type=int, default=0, help="trace: which (layer, KV head) list, layer-major")
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    rows = load(a.jsonl)
    if not rows:
        ap.error(f"{a.jsonl} holds no JSON lines")
    title = a.title or os.path.basename(a.jsonl)
    if a.kind == "ppl":
        plot_perplexity([r for r in rows if r.get("command") == "perplexity"], a.out, title)
    elif a.kind == "tasks":
        plot_accuracy([r for r in rows if r.get("command") == "tasks"], a.out, title)
    else:
        if a.unit < 0 or a.unit >= len(rows[0]["kept"]):
            ap.error(f"--unit {a.unit} is outside [0, {len(rows[0]['kept'])})")
        plot_kept_map(rows, a.out, a.unit, title)
    print(f"plot_eval: wrote {a.out}")


if __name__ == "__main__":
    main()
