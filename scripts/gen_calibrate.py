"""docs/RESULTS.md's "Calibrated configurations" section from results/calibrate_ppl.jsonl
(scripts/run_calibrate.sh): per model, calibration text and held-out text, the perplexity of the configuration
`h2okv calibrate` chose on the calibration text, against window, streaming, h2o and h2o with decay 0.98 at the
same budgets, and whether it is at most the best of them."""
import json
import os

from plot_eval import load  # noqa: E402

HEADING = "## Calibrated configurations (`h2okv calibrate`, held-out text)"
INTRO = [
    "`scripts/run_calibrate.sh`: `h2okv calibrate` measures attention on a calibration text (mass by distance "
    "per layer, positions to 90 % of a row's mass per head), runs the baselines (window, streaming, h2o's "
    "defaults, h2o with decay 0.98) and a coordinate search over h2o configurations (per-layer recent shares, "
    "decay, 4 sinks, per-head budget shares as real per-head capacities; docs/EVICTION_CONTRACT.md clause 11), "
    "and keeps the simplest whose perplexity on that text is within one standard error (over its runs) of the "
    "lowest. The table evaluates it on a **different** text next to the baselines at the same budget; both "
    "sides pool many runs of the model's context (`--segments`). ✓: calibrated ≤ the best baseline; runs ≤ best: "
    "the held-out runs on which the calibrated configuration's mean NLL is at most the best baseline's (a "
    "configuration can win most runs and still lose the pooled perplexity to a few runs it loses by much). "
    "The TinyStories halves alternate blocks of 40 paragraphs (about four runs each) of the file, so both hold "
    "its stretches of doubly encoded UTF-8. The 5M model is calibrated on 64 runs of the first half of "
    "WikiText-2 test and evaluated on its second half (the same kind of text) and on Moby Dick's second half "
    "(another kind), and calibrated on 64 runs of Moby Dick's first half and evaluated on its second half.",
    "",
]
BASELINES = ["window", "streaming", "h2o", "h2o decay 0.98"]


def baseline_label(r):
    if r["policy_name"] == "h2o" and "decay=0.98" in r["policy"]:
        return "h2o decay 0.98"
    return r["policy_name"]


def describe(cfg):
    """The chosen configuration in words: its policy, and for h2o its recent shares, decay, sinks, shares."""
    if cfg.get("policy", "h2o") != "h2o":
        return f"{cfg['policy']} (its defaults)"
    recents = cfg.get("recents", [])
    words = [("recent share " + "/".join(f"{x:.3g}" for x in recents)) if recents else "h2o's recent",
             f"decay {cfg.get('decays', [1.0])[0]:g}"]
    if cfg.get("sinks"):
        words.append(f"{cfg['sinks']} sinks")
    if cfg.get("shares"):
        words.append("per-head shares")
    return "h2o: " + ", ".join(words)


def calibrate_section(res, lines):
    path = os.path.join(res, "calibrate_ppl.jsonl")
    if not os.path.exists(path):
        return
    rows = load(path)
    lines += [HEADING, ""] + INTRO
    groups = {}
    for r in rows:
        key = (os.path.basename(r["model"]), os.path.basename(r["text"]), r["n_tokens"], r.get("segments", 1))
        groups.setdefault(key, []).append(r)
    for (model, text, n, runs), rs in groups.items():
        full = next((r for r in rs if r["policy_name"] == "full"), None)
        # The calibrated rows by the text their configuration was chosen on: one table each.
        by_source = {}
        for r in rs:
            if r.get("kv_config"):
                cfg = {}
                if os.path.exists(r["kv_config"]):
                    with open(r["kv_config"], encoding="utf-8") as f:
                        cfg = json.load(f)
                by_source.setdefault(os.path.basename(cfg.get("text", "?")), []).append((r, cfg))
        for source, cals in by_source.items():
            table(lines, model, text, n, runs, full, source, cals, rs)


def table(lines, model, text, n, runs, full, source, cals, rs):
    lines.append(f"### {model}, calibrated on {source}, evaluated on {text} ({runs} runs of {n // runs} tokens, "
                 f"{n} in all)\n")
    if full:
        lines.append(f"Full cache: **{full['perplexity']:.4f}**.\n")
    lines.append("| budget | calibrated | configuration | " + " | ".join(BASELINES) + " | ≤ best | runs ≤ best |")
    lines.append("|---|---|---|" + "---|" * len(BASELINES) + "---|---|")
    wins = shown = 0
    for cal, cfg in sorted(cals, key=lambda c: float(c[0]["budget_spec"]), reverse=True):
        b = cal["budget_spec"]
        base = {baseline_label(r): r for r in rs
                if not r.get("kv_config") and r["budget_spec"] == b and r["policy_name"] != "full"}
        cells = [f"{base[k]['perplexity']:.4f}" if k in base else "" for k in BASELINES]
        if not base:
            continue
        best_row = min(base.values(), key=lambda r: r["perplexity"])
        best = best_row["perplexity"]
        ok = cal["perplexity"] <= best
        wins += ok
        shown += 1
        # The runs on which the calibrated configuration's NLL is at most the best baseline's.
        runs_won = ""
        if "run_nll" in cal and "run_nll" in best_row:
            won = sum(c <= x for c, x in zip(cal["run_nll"], best_row["run_nll"]))
            runs_won = f"{won} of {len(cal['run_nll'])}"
        verdict = "✓" if ok else f"✗ (+{100 * (cal['perplexity'] / best - 1):.2f} %)"
        lines.append(f"| {b} | **{cal['perplexity']:.4f}** | {describe(cfg) if cfg else '?'} | " + " | ".join(cells) +
                     f" | {verdict} | {runs_won} |")
    lines.append("")
    lines.append(f"Calibrated ≤ the best baseline at {wins} of {shown} budgets.\n")
