#!/usr/bin/env bash
# Quick start 2: build rcjit and run every test (CTest; GPU tests skip without a device).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/build.sh"
ctest --test-dir "$root/build" --output-on-failure -j "$(nproc)" "$@"
