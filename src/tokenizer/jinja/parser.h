#pragma once
// jinja2's recursive-descent parser (jinja2/parser.py), statement by statement and with the
// same operator precedence, so that templates parse exactly as Hugging Face parses them. Filter
// and test names are resolved here: an unknown one is a syntax error, as jinja2's compile-time
// TemplateAssertionError. Unsupported constructs (extends, include, import, recursive loops)
// are errors too, never silently ignored.

#include <string_view>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"

namespace ls::jinja {

// Errors: "syntax error at line L, column C: <jinja2's message>".
Result<TemplateAst> parse_template(std::string_view source);

}  // namespace ls::jinja
