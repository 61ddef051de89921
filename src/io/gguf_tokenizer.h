#pragma once
// The tokenizer a GGUF file states in its metadata, as the tokenizer.json and
// tokenizer_config.json texts Tokenizer::from_json reads (the way transformers converts a GGUF
// tokenizer, but keeping llama.cpp's pre-tokenizer where transformers drops it).
//
//   tokenizer.ggml.model        "gpt2" (byte-level BPE, below) or "llama" (SentencePiece
//                               vocabularies with scores instead of merges: io/gguf_tokenizer_spm.h);
//                               another is kUnimplemented
//   tokenizer.ggml.tokens       the vocabulary, in id order
//   tokenizer.ggml.merges       "a b" pairs in rank order
//   tokenizer.ggml.token_type   3 (control) -> special added token, 4 (user-defined) -> added
//                               token; others are plain vocabulary
//   tokenizer.ggml.pre          the pre-tokenizer (llama.cpp's names): default/gpt2, smollm,
//                               llama3/llama-bpe/smaug-bpe, qwen2/deepseek-r1-qwen; another name is
//                               kUnimplemented naming it
//   tokenizer.ggml.{bos,eos,unknown,padding}_token_id, add_bos_token, add_eos_token
//   tokenizer.chat_template     -> tokenizer_config.json chat_template
// Every error names the file and the key.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"

namespace ls {

struct GgufTokenizerJson {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};

Result<GgufTokenizerJson> gguf_tokenizer_json(const GgufFile& file);

}  // namespace ls

namespace ls {

class GgufWriter;

// The reverse, for `longserve quantize`: a byte-level BPE tokenizer.json (+ tokenizer_config.json,
// may be empty) as tokenizer.ggml.* metadata. The pre-tokenizer is named by matching it against
// the ones gguf_tokenizer_json builds (gpt2, smollm, llama-bpe, qwen2); another one is
// kUnimplemented. bos/eos ids come from the caller (config / generation_config).
Status write_gguf_tokenizer(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                            std::optional<int64_t> bos_id, const std::vector<int64_t>& eos_ids,
                            GgufWriter& out);

}  // namespace ls
