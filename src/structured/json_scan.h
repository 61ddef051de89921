#pragma once
// Finding where JSON values start and end in text that may still be growing (a model's output as
// it streams), without parsing them: tool-call parsers use it to cut names and argument text out
// of a call before the call is complete.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ls::grammar {

enum class ScanKind { kComplete, kIncomplete, kInvalid };

struct ScanResult {
  ScanKind kind = ScanKind::kInvalid;
  size_t begin = 0;  // first byte of the value (after leading whitespace)
  size_t end = 0;    // one past its last byte; text.size() when incomplete; the offending
                     // byte when invalid
};

size_t skip_json_ws(std::string_view text, size_t pos);

// One JSON value starting at or after `pos` (whitespace skipped). Brackets and strings are
// matched; a complete value is then checked with a real JSON parser (kInvalid if it fails).
// A number or literal that reaches the end of the text is incomplete (it may go on).
ScanResult scan_json_value(std::string_view text, size_t pos);

// A tool call written as a JSON object {"name": "...", "<args key>": value, ...}, as far as the
// text goes. On kInvalid the fields found before the fault are still set. Argument text is the raw bytes of the value: while the value is unfinished, it
// grows as the text grows, so every partial result is a prefix of the final one.
struct CallScan {
  ScanKind kind = ScanKind::kInvalid;       // of the whole object
  size_t end = 0;                           // one past the object's '}' when complete
  std::optional<std::string> name;          // once its string is complete
  std::optional<std::string> arguments;     // raw value text so far (absent: key not seen yet)
  bool arguments_complete = false;
};

// `args_keys`: keys whose value is the arguments ("arguments", "parameters").
CallScan scan_call_object(std::string_view text, size_t pos,
                          const std::vector<std::string_view>& args_keys);

// The decoded value of a complete JSON string token, or nullopt.
std::optional<std::string> decode_json_string(std::string_view token);

}  // namespace ls::grammar
