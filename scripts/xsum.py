#!/usr/bin/env python3
"""XSUM summarisation as the H2O paper runs it (HELM's 0-shot prompts, ../shared/data/h2o-xsum), scored with
ROUGE-1, ROUGE-2 and ROUGE-L computed here (no package needed).

  xsum.py prompts DATA N OUT          the first N prompts of DATA (the H2O repository's xsum_0shot.jsonl) as
          [--fit H2OKV MODEL TOKENS]  `h2okv batch --escape` reads them: one per line, newlines as \\n; with
                                      --fit, the first N whose tokens (BOS included, by `H2OKV tokenize -m
                                      MODEL`) are at most TOKENS, and OUT.rows their rows in DATA
  xsum.py score DATA COMPLETIONS      ROUGE of `h2okv batch --jsonl` output against the reference summaries
          [--rows F] [--label TEXT]   (prompt i against completion i, in input order; --rows: the prompts file's
          [--out F]                   .rows, the DATA rows they came from); prints the means and, with --out,
                                      appends them as one JSON line

ROUGE follows the definitions of Lin (2004) as Google's rouge_score package computes them by default
(use_stemmer=False): text lowercased, every run of characters other than a-z and 0-9 a separator; ROUGE-N
counts n-grams clipped by their count in the reference, ROUGE-L the longest common subsequence of tokens
(summary level = sentence level: one sentence each, as XSUM's summaries are); each reports precision, recall
and their harmonic mean F1, and a corpus score is the mean of the examples' F1. A completion is cut at the
prompt's stop string (HELM's "###") before it is scored, and an empty completion scores 0 (the count of
those is reported as `empty`).
"""
import json
import re
import subprocess
import sys
from collections import Counter

_SEPARATOR = re.compile(r"[^a-z0-9]+")


def tokenize(text):
    """rouge_score's default tokenizer without stemming."""
    return [t for t in _SEPARATOR.split(text.lower()) if t]


def _prf(overlap, n_pred, n_ref):
    p = overlap / n_pred if n_pred else 0.0
    r = overlap / n_ref if n_ref else 0.0
    f = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return p, r, f


def rouge_n(pred, ref, n):
    """(precision, recall, F1) of the n-grams of token lists pred and ref."""
    grams = lambda toks: Counter(tuple(toks[i:i + n]) for i in range(len(toks) - n + 1))
    gp, gr = grams(pred), grams(ref)
    overlap = sum(min(c, gr[g]) for g, c in gp.items())
    return _prf(overlap, sum(gp.values()), sum(gr.values()))


def lcs_length(a, b):
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l(pred, ref):
    return _prf(lcs_length(pred, ref), len(pred), len(ref))


def scores(prediction, reference):
    """{'rouge1': (p, r, f), 'rouge2': ..., 'rougeL': ...} of two texts."""
    p, r = tokenize(prediction), tokenize(reference)
    return {"rouge1": rouge_n(p, r, 1), "rouge2": rouge_n(p, r, 2), "rougeL": rouge_l(p, r)}


def cut_at_stop(text, stops):
    for s in stops:
        i = text.find(s)
        if i >= 0:
            text = text[:i]
    return text


def load_data(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def escape(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def n_tokens(h2okv, model, text):
    ids = subprocess.run([h2okv, "tokenize", "-m", model, "--ids", "-p", text], check=True, capture_output=True,
                         text=True).stdout
    return len(ids.split())


def write_prompts(data_path, n, out_path, fit=None):
    data = load_data(data_path)
    if n < 1 or n > len(data):
        sys.exit(f"xsum.py: N = {n}, expected 1..{len(data)} (the prompts in {data_path})")
    rows = []
    for i, row in enumerate(data):
        if len(rows) == n:
            break
        if fit is None or n_tokens(fit[0], fit[1], row["article"]) <= fit[2]:
            rows.append(i)
    if len(rows) < n:
        sys.exit(f"xsum.py: only {len(rows)} of the {len(data)} prompts fit {fit[2]} tokens; asked for {n}")
    with open(out_path, "w", encoding="utf-8") as f:
        for i in rows:
            f.write(escape(data[i]["article"]) + "\n")
    with open(out_path + ".rows", "w", encoding="utf-8") as f:
        f.write(" ".join(map(str, rows)) + "\n")


def score_file(data_path, completions_path, rows=None):
    data = load_data(data_path)
    if rows is not None:
        data = [data[i] for i in rows]
    with open(completions_path, encoding="utf-8") as f:
        done = [json.loads(line) for line in f if line.strip()]
    if len(done) > len(data):
        sys.exit(f"xsum.py: {len(done)} completions but {len(data)} prompts in {data_path}")
    per = []
    empty = 0
    for row, c in zip(data, done):
        text = cut_at_stop(c["completion"], row.get("stop", ["###"]))
        empty += not tokenize(text)
        per.append(scores(text, row["summary_gt"]))
    mean = {k: sum(s[k][2] for s in per) / len(per) for k in ("rouge1", "rouge2", "rougeL")} if per else {}
    return {"examples": len(per), "empty": empty, **mean}


def main(argv):
    if len(argv) in (4, 8) and argv[0] == "prompts":
        fit = None
        if len(argv) == 8:
            if argv[4] != "--fit":
                sys.exit(f"xsum.py prompts: unknown option '{argv[4]}'; expected --fit H2OKV MODEL TOKENS")
            fit = (argv[5], argv[6], int(argv[7]))
        write_prompts(argv[1], int(argv[2]), argv[3], fit)
        return 0
    if len(argv) >= 3 and argv[0] == "score":
        label, out, rows = "", None, None
        rest = argv[3:]
        while rest:
            if rest[0] == "--label" and len(rest) > 1:
                label, rest = rest[1], rest[2:]
            elif rest[0] == "--out" and len(rest) > 1:
                out, rest = rest[1], rest[2:]
            elif rest[0] == "--rows" and len(rest) > 1:
                with open(rest[1], encoding="utf-8") as f:
                    rows = [int(t) for t in f.read().split()]
                rest = rest[2:]
            else:
                sys.exit(f"xsum.py score: unknown option '{rest[0]}'; expected --rows FILE, --label TEXT or --out FILE")
        s = score_file(argv[1], argv[2], rows)
        if label:
            s = {"label": label, **s}
        print(json.dumps(s))
        if out:
            with open(out, "a", encoding="utf-8") as f:
                f.write(json.dumps(s) + "\n")
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
