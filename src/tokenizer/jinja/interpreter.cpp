#include "tokenizer/jinja/interpreter.h"

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/operators.h"

namespace ls::jinja {

Value* Interpreter::Frame::find_local(std::string_view name) {
  for (auto& [k, v] : vars) {
    if (k == name) return &v;
  }
  return nullptr;
}

void Interpreter::Frame::set(std::string_view name, Value value) {
  if (Value* v = find_local(name)) {
    *v = std::move(value);
    return;
  }
  vars.emplace_back(std::string(name), std::move(value));
}

class Interpreter::ScopeGuard {
 public:
  ScopeGuard(Interpreter* interp, FramePtr parent) : interp_(interp), saved_(interp->frame_) {
    auto frame = std::make_shared<Frame>();
    frame->parent = std::move(parent);
    interp_->frame_ = std::move(frame);
  }
  ~ScopeGuard() { interp_->frame_ = std::move(saved_); }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  Interpreter* interp_;
  FramePtr saved_;
};

class Interpreter::DepthGuard {
 public:
  explicit DepthGuard(Interpreter* interp) : interp_(interp) { ++interp_->eval_depth_; }
  ~DepthGuard() { --interp_->eval_depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  Interpreter* interp_;
};

Interpreter::Interpreter(const TemplateAst& ast, const RenderLimits& limits)
    : ast_(ast), limits_(limits) {}

Result<std::string> Interpreter::render(const ValueDict& context) {
  frame_ = std::make_shared<Frame>();
  for (const auto& [k, v] : context.entries()) frame_->set(k, v);
  bind_undefined(ast_.undefined_locals);
  std::string out;
  LS_RETURN_IF_ERROR(exec_list(ast_.body, out));
  frame_.reset();
  return out;
}

Interpreter::~Interpreter() {
  // A namespace may hold itself ({% set ns.me = ns %}); emptying every namespace this render
  // made breaks such cycles so nothing outlives the render.
  for (const auto& weak : namespaces_) {
    if (auto ns = weak.lock()) ns->attrs = ValueDict();
  }
}

void Interpreter::register_namespace(const std::shared_ptr<Namespace>& ns) {
  namespaces_.push_back(ns);
}

// --- services for builtins --------------------------------------------------------------------

Status Interpreter::charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    return resource_exhausted("chat template rendering exceeded {} steps", limits_.max_steps);
  }
  return Status::ok_status();
}

Status Interpreter::check_string_size(size_t num_bytes) const {
  if (static_cast<int64_t>(num_bytes) > limits_.max_output_bytes) {
    return resource_exhausted("chat template built a string larger than {} bytes",
                              limits_.max_output_bytes);
  }
  return Status::ok_status();
}

Status Interpreter::check_list_size(size_t num_items) const {
  if (static_cast<int64_t>(num_items) > limits_.max_container_items) {
    return resource_exhausted("chat template built a list longer than {} items",
                              limits_.max_container_items);
  }
  return Status::ok_status();
}

Status Interpreter::raise_template_error(std::string message) {
  located_ = true;
  return invalid_argument("{}", message);
}

Result<Value> Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) return invalid_argument("{}", callee.undefined_message());
  if (!callee.is_callable()) {
    return invalid_argument("'{}' object is not callable", callee.type_name());
  }
  return callee.get_callable().fn(*this, args);
}

Status Interpreter::locate(const Status& status, uint32_t offset) {
  located_ = true;
  const SourcePosition p = position_of(ast_.source, offset);
  return Status(status.code(), fmt::format("chat template error at line {}, column {}: {}", p.line,
                                           p.column, status.message()));
}

// --- statements ---------------------------------------------------------------------------------

Status Interpreter::append_output(std::string& out, std::string_view text) {
  if (static_cast<int64_t>(out.size() + text.size()) > limits_.max_output_bytes) {
    return resource_exhausted("chat template output exceeds {} bytes", limits_.max_output_bytes);
  }
  out += text;
  return Status::ok_status();
}

Status Interpreter::exec_list(const StmtList& body, std::string& out) {
  for (const auto& s : body) {
    LS_RETURN_IF_ERROR(exec(*s, out));
    if (flow_ != Flow::kNormal) break;
  }
  return Status::ok_status();
}

Status Interpreter::render_to_string(const StmtList& body, std::string& out) {
  LS_RETURN_IF_ERROR(exec_list(body, out));
  flow_ = Flow::kNormal;
  return Status::ok_status();
}

Status Interpreter::exec(const Stmt& s, std::string& out) {
  DepthGuard depth(this);
  if (eval_depth_ > limits_.max_eval_depth) {
    return locate(resource_exhausted("chat template nested too deeply"), s.offset);
  }
  LS_RETURN_IF_ERROR(charge(1));
  Status st;
  switch (s.kind) {
    case StmtKind::kText:
      return append_output(out, s.text);
    case StmtKind::kPrint: {
      LS_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
      return append_output(out, v.is_string() ? v.get_string() : to_str(v));
    }
    case StmtKind::kIf: {
      LS_ASSIGN_OR_RETURN(Value test, eval(*s.expr));
      return exec_list(test.truthy() ? s.body : s.else_body, out);
    }
    case StmtKind::kFor:
      return exec_for(s, out);
    case StmtKind::kSet: {
      LS_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
      st = assign(*s.target, v, *frame_);
      break;
    }
    case StmtKind::kSetBlock: {
      Value v;
      {
        ScopeGuard scope(this, frame_);
        bind_undefined(s.undefined_locals);
        std::string text;
        LS_RETURN_IF_ERROR(render_to_string(s.body, text));
        v = Value(std::move(text));
        if (s.filter) {
          LS_ASSIGN_OR_RETURN(v, eval_filter(*s.filter, &v));
        }
      }
      st = assign(*s.target, v, *frame_);
      break;
    }
    case StmtKind::kMacro:
      frame_->set(s.name, make_macro(s, frame_, s.name));
      return Status::ok_status();
    case StmtKind::kCallBlock:
      return exec_call_block(s, out);
    case StmtKind::kFilterBlock: {
      ScopeGuard scope(this, frame_);
      bind_undefined(s.undefined_locals);
      std::string text;
      LS_RETURN_IF_ERROR(render_to_string(s.body, text));
      Value v(std::move(text));
      LS_ASSIGN_OR_RETURN(Value filtered, eval_filter(*s.filter, &v));
      return append_output(out, to_str(filtered));
    }
    case StmtKind::kWith: {
      std::vector<Value> values;
      for (const auto& e : s.values) {
        LS_ASSIGN_OR_RETURN(Value v, eval(*e));
        values.push_back(std::move(v));
      }
      ScopeGuard scope(this, frame_);
      bind_undefined(s.undefined_locals);
      for (size_t i = 0; i < s.targets.size(); ++i) {
        LS_RETURN_IF_ERROR(assign(*s.targets[i], values[i], *frame_));
      }
      return exec_list(s.body, out);
    }
    case StmtKind::kScope: {
      ScopeGuard scope(this, frame_);
      bind_undefined(s.undefined_locals);
      return exec_list(s.body, out);
    }
    case StmtKind::kBreak:
      flow_ = Flow::kBreak;
      return Status::ok_status();
    case StmtKind::kContinue:
      flow_ = Flow::kContinue;
      return Status::ok_status();
  }
  if (!st.ok() && !located_) return locate(st, s.offset);
  return st;
}

Status Interpreter::exec_for(const Stmt& s, std::string& out) {
  LS_ASSIGN_OR_RETURN(Value iterable, eval(*s.expr));
  auto listed = iterate(iterable);
  if (!listed.ok()) return locate(listed.status(), s.expr->offset);
  ValueList items = std::move(listed).value();
  if (s.filter) {
    // The condition sees the loop target but not `loop`, and loop.length counts what passes.
    ValueList kept;
    for (Value& item : items) {
      LS_RETURN_IF_ERROR(charge(1));
      ScopeGuard scope(this, frame_);
      LS_RETURN_IF_ERROR(assign(*s.target, item, *frame_));
      LS_ASSIGN_OR_RETURN(Value pass, eval(*s.filter));
      if (pass.truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    ScopeGuard scope(this, frame_);
    bind_undefined(s.else_undefined_locals);
    return exec_list(s.else_body, out);
  }
  const auto length = static_cast<int64_t>(items.size());
  const FramePtr outer = frame_;
  for (int64_t i = 0; i < length; ++i) {
    LS_RETURN_IF_ERROR(charge(1));
    ScopeGuard scope(this, outer);
    bind_undefined(s.undefined_locals);
    LS_RETURN_IF_ERROR(assign(*s.target, items[static_cast<size_t>(i)], *frame_));
    ValueDict loop;
    loop.set("index", Value(i + 1));
    loop.set("index0", Value(i));
    loop.set("revindex", Value(length - i));
    loop.set("revindex0", Value(length - i - 1));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == length - 1));
    loop.set("length", Value(length));
    loop.set("depth", Value(1));
    loop.set("depth0", Value(0));
    loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                               : Value::undefined("there is no previous item"));
    loop.set("nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)]
                                        : Value::undefined("there is no next item"));
    loop.set("cycle", Value::callable("cycle", [i](Interpreter&, CallArgs& args) -> Result<Value> {
               if (args.positional.empty()) return invalid_argument("no items for cycling given");
               return args.positional[static_cast<size_t>(i) % args.positional.size()];
             }));
    frame_->set("loop", Value::dict(std::move(loop)));
    LS_RETURN_IF_ERROR(exec_list(s.body, out));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  return Status::ok_status();
}

Status Interpreter::exec_call_block(const Stmt& s, std::string& out) {
  // `caller` renders the call block's body with its parameters, in the scope around the block.
  const Stmt* block = &s;
  Value caller = Value::callable(
      "caller", [block, site = std::weak_ptr<Frame>(frame_)](Interpreter& interp, CallArgs& args) {
        return interp.call_macro(*block, site, args);
      });
  LS_ASSIGN_OR_RETURN(Value result, eval_call(*s.expr, {{"caller", std::move(caller)}}));
  return append_output(out, to_str(result));
}

Value Interpreter::make_macro(const Stmt& s, const FramePtr& defining_frame, std::string name) {
  // The frame is held weakly: it holds the macro, and a strong reference would be a cycle.
  const Stmt* macro = &s;
  return Value::callable(std::move(name), [macro, scope = std::weak_ptr<Frame>(defining_frame)](
                                              Interpreter& interp, CallArgs& args) {
    return interp.call_macro(*macro, scope, args);
  });
}

Result<Value> Interpreter::call_macro(const Stmt& s, const std::weak_ptr<Frame>& scope_frame,
                                      CallArgs& args) {
  FramePtr defining_frame = scope_frame.lock();
  if (!defining_frame) {
    return failed_precondition("macro '{}' called after the scope it was defined in ended", s.name);
  }
  if (call_depth_ >= limits_.max_call_depth) {
    return resource_exhausted("macro calls nested deeper than {}", limits_.max_call_depth);
  }
  ++call_depth_;
  ScopeGuard scope(this, std::move(defining_frame));
  bind_undefined(s.undefined_locals);
  Status st = [&]() -> Status {
    const size_t num_params = s.params.size();
    const size_t first_default = num_params - s.defaults.size();
    ValueList varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < num_params) {
        frame_->set(s.params[i], args.positional[i]);
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    ValueDict kwargs;
    for (auto& [k, v] : args.keyword) {
      bool is_param = false;
      for (size_t i = 0; i < num_params; ++i) {
        if (s.params[i] != k) continue;
        if (i < args.positional.size()) {
          return invalid_argument("macro '{}' got multiple values for argument '{}'", s.name, k);
        }
        is_param = true;
      }
      if (is_param || k == "caller") {
        frame_->set(k, v);
      } else {
        kwargs.set(k, v);
      }
    }
    for (size_t i = 0; i < num_params; ++i) {
      if (frame_->find_local(s.params[i]) != nullptr) continue;
      if (i >= first_default) {
        LS_ASSIGN_OR_RETURN(Value d, eval(*s.defaults[i - first_default]));
        frame_->set(s.params[i], std::move(d));
      } else {
        frame_->set(s.params[i],
                    Value::undefined(fmt::format("parameter '{}' was not provided", s.params[i])));
      }
    }
    frame_->set("varargs", Value::tuple(std::move(varargs)));
    frame_->set("kwargs", Value::dict(std::move(kwargs)));
    return Status::ok_status();
  }();
  std::string text;
  if (st.ok()) st = render_to_string(s.body, text);
  --call_depth_;
  if (!st.ok()) return st;
  return Value(std::move(text));
}

void Interpreter::bind_undefined(const std::vector<std::string>& names) {
  for (const auto& name : names) {
    frame_->set(name, Value::undefined(fmt::format("'{}' is undefined", name)));
  }
}

Status Interpreter::assign(const Expr& target, const Value& value, Frame& frame) {
  switch (target.kind) {
    case ExprKind::kName:
      frame.set(target.name, value);
      return Status::ok_status();
    case ExprKind::kNsRef: {
      const Value ns = lookup(target.name);
      if (!ns.is_namespace()) {
        return invalid_argument("cannot assign attribute on non-namespace object");
      }
      ns.get_namespace().attrs.set(target.attr, value);
      return Status::ok_status();
    }
    case ExprKind::kTuple: {
      LS_ASSIGN_OR_RETURN(ValueList items, iterate(value));
      const size_t n = target.items.size();
      if (items.size() < n) {
        return invalid_argument("not enough values to unpack (expected {}, got {})", n,
                                items.size());
      }
      if (items.size() > n) return invalid_argument("too many values to unpack (expected {})", n);
      for (size_t i = 0; i < n; ++i) LS_RETURN_IF_ERROR(assign(*target.items[i], items[i], frame));
      return Status::ok_status();
    }
    default:
      return internal_error("invalid assignment target");
  }
}

// --- expressions --------------------------------------------------------------------------------

// Whether jinja2's optimizer would fold the expression to a constant (it has no names and no
// calls); the approximation matters only for the `-2 ** x` quirk above.
bool Interpreter::is_foldable(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kName:
    case ExprKind::kCall:
    case ExprKind::kNsRef:
      return false;
    default:
      break;
  }
  for (const Expr* child :
       {e.a.get(), e.b.get(), e.c.get(), e.call.dyn_args.get(), e.call.dyn_kwargs.get()}) {
    if (child != nullptr && !is_foldable(*child)) return false;
  }
  for (const auto& item : e.items) {
    if (!is_foldable(*item)) return false;
  }
  for (const auto& [k, v] : e.pairs) {
    if (!is_foldable(*k) || !is_foldable(*v)) return false;
  }
  for (const auto& arg : e.call.args) {
    if (!is_foldable(*arg)) return false;
  }
  for (const auto& kw : e.call.kwargs) {
    if (!is_foldable(*kw.value)) return false;
  }
  return true;
}

Value Interpreter::lookup(std::string_view name) const {
  for (const Frame* f = frame_.get(); f != nullptr; f = f->parent.get()) {
    for (const auto& [k, v] : f->vars) {
      if (k == name) return v;
    }
  }
  if (const Value* g = find_global(name)) return *g;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Result<Value> Interpreter::eval(const Expr& e) {
  DepthGuard depth(this);
  if (eval_depth_ > limits_.max_eval_depth) {
    return locate(resource_exhausted("chat template nested too deeply"), e.offset);
  }
  if (Status st = charge(1); !st.ok()) return st;
  auto result = eval_inner(e);
  if (!result.ok() && !located_) return locate(result.status(), e.offset);
  return result;
}

Result<Value> Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.constant;
    case ExprKind::kName:
      return lookup(e.name);
    case ExprKind::kGetattr: {
      LS_ASSIGN_OR_RETURN(Value obj, eval(*e.a));
      if (obj.is_undefined()) return invalid_argument("{}", obj.undefined_message());
      return get_attribute(obj, e.name);
    }
    case ExprKind::kGetitem:
      return eval_getitem(e);
    case ExprKind::kCall:
      return eval_call(e, {});
    case ExprKind::kFilter:
      return eval_filter(e, nullptr);
    case ExprKind::kTest: {
      if (e.test == nullptr) return invalid_argument("No test named '{}' found.", e.name);
      LS_ASSIGN_OR_RETURN(Value v, eval(*e.a));
      LS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e.call));
      LS_ASSIGN_OR_RETURN(bool r, e.test(*this, v, args));
      return Value(r);
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      LS_ASSIGN_OR_RETURN(Value v, eval(*e.a));
      if (v.is_undefined()) return invalid_argument("{}", v.undefined_message());
      return e.kind == ExprKind::kNeg ? apply_negate(v) : apply_plus(v);
    }
    case ExprKind::kNot: {
      LS_ASSIGN_OR_RETURN(Value v, eval(*e.a));
      return Value(!v.truthy());
    }
    case ExprKind::kBinary: {
      LS_ASSIGN_OR_RETURN(Value a, eval(*e.a));
      LS_ASSIGN_OR_RETURN(Value b, eval(*e.b));
      if (a.is_undefined()) return invalid_argument("{}", a.undefined_message());
      // str % Undefined is Python string formatting, which takes Undefined as an argument.
      const bool formatting = e.binary_op == BinaryOp::kMod && a.is_string();
      if (b.is_undefined() && !formatting) return invalid_argument("{}", b.undefined_message());
      if (e.binary_op == BinaryOp::kAdd && a.is_string() && b.is_string() && !a.is_markup() &&
          !b.is_markup()) {
        // Chains like 'a' + x + 'b' + y append to the running temporary instead of copying it.
        LS_RETURN_IF_ERROR(check_string_size(a.get_string().size() + b.get_string().size()));
        std::string joined = std::move(a).release_string();
        joined += b.get_string();
        return Value(std::move(joined));
      }
      // jinja2 folds `-2` into the constant -2 and prints it into Python source, where
      // `-2 ** x` means -(2 ** x): with a non-constant exponent that is what HF computes.
      if (e.binary_op == BinaryOp::kPow && e.a->kind == ExprKind::kNeg &&
          e.a->a->kind == ExprKind::kConst && e.a->a->constant.is_number() && !is_foldable(*e.b)) {
        LS_ASSIGN_OR_RETURN(Value magnitude,
                            apply_binary(*this, BinaryOp::kPow, e.a->a->constant, b));
        return apply_negate(magnitude);
      }
      return apply_binary(*this, e.binary_op, a, b);
    }
    case ExprKind::kAnd: {
      LS_ASSIGN_OR_RETURN(Value a, eval(*e.a));
      if (!a.truthy()) return a;
      return eval(*e.b);
    }
    case ExprKind::kOr: {
      LS_ASSIGN_OR_RETURN(Value a, eval(*e.a));
      if (a.truthy()) return a;
      return eval(*e.b);
    }
    case ExprKind::kCompare:
      return eval_compare(e);
    case ExprKind::kConcat: {
      std::string out;
      for (const auto& item : e.items) {
        LS_ASSIGN_OR_RETURN(Value v, eval(*item));
        out += v.is_string() ? v.get_string() : to_str(v);
        LS_RETURN_IF_ERROR(check_string_size(out.size()));
      }
      return Value(std::move(out));
    }
    case ExprKind::kCondExpr: {
      LS_ASSIGN_OR_RETURN(Value test, eval(*e.a));
      if (test.truthy()) return eval(*e.b);
      if (e.c) return eval(*e.c);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else section was defined.");
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      items.reserve(e.items.size());
      for (const auto& item : e.items) {
        LS_ASSIGN_OR_RETURN(Value v, eval(*item));
        items.push_back(std::move(v));
      }
      return e.kind == ExprKind::kList ? Value::list(std::move(items))
                                       : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      ValueDict dict;
      for (const auto& [k, v] : e.pairs) {
        LS_ASSIGN_OR_RETURN(Value key, eval(*k));
        std::optional<std::string> stored = dict_key(key);
        if (!stored) {
          return unimplemented("dict keys must be strings or integers in chat templates, got {}",
                               key.type_name());
        }
        LS_ASSIGN_OR_RETURN(Value value, eval(*v));
        dict.set(std::move(*stored), std::move(value));
      }
      return Value::dict(std::move(dict));
    }
    case ExprKind::kSlice:
    case ExprKind::kNsRef:
      return internal_error("unexpected expression node");
  }
  return internal_error("unknown expression node");
}

Result<Value> Interpreter::eval_getitem(const Expr& e) {
  LS_ASSIGN_OR_RETURN(Value obj, eval(*e.a));
  if (obj.is_undefined()) return invalid_argument("{}", obj.undefined_message());
  if (e.b->kind == ExprKind::kSlice) {
    Value bounds[3] = {Value::none(), Value::none(), Value::none()};
    const Expr* parts[3] = {e.b->a.get(), e.b->b.get(), e.b->c.get()};
    for (int i = 0; i < 3; ++i) {
      if (parts[i] != nullptr) {
        LS_ASSIGN_OR_RETURN(bounds[i], eval(*parts[i]));
      }
    }
    LS_RETURN_IF_ERROR(charge(obj.is_list() ? static_cast<int64_t>(obj.get_list().size()) : 1));
    return slice_value(obj, bounds[0], bounds[1], bounds[2]);
  }
  LS_ASSIGN_OR_RETURN(Value key, eval(*e.b));
  return get_item(obj, key);
}

Result<CallArgs> Interpreter::eval_args(const CallSpec& spec) {
  CallArgs args;
  for (const auto& a : spec.args) {
    LS_ASSIGN_OR_RETURN(Value v, eval(*a));
    args.positional.push_back(std::move(v));
  }
  for (const auto& kw : spec.kwargs) {
    LS_ASSIGN_OR_RETURN(Value v, eval(*kw.value));
    args.keyword.emplace_back(kw.name, std::move(v));
  }
  if (spec.dyn_args) {
    LS_ASSIGN_OR_RETURN(Value v, eval(*spec.dyn_args));
    LS_ASSIGN_OR_RETURN(ValueList items, iterate(v));
    for (auto& item : items) args.positional.push_back(std::move(item));
  }
  if (spec.dyn_kwargs) {
    LS_ASSIGN_OR_RETURN(Value v, eval(*spec.dyn_kwargs));
    if (!v.is_dict()) return invalid_argument("argument after ** must be a mapping");
    for (const auto& [k, item] : v.get_dict().entries()) args.keyword.emplace_back(k, item);
  }
  return args;
}

Result<Value> Interpreter::eval_call(const Expr& e,
                                     std::vector<std::pair<std::string, Value>> extra_kwargs) {
  LS_ASSIGN_OR_RETURN(Value callee, eval(*e.a));
  LS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e.call));
  for (auto& kw : extra_kwargs) args.keyword.push_back(std::move(kw));
  return call(callee, args);
}

Result<Value> Interpreter::eval_filter(const Expr& e, const Value* input) {
  if (e.filter == nullptr) {
    return locate(invalid_argument("No filter named '{}' found.", e.name), e.offset);
  }
  Value operand;
  if (e.a) {
    // A chain inside {% filter %} / {% set x | f %} bottoms out in the block's text.
    LS_ASSIGN_OR_RETURN(operand,
                        e.a->kind == ExprKind::kFilter ? eval_filter(*e.a, input) : eval(*e.a));
  } else if (input != nullptr) {
    operand = *input;
  }
  LS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e.call));
  auto result = e.filter(*this, operand, args);
  if (!result.ok() && !located_) return locate(result.status(), e.offset);
  return result;
}

Result<Value> Interpreter::eval_compare(const Expr& e) {
  static constexpr std::string_view kSymbols[] = {"==", "!=", "<", "<=", ">", ">="};
  LS_ASSIGN_OR_RETURN(Value lhs, eval(*e.items[0]));
  for (size_t i = 0; i < e.compare_ops.size(); ++i) {
    LS_ASSIGN_OR_RETURN(Value rhs, eval(*e.items[i + 1]));
    const CompareOp op = e.compare_ops[i];
    bool r = false;
    switch (op) {
      case CompareOp::kEq:
        r = values_equal(lhs, rhs);
        break;
      case CompareOp::kNe:
        r = !values_equal(lhs, rhs);
        break;
      case CompareOp::kIn:
      case CompareOp::kNotIn: {
        LS_ASSIGN_OR_RETURN(bool in, contains(rhs, lhs));
        r = op == CompareOp::kIn ? in : !in;
        break;
      }
      default: {
        if (lhs.is_undefined()) return invalid_argument("{}", lhs.undefined_message());
        if (rhs.is_undefined()) return invalid_argument("{}", rhs.undefined_message());
        LS_ASSIGN_OR_RETURN(int c, compare_values(lhs, rhs, kSymbols[static_cast<int>(op)]));
        r = op == CompareOp::kLt   ? c < 0
            : op == CompareOp::kLe ? c <= 0
            : op == CompareOp::kGt ? c > 0
                                   : c >= 0;
      }
    }
    if (!r) return Value(false);
    lhs = std::move(rhs);
  }
  return Value(true);
}

}  // namespace ls::jinja
