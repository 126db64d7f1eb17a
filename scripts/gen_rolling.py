"""The "Rolling positions" section of docs/RESULTS.md, from the rolling_*.jsonl files scripts/run_rolling.sh
writes (gen_results.py calls rolling_section)."""
import glob
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from plot_eval import label, load, policy_order  # noqa: E402

HEADING = "## Rolling positions: streaming past the trained context"
INTRO = [
    "With `--kv-positions rolling` a kept token's RoPE position is its place in the cache, not in the text "
    "(docs/EVICTION_CONTRACT.md, clause 8): per eviction unit the kept tokens sit at 0..k-1 and the chunk's "
    "queries and keys follow. With `original` positions, the tokens a policy keeps longest (sinks, heavy "
    "hitters) end up further from the query than the model was trained on once a run passes its training "
    "length. `scripts/run_rolling.sh` (part of `make results`; `make rolling` alone).",
    "",
]


def mode(row):
    return "rolling" if "positions=rolling" in row["policy"] else "original"


def curves_section(name, rows, img_dir, lines):
    model = os.path.basename(rows[0]["model"])
    text = os.path.basename(rows[0]["text"])
    n = rows[0]["n_tokens"]
    w = rows[0]["nll_window"]
    budgets = sorted({r["budget"] for r in rows if r["policy_name"] != "full"})
    lines.append(f"### {model} on {text}: perplexity per window of {w} positions ({n} tokens)\n")
    full = [r for r in rows if r["policy_name"] == "full"]
    if full:
        lines.append(f"The full cache over all {n} positions (`-c {n}`; past the trained context it has nothing to "
                     f"fall back on): perplexity {full[0]['perplexity']:.3f}. Each cell below: the whole run's "
                     "perplexity with original → **rolling** positions.\n")
    lines.append("| policy | " + " | ".join(f"budget {b}" for b in budgets) + " |")
    lines.append("|---|" + "---|" * len(budgets))
    by = {}
    for r in rows:
        if r["policy_name"] != "full":
            by.setdefault(label(r), {}).setdefault(r["budget"], {})[mode(r)] = r
    for p in policy_order(by):
        cells = []
        for b in budgets:
            m = by[p].get(b, {})
            o, ro = m.get("original"), m.get("rolling")
            cells.append(f"{o['perplexity']:.3f} → **{ro['perplexity']:.3f}**" if o and ro else "")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    lines.append("")
    mid = budgets[len(budgets) // 2]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, md in zip(axes, ("original", "rolling")):
        for r in full:
            xs = [(i + 1) * w for i in range(len(r["window_nll"]))]
            ax.plot(xs, [2.718281828 ** v for v in r["window_nll"]], label="full", color="black", lw=1)
        for p in policy_order(by):
            r = by[p].get(mid, {}).get(md)
            if r:
                xs = [(i + 1) * w for i in range(len(r["window_nll"]))]
                ax.plot(xs, [2.718281828 ** v for v in r["window_nll"]], label=p, lw=1)
        ax.set_title(f"{md} positions, budget {mid}")
        ax.set_xlabel("position (end of window)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"perplexity of the window ({w} tokens)")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{model} — {text}")
    fig.tight_layout()
    png = f"rolling_{name}.png"
    fig.savefig(os.path.join(img_dir, png), dpi=110)
    plt.close(fig)
    lines.append(f"![perplexity per position window](img/{png})\n")


def comparison_section(rows, lines):
    window = {mode(r): r for r in rows if r["policy_name"] == "window"}
    ref = window.get("original") or window.get("rolling")
    lines.append(f"### {rows[0]['n_tokens']} tokens of {os.path.basename(rows[0]['text'])}, budget "
                 f"{rows[0]['budget']}: every evicting policy against the window\n")
    lines.append("| policy | original | vs window | rolling | vs window |")
    lines.append("|---|---|---|---|---|")
    by = {}
    for r in rows:
        by.setdefault(label(r), {})[mode(r)] = r
    for p in policy_order(by):
        cells = []
        for md in ("original", "rolling"):
            r = by[p].get(md)
            cells += ["", ""] if r is None else [f"{r['perplexity']:.3f}",
                                                 f"{100 * (r['perplexity'] / ref['perplexity'] - 1):+.1f} %"]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    lines.append("")
    if "tova (head)" in by:
        lines.append("tova: as TOVA's paper scores, the last query's weights averaged over a layer's heads, which "
                     "then keep one set (its default granularity, layer); tova (head): each KV head scores and keeps "
                     "its own set (`--kv-granularity head`).\n")


def stream_section(rows, lines, img_dir):
    lines.append("### A 1M-token stream in fixed memory\n")
    lines.append("`h2okv generate -n 1000000 --ignore-eos --kv-positions rolling --stream-stats` on the bundled "
                 "model: resident memory and tokens/s (over each 20000 tokens) against tokens processed.\n")
    by = {}
    for r in rows:
        by.setdefault(r["policy"], []).append(r)
    lines.append("| policy | tokens | RSS first → last (MiB) | tokens/s first → median → last |")
    lines.append("|---|---|---|---|")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    growths = []
    for p, rs in by.items():
        tps = sorted(r["tokens_per_s"] for r in rs)
        lines.append(f"| {p} | {rs[-1]['tokens']} | {rs[0]['rss_bytes'] / 2**20:.1f} → "
                     f"{rs[-1]['rss_bytes'] / 2**20:.1f} | {rs[0]['tokens_per_s']:.0f} → {tps[len(tps) // 2]:.0f} → "
                     f"{rs[-1]['tokens_per_s']:.0f} |")
        growth = (rs[-1]["rss_bytes"] - rs[0]["rss_bytes"]) / max(1, rs[-1]["tokens"] - rs[0]["tokens"])
        growths.append((p, growth))
        xs = [r["tokens"] for r in rs]
        axes[0].plot(xs, [r["rss_bytes"] / 2**20 for r in rs], label=p)
        axes[1].plot(xs, [r["tokens_per_s"] for r in rs], label=p)
    lines.append("")
    for p, g in growths:
        lines.append(f"Resident memory changes by {g:.2f} bytes per token under {p} between the first and the last "
                     "line: the KV cache and work buffers are fixed, and `generate` prints each token as it comes "
                     "and keeps no list of them (`generation_params::keep_tokens`).\n")
    axes[0].set_ylabel("resident memory (MiB)")
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylabel("tokens/s")
    axes[1].set_ylim(bottom=0)
    for ax in axes:
        ax.set_xlabel("tokens processed")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(img_dir, "rolling_stream.png"), dpi=110)
    plt.close(fig)
    lines.append("![RSS and tokens/s of a 1M-token stream](img/rolling_stream.png)\n")


def speed_section(rows, lines):
    lines.append("### Decode speed at depth: rolling against original positions\n")
    by = {}
    for r in rows:
        m = "rolling" if "positions=rolling" in r["kv_policy"] else "original"
        by.setdefault(os.path.basename(r["model"]), {}).setdefault(m, []).append(r["decode_tps"])
    cpu = rows[0].get("cpu", "")
    lines.append(f"`h2okv bench -t 1 -p 16 -n 128 --depth 2048 --kv-policy h2o --kv-budget 256`, original and "
                 f"rolling runs interleaved, median of each mode's runs; CPU: {cpu}. Wall-clock on a shared "
                 "machine, where one run can differ from the next by tens of percent: the instruction counts "
                 "below are the comparison to trust.\n")
    lines.append("| model | original (tokens/s) | rolling (tokens/s) | rolling / original |")
    lines.append("|---|---|---|---|")
    for model, m in by.items():
        o = sorted(m.get("original", []))
        ro = sorted(m.get("rolling", []))
        if o and ro:
            a, b = o[len(o) // 2], ro[len(ro) // 2]
            lines.append(f"| {model} | {a:.0f} | {b:.0f} | {b / a:.2f} |")
    lines.append("")


def instructions_section(rows, lines):
    lines.append("### Decode instructions at depth: rolling against original positions\n")
    lines.append("`scripts/run_rolling.sh` under valgrind's cachegrind (`h2okv bench -t 1 -p 16 --depth 512 "
                 "--kv-policy h2o --kv-budget 256`): instructions executed per decoded token, a run decoding n + 1 "
                 "tokens minus one decoding 1, over n. A count the shared machine's noise does not move; valgrind "
                 "reports no AVX-512, so these are the AVX2 kernels' counts.\n")
    lines.append("| model | tokens decoded | original (instructions/token) | rolling (instructions/token) | "
                 "rolling / original |")
    lines.append("|---|---|---|---|---|")
    by = {}
    for r in rows:
        by.setdefault((os.path.basename(r["model"]), r["decoded"]), {})[r["positions"]] = r["instructions_per_token"]
    for (model, n), m in by.items():
        if "original" in m and "rolling" in m:
            lines.append(f"| {model} | {n} | {m['original']:,} | {m['rolling']:,} | "
                         f"{m['rolling'] / m['original']:.3f} |")
    lines.append("")


def drift_section(rows, lines):
    lines.append("### Turning keys when attended vs re-rotating them in place\n")
    lines.append("`scripts/rolling_drift.py`: random keys (head_dim 64), median relative error against the exact "
                 "rotation after s shifts, when the stored row is re-rotated in place by one position per shift "
                 "(rounded to the KV type every time) and when it is turned by s from the stored row once (what "
                 "h2okv does).\n")
    lines.append("| KV type | shifts | in place | turned when attended |")
    lines.append("|---|---|---|---|")
    for r in rows:
        lines.append(f"| {r['kv_type']} | {r['shifts']} | {r['in_place_error']:.2e} | {r['turned_error']:.2e} |")
    lines.append("")


def rolling_section(res, img_dir, lines):
    paths = sorted(glob.glob(os.path.join(res, "rolling_*.jsonl")))
    if not paths:
        return
    lines += [HEADING, ""] + INTRO
    path = os.path.join(res, "rolling_ppl4096.jsonl")
    if os.path.exists(path):
        comparison_section(load(path), lines)
    for path in sorted(glob.glob(os.path.join(res, "rolling_ppl_*.jsonl"))):
        curves_section(os.path.basename(path)[len("rolling_ppl_"):-len(".jsonl")], load(path), img_dir, lines)
    for name, render in (("stream", lambda rows: stream_section(rows, lines, img_dir)),
                         ("speed", lambda rows: speed_section(rows, lines)),
                         ("instructions", lambda rows: instructions_section(rows, lines)),
                         ("drift", lambda rows: drift_section(rows, lines))):
        path = os.path.join(res, f"rolling_{name}.jsonl")
        if os.path.exists(path):
            render(load(path))
