#include "tokenizer/jinja/scopes.h"

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ls::jinja {
namespace {

using NameSet = std::unordered_set<std::string>;

// The first use of each name in one scope's own code (nested scopes excluded).
class ScopeWalk {
 public:
  enum class Use { kLoad, kStore, kBranchStore, kParameter };

  void use(const std::string& name, Use how) {
    if (first_.emplace(name, how).second) order_.push_back(name);
  }
  void load(const std::string& name) { use(name, Use::kLoad); }
  void store(const std::string& name, bool in_branch) {
    use(name, in_branch ? Use::kBranchStore : Use::kStore);
  }

  // Names first assigned unconditionally and unknown to the enclosing scopes.
  std::vector<std::string> undefined_at_entry(const NameSet& enclosing) const {
    std::vector<std::string> out;
    for (const auto& name : order_) {
      if (first_.at(name) == Use::kStore && enclosing.count(name) == 0) out.push_back(name);
    }
    return out;
  }
  void add_names_to(NameSet& names) const {
    for (const auto& name : order_) names.insert(name);
  }

 private:
  std::unordered_map<std::string, Use> first_;
  std::vector<std::string> order_;
};

void walk_expr(const Expr* e, ScopeWalk& w);

void walk_call(const CallSpec& call, ScopeWalk& w) {
  for (const auto& a : call.args) walk_expr(a.get(), w);
  for (const auto& kw : call.kwargs) walk_expr(kw.value.get(), w);
  walk_expr(call.dyn_args.get(), w);
  walk_expr(call.dyn_kwargs.get(), w);
}

void walk_expr(const Expr* e, ScopeWalk& w) {
  if (e == nullptr) return;
  switch (e->kind) {
    case ExprKind::kName:
    case ExprKind::kNsRef:
      w.load(e->name);
      return;
    default:
      break;
  }
  walk_expr(e->a.get(), w);
  walk_expr(e->b.get(), w);
  walk_expr(e->c.get(), w);
  for (const auto& item : e->items) walk_expr(item.get(), w);
  for (const auto& [k, v] : e->pairs) {
    walk_expr(k.get(), w);
    walk_expr(v.get(), w);
  }
  walk_call(e->call, w);
}

void walk_target(const Expr* t, ScopeWalk& w, bool in_branch, bool as_parameter) {
  if (t == nullptr) return;
  if (t->kind == ExprKind::kName) {
    if (as_parameter) {
      w.use(t->name, ScopeWalk::Use::kParameter);
    } else {
      w.store(t->name, in_branch);
    }
  } else if (t->kind == ExprKind::kNsRef) {
    w.load(t->name);  // {% set ns.x = ... %} reads ns
  } else {
    for (const auto& item : t->items) walk_target(item.get(), w, in_branch, as_parameter);
  }
}

class Resolver {
 public:
  // One scope: its parameters, its own statements; then the scopes nested in it.
  std::vector<std::string> scope(const std::vector<const StmtList*>& bodies,
                                 const std::vector<std::string>& parameters,
                                 const std::vector<const Expr*>& parameter_targets,
                                 const std::vector<const Expr*>& own_exprs,
                                 const NameSet& enclosing) {
    ScopeWalk w;
    for (const auto& p : parameters) w.use(p, ScopeWalk::Use::kParameter);
    for (const Expr* t : parameter_targets) walk_target(t, w, false, true);
    for (const Expr* e : own_exprs) walk_expr(e, w);
    std::vector<Stmt*> nested;
    for (const StmtList* body : bodies) walk_body(*body, w, false, nested);
    NameSet inner = enclosing;
    w.add_names_to(inner);
    for (Stmt* s : nested) resolve_nested(*s, inner);
    return w.undefined_at_entry(enclosing);
  }

 private:
  void walk_body(const StmtList& body, ScopeWalk& w, bool in_branch, std::vector<Stmt*>& nested) {
    for (const auto& s : body) walk_stmt(*s, w, in_branch, nested);
  }

  // The parts of a statement that run in the current scope; scopes it opens go to `nested`.
  void walk_stmt(Stmt& s, ScopeWalk& w, bool in_branch, std::vector<Stmt*>& nested) {
    switch (s.kind) {
      case StmtKind::kPrint:
        walk_expr(s.expr.get(), w);
        return;
      case StmtKind::kIf:
        walk_expr(s.expr.get(), w);
        walk_body(s.body, w, true, nested);
        walk_body(s.else_body, w, true, nested);
        return;
      case StmtKind::kFor:
        walk_expr(s.expr.get(), w);
        nested.push_back(&s);
        return;
      case StmtKind::kSet:
        walk_expr(s.expr.get(), w);
        walk_target(s.target.get(), w, in_branch, false);
        return;
      case StmtKind::kSetBlock:
        walk_target(s.target.get(), w, in_branch, false);
        nested.push_back(&s);
        return;
      case StmtKind::kMacro:
        w.store(s.name, in_branch);
        nested.push_back(&s);
        return;
      case StmtKind::kCallBlock:
      case StmtKind::kFilterBlock:
        walk_expr(s.kind == StmtKind::kCallBlock ? s.expr.get() : s.filter.get(), w);
        nested.push_back(&s);
        return;
      case StmtKind::kWith:
        for (const auto& v : s.values) walk_expr(v.get(), w);
        nested.push_back(&s);
        return;
      case StmtKind::kScope:
        nested.push_back(&s);
        return;
      case StmtKind::kText:
      case StmtKind::kBreak:
      case StmtKind::kContinue:
        return;
    }
  }

  void resolve_nested(Stmt& s, const NameSet& enclosing) {
    static const std::vector<std::string> kMacroImplicit = {"varargs", "kwargs", "caller"};
    switch (s.kind) {
      case StmtKind::kFor:
        s.undefined_locals =
            scope({&s.body}, {"loop"}, {s.target.get()}, {s.filter.get()}, enclosing);
        s.else_undefined_locals = scope({&s.else_body}, {}, {}, {}, enclosing);
        return;
      case StmtKind::kMacro:
      case StmtKind::kCallBlock: {
        std::vector<std::string> params = s.params;
        params.insert(params.end(), kMacroImplicit.begin(), kMacroImplicit.end());
        std::vector<const Expr*> defaults;
        for (const auto& d : s.defaults) defaults.push_back(d.get());
        s.undefined_locals = scope({&s.body}, params, {}, defaults, enclosing);
        return;
      }
      case StmtKind::kSetBlock:
        s.undefined_locals = scope({&s.body}, {}, {}, {s.filter.get()}, enclosing);
        return;
      case StmtKind::kWith: {
        std::vector<const Expr*> targets;
        for (const auto& t : s.targets) targets.push_back(t.get());
        s.undefined_locals = scope({&s.body}, {}, targets, {}, enclosing);
        return;
      }
      case StmtKind::kFilterBlock:
      case StmtKind::kScope:
        s.undefined_locals = scope({&s.body}, {}, {}, {}, enclosing);
        return;
      default:
        return;
    }
  }
};

}  // namespace

void resolve_scopes(TemplateAst& ast) {
  Resolver resolver;
  ast.undefined_locals = resolver.scope({&ast.body}, {}, {}, {}, NameSet{});
}

}  // namespace ls::jinja
