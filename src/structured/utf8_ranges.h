#pragma once
// Code-point ranges -> alternatives of UTF-8 byte-range sequences (the standard split used by
// RE2 and Rust's regex-syntax): every scalar value in [lo, hi] is matched by exactly one
// sequence, surrogates excluded.

#include <cstdint>
#include <utility>
#include <vector>

namespace ls::grammar {

// One UTF-8 sequence of 1-4 byte ranges.
using Utf8Sequence = std::vector<std::pair<uint8_t, uint8_t>>;

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out);

}  // namespace ls::grammar
