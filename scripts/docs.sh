#!/usr/bin/env bash
# The API reference and the docs' own checks: configures ./build (again, so that a Doxygen
# installed after the first configure is found), builds the `docs` target (Doxygen over
# include/rcjit/, any warning an error; HTML in build/docs/html), checks that README.md stays
# within 400 lines and that every relative link of README.md and docs/*.md resolves.
# Needs Doxygen: `bash scripts/deps.sh docs`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v doxygen >/dev/null || { echo "docs: doxygen not found (bash scripts/deps.sh docs)" >&2; exit 1; }
cmake -S . -B build -G Ninja >/dev/null
cmake --build build --target docs
lines=$(wc -l < README.md)
if ((lines > 400)); then
  echo "docs: README.md has $lines lines, at most 400: move the detail into a guide under docs/" >&2
  exit 1
fi
python3 scripts/check_links.py README.md CONTRIBUTING.md ARCHITECTURE.md docs/*.md
echo "docs: API reference in build/docs/html/index.html; README.md $lines lines; links resolve" >&2
