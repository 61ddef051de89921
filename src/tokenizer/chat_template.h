#pragma once
// Chat templates: the Jinja template a checkpoint ships (tokenizer_config.json "chat_template"
// or chat_template.jinja) turned into the prompt text, rendered as Hugging Face's
// apply_chat_template(tokenize=False) renders it: a sandboxed jinja2 with trim_blocks,
// lstrip_blocks and loop controls, HF's tojson, raise_exception() and strftime_now().
// The engine (tokenizer/jinja/) covers what the Llama-3, Mistral and Qwen templates use; see
// ../../tests/fixtures/chat_templates/ for the templates it is checked against byte for byte.
//
// The rendered text already contains the template's BOS; tokenize it without adding special
// tokens (as vLLM does) or the prompt gets a double BOS.

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizer/jinja/limits.h"

namespace ls {

namespace jinja {
struct TemplateAst;
}

// How a template reads message content (vLLM's chat_template_content_format "auto").
enum class ChatContentFormat {
  kString,  // a string: list-form content should be joined to text first
  kOpenAi,  // OpenAI's list of {type, text} parts: the template loops over it
};

class ChatTemplate {
 public:
  // Syntax errors (and unknown filters / tests, unsupported tags) come back as
  // kInvalidArgument "syntax error at line L, column C: ...".
  static Result<ChatTemplate> parse(std::string_view source);
  // Same, with tighter bounds on each render (the fuzzer uses this).
  static Result<ChatTemplate> parse(std::string_view source, const jinja::RenderLimits& limits);

  // messages: a JSON array as OpenAI requests send it ([{role, content}], content a string or a
  // list of {type: "text", text} parts; tool_calls, tool_call_id, reasoning_content, ... are
  // passed through untouched). extra_context: an object (or null) merged at the top level, as
  // HF passes kwargs: bos_token, eos_token, tools, documents and the request's
  // chat_template_kwargs (e.g. enable_thinking). `tools` and `documents` are None unless given;
  // `messages` and `add_generation_prompt` always come from the arguments.
  //
  // Errors: kInvalidArgument. A template's raise_exception(msg) yields exactly msg (e.g.
  // "Conversation roles must alternate user/assistant/user/assistant/..."), which a server can
  // return to the client as a 400; other errors name the template line and column.
  // kResourceExhausted when a render exceeds its limits. Thread-safe: renders share nothing
  // mutable.
  Result<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& extra_context) const;

  const std::string& source() const { return source_; }

  // Detected as vLLM detects it: kOpenAi when the template loops over a message's content.
  ChatContentFormat content_format() const;

 private:
  ChatTemplate(std::shared_ptr<const jinja::TemplateAst> ast, std::string source,
               const jinja::RenderLimits& limits);

  std::shared_ptr<const jinja::TemplateAst> ast_;
  std::string source_;
  jinja::RenderLimits limits_;
};

// Rewrites each message's content for a template's format, as vLLM does before rendering:
// kString joins the "text" parts of list content with "\n"; kOpenAi wraps string content as
// [{"type": "text", "text": ...}]. Null or absent content and all other fields pass through.
// Errors (kInvalidArgument): messages not an array, a message not an object, a content part
// that is not text (this server serves text models), content of another type.
Result<nlohmann::ordered_json> normalize_message_content(const nlohmann::ordered_json& messages,
                                                         ChatContentFormat format);

// The model's chat template: chat_template.jinja in model_dir when present (Hugging Face
// prefers it), else tokenizer_config.json "chat_template" — a string, or a list of
// {name, template} from which the one named "default" is taken. nullopt when the model has
// none. Errors: kIoError (unreadable file), kDataLoss (malformed tokenizer_config.json or a
// template list without "default").
Result<std::optional<std::string>> load_chat_template(const std::filesystem::path& model_dir);

}  // namespace ls
