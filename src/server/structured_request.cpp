#include "server/structured_request.h"

#include <optional>
#include <utility>
#include <vector>

#include "structured/grammar_constraint.h"
#include "structured/tool_call_parser.h"

namespace ls {

namespace {

using grammar::ConstraintKind;
using grammar::ConstraintSpec;

// A schema given as an object or as a JSON string holding one (vLLM accepts both).
Result<std::string> schema_text(const Json& value, std::string_view field) {
  if (value.is_object() || value.is_boolean()) return value.dump();
  if (value.is_string()) {
    Json parsed = Json::parse(value.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean())) {
      return invalid_argument("'{}' is not a valid JSON schema", field);
    }
    return parsed.dump();
  }
  return invalid_argument("'{}' must be a JSON schema object", field);
}

Result<std::vector<std::string>> string_list(const Json& value, std::string_view field) {
  if (!value.is_array() || value.empty()) {
    return invalid_argument("'{}' must be a non-empty list of strings", field);
  }
  std::vector<std::string> out;
  for (const Json& v : value) {
    if (!v.is_string()) return invalid_argument("'{}' must be a non-empty list of strings", field);
    out.push_back(v.get<std::string>());
  }
  return out;
}

// Collects every constraint the body asks for.
Status read_constraints(const Json& body, std::vector<ConstraintSpec>* specs) {
  if (const Json* rf = find_field(body, "response_format"); rf != nullptr && !rf->is_null()) {
    if (!rf->is_object()) return invalid_argument("'response_format' must be an object");
    const Json* type = find_field(*rf, "type");
    if (type == nullptr || !type->is_string()) {
      return invalid_argument("'response_format.type' must be a string");
    }
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      specs->push_back({ConstraintKind::kJsonObject, {}, {}});
    } else if (t == "json_schema") {
      const Json* js = find_field(*rf, "json_schema");
      if (js == nullptr || !js->is_object()) {
        return invalid_argument("response_format json_schema needs a 'json_schema' object");
      }
      const Json* schema = find_field(*js, "schema");
      if (schema == nullptr) schema = find_field(*js, "json_schema");  // older clients
      if (schema == nullptr) {
        return invalid_argument("'response_format.json_schema.schema' is required");
      }
      LS_ASSIGN_OR_RETURN(std::string text, schema_text(*schema, "response_format.json_schema.schema"));
      specs->push_back({ConstraintKind::kJsonSchema, std::move(text), {}});
    } else if (t != "text") {
      return invalid_argument(
          "'response_format.type' must be 'text', 'json_object' or 'json_schema', got '{}'", t);
    }
  }
  if (const Json* v = find_field(body, "guided_json"); v != nullptr && !v->is_null()) {
    LS_ASSIGN_OR_RETURN(std::string text, schema_text(*v, "guided_json"));
    specs->push_back({ConstraintKind::kJsonSchema, std::move(text), {}});
  }
  if (const Json* v = find_field(body, "guided_regex"); v != nullptr && !v->is_null()) {
    if (!v->is_string()) return invalid_argument("'guided_regex' must be a string");
    specs->push_back({ConstraintKind::kRegex, v->get<std::string>(), {}});
  }
  if (const Json* v = find_field(body, "guided_choice"); v != nullptr && !v->is_null()) {
    LS_ASSIGN_OR_RETURN(std::vector<std::string> choices, string_list(*v, "guided_choice"));
    specs->push_back({ConstraintKind::kChoice, {}, std::move(choices)});
  }
  if (const Json* v = find_field(body, "guided_grammar"); v != nullptr && !v->is_null()) {
    return invalid_argument("'guided_grammar' (EBNF / Lark grammars) is not supported; use "
                            "guided_json, guided_regex or guided_choice");
  }
  if (const Json* so = find_field(body, "structured_outputs"); so != nullptr && !so->is_null()) {
    if (!so->is_object()) return invalid_argument("'structured_outputs' must be an object");
    for (auto it = so->begin(); it != so->end(); ++it) {
      const std::string& key = it.key();
      const Json& v = it.value();
      if (v.is_null()) continue;
      if (key == "json") {
        LS_ASSIGN_OR_RETURN(std::string text, schema_text(v, "structured_outputs.json"));
        specs->push_back({ConstraintKind::kJsonSchema, std::move(text), {}});
      } else if (key == "regex") {
        if (!v.is_string()) return invalid_argument("'structured_outputs.regex' must be a string");
        specs->push_back({ConstraintKind::kRegex, v.get<std::string>(), {}});
      } else if (key == "choice") {
        LS_ASSIGN_OR_RETURN(std::vector<std::string> choices,
                            string_list(v, "structured_outputs.choice"));
        specs->push_back({ConstraintKind::kChoice, {}, std::move(choices)});
      } else if (key == "json_object") {
        if (!v.is_boolean()) return invalid_argument("'structured_outputs.json_object' must be a boolean");
        if (v.get<bool>()) specs->push_back({ConstraintKind::kJsonObject, {}, {}});
      } else if (key == "grammar" || key == "structural_tag") {
        return invalid_argument("'structured_outputs.{}' is not supported; use json, regex or "
                                "choice", key);
      } else if (key != "disable_any_whitespace" && key != "disable_fallback" &&
                 key != "disable_additional_properties" && key != "whitespace_pattern" &&
                 key != "backend") {
        return invalid_argument("unknown field 'structured_outputs.{}'", key);
      }
    }
  }
  return Status::ok_status();
}

// The tool named `name` in `tools`, or null.
const Json* find_tool(const Json& tools, const std::string& name) {
  for (const Json& t : tools) {
    const Json* fn = t.is_object() ? find_field(t, "function") : nullptr;
    const Json* n = fn != nullptr && fn->is_object() ? find_field(*fn, "name") : nullptr;
    if (n != nullptr && n->is_string() && n->get<std::string>() == name) return fn;
  }
  return nullptr;
}

Json parameters_of(const Json& function) {
  const Json* p = find_field(function, "parameters");
  if (p == nullptr || p->is_null()) return Json{{"type", "object"}};
  return *p;
}

// vLLM's schema for tool_choice "required": a non-empty list of {"name", "parameters"}; with
// parallel_tool_calls false, a list of one (OpenAI's meaning of the flag).
Json required_schema(const Json& tools, bool parallel) {
  Json any_of = Json::array();
  for (const Json& t : tools) {
    const Json& fn = t["function"];
    any_of.push_back(Json{{"type", "object"},
                          {"properties",
                           {{"name", {{"type", "string"}, {"enum", Json::array({fn["name"]})}}},
                            {"parameters", parameters_of(fn)}}},
                          {"required", Json::array({"name", "parameters"})}});
  }
  Json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any_of}}}};
  if (!parallel) schema["maxItems"] = 1;
  return schema;
}

Status validate_tools(const Json& tools) {
  if (!tools.is_array()) return invalid_argument("'tools' must be a list");
  for (const Json& t : tools) {
    const Json* fn = t.is_object() ? find_field(t, "function") : nullptr;
    const Json* name = fn != nullptr && fn->is_object() ? find_field(*fn, "name") : nullptr;
    if (name == nullptr || !name->is_string()) {
      return invalid_argument("each tool needs 'function' with a string 'name'");
    }
  }
  return Status::ok_status();
}

}  // namespace

Status read_structured_request(const Json& body, const RequestContext& ctx,
                               ParsedRequest* request) {
  std::vector<ConstraintSpec> specs;
  LS_RETURN_IF_ERROR(read_constraints(body, &specs));

  const Json* tools = find_field(body, "tools");
  if (tools != nullptr && tools->is_null()) tools = nullptr;
  if (tools != nullptr) LS_RETURN_IF_ERROR(validate_tools(*tools));
  const Json* choice = find_field(body, "tool_choice");
  if (choice != nullptr && choice->is_null()) choice = nullptr;
  std::string mode = "none";
  std::string function_name;
  if (choice != nullptr) {
    if (choice->is_string()) {
      mode = choice->get<std::string>();
      if (mode != "none" && mode != "auto" && mode != "required") {
        return invalid_argument("'tool_choice' must be 'none', 'auto', 'required' or a named "
                                "function, got '{}'", mode);
      }
    } else if (choice->is_object()) {
      const Json* fn = find_field(*choice, "function");
      const Json* name = fn != nullptr && fn->is_object() ? find_field(*fn, "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        return invalid_argument("a named 'tool_choice' needs 'function': {{'name': ...}}");
      }
      mode = "named";
      function_name = name->get<std::string>();
    } else {
      return invalid_argument("'tool_choice' must be a string or an object");
    }
    if (mode != "none" && tools == nullptr) {
      return invalid_argument("When using `tool_choice`, `tools` must be set.");
    }
  } else if (tools != nullptr && ctx.enable_auto_tool_choice) {
    mode = "auto";  // vLLM's default when tools are given
  }
  if (mode != "none" && request->kind != ApiKind::kChat) {
    return invalid_argument("tools are only supported by /v1/chat/completions");
  }
  if ((mode == "required" || mode == "named") && !specs.empty()) {
    return invalid_argument("tool_choice 'required' or a named function cannot be combined "
                            "with response_format or guided decoding fields");
  }
  if (mode == "auto") {
    if (!ctx.enable_auto_tool_choice || ctx.tool_call_parser.empty()) {
      return invalid_argument(
          "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
    }
    LS_ASSIGN_OR_RETURN(std::unique_ptr<grammar::ToolCallParser> parser,
                        grammar::make_tool_call_parser(ctx.tool_call_parser));
    request->tool_parser = std::move(parser);
    request->tool_calls_finish = true;
    request->stop.skip_special_tokens = false;
  } else if (mode == "required") {
    bool parallel = true;
    LS_RETURN_IF_ERROR(read_bool(body, "parallel_tool_calls", &parallel));
    specs.push_back({ConstraintKind::kJsonSchema, required_schema(*tools, parallel).dump(), {}});
    request->tool_parser = grammar::make_required_tool_parser();
    request->tool_calls_finish = true;
  } else if (mode == "named") {
    const Json* fn = find_tool(*tools, function_name);
    if (fn == nullptr) {
      return invalid_argument("tool_choice names '{}', which is not in 'tools'", function_name);
    }
    specs.push_back({ConstraintKind::kJsonSchema, parameters_of(*fn).dump(), {}});
    request->tool_parser = grammar::make_named_tool_parser(function_name);
  }

  if (specs.empty()) return Status::ok_status();
  if (const Json* so = find_field(body, "structured_outputs"); so != nullptr && so->is_object()) {
    bool disable = false;
    LS_RETURN_IF_ERROR(read_bool(*so, "disable_any_whitespace", &disable));
    for (ConstraintSpec& spec : specs) spec.any_whitespace = !disable;
  }
  if (specs.size() > 1) {
    return invalid_argument("only one kind of structured output may be given (response_format, "
                            "guided_json, guided_regex, guided_choice, structured_outputs)");
  }
  if (ctx.grammars == nullptr) return invalid_argument("structured outputs are not available");
  LS_ASSIGN_OR_RETURN(std::shared_ptr<grammar::CompiledGrammar> compiled,
                      ctx.grammars->get(specs[0]));
  std::vector<int32_t> end_ids = request->stop.eos_token_ids;
  request->constraint = [compiled, end_ids]() -> std::unique_ptr<TokenConstraint> {
    return std::make_unique<grammar::GrammarConstraint>(compiled, end_ids);
  };
  return Status::ok_status();
}

}  // namespace ls
