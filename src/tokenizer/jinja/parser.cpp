#include "tokenizer/jinja/parser.h"

#include <optional>

#include "tokenizer/jinja/parser_impl.h"
#include "tokenizer/jinja/scopes.h"

namespace ls::jinja {
namespace parser_detail {
namespace {

std::string quoted_list(Names names) {
  std::string out;
  for (auto it = names.begin(); it != names.end(); ++it) {
    if (it != names.begin()) out += " or ";
    out += fmt::format("'{}'", *it);
  }
  return out;
}

bool can_assign(const Expr& e) {
  if (e.kind == ExprKind::kName || e.kind == ExprKind::kNsRef) return true;
  if (e.kind != ExprKind::kTuple) return false;
  for (const auto& item : e.items) {
    if (!can_assign(*item)) return false;
  }
  return true;
}

std::string_view node_name(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst:
      return "const";
    case ExprKind::kCall:
      return "call";
    case ExprKind::kList:
      return "list";
    case ExprKind::kDict:
      return "dict";
    case ExprKind::kGetattr:
      return "getattr";
    case ExprKind::kGetitem:
      return "getitem";
    default:
      return "expression";
  }
}

}  // namespace

ExprPtr make_expr(ExprKind kind, uint32_t offset) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->offset = offset;
  return e;
}

StmtPtr make_stmt(StmtKind kind, uint32_t offset) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->offset = offset;
  return s;
}

Result<StmtList> Parser::parse() {
  LS_ASSIGN_OR_RETURN(StmtList body, subparse({}, false));
  return body;
}

Status Parser::check_depth() {
  if (depth_ > kMaxParseDepth) return fail(current(), "template nested too deeply");
  return Status::ok_status();
}

bool Parser::skip_if(TokenType type) {
  if (!is(type)) return false;
  next();
  return true;
}

bool Parser::skip_name(std::string_view name) {
  if (!is_name(name)) return false;
  next();
  return true;
}

Status Parser::fail(const Token& at, std::string_view message) const {
  const SourcePosition p = position_of(source_, at.offset);
  return invalid_argument("syntax error at line {}, column {}: {}", p.line, p.column, message);
}

Status Parser::expect(TokenType type, std::string_view what) {
  if (is(type)) {
    next();
    return Status::ok_status();
  }
  if (is(TokenType::kEof)) {
    return fail(current(), fmt::format("unexpected end of template, expected '{}'.", what));
  }
  return fail(current(),
              fmt::format("expected token '{}', got '{}'", what, describe_token(current())));
}

Result<std::string> Parser::expect_name() {
  if (!is(TokenType::kName)) {
    LS_RETURN_IF_ERROR(expect(TokenType::kName, "name"));
  }
  std::string name = current().text;
  next();
  return name;
}

Status Parser::expect_name(std::string_view name) {
  if (is_name(name)) {
    next();
    return Status::ok_status();
  }
  if (is(TokenType::kEof)) {
    return fail(current(), fmt::format("unexpected end of template, expected '{}'.", name));
  }
  return fail(current(),
              fmt::format("expected token '{}', got '{}'", name, describe_token(current())));
}

Result<StmtList> Parser::subparse(Names end, bool inside_block) {
  DepthGuard guard(this);
  LS_RETURN_IF_ERROR(check_depth());
  StmtList body;
  while (!is(TokenType::kEof)) {
    const Token& tok = current();
    if (tok.type == TokenType::kData) {
      auto s = make_stmt(StmtKind::kText, tok.offset);
      s->text = tok.text;
      body.push_back(std::move(s));
      next();
    } else if (tok.type == TokenType::kVariableBegin) {
      next();
      auto s = make_stmt(StmtKind::kPrint, tok.offset);
      LS_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, true, {}, false, false));
      LS_RETURN_IF_ERROR(expect(TokenType::kVariableEnd, "end of print statement"));
      body.push_back(std::move(s));
    } else if (tok.type == TokenType::kBlockBegin) {
      next();
      if (inside_block && is(TokenType::kName)) {
        for (std::string_view e : end) {
          if (current().text == e) return body;
        }
      }
      LS_RETURN_IF_ERROR(parse_statement(body));
      LS_RETURN_IF_ERROR(expect(TokenType::kBlockEnd, "end of statement block"));
    } else {
      return fail(tok, fmt::format("unexpected '{}'", describe_token(tok)));
    }
  }
  return body;
}

Result<StmtList> Parser::parse_statements(Names end, bool drop_needle) {
  skip_if(TokenType::kColon);
  LS_RETURN_IF_ERROR(expect(TokenType::kBlockEnd, "end of statement block"));
  end_stack_.push_back(end);
  auto body = subparse(end, true);
  end_stack_.pop_back();
  if (!body.ok()) return body.status();
  if (is(TokenType::kEof)) return fail_eof(end);
  if (drop_needle) next();
  return body;
}

std::string Parser::innermost_hint(Names looking_for) const {
  std::string msg;
  if (looking_for.size() > 0) {
    msg += fmt::format(" Jinja was looking for the following tags: {}.", quoted_list(looking_for));
  }
  if (!tag_stack_.empty()) {
    msg += fmt::format(" The innermost block that needs to be closed is '{}'.", tag_stack_.back());
  }
  return msg;
}

Status Parser::fail_unknown_tag(const Token& tok) const {
  std::string msg = fmt::format("Encountered unknown tag '{}'.", tok.text);
  if (!end_stack_.empty()) msg += innermost_hint(end_stack_.back());
  return fail(tok, msg);
}

Status Parser::parse_statement(StmtList& out) {
  const Token& tok = current();
  if (tok.type != TokenType::kName) return fail(tok, "tag name expected");
  const std::string tag = tok.text;
  static constexpr std::string_view kUnsupported[] = {"extends", "include", "import", "from",
                                                      "autoescape"};
  for (std::string_view u : kUnsupported) {
    if (tag == u) {
      return fail(tok, fmt::format("'{}' is not supported in chat templates", tag));
    }
  }
  static constexpr std::string_view kKnown[] = {"if",    "for",      "set",   "macro",
                                                "call",  "filter",   "with",  "print",
                                                "break", "continue", "block", "generation"};
  bool known = false;
  for (std::string_view k : kKnown) known |= tag == k;
  if (!known) return fail_unknown_tag(tok);
  tag_stack_.push_back(tag);
  Status st = parse_known_statement(tag, out);
  tag_stack_.pop_back();
  return st;
}

Status Parser::parse_known_statement(const std::string& tag, StmtList& out) {
  const Token& tok = current();
  if (tag == "if") return parse_if(out);
  if (tag == "for") return parse_for(out);
  if (tag == "set") return parse_set(out);
  if (tag == "macro") return parse_macro(out);
  if (tag == "call") return parse_call_block(out);
  if (tag == "filter") return parse_filter_block(out);
  if (tag == "with") return parse_with(out);
  if (tag == "print") return parse_print(out);
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return fail(tok, fmt::format("'{}' outside of a loop", tag));
    out.push_back(make_stmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, tok.offset));
    next();
    return Status::ok_status();
  }
  if (tag == "generation" || tag == "block") {
    auto s = make_stmt(StmtKind::kScope, tok.offset);
    next();
    if (tag == "block") {
      LS_ASSIGN_OR_RETURN(s->name, expect_name());
      skip_name("scoped");
      skip_name("required");
    }
    const std::string end = fmt::format("end{}", tag);
    LS_ASSIGN_OR_RETURN(s->body, parse_statements({end}, true));
    if (tag == "block") skip_name(s->name);
    out.push_back(std::move(s));
    return Status::ok_status();
  }
  return fail_unknown_tag(tok);
}

Status Parser::parse_if(StmtList& out) {
  auto root = make_stmt(StmtKind::kIf, current().offset);
  next();
  Stmt* node = root.get();
  while (true) {
    LS_ASSIGN_OR_RETURN(node->expr, parse_tuple(false, false, {}, false, false));
    LS_ASSIGN_OR_RETURN(node->body, parse_statements({"elif", "else", "endif"}, false));
    const Token tok = current();
    next();
    if (tok.text == "elif") {
      auto elif = make_stmt(StmtKind::kIf, tok.offset);
      Stmt* next_node = elif.get();
      node->else_body.push_back(std::move(elif));
      node = next_node;
      continue;
    }
    if (tok.text == "else") {
      LS_ASSIGN_OR_RETURN(node->else_body, parse_statements({"endif"}, true));
    }
    break;
  }
  out.push_back(std::move(root));
  return Status::ok_status();
}

Status Parser::parse_for(StmtList& out) {
  auto s = make_stmt(StmtKind::kFor, current().offset);
  next();
  LS_ASSIGN_OR_RETURN(s->target, parse_assign_target(true, false, {"in"}, false));
  LS_RETURN_IF_ERROR(expect_name("in"));
  LS_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, false, {"recursive"}, false, false));
  if (skip_name("if")) {
    LS_ASSIGN_OR_RETURN(s->filter, parse_expression(true));
  }
  if (is_name("recursive")) return fail(current(), "recursive loops are not supported");
  ++loop_depth_;
  auto body = parse_statements({"endfor", "else"}, false);
  --loop_depth_;
  if (!body.ok()) return body.status();
  s->body = std::move(body).value();
  const bool has_else = current().text == "else";
  next();
  if (has_else) {
    LS_ASSIGN_OR_RETURN(s->else_body, parse_statements({"endfor"}, true));
  }
  out.push_back(std::move(s));
  return Status::ok_status();
}

Status Parser::parse_set(StmtList& out) {
  const uint32_t offset = current().offset;
  next();
  LS_ASSIGN_OR_RETURN(ExprPtr target, parse_assign_target(true, false, {}, true));
  if (skip_if(TokenType::kAssign)) {
    auto s = make_stmt(StmtKind::kSet, offset);
    s->target = std::move(target);
    LS_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, true, {}, false, false));
    out.push_back(std::move(s));
    return Status::ok_status();
  }
  auto s = make_stmt(StmtKind::kSetBlock, offset);
  s->target = std::move(target);
  if (is(TokenType::kPipe)) {
    LS_ASSIGN_OR_RETURN(s->filter, parse_filter(nullptr, false));
  }
  LS_ASSIGN_OR_RETURN(s->body, parse_statements({"endset"}, true));
  out.push_back(std::move(s));
  return Status::ok_status();
}

Status Parser::parse_signature(Stmt& s) {
  LS_RETURN_IF_ERROR(expect(TokenType::kLParen, "("));
  while (!is(TokenType::kRParen)) {
    if (!s.params.empty()) LS_RETURN_IF_ERROR(expect(TokenType::kComma, ","));
    if (is(TokenType::kEof)) return expect(TokenType::kRParen, ")");
    LS_ASSIGN_OR_RETURN(std::string param, expect_name());
    if (skip_if(TokenType::kAssign)) {
      LS_ASSIGN_OR_RETURN(ExprPtr d, parse_expression(true));
      s.defaults.push_back(std::move(d));
    } else if (!s.defaults.empty()) {
      return fail(current(), "non-default argument follows default argument");
    }
    s.params.push_back(std::move(param));
  }
  next();
  return Status::ok_status();
}

Result<StmtList> Parser::parse_function_body(std::string_view end) {
  const int saved = loop_depth_;
  loop_depth_ = 0;
  auto body = parse_statements({end}, true);
  loop_depth_ = saved;
  return body;
}

Status Parser::parse_macro(StmtList& out) {
  auto s = make_stmt(StmtKind::kMacro, current().offset);
  next();
  LS_ASSIGN_OR_RETURN(s->name, expect_name());
  LS_RETURN_IF_ERROR(parse_signature(*s));
  LS_ASSIGN_OR_RETURN(s->body, parse_function_body("endmacro"));
  out.push_back(std::move(s));
  return Status::ok_status();
}

Status Parser::parse_call_block(StmtList& out) {
  auto s = make_stmt(StmtKind::kCallBlock, current().offset);
  next();
  if (is(TokenType::kLParen)) LS_RETURN_IF_ERROR(parse_signature(*s));
  const Token& at = current();
  LS_ASSIGN_OR_RETURN(s->expr, parse_expression(true));
  if (s->expr->kind != ExprKind::kCall) return fail(at, "expected call");
  LS_ASSIGN_OR_RETURN(s->body, parse_function_body("endcall"));
  out.push_back(std::move(s));
  return Status::ok_status();
}

Status Parser::parse_filter_block(StmtList& out) {
  auto s = make_stmt(StmtKind::kFilterBlock, current().offset);
  next();
  LS_ASSIGN_OR_RETURN(s->filter, parse_filter(nullptr, true));
  LS_ASSIGN_OR_RETURN(s->body, parse_statements({"endfilter"}, true));
  out.push_back(std::move(s));
  return Status::ok_status();
}

Status Parser::parse_with(StmtList& out) {
  auto s = make_stmt(StmtKind::kWith, current().offset);
  next();
  while (!is(TokenType::kBlockEnd)) {
    if (!s->targets.empty()) LS_RETURN_IF_ERROR(expect(TokenType::kComma, ","));
    LS_ASSIGN_OR_RETURN(ExprPtr target, parse_assign_target(true, false, {}, false));
    LS_RETURN_IF_ERROR(expect(TokenType::kAssign, "="));
    LS_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
    s->targets.push_back(std::move(target));
    s->values.push_back(std::move(value));
  }
  LS_ASSIGN_OR_RETURN(s->body, parse_statements({"endwith"}, true));
  out.push_back(std::move(s));
  return Status::ok_status();
}

Status Parser::parse_print(StmtList& out) {
  next();
  bool first = true;
  while (!is(TokenType::kBlockEnd)) {
    if (!first) LS_RETURN_IF_ERROR(expect(TokenType::kComma, ","));
    first = false;
    auto s = make_stmt(StmtKind::kPrint, current().offset);
    LS_ASSIGN_OR_RETURN(s->expr, parse_expression(true));
    out.push_back(std::move(s));
  }
  return Status::ok_status();
}

Result<ExprPtr> Parser::parse_assign_target(bool with_tuple, bool name_only, Names extra_end,
                                            bool with_namespace) {
  const Token& at = current();
  ExprPtr target;
  if (name_only) {
    target = make_expr(ExprKind::kName, at.offset);
    LS_ASSIGN_OR_RETURN(target->name, expect_name());
  } else if (with_tuple) {
    LS_ASSIGN_OR_RETURN(target, parse_tuple(true, true, extra_end, false, with_namespace));
  } else {
    LS_ASSIGN_OR_RETURN(target, parse_primary(with_namespace));
  }
  if (!can_assign(*target)) {
    return fail(at, fmt::format("can't assign to '{}'", node_name(*target)));
  }
  return target;
}

}  // namespace parser_detail

Result<TemplateAst> parse_template(std::string_view source) {
  if (static_cast<int64_t>(source.size()) > kMaxSourceBytes) {
    return invalid_argument("chat template is {} bytes, more than the {} accepted", source.size(),
                            kMaxSourceBytes);
  }
  TemplateAst ast;
  ast.source = normalize_source(source);
  LS_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(ast.source));
  parser_detail::Parser parser(ast.source, std::move(tokens));
  LS_ASSIGN_OR_RETURN(ast.body, parser.parse());
  resolve_scopes(ast);
  return ast;
}

}  // namespace ls::jinja
