// The expression half of the parser: jinja2's precedence ladder (conditional, or, and, not,
// comparisons, + -, ~, * / // %, **, unary, then postfix subscripts / calls and filters / tests).

#include <optional>

#include "tokenizer/jinja/parser_impl.h"

namespace ls::jinja::parser_detail {

Result<ExprPtr> Parser::parse_condexpr() {
  LS_ASSIGN_OR_RETURN(ExprPtr expr1, parse_or());
  while (is_name("if")) {
    const uint32_t offset = current().offset;
    next();
    auto cond = make_expr(ExprKind::kCondExpr, offset);
    LS_ASSIGN_OR_RETURN(cond->a, parse_or());
    cond->b = std::move(expr1);
    if (skip_name("else")) {
      LS_ASSIGN_OR_RETURN(cond->c, parse_condexpr());
    }
    expr1 = std::move(cond);
  }
  return expr1;
}

Result<ExprPtr> Parser::parse_or() {
  LS_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
  while (is_name("or")) {
    auto e = make_expr(ExprKind::kOr, current().offset);
    next();
    e->a = std::move(left);
    LS_ASSIGN_OR_RETURN(e->b, parse_and());
    left = std::move(e);
  }
  return left;
}

Result<ExprPtr> Parser::parse_and() {
  LS_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
  while (is_name("and")) {
    auto e = make_expr(ExprKind::kAnd, current().offset);
    next();
    e->a = std::move(left);
    LS_ASSIGN_OR_RETURN(e->b, parse_not());
    left = std::move(e);
  }
  return left;
}

Result<ExprPtr> Parser::parse_not() {
  DepthGuard guard(this);
  LS_RETURN_IF_ERROR(check_depth());
  if (is_name("not")) {
    auto e = make_expr(ExprKind::kNot, current().offset);
    next();
    LS_ASSIGN_OR_RETURN(e->a, parse_not());
    return e;
  }
  return parse_compare();
}

std::optional<CompareOp> Parser::take_compare_op() {
  std::optional<CompareOp> op;
  switch (current().type) {
    case TokenType::kEq:
      op = CompareOp::kEq;
      break;
    case TokenType::kNe:
      op = CompareOp::kNe;
      break;
    case TokenType::kLt:
      op = CompareOp::kLt;
      break;
    case TokenType::kLe:
      op = CompareOp::kLe;
      break;
    case TokenType::kGt:
      op = CompareOp::kGt;
      break;
    case TokenType::kGe:
      op = CompareOp::kGe;
      break;
    default:
      if (is_name("in")) {
        op = CompareOp::kIn;
      } else if (is_name("not") && look().type == TokenType::kName && look().text == "in") {
        next();
        op = CompareOp::kNotIn;
      }
  }
  if (op) next();
  return op;
}

Result<ExprPtr> Parser::parse_compare() {
  const uint32_t offset = current().offset;
  LS_ASSIGN_OR_RETURN(ExprPtr expr, parse_math1());
  ExprPtr cmp;
  while (const auto op = take_compare_op()) {
    if (!cmp) {
      cmp = make_expr(ExprKind::kCompare, offset);
      cmp->items.push_back(std::move(expr));
    }
    cmp->compare_ops.push_back(*op);
    LS_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math1());
    cmp->items.push_back(std::move(rhs));
  }
  return cmp ? std::move(cmp) : std::move(expr);
}

Result<ExprPtr> Parser::binary(ExprPtr left, BinaryOp op, ExprPtr right, uint32_t offset) {
  auto e = make_expr(ExprKind::kBinary, offset);
  e->binary_op = op;
  e->a = std::move(left);
  e->b = std::move(right);
  return e;
}

Result<ExprPtr> Parser::parse_math1() {
  LS_ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
  while (is(TokenType::kAdd) || is(TokenType::kSub)) {
    const BinaryOp op = is(TokenType::kAdd) ? BinaryOp::kAdd : BinaryOp::kSub;
    const uint32_t offset = current().offset;
    next();
    LS_ASSIGN_OR_RETURN(ExprPtr right, parse_concat());
    LS_ASSIGN_OR_RETURN(left, binary(std::move(left), op, std::move(right), offset));
  }
  return left;
}

Result<ExprPtr> Parser::parse_concat() {
  const uint32_t offset = current().offset;
  LS_ASSIGN_OR_RETURN(ExprPtr first, parse_math2());
  if (!is(TokenType::kTilde)) return first;
  auto e = make_expr(ExprKind::kConcat, offset);
  e->items.push_back(std::move(first));
  while (skip_if(TokenType::kTilde)) {
    LS_ASSIGN_OR_RETURN(ExprPtr item, parse_math2());
    e->items.push_back(std::move(item));
  }
  return e;
}

Result<ExprPtr> Parser::parse_math2() {
  LS_ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
  while (true) {
    BinaryOp op;
    switch (current().type) {
      case TokenType::kMul:
        op = BinaryOp::kMul;
        break;
      case TokenType::kDiv:
        op = BinaryOp::kDiv;
        break;
      case TokenType::kFloorDiv:
        op = BinaryOp::kFloorDiv;
        break;
      case TokenType::kMod:
        op = BinaryOp::kMod;
        break;
      default:
        return left;
    }
    const uint32_t offset = current().offset;
    next();
    LS_ASSIGN_OR_RETURN(ExprPtr right, parse_pow());
    LS_ASSIGN_OR_RETURN(left, binary(std::move(left), op, std::move(right), offset));
  }
}

Result<ExprPtr> Parser::parse_pow() {
  LS_ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
  while (is(TokenType::kPow)) {
    const uint32_t offset = current().offset;
    next();
    LS_ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
    LS_ASSIGN_OR_RETURN(left, binary(std::move(left), BinaryOp::kPow, std::move(right), offset));
  }
  return left;
}

Result<ExprPtr> Parser::parse_unary(bool with_filter) {
  DepthGuard guard(this);
  LS_RETURN_IF_ERROR(check_depth());
  ExprPtr node;
  if (is(TokenType::kSub) || is(TokenType::kAdd)) {
    node = make_expr(is(TokenType::kSub) ? ExprKind::kNeg : ExprKind::kPos, current().offset);
    next();
    LS_ASSIGN_OR_RETURN(node->a, parse_unary(false));
  } else {
    LS_ASSIGN_OR_RETURN(node, parse_primary(false));
  }
  LS_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
  if (with_filter) {
    LS_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
  }
  return node;
}

Result<ExprPtr> Parser::parse_primary(bool with_namespace) {
  DepthGuard guard(this);
  LS_RETURN_IF_ERROR(check_depth());
  const Token& tok = current();
  switch (tok.type) {
    case TokenType::kName: {
      next();
      if (tok.text == "true" || tok.text == "True" || tok.text == "false" || tok.text == "False") {
        auto e = make_expr(ExprKind::kConst, tok.offset);
        e->constant = Value(tok.text == "true" || tok.text == "True");
        return e;
      }
      if (tok.text == "none" || tok.text == "None") {
        auto e = make_expr(ExprKind::kConst, tok.offset);
        e->constant = Value::none();
        return e;
      }
      if (with_namespace && is(TokenType::kDot)) {
        next();
        auto e = make_expr(ExprKind::kNsRef, tok.offset);
        e->name = tok.text;
        LS_ASSIGN_OR_RETURN(e->attr, expect_name());
        return e;
      }
      auto e = make_expr(ExprKind::kName, tok.offset);
      e->name = tok.text;
      return e;
    }
    case TokenType::kString: {
      auto e = make_expr(ExprKind::kConst, tok.offset);
      std::string text;
      while (is(TokenType::kString)) {
        text += current().text;
        next();
      }
      e->constant = Value(std::move(text));
      return e;
    }
    case TokenType::kInteger:
    case TokenType::kFloat: {
      auto e = make_expr(ExprKind::kConst, tok.offset);
      e->constant = tok.type == TokenType::kInteger ? Value(tok.int_value) : Value(tok.float_value);
      next();
      return e;
    }
    case TokenType::kLParen: {
      next();
      LS_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(false, true, {}, true, false));
      LS_RETURN_IF_ERROR(expect(TokenType::kRParen, ")"));
      return e;
    }
    case TokenType::kLBracket:
      return parse_list();
    case TokenType::kLBrace:
      return parse_dict();
    default:
      if (tok.type == TokenType::kEof) {
        return fail(tok, "unexpected end of template");
      }
      return fail(tok, fmt::format("unexpected '{}'", describe_token(tok)));
  }
}

bool Parser::is_tuple_end(Names extra_end) const {
  if (is(TokenType::kVariableEnd) || is(TokenType::kBlockEnd) || is(TokenType::kRParen)) {
    return true;
  }
  for (std::string_view n : extra_end) {
    if (is_name(n)) return true;
  }
  return false;
}

Result<ExprPtr> Parser::parse_tuple(bool simplified, bool with_condexpr, Names extra_end,
                                    bool explicit_parentheses, bool with_namespace) {
  const uint32_t offset = current().offset;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) LS_RETURN_IF_ERROR(expect(TokenType::kComma, ","));
    if (is_tuple_end(extra_end)) break;
    ExprPtr item;
    if (simplified) {
      LS_ASSIGN_OR_RETURN(item, parse_primary(with_namespace));
    } else {
      LS_ASSIGN_OR_RETURN(item, parse_expression(with_condexpr));
    }
    args.push_back(std::move(item));
    if (is(TokenType::kComma)) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses) {
      return fail(current(),
                  fmt::format("Expected an expression, got '{}'", describe_token(current())));
    }
  }
  auto e = make_expr(ExprKind::kTuple, offset);
  e->items = std::move(args);
  return e;
}

Result<ExprPtr> Parser::parse_list() {
  auto e = make_expr(ExprKind::kList, current().offset);
  next();
  while (!is(TokenType::kRBracket)) {
    if (!e->items.empty()) LS_RETURN_IF_ERROR(expect(TokenType::kComma, ","));
    if (is(TokenType::kRBracket)) break;
    LS_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
    e->items.push_back(std::move(item));
  }
  LS_RETURN_IF_ERROR(expect(TokenType::kRBracket, "]"));
  return e;
}

Result<ExprPtr> Parser::parse_dict() {
  auto e = make_expr(ExprKind::kDict, current().offset);
  next();
  while (!is(TokenType::kRBrace)) {
    if (!e->pairs.empty()) LS_RETURN_IF_ERROR(expect(TokenType::kComma, ","));
    if (is(TokenType::kRBrace)) break;
    LS_ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
    LS_RETURN_IF_ERROR(expect(TokenType::kColon, ":"));
    LS_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
    e->pairs.emplace_back(std::move(key), std::move(value));
  }
  LS_RETURN_IF_ERROR(expect(TokenType::kRBrace, "}"));
  return e;
}

Result<ExprPtr> Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is(TokenType::kDot) || is(TokenType::kLBracket)) {
      LS_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
    } else if (is(TokenType::kLParen)) {
      LS_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is(TokenType::kPipe)) {
      LS_ASSIGN_OR_RETURN(node, parse_filter(std::move(node), false));
    } else if (is_name("is")) {
      LS_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
    } else if (is(TokenType::kLParen)) {
      LS_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::parse_subscript(ExprPtr node) {
  const Token tok = current();
  next();
  if (tok.type == TokenType::kDot) {
    const Token attr = current();
    next();
    if (attr.type == TokenType::kName) {
      auto e = make_expr(ExprKind::kGetattr, tok.offset);
      e->a = std::move(node);
      e->name = attr.text;
      return e;
    }
    if (attr.type != TokenType::kInteger) return fail(attr, "expected name or number");
    auto e = make_expr(ExprKind::kGetitem, tok.offset);
    e->a = std::move(node);
    e->b = make_expr(ExprKind::kConst, attr.offset);
    e->b->constant = Value(attr.int_value);
    return e;
  }
  std::vector<ExprPtr> args;
  while (!is(TokenType::kRBracket)) {
    if (!args.empty()) LS_RETURN_IF_ERROR(expect(TokenType::kComma, ","));
    LS_ASSIGN_OR_RETURN(ExprPtr arg, parse_subscribed());
    args.push_back(std::move(arg));
  }
  LS_RETURN_IF_ERROR(expect(TokenType::kRBracket, "]"));
  auto e = make_expr(ExprKind::kGetitem, tok.offset);
  e->a = std::move(node);
  if (args.size() == 1) {
    e->b = std::move(args[0]);
  } else {
    e->b = make_expr(ExprKind::kTuple, tok.offset);
    e->b->items = std::move(args);
  }
  return e;
}

Result<ExprPtr> Parser::parse_subscribed() {
  auto slice = make_expr(ExprKind::kSlice, current().offset);
  if (is(TokenType::kColon)) {
    next();
  } else {
    LS_ASSIGN_OR_RETURN(ExprPtr node, parse_expression(true));
    if (!is(TokenType::kColon)) return node;
    next();
    slice->a = std::move(node);
  }
  if (!is(TokenType::kColon) && !is(TokenType::kRBracket) && !is(TokenType::kComma)) {
    LS_ASSIGN_OR_RETURN(slice->b, parse_expression(true));
  }
  if (skip_if(TokenType::kColon)) {
    if (!is(TokenType::kRBracket) && !is(TokenType::kComma)) {
      LS_ASSIGN_OR_RETURN(slice->c, parse_expression(true));
    }
  }
  return slice;
}

Status Parser::parse_call_args(CallSpec& spec) {
  const Token open = current();
  LS_RETURN_IF_ERROR(expect(TokenType::kLParen, "("));
  bool require_comma = false;
  auto ensure = [&](bool ok) -> Status {
    if (ok) return Status::ok_status();
    return fail(open, "invalid syntax for function call expression");
  };
  while (!is(TokenType::kRParen)) {
    if (require_comma) {
      LS_RETURN_IF_ERROR(expect(TokenType::kComma, ","));
      if (is(TokenType::kRParen)) break;
    }
    if (is(TokenType::kEof)) return expect(TokenType::kRParen, ")");
    if (is(TokenType::kMul)) {
      LS_RETURN_IF_ERROR(ensure(!spec.dyn_args && !spec.dyn_kwargs));
      next();
      LS_ASSIGN_OR_RETURN(spec.dyn_args, parse_expression(true));
    } else if (is(TokenType::kPow)) {
      LS_RETURN_IF_ERROR(ensure(!spec.dyn_kwargs));
      next();
      LS_ASSIGN_OR_RETURN(spec.dyn_kwargs, parse_expression(true));
    } else if (is(TokenType::kName) && look().type == TokenType::kAssign) {
      LS_RETURN_IF_ERROR(ensure(!spec.dyn_kwargs));
      Keyword kw;
      kw.name = current().text;
      next();
      next();
      LS_ASSIGN_OR_RETURN(kw.value, parse_expression(true));
      spec.kwargs.push_back(std::move(kw));
    } else {
      LS_RETURN_IF_ERROR(ensure(!spec.dyn_args && !spec.dyn_kwargs && spec.kwargs.empty()));
      LS_ASSIGN_OR_RETURN(ExprPtr arg, parse_expression(true));
      spec.args.push_back(std::move(arg));
    }
    require_comma = true;
  }
  next();
  return Status::ok_status();
}

Result<ExprPtr> Parser::parse_call(ExprPtr node) {
  auto e = make_expr(ExprKind::kCall, current().offset);
  e->a = std::move(node);
  LS_RETURN_IF_ERROR(parse_call_args(e->call));
  return e;
}

Result<std::string> Parser::parse_dotted_name() {
  LS_ASSIGN_OR_RETURN(std::string name, expect_name());
  while (skip_if(TokenType::kDot)) {
    LS_ASSIGN_OR_RETURN(std::string part, expect_name());
    name += '.';
    name += part;
  }
  return name;
}

Result<ExprPtr> Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (is(TokenType::kPipe) || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const Token at = current();
    auto e = make_expr(ExprKind::kFilter, at.offset);
    LS_ASSIGN_OR_RETURN(e->name, parse_dotted_name());
    e->filter = find_filter(e->name);  // null: an error if it ever runs (see parser.h)
    if (is(TokenType::kLParen)) LS_RETURN_IF_ERROR(parse_call_args(e->call));
    e->a = std::move(node);
    node = std::move(e);
  }
  return node;
}

Result<ExprPtr> Parser::parse_test(ExprPtr node) {
  const uint32_t offset = current().offset;
  next();
  const bool negated = skip_name("not");
  const Token at = current();
  auto e = make_expr(ExprKind::kTest, offset);
  LS_ASSIGN_OR_RETURN(e->name, parse_dotted_name());
  e->test = find_test(e->name);
  const TokenType t = current().type;
  if (t == TokenType::kLParen) {
    LS_RETURN_IF_ERROR(parse_call_args(e->call));
  } else if ((t == TokenType::kName || t == TokenType::kString || t == TokenType::kInteger ||
              t == TokenType::kFloat || t == TokenType::kLBracket || t == TokenType::kLBrace) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) return fail(current(), "You cannot chain multiple tests with is");
    LS_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary(false));
    LS_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
    e->call.args.push_back(std::move(arg));
  }
  e->a = std::move(node);
  if (!negated) return e;
  auto n = make_expr(ExprKind::kNot, offset);
  n->a = std::move(e);
  return n;
}

}  // namespace ls::jinja::parser_detail
