#pragma once
// A SentencePiece vocabulary in GGUF metadata (tokenizer.ggml.model "llama": Llama 1/2, Mistral,
// TinyLlama, ... files) as a Hugging Face tokenizer.json, the way transformers' GGUF loader
// (GGUFLlamaConverter) converts it:
//
//   model          BPE, byte_fallback, fuse_unk, unk_token from tokenizer.ggml.unknown_token_id;
//                  vocab = tokenizer.ggml.tokens in id order; merges derived from the
//                  vocabulary and tokenizer.ggml.scores: every split of a piece into two pieces,
//                  ordered by the merged piece's score (descending; ties: vocabulary order, then
//                  the halves' scores descending, then the split point); a file's own
//                  tokenizer.ggml.merges ("a b" strings), when it has them, instead
//   normalizer     Prepend("▁") (when tokenizer.ggml.add_space_prefix, default true) then
//                  Replace(" " -> "▁")
//   decoder        ByteFallback, Fuse, Replace("▁" -> " "), Strip(1 leading space) when
//                  add_space_prefix
//   post-processor bos before the text when tokenizer.ggml.add_bos_token (default: whether the file
//                  names a bos token, as
//                  llama.cpp), eos after it when tokenizer.ggml.add_eos_token (default false)
//   added tokens   token_type 3 (control) and 2 (unknown) -> special, 4 (user-defined) -> not
//                  special (transformers' converter leaves these in the plain vocabulary;
//                  llama.cpp and sentencepiece match them whole in text, as the byte-level reader
//                  does)
//
// Validated: scores present (unless merges are), tokens/scores/token_type of one length, types 1..6, byte tokens
// (type 6) spelled <0xNN>, no repeated token, the special token ids in range. Every error names
// the file and the key.

#include "core/status.h"
#include "io/gguf.h"
#include "io/gguf_tokenizer.h"

namespace ls {

Result<GgufTokenizerJson> gguf_spm_tokenizer_json(const GgufFile& file);

}  // namespace ls
