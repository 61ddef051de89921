#include "tokenizer/jinja/content_format.h"

#include <deque>
#include <string>
#include <vector>

namespace ls::jinja {
namespace {

// Every statement of the template, nested bodies included, in source order.
void collect(const StmtList& body, std::vector<const Stmt*>& out) {
  for (const auto& s : body) {
    out.push_back(s.get());
    collect(s->body, out);
    collect(s->else_body, out);
  }
}

bool is_var(const Expr* e, const std::string& name) {
  return e != nullptr && e->kind == ExprKind::kName && e->name == name;
}

// `var['key']` or `var.key`.
bool is_attr(const Expr* e, const std::string& name, const std::string& key) {
  if (e == nullptr) return false;
  if (e->kind == ExprKind::kGetitem) {
    return is_var(e->a.get(), name) && e->b && e->b->kind == ExprKind::kConst &&
           e->b->constant.is_string() && e->b->constant.get_string() == key;
  }
  if (e->kind == ExprKind::kGetattr) return is_var(e->a.get(), name) && e->name == key;
  return false;
}

// The variable (or its `key`) seen through filters, tests and slices.
bool is_var_or_elems(const Expr* e, const std::string& name, const std::string* key) {
  if (e == nullptr) return false;
  if (e->kind == ExprKind::kFilter || e->kind == ExprKind::kTest) {
    return is_var_or_elems(e->a.get(), name, key);
  }
  if (e->kind == ExprKind::kGetitem && e->b && e->b->kind == ExprKind::kSlice) {
    return is_var_or_elems(e->a.get(), name, key);
  }
  return key != nullptr ? is_attr(e, name, *key) : is_var(e, name);
}

}  // namespace

bool iterates_over_content_parts(const TemplateAst& ast) {
  std::vector<const Stmt*> stmts;
  collect(ast.body, stmts);
  // Names that hold the messages: `messages` and whatever is assigned from it (transitively).
  std::vector<std::string> messages_vars = {"messages"};
  std::deque<std::string> pending = {"messages"};
  while (!pending.empty()) {
    const std::string var = pending.front();
    pending.pop_front();
    for (const Stmt* s : stmts) {
      if (s->kind != StmtKind::kSet || !s->target || s->target->kind != ExprKind::kName) continue;
      if (!is_var_or_elems(s->expr.get(), var, nullptr)) continue;
      messages_vars.push_back(s->target->name);
      if (s->target->name != var && messages_vars.size() < 256) pending.push_back(s->target->name);
    }
  }
  // Loop variables over those: the messages.
  std::vector<std::string> message_vars;
  for (const Stmt* s : stmts) {
    if (s->kind != StmtKind::kFor || !s->target || s->target->kind != ExprKind::kName) continue;
    for (const auto& var : messages_vars) {
      if (is_var_or_elems(s->expr.get(), var, nullptr)) {
        message_vars.push_back(s->target->name);
        break;
      }
    }
  }
  // A loop over one message's content.
  static const std::string kContent = "content";
  for (const Stmt* s : stmts) {
    if (s->kind != StmtKind::kFor) continue;
    for (const auto& var : message_vars) {
      if (is_var_or_elems(s->expr.get(), var, &kContent)) return true;
    }
  }
  return false;
}

}  // namespace ls::jinja
