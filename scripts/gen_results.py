#!/usr/bin/env python3
"""Regenerates docs/RESULTS.md and docs/img/*.png from the JSONL files scripts/run_results.sh writes.

Usage: /usr/bin/python3 scripts/gen_results.py [RESULTS_DIR] [DOCS_DIR]   (defaults: results/ docs/)
Every number in RESULTS.md comes from those files; nothing is typed in by hand. A section whose files are not in
RESULTS_DIR (a run that re-measured only some sections, on a machine without the others' files) is carried over
from the existing RESULTS.md, marked as such, instead of being dropped.
"""
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_eval import POLICY_ORDER, label, load, plot_accuracy, policy_order, plot_kept_map, plot_perplexity  # noqa: E402
from gen_rolling import rolling_section  # noqa: E402
from gen_kvquant import kvquant_section  # noqa: E402
from gen_calibrate import calibrate_section  # noqa: E402
from plot_ruler import budget_of, plot_budget, plot_depth  # noqa: E402


def ppl_section(name, rows, img_dir, lines):
    full = [r for r in rows if r["policy_name"] == "full"]
    full_ppl = full[0]["perplexity"] if full else None
    n = rows[0]["n_tokens"]
    model = os.path.basename(rows[0]["model"])
    text = os.path.basename(rows[0]["text"])
    lines.append(f"### {model} on {text} ({n} tokens, BOS included; streaming, eviction after every token)\n")
    lines.append(f"Model sha256 `{rows[0]['model_sha256'][:16]}…`, K/V stored as {rows[0].get('kv_type', 'f32')}. "
                 f"Full-cache perplexity: **{full_ppl:.4f}**.\n")
    budgets = sorted({r["budget_spec"] for r in rows if r["policy_name"] != "full"}, key=float)
    by = {}
    for r in rows:
        if r["policy_name"] == "full":
            continue
        by.setdefault(label(r), {})[r["budget_spec"]] = r
    policies = policy_order(by)
    lines.append("| policy | " + " | ".join(f"budget {b}" for b in budgets) + " |")
    lines.append("|---|" + "---|" * len(budgets))
    for p in policies:
        cells = []
        for b in budgets:
            r = by[p].get(b)
            cells.append("" if r is None else f"{r['perplexity']:.4f} ({100 * (r['perplexity'] / full_ppl - 1):+.1f} %)")
        example = next(iter(by[p].values()))["policy"]
        params = [kv for kv in example.split(":", 1)[-1].split(",") if not kv.startswith(("budget=", "recent="))]
        lines.append(f"| {p} ({', '.join(params) or 'defaults'}) | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Each cell: perplexity (change against the full cache); the budget is a fraction of the evaluated "
                 "length. h2o's recent window is half the budget unless the ablation says otherwise; streaming "
                 "protects 4 sinks.\n")
    # The headline: 20 %.
    if "0.2" in budgets:
        h = {p: by[p].get("0.2") for p in policies}
        parts = [f"{p} {100 * (h[p]['perplexity'] / full_ppl - 1):+.1f} %" for p in policies if h[p]]
        lines.append(f"**At a 20 % budget** (perplexity change against full): " + ", ".join(parts) + ".")
        ranked = sorted((h[p]["perplexity"], p) for p in policies if h[p])
        verdict = (f"Best at 20 %: {ranked[0][1]}. ")
        if h.get("h2o") and h.get("window"):
            if h["h2o"]["perplexity"] < h["window"]["perplexity"]:
                verdict += "h2o with the paper's defaults beats the plain window here."
            else:
                verdict += ("h2o with the paper's defaults does not beat the plain window here: half its budget "
                            "goes to heavy hitters, which on this model cost more local context than they return.")
        lines.append(verdict + "\n")
    png = f"ppl_{name}.png"
    plot_perplexity(rows, os.path.join(img_dir, png), f"{model} — {text}, {n} tokens")
    lines.append(f"![perplexity vs budget](img/{png})\n")


def ablation_section(name, rows, lines):
    model = os.path.basename(rows[0]["model"])
    text = os.path.basename(rows[0]["text"])
    lines.append(f"### h2o ablation at a 20 % budget: {model} on {text} ({rows[0]['n_tokens']} tokens)\n")
    lines.append("| configuration | perplexity |")
    lines.append("|---|---|")
    for r in rows:
        lines.append(f"| `{r['policy']}` ({r['granularity']}) | {r['perplexity']:.4f} |")
    lines.append("")
    best = min(rows, key=lambda r: r["perplexity"])
    default = rows[0]
    lines.append(f"Best: `{best['policy']}` ({best['granularity']}) at {best['perplexity']:.4f}, against "
                 f"{default['perplexity']:.4f} for the paper's defaults (first row).\n")


def ordered(values):
    """The distinct values in first-seen order."""
    return list(dict.fromkeys(values))


def short_policy(row):
    name = row["policy_name"]
    spec = row.get("budget_spec") or ""
    return "full (100 %)" if name == "full" else f"{name} {spec}"


def tasks_section(name, rows, img_dir, lines):
    model = os.path.basename(rows[0]["model"])
    lines.append(f"### {model}\n")
    tasks = ordered(r["task"] for r in rows)
    policies = ordered(short_policy(r) for r in rows)
    cell = {(r["task"], short_policy(r)): r for r in rows}
    lines.append("| task (items) | " + " | ".join(policies) + " |")
    lines.append("|---|" + "---|" * len(policies))
    for t in tasks:
        any_row = next(r for r in rows if r["task"] == t)
        cells = []
        for p in policies:
            r = cell.get((t, p))
            cells.append("" if r is None else f"{r['acc']:.3f} / {r['acc_norm']:.3f}")
        lines.append(f"| {t} ({any_row['n_items']}) | " + " | ".join(cells) + " |")
    lines.append("")
    png = f"acc_{name}.png"
    plot_accuracy(rows, os.path.join(img_dir, png), f"{model}: accuracy vs KV budget")
    lines.append(f"![accuracy vs budget](img/{png})\n")
    lines.append("Each cell: acc / acc_norm (lm-eval style; standard errors in the JSONL are about "
                 f"{max(r['acc_stderr'] for r in rows):.2f} at most). The budget is a fraction of each (context, "
                 "choice) sequence, evicting after every token.\n")


def agreement_section(name, rows, lines):
    rows = [r for r in rows if r["record"] == "summary"]
    model = os.path.basename(rows[0]["model"])
    lines.append(f"### {model} ({rows[0]['n_prompts']} prompts, {rows[0]['n_steps']} greedy steps each)\n")
    lines.append("| policy | token match | retained attention mass | prompts diverged | mean first divergence |")
    lines.append("|---|---|---|---|---|")
    for r in rows:
        fd = "–" if r["mean_first_divergence"] is None else f"{r['mean_first_divergence']:.1f}"
        lines.append(f"| {r['policy_spec']} | {r['match_rate']:.3f} | {r['retained_mass']:.3f} | "
                     f"{r['n_diverged']}/{r['n_prompts']} | {fd} |")
    lines.append("")


def passkey_section(name, rows, lines):
    model = os.path.basename(rows[0]["model"])
    lines.append(f"### {model} ({rows[0]['length']} tokens, {rows[0]['trials']} keys per depth)\n")
    depths = sorted({r["depth"] for r in rows})
    policies = ordered(short_policy(r) for r in rows)
    cell = {(short_policy(r), r["depth"]): r for r in rows}
    lines.append("| policy | " + " | ".join(f"depth {d:g}" for d in depths) + " |")
    lines.append("|---|" + "---|" * len(depths))
    for p in policies:
        lines.append(f"| {p} | " + " | ".join(
            f"{cell[(p, d)]['correct']}/{cell[(p, d)]['trials']}" if (p, d) in cell else "" for d in depths) + " |")
    full_correct = sum(r["correct"] for r in rows if r["policy_name"] == "full")
    example = rows[0]["generated"][0] if rows[0].get("generated") else ""
    lines.append("")
    if full_correct == 0:
        lines.append(f"The model does not retrieve the key even with the full cache (a typical answer: "
                     f"\"{example.strip()}\"): the harness runs end to end, the model is too small for the task.\n")
    else:
        lines.append(f"With the full cache the model retrieves {full_correct} keys in all.\n")


def ruler_section(name, rows, img_dir, lines):
    """The RULER-style suite of one model: mean string-match score per (policy, budget) x task, both protocols;
    plots of score vs budget and of score vs needle depth."""
    model = os.path.basename(rows[0]["model"])
    tasks = ordered(r["task"] for r in rows)
    lengths = ordered(r["length"] for r in rows)
    trials = max(r["trial"] for r in rows) + 1
    lines.append(f"### {model} ({', '.join(str(n) for n in lengths)} tokens, {trials} trials per task, length "
                 "and depth)\n")
    keys = ordered((label(r), budget_of(r)) for r in rows)
    keys.sort(key=lambda k: (k[0] != "full", k[1], POLICY_ORDER.index(k[0]) if k[0] in POLICY_ORDER else 99))
    cells = {}
    for r in rows:
        cells.setdefault((label(r), budget_of(r), r["task"], r["protocol"]), []).append(r["score"])
        cells.setdefault((label(r), budget_of(r), "mean", r["protocol"]), []).append(r["score"])

    def cell(p, b, t):
        vals = [cells.get((p, b, t, proto)) for proto in ("agnostic", "aware")]
        return " / ".join("–" if v is None else f"{sum(v) / len(v):.2f}" for v in vals)

    lines.append("| policy | budget | mean | " + " | ".join(tasks) + " |")
    lines.append("|---|---|---|" + "---|" * len(tasks))
    for p, b in keys:
        lines.append(f"| {p} | {'100 %' if p == 'full' else f'{b:g}'} | {cell(p, b, 'mean')} | " +
                     " | ".join(cell(p, b, t) for t in tasks) + " |")
    lines.append("")
    lines.append("Each cell: query-agnostic / query-aware mean score (RULER's string_match_all: the share of "
                 "expected answers in the greedy output), over lengths, depths and trials.\n")

    def score(p, b, proto):
        v = cells.get((p, b, "mean", proto))
        return None if v is None else sum(v) / len(v)

    full = [score("full", 1.0, proto) for proto in ("agnostic", "aware")]
    if all(f is not None for f in full):
        text = f"With the full cache the model scores {full[0]:.2f} / {full[1]:.2f}."
        if max(full) < 0.05:
            text += (" It cannot do these tasks even with every token kept, so the scores cannot tell the "
                     "policies apart; the answer NLL below is the graded signal.")
        lines.append(text + "\n")
    reading = []
    for b in sorted({b for _, b in keys if b < 1.0}):
        for proto in ("agnostic", "aware"):
            ranked = sorted(((score(p, bb, proto), p) for p, bb in keys if bb == b and score(p, bb, proto) is not None),
                            reverse=True)
            if ranked and ranked[0][0] > ranked[-1][0]:
                reading.append(f"at {b:g} {proto}: best {ranked[0][1]} {ranked[0][0]:.2f}, worst {ranked[-1][1]} "
                               f"{ranked[-1][0]:.2f}")
    if reading:
        lines.append("Scores (computed from the file): " + "; ".join(reading) + ".\n")
    if all("answer_nll" in r for r in rows):
        nll = {}
        for r in rows:
            nll.setdefault((label(r), budget_of(r), r["protocol"]), []).append(r["answer_nll"])
        lines.append("Teacher-forced negative log-likelihood of the expected answers (nats per token, lower is "
                     "better; agnostic / aware, over tasks, lengths, depths and trials):\n")
        lines.append("| policy | budget | answer NLL | vs full |")
        lines.append("|---|---|---|---|")
        base = [nll.get(("full", 1.0, proto)) for proto in ("agnostic", "aware")]
        for p, b in keys:
            vals = [nll.get((p, b, proto)) for proto in ("agnostic", "aware")]
            cells = " / ".join("–" if v is None else f"{sum(v) / len(v):.3f}" for v in vals)
            delta = " / ".join("–" if v is None or f is None else f"{sum(v) / len(v) - sum(f) / len(f):+.3f}"
                               for v, f in zip(vals, base))
            lines.append(f"| {p} | {'100 %' if p == 'full' else f'{b:g}'} | {cells} | {delta} |")
        lines.append("")
        evicted = [sum(v) / len(v) for (p, b, _), v in nll.items() if p != "full"]
        full_nll = [sum(f) / len(f) for f in base if f is not None]
        if evicted and full_nll and min(evicted) <= min(full_nll):
            lines.append("Some evicting policies give the answers a likelihood at least as high as the full cache "
                         "does: the model does not draw on the needles (the answer's likelihood comes from the "
                         "question and local context), so these rows say nothing about retrieval either.\n")
        png = f"ruler_nll_{name}.png"
        plot_budget(rows, os.path.join(img_dir, png), f"{model}: answer NLL vs KV budget", "answer_nll")
        lines.append(f"![answer NLL vs budget](img/{png})\n")
    png = f"ruler_budget_{name}.png"
    plot_budget(rows, os.path.join(img_dir, png), f"{model}: RULER-style score vs KV budget")
    lines.append(f"![score vs budget](img/{png})\n")
    if any(r.get("depth") is not None for r in rows):
        png = f"ruler_depth_{name}.png"
        plot_depth(rows, os.path.join(img_dir, png), f"{model}: score by needle depth (needle tasks)")
        lines.append(f"![score by depth](img/{png})\n")


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def weight_type(row):
    """The weight type from run_speed.sh's model file name (smollm-135m-TYPE.gguf)."""
    return os.path.basename(row["model"])[:-len(".gguf")].rsplit("-", 1)[-1].upper()


SPEED_INTROS = {  # file name -> (heading, what was run)
    "depth0": ("Depth 0, full cache", "Full cache, depth 0: a 512-token prompt as one prefill, then 128 tokens decoded one at a time."),
    "bookkeeping": ("The cost of H2O's bookkeeping", "H2O's score bookkeeping: full against h2o with a budget that holds the whole run (nothing is "
                    "evicted, every attention row is scored), 2048 cached tokens, 128 decoded."),
    "depth8192": ("Depth 8192: h2o at 20 % against the full cache", "Long context: 8192 tokens in the cache, then a 64-token prompt and 64 decoded tokens; full "
                  "against h2o at a 20 % budget with 64-token prefill chunks (KV holds budget + 64 slots)."),
}


def speed_section(name, rows, lines):
    """Medians over interleaved single-repeat runs, grouped by weight type and KV configuration."""
    groups = {}
    for r in rows:
        groups.setdefault((weight_type(r), r["kv_policy"]), []).append(r)
    r0 = rows[0]
    heading, intro = SPEED_INTROS.get(name, (name, ""))
    lines.append(f"### {heading}\n")
    cpu = f", {r0['cpu']}" if r0.get("cpu") else ""
    lines.append(intro + f" {r0['threads']} threads{cpu}; each cell is the median of "
                 f"{len(next(iter(groups.values())))} runs made side by side.\n")
    lines.append("| weights | KV | prefill t/s | decode t/s | decode vs full | KV MiB | KV vs full |")
    lines.append("|---|---|---|---|---|---|---|")
    full = {w: g for (w, p), g in groups.items() if p.startswith("full")}
    for (w, p), g in groups.items():
        pf = median([r["prefill_tps"] for r in g])
        dc = median([r["decode_tps"] for r in g])
        kv = g[0]["kv_bytes"]
        kv_type = g[0].get("kv_type", "f32")
        ref = full.get(w)
        vs = kv_vs = "–"
        if ref is not None and not p.startswith("full"):
            vs = f"{dc / median([r['decode_tps'] for r in ref]):.2f}x"
            kv_vs = f"{ref[0]['kv_bytes'] / kv:.2f}x smaller" if ref[0]["kv_bytes"] > kv else "same"
        pf_cell = f"{pf:.1f}" if pf > 0 else "–"
        lines.append(f"| {w} | {p} ({kv_type}) | {pf_cell} | {dc:.1f} | {vs} | {kv / 2**20:.1f} | {kv_vs} |")
    lines.append("")


def kernels_section(name, rows, lines):
    """Kernel micro-benchmarks (bench_kernels_bench, 1 thread): matvec GB/s against the read bandwidth."""
    peak = next(r["bytes_per_second"] for r in rows if r["name"].startswith("peak/read_bandwidth"))
    per_type = {}
    for r in rows:
        parts = r["name"].split("/")
        if parts[0] != "matmul":
            continue
        kind = "decode" if "n_tok:1/" in r["name"] else "prefill"
        per_type.setdefault(parts[1], {})[kind] = r
    lines.append(f"### Kernel micro-benchmarks ({name}, 1 thread)\n")
    lines.append(f"`bench_kernels_bench` (scripts/run_speed.sh): decode is the product of a 16384 x 2048 matrix "
                 f"with one token (larger than the L3 cache, so the weights stream from memory), against the "
                 f"measured read bandwidth of {peak / 1e9:.1f} GB/s (a plain streaming sum with 8 accumulators); prefill "
                 f"is a 2048 x 2048 matrix with 64 tokens. Above 100 %: Q8_0's 36 MB matrix partly stays in the 32 MiB "
                 f"L3 cache between calls, and the F32 kernel's software prefetch streams a little faster than the "
                 f"plain sum.\n")
    lines.append("| weights | decode GB/s | of read bandwidth | prefill GFLOP/s |")
    lines.append("|---|---|---|---|")
    for t, k in per_type.items():
        d, p = k.get("decode"), k.get("prefill")
        dec = f"{d['bytes_per_second'] / 1e9:.1f} | {100 * d['bytes_per_second'] / peak:.0f} %" if d else "– | –"
        pre = f"{p['GFLOP/s'] / 1e9:.0f}" if p else "–"
        lines.append(f"| {t} | {dec} | {pre} |")
    lines.append("")


def llamacpp_section(name, rows, lines):
    """One model compared with llama.cpp by scripts/llamacpp/compare.sh: logits, then speed."""
    r = rows[0]
    lg, fl = r["logits"], r["floor"]
    lines.append(f"### {name} (KV {r['kv_type']} in both engines, {r['threads']} threads)\n")
    lines.append("| logits over the same ids | max \\|Δ logit\\| | mean \\|Δ logit\\| | mean KL | KL at position 0 |")
    lines.append("|---|---|---|---|---|")
    for label_, c in (("h2okv vs llama.cpp", lg), ("llama.cpp flash attention off vs on (noise floor)", fl)):
        kl0 = c["kl_mean_by_position"][0]["kl_mean"]
        lines.append(f"| {label_} | {c['max_abs_diff']:.4g} | {c['mean_abs_diff']:.4g} | {c['kl_mean']:.3g} | {kl0:.3g} |")
    lines.append("")
    lines.append(f"{lg['n_pos']} positions (BOS, then random ids; logit std {lg['ref_logit_std']:.3g}); KL in nats, "
                 "KL(P_llama.cpp ‖ P_h2okv).\n")
    if r.get("bench"):
        b0 = r["bench"][0]
        lines.append(f"| test | llama.cpp t/s | h2okv t/s | h2okv / llama.cpp |")
        lines.append("|---|---|---|---|")
        for b in r["bench"]:
            full = ", both full cache" if "h2okv_evict_tps" in b else ""
            lines.append(f"| {b['test']}{full} | {b['llama_cpp_tps']:.1f} | {b['h2okv_tps']:.1f} | "
                         f"**{b['h2okv_tps'] / b['llama_cpp_tps']:.2f}x** |")
            if "h2okv_evict_tps" in b:
                lines.append(f"| {b['test']}, h2okv `{b['h2okv_evict_policy']}` | {b['llama_cpp_tps']:.1f} | "
                             f"{b['h2okv_evict_tps']:.1f} | **{b['h2okv_evict_tps'] / b['llama_cpp_tps']:.2f}x** |")
        lines.append("")
        lines.append(f"llama-bench (commit {b0.get('llama_cpp_commit') or '?'}, flash attention {b0['flash_attn']}, "
                     f"K cache {b0['llama_cpp_type_k']}) against `h2okv bench` (kernels {b0.get('h2okv_isa') or '?'}), "
                     f"medians of {b0.get('repeats', '?')} repeats, one of each engine in turn, pp and tg from an empty "
                     "cache.\n")
        if r.get("cpu"):
            pre, dec = r.get("llama_cpp_prefill_bench", ""), r.get("llama_cpp_decode_bench", "")
            builds = (f" llama.cpp's prefill ran with `{pre}`, its decode with `{dec}`." if pre and dec and pre != dec
                      else "")
            lines.append(f"CPU: {r['cpu']}.{builds}\n")
        deep = [b for b in r["bench"] if "h2okv_evict_tps" in b]
        if deep:
            lines.append(f"`{deep[0]['test']}` decodes after that many cached tokens (compare.sh --depth): llama.cpp "
                         "keeps every token; the h2o row is h2okv with an H2O-managed cache at a 20 % budget and "
                         "64-token prefill chunks (as in scripts/run_speed.sh), so its ratio is what eviction buys "
                         "over the full cache a llama.cpp user runs.\n")


ARCH_INTRO = [
    "## Architectures against llama.cpp", "",
    "`scripts/llamacpp/arch_compare.sh` (LLAMA_CPP_DIR pointing at a llama.cpp build made outside this repository): "
    "per architecture and RoPE variant a small synthetic GGUF (`h2okv gguf synth --shape <name>`, random weights), "
    "logits of both engines over the same 256 random token ids with f16 KV, next to llama.cpp against itself with "
    "flash attention off (its own noise floor). KL in nats, mean over positions, KL(P_llama.cpp ‖ P_other). With "
    "Q8_0 weights llama.cpp also rounds the activations of every product to 8 bits and h2okv does not, which "
    "dominates both columns there.", "",
    "| shape | architecture | weights | h2okv max \\|Δ logit\\| | h2okv mean KL | floor max \\|Δ logit\\| | "
    "floor mean KL | h2okv KL / floor KL |",
    "|---|---|---|---|---|---|---|---|",
]


KVTYPE_INTRO = [
    "## Decode speed by KV type deep in the context", "",
    "`scripts/llamacpp/kvtype_speed.sh --results results` with `LLAMA_CPP_DIR` pointing at a llama.cpp build made "
    "outside this repository: tokens per second decoding after the depth's cached tokens on a synthetic "
    "smollm-135m Q8_0 (random weights), per KV type, llama-bench with `-ctk/-ctv` of that type and flash attention "
    "on (its quantised V cache needs it) against `h2okv bench --kv-type` of the same type, full cache and h2o at a "
    "20 % budget. One repeat of each engine and type in turn; medians. `× llama.cpp` is h2okv's speed over "
    "llama.cpp's; KV bytes are h2okv's for the sequence (llama.cpp's full cache stores the same ggml blocks).", "",
]


def kvtype_section(name, rows, lines):
    by = {(r["kv_type"], r["engine"], r["policy"]): r for r in rows}
    types = [t for t in ["f16", "q8_0", "q4_0", "q4_1"] if any(k[0] == t for k in by)]
    first = rows[0]
    lines.append(f"{first['model']}, depth {first['depth']}, {first['n_gen']} tokens decoded, "
                 f"{first['threads']} threads, CPU {first.get('cpu', 'unknown')}.\n")
    lines.append("| KV type | llama.cpp t/s | h2okv full t/s | × llama.cpp | h2okv h2o 0.2 t/s | × llama.cpp | "
                 "KV bytes full | KV bytes h2o 0.2 |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for t in types:
        ll = by.get((t, "llama.cpp", "full"))
        full = by.get((t, "h2okv", "full"))
        h2o = by.get((t, "h2okv", "h2o 0.2"))

        def tps(r):
            return f"{r['decode_tps']:.1f}" if r else "-"

        def ratio(r):
            return f"{r['decode_tps'] / ll['decode_tps']:.2f}" if r and ll and ll["decode_tps"] else "-"

        lines.append(f"| {t} | {tps(ll)} | {tps(full)} | {ratio(full)} | {tps(h2o)} | {ratio(h2o)} | "
                     f"{full['kv_bytes'] if full else '-'} | {h2o['kv_bytes'] if h2o else '-'} |")
    lines.append("")


def arch_section(name, rows, lines):
    """One synthetic shape compared with llama.cpp by scripts/llamacpp/arch_compare.sh: a table row per type."""
    for r in rows:
        lg, fl = r["logits"], r["floor"]
        ratio = lg["kl_mean"] / fl["kl_mean"] if fl["kl_mean"] > 0 else float("inf")
        lines.append(f"| {r['shape']} | {r['arch']} | {r['type']} | {lg['max_abs_diff']:.3g} | {lg['kl_mean']:.3g} | "
                     f"{fl['max_abs_diff']:.3g} | {fl['kl_mean']:.3g} | {ratio:.3g} |")


def throughput_section(name, rows, lines):
    """scripts/run_throughput.sh: sequences at once (depth 0 and deep), then equal KV memory, full vs h2o."""
    r0 = rows[0]
    lines.append(f"### {name} ({r0['threads']} threads, {r0['cpu']}, kernels {r0['isa']}, KV {r0['kv_type']})\n")
    deep = next((r["depth"] for r in rows if r["label"] == "deep"), 0)
    gen = r0["n_gen"]
    lines.append(f"`h2okv bench --sequences S`: every step is one forward pass with one token of each sequence; "
                 f"t/s sums the sequences' tokens. Depth 0: a 128-token prompt each, then {gen} decoded; deep: every "
                 f"sequence {deep} tokens deep, then {gen} decoded. Full cache.\n")
    lines.append("| sequences | depth 0: prefill t/s | depth 0: decode t/s | vs 1 sequence | decode step ms | "
                 f"{deep} deep: decode t/s | vs 1 sequence | peak RSS MiB | RSS accounted MiB |")
    lines.append("|---|---|---|---|---|---|---|---|---|")

    def med(label, s, key):
        v = [r[key] for r in rows if r["label"] == label and r["sequences"] == s]
        return median(v) if v else None

    seqs = sorted({r["sequences"] for r in rows if r["label"] == "depth0"})
    base0, based = med("depth0", 1, "decode_tps"), med("deep", 1, "decode_tps")
    for s_ in seqs:
        d0, dd = med("depth0", s_, "decode_tps"), med("deep", s_, "decode_tps")
        rss = med("deep", s_, "peak_rss_bytes") or 0
        acc = med("deep", s_, "rss_accounted_bytes") or 0
        lines.append(f"| {s_} | {med('depth0', s_, 'prefill_tps'):.1f} | {d0:.1f} | {d0 / base0:.2f}x | "
                     f"{med('depth0', s_, 'decode_ms_per_step'):.1f} | {dd:.1f} | {dd / based:.2f}x | "
                     f"{rss / 2**20:.1f} | {acc / 2**20:.1f} ({100 * (rss / acc - 1):+.1f} %) |")
    lines.append("")
    lines.append("RSS accounted: the process with the model once a one-token pass has read every weight (measured) + "
                 "the KV pool's peak (the sequences' caches: K/V and slot tables) + the work buffers (model "
                 "activations, softmax weights, logits rows), from the deep runs.\n")
    full = [r for r in rows if r["label"] == "equal_full"]
    h2o = [r for r in rows if r["label"] == "equal_h2o"]
    if full and h2o:
        f0, h0 = full[0], h2o[0]
        fd, hd = median([r["decode_tps"] for r in full]), median([r["decode_tps"] for r in h2o])
        lines.append(f"**Equal KV memory.** A pool of {f0['kv_memory'] / 2**20:.1f} MiB holds 4 full caches "
                     f"{f0['depth']} tokens deep ({f0['kv_footprint'] / 2**20:.1f} MiB each, K/V and slot tables); "
                     f"16 sequences are submitted, each {f0['depth']} deep, then {gen} decoded. Medians of "
                     f"{len(full)} and {len(h2o)} runs, the two caches taking turns.\n")
        lines.append("| cache | per sequence MiB | at once | waves | decode t/s (all sequences) | vs full | KV bytes per sequence |")
        lines.append("|---|---|---|---|---|---|---|")
        for label_, g, d in (("full", f0, fd), (h0["kv_policy"], h0, hd)):
            lines.append(f"| {label_} | {g['kv_footprint'] / 2**20:.2f} | {g['concurrent']} | {g['waves']} | {d:.1f} | "
                         f"{d / fd:.2f}x | {g['kv_bytes'] / 2**20:.2f} MiB |")
        lines.append("")
        lines.append(f"In the same memory h2o at 20 % runs {h0['concurrent'] / f0['concurrent']:.1f}x the sequences "
                     f"at once and decodes {hd / fd:.2f}x the tokens per second of the full cache (which runs its "
                     f"{f0['sequences']} sequences {f0['concurrent']} at a time).\n")
        if all("decode_phases" in r for r in full + h2o):
            equal_memory_phases(full, h2o, fd, lines)


def equal_memory_phases(full, h2o, fd, lines):
    """Where the equal-memory runs' decode steps go (bench --phases), and the ratio h2o would reach if its
    steps held nothing but the work every cache does: the products, attention without the score hand-overs,
    and the K/V writes."""
    def split(r):
        p, step = r["decode_phases"], r["decode_ms_per_step"]
        ms = {k: step * p[k] / p["seconds"] for k in ("products", "attention", "kv_store", "scores", "chunks", "other")}
        ms["handover"] = step * p["handover_thread_seconds"] / r["threads"] / p["seconds"]
        ms["step"] = step
        ms["core"] = ms["products"] + ms["attention"] - ms["handover"] + ms["kv_store"]
        return ms

    lines.append("Where a decode step goes (`--phases`; milliseconds per step, medians over the runs). The score "
                 "hand-overs (h2o adding a step's attention weights to its scores) run inside the attention items; "
                 "their share is the threads' time in them over the thread count.\n")
    lines.append("| cache | tokens per step | step | products | attention | of it score hand-overs | K/V writes | "
                 "score commits + chunk closes | the rest |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    parts = {"full": [split(r) for r in full], "h2o": [split(r) for r in h2o]}
    for label, g in (("full", full), ("h2o", h2o)):
        m = {k: median([p[k] for p in parts[label]]) for k in parts[label][0]}
        lines.append(f"| {g[0]['kv_policy']} | {g[0]['concurrent']} | {m['step']:.2f} | {m['products']:.2f} | "
                     f"{m['attention']:.2f} | {m['handover']:.2f} | {m['kv_store']:.2f} | "
                     f"{m['scores'] + m['chunks']:.2f} | {m['other']:.2f} |")
    # Per h2o run: its rate if each step took only its core work (the full cache's steps as measured).
    bound = median([r["decode_tps"] * p["step"] / p["core"] for r, p in zip(h2o, parts["h2o"])])
    share = {label: median([p["attention"] / p["step"] for p in ps]) for label, ps in parts.items()}
    more, less = ("full cache", "h2o") if share["full"] > share["h2o"] else ("h2o", "full cache")
    lines.append("")
    lines.append(f"Had h2o's steps held only the products, attention without the hand-overs and the K/V writes "
                 f"(no score bookkeeping, chunk closes or per-step rest), it would decode {bound:.1f} t/s, "
                 f"{bound / fd:.2f}x the full cache: the most that making h2o's own bookkeeping free could give "
                 f"here. Attention is {100 * share['full']:.0f} % of the full cache's step and "
                 f"{100 * share['h2o']:.0f} % of h2o's, so faster attention would raise the {more} run's rate "
                 f"more, and faster products the {less} run's.\n")


def batched_section(name, rows, lines):
    """scripts/llamacpp/batched.sh: llama-batched-bench against h2okv bench --sequences, full caches."""
    r0 = rows[0]
    lines.append(f"### {name}: many sequences, side by side with llama-batched-bench ({r0['threads']} threads, "
                 f"{r0['cpu']})\n")
    lines.append("| sequences | prompt | generated | llama.cpp prefill t/s | h2okv prefill t/s | ratio | "
                 "llama.cpp decode t/s | h2okv decode t/s | ratio |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["n_prompt"], r["sequences"])):
        lines.append(f"| {r['sequences']} | {r['n_prompt']} | {r['n_gen']} | {r['llama_cpp_prefill_tps']:.1f} | "
                     f"{r['h2okv_prefill_tps']:.1f} | **{r['h2okv_prefill_tps'] / r['llama_cpp_prefill_tps']:.2f}x** | "
                     f"{r['llama_cpp_decode_tps']:.1f} | {r['h2okv_decode_tps']:.1f} | "
                     f"**{r['h2okv_decode_tps'] / r['llama_cpp_decode_tps']:.2f}x** |")
    lines.append("")
    lines.append(f"llama-batched-bench (commit {r0['llama_cpp_commit']}, one context holding every sequence, KV f16, "
                 f"ubatch 512) against `h2okv bench --sequences` (kernels {r0['h2okv_isa']}, KV {r0['kv_type']}); "
                 f"both keep every token. Medians of {r0['repeats']} runs, the engines taking turns.\n")


SERVE_HEADING = "## Serving at equal KV memory"
SERVE_INTRO = [
    "`scripts/serve_bench.py` (docs/SERVER.md): every client sends one streaming completion at the same moment "
    "(P random token ids, max_tokens G, ignore_eos, greedy) to `h2okv serve` with full caches, to `h2okv serve` "
    "with H2O, and to llama-server, each given the KV memory of a few full contexts of P + G tokens: h2okv's pool "
    "is that many full-cache footprints (K/V in f16 + slot tables), llama-server gets one slot per context "
    "(`-np`, `-c`; K/V in f16). Throughput is completion tokens over the whole run; TTFT counts the wait for "
    "admission; ITL is the gap between streamed chunks, over all requests; \"at once\" is the most requests "
    "between their first and last token at one moment.",
    "",
]


def serve_section(name, rows, lines):
    """scripts/serve_bench.py: h2okv serve (full, H2O) and llama-server under the same clients and KV memory."""
    r0 = rows[0]
    lines.append(f"### {name}: {r0['clients']} clients, P = {r0['prompt_tokens']}, G = {r0['max_tokens']}, KV "
                 f"memory of {r0['contexts']} full contexts ({r0['kv_memory'] / 2**20:.1f} MiB), {r0['model']}, "
                 f"{r0['threads']} threads, {r0['cpu']}\n")
    lines.append("| server | sequences at once | completion tokens/s | TTFT p50 / p99 (ms) | ITL p50 / p99 (ms) | "
                 "failed |")
    lines.append("|---|---|---|---|---|---|")
    for r in rows:
        lines.append(f"| {r['label']} | {r['concurrent']} | {r['tokens_per_second']:.1f} | {r['ttft_p50_ms']:.0f} / "
                     f"{r['ttft_p99_ms']:.0f} | {r['itl_p50_ms']:.1f} / {r['itl_p99_ms']:.1f} | {r['failed']} |")
    lines.append("")
    for r in rows:
        if r.get("end_errors"):
            lines.append(f"{r['label']} ended {r['end_errors']} of its {r['requests']} streams with an error event "
                         "after every token had arrived (llama-server's output parser refusing the random-weight "
                         "model's text); those tokens are counted.\n")
    by = {r["system"]: r for r in rows}
    h2o, full, llama = by.get("h2o"), by.get("full"), by.get("llama-server")
    if h2o and llama:
        c = h2o["concurrent"] / max(llama["concurrent"], 1)
        t = h2o["tokens_per_second"] / llama["tokens_per_second"]
        met = lambda ok: "met" if ok else "**not met**"
        lines.append(f"{h2o['label']} against llama-server ({llama.get('llama_server_flags', '')}, version "
                     f"{llama.get('llama_cpp_version', 'unknown')}): {c:.1f}x the sequences at once (goal >= 4x: "
                     f"{met(c >= 4)}), {t:.2f}x the throughput (goal >= 3x: {met(t >= 3)}), p99 inter-token latency "
                     f"{h2o['itl_p99_ms']:.1f} ms against {llama['itl_p99_ms']:.1f} ms (goal no worse: "
                     f"{met(h2o['itl_p99_ms'] <= llama['itl_p99_ms'])}).\n")
    if h2o and full:
        lines.append(f"Against h2okv's own full caches in the same memory: {h2o['concurrent'] / max(full['concurrent'], 1):.1f}x "
                     f"the sequences at once and {h2o['tokens_per_second'] / full['tokens_per_second']:.2f}x the "
                     f"throughput.\n")


def xsum_section(name, rows, lines):
    lines += [f"### {name} ({rows[0]['examples']} prompts, greedy, 64 tokens)", "",
              "| configuration | ROUGE-1 | ROUGE-2 | ROUGE-L | empty answers |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['rouge1']:.4f} | {r['rouge2']:.4f} | {r['rougeL']:.4f} | "
                     f"{r['empty']} of {r['examples']} |")
    lines.append("")
    if all(r["empty"] == r["examples"] for r in rows):
        lines += ["Every answer is empty: the model continues the prompts' own format (`###` and a new "
                  "article) instead of summarising, and HELM cuts the answer at `###`. It cannot summarise, "
                  "with or without eviction.", ""]


def replace_section(path, heading, body, before=None):
    """Rewrites the section `heading` of a markdown file in place (up to the next `## ` heading), or inserts it
    before the heading `before` (at the end when that is absent too)."""
    doc = open(path, encoding="utf-8").read().rstrip("\n").split("\n")
    section = [heading, ""] + body
    if heading in doc:
        i = doc.index(heading)
        j = next((k for k in range(i + 1, len(doc)) if doc[k].startswith("## ")), len(doc))
        doc[i:j] = section
    elif before in doc:
        i = doc.index(before)
        doc[i:i] = section
    else:
        doc += [""] + section
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(doc).rstrip() + "\n")


def trace_section(path, img_dir, lines):
    png = "kept_map_stories260K_h2o64.png"
    plot_kept_map(load(path), os.path.join(img_dir, png), 0,
                  "h2o, budget 64: kept positions of layer 0, KV head 0 (stories260K)")
    lines.append("### Where the heavy hitters are\n")
    lines.append("Kept positions of one head (layer 0, KV head 0) at every step of a 300-token generation with "
                 "`--kv-policy h2o --kv-budget 64` (32 recent + 32 heavy): the diagonal band is the recent window, "
                 "the horizontal lines are heavy hitters that survive for many steps.\n")
    lines.append(f"![kept-position map](img/{png})\n")


CARRIED = ("_Carried over from the previous RESULTS.md: this section's results files were not in this run's "
           "folder, so its figures are those of the run that last wrote them._")


def split_sections(text):
    """[(heading or None for the preamble, lines)] split at the level-2 headings."""
    parts = [(None, [])]
    for line in text.rstrip("\n").split("\n"):
        if line.startswith("## "):
            parts.append((line, []))
        else:
            parts[-1][1].append(line)
    return parts


def carry_forward(new_text, old_text):
    """new_text with every level-2 section of old_text that this run did not produce (absent, or a heading with
    nothing under it) put back where it stood, marked as carried over: a run over part of the results files
    (one section re-measured on a new machine) keeps the rest of the document instead of dropping it."""
    new = split_sections(new_text)
    have = {h for h, body in new if h is not None and any(line.strip() for line in body)}
    new = [(h, body) for h, body in new if h is None or h in have]
    old = split_sections(old_text)
    for i, (heading, body) in enumerate(old):
        if heading is None or heading in have:
            continue
        if body[:2] != ["", CARRIED]:
            body = ["", CARRIED] + body
        # After the nearest section before it (in the old order) that the new text has; else first.
        before = [h for h, _ in old[:i] if h is None or h in have or h in {x for x, _ in new}]
        at = next(j for j, (h, _) in enumerate(new) if h == before[-1]) + 1 if before else 1
        new.insert(at, (heading, body))
    return "\n".join(line for h, body in new for line in ([h] if h else []) + body).rstrip("\n") + "\n"


def main():
    res = sys.argv[1] if len(sys.argv) > 1 else "results"
    docs = sys.argv[2] if len(sys.argv) > 2 else "docs"
    img_dir = os.path.join(docs, "img")
    os.makedirs(img_dir, exist_ok=True)
    lines = [
        "# Results",
        "",
        "Generated by `make results` (scripts/run_results.sh, then scripts/gen_results.py) from the JSONL files in "
        "`results/`; do not edit by hand. Machine: the project's 2-core development machine, whose CPU "
        "changes between sessions (AMD EPYC or Intel Xeon Sapphire Rapids, both AVX-512; each speed table names "
        "the CPU it was measured on), shared with other work, so speed figures are medians of runs made side by "
        "side. A section keeps the figures of the run that wrote its results file: sections measured before a "
        "kernel change still show the earlier kernels until they are run again.",
        "",
        "**How to read this.** Both models are small and lean on local context: a plain recent window is a strong "
        "baseline on them, and H2O's recent/heavy split and decay matter. Numbers below are what we measured, "
        "including where H2O does not win.",
        "",
        "## Perplexity vs KV budget",
        "",
    ]
    # (file prefix, section heading and introduction, renderer): one section per kind of result file.
    sections = [
        ("ppl", [], lambda name, rows: ppl_section(name, rows, img_dir, lines)),
        ("ablation", ["## What decay, sinks, the recent/heavy split and granularity change", ""],
         lambda name, rows: ablation_section(name, rows, lines)),
        ("tasks", ["## Task accuracy vs budget", "",
                   "Both models are far too small for these tasks: accuracies are near chance (0.5 for copa, piqa, "
                   "winogrande; 0.25 for arc-easy and openbookqa), so these tables show that the harness runs and "
                   "what eviction changes, not model quality. The harness's correctness is shown by its tests "
                   "(tests/unit/eval/tasks_test.cpp).", ""],
         lambda name, rows: tasks_section(name, rows, img_dir, lines)),
        ("agreement", ["## Greedy agreement with the full cache at a 20 % budget", "",
                       "Teacher-forced on the full cache's greedy tokens (scripts/data/agreement_prompts.txt): token "
                       "match = share of steps where the policy's greedy token equals the full cache's; retained "
                       "mass = share of the full cache's attention (per layer and query head) on the positions the "
                       "policy keeps, averaged over steps, layers and heads.", ""],
         lambda name, rows: agreement_section(name, rows, lines)),
        ("passkey", ["## Passkey retrieval", ""], lambda name, rows: passkey_section(name, rows, lines)),
        ("ruler", ["## Long-context retrieval (RULER-style)", "",
                   "`h2okv ruler` (scripts/run_ruler.sh): RULER's synthetic tasks generated from Moby Dick with "
                   "fixed seeds; every policy and protocol sees the same prompts. Query-agnostic: the context is "
                   "prefilled and compressed before the question arrives (a chunk of its own); query-aware: the "
                   "question is in the context's last chunk, so the last eviction is scored with its attention "
                   "(include/h2okv/eval/ruler.h defines both).", ""],
         lambda name, rows: ruler_section(name, rows, img_dir, lines)),
        ("speed", ["## Speed", "",
                   "`h2okv bench` on synthetic SmolLM-135M-shaped GGUFs (random weights, the real shapes; "
                   "scripts/run_speed.sh writes them with `h2okv gguf synth`). On Q4_K, SmolLM's 576-wide rows are "
                   "not whole 256-element blocks, so `gguf synth` writes those matrices as Q8_0 (only ffn_down, 1536 wide, is "
                   "Q4_K): the Q4_K rows below are mostly Q8_0.", ""],
         lambda name, rows: speed_section(name, rows, lines)),
        ("kernels", [], lambda name, rows: kernels_section(name, rows, lines)),
        ("throughput", ["## Throughput at equal KV memory", "",
                        "Many sequences in one forward pass per step (`h2okv batch`, `h2okv bench --sequences`, the "
                        "server), each with its own cache and policy; `scripts/run_throughput.sh` on synthetic "
                        "models (random weights, real shapes).", ""],
         lambda name, rows: throughput_section(name, rows, lines)),
        ("serve", [SERVE_HEADING, ""] + SERVE_INTRO, lambda name, rows: serve_section(name, rows, lines)),
        ("llamacpp", ["## Side by side with llama.cpp", "",
                      "`scripts/llamacpp/compare.sh MODEL --bench --results results` with `LLAMA_CPP_DIR` pointing at a "
                      "llama.cpp build made outside this repository (see docs/PERFORMANCE.md); the same synthetic GGUF, "
                      "token ids and threads for both engines. The synthetic models come from `h2okv gguf synth` "
                      "(tinyllama-1.1b for Q4_K, whose rows are whole Q4_K blocks). This section appears only when "
                      "those files are in results/.", ""],
         lambda name, rows: llamacpp_section(name, rows, lines)),
        ("kvtype", KVTYPE_INTRO, lambda name, rows: kvtype_section(name, rows, lines)),
        ("batched", [], lambda name, rows: batched_section(name, rows, lines)),
        ("arch", ARCH_INTRO, lambda name, rows: arch_section(name, rows, lines)),
        ("xsum", ["## Summarisation (XSUM, ROUGE)", "",
                  "`scripts/run_xsum.sh`: the H2O paper's XSUM task with HELM's 0-shot prompts "
                  "(../shared/data/h2o-xsum, the first prompts whose tokens and 64 answer tokens fit the model's "
                  "trained context), one `h2okv batch` run per configuration over the same prompts, the answer cut "
                  "at HELM's stop string; ROUGE-1/2/L F1 means computed by scripts/xsum.py (rouge_score's "
                  "definitions without stemming). The evaluation models here are far too small to summarise: the "
                  "table shows that the pipeline runs and what eviction changes, and gives a capable model a user "
                  "brings the paper's table.", ""],
         lambda name, rows: xsum_section(name, rows, lines)),
    ]
    for prefix, intro, render in sections:
        paths = sorted(glob.glob(os.path.join(res, f"{prefix}_*.jsonl")))
        if paths:
            lines += intro
        for path in paths:
            render(os.path.basename(path)[len(prefix) + 1:-len(".jsonl")], load(path))
        if paths and lines[-1] != "":  # a section of table rows only (arch) ends its table here
            lines.append("")
    rolling_section(res, img_dir, lines)
    kvquant_section(res, lines)
    calibrate_section(res, lines)
    traces = sorted(glob.glob(os.path.join(res, "*.trace.jsonl")))
    if traces:
        trace_section(traces[0], img_dir, lines)
    out = os.path.join(docs, "RESULTS.md")
    text = "\n".join(lines).rstrip() + "\n"
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            text = carry_forward(text, f.read())
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"gen_results: wrote {os.path.join(docs, 'RESULTS.md')} and {img_dir}/")


if __name__ == "__main__":
    main()
