#!/usr/bin/env bash
# Every model of `rcjit models`, inference, eager vs full vs regional, one after the other in
# one sitting: the check that a compiled function never loses to eager (the "vs eager"
# column of each table). Models run at their full depth where the machine's memory holds
# them (f32 weights plus room for activations); deeper ones are cut to the layers that fit,
# and the table's title says the depth run.
#
#   scripts/models_bench.sh [--reps N] [--seq S] [any other `rcjit bench` flag]
#
# Needs a built build/rcjit (scripts/build.sh). Prints each model's `rcjit bench` table.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rcjit="$root/build/rcjit"
[[ -x "$rcjit" ]] || { echo "models_bench: $rcjit not built (run scripts/build.sh)" >&2; exit 2; }

avail_kb=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
# model and the batches run (at seq 128, the bench shapes of docs/performance.md)
models=(
  "toy64 1,4"
  "gpt2 1,4"
  "vit-gpt2 1"
  "gpt2-xl 1"
  "llama-3.2-1b 1"
  "llama-3.2-3b 1"
  "llama-3.1-8b 1"
  "llama-2-13b 1"
)
for spec in "${models[@]}"; do
  read -r model batches <<<"$spec"
  # the model's size and depth from `rcjit models`, to decide how many layers fit in 2/3
  # of the available memory (eager and compiled share the weights; activations need room)
  line=$("$rcjit" models | awk -v m="$model" '$1 == m')
  params=$(awk '{print $2}' <<<"$line")
  layers=$(grep -o '[0-9]* layers' <<<"$line" | head -1 | awk '{print $1}' || true)
  depth=()
  if [[ -n "$layers" ]]; then
    need_kb=$((params * 4 / 1024))
    budget_kb=$((avail_kb * 2 / 3))
    if ((need_kb > budget_kb)); then
      fit=$((layers * budget_kb / need_kb))
      ((fit < 1)) && fit=1
      depth=(--layers "$fit")
    fi
  fi
  echo "=== $model ${depth[*]:-(full depth)}"
  "$rcjit" bench --model "$model" --batch "$batches" --seq 128 --modes eager,full,regional \
    --reps 3 "${depth[@]}" "$@"
done
