#pragma once
// Renders a parsed template with jinja2's runtime semantics: scoping (a for-loop iteration, a
// macro call and a with-block get their own scope; if-blocks do not; namespace() objects carry
// state out of loops), jinja2's default Undefined (renders empty, is falsy, iterates as empty;
// using it in arithmetic or looking into it is an error), Python operators, loop variables,
// loop controls, macros with caller(). One Interpreter renders once; a TemplateAst may be
// rendered by many interpreters at the same time.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/limits.h"
#include "tokenizer/jinja/value.h"

namespace ls::jinja {

class Interpreter {
 public:
  Interpreter(const TemplateAst& ast, const RenderLimits& limits);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // context: the template's top-level variables. Errors say where in the template they
  // happened, except a raise_exception() message, which comes back verbatim.
  Result<std::string> render(const ValueDict& context);

  // --- for builtins --------------------------------------------------------------------------
  // Counts work (loop iterations, items a filter touches) against max_steps.
  Status charge(int64_t steps);
  // A string of this size may be built (max_output_bytes).
  Status check_string_size(size_t num_bytes) const;
  // A list of this many items may be built (max_container_items).
  Status check_list_size(size_t num_items) const;
  // raise_exception(message): an error whose message is the template's own.
  Status raise_template_error(std::string message);
  // Calls a callable value (macro, builtin, bound method).
  Result<Value> call(const Value& callee, CallArgs& args);
  // namespace() objects are tracked so the end of the render can break reference cycles.
  void register_namespace(const std::shared_ptr<Namespace>& ns);

 private:
  struct Frame {
    std::shared_ptr<Frame> parent;
    std::vector<std::pair<std::string, Value>> vars;
    Value* find_local(std::string_view name);
    void set(std::string_view name, Value value);
  };
  using FramePtr = std::shared_ptr<Frame>;
  enum class Flow { kNormal, kBreak, kContinue };

  class ScopeGuard;  // pushes a child frame for its lifetime
  class DepthGuard;  // counts evaluation depth for its lifetime

  Status exec_list(const StmtList& body, std::string& out);
  Status exec(const Stmt& s, std::string& out);
  Status exec_for(const Stmt& s, std::string& out);
  Status exec_call_block(const Stmt& s, std::string& out);
  Status render_to_string(const StmtList& body, std::string& out);
  Status append_output(std::string& out, std::string_view text);

  Result<Value> eval(const Expr& e);
  Result<Value> eval_inner(const Expr& e);
  Result<Value> eval_call(const Expr& e, std::vector<std::pair<std::string, Value>> extra_kwargs);
  Result<CallArgs> eval_args(const CallSpec& spec);
  Result<Value> eval_filter(const Expr& e, const Value* input);
  Result<Value> eval_getitem(const Expr& e);
  Result<Value> eval_compare(const Expr& e);
  Result<Value> eval_binary(BinaryOp op, const Value& a, const Value& b);

  Value lookup(std::string_view name) const;
  static bool is_foldable(const Expr& e);
  // Binds the names a scope owns before it assigns them (scopes.h) in the current frame.
  void bind_undefined(const std::vector<std::string>& names);
  Status assign(const Expr& target, const Value& value, Frame& frame);
  Value make_macro(const Stmt& s, const FramePtr& defining_frame, std::string name);
  Result<Value> call_macro(const Stmt& s, const std::weak_ptr<Frame>& scope_frame, CallArgs& args);

  Status locate(const Status& status, uint32_t offset);

  const TemplateAst& ast_;
  const RenderLimits limits_;
  FramePtr frame_;
  Flow flow_ = Flow::kNormal;
  int64_t steps_ = 0;
  int eval_depth_ = 0;
  int call_depth_ = 0;
  bool located_ = false;  // the pending error already says where it happened
  std::vector<std::weak_ptr<Namespace>> namespaces_;
};

}  // namespace ls::jinja
