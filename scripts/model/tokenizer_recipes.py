"""Build small tokenizers in the three styles longserve must read, with Hugging Face `tokenizers`.

No pretrained tokenizer can be downloaded here, so fixtures and the bundled model use tokenizers
trained on a local corpus but configured exactly like the real ones:

- ``llama3``: byte-level BPE, Llama-3 split regex, ``ignore_merges``, BOS added by a
  TemplateProcessing post-processor, Llama-3 special tokens.
- ``qwen2``: byte-level BPE, Qwen2 split regex (single digits), NFC normalizer, no BOS,
  Qwen special tokens (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``).
- ``spm``: SentencePiece-style BPE as in Llama-2 / Mistral ``tokenizer.json``: Prepend("▁") +
  Replace(" ", "▁") normalizer, ``byte_fallback`` with ``<0xNN>`` tokens, decoder
  Replace/ByteFallback/Fuse/Strip, ``<unk>``/``<s>``/``</s>``, BOS added.

Everything is deterministic for a given corpus and vocabulary size.
"""

from __future__ import annotations

import json
import os
from typing import Iterable

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

LLAMA3_SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SPM_SPECIALS = ["<unk>", "<s>", "</s>"]


def _byte_level_tokenizer(pattern: str, nfc: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE(ignore_merges=True))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def _train_byte_level(tok: Tokenizer, corpus: Iterable[str], vocab_size: int,
                      specials: list[str]) -> None:
    # Specials are added after training so they take the ids after the learned vocabulary,
    # like the real Llama-3 (128000+) and Qwen (151643+) layouts.
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(specials),
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])


def build_llama3_tokenizer(corpus: Iterable[str], vocab_size: int) -> Tokenizer:
    tok = _byte_level_tokenizer(LLAMA3_PATTERN, nfc=False)
    _train_byte_level(tok, corpus, vocab_size, LLAMA3_SPECIALS)
    bos = "<|begin_of_text|>"
    bos_id = tok.token_to_id(bos)
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{bos}:0 $A:0",
                pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                special_tokens=[(bos, bos_id)],
            ),
        ]
    )
    return tok


def build_qwen2_tokenizer(corpus: Iterable[str], vocab_size: int) -> Tokenizer:
    tok = _byte_level_tokenizer(QWEN2_PATTERN, nfc=True)
    _train_byte_level(tok, corpus, vocab_size, QWEN2_SPECIALS)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # Qwen's tokenizer.json sets ignore_merges false.
    data = json.loads(tok.to_str())
    data["model"]["ignore_merges"] = False
    return Tokenizer.from_str(json.dumps(data))


def build_spm_tokenizer(corpus: Iterable[str], vocab_size: int) -> Tokenizer:
    """Llama-2 / Mistral style: ids 0..2 specials, 3..258 byte tokens <0x00>..<0xFF>, then pieces."""
    normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # Learn merges on the normalised text with a plain character-level BPE, then rebuild the
    # vocabulary in the SentencePiece layout.
    learner = Tokenizer(models.BPE(unk_token="<unk>"))
    learner.normalizer = normalizer
    learner.pre_tokenizer = pre_tokenizers.Split(Regex(r"▁[^▁]*|[^▁]+"), behavior="isolated")
    n_pieces = vocab_size - len(SPM_SPECIALS) - 256
    corpus = list(corpus)
    # The trainer's own limit_alphabet breaks ties in character counts in hash-map order, which
    # changes from run to run; choose the 200 most frequent characters here, ties by code point,
    # and hand them over as the initial alphabet (always kept) so training is reproducible.
    counts: dict[str, int] = {}
    for text in corpus:
        for ch in normalizer.normalize_str(text):
            counts[ch] = counts.get(ch, 0) + 1
    alphabet = sorted(counts, key=lambda ch: (-counts[ch], ch))[:200]
    trainer = trainers.BpeTrainer(
        vocab_size=n_pieces, min_frequency=2, show_progress=False, special_tokens=[],
        limit_alphabet=len(alphabet), initial_alphabet=alphabet,
    )
    learner.train_from_iterator(corpus, trainer=trainer)
    learned = json.loads(learner.to_str())["model"]
    learned_vocab: dict[str, int] = learned["vocab"]
    merges = learned["merges"]

    vocab: dict[str, int] = {}
    for s in SPM_SPECIALS:
        vocab[s] = len(vocab)
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in sorted(learned_vocab.items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [m for m in merges if "".join(m if isinstance(m, list) else m.split(" ")) in vocab]

    data = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, s in enumerate(SPM_SPECIALS)
        ],
        "normalizer": json.loads(normalizer.__getstate__()),
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
        },
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    return Tokenizer.from_str(json.dumps(data))


STYLES = {
    "llama3": build_llama3_tokenizer,
    "qwen2": build_qwen2_tokenizer,
    "spm": build_spm_tokenizer,
}

# tokenizer_config.json entries per style (bos/eos strings, chat templates are added by callers).
STYLE_CONFIG = {
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
               "add_bos_token": True, "tokenizer_class": "PreTrainedTokenizerFast"},
    "qwen2": {"bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
              "add_bos_token": False, "tokenizer_class": "Qwen2TokenizerFast"},
    "spm": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
            "add_bos_token": True, "add_eos_token": False, "tokenizer_class": "LlamaTokenizerFast"},
}


def build_tokenizer(style: str, corpus: Iterable[str], vocab_size: int) -> Tokenizer:
    return STYLES[style](corpus, vocab_size)


def save_tokenizer_dir(tok: Tokenizer, out_dir: str, style: str,
                       chat_template: str | None = None) -> None:
    """Writes tokenizer.json and tokenizer_config.json into out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    cfg = dict(STYLE_CONFIG[style])
    cfg["model_max_length"] = 1 << 30
    if chat_template is not None:
        cfg["chat_template"] = chat_template
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


def default_corpus() -> list[str]:
    """A small multilingual corpus made from text that ships with Python itself (deterministic):
    module docstrings of the standard library plus a few fixed multilingual lines."""
    import pydoc  # noqa: F401  (ensures the stdlib docs are importable)
    import importlib

    texts: list[str] = []
    for name in ["os", "re", "json", "collections", "itertools", "functools", "pathlib", "typing",
                 "argparse", "logging", "subprocess", "threading", "unittest", "email",
                 "http.client", "datetime", "decimal", "fractions", "statistics", "textwrap"]:
        mod = importlib.import_module(name)
        if mod.__doc__:
            texts.append(mod.__doc__)
        for attr in sorted(dir(mod)):
            doc = getattr(getattr(mod, attr, None), "__doc__", None)
            if isinstance(doc, str) and len(doc) > 40:
                texts.append(doc)
    texts += [
        "Le café coûte 3,50 € à Paris; l'été dernier, c'était 2,80 €.",
        "Übermäßig große Straßen führen zur Hauptstadt. Grüße aus München!",
        "日本語のテキストも少し含めます。東京は日本の首都です。",
        "中文文本：北京是中国的首都。我们今天去公园散步。",
        "한국어 문장도 있습니다. 서울은 대한민국의 수도입니다.",
        "Русский текст: Москва — столица России. Привет, мир!",
        "Ελληνικά: Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
        "العربية: القاهرة هي عاصمة مصر.",
        "हिन्दी: नई दिल्ली भारत की राजधानी है।",
        "Emoji 🙂🚀🔥 and numbers 1234567890 3.14159 2026-11-21 12:34:56.",
        "def f(x):\n    return x ** 2  # square\n\tif x != 0:\n\t\tprint(f'{x=}')\n",
    ] * 4
    return texts
