#!/usr/bin/env python3
# Writes PyTorch reference gradients of tiny gpt2 and llama models: tests/data/grad_*.safetensors.
#
# Rerun (from the repository root; torch from PyPI, any recent version; nothing else):
#     python3 -m venv /tmp/venv-torch && /tmp/venv-torch/bin/pip install torch
#     /tmp/venv-torch/bin/python scripts/reference_grads.py
# With transformers installed as well (`pip install transformers`), `--check-hf` also runs
# Hugging Face's GPT2LMHeadModel and LlamaForCausalLM on the same weights and checks that
# the models below agree with them (logits and every gradient). The committed files were
# written with torch 2.15.0 and checked so with transformers 5.24.0 (gpt2: equal to 2e-15;
# llama: 3e-7, transformers computing RoPE angles in float32).
#
# Only this script needs Python: tests/reference_grads_test.cpp reads the files it writes.
# The models below mirror rcjit's built-in ones (models/ModelGpt2.cpp, models/ModelLlama.cpp),
# which are Hugging Face's GPT-2 and Llama: the same parameter names, Linear weights stored
# [out, in] (rcjit's layout, the transpose of GPT-2 checkpoints' Conv1D), GPT-2's tanh GELU
# ("gelu_new"), LayerNorm and RMSNorm eps 1e-5, rotate-half RoPE with Llama 3's frequency
# scaling, grouped-query attention, causal attention, GPT-2's LM head tied to wte.
#
# Everything is computed in float64 and stored as float32 (token ids as int64). Each file
# holds: the weights under the parameter names rcjit uses, "input_ids" [batch, seq],
# "targets" [batch, seq] (one of them -100, ignored by the loss), "logits", "loss" (mean
# cross-entropy over the targets not ignored), and "grad.<name>" for every parameter;
# "__metadata__" holds the model name and its config, which the test builds from.
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

SEED = 1234
BATCH, SEQ = 2, 8

GPT2 = dict(model="gpt2", hidden=32, layers=2, heads=4, vocab=64, context=16, eps=1e-5)
# heads 4 over 2 kv heads (GQA), head dim 8; Llama 3 RoPE scaling with a short original
# context so that the 4 frequencies fall in all three bands (kept, smoothed, divided).
LLAMA = dict(model="llama", hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64,
             vocab=64, rope_theta=500000.0, eps=1e-5, tied_embeddings=0, rope_factor=8.0,
             low_freq_factor=1.0, high_freq_factor=4.0, original_max_positions=512)


# ---- parameters -------------------------------------------------------------------------

def gpt2_params(c, g):
    """Name -> float64 tensor, in rcjit's names and layouts (Linear weights [out, in])."""
    h, p = c["hidden"], {}

    def normal(*shape, std):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    def linear(name, inp, out):
        p[name + ".weight"] = normal(out, inp, std=0.5 / math.sqrt(inp))
        p[name + ".bias"] = normal(out, std=0.1)

    def norm(name):
        p[name + ".weight"] = 1 + normal(h, std=0.2)
        p[name + ".bias"] = normal(h, std=0.1)

    p["transformer.wte.weight"] = normal(c["vocab"], h, std=0.2)  # also the LM head
    p["transformer.wpe.weight"] = normal(c["context"], h, std=0.2)
    for i in range(c["layers"]):
        b = f"transformer.h.{i}."
        norm(b + "ln_1")
        linear(b + "attn.c_attn", h, 3 * h)
        linear(b + "attn.c_proj", h, h)
        norm(b + "ln_2")
        linear(b + "mlp.c_fc", h, 4 * h)
        linear(b + "mlp.c_proj", 4 * h, h)
    norm("transformer.ln_f")
    return p


def llama_params(c, g):
    h, hd = c["hidden"], c["hidden"] // c["heads"]
    p = {}

    def normal(*shape, std):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    def linear(name, inp, out, gain=0.5):
        p[name + ".weight"] = normal(out, inp, std=gain / math.sqrt(inp))

    p["model.embed_tokens.weight"] = normal(c["vocab"], h, std=0.5)
    for i in range(c["layers"]):
        b = f"model.layers.{i}."
        linear(b + "self_attn.q_proj", h, c["heads"] * hd)
        linear(b + "self_attn.k_proj", h, c["kv_heads"] * hd)
        linear(b + "self_attn.v_proj", h, c["kv_heads"] * hd)
        linear(b + "self_attn.o_proj", c["heads"] * hd, h)
        linear(b + "mlp.gate_proj", h, c["intermediate"])
        linear(b + "mlp.up_proj", h, c["intermediate"])
        linear(b + "mlp.down_proj", c["intermediate"], h)
        p[b + "input_layernorm.weight"] = 1 + normal(h, std=0.2)
        p[b + "post_attention_layernorm.weight"] = 1 + normal(h, std=0.2)
    p["model.norm.weight"] = 1 + normal(h, std=0.2)
    if not c["tied_embeddings"]:
        linear("lm_head", h, c["vocab"], gain=1.0)
    return p


# ---- forward passes ---------------------------------------------------------------------

def split_heads(x, heads):  # [b, s, heads * d] -> [b, heads, s, d]
    b, s, _ = x.shape
    return x.view(b, s, heads, -1).transpose(1, 2)


def merge_heads(x):  # [b, heads, s, d] -> [b, s, heads * d]
    b, _, s, _ = x.shape
    return x.transpose(1, 2).reshape(b, s, -1)


def causal_attention(q, k, v):
    """softmax(q k^T / sqrt(d) + causal mask) v, written out (no fused kernel)."""
    s = q.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, s, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def gpt2_forward(c, p, ids):
    h, eps = c["hidden"], c["eps"]

    def ln(name, x):
        return F.layer_norm(x, (h,), p[name + ".weight"], p[name + ".bias"], eps)

    def lin(name, x):
        return F.linear(x, p[name + ".weight"], p[name + ".bias"])

    pos = torch.arange(ids.shape[1])
    x = p["transformer.wte.weight"][ids] + p["transformer.wpe.weight"][pos]
    for i in range(c["layers"]):
        b = f"transformer.h.{i}."
        qkv = lin(b + "attn.c_attn", ln(b + "ln_1", x))
        q, k, v = (split_heads(t, c["heads"]) for t in qkv.split(h, dim=-1))
        x = x + lin(b + "attn.c_proj", merge_heads(causal_attention(q, k, v)))
        m = F.gelu(lin(b + "mlp.c_fc", ln(b + "ln_2", x)), approximate="tanh")
        x = x + lin(b + "mlp.c_proj", m)
    x = ln("transformer.ln_f", x)
    return F.linear(x, p["transformer.wte.weight"])  # tied LM head


def llama_inv_freq(c):
    """Hugging Face's "llama3" rope scaling of 1 / theta^(2i/d), computed in float64."""
    d = c["hidden"] // c["heads"]
    inv = [1.0 / c["rope_theta"] ** (2 * i / d) for i in range(d // 2)]
    if not c["rope_factor"]:
        return torch.tensor(inv, dtype=torch.float64)
    factor, old = c["rope_factor"], c["original_max_positions"]
    low_wave, high_wave = old / c["low_freq_factor"], old / c["high_freq_factor"]
    out = []
    for f in inv:
        wave = 2 * math.pi / f
        if wave > low_wave:
            f = f / factor
        elif wave >= high_wave:
            smooth = (old / wave - c["low_freq_factor"]) / (
                c["high_freq_factor"] - c["low_freq_factor"])
            f = (1 - smooth) * f / factor + smooth * f
        out.append(f)
    return torch.tensor(out, dtype=torch.float64)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def llama_forward(c, p, ids):
    eps, heads, kv = c["eps"], c["heads"], c["kv_heads"]
    angles = torch.arange(ids.shape[1], dtype=torch.float64)[:, None] * llama_inv_freq(c)[None]
    emb = torch.cat((angles, angles), dim=-1)  # [seq, head_dim], both halves
    cos, sin = emb.cos(), emb.sin()

    def rms(name, x):
        return p[name + ".weight"] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def lin(name, x):
        return F.linear(x, p[name + ".weight"])

    def rope(x):
        return x * cos + rotate_half(x) * sin

    x = p["model.embed_tokens.weight"][ids]
    for i in range(c["layers"]):
        b = f"model.layers.{i}."
        y = rms(b + "input_layernorm", x)
        q = rope(split_heads(lin(b + "self_attn.q_proj", y), heads))
        k = rope(split_heads(lin(b + "self_attn.k_proj", y), kv))
        v = split_heads(lin(b + "self_attn.v_proj", y), kv)
        k = k.repeat_interleave(heads // kv, dim=1)  # kv head j serves q heads j*rep ...
        v = v.repeat_interleave(heads // kv, dim=1)
        x = x + lin(b + "self_attn.o_proj", merge_heads(causal_attention(q, k, v)))
        y = rms(b + "post_attention_layernorm", x)
        g = F.silu(lin(b + "mlp.gate_proj", y)) * lin(b + "mlp.up_proj", y)
        x = x + lin(b + "mlp.down_proj", g)
    x = rms("model.norm", x)
    head = "model.embed_tokens.weight" if c["tied_embeddings"] else "lm_head.weight"
    return F.linear(x, p[head])


# ---- reference run ----------------------------------------------------------------------

def reference(c, make_params, forward, g):
    # weights rounded to float32 (what the file stores and rcjit computes with), used in float64
    params = {k: v.float().double() for k, v in make_params(c, g).items()}
    ids = torch.randint(0, c["vocab"], (BATCH, SEQ), generator=g)
    targets = torch.randint(0, c["vocab"], (BATCH, SEQ), generator=g)
    targets[1, 3] = -100  # ignored: the mean is over the other targets
    for t in params.values():
        t.requires_grad_(True)
    logits = forward(c, params, ids)
    loss = F.cross_entropy(logits.reshape(-1, c["vocab"]), targets.reshape(-1),
                           ignore_index=-100)
    loss.backward()
    return params, ids, targets, logits.detach(), loss.detach()


def fixture_tensors(params, ids, targets, logits, loss):
    out = {name: t.detach() for name, t in params.items()}
    out["input_ids"] = ids
    out["targets"] = targets
    out["logits"] = logits
    out["loss"] = loss
    for name, t in params.items():
        out["grad." + name] = t.grad
    return {k: (v.float() if v.is_floating_point() else v) for k, v in out.items()}


def write_safetensors(path, tensors, metadata):
    """The safetensors format, written by hand so that torch is the only dependency."""
    assert sys.byteorder == "little", "safetensors data is little-endian"
    dtypes = {torch.float32: "F32", torch.int64: "I64"}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = bytes(t.reshape(-1).view(torch.uint8).tolist())  # little-endian (checked)
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


# ---- optional cross-check against Hugging Face transformers -----------------------------

def hf_gpt2(c, params):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=c["vocab"], bos_token_id=0, eos_token_id=0,
                     n_positions=c["context"], n_embd=c["hidden"], n_layer=c["layers"],
                     n_head=c["heads"], layer_norm_epsilon=c["eps"],
                     activation_function="gelu_new", resid_pdrop=0, embd_pdrop=0,
                     attn_pdrop=0)
    model = GPT2LMHeadModel(cfg).double()
    conv1d = ("c_attn.weight", "c_proj.weight", "c_fc.weight")
    state = {k: (v.t() if k.endswith(conv1d) else v) for k, v in params.items()}
    return model, state, lambda name, g: g.t() if name.endswith(conv1d) else g


def hf_llama(c, params):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=c["vocab"], hidden_size=c["hidden"],
                      intermediate_size=c["intermediate"], num_hidden_layers=c["layers"],
                      num_attention_heads=c["heads"], num_key_value_heads=c["kv_heads"],
                      rms_norm_eps=c["eps"], rope_theta=c["rope_theta"],
                      max_position_embeddings=16 * c["original_max_positions"],
                      tie_word_embeddings=bool(c["tied_embeddings"]),
                      rope_scaling={"rope_type": "llama3", "factor": c["rope_factor"],
                                    "low_freq_factor": c["low_freq_factor"],
                                    "high_freq_factor": c["high_freq_factor"],
                                    "original_max_position_embeddings":
                                        c["original_max_positions"]},
                      attention_bias=False, mlp_bias=False)
    model = LlamaForCausalLM(cfg).double()
    return model, dict(params), lambda name, g: g


def check_hf(c, make_hf, params, ids, targets, logits):
    model, state, to_rcjit = make_hf(c, {k: v.detach() for k, v in params.items()})
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if m != "lm_head.weight" or not model.config.tie_word_embeddings]
    assert not missing and not unexpected, (missing, unexpected)
    model.config._attn_implementation = "eager"
    out = model(input_ids=ids).logits
    loss = F.cross_entropy(out.reshape(-1, c["vocab"]), targets.reshape(-1), ignore_index=-100)
    loss.backward()
    worst = (out - logits).abs().max().item()
    named = dict(model.named_parameters())
    for name, p in params.items():
        got = to_rcjit(name, named[name].grad)
        worst = max(worst, (got - p.grad).abs().max().item() / (p.grad.abs().max().item() + 1e-30))
    # transformers computes the RoPE angles in float32 whatever the model's dtype: its inverse
    # frequencies must equal ours to float32 precision, and the results then agree to ~1e-7.
    # Anything wrong in the architecture (RoPE layout, scaling, GQA, GELU) shows as > 1e-3.
    tol = 1e-10
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    if rotary is not None:
        hf_inv = rotary.inv_freq.double()
        ours = llama_inv_freq(c)
        assert torch.allclose(hf_inv, ours, rtol=1e-6, atol=0), (hf_inv, ours)
        tol = 1e-5
    print(f"  transformers {c['model']}: max |difference| (logits; gradients relative to "
          f"their largest) {worst:.2e}")
    assert worst < tol, "the mirror model disagrees with transformers"


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description="Writes tests/data/grad_{gpt2,llama}.safetensors.")
    ap.add_argument("--out-dir", default=os.path.join(root, "tests", "data"))
    ap.add_argument("--check-hf", action="store_true",
                    help="also compare with transformers' GPT2LMHeadModel/LlamaForCausalLM")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    for c, make_params, forward, make_hf in ((GPT2, gpt2_params, gpt2_forward, hf_gpt2),
                                             (LLAMA, llama_params, llama_forward, hf_llama)):
        g = torch.Generator().manual_seed(SEED)
        params, ids, targets, logits, loss = reference(c, make_params, forward, g)
        if args.check_hf:
            check_hf(c, make_hf, params, ids, targets, logits)
        metadata = {k: str(v) for k, v in c.items()}
        metadata.update(batch=str(BATCH), seq=str(SEQ), torch=torch.__version__,
                        generator="scripts/reference_grads.py")
        path = os.path.join(args.out_dir, f"grad_{c['model']}.safetensors")
        write_safetensors(path, fixture_tensors(params, ids, targets, logits, loss), metadata)
        print(f"wrote {os.path.relpath(path, root)} ({os.path.getsize(path)} bytes): "
              f"loss {loss.item():.6f}, {len(params)} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
