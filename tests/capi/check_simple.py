#!/usr/bin/env python3
"""examples/simple prints what `h2okv generate` prints on stdout, byte for byte, for each policy given.

Usage: check_simple.py SIMPLE H2OKV MODEL PROMPT N SPEC:CLI_FLAGS...
Each SPEC:CLI_FLAGS pair is simple's --kv spec and the same policy as h2okv generate's flags, separated by
' :: ' ("h2o:budget=0.2,decay=0.98 :: --kv-policy h2o --kv-budget 0.2 --kv-decay 0.98"; "full :: " for none).
"""
import shlex
import subprocess
import sys


def main() -> int:
    simple, cli, model, prompt, n, *pairs = sys.argv[1:]
    failures = 0
    for pair in pairs:
        spec, flags = (s.strip() for s in pair.split("::"))
        a = subprocess.run([simple, "-m", model, "-p", prompt, "-n", n, "--kv", spec], capture_output=True)
        b = subprocess.run([cli, "generate", "-m", model, "-p", prompt, "-n", n, *shlex.split(flags)],
                           capture_output=True)
        if a.returncode != 0 or b.returncode != 0:
            print(f"{spec}: simple exited {a.returncode} ({a.stderr.decode(errors='replace').strip()}), "
                  f"h2okv generate {b.returncode} ({b.stderr.decode(errors='replace').strip()})")
            failures += 1
            continue
        # The run must have generated something past the prompt, or the comparison proves little.
        if len(a.stdout) <= len(prompt.encode()) + 1:
            print(f"{spec}: simple printed only the prompt: {a.stdout!r}")
            failures += 1
        elif a.stdout != b.stdout:
            print(f"{spec}: simple and h2okv generate differ\n  simple:   {a.stdout!r}\n  generate: {b.stdout!r}")
            failures += 1
        else:
            print(f"{spec}: {len(a.stdout)} bytes identical; {a.stderr.decode().strip().splitlines()[-1]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
