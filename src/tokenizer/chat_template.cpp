#include "tokenizer/chat_template.h"

#include <exception>
#include <memory>
#include <fstream>
#include <sstream>
#include <system_error>

#include "io/gguf.h"
#include "io/gguf_model.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/content_format.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/json_bridge.h"
#include "tokenizer/jinja/parser.h"

namespace ls {

ChatTemplate::ChatTemplate(std::shared_ptr<const jinja::TemplateAst> ast, std::string source,
                           const jinja::RenderLimits& limits)
    : ast_(std::move(ast)), source_(std::move(source)), limits_(limits) {}

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  return parse(source, jinja::RenderLimits{});
}

Result<ChatTemplate> ChatTemplate::parse(std::string_view source,
                                         const jinja::RenderLimits& limits) {
  try {
    LS_ASSIGN_OR_RETURN(jinja::TemplateAst ast, jinja::parse_template(source));
    return ChatTemplate(std::make_shared<const jinja::TemplateAst>(std::move(ast)),
                        std::string(source), limits);
  } catch (const std::exception& e) {  // allocation failure; nothing else throws
    return internal_error("parsing chat template: {}", e.what());
  }
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                         bool add_generation_prompt,
                                         const nlohmann::ordered_json& extra_context) const {
  if (!messages.is_array()) return invalid_argument("chat template: messages must be an array");
  if (!extra_context.is_null() && !extra_context.is_object()) {
    return invalid_argument("chat template: extra context must be an object");
  }
  try {
    // The variables HF's render_jinja_template always passes, then the caller's kwargs.
    jinja::ValueDict context;
    context.set("messages", jinja::value_from_json(messages));
    context.set("tools", jinja::Value::none());
    context.set("documents", jinja::Value::none());
    context.set("add_generation_prompt", jinja::Value(add_generation_prompt));
    if (extra_context.is_object()) {
      for (const auto& [key, value] : extra_context.items()) {
        if (key == "messages" || key == "add_generation_prompt") continue;
        context.set(key, jinja::value_from_json(value));
      }
    }
    jinja::Interpreter interpreter(*ast_, limits_);
    return interpreter.render(context);
  } catch (const std::exception& e) {
    return internal_error("rendering chat template: {}", e.what());
  }
}

ChatContentFormat ChatTemplate::content_format() const {
  return jinja::iterates_over_content_parts(*ast_) ? ChatContentFormat::kOpenAi
                                                   : ChatContentFormat::kString;
}

Result<nlohmann::ordered_json> normalize_message_content(const nlohmann::ordered_json& messages,
                                                         ChatContentFormat format) {
  if (!messages.is_array()) return invalid_argument("messages must be an array");
  nlohmann::ordered_json out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    auto& message = out[i];
    if (!message.is_object()) return invalid_argument("messages[{}] must be an object", i);
    const auto it = message.find("content");
    if (it == message.end() || it->is_null()) continue;
    if (it->is_string()) {
      if (format == ChatContentFormat::kOpenAi) {
        *it = nlohmann::ordered_json::array({{{"type", "text"}, {"text", it->get<std::string>()}}});
      }
      continue;
    }
    if (!it->is_array()) {
      return invalid_argument("messages[{}].content must be a string or a list of parts", i);
    }
    std::string joined;
    for (size_t j = 0; j < it->size(); ++j) {
      const auto& part = (*it)[j];
      const auto type = part.is_object() ? part.find("type") : part.end();
      const auto text = part.is_object() ? part.find("text") : part.end();
      if (type == part.end() || !type->is_string() || type->get<std::string>() != "text" ||
          text == part.end() || !text->is_string()) {
        return invalid_argument(
            "messages[{}].content[{}]: only {{\"type\": \"text\", \"text\": ...}} parts are "
            "supported",
            i, j);
      }
      if (j > 0) joined += '\n';
      joined += text->get<std::string>();
    }
    if (format == ChatContentFormat::kString) *it = std::move(joined);
  }
  return out;
}

namespace {

Result<std::string> read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open {}", path.string());
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return io_error("cannot read {}", path.string());
  return buf.str();
}

}  // namespace

Result<std::optional<std::string>> load_chat_template(const std::filesystem::path& model_dir) {
  LS_ASSIGN_OR_RETURN(std::optional<std::filesystem::path> gguf, find_gguf_model(model_dir));
  if (gguf) {  // GGUF: tokenizer.chat_template in the metadata
    LS_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(*gguf));
    return file->opt_string("tokenizer.chat_template");
  }
  std::error_code ec;
  const auto jinja_path = model_dir / "chat_template.jinja";
  if (std::filesystem::is_regular_file(jinja_path, ec)) {
    LS_ASSIGN_OR_RETURN(std::string text, read_text_file(jinja_path));
    return std::optional<std::string>(std::move(text));
  }
  const auto config_path = model_dir / "tokenizer_config.json";
  if (!std::filesystem::is_regular_file(config_path, ec)) return std::optional<std::string>();
  LS_ASSIGN_OR_RETURN(std::string text, read_text_file(config_path));
  const auto config = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return data_loss("{} is not a JSON object", config_path.string());
  }
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (!it->is_array()) {
    return data_loss("{}: chat_template must be a string or a list of {{name, template}}",
                     config_path.string());
  }
  std::string names;
  for (const auto& entry : *it) {
    if (!entry.is_object()) continue;
    const auto name = entry.find("name");
    const auto tmpl = entry.find("template");
    if (name == entry.end() || tmpl == entry.end() || !name->is_string() || !tmpl->is_string()) {
      continue;
    }
    if (name->get<std::string>() == "default") {
      return std::optional<std::string>(tmpl->get<std::string>());
    }
    names += (names.empty() ? "" : ", ") + name->get<std::string>();
  }
  return data_loss("{}: no chat template named 'default' (found: {})", config_path.string(),
                   names.empty() ? "none" : names);
}

}  // namespace ls
