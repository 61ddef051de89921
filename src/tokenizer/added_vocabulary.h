#pragma once
// Added tokens (tokenizer.json "added_tokens"), with Hugging Face's AddedVocabulary semantics:
// - ids are assigned as HF assigns them when it loads the file (a token already in the model
//   vocabulary keeps that id, others take the next free id after the model's), not read from
//   the file;
// - matching is leftmost-longest over the raw text (tokens with normalized=false) and then over
//   each normalized piece (normalized=true, matched against their normalized content), like HF's
//   Aho-Corasick tries;
// - single_word, lstrip and rstrip follow HF's find_matches exactly, including its quirks (a
//   rejected single_word match is skipped, not retried shorter);
// - a normalized=true token is shown (id_to_token, decode) in its normalized form, while
//   token_to_id still takes its content, as HF does.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ls::tok {

class BpeModel;
class Normalizer;

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;

  bool operator==(const AddedToken&) const = default;
};

// A cut of the text: [start, end) is either an added token (id >= 0) or plain text (id == -1).
struct AddedSplit {
  size_t start;
  size_t end;
  int32_t id;
};

class AddedVocabulary {
 public:
  // Adds one token the way HF's add_tokens does (duplicates ignored, ids reused or appended).
  void add(const AddedToken& token, const BpeModel& model);
  // Builds the two matchers; `normalizer` (may be null) normalizes the patterns of normalized
  // tokens. Call after the last add().
  void build_matchers(const BpeModel& model, const Normalizer* normalizer);

  std::optional<int32_t> token_to_id(std::string_view content) const;
  const AddedToken* token(int32_t id) const;
  // What HF's id_to_token and decode show for an added id: the content, normalized when the
  // token has normalized=true. nullptr when id is not an added token.
  const std::string* shown_content(int32_t id) const;
  bool is_special_content(std::string_view content) const {
    return special_set_.count(std::string(content)) != 0;
  }
  // The largest added id, or -1.
  int32_t max_id() const { return max_id_; }
  const std::unordered_map<int32_t, AddedToken>& by_id() const { return by_id_; }

  // HF's find_matches on the raw-text matcher (normalized=false tokens) or the normalized one.
  // An empty text gives nothing.
  void find_matches(std::string_view text, bool normalized_matcher,
                    std::vector<AddedSplit>& out) const;

 private:
  // A byte trie that answers "longest pattern starting here".
  class Trie {
   public:
    void insert(std::string_view pattern, int32_t id);
    // Longest pattern starting at text[pos]: its length and id, or length 0.
    std::pair<size_t, int32_t> longest_at(std::string_view text, size_t pos) const;
    bool empty() const { return nodes_.size() <= 1; }

   private:
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t id = -1;                                    // pattern ending here
    };
    std::vector<Node> nodes_{Node{}};
  };

  std::optional<int32_t> lookup(std::string_view content, const BpeModel& model) const;

  std::unordered_map<std::string, int32_t> content_to_id_;
  std::unordered_map<int32_t, AddedToken> by_id_;
  std::unordered_map<int32_t, std::string> shown_;  // filled by build_matchers
  std::vector<AddedToken> special_tokens_;          // in insertion order
  std::vector<AddedToken> added_tokens_;            // non-special, in insertion order
  std::unordered_set<std::string> special_set_;
  int32_t max_id_ = -1;
  Trie raw_trie_;
  Trie normalized_trie_;
};

}  // namespace ls::tok
