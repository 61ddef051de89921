#!/usr/bin/env python3
"""`longserve quantize` output read by an independent reader: gguf-py (gguf==0.17.1).

Usage: gguf_convert_check.py LONGSERVE_BINARY WORK_DIR

For the mistral (q/k permuted) and qwen2 (biases, tied embeddings) fixture checkpoints and
q8_0 / q4_0 / q4_1: runs `longserve quantize`, reads the file with gguf.GGUFReader, dequantizes
every tensor with gguf.quants.dequantize, undoes llama.cpp's q/k permutation, and compares with
the checkpoint's safetensors (read here with numpy) within each format's rounding bound per block
of 32. Exits non-zero on the first violation.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        if info["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype="<f4")
        elif info["dtype"] == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif info["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{name}: dtype {info['dtype']}")
        out[name] = arr.reshape(info["shape"]).astype(np.float64)
    return out


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    if parts[0] == "model" and parts[1] == "layers":
        rest = ".".join(parts[3:])
        if rest in NAMES:
            return f"blk.{parts[2]}.{NAMES[rest]}"
    return None


def unpermute(w, heads):
    # GGUF row h*hd + 2j + s holds HF row h*hd + s*hd/2 + j.
    rows = w.shape[0]
    hd = rows // heads
    out = np.empty_like(w)
    for r in range(rows):
        h, i = divmod(r, hd)
        out[h * hd + (i % 2) * (hd // 2) + i // 2] = w[r]
    return out


def bound(kind, x):
    blocks = x.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    f16 = 2e-3 * amax
    if kind == "Q8_0":
        b = amax / 254 + f16
    elif kind == "Q4_0":
        b = amax / 8 + f16
    elif kind == "Q4_1":
        b = (blocks.max(axis=1) - blocks.min(axis=1)) / 30 + f16
    else:
        raise SystemExit(kind)
    return np.repeat(b, 32).reshape(x.shape) * 1.001 + 1e-7


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    checked = 0
    for model in ("mistral", "qwen2"):
        src = os.path.join(ROOT, "tests/fixtures/models", model)
        cfg = json.load(open(os.path.join(src, "config.json")))
        ref = read_safetensors(os.path.join(src, "model.safetensors"))
        for qtype in ("q8_0", "q4_0", "q4_1"):
            out = os.path.join(work, f"{model}-{qtype}.gguf")
            subprocess.run([binary, "quantize", "--in", src, "--out", out, "--type", qtype],
                           check=True, stdout=subprocess.DEVNULL)
            reader = GGUFReader(out)
            arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
            tensors = {t.name: t for t in reader.tensors}
            for hf, x in ref.items():
                g = gguf_name(hf)
                if g is None:
                    continue
                t = tensors[g]
                y = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(x.shape)
                if arch == "llama" and (".q_proj." in hf or ".k_proj." in hf):
                    heads = cfg["num_attention_heads"] if ".q_proj." in hf else cfg["num_key_value_heads"]
                    y = unpermute(y.reshape(x.shape[0], -1), heads).reshape(x.shape)
                if x.ndim == 1:
                    if t.tensor_type.name != "F32" or not np.array_equal(x, y):
                        raise SystemExit(f"{model} {qtype} {hf}: 1-D tensor not written as exact F32")
                    continue
                kind = t.tensor_type.name
                err = np.abs(x - y)
                b = bound(kind, x)
                if (err > b).any():
                    i = int(np.argmax(err - b))
                    raise SystemExit(f"{model} {qtype} {hf} ({kind}): error {err.flat[i]:.3g} > "
                                     f"bound {b.flat[i]:.3g} at {i}")
                checked += 1
            print(f"{model} {qtype}: {len(tensors)} tensors read by gguf-py, within bounds")
    if checked < 20:
        raise SystemExit(f"only {checked} tensors checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
