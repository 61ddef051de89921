#pragma once
// The GPT-2 byte <-> unicode map that byte-level BPE vocabularies are written in: bytes
// 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF stand for themselves; the other 68 bytes map, in order,
// to U+0100.. (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ls::tok {

class ByteLevelMap {
 public:
  static const ByteLevelMap& get();

  char32_t byte_to_char(uint8_t b) const { return byte_to_char_[b]; }
  // The UTF-8 encoding of byte_to_char(b), for appending without re-encoding.
  std::string_view byte_to_utf8(uint8_t b) const {
    return {utf8_[b].data(), static_cast<size_t>(utf8_len_[b])};
  }
  std::optional<uint8_t> char_to_byte(char32_t c) const {
    if (c >= char_to_byte_.size() || char_to_byte_[c] < 0) return std::nullopt;
    return static_cast<uint8_t>(char_to_byte_[c]);
  }

  // Maps every byte of s to its character.
  std::string encode(std::string_view s) const;

 private:
  ByteLevelMap();
  std::array<char32_t, 256> byte_to_char_{};
  std::array<std::array<char, 2>, 256> utf8_{};  // every mapped char is 1 or 2 UTF-8 bytes
  std::array<uint8_t, 256> utf8_len_{};
  std::array<int16_t, 0x144> char_to_byte_{};  // -1: not a byte-level character
};

}  // namespace ls::tok
