#!/usr/bin/env bash
# Regenerates the malformed-file table of docs/ROBUSTNESS.md from the CLI robustness test: every malformed
# model the test makes, run through `h2okv generate` and `h2okv info`, with generate's message.
#
#   scripts/robustness_table.sh [build dir, default build/ci]   # after building test_unit_tools and h2okv there
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/ci}
table=$(mktemp)
trap 'rm -f "$table"' EXIT
H2OKV_ROBUSTNESS_TABLE=$table "$build/tests/test_unit_tools" --gtest_filter='cli/malformed_model.*' >/dev/null
/usr/bin/python3 - "$table" docs/ROBUSTNESS.md <<'PY'
import sys
rows = open(sys.argv[1]).read()
doc_path = sys.argv[2]
doc = open(doc_path).read()
begin, end = "<!-- malformed-table:begin -->\n", "<!-- malformed-table:end -->"
head = ("| case | defect | `generate` exit | `info` exit | message (`generate`, stderr) |\n"
        "|---|---|---|---|---|\n")
i, j = doc.index(begin) + len(begin), doc.index(end)
open(doc_path, "w").write(doc[:i] + head + rows + doc[j:])
print(f"{doc_path}: {rows.count(chr(10))} rows")
PY
