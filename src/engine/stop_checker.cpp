#include "engine/stop_checker.h"

#include <algorithm>

namespace ls {
namespace {

std::vector<int32_t> sorted_unique(std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

bool is_continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

// Bytes a UTF-8 sequence announces by its lead byte (1 for ASCII and for invalid leads).
size_t utf8_sequence_bytes(unsigned char lead) {
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// The largest p <= pos such that text[0, p) ends on a character boundary: when the character
// that starts before pos would run past it (split, or incomplete at the end), p is its start.
// Invalid bytes are taken one by one, so bad input cannot hold text back for ever.
size_t utf8_boundary_at_or_before(std::string_view text, size_t pos) {
  for (size_t back = 1; back <= 4 && back <= pos; ++back) {
    const auto c = static_cast<unsigned char>(text[pos - back]);
    if (is_continuation(c)) continue;
    const size_t lead = pos - back;
    return lead + utf8_sequence_bytes(c) > pos ? lead : pos;
  }
  return pos;
}

}  // namespace

std::vector<int32_t> min_tokens_forbidden_ids(const StopParams& params) {
  std::vector<int32_t> ids = params.stop_token_ids;
  if (!params.ignore_eos)
    ids.insert(ids.end(), params.eos_token_ids.begin(), params.eos_token_ids.end());
  return sorted_unique(std::move(ids));
}

StopChecker::StopChecker(const StopParams& params, int32_t max_output_tokens)
    : stop_ids_(sorted_unique(params.stop_token_ids)),
      include_stop_str_(params.include_stop_str_in_output),
      min_tokens_(params.min_tokens),
      max_tokens_(std::min(params.max_tokens, max_output_tokens)) {
  if (!params.ignore_eos) eos_ids_ = sorted_unique(params.eos_token_ids);
  for (const std::string& s : params.stop) {
    if (s.empty()) continue;  // validate() rejects it; an empty string would match everywhere
    stops_.push_back(s);
    max_stop_bytes_ = std::max(max_stop_bytes_, s.size());
  }
}

bool StopChecker::is_eos(int32_t id) const {
  return std::binary_search(eos_ids_.begin(), eos_ids_.end(), id);
}

bool StopChecker::is_stop_id(int32_t id) const {
  return std::binary_search(stop_ids_.begin(), stop_ids_.end(), id);
}

StopResult StopChecker::on_token(int32_t token_id, std::string_view new_text) {
  if (finished_) return final_;
  ++num_output_tokens_;
  const bool protected_token = num_output_tokens_ <= min_tokens_;

  if (!protected_token && (is_eos(token_id) || is_stop_id(token_id))) {
    if (include_stop_str_) {
      buf_.append(new_text);
      total_bytes_ += static_cast<int64_t>(new_text.size());
    }
    if (is_eos(token_id)) return finish(FinishReason::kStop, total_bytes_, "", -1);
    return finish(FinishReason::kStop, total_bytes_, std::to_string(token_id), token_id);
  }

  const int64_t old_total_bytes = total_bytes_;
  buf_.append(new_text);
  total_bytes_ += static_cast<int64_t>(new_text.size());

  if (!protected_token && !stops_.empty() && total_bytes_ > old_total_bytes) {
    const Match match = find_new_match(old_total_bytes);
    if (match.start >= 0) {
      return finish(FinishReason::kStop, include_stop_str_ ? match.end : match.start,
                    stops_[match.stop_index], -1);
    }
  }
  if (num_output_tokens_ >= max_tokens_) {
    return finish(FinishReason::kLength, total_bytes_, "", -1);
  }

  int64_t end_bytes = total_bytes_;
  if (!include_stop_str_) end_bytes -= static_cast<int64_t>(held_tail_bytes());
  const size_t rel =
      utf8_boundary_at_or_before(buf_, static_cast<size_t>(end_bytes - buf_start_bytes_));
  end_bytes = std::max(emitted_bytes_, buf_start_bytes_ + static_cast<int64_t>(rel));
  StopResult result;
  result.emit = emit_until(end_bytes);
  return result;
}

std::string StopChecker::flush() {
  if (finished_) return "";
  finished_ = true;
  final_ = StopResult{};
  final_.finished = true;
  return emit_until(total_bytes_);
}

StopChecker::Match StopChecker::find_new_match(int64_t old_total_bytes) const {
  Match best;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const std::string& stop = stops_[i];
    // Only occurrences ending after old_total_bytes are new; buf_ keeps enough text for them.
    const int64_t from =
        std::max(buf_start_bytes_, old_total_bytes - static_cast<int64_t>(stop.size()) + 1);
    const size_t pos = buf_.find(stop, static_cast<size_t>(from - buf_start_bytes_));
    if (pos == std::string::npos) continue;
    const int64_t start = buf_start_bytes_ + static_cast<int64_t>(pos);
    const int64_t end = start + static_cast<int64_t>(stop.size());
    if (best.start < 0 || end < best.end || (end == best.end && start < best.start)) {
      best = Match{start, end, i};
    }
  }
  return best;
}

size_t StopChecker::held_tail_bytes() const {
  const std::string_view text(buf_);
  const size_t unemitted = static_cast<size_t>(total_bytes_ - emitted_bytes_);
  const size_t longest = std::min(unemitted, max_stop_bytes_ > 0 ? max_stop_bytes_ - 1 : 0);
  for (size_t len = longest; len > 0; --len) {
    const std::string_view tail = text.substr(text.size() - len);
    for (const std::string& stop : stops_) {
      if (stop.size() > len && std::string_view(stop).starts_with(tail)) return len;
    }
  }
  return 0;
}

std::string StopChecker::emit_until(int64_t end_bytes) {
  end_bytes = std::clamp(end_bytes, emitted_bytes_, total_bytes_);
  std::string out = buf_.substr(static_cast<size_t>(emitted_bytes_ - buf_start_bytes_),
                                static_cast<size_t>(end_bytes - emitted_bytes_));
  emitted_bytes_ = end_bytes;
  // Keep what is unemitted and the tail a future match may start in; drop the rest.
  const int64_t context = max_stop_bytes_ > 0 ? static_cast<int64_t>(max_stop_bytes_) - 1 : 0;
  const int64_t keep_from =
      std::max(buf_start_bytes_, std::min(emitted_bytes_, total_bytes_ - context));
  buf_.erase(0, static_cast<size_t>(keep_from - buf_start_bytes_));
  buf_start_bytes_ = keep_from;
  return out;
}

StopResult StopChecker::finish(FinishReason reason, int64_t end_bytes, std::string stop_reason,
                               int32_t stop_token_id) {
  StopResult result;
  result.finished = true;
  result.reason = reason;
  result.emit = emit_until(end_bytes);
  result.stop_reason = std::move(stop_reason);
  result.stop_token_id = stop_token_id;
  // Text after the cut is never shown: forget it so num_held_bytes() reads 0.
  total_bytes_ = emitted_bytes_;
  buf_.clear();
  buf_start_bytes_ = total_bytes_;
  finished_ = true;
  final_ = result;
  final_.emit.clear();
  return result;
}

}  // namespace ls
