#!/usr/bin/env python3
"""Linear GEMMs: PyTorch's F.linear against rcjit and GEMM libraries, interleaved rounds.

Each round runs, per candidate, every shape --reps times (after one warm-up call) and keeps
that round's minimum; candidates alternate within a round, so a loaded or drifting machine
hits them alike. Printed per shape and candidate: the minimum over all rounds and the
median of the rounds' minima, in ms, and GFLOP/s at the minimum. PyTorch runs in this
process; the others are `gemm_libs` binaries (bench/gemm_libs.cpp) run as subprocesses, one
per candidate and round. Not a test and not a dependency of anything; run by hand, e.g.

    OMP_NUM_THREADS=2 python3 scripts/peer_gemm.py --dtype f32,bf16 \\
        --bin rcjit=build/bench/gemm_libs:rcjit --bin dnnl2.6=build/bench/gemm_libs:dnnl

--bin NAME=PATH:LIB adds a candidate (LIB is gemm_libs' first argument: dnnl, dnnl-packed,
mkl, mkl-packed, rcjit, rcjit-compiled).
"""
import argparse
import os
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

SHAPES = [(512, 768, 50257), (512, 768, 3072), (512, 3072, 768), (128, 2048, 8192)]


def torch_round(shape, dtype, reps):
    m, k, n = shape
    x = torch.randn(m, k).to(dtype)
    w = torch.randn(n, k).to(dtype)
    with torch.inference_mode():
        F.linear(x, w)
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            F.linear(x, w)
            best = min(best, (time.perf_counter() - t0) * 1e3)
    return best


def bin_round(path, lib, dtype, reps, shapes):
    arg = [f"{m},{k},{n}" for m, k, n in shapes]
    out = subprocess.run([path, lib, dtype, str(reps)] + arg, check=True, capture_output=True,
                         text=True).stdout
    best = {}
    for line in out.splitlines():
        f = line.split()
        best[(int(f[0]), int(f[1]), int(f[2]))] = float(f[3])
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="f32,bf16")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--bin", action="append", default=[],
                   help="NAME=PATH:LIB, a gemm_libs binary and the library it runs")
    p.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                   help="MxKxN,... (default: issue 35's shapes)")
    a = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    bins = []
    for spec in a.bin:
        name, rest = spec.split("=", 1)
        path, lib = rest.rsplit(":", 1)
        bins.append((name, path, lib))
    threads = int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads()))
    torch.set_num_threads(threads)
    print(f"torch {torch.__version__}, {threads} threads, {a.rounds} interleaved rounds of "
          f"{a.reps} calls; ms: min over rounds / median of round minima; GFLOP/s at the min")
    for dt in a.dtype.split(","):
        tdt = {"f32": torch.float32, "bf16": torch.bfloat16}[dt]
        samples = {}  # (candidate, shape) -> [round minima]
        for _ in range(a.rounds):
            for s in shapes:
                samples.setdefault(("torch", s), []).append(torch_round(s, tdt, a.reps))
            for name, path, lib in bins:
                for s, ms in bin_round(path, lib, dt, a.reps, shapes).items():
                    samples.setdefault((name, s), []).append(ms)
        names = ["torch"] + [b[0] for b in bins]
        print(f"\n{dt}: " + " | ".join(names) + "   (ratio: candidate GFLOP/s / torch's, at the min)")
        for s in shapes:
            m, k, n = s
            flop = 2.0 * m * k * n
            tmin = min(samples[("torch", s)])
            cells = []
            for nm in names:
                v = samples[(nm, s)]
                lo, med = min(v), statistics.median(v)
                cells.append(f"{nm} {lo:.1f}/{med:.1f} ms {flop / lo / 1e6:.0f} GF/s "
                             f"{tmin / lo:.2f}x")
            print(f"{m}x{k}x{n}: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
