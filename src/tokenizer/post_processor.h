#pragma once
// Post-processors of tokenizer.json for single sequences: TemplateProcessing (how Llama and
// Mistral add BOS), BertProcessing / RobertaProcessing ([CLS] A [SEP]), ByteLevel (offsets only,
// so nothing to do on ids) and Sequence.

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"

namespace ls::tok {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens of a single-sequence encoding when add_special_tokens is set.
  virtual void process(std::vector<int32_t>& ids, bool add_special_tokens) const = 0;
  // Appends every id process() may add, so the loader can check them against the vocabulary.
  virtual void added_ids(std::vector<int32_t>& out) const = 0;
};

// A post_processor object from tokenizer.json.
Result<std::unique_ptr<PostProcessor>> parse_post_processor(const nlohmann::json& j, int depth = 0);

}  // namespace ls::tok
