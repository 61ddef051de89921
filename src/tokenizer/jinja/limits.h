#pragma once
// Bounds on one render, so that a hostile or broken template (or request) ends in an error
// instead of exhausting memory, stack or time. The defaults are far above what real chat
// templates need for the longest conversations a server accepts.

#include <cstdint>

namespace ls::jinja {

struct RenderLimits {
  int64_t max_steps = 50'000'000;           // statements + expressions + loop iterations
  int64_t max_output_bytes = 256LL << 20;   // the rendered text and any string built on the way
  int64_t max_container_items = 4'000'000;  // items of one list built by the template
  int max_call_depth = 64;                  // nested macro / caller() calls
  int max_eval_depth = 512;                 // nested evaluation (bounds the C++ stack)
};

// Nesting the parser accepts (blocks inside blocks, parentheses inside parentheses).
inline constexpr int kMaxParseDepth = 128;
// Longest template source accepted.
inline constexpr int64_t kMaxSourceBytes = 4LL << 20;

}  // namespace ls::jinja
