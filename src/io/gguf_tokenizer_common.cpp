#include "io/gguf_tokenizer_common.h"

#include <cstdint>

namespace ls::gguf_tokenizer {

Result<io_json::Json> merge_pairs(const std::string& file, const std::vector<std::string>& merges) {
  io_json::Json pairs = io_json::Json::array();
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos) {
      return data_loss(
          "{}: tokenizer.ggml.merges[{}] \"{}\" is not two tokens separated by one "
          "space",
          file, i, m);
    }
    pairs.push_back(io_json::Json::array({m.substr(0, space), m.substr(space + 1)}));
  }
  return pairs;
}

Result<Vocabulary> vocabulary(const std::string& file, const std::vector<std::string>& tokens,
                              const std::vector<int64_t>* types, bool unknown_is_added) {
  Vocabulary v{io_json::Json::object(), io_json::Json::array()};
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& tok = tokens[id];
    if (v.vocab.contains(tok)) {
      return data_loss("{}: tokenizer.ggml.tokens: token {} (\"{}\") repeats an earlier token",
                       file, id, tok);
    }
    v.vocab[tok] = id;
    const int64_t type = types != nullptr ? (*types)[id] : 1;
    if (type == 3 || type == 4 || (type == 2 && unknown_is_added)) {
      v.added.push_back({{"id", id},
                         {"content", tok},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", type != 4}});
    }
  }
  return v;
}

Result<SpecialTokens> special_tokens(const GgufFile& f, const std::vector<std::string>& tokens) {
  auto token_of = [&](std::string_view key) -> Result<std::optional<std::string>> {
    LS_ASSIGN_OR_RETURN(std::optional<int64_t> id, f.opt_int(key));
    if (!id) return std::optional<std::string>();
    if (*id < 0 || static_cast<size_t>(*id) >= tokens.size()) {
      return data_loss("{}: {} = {} is not a token id (vocabulary of {})", f.name(), key, *id,
                       tokens.size());
    }
    return std::optional<std::string>(tokens[static_cast<size_t>(*id)]);
  };
  SpecialTokens s;
  LS_ASSIGN_OR_RETURN(s.bos, token_of("tokenizer.ggml.bos_token_id"));
  LS_ASSIGN_OR_RETURN(s.eos, token_of("tokenizer.ggml.eos_token_id"));
  LS_ASSIGN_OR_RETURN(s.unk, token_of("tokenizer.ggml.unknown_token_id"));
  LS_ASSIGN_OR_RETURN(s.pad, token_of("tokenizer.ggml.padding_token_id"));
  return s;
}

GgufTokenizerJson tokenizer_files(const io_json::Json& tokenizer, const SpecialTokens& specials,
                                  std::optional<bool> add_bos,
                                  const std::optional<std::string>& chat_template) {
  io_json::Json config = io_json::Json::object();
  if (specials.bos) config["bos_token"] = *specials.bos;
  if (specials.eos) config["eos_token"] = *specials.eos;
  if (specials.unk) config["unk_token"] = *specials.unk;
  if (specials.pad) config["pad_token"] = *specials.pad;
  if (add_bos) config["add_bos_token"] = *add_bos;
  if (chat_template) config["chat_template"] = *chat_template;
  return GgufTokenizerJson{tokenizer.dump(-1, ' ', false, io_json::Json::error_handler_t::replace),
                           config.dump(-1, ' ', false, io_json::Json::error_handler_t::replace)};
}

}  // namespace ls::gguf_tokenizer
