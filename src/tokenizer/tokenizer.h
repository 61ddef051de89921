#pragma once
// A Hugging Face tokenizer.json BPE tokenizer (byte-level as in Llama-3 / Qwen, and
// SentencePiece-style as in Llama-2 / Mistral) whose encode and decode equal the `tokenizers`
// library's Tokenizer.encode / Tokenizer.decode on the same file.
//
// Input text is UTF-8; invalid bytes are first replaced by U+FFFD exactly as Python's
// bytes.decode("utf-8", errors="replace") does, so encode(bytes) equals HF's encoding of the
// decoded string. Decoded text is always valid UTF-8.
//
// Not applied (as transformers does not apply them either): tokenizer.json "truncation" and
// "padding", BPE dropout. transformers >= 5 rebuilds some tokenizer classes (e.g.
// LlamaTokenizerFast) instead of reading tokenizer.json; this class follows the file.
//
// A Tokenizer is immutable after loading; encode/decode are safe to call from many threads.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ls {

namespace tok {
class AddedVocabulary;
class BpeModel;
class Decoder;
class Normalizer;
class PostProcessor;
class PreTokenizer;
}  // namespace tok

class Tokenizer {
 public:
  // Reads model_dir/tokenizer.json, plus model_dir/tokenizer_config.json when present (bos/eos
  // token strings, add_bos_token, chat_template) and model_dir/chat_template.jinja (which takes
  // precedence over the config's chat_template, as in transformers).
  static Result<std::unique_ptr<Tokenizer>> load(const std::filesystem::path& model_dir);
  // Whether `model` is a GGUF model (the file, or a directory holding one) with a tokenizer in
  // its metadata; load() then reads that instead of tokenizer.json.
  static bool in_gguf(const std::filesystem::path& model);
  // The same from file contents; tokenizer_config_json may be empty.
  static Result<std::unique_ptr<Tokenizer>> from_json(std::string_view tokenizer_json,
                                                      std::string_view tokenizer_config_json = {});
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // == HF Tokenizer.encode(text, add_special_tokens).ids
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // == HF Tokenizer.decode(ids, skip_special_tokens) (no clean-up of tokenization spaces). Ids
  // the vocabulary does not have are skipped, as HF does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const;

  // Largest id + 1, added tokens included.
  int32_t vocab_size() const;
  // Added tokens first, then the model vocabulary (as HF looks tokens up).
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The raw vocabulary string (e.g. "Ġthe", "▁the", "<0x0A>"); "" for an unknown id. An added
  // token with normalized=true shows its normalized content, as in HF.
  std::string id_to_token(int32_t id) const;
  // An added token marked special: what skip_special_tokens drops. (HF matches that by the
  // shown string, so a special normalized=true token that normalization changes is not
  // dropped; decode() follows HF there.)
  bool is_special(int32_t id) const;
  // From tokenizer_config.json (bos_token / eos_token as a string or {"content": ...}).
  std::optional<int32_t> bos_token_id() const { return bos_token_id_; }
  std::optional<int32_t> eos_token_id() const { return eos_token_id_; }
  // tokenizer_config.json "add_bos_token", when given. Informational: encode follows the
  // tokenizer.json post-processor, which is what HF does.
  std::optional<bool> add_bos_token() const { return add_bos_token_; }
  // The raw chat template text, if any (a named list in the config yields the "default" one).
  const std::optional<std::string>& chat_template() const { return chat_template_; }
  // The tokenizer.json / tokenizer_config.json text it was built from (the config may be
  // empty), for clients that rebuild the tokenizer from the server (/tokenizer_info).
  const std::string& source_json() const { return source_json_; }
  const std::string& source_config_json() const { return source_config_json_; }

  // For the streaming detokenizer: whether the decoder groups runs of "<0xNN>" byte tokens,
  // whether id is such a token, and whether decode() drops id (an unknown id, or a special
  // token under skip_special_tokens) so that it cannot change the text.
  bool groups_byte_tokens() const;
  bool is_byte_token(int32_t id) const;
  bool dropped_by_decode(int32_t id, bool skip_special_tokens) const;

 private:
  Tokenizer();
  Status init_from_json(std::string_view tokenizer_json);
  Status apply_config(std::string_view tokenizer_config_json);
  // The token string HF's decode sees for id (added tokens first), or nullptr.
  const std::string* token_string(int32_t id) const;
  void encode_text(std::string_view text, std::vector<int32_t>& ids) const;

  std::unique_ptr<tok::Normalizer> normalizer_;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tok::BpeModel> model_;
  std::unique_ptr<tok::PostProcessor> post_processor_;
  std::unique_ptr<tok::Decoder> decoder_;
  std::unique_ptr<tok::AddedVocabulary> added_;
  // [vocab_size] per id: the string decode uses (nullptr: no such id) and flags.
  std::vector<const std::string*> id_strings_;
  std::vector<uint8_t> id_skipped_;  // dropped by skip_special_tokens
  std::vector<uint8_t> id_special_;  // an added token with special=true
  std::vector<uint8_t> id_byte_token_;
  std::optional<int32_t> bos_token_id_;
  std::optional<int32_t> eos_token_id_;
  std::optional<bool> add_bos_token_;
  std::optional<std::string> chat_template_;
  std::string source_json_;
  std::string source_config_json_;
};

}  // namespace ls
