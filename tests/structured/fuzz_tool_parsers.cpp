// libFuzzer: the tool-call parsers. Input: a parser byte, then model text. Checks, for every
// parser: no crash; every non-final parse of a prefix is a prefix of the parse of the longer text
// (content, each call's name once complete, each call's arguments), which is what streaming
// relies on; and streamed deltas (split at a fuzzer-chosen size) add up to the final parse when
// it has calls.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "structured/tool_call_parser.h"

using namespace ls::grammar;

namespace {

bool is_prefix(const std::string& a, const std::string& b) { return b.compare(0, a.size(), a) == 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  std::unique_ptr<ToolCallParser> parser;
  switch (data[0] % 5) {
    case 0: parser = make_tool_call_parser("hermes").value(); break;
    case 1: parser = make_tool_call_parser("llama3_json").value(); break;
    case 2: parser = make_tool_call_parser("mistral").value(); break;
    case 3: parser = make_required_tool_parser(); break;
    default: parser = make_named_tool_parser("f"); break;
  }
  const size_t chunk = 1 + data[1] % 8;
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);

  const ToolParse full = parser->parse(text, false);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const ToolParse part = parser->parse(std::string_view(text).substr(0, cut), false);
    if (!is_prefix(part.content, full.content)) __builtin_trap();
    for (size_t i = 0; i < part.calls.size() && i < full.calls.size(); ++i) {
      if (part.calls[i].name_complete && part.calls[i].name != full.calls[i].name) __builtin_trap();
      if (!is_prefix(part.calls[i].arguments, full.calls[i].arguments)) __builtin_trap();
    }
    if (part.calls.size() > full.calls.size()) __builtin_trap();
  }

  ToolCallStreamer streamer(*parser);
  std::string content;
  std::vector<std::string> args;
  for (size_t pos = 0;; pos += chunk) {
    const bool final = pos + chunk >= text.size();
    const auto d = streamer.push(std::string_view(text).substr(std::min(pos, text.size()), chunk), final);
    content += d.content;
    for (const auto& c : d.calls) {
      if (c.first) args.emplace_back();
      if (static_cast<size_t>(c.index) >= args.size()) __builtin_trap();
      args[static_cast<size_t>(c.index)] += c.arguments;
    }
    if (final) break;
  }
  const ToolParse last = parser->parse(text, true);
  if (!last.calls.empty()) {
    if (content != last.content || args.size() != last.calls.size()) __builtin_trap();
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] != last.calls[i].arguments) __builtin_trap();
    }
  }
  return 0;
}
