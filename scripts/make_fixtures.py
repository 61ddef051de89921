#!/usr/bin/env python3
"""Make the Hugging Face reference fixtures: four tiny random checkpoints under
tests/fixtures/models/<name>/ and, for each, what transformers computes on them in float32.

  llama3   LlamaForCausalLM, GQA 4/2, rope_theta 5e5 + llama3 rope scaling, bf16, untied lm_head
  qwen2    Qwen2ForCausalLM, q/k/v biases, tied embeddings, yarn rope scaling, bf16
  qwen3    Qwen3ForCausalLM, q_norm/k_norm, head_dim 32 != 64/4, two safetensors shards, bf16
  mistral  MistralForCausalLM (Llama-2 style), SentencePiece-style tokenizer, f16, linear scaling

Per model, expected/ holds the logits of every position for prompts of 1, 64 and 4097 tokens
(logits.safetensors + prompts.json) and greedy continuations (greedy.json). docs/fixtures.md
describes every file. Deterministic: fixed seeds, CPU only, pinned packages
(scripts/requirements.txt); tokenizers depend on the Python version through default_corpus().

Usage: python3 scripts/make_fixtures.py [--only NAME ...] [--verify-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bundled_model as mbm  # noqa: E402
import tokenizer_recipes as recipes  # noqa: E402

FIXTURE_ROOT = os.path.join(mbm.REPO_ROOT, "tests", "fixtures", "models")
SEED = 1234
ATTN_IMPLEMENTATION = "eager"
SHORT_LENGTHS = (1, 64)
LONG_LENGTH = 4097  # > 4096: crosses every power-of-two page boundary up to 4096 by one token
MAX_NEW_TOKENS = 24
F16_MAX_REL_ERROR = 2.0**-11  # round-to-nearest f16 storage of values in the normal range


@dataclass
class Fixture:
    style: str                                   # tokenizer recipe
    vocab_size: int
    dtype: torch.dtype                           # stored weight dtype
    make_config: Callable[[object], dict]        # tokenizer -> config.json
    make_generation_config: Callable[[object], dict]
    num_shards: int | None = None
    scales: mbm.InitScales = field(default_factory=mbm.InitScales)


def tid(tok, content: str) -> int:
    return mbm.special_id(tok, content)


def llama3_config(tok) -> dict:
    cfg = mbm.llama_config(
        vocab_size=320, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=160, max_position_embeddings=8192,
        bos_token_id=tid(tok, "<|begin_of_text|>"), eos_token_id=tid(tok, "<|end_of_text|>"),
        rope_theta=500000.0,
        # original_max_position_embeddings 512: with head_dim 16 the 8 frequencies fall in all
        # three llama3 bands (unchanged, smoothed, divided by factor), and the 4097-token prompt
        # runs far past the original window.
        rope_scaling={"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 512, "rope_type": "llama3"},
        dtype="bfloat16")
    return cfg


def llama3_generation_config(tok) -> dict:
    return {"bos_token_id": tid(tok, "<|begin_of_text|>"),
            "eos_token_id": [tid(tok, "<|end_of_text|>"), tid(tok, "<|eom_id|>"),
                             tid(tok, "<|eot_id|>")],
            "do_sample": True, "temperature": 0.6, "top_p": 0.9}


def qwen2_config(tok) -> dict:
    # Qwen2.5 layout: q/k/v biases are implied by the architecture (no config key); the sliding
    # window is configured but switched off (use_sliding_window false), as in the real configs.
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": tid(tok, "<|endoftext|>"),
        "eos_token_id": tid(tok, "<|endoftext|>"),
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "max_position_embeddings": 8192,
        "max_window_layers": 2,
        "model_type": "qwen2",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 1024},
        "rope_theta": 1000000.0,
        "sliding_window": 4096,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 320,
    }


def qwen_generation_config(tok) -> dict:
    # Qwen2.5-Instruct's defaults; greedy fixtures override the sampling knobs (see greedy.json).
    return {"bos_token_id": tid(tok, "<|endoftext|>"),
            "eos_token_id": [tid(tok, "<|im_end|>"), tid(tok, "<|endoftext|>")],
            "pad_token_id": tid(tok, "<|endoftext|>"),
            "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
            "repetition_penalty": 1.05}


def qwen3_config(tok) -> dict:
    # transformers v5 spelling: rope_parameters (with rope_theta inside) and "dtype".
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": tid(tok, "<|endoftext|>"),
        "dtype": "bfloat16",
        "eos_token_id": tid(tok, "<|im_end|>"),
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 192,
        "max_position_embeddings": 40960,
        "max_window_layers": 2,
        "model_type": "qwen3",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 320,
    }


def qwen3_generation_config(tok) -> dict:
    return {"bos_token_id": tid(tok, "<|endoftext|>"),
            "eos_token_id": [tid(tok, "<|im_end|>"), tid(tok, "<|endoftext|>")],
            "pad_token_id": tid(tok, "<|endoftext|>"),
            "do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20}


def mistral_config(tok) -> dict:
    # Mistral-7B-v0.2 layout without sliding window; the legacy "type" key spells the scaling.
    return {
        "architectures": ["MistralForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": tid(tok, "<s>"),
        "eos_token_id": tid(tok, "</s>"),
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 160,
        "max_position_embeddings": 8192,
        "model_type": "mistral",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"type": "linear", "factor": 2.0},
        "rope_theta": 10000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "use_cache": True,
        "vocab_size": 480,
    }


def mistral_generation_config(tok) -> dict:
    return {"bos_token_id": tid(tok, "<s>"), "eos_token_id": tid(tok, "</s>")}


FIXTURES: dict[str, Fixture] = {
    "llama3": Fixture("llama3", 320, torch.bfloat16, llama3_config, llama3_generation_config),
    # Tied: the embedding is also the output projection, so its scale sets the logit scale.
    "qwen2": Fixture("qwen2", 320, torch.bfloat16, qwen2_config, qwen_generation_config,
                     scales=mbm.InitScales(embed=0.5)),
    "qwen3": Fixture("qwen2", 320, torch.bfloat16, qwen3_config, qwen3_generation_config,
                     num_shards=2),
    # 480 is the smallest vocabulary for which the spm recipe learns merges on default_corpus()
    # (3 specials + 256 byte tokens + ~200 characters come first).
    "mistral": Fixture("spm", 480, torch.float16, mistral_config, mistral_generation_config),
}

GREEDY_PROMPTS = [
    "The quick brown fox jumps over the lazy dog. Then",
    "東京は日本の首都です。Emoji 🙂 and numbers 12345:",
    "def square(x):\n    return x ** 2\n\n\ndef",
]


# ---------------------------------------------------------------------------------------------
# Prompts


def exact_prefix(tok, text: str, num_tokens: int) -> tuple[str, list[int]]:
    """The shortest prefix of text whose encoding (special tokens added) has exactly num_tokens
    ids, so the stored text reproduces the stored ids."""
    def count(c: int) -> int:
        return len(tok.encode(text[:c], add_special_tokens=True).ids)

    lo, hi = 0, len(text)
    if count(hi) < num_tokens:
        raise ValueError(f"text too short for {num_tokens} tokens")
    while lo < hi:  # smallest c with count(c) >= num_tokens
        mid = (lo + hi) // 2
        if count(mid) >= num_tokens:
            hi = mid
        else:
            lo = mid + 1
    for c in range(lo, len(text) + 1):
        if count(c) == num_tokens:
            return text[:c], tok.encode(text[:c], add_special_tokens=True).ids
    raise ValueError(f"no prefix encodes to exactly {num_tokens} tokens")


def prompt_texts() -> dict[int, str]:
    corpus = mbm.CORPUS
    # The 64-token prompt packs many scripts into few tokens (emoji, CJK, Hangul, Cyrillic,
    # Greek, Arabic, Devanagari, Latin diacritics, digit runs, code whitespace), then continues
    # with default_corpus()'s multilingual lines, which end with 11 such lines repeated 4 times.
    mixed = "🙂 日本 한국 Ру Ελ عر हि café Über 1234567 def f(x):\n\treturn  x\n"
    mixed += "\n".join(corpus[-11:])
    long_text = "\n\n".join(corpus)
    return {1: "The", 64: mixed, LONG_LENGTH: long_text}


# ---------------------------------------------------------------------------------------------
# Writing


def dump_json(path: str, obj) -> None:
    """Indented JSON with number lists kept on one line (ids and logits stay readable)."""
    text = json.dumps(obj, indent=2, ensure_ascii=False)

    def collapse(m: re.Match) -> str:
        return "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]"

    text = re.sub(r"\[\s*((?:-?[0-9.eE+-]+\s*,\s*)*-?[0-9.eE+-]+)\s*\]", collapse, text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def load_hf(model_dir: str, attn: str = ATTN_IMPLEMENTATION):
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation=attn, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        raise AssertionError(f"{model_dir}: loading info not clean: {bad}")
    return model.eval()


def forward_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False)
    return out.logits[0].float()  # [num_tokens, vocab] f32


def greedy(model, tok, text: str, eos_ids: list[int], pad_id: int) -> dict:
    ids = tok.encode(text, add_special_tokens=True).ids
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=MAX_NEW_TOKENS, do_sample=False, num_beams=1,
            repetition_penalty=1.0, temperature=None, top_p=None, top_k=None,
            eos_token_id=eos_ids, pad_token_id=pad_id,
            output_logits=True, return_dict_in_generate=True)
    generated = out.sequences[0, len(ids):].tolist()
    gaps, top1 = [], []
    for step, logits in enumerate(out.logits):
        values, indices = logits[0].float().topk(2)
        if indices[0].item() != generated[step]:
            raise AssertionError("generate did not pick the argmax of the raw logits")
        gaps.append(round(float(values[0] - values[1]), 6))
        top1.append(round(float(values[0]), 6))
    stopped = len(generated) < MAX_NEW_TOKENS or generated[-1] in eos_ids
    return {
        "prompt_text": text,
        "prompt_ids": ids,
        "generated_ids": generated,
        "finish_reason": "stop" if stopped else "length",
        "top1_logit": top1,
        "top1_top2_gap": gaps,
        "generated_text": tok.decode(generated, skip_special_tokens=False),
        "generated_text_skip_special": tok.decode(generated, skip_special_tokens=True),
    }


def logit_stats(logits: torch.Tensor) -> dict:
    top2 = logits.topk(2, dim=-1).values
    gap = top2[:, 0] - top2[:, 1]
    return {
        "logit_std": round(float(logits.std()), 4),
        "max_abs_logit": round(float(logits.abs().max()), 4),
        "std_across_positions": round(float(logits.std(dim=0, correction=0).mean()), 4),
        "distinct_argmax": int(logits.argmax(-1).unique().numel()),
        "median_top2_gap": round(float(gap.median()), 4),
        "frac_top2_gap_above_0.01": round(float((gap > 0.01).float().mean()), 4),
    }


def make_fixture(name: str, fx: Fixture) -> None:
    out = os.path.join(FIXTURE_ROOT, name)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "expected"))

    tok = mbm.make_tokenizer(fx.style, fx.vocab_size)
    recipes.save_tokenizer_dir(tok, out, fx.style)
    config = fx.make_config(tok)
    if config["vocab_size"] != fx.vocab_size:
        raise AssertionError("config and tokenizer vocabularies disagree")
    mbm.write_hf_config(os.path.join(out, "config.json"), config)
    gen_config = fx.make_generation_config(tok)
    mbm.write_hf_config(os.path.join(out, "generation_config.json"), gen_config)
    mbm.write_checkpoint(out, config, fx.dtype, SEED, fx.scales, "cpu",
                         num_shards=fx.num_shards)

    model = load_hf(out)
    tensors: dict[str, torch.Tensor] = {}
    prompts = []
    for length, text in prompt_texts().items():
        text, ids = exact_prefix(tok, text, length)
        logits = forward_logits(model, ids)
        key = "long" if length == LONG_LENGTH else str(length)
        tensor_name = f"logits_{key}"
        if length == LONG_LENGTH:
            if logits.abs().max() >= 65504:
                raise AssertionError("logits overflow f16")
            tensors[tensor_name] = logits.to(torch.float16)
        else:
            tensors[tensor_name] = logits.contiguous()
        prompts.append({"name": key, "tensor": tensor_name, "num_tokens": len(ids),
                        "storage_dtype": "F16" if length == LONG_LENGTH else "F32",
                        "text": text, "ids": ids, "stats": logit_stats(logits)})
    save_file(tensors, os.path.join(out, "expected", "logits.safetensors"),
              # One metadata key only: safetensors writes a map's keys in hash order.
              metadata={"reference": f"transformers float32 {ATTN_IMPLEMENTATION}"})
    os.chmod(os.path.join(out, "expected", "logits.safetensors"), 0o644)

    rotary = model.model.rotary_emb
    eos_ids = gen_config["eos_token_id"]
    eos_ids = eos_ids if isinstance(eos_ids, list) else [eos_ids]
    pad_id = gen_config.get("pad_token_id", eos_ids[0])
    dump_json(os.path.join(out, "expected", "prompts.json"), {
        "model": name,
        "reference": reference_info(),
        "hf_rope_parameters": dict(model.config.rope_parameters),
        "hf_inv_freq": [float(x) for x in rotary.inv_freq.tolist()],
        "hf_attention_scaling": float(rotary.attention_scaling),
        "prompts": prompts,
    })
    dump_json(os.path.join(out, "expected", "greedy.json"), {
        "model": name,
        "reference": reference_info(),
        "max_new_tokens": MAX_NEW_TOKENS,
        "eos_token_ids": eos_ids,
        "continuations": [greedy(model, tok, t, eos_ids, pad_id) for t in GREEDY_PROMPTS],
    })
    for p in prompts:
        print(f"{name} {p['name']:>4}: {p['num_tokens']} tokens {p['stats']}")


def reference_info() -> dict:
    import tokenizers
    import transformers

    return {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
            "tokenizers": tokenizers.__version__, "python": platform.python_version(),
            "attn_implementation": ATTN_IMPLEMENTATION, "compute_dtype": "float32",
            "weights_upcast": "stored bf16/f16 weights are converted exactly to float32"}


# ---------------------------------------------------------------------------------------------
# Verification: a fresh load from disk must reproduce every stored number.


def verify_fixture(name: str) -> None:
    from transformers import AutoTokenizer

    out = os.path.join(FIXTURE_ROOT, name)
    expected = load_file(os.path.join(out, "expected", "logits.safetensors"))
    with open(os.path.join(out, "expected", "prompts.json"), encoding="utf-8") as f:
        prompts = json.load(f)
    with open(os.path.join(out, "expected", "greedy.json"), encoding="utf-8") as f:
        greedy_ref = json.load(f)
    hf_tok = AutoTokenizer.from_pretrained(out)
    for attn in (ATTN_IMPLEMENTATION, "sdpa"):
        model = load_hf(out, attn)
        worst = 0.0
        for p in prompts["prompts"]:
            if hf_tok(p["text"]).input_ids != p["ids"]:
                raise AssertionError(f"{name}: AutoTokenizer disagrees on prompt {p['name']}")
            ref = expected[p["tensor"]].float()
            got = forward_logits(model, p["ids"])
            if ref.shape != got.shape:
                raise AssertionError(f"{name}: shape {tuple(ref.shape)} != {tuple(got.shape)}")
            # Relative to each position's largest |logit|, the scale the C++ tests use.
            scale = got.abs().amax(dim=-1, keepdim=True)
            rel = float(((got - ref).abs() / scale).max())
            limit = (F16_MAX_REL_ERROR if p["storage_dtype"] == "F16" else 0.0) + 1e-5
            if rel > limit:
                raise AssertionError(f"{name} {attn} {p['name']}: rel error {rel:.2e} > {limit}")
            worst = max(worst, rel)
        print(f"verify {name} [{attn}]: logits reproduce, worst rel error {worst:.2e}")
    model = load_hf(out)
    for c in greedy_ref["continuations"]:
        if hf_tok(c["prompt_text"]).input_ids != c["prompt_ids"]:
            raise AssertionError(f"{name}: AutoTokenizer disagrees on a greedy prompt")
        with torch.no_grad():
            seq = model.generate(torch.tensor([c["prompt_ids"]]), max_new_tokens=MAX_NEW_TOKENS,
                                 do_sample=False, repetition_penalty=1.0, temperature=None,
                                 top_p=None, top_k=None,
                                 eos_token_id=greedy_ref["eos_token_ids"],
                                 attention_mask=torch.ones(1, len(c["prompt_ids"]),
                                                           dtype=torch.long),
                                 pad_token_id=greedy_ref["eos_token_ids"][0])
        if seq[0, len(c["prompt_ids"]):].tolist() != c["generated_ids"]:
            raise AssertionError(f"{name}: greedy continuation does not reproduce")
    print(f"verify {name}: greedy continuations reproduce")
    # Sanity of the random weights: not degenerate.
    for p in prompts["prompts"]:
        s = p["stats"]
        if p["num_tokens"] >= 64 and (s["distinct_argmax"] < 8 or
                                      s["frac_top2_gap_above_0.01"] < 0.9):
            raise AssertionError(f"{name} {p['name']}: degenerate logits {s}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", choices=sorted(FIXTURES), help="models to make")
    ap.add_argument("--verify-only", action="store_true", help="only check the stored fixtures")
    args = ap.parse_args()
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    names = args.only or list(FIXTURES)
    for name in names:
        if not args.verify_only:
            make_fixture(name, FIXTURES[name])
        verify_fixture(name)


if __name__ == "__main__":
    main()
