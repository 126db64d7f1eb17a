#!/usr/bin/env python3
"""Compares two engines' logits for the same tokens: two .npy arrays float32 [n_pos, n_vocab] as written by
`h2okv logits` and scripts/llamacpp/llama_logits (row i: the logits after tokens 0..i).

Prints the largest and mean |difference| of the logits, the mean and largest over positions of
KL(P_ref || P_cand) of the softmax distributions (in nats), and, for information, how often the two argmaxes
agree next to the reference's mean top-1 margin (random-weight models have tiny margins, so a top-1 flip
there says little; the KL divergence is the measure).

Usage: /usr/bin/python3 scripts/compare_logits.py REF.npy CAND.npy [--ref-name llama.cpp] [--cand-name h2okv]
           [--json OUT.json] [--max-kl X] [--max-abs-diff Y]
With --max-kl / --max-abs-diff it exits 1 when the mean KL / max |diff| exceeds the bound.
"""
import argparse
import json
import sys

import numpy as np


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def compare(ref: np.ndarray, cand: np.ndarray) -> dict:
    diff = np.abs(ref.astype(np.float64) - cand.astype(np.float64))
    worst = np.unravel_index(int(np.argmax(diff)), diff.shape)
    lp_ref, lp_cand = log_softmax(ref), log_softmax(cand)
    kl = (np.exp(lp_ref) * (lp_ref - lp_cand)).sum(axis=1)
    top2 = np.sort(ref, axis=1)[:, -2:]
    # Mean KL over position ranges 0, 1-3, 4-15, 16-63, ...: how the disagreement grows with the context.
    by_pos, lo = [], 0
    while lo < kl.size:
        hi = min(kl.size, max(1, 4 * lo))
        by_pos.append({"first": lo, "last": hi - 1, "kl_mean": float(kl[lo:hi].mean())})
        lo = hi
    return {
        "n_pos": int(ref.shape[0]),
        "n_vocab": int(ref.shape[1]),
        "max_abs_diff": float(diff.max()),
        "max_abs_diff_at": [int(worst[0]), int(worst[1])],
        "mean_abs_diff": float(diff.mean()),
        "ref_logit_std": float(ref.std()),
        "kl_mean": float(kl.mean()),
        "kl_max": float(kl.max()),
        "kl_max_at": int(np.argmax(kl)),
        "kl_mean_by_position": by_pos,
        "top1_agreement": float((ref.argmax(axis=1) == cand.argmax(axis=1)).mean()),
        "ref_top1_margin_mean": float((top2[:, 1] - top2[:, 0]).mean()),
    }


def load(path: str) -> np.ndarray:
    try:
        a = np.load(path)
    except (OSError, ValueError) as e:
        sys.exit(f"compare_logits: cannot read '{path}' as .npy: {e}")
    if a.ndim != 2 or a.dtype != np.float32:
        sys.exit(f"compare_logits: '{path}' is {a.dtype} {list(a.shape)}; expected float32 [n_pos, n_vocab]")
    if not np.isfinite(a).all():
        sys.exit(f"compare_logits: '{path}' holds {int((~np.isfinite(a)).sum())} non-finite logits")
    return a


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ref", help="reference logits .npy (the P of KL(P || Q), e.g. llama.cpp's)")
    ap.add_argument("cand", help="candidate logits .npy (the Q, e.g. h2okv's)")
    ap.add_argument("--ref-name", default="llama.cpp")
    ap.add_argument("--cand-name", default="h2okv")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    ap.add_argument("--max-kl", type=float, help="exit 1 when the mean KL divergence exceeds this")
    ap.add_argument("--max-abs-diff", type=float, help="exit 1 when the max |logit difference| exceeds this")
    args = ap.parse_args()

    ref, cand = load(args.ref), load(args.cand)
    if ref.shape != cand.shape:
        sys.exit(f"compare_logits: shapes differ: {args.ref} is {list(ref.shape)}, "
                 f"{args.cand} is {list(cand.shape)} (same tokens, same model?)")
    r = compare(ref, cand)
    r.update(ref=args.ref, cand=args.cand, ref_name=args.ref_name, cand_name=args.cand_name)

    print(f"{r['n_pos']} positions x {r['n_vocab']} logits; P = {args.ref_name}, Q = {args.cand_name}")
    print(f"max |logit diff|      {r['max_abs_diff']:.6g}  (position {r['max_abs_diff_at'][0]}, "
          f"token {r['max_abs_diff_at'][1]}; reference logits' std {r['ref_logit_std']:.4g})")
    print(f"mean |logit diff|     {r['mean_abs_diff']:.6g}")
    print(f"KL(P || Q) mean       {r['kl_mean']:.6g} nats")
    print(f"KL(P || Q) max        {r['kl_max']:.6g} nats  (position {r['kl_max_at']})")
    print("KL mean by position   " + "  ".join(
        f"{b['first']}" + (f"-{b['last']}" if b["last"] > b["first"] else "") + f": {b['kl_mean']:.3g}"
        for b in r["kl_mean_by_position"]))
    print(f"top-1 agreement       {100.0 * r['top1_agreement']:.1f}%  "
          f"(information only: P's mean top-1 margin is {r['ref_top1_margin_mean']:.4g})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)
            f.write("\n")

    failed = []
    if args.max_kl is not None and r["kl_mean"] > args.max_kl:
        failed.append(f"mean KL {r['kl_mean']:.6g} > --max-kl {args.max_kl}")
    if args.max_abs_diff is not None and r["max_abs_diff"] > args.max_abs_diff:
        failed.append(f"max |diff| {r['max_abs_diff']:.6g} > --max-abs-diff {args.max_abs_diff}")
    for f in failed:
        print(f"compare_logits: FAIL: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
