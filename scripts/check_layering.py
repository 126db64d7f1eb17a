#!/usr/bin/env python3
"""Fails when a file of one layer includes a header of a layer below it (docs/ARCHITECTURE.md).

Usage: check_layering.py REPO_ROOT
Layer files are src/<layer>/** and include/h2okv/<layer>/**; a layer may include its own headers and those of
the layers listed before it in LAYERS. tools/, tests/ and bench/ may include anything.
"""
import pathlib
import re
import sys

LAYERS = ["core", "policy", "gguf", "tokenizer", "kernels", "model", "kv", "engine", "eval", "serve", "capi"]
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:h2okv/)?([a-z_]+)/', re.MULTILINE)


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    errors = []
    checked = 0
    for rank, layer in enumerate(LAYERS):
        for base in (root / "src" / layer, root / "include" / "h2okv" / layer):
            for path in sorted(base.rglob("*")):
                if path.suffix not in (".h", ".hpp", ".cpp", ".cc", ".def", ".inc"):
                    continue
                checked += 1
                for match in INCLUDE.finditer(path.read_text(encoding="utf-8")):
                    target = match.group(1)
                    if target in LAYERS and LAYERS.index(target) > rank:
                        line = path.read_text(encoding="utf-8").count("\n", 0, match.start()) + 1
                        errors.append(f"{path.relative_to(root)}:{line}: layer '{layer}' includes a header of "
                                      f"the lower layer '{target}' (allowed: {', '.join(LAYERS[:rank + 1])})")
    for e in errors:
        print(e)
    print(f"layering: {checked} files checked, {len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
