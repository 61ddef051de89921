#pragma once
// Decoders of tokenizer.json: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and
// Sequence, as Hugging Face chains them: each transforms the list of token strings, and the
// final text is the concatenation of the last list.

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ls::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // True when this decoder (or one inside a Sequence) groups consecutive <0xNN> byte tokens:
  // the text of such a run is only final once a non-byte token follows it.
  virtual bool groups_byte_tokens() const { return false; }
};

// A decoder object from tokenizer.json ("decoder" or an element of a Sequence).
Result<std::unique_ptr<Decoder>> parse_decoder(const nlohmann::json& j, int depth = 0);

// The byte a "<0xNN>" token stands for, as HF's ByteFallback decoder reads it.
std::optional<uint8_t> parse_byte_token(std::string_view token);

}  // namespace ls::tok
