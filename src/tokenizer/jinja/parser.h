#pragma once
// jinja2's recursive-descent parser (jinja2/parser.py), statement by statement and with the
// same operator precedence, so that templates parse exactly as Hugging Face parses them. Filter
// and test names are resolved here, but an unknown one fails only if it runs: jinja2 itself
// defers the check inside if-blocks and drops code that constant folding removes, and a
// template that names a filter this engine lacks in a branch a request never takes should still
// serve. Unsupported statements (extends, include, import, recursive loops) are syntax errors.

#include <string_view>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"

namespace ls::jinja {

// Errors: "syntax error at line L, column C: <jinja2's message>".
Result<TemplateAst> parse_template(std::string_view source);

}  // namespace ls::jinja
