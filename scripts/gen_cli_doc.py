#!/usr/bin/env python3
"""Writes docs/CLI.md from the h2okv binary's own --help texts, so the document cannot drift from the code.

Usage: gen_cli_doc.py H2OKV_BINARY [--check] [OUT]   (OUT defaults to docs/CLI.md next to this script's repo)
--check: exit 1 (printing what to run) when OUT differs from what the binary prints.
"""
import pathlib
import re
import subprocess
import sys


def help_text(binary, *args):
    out = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, check=True).stdout
    out = re.sub(r"\(default: [^)]*/models/stories260K\.gguf\)", "(default: the bundled models/stories260K.gguf)", out)
    out = re.sub(r"TEXT:FILE \[[^\]]*\]", "TEXT:FILE", out)
    out = re.sub(r"Usage: \S*h2okv", "Usage: h2okv", out)
    # Absolute paths of this checkout are not part of the interface.
    # Defaults found relative to the binary (tools/h2okv/resources.cpp): its share/h2okv/ folder.
    out = re.sub(r"(?<=[\s=])/\S*/share/h2okv/", r"<share>/h2okv/", out)
    return re.sub(r"(?<=[\s=])/\S*/(models|\.\./shared)/", r"<repo>/\1/", out).rstrip() + "\n"


def subcommands(main_help):
    names, in_section = [], False
    for line in main_help.splitlines():
        if line.strip().lower().startswith("subcommands"):
            in_section = True
            continue
        if in_section:
            m = re.match(r"\s+(\S+)\s", line + " ")
            if m:
                names.append(m.group(1))
            elif line.strip() == "":
                continue
            else:
                break
    return names


def render(binary):
    main = help_text(binary)
    parts = ["# h2okv command line", "",
             "Generated from the binary's `--help` by `scripts/gen_cli_doc.py` (the `cli_doc` test fails when this",
             "file is stale; regenerate with `make cli-doc`).", "", "```", main.rstrip(), "```", ""]
    for name in subcommands(main):
        parts += [f"## h2okv {name}", "", "```", help_text(binary, name).rstrip(), "```", ""]
        sub = help_text(binary, name)
        for nested in subcommands(sub):
            parts += [f"### h2okv {name} {nested}", "", "```", help_text(binary, name, nested).rstrip(), "```", ""]
    return "\n".join(parts)


def main():
    binary = sys.argv[1]
    check = "--check" in sys.argv[2:]
    rest = [a for a in sys.argv[2:] if a != "--check"]
    out = pathlib.Path(rest[0]) if rest else pathlib.Path(__file__).resolve().parent.parent / "docs" / "CLI.md"
    text = render(binary)
    if check:
        if not out.exists() or out.read_text(encoding="utf-8") != text:
            print(f"{out} is stale: run `make cli-doc` (scripts/gen_cli_doc.py {binary})")
            return 1
        print(f"{out} is current")
        return 0
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
