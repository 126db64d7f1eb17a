#!/usr/bin/env python3
"""Runs a Markdown file's ```python blocks in order, in one namespace, and compares what each prints with the
```text block that follows it (a python block without one must print nothing). Keeps docs/PYTHON.md true.

Usage: check_doc.py FILE.md [--update]   (from the repository root, with the built module on PYTHONPATH)
--update rewrites the text blocks with what the code prints (then read the diff before committing it).
"""
import contextlib
import io
import re
import sys

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def main() -> int:
    path, update = sys.argv[1], sys.argv[2:] == ["--update"]
    doc = open(path, encoding="utf-8").read()
    matches = list(FENCE.finditer(doc))
    blocks = [(m.group(1), m.group(2)) for m in matches]
    outputs = {}  # index of a text block -> what the python block before it printed
    namespace = {"__name__": "__doc__"}
    failures, ran = 0, 0
    for i, (lang, code) in enumerate(blocks):
        if lang != "python":
            continue
        want = blocks[i + 1][1] if i + 1 < len(blocks) and blocks[i + 1][0] == "text" else ""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{path}, python block {ran + 1}", "exec"), namespace)
        ran += 1
        if i + 1 < len(blocks) and blocks[i + 1][0] == "text":
            outputs[i + 1] = out.getvalue()
        if out.getvalue() != want and not update:
            failures += 1
            print(f"{path}: python block {ran} printed:\n{out.getvalue()}--- but the document says:\n{want}---")
    if update:
        for i in sorted(outputs, reverse=True):
            m = matches[i]
            doc = doc[:m.start()] + "```text\n" + outputs[i] + "```\n" + doc[m.end():]
        open(path, "w", encoding="utf-8").write(doc)
        print(f"check_doc: {len(outputs)} text blocks of {path} rewritten")
        return 0
    print(f"check_doc: {ran} python blocks run, {failures} differ from the document")
    return 1 if failures or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
