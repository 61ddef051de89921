#pragma once
// The parser's internals, shared by parser.cpp (statements) and parser_expressions.cpp
// (expressions). Not part of the engine's interface: include parser.h.

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/limits.h"

namespace ls::jinja::parser_detail {

using Names = std::initializer_list<std::string_view>;
ExprPtr make_expr(ExprKind kind, uint32_t offset);
StmtPtr make_stmt(StmtKind kind, uint32_t offset);
class Parser {
 public:
  Parser(std::string_view source, std::vector<Token> tokens)
      : source_(source), tokens_(std::move(tokens)) {}

  Result<StmtList> parse();

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
  Status check_depth();
  const Token& current() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is(TokenType type) const { return current().type == type; }
  bool is_name(std::string_view name) const {
    return current().type == TokenType::kName && current().text == name;
  }
  bool skip_if(TokenType type);
  bool skip_name(std::string_view name);
  Status fail(const Token& at, std::string_view message) const;
  Status expect(TokenType type, std::string_view what);
  Result<std::string> expect_name();
  Status expect_name(std::string_view name);

  // --- statements ---------------------------------------------------------------------------

  // Statements until one of `end` (a block whose first name is one of them) or the end of the
  // template; the current token is then that name.
  Result<StmtList> subparse(Names end, bool inside_block);

  // `{% tag ... %}` body up to one of `end`; with drop_needle the end name is consumed.
  Result<StmtList> parse_statements(Names end, bool drop_needle);
  std::string innermost_hint(Names looking_for) const;
  Status fail_eof(Names end) const {
    return fail(current(), fmt::format("Unexpected end of template.{}", innermost_hint(end)));
  }

  Status fail_unknown_tag(const Token& tok) const;
  Status parse_statement(StmtList& out);
  Status parse_known_statement(const std::string& tag, StmtList& out);
  Status parse_if(StmtList& out);
  Status parse_for(StmtList& out);
  Status parse_set(StmtList& out);
  Status parse_signature(Stmt& s);

  // Macro and caller bodies are functions: a loop around their definition does not make
  // `break` valid inside them.
  Result<StmtList> parse_function_body(std::string_view end);
  Status parse_macro(StmtList& out);
  Status parse_call_block(StmtList& out);
  Status parse_filter_block(StmtList& out);
  Status parse_with(StmtList& out);
  Status parse_print(StmtList& out);
  Result<ExprPtr> parse_assign_target(bool with_tuple, bool name_only, Names extra_end,
                                      bool with_namespace);

  // --- expressions ---------------------------------------------------------------------------

  Result<ExprPtr> parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  Result<ExprPtr> parse_condexpr();
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> parse_not();

  // The comparison operator at the current token (consuming "not" of "not in"), if any.
  std::optional<CompareOp> take_compare_op();
  Result<ExprPtr> parse_compare();
  Result<ExprPtr> binary(ExprPtr left, BinaryOp op, ExprPtr right, uint32_t offset);
  Result<ExprPtr> parse_math1();
  Result<ExprPtr> parse_concat();
  Result<ExprPtr> parse_math2();
  Result<ExprPtr> parse_pow();
  Result<ExprPtr> parse_unary(bool with_filter);
  Result<ExprPtr> parse_primary(bool with_namespace);
  bool is_tuple_end(Names extra_end) const;

  // Comma-separated expressions; a tuple only when a comma appears. `simplified` parses only
  // names and literals (assignment targets).
  Result<ExprPtr> parse_tuple(bool simplified, bool with_condexpr, Names extra_end,
                              bool explicit_parentheses, bool with_namespace);
  Result<ExprPtr> parse_list();
  Result<ExprPtr> parse_dict();
  Result<ExprPtr> parse_postfix(ExprPtr node);
  Result<ExprPtr> parse_filter_expr(ExprPtr node);
  Result<ExprPtr> parse_subscript(ExprPtr node);
  Result<ExprPtr> parse_subscribed();
  Status parse_call_args(CallSpec& spec);
  Result<ExprPtr> parse_call(ExprPtr node);
  Result<std::string> parse_dotted_name();
  Result<ExprPtr> parse_filter(ExprPtr node, bool start_inline);
  Result<ExprPtr> parse_test(ExprPtr node);

  std::string_view source_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> tag_stack_;  // statements being parsed, innermost last
  std::vector<Names> end_stack_;        // end tags the enclosing blocks look for
};
}  // namespace ls::jinja::parser_detail
