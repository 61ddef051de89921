#pragma once
// Pre-tokenizers of tokenizer.json: Split, ByteLevel, Metaspace, Digits and Sequence. They cut a
// normalized piece of text into the words the model encodes, with Hugging Face's semantics.

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace ls::tok {

// A piece of text on its way to the model.
struct Piece {
  std::string text;
  // The piece starts at offset 0 of the original input (Metaspace's prepend_scheme "first"
  // prepends only there). Text inserted by a normalizer before a split point is not tracked,
  // so a later piece never counts as the start.
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece by its sub-pieces, in order; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

// A pre_tokenizer object from tokenizer.json ("pre_tokenizer" or an element of a Sequence).
Result<std::unique_ptr<PreTokenizer>> parse_pre_tokenizer(const nlohmann::json& j, int depth = 0);

}  // namespace ls::tok
