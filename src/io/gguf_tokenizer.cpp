#include "io/gguf_tokenizer.h"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/gguf_tokenizer_common.h"
#include "io/gguf_tokenizer_spm.h"
#include "io/gguf_writer.h"
#include "io/json_util.h"

namespace ls {
namespace {

using io_json::Json;

// Pre-tokenizer regexes of the Hugging Face tokenizer.json files these vocabularies come from
// (llama.cpp's llama-vocab.cpp uses the same patterns for the same names).
constexpr std::string_view kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

Json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

Json split_then_bytes(std::string_view regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           Json::array({{{"type", "Split"},
                         {"pattern", {{"Regex", std::string(regex)}}},
                         {"behavior", "Isolated"},
                         {"invert", false}},
                        byte_level(false)})}};
}

// nullopt for a name this mapping does not know.
std::optional<Json> pre_tokenizer(std::string_view pre) {
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2") return byte_level(true);
  if (pre == "smollm") {
    return Json{{"type", "Sequence"},
                {"pretokenizers", Json::array({{{"type", "Digits"}, {"individual_digits", true}},
                                               byte_level(true)})}};
  }
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "smaug-bpe") {
    return split_then_bytes(kLlama3Regex);
  }
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return split_then_bytes(kQwen2Regex);
  return std::nullopt;
}

}  // namespace

Result<GgufTokenizerJson> gguf_tokenizer_json(const GgufFile& f) {
  const std::string& file = f.name();
  LS_ASSIGN_OR_RETURN(std::optional<std::string> model, f.opt_string("tokenizer.ggml.model"));
  if (!model) return not_found("{}: no tokenizer (metadata key tokenizer.ggml.model)", file);
  if (*model == "llama") return gguf_spm_tokenizer_json(f);
  if (*model != "gpt2") {
    return unimplemented("{}: tokenizer.ggml.model \"{}\" is not supported (only \"gpt2\", "
                         "byte-level BPE, and \"llama\", SentencePiece BPE, are)",
                         file, *model);
  }
  LS_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                      f.opt_string_array("tokenizer.ggml.tokens"));
  if (tokens == nullptr) return not_found("{}: metadata key tokenizer.ggml.tokens is missing", file);
  LS_ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                      f.opt_string_array("tokenizer.ggml.merges"));
  if (merges == nullptr) return not_found("{}: metadata key tokenizer.ggml.merges is missing", file);
  LS_ASSIGN_OR_RETURN(const std::vector<int64_t>* types,
                      f.opt_int_array("tokenizer.ggml.token_type"));
  if (types != nullptr && types->size() != tokens->size()) {
    return data_loss("{}: tokenizer.ggml.token_type has {} entries for {} tokens", file,
                     types->size(), tokens->size());
  }
  LS_ASSIGN_OR_RETURN(std::optional<std::string> pre, f.opt_string("tokenizer.ggml.pre"));
  const std::optional<Json> pre_json = pre_tokenizer(pre.value_or("default"));
  if (!pre_json) {
    return unimplemented("{}: tokenizer.ggml.pre \"{}\" is not supported (supported: default, "
                         "gpt2, smollm, llama3, llama-bpe, smaug-bpe, qwen2, deepseek-r1-qwen)",
                         file, *pre);
  }
  try {
    LS_ASSIGN_OR_RETURN(gguf_tokenizer::Vocabulary v,
                        gguf_tokenizer::vocabulary(file, *tokens, types, false));
    Json& vocab = v.vocab;
    const Json& added = v.added;
    LS_ASSIGN_OR_RETURN(Json merge_list, gguf_tokenizer::merge_pairs(file, *merges));
    LS_ASSIGN_OR_RETURN(gguf_tokenizer::SpecialTokens st,
                        gguf_tokenizer::special_tokens(f, *tokens));
    const std::optional<std::string>& bos = st.bos;
    const std::optional<std::string>& eos = st.eos;
    LS_ASSIGN_OR_RETURN(std::optional<bool> add_bos, f.opt_bool("tokenizer.ggml.add_bos_token"));
    LS_ASSIGN_OR_RETURN(std::optional<bool> add_eos, f.opt_bool("tokenizer.ggml.add_eos_token"));
    LS_ASSIGN_OR_RETURN(std::optional<std::string> chat_template,
                        f.opt_string("tokenizer.chat_template"));

    // BOS/EOS insertion as a template around the sequence, when the metadata asks for it.
    Json single = Json::array();
    Json specials = Json::object();
    auto special = [&](const std::optional<std::string>& tok, std::string_view what) -> Status {
      if (!tok) {
        return data_loss("{}: tokenizer.ggml.add_{}_token is set but there is no {} token id",
                         file, what, what);
      }
      single.push_back({{"SpecialToken", {{"id", *tok}, {"type_id", 0}}}});
      const size_t id = vocab[*tok].get<size_t>();
      specials[*tok] = {{"id", *tok}, {"ids", Json::array({id})}, {"tokens", Json::array({*tok})}};
      return {};
    };
    if (add_bos.value_or(false)) LS_RETURN_IF_ERROR(special(bos, "bos"));
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (add_eos.value_or(false)) LS_RETURN_IF_ERROR(special(eos, "eos"));
    Json pair = single;
    pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
    Json post = {{"type", "TemplateProcessing"},
                 {"single", single},
                 {"pair", pair},
                 {"special_tokens", specials}};

    // llama.cpp (and Llama 3's tokenizer.json) look a whole pre-token up in the vocabulary before
    // merging, for the llama3 family of pre-tokenizers.
    const bool ignore_merges =
        pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "smaug-bpe";
    Json t = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer", *pre_json},
              {"post_processor", post},
              {"decoder", byte_level(true)},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", ignore_merges},
                {"vocab", vocab},
                {"merges", merge_list}}}};
    if (pre == "qwen2" || pre == "deepseek-r1-qwen") t["normalizer"] = {{"type", "NFC"}};

    return gguf_tokenizer::tokenizer_files(t, st, add_bos, chat_template);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("{}: out of memory while reading the tokenizer", file);
  }
}

}  // namespace ls

namespace ls {

Status write_gguf_tokenizer(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                            std::optional<int64_t> bos_id, const std::vector<int64_t>& eos_ids,
                            GgufWriter& out) {
  try {
    const Json t = Json::parse(tokenizer_json);
    const Json& model = t.at("model");
    if (model.value("type", "") != "BPE" || !model.contains("merges")) {
      return unimplemented("tokenizer.json: only byte-level BPE tokenizers can be written to GGUF");
    }
    // The pre-tokenizer's name: the one whose JSON gguf_tokenizer_json would build.
    std::string pre;
    for (const char* name : {"gpt2", "smollm", "llama-bpe", "qwen2"}) {
      const Json& p = t.contains("pre_tokenizer") ? t["pre_tokenizer"] : Json();
      std::optional<Json> want = pre_tokenizer(name);
      if (!want) continue;
      // Compare the parts that decide the splitting: types, regexes, digits.
      auto shape = [](const Json& j) {
        std::string s;
        std::function<void(const Json&)> walk = [&](const Json& v) {
          if (v.is_object()) {
            for (const char* k : {"type", "Regex", "individual_digits", "use_regex"}) {
              if (v.contains(k)) s += v[k].dump() + ";";
            }
            for (const auto& [k, x] : v.items()) {
              if (x.is_structured()) walk(x);
            }
          } else if (v.is_array()) {
            for (const Json& x : v) walk(x);
          }
        };
        walk(j);
        return s;
      };
      if (shape(p) == shape(*want)) {
        pre = name;
        break;
      }
    }
    if (pre.empty()) {
      return unimplemented("tokenizer.json: its pre_tokenizer is none of gpt2, smollm, llama-bpe, "
                           "qwen2 (the ones the GGUF reader knows)");
    }
    const Json& vocab = model.at("vocab");
    std::vector<std::string> tokens(vocab.size());
    std::vector<int32_t> types(vocab.size(), 1);
    for (const auto& [tok, id] : vocab.items()) {
      const int64_t i = id.get<int64_t>();
      if (i < 0 || i >= static_cast<int64_t>(tokens.size())) {
        return invalid_argument("tokenizer.json: vocabulary ids are not 0..{}", tokens.size() - 1);
      }
      tokens[static_cast<size_t>(i)] = tok;
    }
    if (t.contains("added_tokens")) {
      for (const Json& a : t["added_tokens"]) {
        const int64_t i = a.at("id").get<int64_t>();
        if (i >= static_cast<int64_t>(tokens.size())) {
          tokens.resize(static_cast<size_t>(i) + 1);
          types.resize(static_cast<size_t>(i) + 1, 1);
        }
        tokens[static_cast<size_t>(i)] = a.at("content").get<std::string>();
        types[static_cast<size_t>(i)] = a.value("special", false) ? 3 : 4;
      }
    }
    std::vector<std::string> merges;
    for (const Json& m : model.at("merges")) {
      merges.push_back(m.is_string() ? m.get<std::string>()
                                     : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
    }
    out.add_string("tokenizer.ggml.model", "gpt2");
    out.add_string("tokenizer.ggml.pre", pre);
    out.add_strings("tokenizer.ggml.tokens", tokens);
    out.add_i32s("tokenizer.ggml.token_type", types);
    out.add_strings("tokenizer.ggml.merges", merges);
    if (bos_id) out.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*bos_id));
    if (!eos_ids.empty()) {
      out.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos_ids[0]));
    }
    // add_bos_token: the post-processor's template starts with a special token.
    bool add_bos = false;
    if (t.contains("post_processor") && t["post_processor"].is_object()) {
      const Json& pp = t["post_processor"];
      auto check = [&](const Json& proc) {
        if (proc.value("type", "") == "TemplateProcessing" && proc.contains("single") &&
            !proc["single"].empty() && proc["single"][0].contains("SpecialToken")) {
          add_bos = true;
        }
      };
      check(pp);
      if (pp.value("type", "") == "Sequence" && pp.contains("processors")) {
        for (const Json& p : pp["processors"]) check(p);
      }
    }
    out.add_bool("tokenizer.ggml.add_bos_token", add_bos);
    if (!tokenizer_config_json.empty()) {
      const Json c = Json::parse(tokenizer_config_json);
      if (c.contains("chat_template") && c["chat_template"].is_string()) {
        out.add_string("tokenizer.chat_template", c["chat_template"].get<std::string>());
      }
    }
    return {};
  } catch (const Json::exception& e) {
    return invalid_argument("tokenizer.json: {}", e.what());
  }
}

}  // namespace ls
