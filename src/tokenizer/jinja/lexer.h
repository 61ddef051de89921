#pragma once
// The jinja2 lexer as Hugging Face configures it: {{ }}, {% %}, {# #}, {% raw %}, `-` and `+`
// whitespace control, trim_blocks (drop the newline after a block or comment tag), lstrip_blocks
// (drop the indentation before one), newlines normalized to \n and one trailing newline dropped
// (keep_trailing_newline=False). Whitespace handling follows jinja2's Lexer.tokeniter step by
// step, since chat templates depend on every byte of it.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ls::jinja {

enum class TokenType : uint8_t {
  kData,  // template text between tags, already whitespace-trimmed
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,   // text: the decoded literal
  kInteger,  // int_value
  kFloat,    // float_value
  kAdd,
  kSub,
  kDiv,
  kFloorDiv,
  kMul,
  kMod,
  kPow,
  kTilde,
  kLBracket,
  kRBracket,
  kLParen,
  kRParen,
  kLBrace,
  kRBrace,
  kEq,
  kNe,
  kGt,
  kGe,
  kLt,
  kLe,
  kAssign,
  kDot,
  kColon,
  kPipe,
  kComma,
  kSemicolon,
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  uint32_t offset = 0;  // byte offset in the normalized source, for line:column in errors
  std::string text;     // data, name or decoded string literal
  int64_t int_value = 0;
  double float_value = 0.0;
};

// How a token reads in a syntax error: "'endfor'", "end of print statement", ...
std::string describe_token(const Token& token);

// Line and column (1-based; the column counts code points) of a byte offset.
struct SourcePosition {
  int line = 1;
  int column = 1;
};
SourcePosition position_of(std::string_view source, uint32_t offset);

// Newlines normalized (\r\n, \r -> \n) and one trailing newline dropped, as jinja2 does before
// lexing; offsets in tokens refer to this text.
std::string normalize_source(std::string_view source);

// Tokens of a normalized source, ending with kEof. Errors carry "line L, column C".
Result<std::vector<Token>> tokenize(std::string_view normalized_source);

}  // namespace ls::jinja
