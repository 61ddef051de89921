#include "tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include <string>

#include "tokenizer/json_util.h"

namespace ls::tok {

namespace {

// The single-sequence template: each element is either the sequence ($A) or the ids of a
// special token (left out without add_special_tokens). As in HF, $A may appear more than once
// and is copied each time; $B has no meaning for a single sequence and contributes nothing.
class TemplateProcessor final : public PostProcessor {
 public:
  struct Element {
    bool is_sequence_a = false;
    bool is_sequence_b = false;
    std::vector<int32_t> special_ids;
  };
  explicit TemplateProcessor(std::vector<Element> single) : single_(std::move(single)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const Element& e : single_) {
      if (e.is_sequence_a) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else if (!e.is_sequence_b && add_special_tokens) {
        out.insert(out.end(), e.special_ids.begin(), e.special_ids.end());
      }
    }
    ids = std::move(out);
  }
  void added_ids(std::vector<int32_t>& out) const override {
    for (const Element& e : single_)
      out.insert(out.end(), e.special_ids.begin(), e.special_ids.end());
  }

 private:
  std::vector<Element> single_;
};

// BertProcessing / RobertaProcessing: cls + A + sep.
class ClsSepProcessor final : public PostProcessor {
 public:
  ClsSepProcessor(int32_t cls, int32_t sep) : cls_(cls), sep_(sep) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    ids.insert(ids.begin(), cls_);
    ids.push_back(sep_);
  }
  void added_ids(std::vector<int32_t>& out) const override {
    out.push_back(cls_);
    out.push_back(sep_);
  }

 private:
  int32_t cls_;
  int32_t sep_;
};

class NoopProcessor final : public PostProcessor {
 public:
  void process(std::vector<int32_t>&, bool) const override {}
  void added_ids(std::vector<int32_t>&) const override {}
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts)
      : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    for (const auto& p : parts_) p->process(ids, add_special_tokens);
  }
  void added_ids(std::vector<int32_t>& out) const override {
    for (const auto& p : parts_) p->added_ids(out);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

Result<int32_t> checked_id(const nlohmann::json& v, std::string_view where) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
    return invalid_argument("{}: expected a non-negative token id", where);
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

Result<std::unique_ptr<PostProcessor>> parse_template(const nlohmann::json& j) {
  constexpr std::string_view kWhere = "post_processor TemplateProcessing";
  const nlohmann::json* specials = json_member(j, "special_tokens");
  if (specials != nullptr && !specials->is_object()) {
    return invalid_argument("{}.special_tokens: expected an object", kWhere);
  }
  const nlohmann::json* single = json_member(j, "single");
  if (single == nullptr || !single->is_array()) {
    return invalid_argument("{}.single: expected an array of pieces", kWhere);
  }
  std::vector<TemplateProcessor::Element> elements;
  for (const auto& piece : *single) {
    TemplateProcessor::Element e;
    if (const nlohmann::json* seq = json_member(piece, "Sequence")) {
      const nlohmann::json* id = json_member(*seq, "id");
      if (id != nullptr && *id == "A") {
        e.is_sequence_a = true;
      } else if (id != nullptr && *id == "B") {
        e.is_sequence_b = true;
      } else {
        return invalid_argument("{}: Sequence id must be \"A\" or \"B\"", kWhere);
      }
    } else if (const nlohmann::json* sp = json_member(piece, "SpecialToken")) {
      LS_ASSIGN_OR_RETURN(std::string name, json_string(*sp, "id", "TemplateProcessing token"));
      const nlohmann::json* entry = specials ? json_member(*specials, name) : nullptr;
      const nlohmann::json* ids = entry ? json_member(*entry, "ids") : nullptr;
      if (ids == nullptr || !ids->is_array()) {
        return invalid_argument("{}: special token '{}' has no ids in special_tokens", kWhere,
                                name);
      }
      for (const auto& id : *ids) {
        LS_ASSIGN_OR_RETURN(int32_t v, checked_id(id, kWhere));
        e.special_ids.push_back(v);
      }
    } else {
      return invalid_argument("{}.single: expected Sequence or SpecialToken pieces", kWhere);
    }
    elements.push_back(std::move(e));
  }
  return std::unique_ptr<PostProcessor>(std::make_unique<TemplateProcessor>(std::move(elements)));
}

// BertProcessing/RobertaProcessing store tokens as ["[CLS]", 101].
Result<int32_t> pair_id(const nlohmann::json& j, std::string_view key, std::string_view where) {
  const nlohmann::json* v = json_member(j, key);
  if (v == nullptr || !v->is_array() || v->size() != 2 || !(*v)[0].is_string()) {
    return invalid_argument("{}.{}: expected [token, id]", where, key);
  }
  return checked_id((*v)[1], where);
}

}  // namespace

Result<std::unique_ptr<PostProcessor>> parse_post_processor(const nlohmann::json& j, int depth) {
  if (depth > kMaxComponentDepth) return invalid_argument("post_processor: nested too deeply");
  LS_ASSIGN_OR_RETURN(std::string type, json_type(j, "post_processor"));
  if (type == "TemplateProcessing") return parse_template(j);
  if (type == "ByteLevel") return std::unique_ptr<PostProcessor>(std::make_unique<NoopProcessor>());
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    const std::string where = "post_processor " + type;
    LS_ASSIGN_OR_RETURN(int32_t cls, pair_id(j, "cls", where));
    LS_ASSIGN_OR_RETURN(int32_t sep, pair_id(j, "sep", where));
    return std::unique_ptr<PostProcessor>(std::make_unique<ClsSepProcessor>(cls, sep));
  }
  if (type == "Sequence") {
    const nlohmann::json* list = json_member(j, "processors");
    if (list == nullptr || !list->is_array()) {
      return invalid_argument("post_processor Sequence: expected a processors array");
    }
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const auto& item : *list) {
      LS_ASSIGN_OR_RETURN(auto part, parse_post_processor(item, depth + 1));
      parts.push_back(std::move(part));
    }
    return std::unique_ptr<PostProcessor>(std::make_unique<SequenceProcessor>(std::move(parts)));
  }
  return unimplemented("post_processor type '{}' is not supported", type);
}

}  // namespace ls::tok
