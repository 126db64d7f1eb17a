#!/usr/bin/env python3
"""Writes a token-id file for `h2okv logits --tokens-file` and llama_logits: the model's BOS, then ids drawn
uniformly (fixed seed) from [3, n_vocab), past <unk>, <s>, </s> of llama vocabularies, so that no control
token steers the run. n_vocab and BOS are read from `h2okv info --json`'s output on stdin.

Usage: h2okv info -m MODEL --json | /usr/bin/python3 random_tokens.py N SEED OUT
"""
import json
import sys

import numpy as np


def main() -> int:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    n, seed, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    meta = {m["key"]: m for m in json.load(sys.stdin)["metadata"]}
    if "tokenizer.ggml.tokens" not in meta:
        sys.exit("random_tokens: the model has no tokenizer.ggml.tokens; cannot tell its vocabulary size")
    n_vocab = int(meta["tokenizer.ggml.tokens"]["length"])
    bos = meta.get("tokenizer.ggml.bos_token_id", {}).get("value")
    if n < 1 or n_vocab <= 3:
        sys.exit(f"random_tokens: need N >= 1 and a vocabulary of more than 3 tokens (N {n}, n_vocab {n_vocab})")
    ids = np.random.default_rng(seed).integers(3, n_vocab, size=n)
    if bos is not None:
        ids[0] = int(bos)
    with open(out, "w") as f:
        f.write(" ".join(str(int(i)) for i in ids) + "\n")
    print(f"random_tokens: wrote {n} ids of [0, {n_vocab}) to {out} (seed {seed}"
          f"{', BOS first' if bos is not None else ''})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
