#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace ls::tok {

namespace {

// The code point that ends text (valid UTF-8, non-empty).
char32_t last_code_point(std::string_view text) {
  size_t lead = text.size() - 1;
  while (lead > 0 && (static_cast<unsigned char>(text[lead]) & 0xC0) == 0x80) --lead;
  return decode_utf8(text, lead).cp;
}

// Start of the run of White_Space at the end of text (the regex `\s*$`).
size_t trailing_space_start(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t lead = end - 1;
    while (lead > 0 && (static_cast<unsigned char>(text[lead]) & 0xC0) == 0x80) --lead;
    if (!is_white_space(decode_utf8(text, lead).cp)) break;
    end = lead;
  }
  return end;
}

// Length of the run of White_Space at the start of text (the regex `^\s*`).
size_t leading_space_len(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Step st = decode_utf8(text, i);
    if (!is_white_space(st.cp)) break;
    i += st.len;
  }
  return i;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view pattern, int32_t id) {
  int32_t node = 0;
  for (char c : pattern) {
    const auto b = static_cast<uint8_t>(c);
    auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), b,
                               [](const auto& child, uint8_t v) { return child.first < v; });
    if (it != children.end() && it->first == b) {
      node = it->second;
      continue;
    }
    const auto next = static_cast<int32_t>(nodes_.size());
    children.insert(it, {b, next});
    nodes_.emplace_back();
    node = next;
  }
  // With duplicate patterns the first one added wins, as in the Aho-Corasick automaton.
  if (nodes_[node].id < 0) nodes_[node].id = id;
}

std::pair<size_t, int32_t> AddedVocabulary::Trie::longest_at(std::string_view text,
                                                             size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    const auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), b,
                               [](const auto& child, uint8_t v) { return child.first < v; });
    if (it == children.end() || it->first != b) break;
    node = it->second;
    if (nodes_[node].id >= 0) best = {i + 1 - pos, nodes_[node].id};
  }
  return best;
}

std::optional<int32_t> AddedVocabulary::lookup(std::string_view content,
                                               const BpeModel& model) const {
  if (auto it = content_to_id_.find(std::string(content)); it != content_to_id_.end()) {
    return it->second;
  }
  return model.token_to_id(content);
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  if (auto it = content_to_id_.find(std::string(content)); it != content_to_id_.end()) {
    return it->second;
  }
  return std::nullopt;
}

const AddedToken* AddedVocabulary::token(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

void AddedVocabulary::add(const AddedToken& token, const BpeModel& model) {
  if (token.special && !token.content.empty() && !special_set_.count(token.content)) {
    special_tokens_.push_back(token);
    special_set_.insert(token.content);
  }
  if (token.content.empty()) return;
  for (const auto& [id, existing] : by_id_) {
    if (existing == token) return;
  }
  int32_t new_id;
  if (auto id = lookup(token.content, model)) {
    new_id = *id;
  } else {
    const auto model_size = static_cast<int32_t>(model.num_entries());
    if (max_id_ < 0) {
      new_id = model_size;
    } else {
      new_id = (max_id_ >= model_size || model_size == 0) ? max_id_ + 1 : model_size;
    }
  }
  content_to_id_[token.content] = new_id;
  by_id_[new_id] = token;
  max_id_ = std::max(max_id_, new_id);
  if (!special_set_.count(token.content)) added_tokens_.push_back(token);
}

const std::string* AddedVocabulary::shown_content(int32_t id) const {
  auto it = shown_.find(id);
  return it == shown_.end() ? nullptr : &it->second;
}

void AddedVocabulary::build_matchers(const BpeModel& model, const Normalizer* normalizer) {
  shown_.clear();
  for (const auto& [id, t] : by_id_) {
    std::string shown = t.content;
    if (t.normalized && normalizer != nullptr) normalizer->normalize(shown);
    shown_.emplace(id, std::move(shown));
  }
  raw_trie_ = Trie();
  normalized_trie_ = Trie();
  auto add_pattern = [&](const AddedToken& t) {
    const auto id = lookup(t.content, model);
    if (!id) return;
    if (!t.normalized) {
      raw_trie_.insert(t.content, *id);
      return;
    }
    std::string pattern = t.content;
    if (normalizer != nullptr) normalizer->normalize(pattern);
    if (!pattern.empty()) normalized_trie_.insert(pattern, *id);
  };
  for (const AddedToken& t : special_tokens_) add_pattern(t);
  for (const AddedToken& t : added_tokens_) add_pattern(t);
}

void AddedVocabulary::find_matches(std::string_view text, bool normalized_matcher,
                                   std::vector<AddedSplit>& out) const {
  out.clear();
  if (text.empty()) return;
  const Trie& trie = normalized_matcher ? normalized_trie_ : raw_trie_;
  if (trie.empty()) {
    out.push_back({0, text.size(), -1});
    return;
  }
  size_t start_offset = 0;  // end of the last accepted split
  size_t pos = 0;           // where the automaton resumes (end of the last match)
  while (pos < text.size()) {
    auto [len, id] = trie.longest_at(text, pos);
    if (len == 0) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + len;
    pos = stop;
    const AddedToken* t = token(id);
    if (t == nullptr) continue;
    if (t->single_word) {
      const bool start_space =
          start == 0 || !is_regex_word_char(last_code_point(text.substr(0, start)));
      const bool stop_space =
          stop == text.size() || !is_regex_word_char(decode_utf8(text, stop).cp);
      if (!start_space || !stop_space) continue;
    }
    if (t->lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (t->rstrip) stop += leading_space_len(text.substr(stop));
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, id});
    start_offset = stop;
  }
  if (start_offset != text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace ls::tok
