#!/usr/bin/env python3
"""The Python module h2okv (docs/PYTHON.md) as a user meets it, under Debian's python3.

- simulate() against the brute-force reference of tests/policy/reference_policy.h (simulate_reference, a C++
  driver sharing no code with src/policy) for every registered policy, over recorded-style scores;
- Model.generate() against `h2okv generate`'s stdout on the bundled model, Model.logits() against
  `h2okv logits`;
- bad input raising Python exceptions with the library's message.

Environment: PYTHONPATH holds the built module; H2OKV_CLI, H2OKV_SIMULATE_REFERENCE and H2OKV_SOURCE_DIR
name the CLI, the driver and the repository (ctest sets them: tests/python/CMakeLists.txt).
"""
import json
import os
import pathlib
import subprocess
import tempfile
import threading
import unittest

import numpy as np

import h2okv

CLI = os.environ["H2OKV_CLI"]
REFERENCE = os.environ["H2OKV_SIMULATE_REFERENCE"]
MODEL = str(pathlib.Path(os.environ["H2OKV_SOURCE_DIR"]) / "models" / "stories260K.gguf")

# Spec suffixes tried for every evicting policy; each policy refuses those it does not take (both sides must
# agree on that too).
SUFFIXES = ["budget=6", "budget=5,recent=2", "budget=8,sinks=2,recent=3", "budget=0.25", "budget=6,decay=0.9",
            "budget=7,recent=0", "budget=6,sinks=1", "budget=6,proxy=1", "budget=6,tau=0.5,seed=3",
            "budget=6,tau=0", "budget=6,history=4", "budget=9,window=3,kernel=3", "budget=6,decode=1",
            "budget=9,recent=4,decay=0.5"]


def recorded_scores(seed, t_len, ties=False):
    """Pre-softmax scores [T, T] as an engine would record them: a few heavy-hitter columns, locality, noise;
    with ties, small integers (exact score ties). Above the diagonal: garbage, which simulate must ignore."""
    rng = np.random.default_rng(seed)
    if ties:
        z = rng.integers(0, 3, size=(t_len, t_len)).astype(np.float64)
    else:
        z = rng.normal(0.0, 1.0, size=(t_len, t_len))
        z[:, rng.choice(t_len, size=3, replace=False)] += 3.0
        z -= 0.05 * np.abs(np.arange(t_len)[:, None] - np.arange(t_len)[None, :])
    z[np.triu_indices(t_len, 1)] = rng.normal(0.0, 100.0, size=t_len * (t_len - 1) // 2)
    return z


def reference_kept(spec, logits, keys, chunk):
    """The driver's kept sets, or None when it refuses the spec."""
    t_len = logits.shape[0]
    with tempfile.TemporaryDirectory() as d:
        lp, kp = os.path.join(d, "logits.f64"), os.path.join(d, "keys.f64")
        np.ascontiguousarray(logits, dtype=np.float64).tofile(lp)
        np.ascontiguousarray(keys, dtype=np.float64).tofile(kp)
        r = subprocess.run([REFERENCE, spec, str(t_len), str(chunk), lp, str(keys.shape[1]), kp],
                           capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)


class Simulate(unittest.TestCase):
    def test_every_registered_policy_matches_the_reference(self):
        names = subprocess.run([REFERENCE, "--policies"], capture_output=True, text=True,
                               check=True).stdout.split()
        self.assertEqual(names, [p["name"] for p in h2okv.policies()])
        self.assertIn("h2o", names)
        t_len = 40
        compared = {}
        for name in names:
            evicts = next(p for p in h2okv.policies() if p["name"] == name)["evicts"]
            specs = [name + ":" + s for s in SUFFIXES] if evicts else [name]
            for spec in specs:
                for seed, ties in ((1, False), (2, True)):
                    logits = recorded_scores(seed, t_len, ties)
                    keys = np.random.default_rng(seed + 10).normal(size=(t_len, 8)).astype(np.float32)
                    for chunk in (1, 4):
                        with self.subTest(spec=spec, seed=seed, chunk=chunk):
                            want = reference_kept(spec, logits, keys, chunk)
                            try:
                                got = h2okv.simulate(spec, logits, keys=keys, chunk=chunk)
                            except ValueError as e:
                                self.assertIsNone(want, f"simulate refused {spec} ({e}); the reference did not")
                                continue
                            self.assertIsNotNone(want, f"the reference refused {spec}; simulate did not")
                            self.assertEqual(len(got), -(-t_len // chunk))
                            for a in got:
                                self.assertEqual(a.dtype, np.int64)
                            self.assertEqual([a.tolist() for a in got], want)
                            compared[name] = compared.get(name, 0) + 1
        print(f"\nsimulate == reference, runs compared per policy: {compared}")
        for name in names:
            self.assertGreaterEqual(compared.get(name, 0), 4, f"{name}: too few specs compared")

    def test_kept_sets_follow_the_contract(self):
        logits = recorded_scores(3, 30)
        h2o = h2okv.simulate("h2o:budget=6", logits)
        window = h2okv.simulate("window:budget=6", logits)
        full = h2okv.simulate("full", logits)
        self.assertEqual(len(h2o), 30)
        for t in range(30):
            self.assertEqual(full[t].tolist(), list(range(t + 1)))
            self.assertEqual(window[t].tolist(), list(range(max(0, t - 5), t + 1)))
            self.assertEqual(len(h2o[t]), min(t + 1, 6))
            self.assertTrue(set(range(max(0, t - 2), t + 1)) <= set(h2o[t].tolist()), "recent window kept")
        self.assertNotEqual(h2o[-1].tolist(), window[-1].tolist(), "h2o kept heavy hitters outside the window")

    def test_default_granularity(self):
        # TOVA's paper averages a layer's heads: tova's default granularity is layer, every other policy's head.
        grans = {p["name"]: p["granularity"] for p in h2okv.policies()}
        self.assertEqual(grans.pop("tova"), "layer")
        self.assertEqual(set(grans.values()), {"head"})

    def test_float32_and_float64_agree_and_above_diagonal_is_ignored(self):
        z = recorded_scores(4, 20).astype(np.float32)
        a = h2okv.simulate("h2o:budget=5", z)
        b = h2okv.simulate("h2o:budget=5", z.astype(np.float64))
        z2 = z.copy()
        z2[np.triu_indices(20, 1)] = np.nan
        c = h2okv.simulate("h2o:budget=5", z2)
        self.assertEqual([x.tolist() for x in a], [x.tolist() for x in b])
        self.assertEqual([x.tolist() for x in a], [x.tolist() for x in c])

    def test_masked_positions(self):
        z = recorded_scores(5, 12)
        z[:, 0] = -np.inf
        z[0, 0] = 0.0
        kept = h2okv.simulate("h2o:budget=4,recent=1", z)
        self.assertNotIn(0, kept[-1].tolist(), "a position no query attends loses its score race")


class SimulateErrors(unittest.TestCase):
    def assertRaisesWith(self, exc, text, f, *args, **kwargs):
        with self.assertRaises(exc) as cm:
            f(*args, **kwargs)
        self.assertIn(text, str(cm.exception))

    def test_bad_input_raises(self):
        z = recorded_scores(6, 8)
        self.assertRaisesWith(ValueError, "unknown", h2okv.simulate, "nosuch:budget=4", z)
        self.assertRaisesWith(ValueError, "h2o", h2okv.simulate, "h2o", z)  # no budget
        self.assertRaisesWith(ValueError, "square", h2okv.simulate, "h2o:budget=4", z[:, :5])
        self.assertRaisesWith(ValueError, "dimensions", h2okv.simulate, "h2o:budget=4", z[0])
        self.assertRaisesWith(TypeError, "floating-point", h2okv.simulate, "h2o:budget=4", z.astype(np.int64))
        self.assertRaisesWith(TypeError, "floating-point", h2okv.simulate, "h2o:budget=4",
                              np.array([["a"]], dtype=object))
        nan = z.copy()
        nan[5, 2] = np.nan
        self.assertRaisesWith(ValueError, "logits[5, 2]", h2okv.simulate, "h2o:budget=4", nan)
        diag = z.copy()
        diag[3, 3] = -np.inf
        self.assertRaisesWith(ValueError, "own score", h2okv.simulate, "h2o:budget=4", diag)
        self.assertRaisesWith(ValueError, "keys", h2okv.simulate, "l2norm:budget=4", z)
        self.assertRaisesWith(ValueError, "keys", h2okv.simulate, "keydiff:budget=4", z)
        self.assertRaisesWith(ValueError, "keys", h2okv.simulate, "h2o:budget=4,proxy=1", z)
        self.assertRaisesWith(ValueError, "logits", h2okv.simulate, "h2o:budget=4", None, keys=np.ones((8, 2)))
        self.assertRaisesWith(ValueError, "rows", h2okv.simulate, "l2norm:budget=4", z, keys=np.ones((7, 2)))
        self.assertRaisesWith(ValueError, "rolling", h2okv.simulate, "h2o:budget=4,positions=rolling", z)
        self.assertRaisesWith(ValueError, "chunk", h2okv.simulate, "h2o:budget=4", z, chunk=0)
        self.assertRaisesWith(ValueError, "T must be", h2okv.simulate, "h2o:budget=4", np.zeros((0, 0)))
        self.assertRaisesWith(ValueError, "recent", h2okv.simulate, "h2o:budget=4,recent=4", z)

    def test_keys_alone_run_key_policies(self):
        keys = np.random.default_rng(7).normal(size=(10, 4))
        kept = h2okv.simulate("l2norm:budget=3,recent=1", keys=keys)
        norms = np.linalg.norm(keys, axis=1)
        # l2norm keeps the smallest key norms among the evictable positions, plus the most recent one.
        last = kept[-1].tolist()
        self.assertIn(9, last)
        self.assertEqual(sorted(p for p in last if p != 9), sorted(np.argsort(norms[:9])[:2].tolist()))


class ModelTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = h2okv.Model(MODEL)

    def cli(self, *args):
        r = subprocess.run([CLI, *args], capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        return r.stdout

    def test_generate_equals_the_cli(self):
        prompt = "Once upon a time"
        cases = [({}, []),
                 ({"kv": "h2o:budget=0.2"}, ["--kv-policy", "h2o", "--kv-budget", "0.2"]),
                 ({"kv": "window:budget=16"}, ["--kv-policy", "window", "--kv-budget", "16"]),
                 ({"kv": "tova:budget=20", "kv_type": "f32"},
                  ["--kv-policy", "tova", "--kv-budget", "20", "--kv-type", "f32"]),
                 ({"kv": "h2o:budget=24,decay=0.98", "temperature": 0.8, "top_k": 40, "seed": 3},
                  ["--kv-policy", "h2o", "--kv-budget", "24", "--kv-decay", "0.98", "--temp", "0.8",
                   "--top-k", "40", "--seed", "3"])]
        texts = set()
        for kwargs, flags in cases:
            with self.subTest(kwargs=kwargs):
                text = self.m.generate(prompt, 120, **kwargs)
                want = self.cli("generate", "-m", MODEL, "-p", prompt, "-n", "120", *flags)
                self.assertEqual((prompt + text + "\n").encode(), want)
                self.assertGreater(len(text), 100)
                texts.add(text)
        self.assertGreater(len(texts), 2, "the policies changed the text")

    def test_stats(self):
        self.assertIsNone(h2okv.Model(MODEL).last_stats())
        self.m.generate("Once upon a time", 100, kv="h2o:budget=20", ignore_eos=True)
        s = self.m.last_stats()
        n_prompt = len(self.m.tokenize("Once upon a time"))
        self.assertEqual(s["policy"], "h2o:budget=20,recent=10,sinks=0")
        self.assertEqual(s["generated"], 100)
        self.assertEqual(s["positions"], n_prompt + 99)  # the last sampled token is never processed
        self.assertEqual(s["units"], 5 * 4)
        self.assertEqual(s["kept"], 20 * 20)
        self.assertEqual(s["evicted"], 20 * (n_prompt + 99 - 20))
        self.assertLess(s["kv_bytes"], s["full_kv_bytes"])
        self.assertFalse(s["stopped_at_eos"])

    def test_tokenize_detokenize_logits(self):
        ids = self.m.tokenize("Once upon a time")
        self.assertEqual(ids.dtype, np.int32)
        self.assertEqual(ids.tolist(), [1, 403, 407, 261, 378])
        self.assertEqual(self.m.tokenize("Once upon a time", add_bos=False).tolist(), [403, 407, 261, 378])
        self.assertEqual(self.m.detokenize(ids[1:]), "Once upon a time")
        self.assertEqual(self.m.n_vocab, 512)
        self.assertEqual(self.m.bos, 1)
        text = "Once upon a time, there was a little girl named Lily."
        ids = self.m.tokenize(text)
        for spec, flags in (("full", []), ("h2o:budget=6", ["--kv-policy", "h2o", "--kv-budget", "6"])):
            with self.subTest(spec=spec), tempfile.TemporaryDirectory() as d:
                out = os.path.join(d, "logits.npy")
                self.cli("logits", "-m", MODEL, "-p", text, "-o", out, *flags)
                got = self.m.logits(ids, kv=spec)
                self.assertEqual(got.shape, (len(ids), 512))
                np.testing.assert_array_equal(got, np.load(out))
        # Greedy generation is the argmax of the last logits, token after token.
        chain = self.m.tokenize("Once upon a time")
        for _ in range(20):
            chain = np.append(chain, np.argmax(self.m.logits(chain)[-1])).astype(np.int32)
        self.assertEqual(self.m.detokenize(chain[1:]), "Once upon a time" + self.m.generate("Once upon a time", 20))

    def test_threads_share_a_model(self):
        want = self.m.generate("Once upon a time", 60, kv="h2o:budget=16")
        got = [None] * 4

        def work(i):
            got[i] = self.m.generate("Once upon a time", 60, kv="h2o:budget=16")
            self.m.last_stats()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(got, [want] * 4)

    def test_errors(self):
        with self.assertRaises(OSError) as cm:
            h2okv.Model("/nonexistent/model.gguf")
        self.assertIn("/nonexistent/model.gguf", str(cm.exception))
        with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
            f.write(b"GGUX" + b"\0" * 60)
            f.flush()
            with self.assertRaises(ValueError) as cm:
                h2okv.Model(f.name)
            self.assertIn("GGUF", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            self.m.generate("x", 10, kv="nosuch")
        self.assertIn("h2o", str(cm.exception))  # lists the valid names
        self.assertRaises(ValueError, self.m.generate, "x", -1)
        self.assertRaises(ValueError, self.m.generate, "x", 10, kv="h2o:budget=0")
        self.assertRaises(ValueError, self.m.generate, "x", 10, kv_type="f8")
        self.assertRaises(ValueError, self.m.generate, "x", 10, top_p=0.0)
        self.assertRaises(ValueError, self.m.generate, "x", 10, prefill_chunk=0)
        self.assertRaises(ValueError, self.m.generate, "x", 100000)  # past the context under full
        self.assertRaises(TypeError, self.m.detokenize, np.array([1.5]))
        self.assertRaises(ValueError, self.m.detokenize, np.array([[1]]))
        with self.assertRaises(ValueError) as cm:
            self.m.logits(np.array([1, 9999]))
        self.assertIn("ids[1] = 9999", str(cm.exception))
        self.assertRaises(ValueError, self.m.logits, np.array([], dtype=np.int32))


if __name__ == "__main__":
    unittest.main(verbosity=1)
