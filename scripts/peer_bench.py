#!/usr/bin/env python3
"""PyTorch eager and torch.compile on rcjit's built-in models, for a side-by-side table.

The same configs and input shapes as `rcjit bench` (toy64, gpt2, llama-3.2-1b with
--layers), seeded random weights, inference under torch.inference_mode(): per mode the
first call (tracing and compiling for torch.compile, with Inductor's cache directory fresh per
mode: cold compiles) and the median, IQR and minimum of
--reps timed calls after it, in ms. Not a test and not a dependency of anything: it needs
PyTorch (`pip install torch`) and is run by hand, e.g.

    OMP_NUM_THREADS=1 python3 scripts/peer_bench.py --model toy64 --batch 1 --seq 128
    python3 scripts/peer_bench.py --model gpt2 --layers 12 --batch 1 --seq 128 --reps 3

Modes: eager, full (torch.compile of the whole model), regional (torch.compile of each
repeated layer, the PyTorch recipe for regional compilation).

--train times training steps instead (cross-entropy on shifted synthetic tokens, backward,
AdamW with PyTorch's defaults at lr 1e-3, as `rcjit train`): modes eager, full, regional and
whole (torch.compile of one function that runs forward, backward and opt.step()); each mode
in a fresh model, with Inductor's cache directory fresh per mode (cold compiles). Rounds
alternate the modes (--rounds, each --reps steps after the first call); printed per mode:
the first step (compiling included), the minimum and the median step in ms. --dtype bf16
runs the forward and the loss under torch.autocast("cpu", bfloat16), as `rcjit train
--dtype bf16` runs them under Autocast(bf16), e.g.

    OMP_NUM_THREADS=2 python3 scripts/peer_bench.py --train --model gpt2 --layers 2 --batch 4
    OMP_NUM_THREADS=2 python3 scripts/peer_bench.py --train --model gpt2 --layers 2 --batch 4 \
        --modes eager,whole --dtype bf16

--device cuda runs the same on an NVIDIA GPU (model and inputs moved there, each call or step
followed by torch.cuda.synchronize(), as `rcjit bench --target cuda` synchronizes; bf16
autocast on "cuda"), for the GPU tables in docs/gpu.md, e.g.

    python3 scripts/peer_bench.py --device cuda --model gpt2 --modes eager,full --reps 20
"""
import argparse
import json
import math
import os
import statistics
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class ToyLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1 = nn.Linear(10, 10)
        self.linear2 = nn.Linear(10, 10)

    def forward(self, x):
        return torch.relu(self.linear2(torch.sigmoid(torch.relu(self.linear1(x)))))


class Toy(nn.Module):
    """Linear(10,10) then `layers` ToyLayers (rcjit's toy64)."""

    def __init__(self, layers):
        super().__init__()
        self.linear = nn.Linear(10, 10)
        self.layers = nn.ModuleList(ToyLayer() for _ in range(layers))

    def forward(self, x):
        x = self.linear(x)
        for layer in self.layers:
            x = layer(x)
        return x


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


class Gpt2Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.attn_proj = nn.Linear(hidden, hidden)
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.mlp_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=-1)
        split = lambda t: t.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
        x = x + self.attn_proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.mlp_proj(gelu_new(self.c_fc(self.ln_2(x))))


class Gpt2(nn.Module):
    """GPT-2 small (768 hidden, 12 heads, vocab 50257, context 1024), tied LM head."""

    def __init__(self, layers, hidden=768, heads=12, vocab=50257, context=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(context, hidden)
        self.layers = nn.ModuleList(Gpt2Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for layer in self.layers:
            x = layer(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class LlamaLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, intermediate):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.input_layernorm = nn.RMSNorm(hidden, eps=1e-5)
        self.post_attention_layernorm = nn.RMSNorm(hidden, eps=1e-5)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = self.input_layernorm(x)
        split = lambda t, n: t.view(b, s, n, self.head_dim).transpose(1, 2)
        q = rope(split(self.q_proj(h), self.heads), cos, sin)
        k = rope(split(self.k_proj(h), self.kv_heads), cos, sin)
        v = split(self.v_proj(h), self.kv_heads)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, s, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    """Llama-3.2-1B: 2048 hidden, 32/8 heads, SwiGLU 8192, vocab 128256, tied, rope 500000
    (the rope tables are computed once, outside the timed call, as rcjit's model does)."""

    def __init__(self, layers, seq, hidden=2048, heads=32, kv_heads=8, intermediate=8192,
                 vocab=128256, theta=500000.0):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            LlamaLayer(hidden, heads, kv_heads, intermediate) for _ in range(layers))
        self.norm = nn.RMSNorm(hidden, eps=1e-5)
        d = hidden // heads
        inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        return F.linear(self.norm(x), self.embed_tokens.weight)


def hf_init(model, residual_std):
    """Hugging Face's initialization, as rcjit's built-in models make theirs (models/): every
    linear and embedding weight N(0, 0.02), biases 0, norms 1; GPT-2's residual projections
    N(0, 0.02 / sqrt(2 * layers)). PyTorch's own defaults (N(0, 1) embeddings) start gpt2's
    loss near 500 instead of ln(50257) ~ 10.8, and its backward then runs on denormal floats:
    on an Intel host its steps grew from 1.0 s to 10 s within eight steps."""
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                std = residual_std if name.endswith(("attn_proj", "mlp_proj")) else 0.02
                m.weight.normal_(0.0, std)
                if getattr(m, "bias", None) is not None:
                    m.bias.zero_()
    return model


def build(name, layers, seq):
    if name == "toy64":
        return Toy(64 if layers < 0 else layers), 10
    if name == "gpt2":
        n = 12 if layers < 0 else layers
        return hf_init(Gpt2(n), 0.02 / math.sqrt(2 * n)), 50257
    if name == "llama-3.2-1b":
        return hf_init(Llama(16 if layers < 0 else layers, seq), 0.02), 128256
    raise SystemExit(f"unknown model {name} (toy64, gpt2, llama-3.2-1b)")


def inputs(name, vocab, batch, seq):
    g = torch.Generator().manual_seed(0)
    if name == "toy64":
        return torch.randn(batch, seq, 10, generator=g)
    return torch.randint(0, vocab, (batch, seq), generator=g)


def sync():
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def time_mode(model, x, mode, reps):
    if mode == "full":
        fn = torch.compile(model)
    elif mode == "regional":
        for layer in model.layers:
            layer.compile()
        fn = model
    else:
        fn = model
    with torch.inference_mode():
        t0 = time.perf_counter()
        fn(x)
        sync()
        first = (time.perf_counter() - t0) * 1e3
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(x)
            sync()
            samples.append((time.perf_counter() - t0) * 1e3)
    q = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return first, statistics.median(samples), q[2] - q[0], min(samples)


def train_modes(a):
    if a.model == "toy64":
        raise SystemExit("--train: gpt2 or llama-3.2-1b (toy64 has no tokens to predict)")
    batch = int(a.batch.split(",")[-1])
    modes = [m for m in a.modes.split(",")]
    runs = {}
    for mode in modes:  # each mode its own model, optimizer and cold Inductor cache
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"inductor-{mode}-")
        torch.manual_seed(0)
        model, vocab = build(a.model, a.layers, a.seq)
        model.to(a.device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, vocab, (batch, a.seq + 1), generator=g).to(a.device)
        x, y = ids[:, :-1], ids[:, 1:]

        def loss_fn(m, x=x, y=y, vocab=vocab):
            # --dtype bf16: the forward and the loss under autocast (as `rcjit train
            # --dtype bf16`: matmuls and linears in bf16, parameters, gradients and the
            # optimizer state in f32)
            with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
                return F.cross_entropy(m(x).reshape(-1, vocab), y.reshape(-1))

        if mode == "whole":
            def step(m=model, o=opt):
                o.zero_grad(set_to_none=True)
                loss = loss_fn(m)
                loss.backward()
                o.step()
                return loss.detach()
            fn = torch.compile(step)
        else:
            if mode == "full":
                fwd = torch.compile(model)
            elif mode == "regional":
                for layer in model.layers:
                    layer.compile()
                fwd = model
            else:
                fwd = model

            def fn(m=fwd, o=opt):
                o.zero_grad(set_to_none=True)
                loss = loss_fn(m)
                loss.backward()
                o.step()
                return loss.detach()
        t0 = time.perf_counter()
        fn()
        sync()
        runs[mode] = {"fn": fn, "first": (time.perf_counter() - t0) * 1e3, "steps": []}
    for _ in range(a.rounds):  # interleaved rounds
        for mode in modes:
            for _ in range(a.reps):
                t0 = time.perf_counter()
                runs[mode]["fn"]()
                sync()
                runs[mode]["steps"].append((time.perf_counter() - t0) * 1e3)
    print(f"{a.model} training ({a.dtype}), torch {torch.__version__}, {where(a)}, "
          f"batch {batch} x {a.seq}, {a.rounds} interleaved rounds of {a.reps} steps; ms")
    print(f"{'mode':10} | {'first step':>10} | {'min':>9} {'median':>9}")
    for mode in modes:
        st = runs[mode]["steps"]
        print(f"{mode:10} | {runs[mode]['first']:10.1f} | {min(st):9.1f} "
              f"{statistics.median(st):9.1f}", flush=True)
    if a.json:  # for scripts/train_peer.py
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "model": a.model, "layers": a.layers,
                       "batch": batch, "seq": a.seq, "dtype": a.dtype, "where": where(a),
                       "modes": {m: {"first_ms": runs[m]["first"], "step_ms": runs[m]["steps"]}
                                 for m in modes}}, f)


def where(a):
    if a.device == "cuda":
        return torch.cuda.get_device_name()
    return f"{torch.get_num_threads()} threads"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="toy64")
    p.add_argument("--modes", default="eager,full,regional")
    p.add_argument("--batch", default="1,4")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--layers", type=int, default=-1)
    p.add_argument("--train", action="store_true", help="time AdamW training steps per mode")
    p.add_argument("--rounds", type=int, default=3, help="--train: interleaved rounds")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16"],
                   help="--train: bf16 runs the forward and loss under torch.autocast (bf16)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--json", help="--train: also write every step time per mode to FILE")
    a = p.parse_args()
    if a.train:
        if a.modes == "eager,full,regional":
            a.modes = "eager,full,regional,whole"
        return train_modes(a)
    torch.manual_seed(0)
    print(f"{a.model}: torch {torch.__version__}, {where(a)}, "
          f"seq {a.seq}, {a.reps} timed calls per row after the first; times in ms")
    print(f"{'mode':10} | {'batch':7} | {'median':>9} {'IQR':>9} {'min':>9} | {'first call':>10}")
    for batch in (int(b) for b in a.batch.split(",")):
        for mode in a.modes.split(","):
            torch._dynamo.reset()
            # a cold start: Inductor's caches (compiled kernels, FX graphs) fresh per row
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"inductor-{mode}-")
            model, vocab = build(a.model, a.layers, a.seq)
            model.eval().to(a.device)
            x = inputs(a.model, vocab, batch, a.seq).to(a.device)
            first, med, iqr, lo = time_mode(model, x, mode, a.reps)
            print(f"{mode:10} | {batch}x{a.seq:<5} | {med:9.3f} {iqr:9.3f} {lo:9.3f} | "
                  f"{first:10.1f}", flush=True)


if __name__ == "__main__":
    main()
