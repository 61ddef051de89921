#pragma once
// Normalizers of tokenizer.json: NFC/NFD/NFKC/NFKD, Lowercase, Strip, Prepend, Replace,
// ByteLevel and Sequence, with Hugging Face's semantics on the text (alignments are not kept;
// nothing downstream needs them).

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>

#include "core/status.h"

namespace ls::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // text is valid UTF-8 and stays valid.
  virtual void normalize(std::string& text) const = 0;
};

// A normalizer object from tokenizer.json ("normalizer" or an element of a Sequence).
Result<std::unique_ptr<Normalizer>> parse_normalizer(const nlohmann::json& j, int depth = 0);

}  // namespace ls::tok
