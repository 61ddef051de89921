#include "io/gguf_tokenizer_spm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/gguf_tokenizer_common.h"
#include "io/json_util.h"

namespace ls {
namespace {

using io_json::Json;

// SentencePiece's whitespace marker U+2581.
constexpr std::string_view kSpace = "\xE2\x96\x81";

// llama.cpp's token types (gguf-py TokenType; 0 is llama.cpp's LLAMA_TOKEN_TYPE_UNDEFINED,
// which it reads as a normal token).
enum TokenType : int64_t { kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3,
                           kUserDefined = 4, kUnused = 5, kByte = 6 };

bool is_byte_token(std::string_view t) {
  auto hex = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
  };
  return t.size() == 6 && t.substr(0, 3) == "<0x" && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

struct Merge {
  std::string_view left, right;
  double score;  // the merged piece's
};

// transformers' GGUFTokenizerSkeleton: for each piece in vocabulary order, every split into two
// pieces (at character boundaries) that are both in the vocabulary, sorted by the halves' scores
// (descending, stable); then all of them sorted by the merged piece's score (descending, stable).
std::vector<Merge> derive_merges(const std::vector<std::string>& tokens,
                                 const std::vector<double>& scores) {
  std::unordered_map<std::string_view, double> score_of;
  score_of.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) score_of.emplace(tokens[i], scores[i]);
  std::vector<Merge> merges;
  std::vector<Merge> local;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string_view piece = tokens[i];
    local.clear();
    for (size_t cut = 1; cut < piece.size(); ++cut) {
      if ((static_cast<unsigned char>(piece[cut]) & 0xC0) == 0x80) continue;  // inside a char
      const std::string_view l = piece.substr(0, cut), r = piece.substr(cut);
      if (score_of.count(l) != 0 && score_of.count(r) != 0) local.push_back({l, r, scores[i]});
    }
    std::stable_sort(local.begin(), local.end(), [&](const Merge& a, const Merge& b) {
      const double al = score_of[a.left], bl = score_of[b.left];
      if (al != bl) return al > bl;
      return score_of[a.right] > score_of[b.right];
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& a, const Merge& b) { return a.score > b.score; });
  return merges;
}

Json replace(std::string_view from, std::string_view to) {
  return {{"type", "Replace"}, {"pattern", {{"String", std::string(from)}}},
          {"content", std::string(to)}};
}

}  // namespace

Result<GgufTokenizerJson> gguf_spm_tokenizer_json(const GgufFile& f) {
  const std::string& file = f.name();
  LS_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                      f.opt_string_array("tokenizer.ggml.tokens"));
  if (tokens == nullptr) return not_found("{}: metadata key tokenizer.ggml.tokens is missing", file);
  if (tokens->empty()) return data_loss("{}: tokenizer.ggml.tokens is empty", file);
  LS_ASSIGN_OR_RETURN(const std::vector<double>* scores,
                      f.opt_float_array("tokenizer.ggml.scores"));
  // Merges, when the file has them, are used as they are (as transformers does); otherwise they
  // are derived from the scores.
  LS_ASSIGN_OR_RETURN(const std::vector<std::string>* given_merges,
                      f.opt_string_array("tokenizer.ggml.merges"));
  if (scores == nullptr && given_merges == nullptr) {
    return not_found("{}: metadata key tokenizer.ggml.scores is missing (a SentencePiece "
                     "vocabulary's merges are derived from its scores)",
                     file);
  }
  if (scores != nullptr && scores->size() != tokens->size()) {
    return data_loss("{}: tokenizer.ggml.scores has {} entries for {} tokens", file,
                     scores->size(), tokens->size());
  }
  LS_ASSIGN_OR_RETURN(const std::vector<int64_t>* types,
                      f.opt_int_array("tokenizer.ggml.token_type"));
  if (types != nullptr && types->size() != tokens->size()) {
    return data_loss("{}: tokenizer.ggml.token_type has {} entries for {} tokens", file,
                     types->size(), tokens->size());
  }
  for (size_t id = 0; id < tokens->size(); ++id) {
    if (scores != nullptr && std::isnan((*scores)[id])) {
      return data_loss("{}: tokenizer.ggml.scores[{}] is NaN", file, id);
    }
    if (types == nullptr) continue;
    const int64_t type = (*types)[id];
    if (type < kUndefined || type > kByte) {
      return data_loss("{}: tokenizer.ggml.token_type[{}] = {} is not a token type (0..6)", file,
                       id, type);
    }
    if (type == kByte && !is_byte_token((*tokens)[id])) {
      return data_loss("{}: tokenizer.ggml.token_type[{}] says byte but the token \"{}\" is not "
                       "<0xNN>",
                       file, id, (*tokens)[id]);
    }
  }
  LS_ASSIGN_OR_RETURN(gguf_tokenizer::SpecialTokens st,
                      gguf_tokenizer::special_tokens(f, *tokens));
  const std::optional<std::string>& bos = st.bos;
  const std::optional<std::string>& eos = st.eos;
  const std::optional<std::string>& unk = st.unk;
  // llama.cpp's defaults for SentencePiece vocabularies: bos added, eos not, a space prefixed.
  LS_ASSIGN_OR_RETURN(std::optional<bool> add_bos, f.opt_bool("tokenizer.ggml.add_bos_token"));
  LS_ASSIGN_OR_RETURN(std::optional<bool> add_eos, f.opt_bool("tokenizer.ggml.add_eos_token"));
  LS_ASSIGN_OR_RETURN(std::optional<bool> add_space,
                      f.opt_bool("tokenizer.ggml.add_space_prefix"));
  LS_ASSIGN_OR_RETURN(std::optional<std::string> chat_template,
                      f.opt_string("tokenizer.chat_template"));
  const bool space_prefix = add_space.value_or(true);

  try {
    // transformers adds the unknown token as a special token too (llama.cpp also matches it in
    // text).
    LS_ASSIGN_OR_RETURN(gguf_tokenizer::Vocabulary v,
                        gguf_tokenizer::vocabulary(file, *tokens, types, true));
    Json& vocab = v.vocab;
    if (types == nullptr) {
      // Without token types nothing says which tokens are control tokens; transformers then
      // makes the unknown, bos and eos tokens special, as here.
      std::vector<size_t> ids;
      for (const std::optional<std::string>* t : {&unk, &bos, &eos}) {
        if (*t) ids.push_back(vocab[**t].get<size_t>());
      }
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      for (size_t id : ids) {
        v.added.push_back({{"id", id},
                           {"content", (*tokens)[id]},
                           {"single_word", false},
                           {"lstrip", false},
                           {"rstrip", false},
                           {"normalized", false},
                           {"special", true}});
      }
    }
    const Json& added = v.added;
    Json merges = Json::array();
    if (given_merges != nullptr) {
      LS_ASSIGN_OR_RETURN(merges, gguf_tokenizer::merge_pairs(file, *given_merges));
    } else {
      for (const Merge& m : derive_merges(*tokens, *scores)) {
        merges.push_back(Json::array({std::string(m.left), std::string(m.right)}));
      }
    }

    // "<bos> $A <eos>" and "<bos> $A <eos> <bos> $B <eos>" with the parts the metadata asks for
    // (transformers' update_post_processor).
    Json specials = Json::object();
    auto special = [&](const std::optional<std::string>& tok, std::string_view what) -> Status {
      if (!tok) {
        return data_loss("{}: tokenizer.ggml.add_{}_token is set but there is no "
                         "tokenizer.ggml.{}_token_id",
                         file, what, what);
      }
      const size_t id = vocab[*tok].get<size_t>();
      specials[*tok] = {{"id", *tok}, {"ids", Json::array({id})}, {"tokens", Json::array({*tok})}};
      return {};
    };
    // Unset add_bos_token: bos is added when the file names a bos token (llama.cpp's default);
    // set to true without one, the file is refused.
    const bool with_bos = add_bos.value_or(bos.has_value()), with_eos = add_eos.value_or(false);
    if (with_bos) LS_RETURN_IF_ERROR(special(bos, "bos"));
    if (with_eos) LS_RETURN_IF_ERROR(special(eos, "eos"));
    auto sequence = [&](const char* seq, int type_id) {
      Json parts = Json::array();
      if (with_bos) parts.push_back({{"SpecialToken", {{"id", *bos}, {"type_id", type_id}}}});
      parts.push_back({{"Sequence", {{"id", seq}, {"type_id", type_id}}}});
      if (with_eos) parts.push_back({{"SpecialToken", {{"id", *eos}, {"type_id", type_id}}}});
      return parts;
    };
    const Json single = sequence("A", 0);
    Json pair = single;
    for (const Json& part : sequence("B", 1)) pair.push_back(part);

    Json normalizers = Json::array();
    if (space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
    normalizers.push_back(replace(" ", kSpace));
    Json decoders = Json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                 replace(kSpace, " ")});
    if (space_prefix) {
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    }
    Json model = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", unk ? Json(*unk) : Json()},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", true},
                  {"byte_fallback", true},
                  {"ignore_merges", false},
                  {"vocab", vocab},
                  {"merges", merges}};
    Json t = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", {{"type", "Sequence"}, {"normalizers", normalizers}}},
              {"pre_tokenizer", nullptr},
              {"post_processor",
               {{"type", "TemplateProcessing"},
                {"single", single},
                {"pair", pair},
                {"special_tokens", specials}}},
              {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
              {"model", model}};

    return gguf_tokenizer::tokenizer_files(t, st, std::optional<bool>(with_bos), chat_template);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("{}: out of memory while reading the tokenizer", file);
  }
}

}  // namespace ls
