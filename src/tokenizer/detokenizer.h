#pragma once
// Streaming decode for generation.
//
// Promise: without prompt_ids, the concatenation of every push() result and flush() equals
// tokenizer.decode(all pushed ids, skip_special_tokens), and no result ever ends inside a UTF-8
// character. With prompt_ids P, the output continues the prompt's text: it equals
// decode(P + pushed) minus the prompt's text, where trailing U+FFFD characters of the prompt's
// text count as possibly incomplete (a character split between prompt and output comes out
// whole).
//
// How: like vLLM, each step decodes a small window of recent tokens (a little left context, so
// SentencePiece leading-space rules and first-token rules of the decoders apply to the context,
// not the new tokens) and emits the part of the window's text beyond what was emitted before.
// Text is held back while it may still change: a trailing U+FFFD (an incomplete UTF-8 sequence
// for byte-level decoders) and, for decoders with ByteFallback, a run of <0xNN> byte tokens
// that a later byte token could still join. Cost per token is O(window), independent of the
// length of the generation.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ls {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                         std::span<const int32_t> prompt_ids = {});

  // Adds one generated id; returns newly final text (complete UTF-8), possibly "".
  std::string push(int32_t id);
  // Returns whatever is still held back (an incomplete sequence decodes to U+FFFD, exactly as
  // decode() renders it). Pushing may continue afterwards.
  std::string flush();

 private:
  std::string advance(bool final);

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  bool groups_byte_tokens_;
  // [window] the context tokens followed by the tokens not yet committed; read_ is where the
  // uncommitted ones start.
  std::vector<int32_t> window_;
  size_t read_ = 0;
  // The prefix of decode(window_) already emitted (or belonging to the prompt).
  std::string emitted_;
};

}  // namespace ls
