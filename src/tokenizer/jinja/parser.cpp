#include "tokenizer/jinja/parser.h"

#include <initializer_list>
#include <optional>

#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/limits.h"

namespace ls::jinja {
namespace {

using Names = std::initializer_list<std::string_view>;

std::string quoted_list(Names names) {
  std::string out;
  for (auto it = names.begin(); it != names.end(); ++it) {
    if (it != names.begin()) out += " or ";
    out += fmt::format("'{}'", *it);
  }
  return out;
}

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

class Parser {
 public:
  Parser(std::string_view source, std::vector<Token> tokens)
      : source_(source), tokens_(std::move(tokens)) {}

  Result<StmtList> parse() {
    LS_ASSIGN_OR_RETURN(StmtList body, subparse({}, false));
    return body;
  }

 private:
  // Bounds recursion; every recursive production holds one while it runs.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* p) : p_(p) { ++p_->depth_; }
    ~DepthGuard() { --p_->depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Parser* p_;
  };
  Status check_depth() {
    if (depth_ > kMaxParseDepth) return fail(current(), "template nested too deeply");
    return Status::ok_status();
  }

  const Token& current() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is(TokenType type) const { return current().type == type; }
  bool is_name(std::string_view name) const {
    return current().type == TokenType::kName && current().text == name;
  }
  bool skip_if(TokenType type) {
    if (!is(type)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  Status fail(const Token& at, std::string_view message) const {
    const SourcePosition p = position_of(source_, at.offset);
    return invalid_argument("syntax error at line {}, column {}: {}", p.line, p.column, message);
  }

  Status expect(TokenType type, std::string_view what) {
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
  Result<std::string> expect_name() {
    if (!is(TokenType::kName)) {
      LS_RETURN_IF_ERROR(expect(TokenType::kName, "name"));
    }
    std::string name = current().text;
    next();
    return name;
  }
  Status expect_name(std::string_view name) {
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

  // --- statements ---------------------------------------------------------------------------

  // Statements until one of `end` (a block whose first name is one of them) or the end of the
  // template; the current token is then that name.
  Result<StmtList> subparse(Names end, bool inside_block) {
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

  // `{% tag ... %}` body up to one of `end`; with drop_needle the end name is consumed.
  Result<StmtList> parse_statements(Names end, bool drop_needle) {
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

  std::string innermost_hint(Names looking_for) const {
    std::string msg;
    if (looking_for.size() > 0) {
      msg +=
          fmt::format(" Jinja was looking for the following tags: {}.", quoted_list(looking_for));
    }
    if (!tag_stack_.empty()) {
      msg +=
          fmt::format(" The innermost block that needs to be closed is '{}'.", tag_stack_.back());
    }
    return msg;
  }

  Status fail_eof(Names end) const {
    return fail(current(), fmt::format("Unexpected end of template.{}", innermost_hint(end)));
  }

  Status fail_unknown_tag(const Token& tok) const {
    std::string msg = fmt::format("Encountered unknown tag '{}'.", tok.text);
    if (!end_stack_.empty()) msg += innermost_hint(end_stack_.back());
    return fail(tok, msg);
  }

  Status parse_statement(StmtList& out) {
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

  Status parse_known_statement(const std::string& tag, StmtList& out) {
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

  Status parse_if(StmtList& out) {
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

  Status parse_for(StmtList& out) {
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

  Status parse_set(StmtList& out) {
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

  Status parse_signature(Stmt& s) {
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

  // Macro and caller bodies are functions: a loop around their definition does not make
  // `break` valid inside them.
  Result<StmtList> parse_function_body(std::string_view end) {
    const int saved = loop_depth_;
    loop_depth_ = 0;
    auto body = parse_statements({end}, true);
    loop_depth_ = saved;
    return body;
  }

  Status parse_macro(StmtList& out) {
    auto s = make_stmt(StmtKind::kMacro, current().offset);
    next();
    LS_ASSIGN_OR_RETURN(s->name, expect_name());
    LS_RETURN_IF_ERROR(parse_signature(*s));
    LS_ASSIGN_OR_RETURN(s->body, parse_function_body("endmacro"));
    out.push_back(std::move(s));
    return Status::ok_status();
  }

  Status parse_call_block(StmtList& out) {
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

  Status parse_filter_block(StmtList& out) {
    auto s = make_stmt(StmtKind::kFilterBlock, current().offset);
    next();
    LS_ASSIGN_OR_RETURN(s->filter, parse_filter(nullptr, true));
    LS_ASSIGN_OR_RETURN(s->body, parse_statements({"endfilter"}, true));
    out.push_back(std::move(s));
    return Status::ok_status();
  }

  Status parse_with(StmtList& out) {
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

  Status parse_print(StmtList& out) {
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

  Result<ExprPtr> parse_assign_target(bool with_tuple, bool name_only, Names extra_end,
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

  // --- expressions ---------------------------------------------------------------------------

  Result<ExprPtr> parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  Result<ExprPtr> parse_condexpr() {
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

  Result<ExprPtr> parse_or() {
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

  Result<ExprPtr> parse_and() {
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

  Result<ExprPtr> parse_not() {
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

  // The comparison operator at the current token (consuming "not" of "not in"), if any.
  std::optional<CompareOp> take_compare_op() {
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

  Result<ExprPtr> parse_compare() {
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

  Result<ExprPtr> binary(ExprPtr left, BinaryOp op, ExprPtr right, uint32_t offset) {
    auto e = make_expr(ExprKind::kBinary, offset);
    e->binary_op = op;
    e->a = std::move(left);
    e->b = std::move(right);
    return e;
  }

  Result<ExprPtr> parse_math1() {
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

  Result<ExprPtr> parse_concat() {
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

  Result<ExprPtr> parse_math2() {
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

  Result<ExprPtr> parse_pow() {
    LS_ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
    while (is(TokenType::kPow)) {
      const uint32_t offset = current().offset;
      next();
      LS_ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
      LS_ASSIGN_OR_RETURN(left, binary(std::move(left), BinaryOp::kPow, std::move(right), offset));
    }
    return left;
  }

  Result<ExprPtr> parse_unary(bool with_filter) {
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

  Result<ExprPtr> parse_primary(bool with_namespace) {
    DepthGuard guard(this);
    LS_RETURN_IF_ERROR(check_depth());
    const Token& tok = current();
    switch (tok.type) {
      case TokenType::kName: {
        next();
        if (tok.text == "true" || tok.text == "True" || tok.text == "false" ||
            tok.text == "False") {
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
        e->constant =
            tok.type == TokenType::kInteger ? Value(tok.int_value) : Value(tok.float_value);
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

  bool is_tuple_end(Names extra_end) const {
    if (is(TokenType::kVariableEnd) || is(TokenType::kBlockEnd) || is(TokenType::kRParen)) {
      return true;
    }
    for (std::string_view n : extra_end) {
      if (is_name(n)) return true;
    }
    return false;
  }

  // Comma-separated expressions; a tuple only when a comma appears. `simplified` parses only
  // names and literals (assignment targets).
  Result<ExprPtr> parse_tuple(bool simplified, bool with_condexpr, Names extra_end,
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

  Result<ExprPtr> parse_list() {
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

  Result<ExprPtr> parse_dict() {
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

  Result<ExprPtr> parse_postfix(ExprPtr node) {
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

  Result<ExprPtr> parse_filter_expr(ExprPtr node) {
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

  Result<ExprPtr> parse_subscript(ExprPtr node) {
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

  Result<ExprPtr> parse_subscribed() {
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

  Status parse_call_args(CallSpec& spec) {
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

  Result<ExprPtr> parse_call(ExprPtr node) {
    auto e = make_expr(ExprKind::kCall, current().offset);
    e->a = std::move(node);
    LS_RETURN_IF_ERROR(parse_call_args(e->call));
    return e;
  }

  Result<std::string> parse_dotted_name() {
    LS_ASSIGN_OR_RETURN(std::string name, expect_name());
    while (skip_if(TokenType::kDot)) {
      LS_ASSIGN_OR_RETURN(std::string part, expect_name());
      name += '.';
      name += part;
    }
    return name;
  }

  Result<ExprPtr> parse_filter(ExprPtr node, bool start_inline) {
    while (is(TokenType::kPipe) || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      const Token at = current();
      auto e = make_expr(ExprKind::kFilter, at.offset);
      LS_ASSIGN_OR_RETURN(e->name, parse_dotted_name());
      e->filter = find_filter(e->name);
      if (e->filter == nullptr) return fail(at, fmt::format("No filter named '{}'.", e->name));
      if (is(TokenType::kLParen)) LS_RETURN_IF_ERROR(parse_call_args(e->call));
      e->a = std::move(node);
      node = std::move(e);
    }
    return node;
  }

  Result<ExprPtr> parse_test(ExprPtr node) {
    const uint32_t offset = current().offset;
    next();
    const bool negated = skip_name("not");
    const Token at = current();
    auto e = make_expr(ExprKind::kTest, offset);
    LS_ASSIGN_OR_RETURN(e->name, parse_dotted_name());
    e->test = find_test(e->name);
    if (e->test == nullptr) return fail(at, fmt::format("No test named '{}'.", e->name));
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

  std::string_view source_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> tag_stack_;  // statements being parsed, innermost last
  std::vector<Names> end_stack_;        // end tags the enclosing blocks look for
};

}  // namespace

Result<TemplateAst> parse_template(std::string_view source) {
  if (static_cast<int64_t>(source.size()) > kMaxSourceBytes) {
    return invalid_argument("chat template is {} bytes, more than the {} accepted", source.size(),
                            kMaxSourceBytes);
  }
  TemplateAst ast;
  ast.source = normalize_source(source);
  LS_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(ast.source));
  Parser parser(ast.source, std::move(tokens));
  LS_ASSIGN_OR_RETURN(ast.body, parser.parse());
  return ast;
}

}  // namespace ls::jinja
