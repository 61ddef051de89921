#pragma once
// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}), with Hugging Face's exact
// merge order: the lowest-ranked adjacent pair merges first, the leftmost on ties; byte_fallback
// to <0xNN> tokens; unk_token with fuse_unk; continuing_subword_prefix / end_of_word_suffix;
// ignore_merges (a word already in the vocabulary is one token).
//
// Merging uses a priority queue over a linked list of symbols, so a long word costs
// O(n log n); long words are first cut where no merge can join the sides, and results for
// pieces under 256 bytes are cached, as HF caches words.

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"

namespace ls::tok {

// Hash for unordered_map<std::string, ...> lookups by string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `model` is the tokenizer.json "model" object.
  static Result<std::unique_ptr<BpeModel>> from_json(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized word. Characters that are neither in the vocabulary
  // nor representable by byte fallback become unk_token, or are dropped when there is none
  // (HF raises an error there instead). Thread-safe.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The vocabulary string of id, or nullptr when the vocabulary has no such id.
  const std::string* id_to_token(int32_t id) const;
  // HF's Model::get_vocab_size: the number of vocabulary entries.
  size_t num_entries() const { return vocab_.size(); }
  // The largest id in the vocabulary, or -1 when it is empty.
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  struct MergeInfo {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Merges one word through the cache (no ignore_merges shortcut).
  void merge_cached(std::string_view word, std::vector<int32_t>& out) const;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  StringIdMap vocab_;
  std::vector<std::string> id_to_token_;  // [max_id + 1]; "" where the id is unused
  std::vector<uint8_t> id_present_;       // [max_id + 1] 1 where the vocabulary has the id
  std::unordered_map<uint64_t, MergeInfo> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  std::array<int32_t, 256> byte_token_ids_{};  // id of "<0xNN>", -1 when absent
  // (last code point of a, first code point of b) over all merges (a, b): the only adjacent
  // characters a merge can ever join. Between two known characters not listed here, a word can
  // be cut and its halves merged separately with the same result.
  std::unordered_set<uint64_t> junctions_;
  bool can_split_ = false;

  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kMaxCacheEntries = 1 << 16;
  mutable std::shared_mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace ls::tok
