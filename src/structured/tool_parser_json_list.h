#pragma once
// Shared by the mistral and "required" parsers: a JSON list of call objects,
// [{"name": N, "<args key>": A}, ...], scanned as far as the text goes.

#include <cstddef>
#include <string_view>

#include "structured/tool_call_parser.h"

namespace ls::grammar {

// Appends the calls of the list starting at `pos` to out.calls. Returns false when the list is
// not valid JSON of that shape (incomplete is fine); `complete` says whether its ']' was seen.
bool scan_call_list(std::string_view text, size_t pos, ToolParse& out, bool* complete);

}  // namespace ls::grammar
