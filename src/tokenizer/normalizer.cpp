#include "tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace ls::tok {

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalizationForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = normalize_unicode(text, form_); }

 private:
  NormalizationForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = lowercase_unicode(text); }
};

// Strips White_Space code points at either end.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0;
    size_t end = text.size();
    if (left_) {
      while (begin < end) {
        const Utf8Step st = decode_utf8(text, begin);
        if (!is_white_space(st.cp)) break;
        begin += st.len;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t lead = end - 1;
        while (lead > begin && (static_cast<unsigned char>(text[lead]) & 0xC0) == 0x80) --lead;
        if (!is_white_space(decode_utf8(text, lead).cp)) break;
        end = lead;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_;
  bool right_;
};

// Prepends a string to non-empty text.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class ByteLevelNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = ByteLevelMap::get().encode(text); }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

template <typename T, typename... Args>
Result<std::unique_ptr<Normalizer>> make(Args&&... args) {
  return std::unique_ptr<Normalizer>(std::make_unique<T>(std::forward<Args>(args)...));
}

}  // namespace

Result<std::unique_ptr<Normalizer>> parse_normalizer(const nlohmann::json& j, int depth) {
  constexpr std::string_view kWhere = "normalizer";
  if (depth > kMaxComponentDepth) return invalid_argument("normalizer: nested too deeply");
  LS_ASSIGN_OR_RETURN(std::string type, json_type(j, kWhere));
  if (type == "NFC") return make<UnicodeNormalizer>(NormalizationForm::kNfc);
  if (type == "NFD") return make<UnicodeNormalizer>(NormalizationForm::kNfd);
  if (type == "NFKC") return make<UnicodeNormalizer>(NormalizationForm::kNfkc);
  if (type == "NFKD") return make<UnicodeNormalizer>(NormalizationForm::kNfkd);
  if (type == "Lowercase") return make<LowercaseNormalizer>();
  if (type == "ByteLevel") return make<ByteLevelNormalizer>();
  if (type == "Strip") {
    LS_ASSIGN_OR_RETURN(bool left, json_bool(j, "strip_left", true, "normalizer Strip"));
    LS_ASSIGN_OR_RETURN(bool right, json_bool(j, "strip_right", true, "normalizer Strip"));
    return make<StripNormalizer>(left, right);
  }
  if (type == "Prepend") {
    LS_ASSIGN_OR_RETURN(std::string prefix, json_string(j, "prepend", "normalizer Prepend"));
    return make<PrependNormalizer>(std::move(prefix));
  }
  if (type == "Replace") {
    const nlohmann::json* pat = json_member(j, "pattern");
    if (pat == nullptr) return invalid_argument("normalizer Replace: missing pattern");
    LS_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(*pat, "normalizer Replace.pattern"));
    LS_ASSIGN_OR_RETURN(std::string content, json_string(j, "content", "normalizer Replace"));
    return make<ReplaceNormalizer>(std::move(pattern), std::move(content));
  }
  if (type == "Sequence") {
    const nlohmann::json* list = json_member(j, "normalizers");
    if (list == nullptr || !list->is_array()) {
      return invalid_argument("normalizer Sequence: expected a normalizers array");
    }
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& item : *list) {
      LS_ASSIGN_OR_RETURN(auto part, parse_normalizer(item, depth + 1));
      parts.push_back(std::move(part));
    }
    return make<SequenceNormalizer>(std::move(parts));
  }
  return unimplemented("normalizer type '{}' is not supported", type);
}

}  // namespace ls::tok
