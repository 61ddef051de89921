#!/usr/bin/env python3
"""Fixtures for tests/io/: what transformers and the safetensors library themselves compute.

Writes
  tests/fixtures/io/rope_fixtures.json
      For a grid of config.json fragments (every RoPE type, head dims 64/96/128, partial rotary
      factor 0.5, Llama-3.1/3.2's llama3 values, yarn with and without attention_factor / mscale,
      the legacy `type`, `rope_type` and v5 `rope_parameters` spellings), the inv_freq and the
      attention scaling that transformers' rotary embedding modules hold after construction, and
      for dynamic NTK also after a forward pass over positions [0, seq_len) with seq_len above
      max_position_embeddings (the forward-time update). tests/io/rope_test.cpp parses each config
      with parse_model_config and compares rope_inv_freq / rope_attention_scaling.
  tests/fixtures/io/reference.safetensors + reference_safetensors.json
      A small file written by the official safetensors writer (several dtypes, a scalar, an empty
      tensor, metadata) and the values it holds, so the C++ reader is checked against a writer it
      does not share code with.

Deterministic; needs torch and transformers (scripts/requirements.txt pins them). Run from the
repository root: python3 scripts/make_rope_fixtures.py
"""

import json
import os

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.mistral.modeling_mistral import MistralRotaryEmbedding
from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

OUT_DIR = os.path.join("tests", "fixtures", "io")

FAMILIES = {
    "llama": (LlamaConfig, LlamaRotaryEmbedding, "LlamaForCausalLM"),
    "mistral": (MistralConfig, MistralRotaryEmbedding, "MistralForCausalLM"),
    "qwen2": (Qwen2Config, Qwen2RotaryEmbedding, "Qwen2ForCausalLM"),
    "qwen3": (Qwen3Config, Qwen3RotaryEmbedding, "Qwen3ForCausalLM"),
}


def base_config(family, head_dim, max_pos, heads=4, explicit_head_dim=False, hidden=None):
    cfg = {
        "architectures": [FAMILIES[family][2]],
        "model_type": family,
        "hidden_size": hidden if hidden is not None else heads * head_dim,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": heads,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "max_position_embeddings": max_pos,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
    }
    if explicit_head_dim:
        cfg["head_dim"] = head_dim
    return cfg


def case(name, family, head_dim, max_pos, extra, seq_lens=(), **kw):
    cfg = base_config(family, head_dim, max_pos, **kw)
    cfg.update(extra)
    return {"name": name, "family": family, "config": cfg, "seq_lens": list(seq_lens)}


LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}
LLAMA32 = dict(LLAMA31, factor=32.0)

CASES = [
    # default RoPE: head dims 64 / 96 / 128, the three spellings, partial rotation
    case("default_hd64_llama2", "llama", 64, 4096, {"rope_theta": 10000.0, "rope_scaling": None}),
    case("default_hd96_theta5e5", "llama", 96, 8192, {"rope_theta": 500000.0}),
    case("default_hd128_v5", "llama", 128, 8192,
         {"rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}}),
    case("default_hd128_partial", "llama", 128, 4096,
         {"rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
    case("default_hd64_partial_v5", "llama", 64, 4096,
         {"rope_parameters": {"rope_theta": 10000.0, "rope_type": "default",
                              "partial_rotary_factor": 0.5}}),
    case("default_mistral_window", "mistral", 128, 32768,
         {"rope_theta": 1000000.0, "sliding_window": 4096}),
    # linear
    case("linear_hd64_legacy", "llama", 64, 4096,
         {"rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 2.0}}),
    case("linear_hd128_rope_type", "llama", 128, 16384,
         {"rope_theta": 500000.0, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
    case("linear_hd96_partial_v5", "llama", 96, 4096,
         {"rope_parameters": {"rope_theta": 10000.0, "rope_type": "linear", "factor": 3.0,
                              "partial_rotary_factor": 0.5}}),
    # dynamic NTK: the initial frequencies and the forward-time update above max_position
    case("dynamic_hd64", "llama", 64, 2048,
         {"rope_theta": 10000.0, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
         seq_lens=[5000, 2049]),
    case("dynamic_hd128_legacy", "llama", 128, 4096,
         {"rope_theta": 500000.0, "rope_scaling": {"type": "dynamic", "factor": 4.0}},
         seq_lens=[10000, 65536]),
    case("dynamic_hd96_partial_v5", "llama", 96, 2048,
         {"rope_parameters": {"rope_theta": 10000.0, "rope_type": "dynamic", "factor": 1.5,
                              "partial_rotary_factor": 0.5}},
         seq_lens=[3001]),
    # llama3
    case("llama3_llama31", "llama", 128, 131072, {"rope_theta": 500000.0, "rope_scaling": LLAMA31}),
    case("llama3_llama32_1b", "llama", 64, 131072,
         {"rope_theta": 500000.0, "rope_scaling": LLAMA32, "tie_word_embeddings": True}),
    case("llama3_hd96_v5", "llama", 96, 32768,
         {"rope_parameters": dict(LLAMA31, rope_theta=500000.0, factor=4.0,
                                  original_max_position_embeddings=4096)}),
    case("llama3_hd128_partial", "llama", 128, 131072,
         {"rope_theta": 500000.0, "partial_rotary_factor": 0.5, "rope_scaling": LLAMA31}),
    # yarn
    case("yarn_qwen2_legacy", "qwen2", 128, 131072,
         {"rope_theta": 1000000.0, "use_sliding_window": False, "sliding_window": 131072,
          "rope_scaling": {"type": "yarn", "factor": 4.0,
                           "original_max_position_embeddings": 32768}}),
    case("yarn_hd64_attention_factor", "llama", 64, 16384,
         {"rope_theta": 10000.0,
          "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "attention_factor": 0.8,
                           "original_max_position_embeddings": 4096}}),
    case("yarn_hd64_mscale", "llama", 64, 16384,
         {"rope_theta": 10000.0,
          "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "mscale": 0.707,
                           "mscale_all_dim": 1.0, "original_max_position_embeddings": 2048}}),
    case("yarn_hd96_no_truncate_betas", "llama", 96, 32768,
         {"rope_theta": 500000.0,
          "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 16.0, "beta_slow": 2.0,
                           "truncate": False, "original_max_position_embeddings": 8192}}),
    case("yarn_factor_from_lengths", "llama", 64, 16384,
         {"rope_theta": 10000.0,
          "rope_scaling": {"rope_type": "yarn", "factor": None,
                           "original_max_position_embeddings": 4096}}),
    case("yarn_qwen3_v5", "qwen3", 128, 131072,
         {"rope_parameters": {"rope_theta": 1000000.0, "rope_type": "yarn", "type": "yarn",
                              "factor": 4.0, "original_max_position_embeddings": 32768}},
         heads=16, explicit_head_dim=True, hidden=1024),
    case("yarn_hd128_partial", "llama", 128, 16384,
         {"rope_theta": 10000.0, "partial_rotary_factor": 0.5,
          "rope_scaling": {"rope_type": "yarn", "factor": 2.0,
                           "original_max_position_embeddings": 8192}}),
]


def f32_list(t):
    # Shortest float32 repr: parsing it back and rounding to float32 gives the same bits.
    return [float(str(np.float32(x))) for x in t.detach().to(torch.float32).numpy()]


def rope_fixture(c):
    config_cls, rotary_cls, _ = FAMILIES[c["family"]]
    config = config_cls.from_dict(json.loads(json.dumps(c["config"])))
    partial = config.rope_parameters.get("partial_rotary_factor", 1.0)
    if config.rope_parameters["rope_type"] == "default" and partial != 1.0:
        # The Llama-family module ignores partial_rotary_factor for default RoPE (its
        # apply_rotary_pos_emb cannot rotate part of a head); GPT-NeoX's is the reference.
        inv_freq, scaling = GPTNeoXRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        rotary = rotary_cls(config)
        inv_freq, scaling = rotary.inv_freq, rotary.attention_scaling
    out = {
        "name": c["name"],
        "config": c["config"],
        "head_dim": getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
        "inv_freq": f32_list(inv_freq),
        "attention_scaling": float(scaling),
        "updates": [],
    }
    for seq_len in c["seq_lens"]:
        rotary = rotary_cls(config)
        x = torch.zeros(1, seq_len, 8, dtype=torch.float32)
        rotary(x, torch.arange(seq_len)[None, :])
        out["updates"].append({"seq_len": seq_len, "inv_freq": f32_list(rotary.inv_freq),
                               "attention_scaling": float(rotary.attention_scaling)})
    return out


def write_reference_safetensors():
    g = torch.Generator().manual_seed(1234)
    tensors = {
        "f32.matrix": torch.randn(2, 3, generator=g, dtype=torch.float32),
        "f16.vector": torch.randn(5, generator=g).to(torch.float16),
        "bf16.cube": torch.randn(2, 2, 3, generator=g).to(torch.bfloat16),
        "i64.scalar": torch.tensor(-123456789012, dtype=torch.int64),
        "i32.vector": torch.tensor([1, -2, 3], dtype=torch.int32),
        "u8.empty": torch.zeros(0, 4, dtype=torch.uint8),
        "f64.vector": torch.tensor([1.5, -2.25], dtype=torch.float64),
    }
    # One key only: the writer keeps metadata in a Rust HashMap, so several keys come out in a
    # random order and the file would not be reproducible.
    metadata = {"format": "pt"}
    path = os.path.join(OUT_DIR, "reference.safetensors")
    save_file(tensors, path, metadata=metadata)
    expected = {
        "metadata": metadata,
        "tensors": {
            name: {
                "dtype": {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                          torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8",
                          torch.float64: "F64"}[t.dtype],
                "shape": list(t.shape),
                # Exact: every value is representable as a double.
                "values": [float(v) if t.is_floating_point() else int(v)
                           for v in t.reshape(-1).to(torch.float64 if t.is_floating_point()
                                                     else torch.int64).tolist()],
            }
            for name, t in tensors.items()
        },
    }
    with open(os.path.join(OUT_DIR, "reference_safetensors.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    torch.manual_seed(0)
    fixtures = {
        "generator": "scripts/make_rope_fixtures.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "cases": [rope_fixture(c) for c in CASES],
    }
    with open(os.path.join(OUT_DIR, "rope_fixtures.json"), "w") as f:
        json.dump(fixtures, f, separators=(",", ":"))
        f.write("\n")
    write_reference_safetensors()
    print(f"wrote {len(CASES)} RoPE cases and reference.safetensors to {OUT_DIR}")


if __name__ == "__main__":
    main()
