#pragma once
// Regular expression -> Grammar (guided_regex, structured_outputs.regex, JSON-schema pattern).
//
// The whole output must match (as vLLM's guided_regex). Syntax: literals (UTF-8), ".", classes
// [...] with ranges and negation, \d \w \s \D \W \S, escapes \n \t \r \f \v \xHH \uHHHH and
// escaped punctuation, groups ( ), (?: ), (?P<name> ) and (?<name> ), alternation, quantifiers
// * + ? {n} {n,} {n,m} (a trailing ? for laziness is accepted and means nothing here), ^ at the
// start and $ at the end. Classes and "." work on code points (compiled to UTF-8 byte
// sequences). Backreferences, lookaround and word boundaries are refused.

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "structured/grammar.h"

namespace ls::grammar {

// Adds the regex to `b` and returns its symbol. `forbidden` (may be null) removes bytes from
// every class, "." and literal: JSON string patterns pass the bytes that would need escaping.
Result<Sym> add_regex(GrammarBuilder& b, std::string_view pattern, const ByteSet* forbidden);
Result<Grammar> regex_grammar(std::string_view pattern);
// One of the choices, exactly (guided_choice).
Result<Grammar> choice_grammar(const std::vector<std::string>& choices);

}  // namespace ls::grammar
