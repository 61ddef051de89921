#pragma once
// StopChecker: decides, token by token, whether a sequence is finished and which text may be
// shown now. It sees token ids and the text the incremental detokenizer produced for each one
// (plain strings: this file knows nothing about tokenizers).
//
// Rules (vLLM's, with the differences marked):
// - Output token n (1-based) is checked after it is sampled. Tokens 1..min_tokens are protected:
//   eos and stop_token_ids do not stop there, and a stop string must end in text produced after
//   them (the sampler also forbids the stopping ids there; see min_tokens_forbidden_ids()).
// - eos (any of eos_token_ids, unless ignore_eos) or an id in stop_token_ids finishes with
//   kStop. That token's text is not shown unless include_stop_str_in_output (vLLM's
//   detokenizer drops it the same way); stop_reason is "" for eos and the id for a stop id.
//   When the id is both, eos wins (vLLM checks eos first).
// - A stop string finishes with kStop and stop_reason = the string. The text is cut at its start,
//   or at its end with include_stop_str_in_output; nothing after it is ever shown. When several
//   stop strings occur, the one that ends first in the text wins, then the one that starts first.
//   (vLLM takes the first in list order among those in the new text, which makes the result
//   depend on how the text was split into tokens; ending-first does not.)
// - max_tokens finishes with kLength, unless the same token also completed a stop string or is a
//   stopping id (then kStop: the model did stop; vLLM v1 reports "length" for an eos that is also
//   the max_tokens-th token).
//
// Streaming: text that could still be the start of a stop string is held back, so a stop string
// split across tokens is never shown in part. What is held is the longest tail that is a proper
// prefix of some stop string (at most longest-stop-string - 1 bytes, usually nothing; vLLM always
// holds that many characters). With include_stop_str_in_output nothing needs holding. Emitted text
// never splits a UTF-8 character: an incomplete character at the end waits for its remaining
// bytes. When the sequence finishes, everything held that is not cut is emitted.

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"

namespace ls {

struct StopResult {
  bool finished = false;
  FinishReason reason = FinishReason::kNone;  // kStop or kLength when finished
  std::string emit;                           // text to show now (may be empty)
  std::string stop_reason;     // matched stop string, or the stop token id in decimal; "" for eos
                               // and length (vLLM's null)
  int32_t stop_token_id = -1;  // the id when an entry of stop_token_ids finished the sequence, so
                               // the server can send stop_reason as a JSON number as vLLM does
};

class StopChecker {
 public:
  // `max_output_tokens` caps params.max_tokens further (the engine passes what the context
  // leaves: max_model_len - prompt tokens). params should have passed validate().
  explicit StopChecker(const StopParams& params,
                       int32_t max_output_tokens = std::numeric_limits<int32_t>::max());

  // Feeds output token `token_id` and the detokenizer's text for it. Once finished, further calls
  // change nothing and return the final state with empty text.
  StopResult on_token(int32_t token_id, std::string_view new_text);
  // Everything held back, for an end decided elsewhere (an error, or the engine stopping the
  // sequence); marks the checker finished without a reason. Returns "" when already finished.
  std::string flush();

  bool finished() const { return finished_; }
  int32_t num_output_tokens() const { return num_output_tokens_; }
  // Bytes received but not yet emitted.
  size_t num_held_bytes() const { return static_cast<size_t>(total_bytes_ - emitted_bytes_); }

 private:
  struct Match {
    int64_t start = -1;  // absolute byte offsets in the output text
    int64_t end = -1;
    size_t stop_index = 0;
  };

  bool is_eos(int32_t id) const;
  bool is_stop_id(int32_t id) const;
  // The earliest-ending stop string occurrence that ends after `old_total_bytes`.
  Match find_new_match(int64_t old_total_bytes) const;
  // Length of the longest tail of the unemitted text that is a proper prefix of a stop string.
  size_t held_tail_bytes() const;
  // Emits [emitted, end_bytes) and forgets text nobody needs any more.
  std::string emit_until(int64_t end_bytes);
  StopResult finish(FinishReason reason, int64_t end_bytes, std::string stop_reason,
                    int32_t stop_token_id);

  std::vector<int32_t> eos_ids_;   // sorted; empty with ignore_eos
  std::vector<int32_t> stop_ids_;  // sorted
  std::vector<std::string> stops_;
  size_t max_stop_bytes_ = 0;
  bool include_stop_str_ = false;
  int32_t min_tokens_ = 0;
  int32_t max_tokens_ = 0;

  int32_t num_output_tokens_ = 0;
  // The output text is kept from absolute byte offset buf_start_bytes_ on: everything not yet
  // emitted plus the last max_stop_bytes_ - 1 bytes, where a new match may start.
  std::string buf_;
  int64_t buf_start_bytes_ = 0;
  int64_t total_bytes_ = 0;
  int64_t emitted_bytes_ = 0;

  bool finished_ = false;
  StopResult final_;  // returned again by calls after the end (emit empty)
};

// The ids that would stop a sequence (eos unless ignore_eos, and stop_token_ids), sorted and
// unique: what SequenceSamplingState::forbid_until() must forbid while fewer than min_tokens
// tokens were generated. (vLLM also forbids eos under ignore_eos; here an id that cannot stop the
// sequence is an ordinary token.)
std::vector<int32_t> min_tokens_forbidden_ids(const StopParams& params);

}  // namespace ls
