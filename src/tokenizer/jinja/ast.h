#pragma once
// The parsed template: jinja2's node types, flattened into one expression node and one statement
// node whose kind says which fields are used. The tree is immutable after parsing and shared by
// every render of the template (renders may run concurrently).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/value.h"

namespace ls::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kConst,     // constant
  kName,      // name
  kGetattr,   // a.name
  kGetitem,   // a[b]; b may be a kSlice
  kSlice,     // a:b:c, each optional (only as a kGetitem index)
  kCall,      // a(call)
  kFilter,    // a | name(call); a is null inside {% filter %} and {% set x | f %}
  kTest,      // a is name(call)
  kNeg,       // -a
  kPos,       // +a
  kNot,       // not a
  kBinary,    // a op b (arithmetic)
  kAnd,       // a and b (returns an operand, like Python)
  kOr,        // a or b
  kCompare,   // items[0] ops[0] items[1] ops[1] items[2] ... (chained)
  kConcat,    // items joined with ~
  kCondExpr,  // b if a else c; c may be null (then undefined)
  kList,      // [items]
  kTuple,     // (items)
  kDict,      // {pairs}
  kNsRef,     // name.attr as an assignment target ({% set ns.attr = ... %})
};

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Keyword {
  std::string name;
  ExprPtr value;
};

// Arguments of a call, filter or test: f(args..., name=value..., *dyn_args, **dyn_kwargs).
struct CallSpec {
  std::vector<ExprPtr> args;
  std::vector<Keyword> kwargs;
  ExprPtr dyn_args;
  ExprPtr dyn_kwargs;
};

struct Expr {
  ExprKind kind = ExprKind::kConst;
  uint32_t offset = 0;  // byte offset in the source, for error positions
  Value constant;
  std::string name;  // variable, attribute, filter or test name; kNsRef: the namespace variable
  std::string attr;  // kNsRef: the attribute
  ExprPtr a;
  ExprPtr b;
  ExprPtr c;
  BinaryOp binary_op = BinaryOp::kAdd;
  std::vector<ExprPtr> items;
  std::vector<CompareOp> compare_ops;
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;
  CallSpec call;
  FilterFn filter = nullptr;  // kFilter, resolved while parsing
  TestFn test = nullptr;      // kTest, resolved while parsing
};

enum class StmtKind : uint8_t {
  kText,         // text
  kPrint,        // {{ expr }}
  kIf,           // if expr: body else else_body (an elif is an kIf alone in else_body)
  kFor,          // for target in expr [if filter]: body else else_body
  kSet,          // set target = expr
  kSetBlock,     // set target [| filter]: body
  kMacro,        // macro name(params = defaults): body
  kCallBlock,    // call(params) expr: body, the body being `caller`
  kFilterBlock,  // filter filter: body
  kWith,         // with targets = values: body
  kScope,        // body only: {% generation %}, {% block %}
  kBreak,
  kContinue,
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  uint32_t offset = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr target;
  ExprPtr filter;  // kFor: the loop condition; kSetBlock / kFilterBlock: a kFilter chain
  StmtList body;
  StmtList else_body;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  std::vector<ExprPtr> targets;
  std::vector<ExprPtr> values;
  // Scope-opening statements: names bound to Undefined when the scope is entered (scopes.h);
  // kFor has one list for the body and one for the else block.
  std::vector<std::string> undefined_locals;
  std::vector<std::string> else_undefined_locals;
};

struct TemplateAst {
  std::string source;  // normalized; offsets refer to it
  StmtList body;
  std::vector<std::string> undefined_locals;  // top-level names that hide the context's
};

}  // namespace ls::jinja
