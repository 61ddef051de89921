#include "tokenizer/pattern.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace ls::tok {

Pattern Pattern::literal(std::string text) {
  Pattern p;
  p.literal_ = std::move(text);
  return p;
}

Result<Pattern> Pattern::regex(std::string_view onig_pattern) {
  LS_ASSIGN_OR_RETURN(auto re, Regex::compile(onig_pattern));
  Pattern p;
  p.regex_ = std::move(re);
  return p;
}

Result<Pattern> Pattern::from_json(const nlohmann::json& j, std::string_view where) {
  if (j.is_object() && j.size() == 1) {
    if (auto it = j.find("String"); it != j.end() && it->is_string()) {
      return literal(it->get<std::string>());
    }
    if (auto it = j.find("Regex"); it != j.end() && it->is_string()) {
      auto p = regex(it->get<std::string>());
      if (!p.ok()) return p.status().with_context(where);
      return p;
    }
  }
  return invalid_argument("{}: expected {{\"String\": ...}} or {{\"Regex\": ...}}", where);
}

void Pattern::find_matches(std::string_view text, std::vector<MatchPiece>& out) const {
  out.clear();
  if (text.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  size_t prev = 0;
  auto add_match = [&](size_t s, size_t e) {
    if (prev != s) out.push_back({prev, s, false});
    out.push_back({s, e, true});
    prev = e;
  };
  if (regex_ != nullptr) {
    thread_local std::vector<Span> spans;
    spans.clear();
    regex_->find_all(text, spans);
    for (const Span& m : spans) add_match(m.start, m.end);
    // The buffer is per thread (one per HTTP worker in the server): capacity grown for one huge
    // text would stay allocated for the thread's life, so only a small one is kept.
    constexpr size_t kKeptSpans = 4096;
    if (spans.capacity() > kKeptSpans) std::vector<Span>().swap(spans);
  } else if (literal_.empty()) {
    // HF compiles a literal into an escaped regex, and the empty regex matches at every
    // character boundary.
    size_t i = 0;
    while (true) {
      add_match(i, i);
      if (i >= text.size()) break;
      i += utf8_len_of_lead(static_cast<unsigned char>(text[i]));
    }
  } else {
    size_t pos = text.find(literal_);
    while (pos != std::string_view::npos) {
      add_match(pos, pos + literal_.size());
      pos = text.find(literal_, pos + literal_.size());
    }
  }
  if (prev != text.size()) out.push_back({prev, text.size(), false});
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<MatchPiece> pieces;
  find_matches(text, pieces);
  std::string out;
  out.reserve(text.size());
  for (const MatchPiece& p : pieces) {
    if (p.is_match) {
      out.append(content);
    } else {
      out.append(text.substr(p.start, p.end - p.start));
    }
  }
  return out;
}

Result<SplitBehavior> parse_split_behavior(std::string_view name) {
  if (name == "Removed" || name == "removed") return SplitBehavior::kRemoved;
  if (name == "Isolated" || name == "isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious" || name == "merged_with_previous") {
    return SplitBehavior::kMergedWithPrevious;
  }
  if (name == "MergedWithNext" || name == "merged_with_next") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous" || name == "contiguous") return SplitBehavior::kContiguous;
  return invalid_argument("unknown split behavior '{}'", name);
}

void apply_split_behavior(std::vector<MatchPiece>& pieces, SplitBehavior behavior, bool invert,
                          std::vector<Span>& out) {
  out.clear();
  if (invert) {
    for (MatchPiece& p : pieces) p.is_match = !p.is_match;
  }
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const MatchPiece& p : pieces) out.push_back({p.start, p.end});
      return;
    case SplitBehavior::kRemoved:
      for (const MatchPiece& p : pieces) {
        if (!p.is_match) out.push_back({p.start, p.end});
      }
      return;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const MatchPiece& p : pieces) {
        if (p.is_match == previous_match && !out.empty()) {
          out.back().end = p.end;
        } else {
          out.push_back({p.start, p.end});
        }
        previous_match = p.is_match;
      }
      return;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const MatchPiece& p : pieces) {
        if (p.is_match && !previous_match && !out.empty()) {
          out.back().end = p.end;
        } else {
          out.push_back({p.start, p.end});
        }
        previous_match = p.is_match;
      }
      return;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t k = pieces.size(); k-- > 0;) {
        const MatchPiece& p = pieces[k];
        if (p.is_match && !previous_match && !out.empty()) {
          out.back().start = p.start;
        } else {
          out.push_back({p.start, p.end});
        }
        previous_match = p.is_match;
      }
      std::reverse(out.begin(), out.end());
      return;
    }
  }
}

}  // namespace ls::tok
