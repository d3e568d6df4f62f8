// sinkq/tokenizer/chat_template.cc — the chat-template renderer: statements, expressions, scopes,
// macros and limits (see chat_template.h). The parts: Python str semantics (jinja_pystr), values and
// their operators (jinja_value, jinja_ops), lexer and parser (jinja_lex, jinja_parse; tree in
// jinja_ast.h), filters and tests (jinja_filters), methods and globals (jinja_methods).
//
// Scopes follow jinja2: the top level holds the caller's variables and the template's own {% set %}s;
// each for-loop iteration, macro call, {% with %}, {% filter %} / block set body and
// {% generation %} gets a child scope, so a {% set %} inside a loop is gone after the iteration
// (templates use namespace() to carry state out); {% if %} makes no scope.
#include "tokenizer/chat_template.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_value.h"
#include "tokenizer/utf8.h"

namespace sinkq {

namespace jinja {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get())
      for (const auto& [k, v] : s->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, x] : vars)
      if (k == name) {
        x = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

namespace {

using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

ScopePtr child_of(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

class Renderer {
 public:
  Renderer(const ChatTemplate::Limits& limits, BuiltinContext& ctx, ScopePtr top)
      : limits_(limits), ctx_(ctx), top_(std::move(top)) {}

  void run(const Body& body, std::string& out) {
    out_ = &out;
    exec(body, top_);
  }

 private:
  // ----------------------------------------------------------------------------- output
  void emit(std::string_view s) {
    if (out_->size() + s.size() > limits_.max_output_bytes)
      throw Failure(fmt::format("the output would exceed {} bytes (the limit)", limits_.max_output_bytes));
    out_->append(s);
  }

  // Renders body into a string of its own (macro calls, block set, filter blocks).
  std::string capture(const Body& body, const ScopePtr& scope) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
      exec(body, scope);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buf;
  }

  // -------------------------------------------------------------------------- statements
  Flow exec(const Body& body, const ScopePtr& scope) {
    for (const NodePtr& n : body) {
      Flow f;
      try {
        f = exec_node(*n, scope);
      } catch (Failure& e) {
        if (e.pos == kNoPos) e.pos = n->pos;
        throw;
      }
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec_node(const Node& n, const ScopePtr& scope) {
    switch (n.kind) {
      case NodeKind::Text: emit(n.text); return Flow::Normal;
      case NodeKind::Print:
        if (n.expr) emit(to_str(eval(*n.expr, scope)));
        for (const ExprPtr& v : n.values) emit(to_str(eval(*v, scope)));  // {% print a, b %}
        return Flow::Normal;
      case NodeKind::If:
        for (size_t i = 0; i < n.tests.size(); ++i)
          if (truthy(eval(*n.tests[i], scope))) return exec(n.bodies[i], scope);
        return exec(n.else_body, scope);
      case NodeKind::For: return exec_for(n, scope);
      case NodeKind::Set: assign(n.target, eval(*n.expr, scope), *scope); return Flow::Normal;
      case NodeKind::SetBlock: {
        Value v = Value::string(capture(n.body, child_of(scope)));
        assign(n.target, apply_filters(n.filters, std::move(v), scope), *scope);
        return Flow::Normal;
      }
      case NodeKind::Macro: {
        Callable c{Callable::Kind::Macro, n.macro->name, Value(), n.macro.get(), scope};
        scope->set(n.macro->name, Value::callable(std::move(c)));
        return Flow::Normal;
      }
      case NodeKind::FilterBlock: {
        Value v = Value::string(capture(n.body, child_of(scope)));
        emit(to_str(apply_filters(n.filters, std::move(v), scope)));
        return Flow::Normal;
      }
      case NodeKind::With: {
        ScopePtr inner = child_of(scope);
        for (size_t i = 0; i < n.targets.size(); ++i) assign(n.targets[i], eval(*n.values[i], scope), *inner);
        return exec(n.body, inner);
      }
      case NodeKind::Scope: return exec(n.body, child_of(scope));
      case NodeKind::Break: return Flow::Break;
      case NodeKind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  Value make_loop(const ValueList& items, size_t i) {
    const auto n = static_cast<int64_t>(items.size());
    const auto k = static_cast<int64_t>(i);
    auto loop = std::make_shared<NamespaceData>();
    loop->loop = true;
    DictData& a = loop->attrs;
    auto set = [&](const char* name, Value v) { a.set(Value::string(name), std::move(v)); };
    set("index", Value::integer(k + 1));
    set("index0", Value::integer(k));
    set("revindex", Value::integer(n - k));
    set("revindex0", Value::integer(n - k - 1));
    set("first", Value::boolean(k == 0));
    set("last", Value::boolean(k == n - 1));
    set("length", Value::integer(n));
    set("depth", Value::integer(1));
    set("depth0", Value::integer(0));
    set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    set("nextitem", i + 1 < items.size() ? items[i + 1] : Value::undefined("there is no next item"));
    set("cycle", Value::callable(Callable{Callable::Kind::Method, "cycle", Value::integer(k), nullptr, {}}));
    return Value::ns(std::move(loop));
  }

  Flow exec_for(const Node& n, const ScopePtr& scope) {
    ValueList items;
    try {
      items = iterate(eval(*n.expr, scope));
    } catch (Failure& f) {
      if (f.pos == kNoPos) f.pos = n.expr->pos;
      throw;
    }
    if (n.cond) {
      ValueList kept;
      for (Value& item : items) {
        budget().step();
        ScopePtr s = child_of(scope);
        assign(n.target, item, *s);
        if (truthy(eval(*n.cond, s))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(n.else_body, child_of(scope));
      return Flow::Normal;
    }
    for (size_t i = 0; i < items.size(); ++i) {
      budget().step();
      ScopePtr s = child_of(scope);
      assign(n.target, items[i], *s);
      s->set("loop", make_loop(items, i));
      if (exec(n.body, s) == Flow::Break) break;
    }
    return Flow::Normal;
  }

  void assign(const Target& t, const Value& v, Scope& scope) {
    switch (t.kind) {
      case Target::Kind::Name: scope.set(t.name, v); return;
      case Target::Kind::Tuple: {
        if (v.is_undefined()) undefined_error(v);
        const ValueList items = iterate(v);
        if (items.size() > t.items.size())
          raise("ValueError", fmt::format("too many values to unpack (expected {})", t.items.size()));
        if (items.size() < t.items.size())
          raise("ValueError", fmt::format("not enough values to unpack (expected {}, got {})", t.items.size(), items.size()));
        for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i], scope);
        return;
      }
      case Target::Kind::Attr: {
        const Value* ns = scope.find(t.name);
        if (!ns || !ns->is_ns() || ns->ns().loop)
          raise("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
        ns->ns().attrs.set(Value::string(t.attr), v);
        budget().charge(2 * sizeof(Value));
        return;
      }
    }
  }

  Value apply_filters(const std::vector<ExprPtr>& filters, Value v, const ScopePtr& scope) {
    for (const ExprPtr& f : filters) v = call_filter_expr(*f, std::move(v), scope);
    return v;
  }

  // ------------------------------------------------------------------------- expressions
  Value eval(const Expr& e, const ScopePtr& scope) {
    try {
      return eval_inner(e, scope);
    } catch (Failure& f) {
      if (f.pos == kNoPos) f.pos = e.pos;
      throw;
    }
  }

  Value lookup(const std::string& name, const ScopePtr& scope) {
    if (const Value* v = scope->find(name)) return *v;
    return global_function(name);
  }

  CallArgs eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i], scope));
    for (const Keyword& k : e.kwargs) a.kw.emplace_back(k.name, eval(*k.value, scope));
    return a;
  }

  Value call_filter_expr(const Expr& e, Value input, const ScopePtr& scope) {
    CallArgs a = eval_args(e, 1, scope);
    try {
      return call_filter(e.builtin, input, a, ctx_);
    } catch (Failure& f) {
      if (f.pos == kNoPos) f.pos = e.pos;
      throw;
    }
  }

  Value call(const Value& callee, CallArgs& a) {
    if (callee.is_undefined()) undefined_error(callee);
    if (!callee.is_callable()) raise("TypeError", fmt::format("'{}' object is not callable", type_name(callee)));
    const Callable& c = callee.call();
    switch (c.kind) {
      case Callable::Kind::Macro: return call_macro(c, a);
      case Callable::Kind::Method: return call_method(c.self, c.name, a);
      case Callable::Kind::Global: return call_global(c.name, a, ctx_);
    }
    return Value();
  }

  Value call_macro(const Callable& c, CallArgs& a) {
    const MacroNode& m = *c.macro;
    budget().step();
    if (depth_ >= limits_.max_call_depth)
      throw Failure(fmt::format("macro calls nest deeper than {} (the limit)", limits_.max_call_depth));
    ScopePtr closure = c.closure.lock();
    ScopePtr s = child_of(closure ? closure : top_);
    if (a.pos.size() > m.params.size())
      raise("TypeError", fmt::format("macro '{}' takes not more than {} argument(s)", m.name, m.params.size()));
    std::vector<const Value*> given(m.params.size(), nullptr);
    for (size_t i = 0; i < a.pos.size(); ++i) given[i] = &a.pos[i];
    for (const auto& [k, v] : a.kw) {
      size_t i = 0;
      while (i < m.params.size() && m.params[i].name != k) ++i;
      if (i == m.params.size()) raise("TypeError", fmt::format("macro '{}' takes no keyword argument '{}'", m.name, k));
      if (given[i]) raise("TypeError", fmt::format("macro '{}' got multiple values for argument '{}'", m.name, k));
      given[i] = &v;
    }
    for (size_t i = 0; i < m.params.size(); ++i) {
      const MacroParam& p = m.params[i];
      if (given[i]) {
        s->set(p.name, *given[i]);
      } else if (p.default_value) {
        s->set(p.name, eval(*p.default_value, s));
      } else {
        s->set(p.name, Value::undefined(fmt::format("parameter '{}' was not provided", p.name)));
      }
    }
    ++depth_;
    std::string out;
    try {
      out = capture(m.body, s);
    } catch (...) {
      --depth_;
      throw;
    }
    --depth_;
    return Value::string(std::move(out));
  }

  bool compare_op(CmpOp op, const Value& a, const Value& b) {
    switch (op) {
      case CmpOp::Eq: return equals(a, b);
      case CmpOp::Ne: return !equals(a, b);
      case CmpOp::Lt: return compare(a, b, "<") == -1;
      case CmpOp::Gt: return compare(a, b, ">") == 1;
      case CmpOp::Le: {
        const int c = compare(a, b, "<=");
        return c != kUnordered && c <= 0;
      }
      case CmpOp::Ge: {
        const int c = compare(a, b, ">=");
        return c != kUnordered && c >= 0;
      }
      case CmpOp::In: return contains(b, a);
      case CmpOp::NotIn: return !contains(b, a);
    }
    return false;
  }

  Value eval_inner(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case ExprKind::Const: return e.value;
      case ExprKind::Name: return lookup(e.name, scope);
      case ExprKind::List:
      case ExprKind::Tuple: {
        ValueList items;
        items.reserve(e.args.size());
        for (const ExprPtr& x : e.args) items.push_back(eval(*x, scope));
        return Value::list(std::move(items), e.kind == ExprKind::Tuple);
      }
      case ExprKind::Dict: {
        DictData d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i], scope);
          if ((k.is_list() && !k.list().tuple) || k.is_dict() || k.is_ns())
            raise("TypeError", fmt::format("unhashable type: '{}'", type_name(k)));
          d.set(std::move(k), eval(*e.args[i + 1], scope));
        }
        return Value::dict(std::move(d));
      }
      case ExprKind::Attr: return getattr(eval(*e.args[0], scope), e.name);
      case ExprKind::Item: return getitem(eval(*e.args[0], scope), eval(*e.args[1], scope));
      case ExprKind::Slice: {
        Value obj = eval(*e.args[0], scope);
        auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i], scope) : Value::none(); };
        return slice(obj, part(1), part(2), part(3));
      }
      case ExprKind::Call: {
        Value callee = eval(*e.args[0], scope);
        CallArgs a = eval_args(e, 1, scope);
        return call(callee, a);
      }
      case ExprKind::Filter: return call_filter_expr(e, eval(*e.args[0], scope), scope);
      case ExprKind::Test: {
        Value input = eval(*e.args[0], scope);
        CallArgs a = eval_args(e, 1, scope);
        return Value::boolean(call_test(e.builtin, input, a) != e.negated);
      }
      case ExprKind::Neg: return negate(eval(*e.args[0], scope));
      case ExprKind::Pos: return unary_plus(eval(*e.args[0], scope));
      case ExprKind::Not: return Value::boolean(!truthy(eval(*e.args[0], scope)));
      case ExprKind::Binary: {
        Value a = eval(*e.args[0], scope);
        return binary(e.op, a, eval(*e.args[1], scope));
      }
      case ExprKind::Concat: {
        Value a = eval(*e.args[0], scope);
        return concat(a, eval(*e.args[1], scope));
      }
      case ExprKind::And: {
        Value a = eval(*e.args[0], scope);
        return truthy(a) ? eval(*e.args[1], scope) : a;
      }
      case ExprKind::Or: {
        Value a = eval(*e.args[0], scope);
        return truthy(a) ? a : eval(*e.args[1], scope);
      }
      case ExprKind::Compare: {
        Value left = eval(*e.args[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1], scope);
          if (!compare_op(e.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::Cond:
        if (truthy(eval(*e.args[1], scope))) return eval(*e.args[0], scope);
        if (e.args[2]) return eval(*e.args[2], scope);
        return Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
    }
    return Value();
  }

  const ChatTemplate::Limits& limits_;
  BuiltinContext& ctx_;
  ScopePtr top_;
  std::string* out_ = nullptr;
  int depth_ = 0;
};

}  // namespace
}  // namespace jinja

// ------------------------------------------------------------------------------ ChatTemplate

struct ChatTemplate::Impl {
  std::string source;
  std::string text;  // normalised (error positions refer to it)
  jinja::Body body;

  [[noreturn]] void rethrow(const jinja::Failure& f) const {
    if (f.kind == jinja::Failure::Kind::Refused) fail("{}: the chat template refused: {}", source, f.message);
    if (f.pos == jinja::kNoPos) fail("{}: {}", source, f.message);
    const auto [line, col] = jinja::line_col(text, f.pos);
    fail("{}:{}:{}: {}", source, line, col, f.message);
  }

  template <class Json>
  std::string render(const Json& vars, const Options& opt) const {
    using namespace jinja;
    SINKQ_CHECK(vars.is_object(), "{}: the chat template's variables must be a JSON object, got {}", source,
                vars.type_name());
    Budget b;
    b.max_string_bytes = opt.limits.max_output_bytes;
    b.max_steps = opt.limits.max_steps;
    b.max_work_bytes = opt.limits.max_work_bytes;
    b.max_nesting = opt.limits.max_nesting;
    BudgetScope budget_scope(b);

    std::vector<std::shared_ptr<NamespaceData>> namespaces;
    BuiltinContext ctx;
    ctx.namespaces = &namespaces;
    if (opt.now) {
      ctx.now = *opt.now;
    } else {
      const std::time_t t = std::time(nullptr);
      localtime_r(&t, &ctx.now);
    }
    // Empties every namespace() at the end: breaks any reference cycle or long chain through them.
    struct Release {
      std::vector<std::shared_ptr<NamespaceData>>& ns;
      ~Release() {
        for (auto& n : ns) n->attrs = DictData();
      }
    } release{namespaces};

    try {
      auto top = std::make_shared<Scope>();
      for (auto it = vars.begin(); it != vars.end(); ++it) top->set(it.key(), from_json(it.value()));
      std::string out;
      Renderer r(opt.limits, ctx, top);
      r.run(body, out);
      return out;
    } catch (const Failure& f) {
      rethrow(f);
    }
  }
};

ChatTemplate::ChatTemplate(std::string_view text, std::string source) {
  auto impl = std::make_shared<Impl>();
  impl->source = std::move(source);
  // Python reads the template as a str: it must be valid UTF-8.
  SINKQ_CHECK(tok::is_valid_utf8(text), "{}: the chat template is not valid UTF-8", impl->source);
  impl->text = jinja::normalize_newlines(text);
  jinja::Budget budget;  // string literals are values too: charged to this parse, not to the thread
  jinja::BudgetScope budget_scope(budget);
  try {
    impl->body = jinja::parse_template(impl->text);
  } catch (const jinja::Failure& f) {
    impl->rethrow(f);
  }
  impl_ = std::move(impl);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::json& vars) const { return impl_->render(vars, Options()); }
std::string ChatTemplate::render(const nlohmann::ordered_json& vars) const { return impl_->render(vars, Options()); }
std::string ChatTemplate::render(const nlohmann::json& vars, const Options& opt) const { return impl_->render(vars, opt); }

std::string ChatTemplate::render(const nlohmann::ordered_json& vars, const Options& opt) const {
  return impl_->render(vars, opt);
}

const std::string& ChatTemplate::source() const { return impl_->source; }

}  // namespace sinkq
