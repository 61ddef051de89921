// TokenVocab::from_tokenizer: the bytes of every token id of a tokenizer (kept apart from the
// grammar engine so that it and its fuzzers do not depend on the tokenizer).

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "structured/token_vocab.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ls::grammar {

namespace {

std::optional<uint8_t> hex_byte_token(const std::string& s) {
  // "<0xNN>"
  if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(s[3]);
  const int lo = hex(s[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

// Byte-level: every character of the vocabulary string is one byte.
std::optional<std::string> byte_level_bytes(const std::string& s) {
  const tok::ByteLevelMap& map = tok::ByteLevelMap::get();
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const tok::Utf8Step cp = tok::decode_utf8(s, i);
    if (!cp.valid) return std::nullopt;
    i += cp.len;
    const std::optional<uint8_t> b = map.char_to_byte(cp.cp);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

std::string sentencepiece_bytes(const std::string& s) {
  if (const auto b = hex_byte_token(s)) return std::string(1, static_cast<char>(*b));
  std::string out;
  const std::string_view space_mark = "\xE2\x96\x81";  // U+2581
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, space_mark.size(), space_mark) == 0) {
      out.push_back(' ');
      i += space_mark.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

}  // namespace

TokenVocab TokenVocab::from_tokenizer(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<bool> excluded(static_cast<size_t>(n), false);
  const bool sentencepiece = tokenizer.groups_byte_tokens();
  for (int32_t id = 0; id < n; ++id) {
    const auto i = static_cast<size_t>(id);
    const std::string raw = tokenizer.id_to_token(id);
    if (raw.empty() || tokenizer.is_special(id)) {
      excluded[i] = true;
      continue;
    }
    if (sentencepiece) {
      bytes[i] = sentencepiece_bytes(raw);
    } else if (auto b = byte_level_bytes(raw)) {
      bytes[i] = std::move(*b);
    } else {
      // An added (non-special) token written as plain text.
      const int32_t one[1] = {id};
      bytes[i] = tokenizer.decode(one, /*skip_special_tokens=*/false);
    }
  }
  return TokenVocab(std::move(bytes), std::move(excluded));
}

}  // namespace ls::grammar
