#pragma once
// JSON Schema -> Grammar, for response_format json_schema, guided_json and tool calls.
//
// Output shape: JSON text with whitespace allowed where JSON allows it, at most
// kMaxJsonWhitespace characters per gap (so a model cannot stall the output on whitespace), and
// object properties in the order the schema lists them (required ones always, optional ones
// possibly skipped). Supported keywords: type (also a list), enum, const, properties, required,
// additionalProperties (false when properties are given and it is absent, as xgrammar's strict
// mode), items, prefixItems, minItems, maxItems, minLength, maxLength, pattern (regex over
// characters that need no JSON escape), anyOf, oneOf, allOf of one schema, $ref to "#" and
// "#/$defs/..." / "#/definitions/..." (recursion allowed), nullable. Integers are at most 16
// digits, fractions 16 and exponents 2 (every number fits a double). Ignored (not enforced): format, minimum/maximum,
// multipleOf, uniqueItems, pattern-less string lengths beyond kMaxBoundedRepeat. Anything else
// that would change which documents are valid is refused with a clear error.

#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "structured/grammar.h"

namespace ls::grammar {

inline constexpr int32_t kMaxJsonWhitespace = 20;
inline constexpr int32_t kMaxBoundedRepeat = 4096;

// Errors: kInvalidArgument naming the unsupported or malformed part.
// any_whitespace false: no whitespace but the separators ", " and ": " (vLLM's
// disable_any_whitespace), so small models cannot spend their tokens on blank lines.
Result<Grammar> json_schema_grammar(const nlohmann::ordered_json& schema,
                                    bool any_whitespace = true);
// Any JSON object (response_format json_object).
Result<Grammar> json_object_grammar(bool any_whitespace = true);

}  // namespace ls::grammar
