#pragma once
// The request fields that constrain or parse the output, read the way vLLM reads them:
//   response_format {"type": "text" | "json_object" | "json_schema", "json_schema": {"schema"}},
//   guided_json / guided_regex / guided_choice (vLLM's older fields), and
//   structured_outputs {"json" | "regex" | "choice" | "json_object"} (their current form);
//   tools + tool_choice ("none", "auto", "required", or {"type": "function", "function":
//   {"name"}}). "required" and a named function are enforced by constrained decoding (a JSON
//   list of {"name", "parameters"} calls / the function's parameters); "auto" parses the
//   model's text with the server's --tool-call-parser.
// At most one constraint per request (400 otherwise).

#include <memory>
#include <string>

#include "server/json_fields.h"
#include "server/openai_request.h"

namespace ls {

// Sets request->constraint, request->tool_parser and request->tool_calls_finish from the body;
// for tool parsing also keeps special tokens in the text (tool-call markers often are special),
// as vLLM's parsers do. Errors: kInvalidArgument (→ 400).
Status read_structured_request(const Json& body, const RequestContext& ctx, ParsedRequest* request);

}  // namespace ls
