#!/usr/bin/env python3
"""rcjit's compiled training step against torch.compile's, interleaved, as one markdown table.

The side-by-side run of docs/performance.md's training tables in one command: per
configuration (layers and dtype of a built-in model) and round, `rcjit train` runs, then
`scripts/peer_bench.py --train` (PyTorch, cold Inductor cache), then `rcjit train` again, so a
machine that drifts between minutes shows up as two rcjit figures around one PyTorch figure
instead of a ratio that is the drift. Printed per configuration: PyTorch's median (min) step
per mode, rcjit's per run, the ratio range (PyTorch's median over each rcjit median, and the
same for the mins) and rcjit's peak memory per mode in later steps. Not a test and not a
dependency of anything: it needs a built build/rcjit and PyTorch (`pip install torch`), and
is run by hand (a note follows the table where rcjit's work pool found the machine busy and
packed its threads), e.g.

    python3 scripts/train_peer.py                       # gpt2, 2 and 12 layers, f32 and bf16
    python3 scripts/train_peer.py --configs 2:bf16 --rounds 3
    python3 scripts/train_peer.py --rcjit-modes full,whole --torch-modes eager,whole

Both sides run with OMP_NUM_THREADS=--threads (default: every CPU this process may use).
--json FILE also writes every step time of every run.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_line():
    model, flags = platform.processor() or "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = ("AMX" if "amx_bf16" in flags else "AVX-512" if "avx512f" in flags
           else "AVX2" if "avx2" in flags else "no AVX2")
    if "avx512_bf16" in flags and isa == "AVX-512":
        isa += " with avx512_bf16"
    return f"{model}, {isa}"


def run(cmd, env):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"train_peer: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-3000:]}")


def rcjit_run(a, layers, dtype, env, work):
    out = os.path.join(work, f"rcjit-{layers}-{dtype}-{time.monotonic_ns()}.json")
    run([a.rcjit, "train", "--model", a.model, "--layers", str(layers), "--modes", a.rcjit_modes,
         "--batch", str(a.batch), "--seq", str(a.seq), "--steps", str(a.steps), "--dtype", dtype,
         "--json", out], env)
    with open(out) as f:
        d = json.load(f)
    res = {}
    for r in d["results"]:
        st = r["train_step_ms_stats"]
        res[r["mode"]] = {"median": st["median"], "min": st["min"], "steps": r["step_ms"],
                          "peak_mib": r["later_steps_peak_mib"],
                          "packed_jobs": r.get("pool_packed_jobs", 0),
                          "jobs": r.get("pool_jobs", 0)}
    return res


def torch_run(a, layers, dtype, env, work):
    out = os.path.join(work, f"torch-{layers}-{dtype}-{time.monotonic_ns()}.json")
    run([sys.executable, os.path.join(ROOT, "scripts", "peer_bench.py"), "--train",
         "--model", a.model, "--layers", str(layers), "--batch", str(a.batch), "--seq",
         str(a.seq), "--modes", a.torch_modes, "--reps", str(a.reps), "--rounds", "1",
         "--dtype", dtype, "--json", out], env)
    with open(out) as f:
        d = json.load(f)
    res = {}
    for mode, m in d["modes"].items():
        res[mode] = {"median": statistics.median(m["step_ms"]), "min": min(m["step_ms"]),
                     "steps": m["step_ms"], "first_ms": m["first_ms"]}
    return res, d["torch"]


def fmt(x):
    return f"{x:,.0f}".replace(",", " ")


def ratio_range(values):
    lo, hi = min(values), max(values)
    return f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"


def table(a, rows, torch_version):
    print(f"\n{a.model}, batch {a.batch} x {a.seq}, AdamW; {cpu_line()}; "
          f"OMP_NUM_THREADS={a.threads}; PyTorch {torch_version}; ms, median (min) of the "
          f"later steps; each configuration ran rcjit, PyTorch, rcjit, {a.rounds} round(s)\n")
    ref = a.torch_modes.split(",")[-1]
    mine = a.rcjit_modes.split(",")[-1]
    print(f"| layers, dtype | torch.compile {ref} | rcjit {mine} | ratio, median (min) | "
          f"rcjit peak MiB ({', '.join(a.rcjit_modes.split(','))}) |")
    print("| --- | --- | --- | --- | --- |")
    for (layers, dtype), rounds in rows.items():
        for i, (t, r1, r2) in enumerate(rounds):
            label = f"{layers}, {dtype}" + (f", round {i + 1}" if len(rounds) > 1 else "")
            ours = [r1[mine], r2[mine]]
            med = ratio_range([t[ref]["median"] / o["median"] for o in ours])
            mn = ratio_range([t[ref]["min"] / o["min"] for o in ours])
            peaks = ", ".join(f"{r1[m]['peak_mib']:.1f}" for m in a.rcjit_modes.split(","))
            print(f"| {label} | {fmt(t[ref]['median'])} ({fmt(t[ref]['min'])}) | "
                  + ", ".join(f"{fmt(o['median'])} ({fmt(o['min'])})" for o in ours)
                  + f" | {med} ({mn}) | {peaks} |")
    for (layers, dtype), rounds in rows.items():
        for i, (_, r1, r2) in enumerate(rounds):
            for k, r in enumerate((r1, r2)):
                if r[mine]["packed_jobs"] > 0:
                    print(f"\nnote: {layers}, {dtype}, round {i + 1}, rcjit run {k + 1}: the work "
                          f"pool packed its threads for {r[mine]['packed_jobs']} of "
                          f"{r[mine]['jobs']} jobs (other tasks kept every CPU busy)")
    others = [m for m in a.torch_modes.split(",") if m != ref]
    if others:
        print(f"\nPyTorch's other modes, median (min): " + "; ".join(
            f"{layers}, {dtype} " + ", ".join(
                f"{m} {fmt(t[m]['median'])} ({fmt(t[m]['min'])})" for m in others)
            for (layers, dtype), rounds in rows.items() for t, _, _ in rounds))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2")
    p.add_argument("--configs", default="2:f32,2:bf16,12:f32,12:bf16",
                   help="comma list of LAYERS:DTYPE (dtype f32 or bf16)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--steps", type=int, default=6, help="rcjit train --steps (first excluded)")
    p.add_argument("--reps", type=int, default=4, help="PyTorch steps timed after the first")
    p.add_argument("--rcjit", default=os.path.join(ROOT, "build", "rcjit"))
    p.add_argument("--rcjit-modes", default="whole", help="the last one is the table's")
    p.add_argument("--torch-modes", default="whole", help="the last one is the table's")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--json", help="also write every run's step times to FILE")
    a = p.parse_args()
    if not os.access(a.rcjit, os.X_OK):
        sys.exit(f"train_peer: {a.rcjit} not built (run scripts/build.sh)")
    configs = []
    for c in a.configs.split(","):
        layers, _, dtype = c.partition(":")
        if not layers.isdigit() or dtype not in ("f32", "bf16"):
            sys.exit(f"train_peer: bad --configs entry '{c}' (want LAYERS:f32 or LAYERS:bf16)")
        configs.append((int(layers), dtype))
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    rows, version = {}, "?"
    with tempfile.TemporaryDirectory(prefix="train_peer-") as work:
        for _ in range(a.rounds):
            for layers, dtype in configs:
                print(f"train_peer: {a.model} {layers} layers {dtype} ...", file=sys.stderr,
                      flush=True)
                r1 = rcjit_run(a, layers, dtype, env, work)
                t, version = torch_run(a, layers, dtype, env, work)
                r2 = rcjit_run(a, layers, dtype, env, work)
                rows.setdefault((layers, dtype), []).append((t, r1, r2))
    table(a, rows, version)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": cpu_line(), "threads": a.threads, "torch": version,
                       "runs": [{"layers": l, "dtype": d, "torch": t, "rcjit": [r1, r2]}
                                for (l, d), rounds in rows.items() for t, r1, r2 in rounds]},
                      f, indent=1)


if __name__ == "__main__":
    main()
