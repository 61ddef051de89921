#pragma once
// What the two GGUF tokenizer readers (byte-level BPE, gguf_tokenizer.cpp; SentencePiece,
// gguf_tokenizer_spm.cpp) read the same way from a file's tokenizer.ggml.* metadata. Every error
// names the file and the key.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"
#include "io/gguf_tokenizer.h"
#include "io/json_util.h"

namespace ls::gguf_tokenizer {

// tokenizer.ggml.merges ("left right" strings, one space) as tokenizer.json merge pairs
// [[left, right], ...].
Result<io_json::Json> merge_pairs(const std::string& file, const std::vector<std::string>& merges);

// tokenizer.ggml.tokens as a tokenizer.json vocabulary (token -> id; a repeated token is an
// error) and its added tokens: token_type 3 (control) special, 4 (user-defined) not special, and
// 2 (unknown) special when `unknown_is_added`; `types` may be null (every token normal).
struct Vocabulary {
  io_json::Json vocab;  // {token: id}
  io_json::Json added;  // [{id, content, ..., special}]
};
Result<Vocabulary> vocabulary(const std::string& file, const std::vector<std::string>& tokens,
                              const std::vector<int64_t>* types, bool unknown_is_added);

// The special tokens the metadata names by id (bos_token_id, eos_token_id, unknown_token_id,
// padding_token_id), each absent when its key is; an id outside `tokens` is an error.
struct SpecialTokens {
  std::optional<std::string> bos, eos, unk, pad;
};
Result<SpecialTokens> special_tokens(const GgufFile& f, const std::vector<std::string>& tokens);

// The two files: `tokenizer` as tokenizer.json, and tokenizer_config.json with the special
// tokens, add_bos_token (when set) and the chat template. Tokens need not be valid UTF-8 in a
// GGUF, so invalid bytes are replaced rather than refused.
GgufTokenizerJson tokenizer_files(const io_json::Json& tokenizer, const SpecialTokens& specials,
                                  std::optional<bool> add_bos,
                                  const std::optional<std::string>& chat_template);

}  // namespace ls::gguf_tokenizer
