#!/usr/bin/env python3
"""Make the tokenizer fixtures: what Hugging Face `tokenizers` computes, for the C++ tokenizer
tests (tests/tokenizer/) to compare against exactly.

Writes, under tests/fixtures/tokenizers/:

  <name>/tokenizer.json, tokenizer_config.json [, chat_template.jinja]
  <name>/expected.json      per hard string: HF ids with add_special_tokens true and false, and
                            HF decode of the first with skip_special_tokens true and false;
                            HF decode of random id sequences; HF's id -> token table
  components.json           single normalizers, pre-tokenizers and decoders, and small
                            hand-made tokenizers (BPE options, post-processors), each with HF's
                            outputs on a set of inputs
and tests/tokenizer/fuzz_seeds/*.json: small valid tokenizer.json files (vocabulary ~300).

The fixture tokenizers (vocabulary 2000, trained on tokenizer_recipes.default_corpus()):
  llama3             byte-level BPE, Llama-3 regex, ignore_merges, BOS by TemplateProcessing
  qwen2              byte-level BPE, Qwen2 regex (single digits), NFC
  spm                SentencePiece-style: Prepend/Replace normalizer, byte_fallback, <unk>
  spm_legacy_merges  spm with merges as legacy "a b" strings (and a "#version" line)
  spm_metaspace      spm with a Metaspace pre-tokenizer (prepend_scheme "first", no split)
                     instead of the normalizer, as newer Mistral tokenizer.json files are
  qwen2_added        qwen2 with Sequence[NFC, Lowercase] and extra added tokens: non-special,
                     lstrip / rstrip / single_word, normalized and not, overlapping contents

Invalid UTF-8 inputs are stored as hex ("hex" instead of "text"); the expected ids are HF's
encoding of bytes.decode("utf-8", errors="replace").

Deterministic for a given Python version (default_corpus() reads stdlib docstrings) and the
pinned `tokenizers` version. Usage: python3 scripts/make_tokenizer_fixtures.py
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys

from tokenizers import AddedToken, Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_recipes as recipes  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_ROOT = os.path.join(REPO_ROOT, "tests", "fixtures", "tokenizers")
SEEDS_DIR = os.path.join(REPO_ROOT, "tests", "tokenizer", "fuzz_seeds")
VOCAB_SIZE = 2000
NUM_RANDOM_DECODES = 80

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CHAT_TEMPLATE_FILE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"

# Hard strings every fixture tokenizer is checked on.
HARD_STRINGS = [
    "",
    " ",
    "   ",
    "\t",
    "\n",
    "\n\n\n",
    "\r\n",
    "a\r\nb\r\n\r\nc\r",
    "Hello world",
    " Hello world",
    "Hello  world  ",
    "trailing spaces   ",
    "  leading and trailing  ",
    "tabs\tand\t\ttabs \t\n mixed",
    "nbsp\u00a0ideographic\u3000line\u2028nel\u0085thin\u2009ogham\u1680mongolian\u180e.",
    "DON'T we'LL I'M you'RE they'VE she'S it'D",
    "don't won't can't I'm you're we've he'd she'll",
    "'s 's' ''s 'S 'st 'Ll",
    "0",
    "12",
    "123",
    "1234",
    "12345",
    "123456",
    "1234567",
    "12345678901234567890",
    "3.14159 2026-11-21 1,000,000 0x1F -42 +7",
    "\u0663\u0664\u0665 \u0661\u0662 \u00bd \u00b2 \u216b \uff11\uff12",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m \u00d8re stra\u00dfe",
    "Cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m",
    "e\u0301\u0302\u0303 a\u0300\u0301 \u0301leading mark",
    "\u01c5 \u01c8 \u01cb; \u0130stanbul; \u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3; \ufb01 \ufb02; \u212b \u2126",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002",
    "\u4e2d\u6587\u6587\u672c\uff1a\u5317\u4eac\u662f\u4e2d\u56fd\u7684\u9996\u90fd\u3002",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\ub3c4 \uc788\uc2b5\ub2c8\ub2e4.",
    "\u1112\u1161\u11ab\u1100\u1173\u11af decomposed hangul",
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442: \u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac: \u0397 \u0391\u03b8\u03ae\u03bd\u03b1.",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629: \u0627\u0644\u0642\u0627\u0647\u0631\u0629 \u0647\u064a \u0639\u0627\u0635\u0645\u0629 \u0645\u0635\u0631.",
    "\u0939\u093f\u0928\u094d\u0926\u0940: \u0928\u0908 \u0926\u093f\u0932\u094d\u0932\u0940 \u092d\u093e\u0930\u0924 \u0915\u0940 \u0930\u093e\u091c\u0927\u093e\u0928\u0940 \u0939\u0948\u0964",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u0e44\u0e21\u0e48\u0e21\u0e35\u0e0a\u0e48\u0e2d\u0e07\u0e27\u0e48\u0e32\u0e07",
    "Emoji \U0001f642\U0001f680\U0001f525 family \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "flags \U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5 skin \U0001f44d\U0001f3fd keycap 1\ufe0f\u20e3 \u2764\ufe0f",
    "\u200b zero width \u200d joiner \ufeff bom \u2060 word joiner",
    "def f(x):\n    return x ** 2  # square\n\tif x != 0:\n\t\tprint(f'{x=}')\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }  // C++\n",
    "<html><body class=\"x\">&amp; &lt;tag&gt;</body></html>",
    "!!!??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) \u00bf\u00a1 \u2014\u2013",
    "a" * 300,
    "supercalifragilisticexpialidocious" * 30,
    "\U0001f642" * 80,
    "\u65e5\u672c" * 200,
    "x" + " " * 50 + "y" + "\n" * 20 + "z" + "\t " * 10,
    "\x00 NUL \x01 control \x1f unit sep \x7f DEL \x1c",
    "\\u escaped \\n text \\",
    "\u2581 literal metaspace \u2581\u2581 chars\u2581",
    "\u0120 literal byte-level chars \u010a \u00c4",
    "<0x41> literal byte token text <0xZZ>",
    "\u017f long s '\u017f \u212a kelvin 'K",
    "\U0001d400\U0001d401 math bold \U00010348 gothic \U0001f9d1\u200d\U0001f4bb",
    "\ufffd replacement char already \ufffd\ufffd",
]

# Invalid UTF-8 inputs (stored as hex).
INVALID_UTF8 = [
    b"\xff",
    b"abc\xffdef",
    b"\xc3",
    b"caf\xc3",
    b"\xe6\x97",
    b"\xe6\x97\xa5\xe6",
    b"\xf0\x9f\x99",
    b"\xf0\x9f\x99 space",
    b"\xed\xa0\x80 surrogate",
    b"\xc0\x80 overlong \xe0\x80\x80",
    b"\xf4\x90\x80\x80 too big \xf5\xf8\xfc",
    b"\x80\x80 lone continuation \xbf",
    b"ok \xe2\x82 mixed \xf0 bad \xe2\x82\xac good",
    b"Hello \xc3\xa9\xc3 world\xe2",
]

SPECIAL_STRINGS = {
    "llama3": [
        "<|begin_of_text|>Hello<|end_of_text|>",
        "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "text<|eot_id|>more <|eom_id|> end",
        "<|begin_of_text|><|begin_of_text|>",
        "<|notaspecial|> <|eot_id",
    ],
    "qwen2": [
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n",
        "<|endoftext|>",
        "a<|endoftext|>b <|im_end|> c",
        "<|im_start|><|im_start|>",
    ],
    "spm": [
        "<s>hi</s>",
        "<s> hi </s> there",
        "<unk>",
        "[INST] hi [/INST] answer</s>",
        "</s></s>",
        " <s>",
    ],
    "added": [
        "Hello world",
        "HELLO there, hello!",
        "helloworld sayhello hello_x hello2 hello",
        "x [MASK] y",
        "x   [MASK]y [MASK][MASK]",
        "\t[MASK]",
        "<sep>   next<sep>\n\nafter",
        "a <both>  b <both><both>",
        "abcd abc ab a xabcx",
        "W\u00d6RLD wo\u0308rld w\u00f6rld",
        "\u00e9 \u00c9 e\u0301",
        "<tool_call>{\"a\":1}</tool_call>",
        "<think>\nhmm\n</think>\n\nanswer",
        "Ma\u00f1ana MA\u00d1ANA man\u0303ana",
        "<|im_start|>user\nHello [MASK] <sep> x<|im_end|>",
        "  ",
        "\u0130 dotted",
    ],
}


def _long_text() -> str:
    """~8 KB of real prose and code: SentencePiece-style tokenizers see it as one word."""
    return "\n\n".join(recipes.default_corpus()[:60])[:8000]


def _hard_cases(tok: Tokenizer, style_key: str) -> list[dict]:
    cases = []
    inputs = [("text", s) for s in HARD_STRINGS + SPECIAL_STRINGS[style_key] + [_long_text()]]
    inputs += [("hex", b.hex()) for b in INVALID_UTF8]
    for kind, value in inputs:
        text = value if kind == "text" else bytes.fromhex(value).decode("utf-8", errors="replace")
        ids = tok.encode(text, add_special_tokens=True).ids
        ids_plain = tok.encode(text, add_special_tokens=False).ids
        cases.append({
            kind: value,
            "ids": ids,
            "ids_no_special": ids_plain,
            "decode": tok.decode(ids, skip_special_tokens=False),
            "decode_skip": tok.decode(ids, skip_special_tokens=True),
        })
    return cases


def _random_decodes(tok: Tokenizer, rng: random.Random) -> list[dict]:
    vocab = tok.get_vocab(with_added_tokens=True)
    n = max(vocab.values()) + 1
    # (Sorted: the dicts HF returns come from Rust hash maps, in no stable order.)
    byte_ids = sorted(i for t, i in vocab.items() if t.startswith("<0x") and len(t) == 6)
    # Byte-level vocabularies: single characters standing for bytes >= 0x80 split characters.
    single_bytes = sorted(i for t, i in vocab.items() if len(t) == 1 and ord(t) >= 0x80)
    specials = sorted(tok.get_added_tokens_decoder())
    out = []
    for k in range(NUM_RANDOM_DECODES):
        length = rng.randint(1, 24)
        pool = list(range(n))
        if k % 3 == 1:
            pool = (byte_ids or single_bytes) * 4 + specials + list(range(n))
        ids = [rng.choice(pool) for _ in range(length)]
        out.append({
            "ids": ids,
            "decode": tok.decode(ids, skip_special_tokens=False),
            "decode_skip": tok.decode(ids, skip_special_tokens=True),
        })
    return out


def _expected(tok: Tokenizer, style_key: str, config: dict, rng: random.Random) -> dict:
    vocab = tok.get_vocab(with_added_tokens=True)
    n = max(vocab.values()) + 1
    added = tok.get_added_tokens_decoder()

    def config_id(key: str):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        return None if value is None else tok.token_to_id(value)

    return {
        "vocab_size": n,
        "id_to_token": [tok.id_to_token(i) for i in range(n)],
        # token_to_id(id_to_token(i)): not always i (HF shows normalized added tokens in their
        # normalized form but looks them up by their content).
        "token_to_id_of_token": [tok.token_to_id(tok.id_to_token(i)) for i in range(n)],
        "special_ids": sorted(i for i, t in added.items() if t.special),
        "bos_token_id": config_id("bos_token"),
        "eos_token_id": config_id("eos_token"),
        "cases": _hard_cases(tok, style_key),
        "random_decodes": _random_decodes(tok, rng),
    }


def _legacy_merges(tok: Tokenizer) -> str:
    """tokenizer.json text with merges as legacy "a b" strings. Returned as text: loading it
    into a Tokenizer and saving again would write the new [a, b] form."""
    data = json.loads(tok.to_str())
    merges = data["model"]["merges"]
    data["model"]["merges"] = ["#version: 0.2"] + [
        m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in merges]
    return json.dumps(data, ensure_ascii=False, indent=2)


def _metaspace(tok: Tokenizer) -> Tokenizer:
    data = json.loads(tok.to_str())
    data["normalizer"] = None
    data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                             "prepend_scheme": "first", "split": False}
    return Tokenizer.from_str(json.dumps(data))


def _with_added(tok: Tokenizer) -> Tokenizer:
    data = json.loads(tok.to_str())
    data["normalizer"] = {"type": "Sequence",
                          "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]}
    tok = Tokenizer.from_str(json.dumps(data))
    tok.add_tokens([
        AddedToken("<tool_call>", special=False, normalized=False),
        AddedToken("</tool_call>", special=False, normalized=False),
        AddedToken("<think>", special=False, normalized=False),
        AddedToken("</think>", special=False, normalized=False),
        AddedToken("hello", single_word=True, normalized=True),
        AddedToken("wo\u0308rld", normalized=True),
        AddedToken("ab", normalized=False),
        AddedToken("abc", normalized=False),
        AddedToken("\u00e9", normalized=False),
        AddedToken("Ma\u00f1ana", normalized=True),
        AddedToken("<both>", lstrip=True, rstrip=True, normalized=False),
        AddedToken("  ", normalized=False),
    ])
    tok.add_special_tokens([
        AddedToken("[MASK]", lstrip=True, special=True, normalized=False),
        AddedToken("<sep>", rstrip=True, special=True, normalized=False),
    ])
    return tok


def _save(name: str, tok: Tokenizer | str, style: str, style_key: str, rng: random.Random,
          chat_template: str | None = None, template_file: str | None = None,
          config_update: dict | None = None) -> None:
    """tok is a Tokenizer, or tokenizer.json text to be written verbatim."""
    out_dir = os.path.join(OUT_ROOT, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    raw = tok if isinstance(tok, str) else None
    if raw is not None:
        tok = Tokenizer.from_str(raw)
    recipes.save_tokenizer_dir(tok, out_dir, style, chat_template=chat_template)
    if raw is not None:
        with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(raw)
    cfg_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        config = json.load(f)
    if config_update:
        config.update(config_update)
        with open(cfg_path, "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2, ensure_ascii=False)
            f.write("\n")
    if template_file is not None:
        with open(os.path.join(out_dir, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(template_file)
    # Re-read what was written, so the expectations are those of the file itself.
    tok = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    expected = _expected(tok, style_key, config, rng)
    with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: vocab {expected['vocab_size']}, {len(expected['cases'])} cases")


# ---------------------------------------------------------------------------------------------
# components.json: single components through HF, on shared inputs.

COMPONENT_TEXTS = [
    "", "Hello World", "  two  spaces  ", "\tTab\nNew\r\nline ", "DON'T Stop 'Ll",
    "Caf\u00e9 Cafe\u0301 \u00c5 A\u030a \ufb01 \u2460 \u00bd", "\u0130\u0131 \u03a3\u03c3\u03c2 \u1e9e\u00df",
    "x123y 4567 \u0663\u0664 \u00b2 \u216b", "\u65e5\u672c\u8a9e \U0001f642\U0001f680",
    "a\u00a0b\u3000c\u0085d\u2028e\u180ef", "\u2581lead \u2581\u2581mid\u2581", "abxxcx", "xx",
    "end with space ", "naive\u0308 \u0301", "MiXeD CaSe \u00c9T\u00c9",
]

SPLIT_PATTERNS = [
    {"Regex": r"\s+"}, {"Regex": r"\d"}, {"Regex": r"x*"}, {"String": " "}, {"String": "x"},
    {"Regex": recipes.LLAMA3_PATTERN}, {"Regex": recipes.QWEN2_PATTERN},
    {"Regex": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"},
    {"Regex": r"\p{Letter}+|\p{l}"}, {"Regex": r"\h+"}, {"Regex": r"^\w+|\w+$"},
    {"Regex": r"[\w]+"}, {"Regex": r"\W+"}, {"Regex": r"(?i:a|e)"}, {"Regex": r"\S+"},
    {"Regex": r"[^\s\p{L}]+"}, {"Regex": r"\u00e9|\x{41}"},
]
BEHAVIORS = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]

DECODER_TOKENS = [
    ["Hello", "\u0120world", "\u010a", "!"],
    ["\u00e6", "\u0139", "\u00a5", "x"],
    ["\u00e6", "\u0139"],
    ["<0x41>", "<0xE4>", "<0xBD>", "<0xA0>", "\u2581a"],
    ["<0x41>", "<0xE4>", "\u2581b", "<0xE4>"],
    ["<0x+F>", "<0x4a>", "<0xg1>", "<0x0A>>", "<0x0>"],
    ["\u2581\u2581", "\u2581a", "b\u2581", "\u2581"],
    ["\u2581Hello", "\u2581", "world"],
    ["  a  ", "   ", "b ", " c"],
    [],
    ["only"],
    ["[PAD] x", "\u0120y"],
]


def _tokenizer_with(component_key: str, component) -> Tokenizer:
    data = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {}, "merges": []},
    }
    data[component_key] = component
    return Tokenizer.from_str(json.dumps(data))


def _component_entries() -> list[dict]:
    entries = []

    def add(kind: str, component, run):
        key = {"normalizer": "normalizer", "pre_tokenizer": "pre_tokenizer",
               "decoder": "decoder"}[kind]
        try:
            tok = _tokenizer_with(key, component)
        except BaseException:  # HF rejects (or panics on) the component: C++ must reject it.
            entries.append({"kind": kind, "json": component, "error": True})
            return
        entries.append({"kind": kind, "json": component, "cases": run(tok)})

    def normalize_cases(tok):
        return [[s, tok.normalizer.normalize_str(s)] for s in COMPONENT_TEXTS]

    def pre_tokenize_cases(tok):
        return [[s, [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(s)]] for s in COMPONENT_TEXTS]

    def decode_cases(tok):
        return [[t, tok.decoder.decode(t)] for t in DECODER_TOKENS]

    for n in [{"type": "NFC"}, {"type": "NFD"}, {"type": "NFKC"}, {"type": "NFKD"},
              {"type": "Lowercase"}, {"type": "Strip", "strip_left": True, "strip_right": True},
              {"type": "Strip", "strip_left": False, "strip_right": True},
              {"type": "Prepend", "prepend": "\u2581"},
              {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
              {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
              {"type": "Replace", "pattern": {"String": ""}, "content": "|"},
              {"type": "Replace", "pattern": {"Regex": "x*"}, "content": "-"},
              {"type": "ByteLevel"},
              {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
                                                   {"type": "Prepend", "prepend": "_"}]},
              {"type": "Precompiled", "precompiled_charsmap": None},
              {"type": "NoSuchNormalizer"}]:
        add("normalizer", n, normalize_cases)

    for pattern in SPLIT_PATTERNS:
        for behavior in BEHAVIORS:
            for invert in (False, True):
                add("pre_tokenizer", {"type": "Split", "pattern": pattern, "behavior": behavior,
                                      "invert": invert}, pre_tokenize_cases)
    for pt in [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": True},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
        {"type": "Metaspace", "replacement": "_", "prepend_scheme": "always", "split": False},
        {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True},
        {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": False,
         "str_rep": "\u2581"},
        {"type": "Metaspace", "replacement": "ab", "prepend_scheme": "always", "split": True},
        {"type": "Digits", "individual_digits": True},
        {"type": "Digits", "individual_digits": False},
        {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": recipes.LLAMA3_PATTERN},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": False},
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
             "split": True}]},
        {"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways", "invert": False},
        {"type": "Whitespace"},
    ]:
        add("pre_tokenizer", pt, pre_tokenize_cases)

    spm_chain = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                 {"type": "ByteFallback"}, {"type": "Fuse"},
                 {"type": "Strip", "content": " ", "start": 1, "stop": 0}]
    for d in [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "Replace", "pattern": {"Regex": "[ab]+"}, "content": "<>"},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        {"type": "Strip", "content": " ", "start": 2, "stop": 1},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": True},
        {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": False},
        {"type": "Sequence", "decoders": spm_chain},
        {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                                          {"type": "Metaspace", "replacement": "\u2581",
                                           "prepend_scheme": "always", "split": True},
                                          {"type": "Fuse"}]},
        {"type": "WordPieceish"},
    ]:
        add("decoder", d, decode_cases)
    return entries


def _mini_tokenizers() -> list[dict]:
    """Small hand-made tokenizers for BPE options and post-processors, encoded end to end."""
    def bpe(vocab_tokens, merges, **options):
        model = {"type": "BPE", "dropout": None, "unk_token": None,
                 "continuing_subword_prefix": None, "end_of_word_suffix": None,
                 "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                 "vocab": {t: i for i, t in enumerate(vocab_tokens)}, "merges": merges}
        model.update(options)
        return model

    def tokenizer(model, **parts):
        data = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                "normalizer": None, "pre_tokenizer": None, "post_processor": None,
                "decoder": None, "model": model}
        data.update(parts)
        return data

    letters = list("abcdefghijklmnopqrstuvwxyz")
    whitespace_split = {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "Removed",
                        "invert": False}
    texts = ["", "abc", "abcabc abd", "hello world", "xyz?!", "ab\u00e9cd", "\u00e9\u00e9a\u00e9",
             "aaaaaaaaaaaaaaaa", "Q\u00e9Qa", "cab bad", "[CLS] abc [SEP]"]
    added = [{"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}]
    minis = {}

    vocab = ["[UNK]"] + letters + ["##" + c for c in letters] + [
        "ab", "##bc", "abc", "ab</w>", "c</w>", "##c</w>", "abc</w>", "d</w>", "##d</w>"]
    vocab = list(dict.fromkeys(vocab))
    minis["subword_prefix"] = tokenizer(
        bpe(vocab, [["a", "##b"], ["##b", "##c"], ["ab", "##c"]], unk_token="[UNK]",
            continuing_subword_prefix="##"),
        pre_tokenizer=whitespace_split, added_tokens=added)
    vocab2 = ["[UNK]"] + letters + [c + "</w>" for c in letters] + ["ab", "abc</w>", "bc</w>"]
    minis["word_suffix"] = tokenizer(
        bpe(vocab2, [["a", "b"], ["ab", "c</w>"], ["b", "c</w>"]], unk_token="[UNK]",
            end_of_word_suffix="</w>", fuse_unk=True),
        pre_tokenizer=whitespace_split, added_tokens=added)
    vocab3 = ["[UNK]"] + letters + ["ab", "bc", "abc", "aa", "aaaa"]
    for fuse in (False, True):
        minis[f"unk_fuse_{fuse}"] = tokenizer(
            bpe(vocab3, ["a b", "b c", "ab c", "a a", "aa aa"], unk_token="[UNK]",
                fuse_unk=fuse),
            pre_tokenizer=whitespace_split, added_tokens=added)
    minis["no_unk_token"] = tokenizer(bpe(vocab3, ["a b", "b c", "ab c"]),
                                      pre_tokenizer=whitespace_split)
    # byte_fallback with only some byte tokens: the unk ordering quirk.
    vocab4 = ["[UNK]"] + letters + ["<0xC3>", "<0xA9>", "<0x51>"]
    minis["partial_byte_fallback"] = tokenizer(
        bpe(vocab4, [], unk_token="[UNK]", byte_fallback=True, fuse_unk=True),
        added_tokens=added,
        decoder={"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]})
    vocab5 = ["[UNK]", "[CLS]", "[SEP]"] + letters + ["ab", "abc"]
    cls_added = added + [
        {"id": 1, "content": "[CLS]", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True},
        {"id": 2, "content": "[SEP]", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}]
    for proc in ("BertProcessing", "RobertaProcessing"):
        pp = {"type": proc, "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]}
        if proc == "RobertaProcessing":
            pp.update({"trim_offsets": True, "add_prefix_space": False})
        minis[proc] = tokenizer(bpe(vocab5, [["a", "b"], ["ab", "c"]], unk_token="[UNK]"),
                                pre_tokenizer=whitespace_split, added_tokens=cls_added,
                                post_processor=pp)
    minis["template_twice"] = tokenizer(
        bpe(vocab5, [["a", "b"], ["ab", "c"]], unk_token="[UNK]"),
        pre_tokenizer=whitespace_split, added_tokens=cls_added,
        post_processor={"type": "TemplateProcessing",
                        "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                   {"Sequence": {"id": "A", "type_id": 0}},
                                   {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                                   {"Sequence": {"id": "A", "type_id": 1}},
                                   {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                        "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                 {"Sequence": {"id": "B", "type_id": 1}}],
                        "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]},
                                           "[SEP]": {"id": "[SEP]", "ids": [2, 0],
                                                     "tokens": ["[SEP]", "[UNK]"]}}})
    # Added tokens whose ids in the file are not what HF assigns (HF re-derives them).
    gap_added = added + [
        {"id": 500, "content": "<gap>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True},
        {"id": 3, "content": "abc", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": False}]
    minis["added_ids_reassigned"] = tokenizer(
        bpe(vocab5, [["a", "b"], ["ab", "c"]], unk_token="[UNK]"),
        pre_tokenizer=whitespace_split, added_tokens=gap_added)

    entries = []
    for name, data in minis.items():
        tok = Tokenizer.from_str(json.dumps(data))
        cases = []
        for t in texts + ["<gap> abc<gap>"]:
            ids = tok.encode(t, add_special_tokens=True).ids
            cases.append({"text": t, "ids": ids,
                          "ids_no_special": tok.encode(t, add_special_tokens=False).ids,
                          "decode": tok.decode(ids, skip_special_tokens=False),
                          "decode_skip": tok.decode(ids, skip_special_tokens=True)})
        entries.append({"kind": "tokenizer", "name": name, "json": data, "cases": cases,
                        "vocab_size": max(tok.get_vocab(with_added_tokens=True).values()) + 1})
    return entries


def _write_components() -> None:
    entries = _component_entries() + _mini_tokenizers()
    with open(os.path.join(OUT_ROOT, "components.json"), "w", encoding="utf-8") as f:
        json.dump({"entries": entries}, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"components: {len(entries)} entries")


def _write_fuzz_seeds(corpus: list[str]) -> None:
    shutil.rmtree(SEEDS_DIR, ignore_errors=True)
    os.makedirs(SEEDS_DIR)
    seeds = {
        "llama3": recipes.build_tokenizer("llama3", corpus, 300),
        "qwen2": recipes.build_tokenizer("qwen2", corpus, 300),
        "spm": recipes.build_tokenizer("spm", corpus, 300),
    }
    seeds["spm_metaspace"] = _metaspace(seeds["spm"])
    seeds["spm_legacy_merges"] = _legacy_merges(seeds["spm"])
    for name, tok in seeds.items():
        data = json.loads(tok if isinstance(tok, str) else tok.to_str())
        with open(os.path.join(SEEDS_DIR, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
    mini = _mini_tokenizers()
    for entry in mini[:3]:
        with open(os.path.join(SEEDS_DIR, f"mini_{entry['name']}.json"), "w",
                  encoding="utf-8") as f:
            json.dump(entry["json"], f, ensure_ascii=False, separators=(",", ":"))
    print(f"fuzz seeds: {len(os.listdir(SEEDS_DIR))} files")


def main() -> None:
    os.makedirs(OUT_ROOT, exist_ok=True)
    corpus = recipes.default_corpus()
    rng = random.Random(20260521)
    llama3 = recipes.build_tokenizer("llama3", corpus, VOCAB_SIZE)
    qwen2 = recipes.build_tokenizer("qwen2", corpus, VOCAB_SIZE)
    spm = recipes.build_tokenizer("spm", corpus, VOCAB_SIZE)
    _save("llama3", llama3, "llama3", "llama3", rng, chat_template=CHAT_TEMPLATE)
    _save("qwen2", qwen2, "qwen2", "qwen2", rng, chat_template=CHAT_TEMPLATE,
          template_file=CHAT_TEMPLATE_FILE)
    _save("spm", spm, "spm", "spm", rng)
    _save("spm_legacy_merges", _legacy_merges(spm), "spm", "spm", rng)
    _save("spm_metaspace", _metaspace(spm), "spm", "spm", rng)
    _save("qwen2_added", _with_added(qwen2), "qwen2", "added", rng,
          config_update={"tokenizer_class": "PreTrainedTokenizerFast",
                         "chat_template": [{"name": "tool_use", "template": "T"},
                                           {"name": "default", "template": CHAT_TEMPLATE}]})
    _write_components()
    _write_fuzz_seeds(corpus)


if __name__ == "__main__":
    main()
