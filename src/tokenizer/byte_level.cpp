#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace ls::tok {

const ByteLevelMap& ByteLevelMap::get() {
  static const ByteLevelMap map;
  return map;
}

ByteLevelMap::ByteLevelMap() {
  char_to_byte_.fill(-1);
  uint32_t next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool kept = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const char32_t c = kept ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + next++);
    byte_to_char_[b] = c;
    char_to_byte_[c] = static_cast<int16_t>(b);
    std::string enc;
    append_utf8(enc, c);
    utf8_len_[b] = static_cast<uint8_t>(enc.size());
    for (size_t i = 0; i < enc.size(); ++i) utf8_[b][i] = enc[i];
  }
}

std::string ByteLevelMap::encode(std::string_view s) const {
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) out.append(byte_to_utf8(static_cast<uint8_t>(c)));
  return out;
}

}  // namespace ls::tok
