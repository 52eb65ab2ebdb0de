#!/usr/bin/env python3
"""onnxruntime beside `rcjit run` (and rcjit's own nn model) on the same exported ONNX files.

Exports (once, into --work) transformers models with seeded random weights the way
scripts/onnx_fixtures.py does (dynamo exporter, dynamic batch/seq, external data), then for
each model and shape runs interleaved rounds of:

  ort      onnxruntime (CPUExecutionProvider, intra_op_num_threads=--threads, inter_op 1):
           session creation, the first run, then --reps runs
  rcjit    `OMP_NUM_THREADS=--threads rcjit run MODEL --mode M` in a fresh process with an
           empty compile cache: load, first call (trace + compile), then --reps calls; its
           outputs checked against onnxruntime's (--expected, rtol 2e-3)
  nn       for gpt2-*: `rcjit bench --model gpt2 --layers N` (rcjit's own GPT-2 written with
           its nn API, same sizes) in full mode; rcjit's models/ has no BERT

and prints min and median over rounds of each figure (ms). Not a test and not a dependency:
run by hand with the venv that has torch, transformers, onnx and onnxruntime, e.g.

    python3 scripts/onnx_peer_bench.py --rcjit build/rcjit \\
        --models bert-4,gpt2-4 --shapes 1x128,8x128 --rounds 3 --reps 10
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# name -> (kind, layers, hidden, heads, intermediate, vocab, positions); "fixture-*" are the
# committed files of tests/data/onnx.
MODELS = {
    "bert-4": ("bert", 4, 768, 12, 3072, 30522, 512),
    "bert-12": ("bert", 12, 768, 12, 3072, 30522, 512),
    "gpt2-4": ("gpt2", 4, 768, 12, 3072, 50257, 1024),
    "gpt2-12": ("gpt2", 12, 768, 12, 3072, 50257, 1024),
}


def model_path(name, work):
    if name.startswith("fixture-"):
        return os.path.join(ROOT, "tests", "data", "onnx", name[len("fixture-"):], "model.onnx")
    path = os.path.join(work, name, "model.onnx")
    if os.path.exists(path):
        return path
    import onnx_fixtures  # torch and transformers: only when a model must be exported
    kind, layers, hidden, heads, inter, vocab, pos = MODELS[name]
    a = argparse.Namespace(seed=31, layers=layers, hidden=hidden, heads=heads,
                           intermediate=inter, vocab=vocab, positions=pos, sdpa=False)
    model, _ = onnx_fixtures.build(kind, a, work, dynamo=True)
    os.rename(os.path.join(work, kind), os.path.join(work, name))
    return path


def ort_round(path, feeds, threads, reps):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    t0 = time.perf_counter()
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    create = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    outs = sess.run(None, feeds)
    first = (time.perf_counter() - t0) * 1e3
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        samples.append((time.perf_counter() - t0) * 1e3)
    names = [o.name for o in sess.get_outputs()]
    return {"create": create, "first": first, "median": statistics.median(samples),
            "min": min(samples)}, dict(zip(names, outs))


def rcjit_run(rcjit, path, inputs, expected, mode, threads, reps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory(prefix="rcjit-onnx-bench-") as cache:
        env["RCJIT_CACHE_DIR"] = cache  # cold: an empty compile cache per round
        cmd = [rcjit, "run", path, "--mode", mode, "--reps", str(reps), "--expected", expected]
        for name, file in inputs.items():
            cmd += ["--input", f"{name}={file}"]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    load = float(re.search(r"loaded in ([\d.]+) ms", p.stdout).group(1))
    m = re.search(r"first call ([\d.]+) ms(?: \(tracing \+ compiling ([\d.]+) ms)?", p.stdout)
    steady = re.search(r"median ([\d.]+) ms, min ([\d.]+) ms", p.stdout)
    return {"load": load, "first": float(m.group(1)), "compile": float(m.group(2) or 0),
            "median": float(steady.group(1)), "min": float(steady.group(2))}


def nn_bench(rcjit, layers, batch, seq, threads, reps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory(prefix="rcjit-onnx-bench-") as tmp:
        out = os.path.join(tmp, "b.json")
        cmd = [rcjit, "bench", "--model", "gpt2", "--layers", str(layers), "--modes", "full",
               "--batch", str(batch), "--seq", str(seq), "--reps", str(reps), "--json", out]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout}{p.stderr}")
        r = json.load(open(out))["results"][0]
    return {"first": r["first_call_ms"], "compile": r["compile_ms"],
            "median": statistics.median(r["samples_ms"]), "min": min(r["samples_ms"])}


def summary(rounds, key):
    v = [r[key] for r in rounds]
    return f"{min(v):9.2f} {statistics.median(v):9.2f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rcjit", default=os.path.join(ROOT, "build", "rcjit"))
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "rcjit-onnx-bench"))
    p.add_argument("--models", default="bert-4,gpt2-4")
    p.add_argument("--shapes", default="1x128,8x128")
    p.add_argument("--modes", default="full", help="rcjit run modes: eager, full, regional")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    print(f"onnxruntime {ort.__version__}, {a.threads} threads, {a.rounds} interleaved rounds, "
          f"{a.reps} timed calls per round after the first; min and median over rounds, ms")
    rng = np.random.default_rng(0)
    for name in a.models.split(","):
        path = model_path(name, a.work)
        kind = "gpt2" if "gpt2" in name else "bert"
        vocab = MODELS[name][5] if name in MODELS else 100
        positions = MODELS[name][6] if name in MODELS else 64  # the fixtures: 64 positions
        for shape in a.shapes.split(","):
            batch, seq = (int(x) for x in shape.split("x"))
            if seq > positions:
                print(f"\n{name} {shape}: skipped, the model has {positions} positions")
                continue
            d = os.path.join(a.work, f"{name}-{shape}")
            os.makedirs(os.path.join(d, "expected"), exist_ok=True)
            feeds = {"input_ids": rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)}
            if kind == "bert":
                feeds["attention_mask"] = np.ones((batch, seq), dtype=np.int64)
            files = {}
            for n, v in feeds.items():
                files[n] = os.path.join(d, n + ".npy")
                np.save(files[n], v)
            rows = {"ort": []}
            for _ in range(a.rounds):
                r, outs = ort_round(path, feeds, a.threads, a.reps)
                rows["ort"].append(r)
                for n, v in outs.items():
                    np.save(os.path.join(d, "expected", n + ".npy"), v)
                for mode in a.modes.split(","):
                    rows.setdefault("rcjit " + mode, []).append(
                        rcjit_run(a.rcjit, path, files, os.path.join(d, "expected"), mode,
                                  a.threads, a.reps))
                if kind == "gpt2" and name in MODELS:
                    rows.setdefault("rcjit nn gpt2 full", []).append(
                        nn_bench(a.rcjit, MODELS[name][1], batch, seq, a.threads, a.reps))
            print(f"\n{name} {shape} ({path})")
            print(f"{'':22}| {'steady min':>9} {'median':>9} | {'first min':>9} {'median':>9} "
                  f"| {'setup min':>9} {'median':>9}  setup = session creation / load")
            base = statistics.median(r["median"] for r in rows["ort"])
            for who, rs in rows.items():
                setup = summary(rs, "create" if who == "ort" else "load") if who == "ort" or \
                    "load" in rs[0] else f"{'-':>9} {'-':>9}"
                ratio = base / statistics.median(r["median"] for r in rs)
                print(f"{who:22}| {summary(rs, 'median')} | {summary(rs, 'first')} | {setup}"
                      f"  ort/this {ratio:.2f}x")
            print("steady: each round's median of its timed calls; first: the first call "
                  "(rcjit: tracing + compiling + running)")


if __name__ == "__main__":
    main()
