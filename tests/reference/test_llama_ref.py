#!/usr/bin/python3
"""Self-tests of the numpy reference (llama_ref.py): the GGUF parser on hand-built files of every supported
type, the SentencePiece encoder on llama.cpp's test vectors, the published figures of the shared models, and
the eviction bookkeeping against a second, literal implementation of SPEC.md's contract.

Run: /usr/bin/python3 tests/reference/test_llama_ref.py [-v]   (needs ../shared next to the repository;
H2OKV_SHARED_DIR overrides its location). Set H2OKV_SLOW=1 to include the 5M model's 1024-token perplexity.
"""

import math
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import llama_ref as R  # noqa: E402

SHARED = pathlib.Path(os.environ.get("H2OKV_SHARED_DIR", HERE.parents[2] / "shared"))
STORIES = SHARED / "models" / "stories260K" / "stories260K.gguf"
EVAL5M = SHARED / "models" / "h2o-eval-5M" / "h2o-eval-llama-5M.gguf"
ONCE_UPON = [1, 403, 407, 261, 378]  # BOS + "Once upon a time" in the stories260K vocabulary


def need(path):
    return unittest.skipUnless(path.exists(), f"{path} is absent")


# ------------------------------------------------------------------------------------ a small GGUF writer

def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _kv(key, value):
    if isinstance(value, bool):
        return _str(key) + struct.pack("<I?", 7, value)
    if isinstance(value, int):
        return _str(key) + struct.pack("<II", 4, value)
    if isinstance(value, float):
        return _str(key) + struct.pack("<If", 6, value)
    if isinstance(value, str):
        return _str(key) + struct.pack("<I", 8) + _str(value)
    if isinstance(value, list) and value and isinstance(value[0], str):
        return _str(key) + struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_str(v) for v in value)
    if isinstance(value, list) and value and isinstance(value[0], float):
        return _str(key) + struct.pack("<IIQ", 9, 6, len(value)) + struct.pack(f"<{len(value)}f", *value)
    if isinstance(value, list):
        return _str(key) + struct.pack("<IIQ", 9, 5, len(value)) + struct.pack(f"<{len(value)}i", *value)
    raise TypeError(value)


def encode_tensor(values, ttype):
    """values: float array of any shape (last axis = GGUF dims[0]); returns the bytes for ttype."""
    v = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    if ttype == R.T_F32:
        return v.tobytes()
    if ttype == R.T_F16:
        return v.astype("<f2").tobytes()
    if ttype == R.T_BF16:
        u = v.view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
    if ttype == R.T_Q8_0:
        b = v.reshape(-1, 32)
        d = (np.abs(b).max(axis=1) / 127.0).astype(np.float16)
        df = d.astype(np.float32)
        q = np.where(df[:, None] == 0, 0, np.round(b / np.where(df == 0, 1, df)[:, None])).clip(-127, 127)
        out = np.zeros(len(b), dtype=R.Q8_0_BLOCK)
        out["d"] = d
        out["qs"] = q.astype(np.int8)
        return out.tobytes()
    raise ValueError(ttype)


def decoded(values, ttype):
    """What encode_tensor's bytes decode to, computed independently of the parser."""
    v = np.asarray(values, dtype=np.float32)
    if ttype == R.T_F32:
        return v.astype(np.float64)
    if ttype == R.T_F16:
        return v.astype(np.float16).astype(np.float64)
    if ttype == R.T_BF16:
        u = v.view(np.uint32).astype(np.uint64)
        r = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32)
        return r.view(np.float32).astype(np.float64)
    b = v.reshape(-1, 32)
    d = (np.abs(b).max(axis=1) / 127.0).astype(np.float16).astype(np.float64)
    q = np.where(d[:, None] == 0, 0, np.round(b / np.where(d == 0, 1, d)[:, None])).clip(-127, 127)
    return (d[:, None] * q).reshape(v.shape)


def write_gguf(path, metadata, tensors, version=3, alignment=32):
    """tensors: list of (name, numpy array [rows][cols] or [n], ttype)."""
    md = dict(metadata)
    if alignment != 32:
        md["general.alignment"] = alignment
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(md))
    head += b"".join(_kv(k, v) for k, v in md.items())
    blobs, infos, offset = [], b"", 0
    for name, arr, ttype in tensors:
        dims = list(reversed(arr.shape))
        infos += _str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", ttype, offset)
        blob = encode_tensor(arr, ttype)
        pad = (-len(blob)) % alignment
        blobs.append(blob + b"\0" * pad)
        offset += len(blob) + pad
    body = head + infos
    body += b"\0" * ((-len(body)) % alignment)
    with open(path, "wb") as f:
        f.write(body + b"".join(blobs))


def model_as(src_path, dst_path, ttype):
    """Rewrites a model with every 2-D weight stored as ttype (1-D norms stay F32)."""
    g = R.Gguf(str(src_path))
    tensors = []
    for name in g.tensors:
        a = g.tensor(name)
        tensors.append((name, a, ttype if a.ndim == 2 else R.T_F32))
    write_gguf(dst_path, g.metadata, tensors)


# ----------------------------------------------------------------------- a literal version of the contract

def literal_run(model, tokens, policy, budget, recent, sinks, decay, granularity, chunk):
    """SPEC.md's contract written out position by position with dicts and loops: no masks, no vectorised
    score updates. Returns (logits [n][vocab], kept sets after every chunk as the trace's lists)."""
    m = model
    units = {"head": m.n_layer * m.n_kv, "layer": m.n_layer, "model": 1}[granularity]

    def unit(layer, kv_head):
        return {"head": layer * m.n_kv + kv_head, "layer": layer, "model": 0}[granularity]

    scores = [dict() for _ in range(units)]  # position -> score, the kept set is the keys
    K = [dict() for _ in range(m.n_layer)]  # position -> [n_kv][hd]
    V = [dict() for _ in range(m.n_layer)]
    all_logits, trace = [], []
    for c0 in range(0, len(tokens), chunk):
        chunk_pos = list(range(c0, min(c0 + chunk, len(tokens))))
        kept_before = [sorted(s) for s in scores]
        rows = {}  # (t, layer, head) -> {position: weight}
        for t in chunk_pos:
            x = m.tok_embd[tokens[t]]
            for li, w in enumerate(m.layers):
                h = m.rmsnorm(x, w["attn_norm"])
                q = m.rope((w["attn_q"] @ h).reshape(1, m.n_head, m.head_dim), np.array([t]))[0]
                k = m.rope((w["attn_k"] @ h).reshape(1, m.n_kv, m.head_dim), np.array([t]))[0]
                K[li][t] = k
                V[li][t] = (w["attn_v"] @ h).reshape(m.n_kv, m.head_dim)
                o = np.zeros(m.n_head * m.head_dim)
                for hd in range(m.n_head):
                    kv = hd // (m.n_head // m.n_kv)
                    attended = kept_before[unit(li, kv)] + [p for p in chunk_pos if p <= t]
                    s = np.array([q[hd] @ K[li][p][kv] for p in attended]) / math.sqrt(m.head_dim)
                    e = np.exp(s - s.max())
                    wts = e / e.sum()
                    rows[(t, li, hd)] = dict(zip(attended, wts))
                    o[hd * m.head_dim:(hd + 1) * m.head_dim] = sum(wj * V[li][p][kv] for wj, p in zip(wts, attended))
                x = x + w["attn_output"] @ o
                h = m.rmsnorm(x, w["ffn_norm"])
                g = w["ffn_gate"] @ h
                x = x + w["ffn_down"] @ (g / (1 + np.exp(-g)) * (w["ffn_up"] @ h))
            all_logits.append(m.output @ m.rmsnorm(x, m.output_norm))
        for t in chunk_pos:
            for u in range(units):
                heads = [(li, hd) for li in range(m.n_layer) for hd in range(m.n_head)
                         if unit(li, hd // (m.n_head // m.n_kv)) == u]
                inc = {}
                for li, hd in heads:  # ascending (layer, head)
                    for p, wj in rows[(t, li, hd)].items():
                        inc[p] = inc.get(p, 0.0) + float(wj)
                if decay < 1.0:
                    for p in scores[u]:
                        scores[u][p] *= decay
                for p, v in inc.items():
                    scores[u][p] = scores[u].get(p, 0.0) + v
        if policy != "full":
            for u in range(units):
                while len(scores[u]) > budget:
                    held = sorted(scores[u])
                    young = set(held[-recent:]) if recent > 0 and policy != "streaming" else set()
                    evictable = [p for p in held if p >= sinks and p not in young]
                    if policy in ("window", "streaming"):
                        victim = evictable[0]
                    else:
                        victim = min(evictable, key=lambda p: (scores[u][p], p))
                    del scores[u][victim]
        trace.append([sorted(scores[unit(li, kv)]) for li in range(m.n_layer) for kv in range(m.n_kv)])
    return np.array(all_logits), trace


def vector_run(model, tokens, policy, budget, recent, sinks, decay, granularity, chunk):
    run = R.Run(model, len(tokens), policy, budget, recent, sinks, decay, granularity)
    logits, trace = [], []
    for c0 in range(0, len(tokens), chunk):
        logits.append(run.step(tokens[c0:c0 + chunk]))
        trace.append(run.kept_lists())
    return np.concatenate(logits), trace, run


# ------------------------------------------------------------------------------------------------- tests

class GgufParser(unittest.TestCase):
    def test_every_type_versions_and_alignment(self):
        rng = np.random.default_rng(1)
        with tempfile.TemporaryDirectory() as d:
            for version in (2, 3):
                for alignment in (32, 64, 8):
                    arrays = {
                        "a.f32": (rng.normal(size=(3, 5)), R.T_F32),
                        "b.f16": (rng.normal(size=(2, 7)) * 100, R.T_F16),
                        "c.bf16": (rng.normal(size=(4, 3)) * 1e-3, R.T_BF16),
                        "d.q8_0": (rng.normal(size=(3, 64)), R.T_Q8_0),
                        "e.vec": (rng.normal(size=(9,)), R.T_F32),
                    }
                    md = {"general.architecture": "llama", "x.u32": 7, "x.f32": 0.5, "x.flag": True,
                          "x.strings": ["a", "\u2581b", "<0x0A>"], "x.ints": [3, -4, 5], "x.floats": [1.5, -2.0]}
                    path = os.path.join(d, f"t{version}_{alignment}.gguf")
                    write_gguf(path, md, [(n, a, t) for n, (a, t) in arrays.items()], version, alignment)
                    g = R.Gguf(path)
                    self.assertEqual(g.version, version)
                    self.assertEqual(g.data_start % alignment, 0)
                    for k, v in md.items():
                        self.assertEqual(g.metadata[k], v, k)
                    for name, (a, t) in arrays.items():
                        got = g.tensor(name)
                        self.assertEqual(got.shape, a.shape, name)
                        self.assertEqual(got.dtype, np.float64)
                        np.testing.assert_array_equal(got, decoded(a, t), err_msg=name)

    def _raw_tensor(self, d, ttype, n, blob):
        """Writes one tensor of n elements whose bytes are `blob` and reads it back through the parser."""
        md = {"general.architecture": "llama"}
        head = b"GGUF" + struct.pack("<IQQ", 3, 1, len(md)) + b"".join(_kv(k, v) for k, v in md.items())
        body = head + _str("t") + struct.pack("<IQIQ", 1, n, ttype, 0)
        body += b"\0" * ((-len(body)) % 32)
        path = os.path.join(d, f"raw{ttype}.gguf")
        with open(path, "wb") as f:
            f.write(body + blob)
        return R.Gguf(path).tensor("t")

    def test_q4_0_q4_k_q6_k_hand_built_blocks(self):
        """ggml's block layouts from bytes built by hand (the blocks of tests/kernels/quant_test.cpp)."""
        with tempfile.TemporaryDirectory() as d:
            # Q4_0: d = 0.5; byte i = element i (low nibble i) | element 16+i (high nibble 15 - i).
            blob = struct.pack("<e", 0.5) + bytes(i | ((15 - i) << 4) for i in range(16))
            want = [0.5 * (i - 8) for i in range(16)] + [0.5 * (7 - i) for i in range(16)]
            np.testing.assert_array_equal(self._raw_tensor(d, R.T_Q4_0, 32, blob), want)

            # Q4_K: d = 1, dmin = 0.5, 6-bit scales and mins packed as ggml's get_scale_min_k4 reads them.
            sc, m = [1, 2, 3, 4, 5, 6, 7, 63], [0, 1, 2, 3, 60, 17, 32, 63]
            scales = [1, 2, 3, 4 | (3 << 6), 0 | (3 << 6), 1 | (1 << 6), 2 | (2 << 6), 3 | (3 << 6),
                      5 | (12 << 4), 6 | (1 << 4), 7, 15 | (15 << 4)]
            qs = bytes((l % 16) | ((15 - l % 16) << 4) for p in range(4) for l in range(32))
            blob = struct.pack("<ee", 1.0, 0.5) + bytes(scales) + qs
            want = [sc[j] * (l % 16 if j % 2 == 0 else 15 - l % 16) - 0.5 * m[j]
                    for j in range(8) for l in range(32)]
            np.testing.assert_array_equal(self._raw_tensor(d, R.T_Q4_K, 256, blob), want)

            # Q6_K: element e has code (7e + 3) % 64, scales[j] = j - 8, d = 0.25.
            ql, qh = bytearray(128), bytearray(64)
            want = []
            for e in range(256):
                code, h, k, l = (7 * e + 3) % 64, e // 128, (e % 128) // 32, e % 32
                ql[64 * h + l + 32 * (k % 2)] |= (code & 15) << (0 if k < 2 else 4)
                qh[32 * h + l] |= (code >> 4) << (2 * k)
                want.append(0.25 * (e // 16 - 8) * (code - 32))
            blob = bytes(ql) + bytes(qh) + struct.pack("<16b", *range(-8, 8)) + struct.pack("<e", 0.25)
            np.testing.assert_array_equal(self._raw_tensor(d, R.T_Q6_K, 256, blob), want)

    def test_malformed_files_are_refused(self):
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.gguf")
            for content, needle in ((b"GGUX" + b"\0" * 20, "magic"),
                                    (b"GGUF" + struct.pack("<I", 1) + b"\0" * 16, "version 1"),
                                    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1000), "past the end")):
                with open(bad, "wb") as f:
                    f.write(content)
                with self.assertRaises(R.GgufError) as ctx:
                    R.Gguf(bad)
                self.assertIn(needle, str(ctx.exception))


@need(SHARED / "vocab")
class Tokenizer(unittest.TestCase):
    def test_llama_cpp_vectors(self):
        for name in ("llama-spm", "phi-3"):
            base = SHARED / "vocab" / f"ggml-vocab-{name}.gguf"
            tok = R.SpmTokenizer(R.Gguf(str(base)))
            texts = base.with_suffix(".gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
            if texts and texts[-1] == "":
                texts.pop()
            expected = base.with_suffix(".gguf.out").read_text(encoding="utf-8").split("\n")
            self.assertGreater(len(texts), 40)
            for text, line in zip(texts, expected):
                self.assertEqual(tok.encode(text, bos=False), [int(t) for t in line.split()], f"{name}: {text!r}")

    @need(STORIES)
    def test_stories_prompt_and_round_trip(self):
        tok = R.SpmTokenizer(R.Gguf(str(STORIES)))
        self.assertEqual(tok.encode("Once upon a time"), ONCE_UPON)
        text = 'Lily said, "Wow!"\nThe end. Ünïcode → bytes'
        self.assertEqual(tok.decode(tok.encode(text)[1:]), text)


@need(STORIES)
class PublishedFigures(unittest.TestCase):
    def test_greedy_200_matches_reference_text(self):
        out = subprocess.run([sys.executable, str(HERE / "llama_ref.py"), "--model", str(STORIES), "--tokens",
                              " ".join(map(str, ONCE_UPON)), "--generate", "196"],
                             capture_output=True, text=True, check=True).stdout
        expected = (STORIES.parent / "reference_greedy_200.txt").read_text(encoding="utf-8")
        self.assertEqual(out.rstrip("\n"), expected.rstrip("\n"))

    def test_stories_perplexity(self):
        out = subprocess.run([sys.executable, str(HERE / "llama_ref.py"), "--model", str(STORIES), "--text-file",
                              str(SHARED / "data" / "tinystories" / "tinystories_val_head.txt"), "--max-tokens",
                              "512", "--perplexity"], capture_output=True, text=True, check=True).stdout
        self.assertEqual(out.split()[:2], ["perplexity", "3.710675"], out)  # MODEL.md: 3.7107

    @need(EVAL5M)
    @unittest.skipUnless(os.environ.get("H2OKV_SLOW"), "set H2OKV_SLOW=1 (about 10 s)")
    def test_eval5m_perplexity(self):
        out = subprocess.run([sys.executable, str(HERE / "llama_ref.py"), "--model", str(EVAL5M), "--text-file",
                              str(SHARED / "data" / "moby-dick" / "moby_dick.txt"), "--max-tokens", "1024",
                              "--perplexity"], capture_output=True, text=True, check=True).stdout
        self.assertIn("mean_nll 5.731343", out)  # MODEL.md: 308.383, mean NLL 5.731343


@need(STORIES)
class WeightTypes(unittest.TestCase):
    def test_f16_bf16_q8_0_models_run_their_decoded_weights(self):
        """A model stored as F16/BF16/Q8_0 must give exactly the logits of an F32 model holding the decoded
        values, and stay near the original: relative logit error within 4x the format's relative weight
        precision (F16 2^-11, BF16 2^-8, Q8_0 1/127 of a block's largest value), the same greedy tokens."""
        tokens = ONCE_UPON + [432, 383, 286]
        base = R.Llama(R.Gguf(str(STORIES)))
        full = vector_run(base, tokens, "full", None, 0, 0, 1.0, "head", 8)[0]
        with tempfile.TemporaryDirectory() as d:
            for ttype, precision in ((R.T_F16, 2.0**-11), (R.T_BF16, 2.0**-8), (R.T_Q8_0, 1 / 127)):
                q_path = os.path.join(d, f"q{ttype}.gguf")
                model_as(STORIES, q_path, ttype)
                f_path = os.path.join(d, f"f{ttype}.gguf")
                g = R.Gguf(q_path)
                write_gguf(f_path, g.metadata, [(n, g.tensor(n), R.T_F32) for n in g.tensors])
                # Without the activation rounding of Q8_0 products (the engine's, src/kernels/q8_0_act.h),
                # which an F32 model does not have.
                lq = vector_run(R.Llama(g, act_quant=False), tokens, "full", None, 0, 0, 1.0, "head", 8)[0]
                lf = vector_run(R.Llama(R.Gguf(f_path)), tokens, "full", None, 0, 0, 1.0, "head", 8)[0]
                np.testing.assert_array_equal(lq, lf)
                self.assertLess(np.linalg.norm(lq - full) / np.linalg.norm(full), 4 * precision, ttype)
                np.testing.assert_array_equal(lq.argmax(axis=1), full.argmax(axis=1))


@need(STORIES)
class KvRounding(unittest.TestCase):
    def test_q4_1_as_ggml(self):
        """q4_1: values on the block's grid come back exactly; others round to the nearest step (half up)."""
        grid = np.array([-1.0 + 0.125 * (i % 16) for i in range(32)])  # min -1, d = 1.875 / 15 = 0.125
        np.testing.assert_array_equal(R.round_kv(grid, "q4_1"), grid)
        x = grid.copy()
        x[3] += 0.0625  # exactly half a step above its grid point: rounds up
        x[4] += 0.06    # below half a step: rounds down
        want = grid.copy()
        want[3] += 0.125
        np.testing.assert_array_equal(R.round_kv(x, "q4_1"), want)
        np.testing.assert_array_equal(R.round_kv(np.full(32, 0.3), "q4_1"), np.full(32, np.float16(0.3)))
        with self.assertRaises(R.PolicyError):
            R.round_kv(np.zeros(48), "q4_1")


class EvictionContract(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = R.Llama(R.Gguf(str(STORIES)))
        cls.tokens = R.SpmTokenizer(R.Gguf(str(STORIES))).encode(
            "Once upon a time, there was a little girl named Lily. She loved to play outside.")[:26]

    def check_against_literal(self, policy, budget, recent, sinks, decay, granularity, chunk):
        args = (policy, budget, recent, sinks, decay, granularity, chunk)
        lv, tv, _ = vector_run(self.model, self.tokens, *args)
        ll, tl = literal_run(self.model, self.tokens, *args)
        self.assertEqual(tv, tl, args)
        np.testing.assert_allclose(lv, ll, rtol=0, atol=1e-9, err_msg=str(args))
        return tv

    def test_vectorised_matches_literal(self):
        cases = [
            ("h2o", 8, 4, 0, 1.0, "head", 1), ("h2o", 8, 2, 1, 0.9, "head", 1), ("h2o", 8, 4, 0, 1.0, "head", 5),
            ("h2o", 7, 3, 0, 1.0, "layer", 1), ("h2o", 7, 3, 2, 0.8, "model", 3), ("h2o", 6, 1, 0, 1.0, "model", 1),
            ("tova", 6, 0, 0, 0.0, "head", 1), ("tova", 6, 1, 1, 0.0, "layer", 4),
            ("window", 5, 5, 0, 1.0, "head", 1), ("window", 5, 5, 0, 1.0, "head", 7),
            ("streaming", 6, 0, 2, 1.0, "head", 1), ("streaming", 6, 2, 4, 1.0, "model", 3),
        ]
        for case in cases:
            trace = self.check_against_literal(*case)
            budget, recent, sinks = case[1], case[2], case[3]
            for kept in trace[-1]:
                self.assertEqual(len(kept), budget, case)
                if case[0] != "streaming":
                    self.assertEqual(kept[-recent:] if recent else [], list(range(26 - recent, 26)), case)
                self.assertEqual(kept[:sinks], list(range(sinks)), case)

    def test_ties_evict_the_lower_position(self):
        # With the query projections zeroed every score row is uniform, so TOVA's scores (the last row) tie
        # everywhere and it must behave as a window: the oldest position goes.
        g = R.Gguf(str(STORIES))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "flat.gguf")
            tensors = [(n, g.tensor(n) * (0.0 if n.endswith("attn_q.weight") else 1.0), R.T_F32) for n in g.tensors]
            write_gguf(path, g.metadata, tensors)
            flat = R.Llama(R.Gguf(path))
        for gran, chunk in (("head", 1), ("model", 3)):
            _, tv, _ = vector_run(flat, self.tokens, "tova", 5, 0, 0, 0.0, gran, chunk)
            _, tl = literal_run(flat, self.tokens, "tova", 5, 0, 0, 0.0, gran, chunk)
            self.assertEqual(tv, tl)
            for i, kept_sets in enumerate(tv):
                last = min(len(self.tokens), (i + 1) * chunk) - 1
                for kept in kept_sets:
                    self.assertEqual(kept, list(range(max(0, last - 4), last + 1)))

    def test_window_and_streaming_keep_what_they_promise(self):
        _, tv, _ = vector_run(self.model, self.tokens, "window", 5, 5, 0, 1.0, "head", 1)
        for i, kept_sets in enumerate(tv):
            for kept in kept_sets:
                self.assertEqual(kept, list(range(max(0, i - 4), i + 1)))
        _, tv, _ = vector_run(self.model, self.tokens, "streaming", 6, 0, 2, 1.0, "layer", 1)
        for i, kept_sets in enumerate(tv):
            for kept in kept_sets:
                expect = list(range(i + 1)) if i < 6 else [0, 1] + list(range(i - 3, i + 1))
                self.assertEqual(kept, expect)

    def test_budget_at_least_length_is_full_cache(self):
        lf = vector_run(self.model, self.tokens, "full", None, 0, 0, 1.0, "head", 1)[0]
        for args in (("h2o", 26, 13, 0, 1.0), ("tova", 26, 0, 0, 0.0), ("window", 26, 26, 0, 1.0),
                     ("streaming", 30, 0, 4, 1.0)):
            for gran in R.GRANULARITIES:
                lv = vector_run(self.model, self.tokens, *args, gran, 1)[0]
                np.testing.assert_array_equal(lv, lf, err_msg=f"{args} {gran}")

    def test_chunking_does_not_change_full_cache_logits(self):
        l1 = vector_run(self.model, self.tokens, "full", None, 0, 0, 1.0, "head", 1)[0]
        for chunk in (2, 7, 26):
            lc = vector_run(self.model, self.tokens, "full", None, 0, 0, 1.0, "head", chunk)[0]
            np.testing.assert_allclose(lc, l1, rtol=0, atol=1e-11)

    def test_scores_first_increment_and_tova_last_row(self):
        # After the first token, each unit's score of position 0 is the sum of its heads' self-weights (1.0
        # each): the GQA group size for `head`, every head of a layer for `layer`, of the model for `model`.
        m = self.model
        for gran, expect in (("head", m.n_head // m.n_kv), ("layer", m.n_head), ("model", m.n_head * m.n_layer)):
            run = R.Run(m, 4, "h2o", 3, 1, 0, 1.0, gran)
            run.step(self.tokens[:1])
            np.testing.assert_array_equal(run.score[:, 0], float(expect))
        # tova: scores are exactly the last row's increment, which sums to the group size over kept positions.
        run = R.Run(m, 26, "tova", 6, 0, 0, 0.0, "head")
        for t in self.tokens[:12]:
            run.step([t])
        for u in range(run.n_units):
            self.assertAlmostEqual(run.score[u][run.kept[u]].sum() + 0.0, m.n_head // m.n_kv, delta=1.0)

    def test_policy_validation(self):
        ok = R.resolve_policy("h2o", 10, None, None, None)
        self.assertEqual(ok, (10, 5, 0, 1.0))
        self.assertEqual(R.resolve_policy("streaming", 10, None, None, None), (10, 0, 4, 1.0))
        self.assertEqual(R.resolve_policy("tova", 10, None, None, None), (10, 0, 0, 0.0))
        self.assertEqual(R.resolve_policy("window", 10, None, None, None), (10, 10, 0, 1.0))
        self.assertEqual(R.resolve_budget("0.2", 1024), 204)
        self.assertEqual(R.resolve_budget("0.0001", 10), 1)
        self.assertEqual(R.resolve_budget("64", 10), 64)
        for bad in (("h2o", 10, 5, 5, None), ("h2o", 10, None, None, 1.5), ("h2o", 10, None, None, 0.0),
                    ("window", 10, 4, None, None), ("window", 10, None, 1, None), ("streaming", 4, None, None, None),
                    ("streaming", 10, 7, 4, None), ("tova", 10, None, None, 0.5), ("lru", 10, None, None, None),
                    ("h2o", None, None, None, None), ("h2o", 10, -1, None, None)):
            with self.assertRaises(R.PolicyError, msg=str(bad)):
                R.resolve_policy(*bad)
        for bad in ("0", "-3", "1.5", "0.0"):
            with self.assertRaises(R.PolicyError, msg=bad):
                R.resolve_budget(bad, 100)

    def test_snapkv_parameters(self):
        # Clause 9.6: recent defaults to the window, sinks + recent < budget, decay refused.
        self.assertEqual(R.resolve_policy("snapkv", 12, None, None, None), (12, 8, 0, 1.0))
        own = R.resolve_extra("snapkv", {"window": "3", "kernel": "1", "decode": "1", "proxy": "1"})
        self.assertEqual(own, {"window": 3.0, "kernel": 1.0, "decode": 1.0, "proxy": 1.0})
        self.assertEqual(R.resolve_policy("snapkv", 6, None, 1, None, own), (6, 3, 1, 1.0))
        for bad in (("snapkv", 8, None, None, None), ("snapkv", 12, None, None, 0.9), ("snapkv", 6, 4, 2, None)):
            with self.assertRaises(R.PolicyError, msg=str(bad)):
                R.resolve_policy(*bad)
        for bad in ({"window": "0"}, {"window": "2.5"}, {"kernel": "2"}, {"kernel": "0"}, {"decode": "2"},
                    {"proxy": "0.5"}, {"history": "4"}):
            with self.assertRaises(R.PolicyError, msg=str(bad)):
                R.resolve_extra("snapkv", bad)

    def test_snapkv_pools_the_last_window_votes(self):
        # Clause 9.6 by hand: five held positions, kernel 3, the edges averaged over the two they have.
        run = R.Run.__new__(R.Run)
        run.extra = {"kernel": 3.0}
        run.vote = np.array([[1.0, 0.0, 4.0, 2.0, 0.0]])
        pooled = run._pooled_votes(0, [0, 1, 2, 3, 4])
        self.assertEqual(pooled, {0: 0.5, 1: 5.0 / 3.0, 2: 2.0, 3: 2.0, 4: 1.0})


class Allocation(unittest.TestCase):
    """Contract clause 11's budgets per unit, from the rule's worked examples."""

    def test_pyramid_and_shares(self):
        self.assertEqual(R.allocate_budgets(20, 5, 5, "pyramid", 0.5), [30, 25, 20, 15, 10])
        self.assertEqual(R.allocate_budgets(20, 10, 5, "pyramid"), [30, 30, 25, 25, 20, 20, 15, 15, 10, 10])
        self.assertEqual(R.allocate_budgets(10, 3, 3, shares=[1, 2, 4]), [4, 9, 17])
        self.assertEqual(R.allocate_budgets(2, 3, 3, shares=[1, 1, 2]), [2, 1, 3])  # a tie: the lower unit
        self.assertEqual(R.allocate_budgets(2, 2, 2, shares=[100, 0.001]), [4, 1])  # at least one
        with self.assertRaises(R.PolicyError):
            R.allocate_budgets(8, 4, 2, shares=[1, 2])
        with self.assertRaises(R.PolicyError):
            R.allocate_budgets(8, 1, 2, "pyramid")


if __name__ == "__main__":
    unittest.main()
