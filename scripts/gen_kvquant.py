"""docs/RESULTS.md's "Eviction x KV quantization" section from results/kvquant_*.jsonl (scripts/run_kvquant.sh):
per model, perplexity and greedy agreement with the full f16 cache for every (policy, budget) and KV type, with
the KV bytes of a sequence and the memory ratio against the full f16 cache, the types the model cannot store
(with h2okv's reason), and the smallest cache that keeps a given agreement.

Usage: gen_kvquant.py RESULTS_DIR   (prints the section; gen_results.py includes it in docs/RESULTS.md)"""
import glob
import os
import sys

from plot_eval import load  # noqa: E402

HEADING = "## Eviction × KV quantization"
INTRO = [
    "`scripts/run_kvquant.sh`: perplexity (`h2okv perplexity`, token by token) and greedy agreement with the full "
    "**f16** cache (`h2okv agreement --reference-kv-type f16`, 64 teacher-forced steps per prompt of "
    "scripts/data/agreement_prompts.txt) for each KV type and budget. A budget counts tokens whatever the type, "
    "so a row keeps the same positions in every type (the full cache is the 100 % row); `bytes` is the KV cache of "
    "one sequence (K and V rows at the type's exact size: 2 bytes an element for f16, 34 per 32 for q8_0, 18 for "
    "q4_0, 20 for q4_1, ggml's blocks as llama.cpp's `-ctk/-ctv`) and `× f16` the full f16 cache's bytes divided "
    "by it (the memory a user saves). The block types need head_dim a multiple of 32; where a model's is not, "
    "the types h2okv refuses are listed under its table with its message.",
    "",
]
TYPE_ORDER = ["f32", "f16", "q8_0", "q4_0", "q4_1"]
MATCH_LEVELS = [0.95, 0.9, 0.8]


def label(name, spec):
    return name + (" decay 0.98" if "decay=0.98" in spec else "")


def model_table(name, ppl_rows, agr_rows, refused, lines):
    ppl = {}
    for r in ppl_rows:
        key = (label(r["policy_name"], r["policy"]), r.get("budget_spec", ""))
        ppl[(key, r["kv_type"])] = r
    agr = {}
    for r in agr_rows:
        if r.get("record") != "summary":
            continue
        spec = r["policy_spec"]
        key = (label(spec.split(":")[0], spec), r.get("budget_spec", ""))
        agr[(key, r["kv_type"])] = r
    types = [t for t in TYPE_ORDER if any(k[1] == t for k in ppl)]
    full_f16 = ppl.get((("full", ""), "f16"))
    keys = []
    for (k, _t) in ppl:
        if k not in keys:
            keys.append(k)
    keys.sort(key=lambda k: (k[0] != "full", -float(k[1] or 1), k[0]))
    lines.append(f"### {name}\n")
    cpu_free = "| policy | budget | " + " | ".join(f"{t} ppl | {t} match | {t} bytes | {t} × f16" for t in types) + " |"
    lines.append(cpu_free)
    lines.append("|---|---|" + "---|" * (4 * len(types)))
    for k in keys:
        cells = [k[0], k[1] or "1.0 (100 %)"]
        for t in types:
            p = ppl.get((k, t))
            a = agr.get((k, t))
            if p is None:
                cells += ["-"] * 4
                continue
            ratio = full_f16["kv_bytes"] / p["kv_bytes"] if full_f16 and p["kv_bytes"] else 0
            cells += [f"{p['perplexity']:.3f}", f"{a['match_rate']:.3f}" if a else "-", f"{p['kv_bytes']}",
                      f"{ratio:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for r in refused:
        lines.append(f"- {r['kv_type']}: not measured on this model; h2okv refuses it: \"{r['refused'].strip()}\"")
    if refused:
        lines.append("")
    # The cheapest (policy, budget, type) at each agreement level: what a user sizing a cache picks.
    cells = [(p["kv_bytes"], k, t, agr[(k, t)]["match_rate"], p["perplexity"])
             for (k, t), p in ppl.items() if (k, t) in agr and p["kv_bytes"]]
    picks = []
    for level in MATCH_LEVELS:
        ok = sorted((c for c in cells if c[3] >= level), key=lambda c: (c[0], -c[3], c[4]))  # ties: the better
        if ok:
            b, k, t, match, pp = ok[0]
            ratio = full_f16["kv_bytes"] / b if full_f16 else 0
            budget = k[1] or "1.0"
            picks.append(f"agreement ≥ {level:.2f}: {k[0]} {budget} in {t}, {b} bytes ({ratio:.1f}× less than the "
                         f"full f16 cache; agreement {match:.3f}, perplexity {pp:.3f})")
    if picks:
        lines.append("Smallest cache at each agreement with the full f16 cache: " + "; ".join(picks) + ".")
        lines.append("")


def kvquant_section(res, lines):
    ppl_paths = sorted(glob.glob(os.path.join(res, "kvquant_ppl_*.jsonl")))
    if not ppl_paths:
        return
    lines += [HEADING, ""] + INTRO
    for path in ppl_paths:
        name = os.path.basename(path)[len("kvquant_ppl_"):-len(".jsonl")]
        agr_path = os.path.join(res, f"kvquant_agreement_{name}.jsonl")
        refused_path = os.path.join(res, f"kvquant_refused_{name}.jsonl")
        refused = load(refused_path) if os.path.exists(refused_path) else []
        model_table(name, load(path), load(agr_path) if os.path.exists(agr_path) else [], refused, lines)


if __name__ == "__main__":
    out = []
    kvquant_section(sys.argv[1], out)
    print("\n".join(out))
