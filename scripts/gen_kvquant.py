"""docs/RESULTS.md's "Eviction x KV quantization" section from results/kvquant_*.jsonl (scripts/run_kvquant.sh):
per model, perplexity and greedy agreement with the full f16 cache for every (policy, budget) and KV type, with
the KV bytes of a sequence and the memory ratio against the full f16 cache."""
import glob
import os

from plot_eval import load  # noqa: E402

HEADING = "## Eviction × KV quantization"
INTRO = [
    "`scripts/run_kvquant.sh`: perplexity (`h2okv perplexity`, token by token) and greedy agreement with the full "
    "**f16** cache (`h2okv agreement --reference-kv-type f16`, 64 teacher-forced steps per prompt of "
    "scripts/data/agreement_prompts.txt) for each KV type and budget. A budget counts tokens whatever the type, "
    "so a row keeps the same positions in every type; `bytes` is the KV cache of one sequence and `× f16` the full "
    "f16 cache's bytes divided by it (the memory a user saves). q8_0 and q4_0 need head_dim a multiple of 32: the "
    "bundled model (head_dim 8) has f32 and f16 only.",
    "",
]
TYPE_ORDER = ["f32", "f16", "q8_0", "q4_0"]


def label(name, spec):
    return name + (" decay 0.98" if "decay=0.98" in spec else "")


def model_table(name, ppl_rows, agr_rows, lines):
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
        cells = [k[0], k[1] or "-"]
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


def kvquant_section(res, lines):
    ppl_paths = sorted(glob.glob(os.path.join(res, "kvquant_ppl_*.jsonl")))
    if not ppl_paths:
        return
    lines += [HEADING, ""] + INTRO
    for path in ppl_paths:
        name = os.path.basename(path)[len("kvquant_ppl_"):-len(".jsonl")]
        agr_path = os.path.join(res, f"kvquant_agreement_{name}.jsonl")
        model_table(name, load(path), load(agr_path) if os.path.exists(agr_path) else [], lines)
