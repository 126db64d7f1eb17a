#!/usr/bin/env python3
"""`cmake --install --component python` into a fresh prefix puts a module that Debian's python3 imports from
the prefix's Python path (H2OKV_PYTHON_INSTALL_DIR), and that runs.

Usage: install_test.py CMAKE BUILD_DIR INSTALL_DIR   (INSTALL_DIR: relative to the prefix, as configured)
"""
import os
import pathlib
import subprocess
import sys
import tempfile


def main() -> int:
    cmake, build, rel = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as prefix:
        subprocess.run([cmake, "--install", build, "--prefix", prefix, "--component", "python"], check=True,
                       stdout=subprocess.DEVNULL)
        site = pathlib.Path(prefix) / rel
        installed = sorted(p.name for p in pathlib.Path(prefix).rglob("*") if p.is_file())
        if not any(n.startswith("h2okv.") and n.endswith(".so") for n in installed) or not site.is_dir():
            print(f"install_test: expected the module in {site}, the prefix holds {installed}")
            return 1
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = str(site)
        code = ("import h2okv, numpy as np; print(h2okv.__file__); "
                "print(h2okv.simulate('window:budget=2', np.zeros((4, 4)))[-1].tolist())")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        lines = r.stdout.split("\n")
        if r.returncode != 0 or not lines[0].startswith(str(site)) or lines[1] != "[2, 3]":
            print(f"install_test: the installed module did not run from {site}:\n{r.stdout}{r.stderr}")
            return 1
        print(f"install_test: {lines[0]} imported and ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
