#pragma once
// Python's operators on template values: arithmetic with int/float promotion, floor division
// and modulo rounding toward negative infinity, str/list concatenation and repetition, `in`,
// unary minus, and slicing. Errors read like Python's TypeError / ZeroDivisionError messages.
// Undefined operands are the caller's to reject first (jinja2 raises UndefinedError for them).

#include "core/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace ls::jinja {

class Interpreter;

Result<Value> apply_binary(Interpreter& interp, BinaryOp op, const Value& a, const Value& b);
Result<Value> apply_negate(const Value& a);
Result<Value> apply_plus(const Value& a);
// `item in container`.
Result<bool> contains(const Value& container, const Value& item);
// obj[start:stop:step] for str, list and tuple; unset bounds are None. Anything else is a
// TypeError, as Python subscription raises it.
Result<Value> slice_value(const Value& obj, const Value& start, const Value& stop,
                          const Value& step);

}  // namespace ls::jinja
