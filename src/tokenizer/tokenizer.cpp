#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "io/gguf.h"
#include "io/gguf_model.h"
#include "io/gguf_tokenizer.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace ls {

namespace {

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open {}", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error("cannot read {}", path.string());
  return ss.str();
}

// bos_token / eos_token in tokenizer_config.json: a string, an AddedToken object with
// "content", or null.
Result<std::optional<std::string>> config_token(const nlohmann::json& cfg, std::string_view key) {
  const nlohmann::json* v = tok::json_member(cfg, key);
  if (v == nullptr) return std::optional<std::string>();
  if (v->is_string()) return std::optional<std::string>(v->get<std::string>());
  if (v->is_object()) {
    LS_ASSIGN_OR_RETURN(auto content,
                        tok::json_opt_string(*v, "content", "tokenizer_config.json token"));
    return content;
  }
  return invalid_argument("tokenizer_config.json: {} must be a string or an object", key);
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

bool Tokenizer::in_gguf(const std::filesystem::path& model) {
  auto gguf = find_gguf_model(model);
  if (!gguf.ok() || !gguf->has_value()) return false;
  auto file = GgufFile::open(**gguf);
  return file.ok() && (*file)->find("tokenizer.ggml.model") != nullptr;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::filesystem::path& model_dir) {
  // A GGUF model (the file, or a directory holding one) carries its tokenizer in its metadata.
  LS_ASSIGN_OR_RETURN(std::optional<std::filesystem::path> gguf, find_gguf_model(model_dir));
  if (gguf) {
    LS_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(*gguf));
    LS_ASSIGN_OR_RETURN(GgufTokenizerJson json, gguf_tokenizer_json(*file));
    auto result = from_json(json.tokenizer_json, json.tokenizer_config_json);
    if (!result.ok()) return result.status().with_context(gguf->string());
    return result;
  }
  const auto json_path = model_dir / "tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::exists(json_path, ec)) {
    return not_found("{} not found (only tokenizer.json BPE tokenizers are supported)",
                     json_path.string());
  }
  LS_ASSIGN_OR_RETURN(std::string tokenizer_json, read_file(json_path));
  std::string config_json;
  const auto config_path = model_dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_path, ec)) {
    LS_ASSIGN_OR_RETURN(config_json, read_file(config_path));
  }
  auto result = from_json(tokenizer_json, config_json);
  if (!result.ok()) return result.status().with_context(model_dir.string());
  const auto template_path = model_dir / "chat_template.jinja";
  if (std::filesystem::exists(template_path, ec)) {
    LS_ASSIGN_OR_RETURN(std::string text, read_file(template_path));
    (*result)->chat_template_ = std::move(text);
  }
  return result;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view tokenizer_json,
                                                        std::string_view tokenizer_config_json) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  // The component parsers report bad fields as Status; anything nlohmann or the allocator
  // still throws stops here, so no exception leaves the library.
  try {
    Status s = t->init_from_json(tokenizer_json);
    if (!s.ok()) return s.with_context("tokenizer.json");
    if (!tokenizer_config_json.empty()) {
      s = t->apply_config(tokenizer_config_json);
      if (!s.ok()) return s.with_context("tokenizer_config.json");
    }
    t->source_json_ = std::string(tokenizer_json);
    t->source_config_json_ = std::string(tokenizer_config_json);
  } catch (const std::exception& e) {
    return data_loss("tokenizer.json: {}", e.what());
  }
  return t;
}

Status Tokenizer::init_from_json(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return data_loss("not valid JSON");
  if (!j.is_object()) return data_loss("expected a JSON object");

  if (const nlohmann::json* n = tok::json_member(j, "normalizer")) {
    LS_ASSIGN_OR_RETURN(normalizer_, tok::parse_normalizer(*n));
  }
  if (const nlohmann::json* p = tok::json_member(j, "pre_tokenizer")) {
    LS_ASSIGN_OR_RETURN(pre_tokenizer_, tok::parse_pre_tokenizer(*p));
  }
  const nlohmann::json* model = tok::json_member(j, "model");
  if (model == nullptr) return invalid_argument("missing \"model\"");
  LS_ASSIGN_OR_RETURN(model_, tok::BpeModel::from_json(*model));
  if (const nlohmann::json* p = tok::json_member(j, "post_processor")) {
    LS_ASSIGN_OR_RETURN(post_processor_, tok::parse_post_processor(*p));
  }
  if (const nlohmann::json* d = tok::json_member(j, "decoder")) {
    LS_ASSIGN_OR_RETURN(decoder_, tok::parse_decoder(*d));
  }

  added_ = std::make_unique<tok::AddedVocabulary>();
  if (const nlohmann::json* list = tok::json_member(j, "added_tokens")) {
    if (!list->is_array()) return invalid_argument("added_tokens: expected an array");
    for (const auto& item : *list) {
      constexpr std::string_view kWhere = "added_tokens[]";
      if (!item.is_object()) return invalid_argument("{}: expected an object", kWhere);
      tok::AddedToken t;
      LS_ASSIGN_OR_RETURN(t.content, tok::json_string(item, "content", kWhere));
      LS_ASSIGN_OR_RETURN(t.special, tok::json_bool(item, "special", false, kWhere));
      LS_ASSIGN_OR_RETURN(t.single_word, tok::json_bool(item, "single_word", false, kWhere));
      LS_ASSIGN_OR_RETURN(t.lstrip, tok::json_bool(item, "lstrip", false, kWhere));
      LS_ASSIGN_OR_RETURN(t.rstrip, tok::json_bool(item, "rstrip", false, kWhere));
      LS_ASSIGN_OR_RETURN(t.normalized, tok::json_bool(item, "normalized", !t.special, kWhere));
      added_->add(t, *model_);
    }
  }
  added_->build_matchers(*model_, normalizer_.get());

  const int32_t max_id = std::max(model_->max_id(), added_->max_id());
  const auto n = static_cast<size_t>(max_id + 1);
  id_strings_.assign(n, nullptr);
  id_skipped_.assign(n, 0);
  id_special_.assign(n, 0);
  id_byte_token_.assign(n, 0);
  for (size_t id = 0; id < n; ++id) {
    const auto i = static_cast<int32_t>(id);
    if (const std::string* shown = added_->shown_content(i)) {
      id_strings_[id] = shown;
      id_special_[id] = added_->token(i)->special;
    } else {
      id_strings_[id] = model_->id_to_token(i);
    }
    if (id_strings_[id] == nullptr) continue;
    // HF decides what skip_special_tokens drops by the shown string.
    id_skipped_[id] = added_->is_special_content(*id_strings_[id]);
    id_byte_token_[id] = tok::parse_byte_token(*id_strings_[id]).has_value();
  }
  // HF would emit such ids without complaint; a model cannot embed them, so refuse the file.
  if (post_processor_ != nullptr) {
    std::vector<int32_t> ids;
    post_processor_->added_ids(ids);
    for (int32_t id : ids) {
      if (token_string(id) == nullptr) {
        return invalid_argument("post_processor adds token id {}, which the vocabulary lacks", id);
      }
    }
  }
  return {};
}

Status Tokenizer::apply_config(std::string_view text) {
  const nlohmann::json cfg = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded()) return data_loss("not valid JSON");
  if (!cfg.is_object()) return data_loss("expected a JSON object");
  LS_ASSIGN_OR_RETURN(auto bos, config_token(cfg, "bos_token"));
  LS_ASSIGN_OR_RETURN(auto eos, config_token(cfg, "eos_token"));
  if (bos) bos_token_id_ = token_to_id(*bos);
  if (eos) eos_token_id_ = token_to_id(*eos);
  if (const nlohmann::json* v = tok::json_member(cfg, "add_bos_token")) {
    if (!v->is_boolean()) return invalid_argument("add_bos_token: expected a boolean");
    add_bos_token_ = v->get<bool>();
  }
  if (const nlohmann::json* v = tok::json_member(cfg, "chat_template")) {
    if (v->is_string()) {
      chat_template_ = v->get<std::string>();
    } else if (v->is_array()) {
      // Named templates: [{"name": ..., "template": ...}]; the default one serves plain chat.
      for (const auto& item : *v) {
        LS_ASSIGN_OR_RETURN(auto name, tok::json_opt_string(item, "name", "chat_template[]"));
        LS_ASSIGN_OR_RETURN(auto body, tok::json_opt_string(item, "template", "chat_template[]"));
        if (!body) continue;
        if (!chat_template_ || name == "default") chat_template_ = *body;
        if (name == "default") break;
      }
    } else {
      return invalid_argument("chat_template: expected a string or a list of named templates");
    }
  }
  return {};
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& ids) const {
  std::vector<tok::AddedSplit> raw_splits;
  std::vector<tok::AddedSplit> norm_splits;
  std::vector<tok::Piece> pieces;
  added_->find_matches(text, /*normalized_matcher=*/false, raw_splits);
  for (const tok::AddedSplit& rs : raw_splits) {
    if (rs.id >= 0) {
      ids.push_back(rs.id);
      continue;
    }
    std::string normalized(text.substr(rs.start, rs.end - rs.start));
    if (normalizer_ != nullptr) normalizer_->normalize(normalized);
    added_->find_matches(normalized, /*normalized_matcher=*/true, norm_splits);
    for (const tok::AddedSplit& ns : norm_splits) {
      if (ns.id >= 0) {
        ids.push_back(ns.id);
        continue;
      }
      if (ns.end <= ns.start) continue;
      pieces.clear();
      pieces.push_back(
          {normalized.substr(ns.start, ns.end - ns.start), rs.start == 0 && ns.start == 0});
      if (pre_tokenizer_ != nullptr) pre_tokenizer_->pre_tokenize(pieces);
      for (const tok::Piece& p : pieces) model_->tokenize(p.text, ids);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (tok::is_valid_utf8(text)) {
    encode_text(text, ids);
  } else {
    encode_text(tok::sanitize_utf8(text), ids);
  }
  if (post_processor_ != nullptr) post_processor_->process(ids, add_special_tokens);
  return ids;
}

const std::string* Tokenizer::token_string(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_strings_.size()) return nullptr;
  return id_strings_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* s = token_string(id);
    if (s == nullptr || (skip_special_tokens && id_skipped_[id])) continue;
    tokens.push_back(*s);
  }
  std::string out;
  if (decoder_ == nullptr) {
    // HF joins the raw tokens with spaces when there is no decoder.
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  decoder_->decode_chain(tokens);
  for (const std::string& t : tokens) out += t;
  return out;
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(id_strings_.size());
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_->token_to_id(token)) return id;
  return model_->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* s = token_string(id);
  return s == nullptr ? std::string() : *s;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < id_special_.size() && id_special_[id] != 0;
}

bool Tokenizer::groups_byte_tokens() const {
  return decoder_ != nullptr && decoder_->groups_byte_tokens();
}

bool Tokenizer::dropped_by_decode(int32_t id, bool skip_special_tokens) const {
  return token_string(id) == nullptr || (skip_special_tokens && id_skipped_[id] != 0);
}

bool Tokenizer::is_byte_token(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < id_byte_token_.size() && id_byte_token_[id] != 0;
}

}  // namespace ls
