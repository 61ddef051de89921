#pragma once
// The bytes each token id stands for, sorted so that token masks can walk the vocabulary like a
// trie: tokens in byte order, with each token's common prefix length with the one before, so a
// walk keeps one matcher state per prefix length and skips every token under a dead prefix.
// Built once per tokenizer (the per-tokenizer precomputation of constrained decoding).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ls {
class Tokenizer;
}

namespace ls::grammar {

class TokenVocab {
 public:
  // token_bytes[id]: the bytes of id; excluded[id]: never allowed by a grammar (special and
  // unknown tokens, tokens of no bytes). Both [vocab_size].
  TokenVocab(std::vector<std::string> token_bytes, std::vector<bool> excluded);
  // From a tokenizer: byte-level BPE vocabularies map their characters back to bytes;
  // SentencePiece-style ones turn U+2581 into a space and <0xNN> into byte NN.
  static TokenVocab from_tokenizer(const Tokenizer& tokenizer);

  int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool excluded(int32_t id) const { return excluded_[static_cast<size_t>(id)]; }
  // Allowed ids in byte order, and each one's common prefix length with its predecessor.
  std::span<const int32_t> sorted_ids() const { return sorted_; }
  std::span<const uint32_t> common_prefix() const { return lcp_; }
  size_t max_token_bytes() const { return max_len_; }

 private:
  std::vector<std::string> bytes_;  // [vocab_size]
  std::vector<bool> excluded_;      // [vocab_size]
  std::vector<int32_t> sorted_;     // [num_allowed]
  std::vector<uint32_t> lcp_;       // [num_allowed]
  size_t max_len_ = 0;
};

}  // namespace ls::grammar
