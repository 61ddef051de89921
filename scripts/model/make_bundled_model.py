#!/usr/bin/env python3
"""Make random-weight Hugging Face checkpoint directories (config, generation config, tokenizer,
safetensors weights) that longserve loads exactly like a downloaded model.

Presets:
  tiny-random      (default) -> /tmp/tiny-random/: a random Llama of the bundled size (the bundled
                   default, models/tiny-longctx/, is trained by scripts/model/train_tiny.py
                   instead).
  bench30m         --out DIR: a Llama-shaped ~30M-parameter model for the CPU benchmark.
  llama3-8b-shape  --out DIR: Llama-3-8B shapes with random bf16 weights (~16 GB), made on the
                   GPU machine (generated with torch on the GPU when one is present).
  llama3-70b-shape --out DIR: Llama-3-70B shapes (hidden 8192, 80 layers, 64 q / 8 kv heads, MLP
                   28672, vocab 128256, rope theta 500000 with Llama-3.1 scaling, bf16; ~141 GB),
                   for tensor parallelism on 4 GPUs (docs/tensor-parallel.md). Drawn on the GPU
                   and written shard by shard while the next shard is drawn. --num-layers N makes
                   a truncated model of the same shape with N layers (~1.7 GB per layer + 4.2 GB
                   of embedding and LM head), named so in its config and the log; the free disk
                   space is checked before anything is written.

Everything is deterministic: every tensor is drawn from its own torch generator seeded by
(seed, tensor name), so the result does not depend on generation order. The tiny presets are
generated on the CPU so that any machine with the pinned packages (scripts/requirements.txt) and
the same Python version (the tokenizer corpus is the standard library's docstrings) reproduces
them byte for byte. Tensors drawn on a GPU differ from CPU draws, but are equally deterministic
on that device.

The helpers here (model_config, tensor_shapes, write_checkpoint, ...) are general over the
Llama / Mistral / Qwen2 / Qwen3 layouts and are reused by scripts/fixtures/make_fixtures.py; a
trained model can replace the random weights later without changing the directory layout.
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import json
import math
import os
import sys
import shutil
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_recipes as recipes  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# default_corpus() reads the docstrings of stdlib modules' attributes, and submodules that other
# packages happen to import (torch imports email.message, ...) become attributes too. Taking the
# corpus once, here, right after this file's imports, keeps it identical however the caller goes
# on to import transformers. Every tokenizer and prompt text of both scripts comes from it.
CORPUS: list[str] = recipes.default_corpus()

# The chat template of Meta-Llama-3-8B-Instruct's tokenizer_config.json (public), verbatim.
LLAMA3_INSTRUCT_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

# Llama-3.1's special-token block: 256 ids starting at 128000 (named ones, the rest reserved).
LLAMA31_SPECIAL_BLOCK = (
    ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
     "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
     "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    + [f"<|reserved_special_token_{i}|>" for i in range(3, 248)]
)

# Written into config.json / generation_config.json as save_pretrained does. transformers reads
# it back: a local config without it (or older than 5.0) is taken for a pre-fix Mistral
# tokenizer and warned about.
TRANSFORMERS_VERSION = importlib.metadata.version("transformers")


# ---------------------------------------------------------------------------------------------
# Tokenizers


def pad_tokenizer_vocab(tok, vocab_size: int, special_block: list[str] | None = None):
    """Returns a tokenizer with exactly vocab_size ids: the learned BPE vocabulary keeps its ids,
    filler tokens follow, and the special tokens take the last ids (or, with special_block, that
    block in order, e.g. Llama-3.1's 256 specials at 128000..128255).

    Fillers are strings like "<fill_00123>": every character is in the byte-level alphabet (so they
    decode to plain text), but the split regexes always cut them into several pre-tokens and no
    merge produces them, so encoding never yields a filler id."""
    data = json.loads(tok.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    num_learned = len(vocab)
    if sorted(vocab.values()) != list(range(num_learned)):
        raise ValueError("learned vocabulary ids are not contiguous")
    specials = [t["content"] for t in data["added_tokens"]]
    block = special_block if special_block is not None else specials
    missing = [s for s in specials if s not in block]
    if missing:
        raise ValueError(f"special_block lacks {missing}")
    first_special = vocab_size - len(block)
    if first_special < num_learned:
        raise ValueError(f"vocab_size {vocab_size} too small for {num_learned} learned tokens "
                         f"and {len(block)} specials")
    for i in range(num_learned, first_special):
        vocab[f"<fill_{i:06d}>"] = i
    special_ids = {s: first_special + i for i, s in enumerate(block)}
    data["added_tokens"] = [
        {"id": special_ids[s], "content": s, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}
        for s in block
    ]

    def fix_ids(node):
        if isinstance(node, dict):
            if node.get("type") == "TemplateProcessing":
                for name, entry in node["special_tokens"].items():
                    entry["ids"] = [special_ids[t] for t in entry["tokens"]]
            for value in node.values():
                fix_ids(value)
        elif isinstance(node, list):
            for value in node:
                fix_ids(value)

    fix_ids(data["post_processor"])
    from tokenizers import Tokenizer

    out = Tokenizer.from_str(json.dumps(data, ensure_ascii=False))
    if out.get_vocab_size() != vocab_size:
        raise AssertionError(f"padded vocabulary has {out.get_vocab_size()} ids, not {vocab_size}")
    return out


def make_tokenizer(style: str, vocab_size: int, special_block: list[str] | None = None):
    """A recipe tokenizer with exactly vocab_size ids (padded with fillers if the corpus runs
    out of merges, which for the llama3 style happens above ~6800)."""
    tok = recipes.build_tokenizer(style, CORPUS, vocab_size)
    if tok.get_vocab_size() == vocab_size and special_block is None:
        return tok
    return pad_tokenizer_vocab(tok, vocab_size, special_block)


def special_id(tok, content: str) -> int:
    token_id = tok.token_to_id(content)
    if token_id is None:
        raise KeyError(content)
    return token_id


# ---------------------------------------------------------------------------------------------
# Config and weights


def head_dim_of(config: dict) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def tensor_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Names and shapes of every tensor a Llama / Mistral / Qwen2 / Qwen3 checkpoint holds, in
    Hugging Face's order. Linear weights are [out_features, in_features]."""
    hidden = config["hidden_size"]
    inter = config["intermediate_size"]
    vocab = config["vocab_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    hd = head_dim_of(config)
    qkv_bias = config["model_type"] == "qwen2" or config.get("attention_bias", False)
    qk_norm = config["model_type"] == "qwen3"
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes[p + "input_layernorm.weight"] = (hidden,)
        for proj, out in (("q", heads * hd), ("k", kv_heads * hd), ("v", kv_heads * hd)):
            shapes[p + f"self_attn.{proj}_proj.weight"] = (out, hidden)
            if qkv_bias:
                shapes[p + f"self_attn.{proj}_proj.bias"] = (out,)
        shapes[p + "self_attn.o_proj.weight"] = (hidden, heads * hd)
        if qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (hd,)
            shapes[p + "self_attn.k_norm.weight"] = (hd,)
        shapes[p + "post_attention_layernorm.weight"] = (hidden,)
        shapes[p + "mlp.gate_proj.weight"] = (inter, hidden)
        shapes[p + "mlp.up_proj.weight"] = (inter, hidden)
        shapes[p + "mlp.down_proj.weight"] = (hidden, inter)
    shapes["model.norm.weight"] = (hidden,)
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


@dataclass
class InitScales:
    """Standard deviations of the random weights. Chosen so a random model is not degenerate:
    attention scores spread over a few units (softmax neither uniform nor one-hot), every block
    adds a residual update of the same order as the embedding, and logits have a standard
    deviation of a few units so top-1/top-2 margins are mostly clear."""

    embed: float = 1.0
    qk_gain: float = 2.0      # q/k weights: qk_gain / sqrt(fan_in)
    linear_gain: float = 1.0  # v/o/gate/up/down: linear_gain / sqrt(fan_in)
    logit_std: float = 4.0    # lm_head: logit_std / sqrt(hidden), so logits have about this std
    norm_noise: float = 0.1   # norm weights: 1 + N(0, norm_noise)
    bias: float = 0.3         # q/k/v biases (Qwen2)


def tensor_seed(seed: int, name: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (1 << 63)


def init_tensor(name: str, shape: tuple[int, ...], seed: int, scales: InitScales,
                device: str = "cpu") -> torch.Tensor:
    """One tensor in float32, from its own generator (order-independent, deterministic)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(tensor_seed(seed, name))
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    if name.endswith("norm.weight"):
        return 1.0 + scales.norm_noise * x
    if name.endswith(".bias"):
        return scales.bias * x
    if name == "model.embed_tokens.weight":
        return scales.embed * x
    if name == "lm_head.weight":
        return (scales.logit_std / math.sqrt(shape[1])) * x
    fan_in = shape[1]
    gain = scales.qk_gain if (".q_proj." in name or ".k_proj." in name) else scales.linear_gain
    return (gain / math.sqrt(fan_in)) * x


def plan_shards(shapes: dict[str, tuple[int, ...]], element_bytes: int,
                max_shard_bytes: int | None, num_shards: int | None) -> list[list[str]]:
    """Splits tensors, in order, into shards: either at most max_shard_bytes each, or exactly
    num_shards of about equal size."""
    sizes = {n: math.prod(s) * element_bytes for n, s in shapes.items()}
    names = list(shapes)
    if num_shards is not None:
        total = sum(sizes.values())
        shards: list[list[str]] = [[] for _ in range(num_shards)]
        acc = 0
        for n in names:
            index = min(num_shards - 1, int(acc * num_shards // total))
            shards[index].append(n)
            acc += sizes[n]
        if any(not s for s in shards):
            raise ValueError("too few tensors for the requested number of shards")
        return shards
    shards = [[]]
    used = 0
    for n in names:
        if shards[-1] and max_shard_bytes is not None and used + sizes[n] > max_shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(n)
        used += sizes[n]
    return shards


def write_checkpoint(out_dir: str, config: dict, dtype: torch.dtype, seed: int,
                     scales: InitScales, device: str = "cpu", max_shard_bytes: int | None = None,
                     num_shards: int | None = None, overlap_writes: bool = False) -> int:
    """Writes model.safetensors, or model-0000i-of-0000n.safetensors + model.safetensors.index.json.
    Tensors are generated shard by shard so peak memory stays near one shard (two with
    overlap_writes, which writes a shard on a thread while the next one is drawn: the big presets
    are bound by the disk). Returns the number of parameters."""
    shapes = tensor_shapes(config)
    element_bytes = torch.tensor([], dtype=dtype).element_size()
    shards = plan_shards(shapes, element_bytes, max_shard_bytes, num_shards)
    weight_map: dict[str, str] = {}
    total_bytes = 0

    def save(tensors: dict, path: str) -> None:
        save_file(tensors, path, metadata={"format": "pt"})
        os.chmod(path, 0o644)  # safetensors creates files readable by the owner only

    pending = None  # the previous shard's write, when overlapping
    with ThreadPoolExecutor(max_workers=1) as pool:
        for i, names in enumerate(shards):
            file_name = ("model.safetensors" if len(shards) == 1
                         else f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors")
            tensors = {}
            for n in names:
                t = init_tensor(n, shapes[n], seed, scales, device).to(dtype)
                tensors[n] = t.cpu().contiguous()
                weight_map[n] = file_name
                total_bytes += tensors[n].numel() * element_bytes
            path = os.path.join(out_dir, file_name)
            if pending is not None:
                pending.result()  # at most one shard waits for the disk
            if overlap_writes:
                pending = pool.submit(save, tensors, path)
            else:
                save(tensors, path)
            del tensors
            if len(shards) > 1 and overlap_writes:
                print(f"  shard {i + 1}/{len(shards)} drawn", flush=True)
        if pending is not None:
            pending.result()
    if len(shards) > 1:
        index = {"metadata": {"total_size": total_bytes}, "weight_map": weight_map}
        write_json(os.path.join(out_dir, "model.safetensors.index.json"), index)
    return sum(math.prod(s) for s in shapes.values())


def write_json(path: str, obj) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_hf_config(path: str, config: dict) -> None:
    """config.json or generation_config.json as transformers writes them: sorted keys and a
    transformers_version."""
    write_json(path, dict(sorted({**config, "transformers_version": TRANSFORMERS_VERSION}.items())))


def llama_config(*, vocab_size: int, hidden_size: int, num_layers: int, num_heads: int,
                 num_kv_heads: int, intermediate_size: int, max_position_embeddings: int,
                 bos_token_id: int, eos_token_id, rope_theta: float = 500000.0,
                 rope_scaling: dict | None = None, tie_word_embeddings: bool = False,
                 dtype: str = "bfloat16", rms_norm_eps: float = 1e-5) -> dict:
    """config.json of a LlamaForCausalLM, in the layout Meta's Llama-3.x checkpoints use
    (rope_theta + rope_scaling, torch_dtype)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "head_dim": hidden_size // num_heads,
        "hidden_act": "silu",
        "hidden_size": hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": max_position_embeddings,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": num_heads,
        "num_hidden_layers": num_layers,
        "num_key_value_heads": num_kv_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": rms_norm_eps,
        "rope_scaling": rope_scaling,
        "rope_theta": rope_theta,
        "tie_word_embeddings": tie_word_embeddings,
        "torch_dtype": dtype,
        "use_cache": True,
        "vocab_size": vocab_size,
    }


# ---------------------------------------------------------------------------------------------
# Presets


@dataclass
class Preset:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    max_position_embeddings: int
    rope_scaling: dict | None
    llama31_specials: bool      # Llama-3.1 special-token block at the end of the vocabulary
    tokenizer_vocab: int        # size the tokenizer is trained to before padding
    max_shard_bytes: int | None
    default_out: str | None     # committed presets have a fixed home
    scales: InitScales = field(default_factory=InitScales)
    big: bool = False           # drawn on the GPU when there is one, writes overlapped


LLAMA31_ROPE_SCALING = {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                        "original_max_position_embeddings": 8192, "rope_type": "llama3"}

PRESETS = {
    "tiny-random": Preset(vocab_size=6144, hidden_size=256, num_layers=6, num_heads=8,
                          num_kv_heads=2, intermediate_size=688, max_position_embeddings=32768,
                          rope_scaling=None, llama31_specials=False, tokenizer_vocab=6144,
                          max_shard_bytes=None, default_out="/tmp/tiny-random"),
    "bench30m": Preset(vocab_size=8192, hidden_size=512, num_layers=8, num_heads=8,
                       num_kv_heads=2, intermediate_size=1408, max_position_embeddings=131072,
                       rope_scaling=None, llama31_specials=False, tokenizer_vocab=8192,
                       max_shard_bytes=None, default_out=None),
    "llama3-8b-shape": Preset(vocab_size=128256, hidden_size=4096, num_layers=32, num_heads=32,
                              num_kv_heads=8, intermediate_size=14336,
                              max_position_embeddings=262144, rope_scaling=LLAMA31_ROPE_SCALING,
                              llama31_specials=True, tokenizer_vocab=8192,
                              max_shard_bytes=5 * 10**9, default_out=None, big=True),
    # Llama-3.1-70B's config (max_position_embeddings 131072 there; 262144 here, as the 8B shape,
    # so 128K-token benchmarks plus their decode steps stay within it).
    "llama3-70b-shape": Preset(vocab_size=128256, hidden_size=8192, num_layers=80, num_heads=64,
                               num_kv_heads=8, intermediate_size=28672,
                               max_position_embeddings=262144, rope_scaling=LLAMA31_ROPE_SCALING,
                               llama31_specials=True, tokenizer_vocab=8192,
                               max_shard_bytes=5 * 10**9, default_out=None, big=True),
}


MODEL_FILE_PATTERNS = ("config.json", "generation_config.json", "tokenizer.json",
                       "tokenizer_config.json", "model.safetensors", "model.safetensors.index.json",
                       "model-*-of-*.safetensors")


def clear_model_dir(out_dir: str) -> None:
    """Removes the files a previous run wrote (only those: --out may name a directory that holds
    other things)."""
    os.makedirs(out_dir, exist_ok=True)
    for pattern in MODEL_FILE_PATTERNS:
        for path in glob.glob(os.path.join(out_dir, pattern)):
            os.remove(path)


def preset_name(name: str, num_layers: int | None) -> str:
    """The preset's name, or "<preset>-truncated-<N>-of-<L>-layers" for --num-layers N."""
    p = PRESETS[name]
    if num_layers is None or num_layers == p.num_layers:
        return name
    return f"{name}-truncated-{num_layers}-of-{p.num_layers}-layers"


def make_preset(name: str, out_dir: str, seed: int, device: str,
                num_layers: int | None = None, config_only: bool = False) -> dict:
    p = PRESETS[name]
    layers = p.num_layers if num_layers is None else num_layers
    if not 1 <= layers <= p.num_layers:
        raise SystemExit(f"--num-layers {layers}: {name} has {p.num_layers} layers")
    # Refuse before writing anything when the disk cannot hold the weights.
    planned = llama_config(vocab_size=p.vocab_size, hidden_size=p.hidden_size, num_layers=layers,
                           num_heads=p.num_heads, num_kv_heads=p.num_kv_heads,
                           intermediate_size=p.intermediate_size,
                           max_position_embeddings=p.max_position_embeddings, bos_token_id=0,
                           eos_token_id=0)
    shapes = tensor_shapes(planned)
    need = 2 * sum(math.prod(s) for s in shapes.values())  # bf16
    per_layer = 2 * sum(math.prod(s) for n, s in shapes.items() if n.startswith("model.layers.0."))
    os.makedirs(out_dir, exist_ok=True)
    old = sum(os.path.getsize(f) for pat in MODEL_FILE_PATTERNS
              for f in glob.glob(os.path.join(out_dir, pat)))  # what clear_model_dir frees
    free = shutil.disk_usage(out_dir).free + old
    if need > free and not config_only:
        raise SystemExit(f"{preset_name(name, num_layers)} needs {need / 1e9:.1f} GB in {out_dir}, "
                         f"which has {free / 1e9:.1f} GB free; use --num-layers for a truncated "
                         f"model ({per_layer / 1e9:.2f} GB per layer, {(need - layers * per_layer) / 1e9:.1f} "
                         f"GB besides) or another --out")
    clear_model_dir(out_dir)

    block = LLAMA31_SPECIAL_BLOCK if p.llama31_specials else None
    tok = recipes.build_tokenizer("llama3", CORPUS, p.tokenizer_vocab)
    if tok.get_vocab_size() != p.vocab_size or block is not None:
        tok = pad_tokenizer_vocab(tok, p.vocab_size, block)
    recipes.save_tokenizer_dir(tok, out_dir, "llama3", chat_template=LLAMA3_INSTRUCT_CHAT_TEMPLATE)

    bos = special_id(tok, "<|begin_of_text|>")
    eos_ids = [special_id(tok, "<|end_of_text|>"), special_id(tok, "<|eot_id|>")]
    config = llama_config(vocab_size=p.vocab_size, hidden_size=p.hidden_size,
                          num_layers=layers, num_heads=p.num_heads,
                          num_kv_heads=p.num_kv_heads, intermediate_size=p.intermediate_size,
                          max_position_embeddings=p.max_position_embeddings, bos_token_id=bos,
                          eos_token_id=eos_ids, rope_scaling=p.rope_scaling)
    if layers != p.num_layers:  # says what it is wherever the config is read
        config["_name_or_path"] = preset_name(name, num_layers)
    write_hf_config(os.path.join(out_dir, "config.json"), config)
    # Llama-3-8B-Instruct's generation defaults, with this tokenizer's ids.
    write_hf_config(os.path.join(out_dir, "generation_config.json"), {
        "bos_token_id": bos, "eos_token_id": eos_ids, "do_sample": True, "temperature": 0.6,
        "top_p": 0.9, "max_length": p.max_position_embeddings,
    })
    if config_only:
        # No weights: longserve generates them (--load-format dummy, docs/dummy-weights.md).
        return {"num_params": sum(math.prod(s) for s in tensor_shapes(config).values()),
                "config": config}
    num_params = write_checkpoint(out_dir, config, torch.bfloat16, seed, p.scales, device,
                                  max_shard_bytes=p.max_shard_bytes, overlap_writes=p.big)
    return {"num_params": num_params, "config": config}


def verify(out_dir: str, device: str) -> None:
    """Reloads the directory with transformers: no missing or unexpected tensors, a forward pass
    with finite logits that vary across positions, and the chat template renders."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, info = AutoModelForCausalLM.from_pretrained(
        out_dir, dtype=torch.bfloat16 if device == "cuda" else torch.float32,
        attn_implementation="eager", output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        raise AssertionError(f"loading info not clean: {bad}")
    model.to(device).eval()
    tok = AutoTokenizer.from_pretrained(out_dir)
    text = tok.apply_chat_template([{"role": "user", "content": "Hello, who are you?"}],
                                   tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids.to(device)
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    if not torch.isfinite(logits).all():
        raise AssertionError("non-finite logits")
    top2 = logits.topk(2, dim=-1).values
    print(f"verify: {ids.shape[1]} chat tokens, logit std {logits.std().item():.3f}, "
          f"median top-2 gap {(top2[:, 0] - top2[:, 1]).median().item():.3f}, "
          f"distinct argmax {logits.argmax(-1).unique().numel()}/{ids.shape[1]}")
    print("verify: chat template renders:", repr(text[:120]))


def main(argv: Iterable[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny-random")
    ap.add_argument("--out", help="output directory (required except for tiny-random)")
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                    help="where weights are drawn; auto = cuda for llama3-8b-shape and "
                         "llama3-70b-shape when available, else cpu (the committed preset is "
                         "always drawn on cpu)")
    ap.add_argument("--num-layers", type=int, default=None,
                    help="a truncated model of the preset's shape with this many layers (named "
                         "<preset>-truncated-N-of-L-layers in config.json's _name_or_path)")
    ap.add_argument("--config-only", action="store_true",
                    help="write config.json, generation_config.json and the tokenizer files but no "
                         "weights, for longserve's --load-format dummy (random weights generated "
                         "at load; docs/dummy-weights.md)")
    ap.add_argument("--verify", action="store_true",
                    help="reload with transformers and run a forward pass")
    args = ap.parse_args(argv)

    preset = PRESETS[args.preset]
    out = args.out or preset.default_out
    if out is None:
        ap.error(f"--out is required for --preset {args.preset}")
    out = os.path.join(REPO_ROOT, out) if not os.path.isabs(out) else out
    device = args.device
    if device == "auto" and not args.config_only:  # no weights drawn: torch not needed
        device = "cuda" if preset.big and torch.cuda.is_available() else "cpu"
    t0 = time.monotonic()
    if args.config_only and args.verify:
        ap.error("--verify needs weights; it does not go with --config-only")
    result = make_preset(args.preset, out, args.seed, device, args.num_layers, args.config_only)
    total_bytes = sum(os.path.getsize(f) for p in MODEL_FILE_PATTERNS
                      for f in glob.glob(os.path.join(out, p)))
    print(f"{preset_name(args.preset, args.num_layers)}: {result['num_params']:,} parameters, "
          f"{total_bytes / 1e6:.1f} MB on disk in {out} "
          f"({'config only' if args.config_only else f'weights drawn on {device}'}) in "
          f"{time.monotonic() - t0:.0f} s")
    if args.verify:
        verify(out, "cuda" if device == "cuda" else "cpu")


if __name__ == "__main__":
    main()
