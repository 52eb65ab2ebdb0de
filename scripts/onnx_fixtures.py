#!/usr/bin/env python3
"""Writes the ONNX model fixtures under tests/data/onnx/ (run by hand, never at build or test time).

Two small transformers models with seeded random weights, exported by PyTorch's current
exporter (`torch.onnx.export(..., dynamo=True)`) with dynamic batch and sequence axes and the
weights in an external data file beside the model (`model.onnx` + `model.onnx.data`):

  bert/       transformers BertModel (2 layers, hidden 64, 4 heads, intermediate 128, vocab 100)
              inputs input_ids, attention_mask (int64 [batch, seq]; some rows padded);
              outputs last_hidden_state [batch, seq, 64], pooler_output [batch, 64]
  gpt2/       transformers GPT2LMHeadModel (2 layers, n_embd 64, 4 heads, vocab 100, no cache)
              input input_ids (int64 [batch, seq]); output logits [batch, seq, 100]
  bert_ts/    the same BertModel weights through the TorchScript-based exporter (dynamo=False),
              whose node names carry the module scopes (/encoder/layer.0/...), with
              dynamic_axes and the weights moved to external data by onnx.save_model

For each model onnxruntime (CPUExecutionProvider) runs three (batch, seq) shapes; case0..case2
hold the inputs as `<input>.npy` and onnxruntime's outputs as `expected/<output>.npy`.
`manifest.txt` lists, per model, the inputs and outputs (name, dtype) and per case the shapes.

Both models use `attn_implementation="eager"` (the explicit MatMul/Softmax attention); the
default "sdpa" path exports too (see --sdpa) but is not what the fixtures hold.

Needs `pip install torch transformers onnx onnxscript onnxruntime numpy` (the fixtures were
made with torch 2.15, transformers 5.24, onnx 1.23, onnxruntime 1.32).

    python3 scripts/onnx_fixtures.py            # writes tests/data/onnx
    python3 scripts/onnx_fixtures.py --out DIR --layers 12 --hidden 768 \\
        --heads 12 --intermediate 3072 --vocab 30522 --only bert   # a BERT-base-like encoder
"""
import argparse
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers

CASES = [(1, 8), (2, 5), (3, 12), (4, 7)]  # (batch, seq) per case; the export example is (2, 7)
EXPORT_SHAPE = (2, 7)  # batch and seq >= 2 so torch.export does not specialize them to 1


def bert_config(a):
    return transformers.BertConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
        num_attention_heads=a.heads, intermediate_size=a.intermediate,
        max_position_embeddings=a.positions, type_vocab_size=2, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, return_dict=False,
        attn_implementation="sdpa" if a.sdpa else "eager")


def gpt2_config(a):
    return transformers.GPT2Config(
        vocab_size=a.vocab, n_embd=a.hidden, n_layer=a.layers, n_head=a.heads,
        n_inner=a.intermediate, n_positions=a.positions, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, use_cache=False,
        attn_implementation="sdpa" if a.sdpa else "eager")


class BertTS(transformers.BertModel):
    """BertModel with a two-argument forward: the TorchScript exporter passes the inputs
    positionally, which transformers' config-default decorator rejects ("got multiple values
    for argument 'use_cache'"). The module tree (and so the node scopes) is BertModel's."""

    def forward(self, input_ids, attention_mask):
        return super().forward(input_ids=input_ids, attention_mask=attention_mask)


def make_inputs(name, batch, seq, vocab, rng):
    ids = rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)
    if name == "gpt2":
        return {"input_ids": ids}
    mask = np.ones((batch, seq), dtype=np.int64)
    for row in range(1, batch):  # rows after the first padded at the end by `row` tokens
        mask[row, seq - min(row, seq - 1):] = 0
    return {"input_ids": ids, "attention_mask": mask}


def export(model, name, inputs, outputs, path, dynamo):
    ex = make_inputs(name, *EXPORT_SHAPE, model.config.vocab_size, np.random.default_rng(0))
    args = tuple(torch.from_numpy(ex[n]) for n in inputs)
    if dynamo:
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
        dyn = {n: {0: batch, 1: seq} for n in inputs}
        prog = torch.onnx.export(model, args, dynamo=True, input_names=inputs,
                                 output_names=outputs, dynamic_shapes=dyn, external_data=True)
        prog.save(path, external_data=True)
    else:
        axes = {n: {0: "batch", 1: "seq"} for n in inputs}
        axes.update({n: {0: "batch", 1: "seq"} for n in outputs if n != "pooler_output"})
        axes["pooler_output"] = {0: "batch"} if "pooler_output" in outputs else None
        axes = {k: v for k, v in axes.items() if v is not None}
        tmp = path + ".inline.onnx"
        torch.onnx.export(model, args, tmp, dynamo=False, input_names=inputs,
                          output_names=outputs, dynamic_axes=axes, opset_version=17)
        m = onnx.load(tmp)
        os.remove(tmp)
        onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(path) + ".data", size_threshold=0)


def check_external(path):
    m = onnx.load(path, load_external_data=False)
    external = [t.name for t in m.graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external, f"{path}: no initializer is stored as external data"
    assert os.path.exists(path + ".data"), f"{path}.data is missing"
    ops = sorted({(n.domain or "ai.onnx") + "::" + n.op_type for n in m.graph.node})
    opsets = {o.domain or "ai.onnx": o.version for o in m.opset_import}
    return len(external), ops, opsets


def build(name, a, out, dynamo, model=None):
    torch.manual_seed(a.seed)
    if model is None:
        if name.startswith("bert"):
            model = transformers.BertModel(bert_config(a))
        else:
            model = transformers.GPT2LMHeadModel(gpt2_config(a))
    model.eval()
    if name.startswith("bert"):
        inputs, outputs = ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"]
    else:
        inputs, outputs = ["input_ids"], ["logits"]
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    path = os.path.join(d, "model.onnx")
    with torch.no_grad():
        export(model, name, inputs, outputs, path, dynamo)
    n_ext, ops, opsets = check_external(path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == inputs, [i.name for i in sess.get_inputs()]
    assert [o.name for o in sess.get_outputs()] == outputs, [o.name for o in sess.get_outputs()]
    lines = [f"model {name} exporter={'dynamo' if dynamo else 'torchscript'} "
             f"opsets={opsets} external_initializers={n_ext}"]
    lines += [f"input {i.name} {i.type} {i.shape}" for i in sess.get_inputs()]
    lines += [f"output {o.name} {o.type} {o.shape}" for o in sess.get_outputs()]
    rng = np.random.default_rng(a.seed)
    for k, (batch, seq) in enumerate(CASES):
        feeds = make_inputs(name.split("_")[0], batch, seq, model.config.vocab_size, rng)
        got = sess.run(outputs, feeds)
        with torch.no_grad():
            ref = model(*(torch.from_numpy(feeds[n]) for n in inputs))
            ref = ref if isinstance(ref, tuple) else ref.to_tuple()
        cdir = os.path.join(d, f"case{k}")
        os.makedirs(os.path.join(cdir, "expected"))
        for n, v in feeds.items():
            np.save(os.path.join(cdir, n + ".npy"), v)
        for n, v, r in zip(outputs, got, ref):
            err = np.abs(v - r.numpy()).max() / max(np.abs(r.numpy()).max(), 1e-12)
            assert err < 1e-4, f"{name} case{k} {n}: onnxruntime vs PyTorch rel err {err}"
            np.save(os.path.join(cdir, "expected", n + ".npy"), v.astype(np.float32))
        lines.append(f"case{k} batch={batch} seq={seq} "
                     + " ".join(f"{n}={list(v.shape)}" for n, v in zip(outputs, got)))
    lines.append("ops " + " ".join(ops))
    print("\n".join(lines))
    return model, lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                 "data", "onnx"))
    p.add_argument("--seed", type=int, default=31)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=128)
    p.add_argument("--vocab", type=int, default=100)
    p.add_argument("--positions", type=int, default=64)
    p.add_argument("--only", choices=["bert", "gpt2", "bert_ts"], action="append")
    p.add_argument("--sdpa", action="store_true", help="attn_implementation=sdpa")
    a = p.parse_args()
    a.out = os.path.normpath(a.out)
    os.makedirs(a.out, exist_ok=True)
    only = a.only or ["bert", "gpt2", "bert_ts"]
    manifest = [f"# written by scripts/onnx_fixtures.py (torch {torch.__version__}, "
                f"transformers {transformers.__version__}, onnx {onnx.__version__}, "
                f"onnxruntime {ort.__version__}), seed {a.seed}"]
    bert = None
    if "bert" in only or "bert_ts" in only:
        bert, lines = build("bert", a, a.out, dynamo=True)
        manifest += lines if "bert" in only else []
        if "bert" not in only:
            shutil.rmtree(os.path.join(a.out, "bert"))
    if "gpt2" in only:
        manifest += build("gpt2", a, a.out, dynamo=True)[1]
    if "bert_ts" in only:
        ts = BertTS(bert.config)
        ts.load_state_dict(bert.state_dict())
        manifest += build("bert_ts", a, a.out, dynamo=False, model=ts)[1]
    with open(os.path.join(a.out, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")


if __name__ == "__main__":
    main()
