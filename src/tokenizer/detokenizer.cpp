#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"

namespace ls {

namespace {

// Context tokens kept from the prompt; any one visible token is enough for the decoders'
// first-token rules, a few more make the window robust to tokens that decode to nothing.
constexpr size_t kPromptContextTokens = 4;
// Text that keeps ending in U+FFFD is held at most this many tokens; only a stream of invalid
// bytes gets there, and it must not make every step re-decode an ever-growing window.
constexpr size_t kMaxPendingTokens = 256;

bool ends_with_replacement(std::string_view s) {
  return s.size() >= tok::kReplacementUtf8.size() &&
         s.substr(s.size() - tok::kReplacementUtf8.size()) == tok::kReplacementUtf8;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                                               std::span<const int32_t> prompt_ids)
    : tokenizer_(tokenizer),
      skip_special_tokens_(skip_special_tokens),
      groups_byte_tokens_(tokenizer.groups_byte_tokens()) {
  // Walk back over the prompt until a few visible, non-byte tokens are in the window (byte
  // tokens before them may still join a run with the first generated tokens).
  size_t begin = prompt_ids.size();
  size_t visible = 0;
  while (begin > 0 && visible < kPromptContextTokens) {
    const int32_t id = prompt_ids[begin - 1];
    --begin;
    const bool shown = !tokenizer.dropped_by_decode(id, skip_special_tokens);
    if (shown && !(groups_byte_tokens_ && tokenizer.is_byte_token(id))) ++visible;
  }
  window_.assign(prompt_ids.begin() + static_cast<std::ptrdiff_t>(begin), prompt_ids.end());
  emitted_ = tokenizer_.decode(window_, skip_special_tokens_);
  // The context must show some text (see advance()); reach further back when it does not.
  while (emitted_.empty() && begin > 0) {
    begin = begin > window_.size() ? begin - window_.size() - 1 : 0;
    window_.assign(prompt_ids.begin() + static_cast<std::ptrdiff_t>(begin), prompt_ids.end());
    emitted_ = tokenizer_.decode(window_, skip_special_tokens_);
  }
  read_ = window_.size();
  while (ends_with_replacement(emitted_)) {
    emitted_.resize(emitted_.size() - tok::kReplacementUtf8.size());
  }
}

std::string IncrementalDetokenizer::push(int32_t id) {
  window_.push_back(id);
  // A dropped token changes nothing (and must not end a held run of byte tokens: decode
  // removes it before the byte run is grouped).
  if (tokenizer_.dropped_by_decode(id, skip_special_tokens_)) return {};
  if (groups_byte_tokens_ && tokenizer_.is_byte_token(id)) return {};
  return advance(/*final=*/false);
}

std::string IncrementalDetokenizer::flush() {
  if (window_.size() == read_) return {};
  return advance(/*final=*/true);
}

std::string IncrementalDetokenizer::advance(bool final) {
  const std::string text = tokenizer_.decode(window_, skip_special_tokens_);
  size_t common = emitted_.size();
  if (text.compare(0, emitted_.size(), emitted_) != 0) {
    // The supported decoders keep the emitted text a prefix; should another one not, wait for
    // more tokens, and at the end emit from the first difference.
    if (!final) return {};
    common = 0;
    while (common < text.size() && common < emitted_.size() && text[common] == emitted_[common]) {
      ++common;
    }
    while (common > 0 && (static_cast<unsigned char>(text[common]) & 0xC0) == 0x80) --common;
  }
  size_t end = text.size();
  const bool hold = !final && ends_with_replacement(text) &&
                    end - tok::kReplacementUtf8.size() >= common &&
                    window_.size() - read_ <= kMaxPendingTokens;
  if (hold) end -= tok::kReplacementUtf8.size();
  if (end <= common) return {};
  std::string delta = text.substr(common, end - common);
  if (hold) {
    emitted_ = text.substr(0, end);
    return delta;
  }
  // All text of the window is final. The tokens after the old context become the new context
  // when they show some text on their own: only then do first-token rules (Metaspace's first
  // token, Strip of leading spaces) end inside the context and not in the tokens after it.
  const std::span<const int32_t> tail(window_.data() + read_, window_.size() - read_);
  std::string tail_text = tokenizer_.decode(tail, skip_special_tokens_);
  if (tail_text.empty()) {
    emitted_ = text;
  } else {
    window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(read_));
    emitted_ = std::move(tail_text);
  }
  read_ = window_.size();
  return delta;
}

}  // namespace ls
