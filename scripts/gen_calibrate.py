"""docs/RESULTS.md's "Calibrated configurations" section from results/calibrate_ppl.jsonl
(scripts/run_calibrate.sh): per model and held-out text, the perplexity of the configuration `h2okv calibrate`
chose on a different text, against window, streaming, h2o and h2o with decay 0.98 at the same budgets, and
whether it is at most the best of them."""
import json
import os

from plot_eval import load  # noqa: E402

HEADING = "## Calibrated configurations (`h2okv calibrate`, held-out text)"
INTRO = [
    "`scripts/run_calibrate.sh`: `h2okv calibrate` measures attention on a calibration text (mass by distance "
    "per layer, positions to 90 % of a row's mass per head), derives candidate h2o configurations (per-layer "
    "recent shares, decay, per-head budget shares as real per-head capacities; docs/EVICTION_CONTRACT.md "
    "clause 11) and keeps the one with the lowest perplexity on that text. The table evaluates it on a "
    "**different** text (streaming perplexity, token by token) next to the default baselines at the same "
    "budget. ✓: calibrated ≤ the best baseline.",
    "",
]
BASELINES = ["window", "streaming", "h2o", "h2o decay 0.98"]


def baseline_label(r):
    if r["policy_name"] == "h2o" and "decay=0.98" in r["policy"]:
        return "h2o decay 0.98"
    return r["policy_name"]


def calibrate_section(res, lines):
    path = os.path.join(res, "calibrate_ppl.jsonl")
    if not os.path.exists(path):
        return
    rows = load(path)
    lines += [HEADING, ""] + INTRO
    groups = {}
    for r in rows:
        groups.setdefault((os.path.basename(r["model"]), os.path.basename(r["text"]), r["n_tokens"]), []).append(r)
    for (model, text, n), rs in groups.items():
        full = next((r for r in rs if r["policy_name"] == "full"), None)
        lines.append(f"### {model}, evaluated on {text} ({n} tokens)\n")
        if full:
            lines.append(f"Full cache: **{full['perplexity']:.4f}**.\n")
        lines.append("| budget | calibrated | chosen on: configuration | " + " | ".join(BASELINES) + " | ≤ best |")
        lines.append("|---|---|---|" + "---|" * len(BASELINES) + "---|")
        budgets = sorted({r["budget_spec"] for r in rs if r["policy_name"] != "full"}, key=float, reverse=True)
        wins = 0
        for b in budgets:
            cal = next((r for r in rs if r.get("kv_config") and r["budget_spec"] == b), None)
            base = {baseline_label(r): r for r in rs
                    if not r.get("kv_config") and r["budget_spec"] == b and r["policy_name"] != "full"}
            cells = [f"{base[k]['perplexity']:.4f}" if k in base else "" for k in BASELINES]
            best = min((base[k]["perplexity"] for k in BASELINES if k in base), default=None)
            if cal is None or best is None:
                continue
            chosen = "?"
            if os.path.exists(cal["kv_config"]):
                with open(cal["kv_config"], encoding="utf-8") as f:
                    cfg = json.load(f)
                recents = cfg.get("recents", [])
                shown = ("recent share " + "/".join(f"{x:.2f}" for x in recents)) if recents else "h2o's recent"
                decay = cfg.get("decays", [1.0])[0]
                chosen = (f"{os.path.basename(cfg.get('text', '?'))}: {shown}, decay {decay:g}"
                          + (", per-head shares" if cfg.get("shares") else ""))
            ok = cal["perplexity"] <= best
            wins += ok
            lines.append(f"| {b} | **{cal['perplexity']:.4f}** | {chosen} | " + " | ".join(cells) +
                         f" | {'✓' if ok else '✗ (+' + format(100 * (cal['perplexity'] / best - 1), '.2f') + ' %)'} |")
        lines.append("")
        lines.append(f"Calibrated ≤ the best baseline at {wins} of {len(budgets)} budgets.\n")
