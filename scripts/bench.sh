#!/usr/bin/env bash
# Quick start 1: build rcjit and run the main job, `rcjit bench` on the built-in toy64 model.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/build.sh" --target rcjit-cli
"$root/build/rcjit" bench --model toy64 --modes eager,full,regional --batch 1,4 "$@"
