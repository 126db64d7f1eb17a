#!/usr/bin/env python3
"""Fails when clang-format (the repository's .clang-format) would change a C or C++ file.

Usage: check_format.py CLANG_FORMAT REPO_ROOT
"""
import pathlib
import subprocess
import sys

DIRS = ["include", "src", "tools", "tests", "bench", "examples", "python"]
SUFFIXES = {".h", ".hpp", ".c", ".cpp", ".cc"}


def main() -> int:
    clang_format, root = sys.argv[1], pathlib.Path(sys.argv[2])
    files = sorted(str(p) for d in DIRS for p in (root / d).rglob("*") if p.suffix in SUFFIXES)
    bad = []
    for f in files:
        r = subprocess.run([clang_format, "--dry-run", "--Werror", f], capture_output=True, text=True)
        if r.returncode != 0:
            bad.append(f)
    for f in bad:
        print(f"needs formatting: {pathlib.Path(f).relative_to(root)}  (run: make format)")
    print(f"format: {len(files)} files checked, {len(bad)} need formatting")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
