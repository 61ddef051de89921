"""Writes the server test fixtures into tests/fixtures/server/ (run from the repository root):

- tokenizer/: a small Llama-3-style byte-level BPE tokenizer (scripts/model/tokenizer_recipes.py)
  with the Llama-3 chat template in tokenizer_config.json;
- expected.json: what Hugging Face computes for the inputs the C++ tests send, so the tests
  compare the server against an independent implementation:
  * "encode": ids of texts with add_special_tokens=True (what /tokenize and completions use);
  * "chat": the template rendered by transformers (jinja2) and tokenized without special tokens,
    as vLLM does for chat requests;
  * "completions": for each prompt, the tokens and text FakeEngine must produce, computed here by
    the same rule (choice c, step k emits prompt_ids[(k + c) % len]) with HF's decoder:
    text = concatenation of decode([token], skip_special_tokens=True);
  * "token_strings": decode([id], skip_special_tokens=False) (logprob token strings) and
    "token_texts": decode([id], skip_special_tokens=True) (FakeEngine's per-token text) for
    every id of every prompt above.

Deterministic: rerunning it rewrites identical files.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "model"))

import tokenizer_recipes  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

OUT_DIR = os.path.join("tests", "fixtures", "server")
VOCAB_SIZE = 640

LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

COMPLETION_PROMPTS = [
    "Hello world, this is a test.",
    "The quick brown fox jumps over the lazy dog",
    "Return a new path with the file name changed.",
    "Paris",
]
ENCODE_TEXTS = COMPLETION_PROMPTS + [
    "Le café coûte 3,50 € à Paris",
    "",
    "  spaces   and\nnewlines\n\n",
]
CHAT_CASES = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Again, with the file name changed."},
    ],
]
MAX_TOKENS = 12
NUM_CHOICES = 2


def main() -> None:
    tok = tokenizer_recipes.build_tokenizer(
        "llama3", tokenizer_recipes.default_corpus(), VOCAB_SIZE)
    tok_dir = os.path.join(OUT_DIR, "tokenizer")
    tokenizer_recipes.save_tokenizer_dir(tok, tok_dir, "llama3", chat_template=LLAMA3_CHAT_TEMPLATE)
    hf = PreTrainedTokenizerFast.from_pretrained(tok_dir)

    def piece(token_id: int, skip: bool) -> str:
        return hf.decode([token_id], skip_special_tokens=skip)

    expected: dict = {"vocab_size": len(hf), "bos_token_id": hf.bos_token_id, "encode": [],
                      "chat": [], "completions": [], "token_strings": {}, "token_texts": {}}
    for text in ENCODE_TEXTS:
        expected["encode"].append({"text": text, "ids": hf(text, add_special_tokens=True).input_ids})
    for messages in CHAT_CASES:
        rendered = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = hf(rendered, add_special_tokens=False).input_ids
        expected["chat"].append({"messages": messages, "rendered": rendered, "ids": ids})
    seen: set[int] = set()
    for case in expected["encode"] + expected["chat"]:
        seen.update(case["ids"])
    for prompt in COMPLETION_PROMPTS:
        ids = hf(prompt, add_special_tokens=True).input_ids
        choices = []
        for c in range(NUM_CHOICES):
            tokens = [ids[(k + c) % len(ids)] for k in range(MAX_TOKENS)]
            choices.append({"tokens": tokens, "text": "".join(piece(t, True) for t in tokens)})
            seen.update(tokens)
        expected["completions"].append(
            {"prompt": prompt, "prompt_ids": ids, "max_tokens": MAX_TOKENS, "choices": choices})
    for token_id in sorted(seen):
        expected["token_strings"][str(token_id)] = piece(token_id, False)
        expected["token_texts"][str(token_id)] = piece(token_id, True)
    with open(os.path.join(OUT_DIR, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
