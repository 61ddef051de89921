// libFuzzer target: arbitrary bytes as a chat template source, optionally followed by
// "\n#messages#\n" and a JSON message list. Parsing and rendering must end in a value or an
// error (never a crash, a leak, undefined behaviour, or a render that runs past its limits).

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "tokenizer/chat_template.h"

namespace {

const nlohmann::ordered_json& default_messages() {
  static const auto* messages = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
    {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello", "tool_calls": [
      {"id": "call00001", "type": "function",
       "function": {"name": "get_weather", "arguments": {"city": "Paris", "n": [1, 2.5, null]}}}]},
    {"role": "tool", "tool_call_id": "call00001", "content": "{\"t\": 21}"},
    {"role": "user", "content": "Thanks"}])"));
  return *messages;
}

const nlohmann::ordered_json& default_context() {
  static const auto* context = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false, "date_string": "01 Jan 2025",
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})"));
  return *context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSeparator = "\n#messages#\n";
  std::string_view source = input;
  nlohmann::ordered_json messages = default_messages();
  if (const size_t split = input.find(kSeparator); split != std::string_view::npos) {
    source = input.substr(0, split);
    auto parsed = nlohmann::ordered_json::parse(input.substr(split + kSeparator.size()), nullptr,
                                                /*allow_exceptions=*/false);
    if (parsed.is_array()) messages = std::move(parsed);
  }
  ls::jinja::RenderLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_container_items = 100'000;
  limits.max_call_depth = 32;
  limits.max_eval_depth = 256;
  auto tmpl = ls::ChatTemplate::parse(source, limits);
  if (!tmpl.ok()) return 0;
  auto with_prompt = tmpl->render(messages, true, default_context());
  auto without_prompt = tmpl->render(messages, false, nullptr);
  (void)with_prompt;
  (void)without_prompt;
  return 0;
}
