#!/usr/bin/env python3
"""scripts/xsum.py: ROUGE against rouge_score's published example and hand-counted cases, the stop string,
the prompt file (escaping, --fit with the real tokenizer of the bundled model) and the scoring of a
completions file. Usage: xsum_test.py H2OKV MODEL"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import xsum  # noqa: E402

H2OKV, MODEL = sys.argv[1], sys.argv[2]


class Rouge(unittest.TestCase):
    def test_tokenizer_lowercases_and_splits_on_everything_but_letters_and_digits(self):
        self.assertEqual(xsum.tokenize("The Cat's mat, 2016!  ok"), ["the", "cat", "s", "mat", "2016", "ok"])
        self.assertEqual(xsum.tokenize("..."), [])

    def test_rouge_score_readme_example(self):
        # rouge_score's README: score(target='The quick brown fox jumps over the lazy dog',
        # prediction='The quick brown dog jumps on the log.').
        s = xsum.scores("The quick brown dog jumps on the log.", "The quick brown fox jumps over the lazy dog")
        self.assertAlmostEqual(s["rouge1"][0], 0.75)
        self.assertAlmostEqual(s["rouge1"][1], 0.6666666666666666)
        self.assertAlmostEqual(s["rouge1"][2], 0.7058823529411765)
        self.assertAlmostEqual(s["rougeL"][0], 0.625)
        self.assertAlmostEqual(s["rougeL"][1], 0.5555555555555556)
        self.assertAlmostEqual(s["rougeL"][2], 0.5882352941176471)

    def test_hand_counted_bigrams_and_clipping(self):
        s = xsum.scores("the cat sat on the mat", "the cat is on the mat")
        self.assertAlmostEqual(s["rouge1"][2], 5 / 6)
        self.assertAlmostEqual(s["rouge2"][0], 3 / 5)  # the cat, on the, the mat
        self.assertAlmostEqual(s["rougeL"][2], 5 / 6)
        # "the" three times against once: clipped to one match.
        p, r, _ = xsum.rouge_n(["the", "the", "the"], ["the", "cat"], 1)
        self.assertAlmostEqual(p, 1 / 3)
        self.assertAlmostEqual(r, 1 / 2)

    def test_no_overlap_and_empty_texts_score_zero(self):
        self.assertEqual(xsum.scores("", "a reference")["rouge1"], (0.0, 0.0, 0.0))
        self.assertEqual(xsum.scores("dog", "cat")["rougeL"], (0.0, 0.0, 0.0))
        self.assertEqual(xsum.scores("one", "one two")["rouge2"], (0.0, 0.0, 0.0))  # no bigram in the prediction

    def test_completion_is_cut_at_the_stop_string(self):
        self.assertEqual(xsum.cut_at_stop("A summary.\n###\nArticle: more", ["###"]), "A summary.\n")
        self.assertEqual(xsum.cut_at_stop("no stop here", ["###"]), "no stop here")


class Files(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.data = os.path.join(self.dir.name, "data.jsonl")
        rows = [
            {"article": "###\nArticle: Once upon a time.\n\nSummarize the above article in 1 sentence.\n",
             "summary_gt": "A story begins.", "stop": ["###"]},
            {"article": "###\nArticle: " + "The cat sat on the mat. " * 40 + "\n\nSummarize it.\n",
             "summary_gt": "The cat sat on the mat.", "stop": ["###"]},
            {"article": "###\nArticle: Tab\there, back\\slash.\n", "summary_gt": "Tabs.", "stop": ["###"]},
        ]
        with open(self.data, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    def tearDown(self):
        self.dir.cleanup()

    def run_script(self, *args):
        return subprocess.run([sys.executable, xsum.__file__, *args], capture_output=True, text=True)

    def test_prompts_are_escaped_one_per_line(self):
        out = os.path.join(self.dir.name, "p.txt")
        self.assertEqual(self.run_script("prompts", self.data, "3", out).returncode, 0)
        with open(out, encoding="utf-8") as f:
            lines = f.read().split("\n")
        self.assertEqual(len(lines), 4)  # three prompts and the final newline
        self.assertTrue(lines[0].startswith("###\\nArticle: Once upon a time.\\n\\nSummarize"))
        self.assertEqual(lines[2], "###\\nArticle: Tab\\there, back\\\\slash.\\n")
        with open(out + ".rows", encoding="utf-8") as f:
            self.assertEqual(f.read().split(), ["0", "1", "2"])

    def test_fit_keeps_the_prompts_whose_tokens_fit(self):
        out = os.path.join(self.dir.name, "p.txt")
        r = self.run_script("prompts", self.data, "2", out, "--fit", H2OKV, MODEL, "100")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out + ".rows", encoding="utf-8") as f:
            self.assertEqual(f.read().split(), ["0", "2"])  # the long article is past 100 tokens
        r = self.run_script("prompts", self.data, "3", out, "--fit", H2OKV, MODEL, "100")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("only 2 of the 3 prompts fit 100 tokens", r.stderr)

    def test_score_reads_completions_in_order_and_appends_one_line(self):
        comp = os.path.join(self.dir.name, "c.jsonl")
        with open(comp, "w", encoding="utf-8") as f:
            f.write(json.dumps({"prompt": "p0", "completion": "A story begins. ### Article: junk"}) + "\n")
            f.write(json.dumps({"prompt": "p2", "completion": "Nothing alike"}) + "\n")
        # An answer that starts with the stop string is empty: 0 and counted.
        comp2 = os.path.join(self.dir.name, "c2.jsonl")
        with open(comp2, "w", encoding="utf-8") as f:
            f.write(json.dumps({"prompt": "p0", "completion": " ###\nArticle: more"}) + "\n")
        r = self.run_script("score", self.data, comp2)
        self.assertEqual(json.loads(r.stdout), {"examples": 1, "empty": 1, "rouge1": 0.0, "rouge2": 0.0,
                                                "rougeL": 0.0})
        rows = os.path.join(self.dir.name, "rows")
        with open(rows, "w", encoding="utf-8") as f:
            f.write("0 2\n")
        res = os.path.join(self.dir.name, "res.jsonl")
        r = self.run_script("score", self.data, comp, "--rows", rows, "--label", "full", "--out", res)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(res, encoding="utf-8") as f:
            got = json.loads(f.read())
        self.assertEqual(got["label"], "full")
        self.assertEqual(got["examples"], 2)
        self.assertEqual(got["empty"], 0)
        self.assertAlmostEqual(got["rouge1"], 0.5)  # 1.0 (cut at ###) and 0.0
        self.assertAlmostEqual(got["rougeL"], 0.5)

    def test_bad_options_are_named(self):
        r = self.run_script("score", self.data, self.data, "--bogus", "x")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("unknown option '--bogus'", r.stderr)
        r = self.run_script("prompts", self.data, "9", os.path.join(self.dir.name, "p"))
        self.assertIn("N = 9, expected 1..3", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
