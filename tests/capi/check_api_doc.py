#!/usr/bin/env python3
"""docs/API.md's C example compiles against libh2okv_policy.so and prints the output the page shows.

Usage: check_api_doc.py CC INCLUDE_DIR LIB_DIR API_MD [CC_FLAG...]   (the sanitizer flags of a sanitized build)
Takes the page's ```c block and the ```text block after it; compiles the first as C99 with warnings as
errors, runs it and compares its stdout with the second.
"""
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    cc, include, libdir, page, *flags = sys.argv[1:]
    flags = [f for f in flags if f]  # an unset generator expression passes an empty argument
    text = Path(page).read_text(encoding="utf-8")
    m = re.search(r"```c\n(.*?)```\n\n```text\n(.*?)```", text, re.S)
    if not m:
        print(f"{page}: no ```c block followed by a ```text block")
        return 1
    source, expected = m.groups()
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "example.c", Path(tmp) / "example"
        src.write_text(source, encoding="utf-8")
        build = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-DH2OKV_POLICY_ONLY", *flags,
                                f"-I{include}", str(src), "-o", str(exe), f"-L{libdir}", "-lh2okv_policy",
                                f"-Wl,-rpath,{libdir}"], capture_output=True, text=True)
        if build.returncode != 0:
            print(f"{page}: the example does not compile:\n{build.stderr}")
            return 1
        run = subprocess.run([str(exe)], capture_output=True, text=True)
    if run.returncode != 0 or run.stdout != expected:
        print(f"{page}: the example exited {run.returncode} and printed\n{run.stdout}{run.stderr}"
              f"instead of\n{expected}")
        return 1
    print(f"{page}: the example prints the {len(expected.splitlines())} lines shown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
