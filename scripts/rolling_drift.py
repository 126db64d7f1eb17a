#!/usr/bin/env python3
"""What re-rotating stored keys in place would cost in accuracy (docs/EVICTION_CONTRACT.md, clause 8).

A key stored rotated at rolling position a must, after s evictions of older tokens, be the key rotated at
a - s. Re-rotating the stored row in place by -1 at every such shift rounds it to the KV type each time;
turning the stored row by -s when it is attended (what h2okv does) rounds once. This measures both against
the exact rotation for random keys (unit normal, the model's head_dim and RoPE base) and writes one JSON
line per (KV type, shifts): the median relative L2 error of each way.

usage: rolling_drift.py OUT.jsonl [--head-dim 64] [--base 10000]
"""
import argparse
import json
import sys

import numpy as np


def rotation(head_dim, base, delta):
    inv = base ** (-2.0 * np.arange(head_dim // 2) / head_dim)
    theta = delta * inv
    return np.cos(theta), np.sin(theta)


def rotate(x, cs):
    c, s = cs
    a, b = x[..., 0::2].copy(), x[..., 1::2].copy()
    y = x.copy()
    y[..., 0::2] = a * c - b * s
    y[..., 1::2] = a * s + b * c
    return y


def round_to(x, kv_type):
    if kv_type == "f16":
        return x.astype(np.float16).astype(np.float64)
    if kv_type == "q8_0":
        b = x.reshape(*x.shape[:-1], -1, 32)
        d = np.abs(b).max(axis=-1, keepdims=True) / 127.0
        d = d.astype(np.float16).astype(np.float64)
        q = np.rint(np.divide(b, d, out=np.zeros_like(b), where=d > 0))
        return (q * d).reshape(x.shape)
    return x.astype(np.float32).astype(np.float64)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--base", type=float, default=10000.0)
    ap.add_argument("--keys", type=int, default=256)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(1)
    keys = rng.standard_normal((args.keys, args.head_dim))
    start = 200  # the admission position
    step = rotation(args.head_dim, args.base, -1.0)
    with open(args.out, "w") as f:
        for kv_type in ("f32", "f16", "q8_0"):
            stored = round_to(rotate(keys, rotation(args.head_dim, args.base, start)), kv_type)
            in_place = stored.copy()
            # q8_0 re-rounded in place diverges (the scale grows past f16) before 10000 shifts.
            last = 1000 if kv_type == "q8_0" else 10000
            for shifts in range(1, last + 1):
                in_place = round_to(rotate(in_place, step), kv_type)
                if shifts not in (1, 10, 100, 1000, 10000):
                    continue
                # Positions are relative: the exact key at start - shifts equals turning by -shifts.
                exact = rotate(keys, rotation(args.head_dim, args.base, start - shifts))
                turned = rotate(stored, rotation(args.head_dim, args.base, -shifts))
                norm = np.linalg.norm(exact, axis=-1)
                rec = {"kv_type": kv_type, "head_dim": args.head_dim, "shifts": shifts,
                       "in_place_error": float(np.median(np.linalg.norm(in_place - exact, axis=-1) / norm)),
                       "turned_error": float(np.median(np.linalg.norm(turned - exact, axis=-1) / norm))}
                f.write(json.dumps(rec) + "\n")
                print(rec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
