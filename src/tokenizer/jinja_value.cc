// sinkq/tokenizer/jinja_value.cc — chat-template values: construction, conversion from JSON,
// truth, str()/repr() and json.dumps (operators and attribute access: jinja_ops.cc).
#include "tokenizer/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "tokenizer/jinja_pystr.h"

namespace sinkq::jinja {

// ------------------------------------------------------------------------------------- budget

namespace {
thread_local Budget* g_budget = nullptr;
}  // namespace

Budget& budget() {
  if (g_budget) return *g_budget;
  thread_local Budget fallback;
  return fallback;
}

BudgetScope::BudgetScope(Budget& b) : saved_(g_budget) { g_budget = &b; }
BudgetScope::~BudgetScope() { g_budget = saved_; }

void Budget::step() {
  if (++steps > max_steps)
    throw Failure(fmt::format("the template ran more than {} loop iterations and macro calls (the limit)", max_steps));
}

void Budget::check_string(size_t bytes) const {
  if (bytes > max_string_bytes)
    throw Failure(fmt::format("the template built a string longer than {} bytes (the limit)", max_string_bytes));
}

void Budget::charge(uint64_t bytes) {
  work += bytes;
  if (work > max_work_bytes)
    throw Failure(fmt::format("the template built more than {} bytes of strings and lists (the limit)", max_work_bytes));
}

// -------------------------------------------------------------------------------------- Value

namespace {

int nesting_of(const Value& v) {
  if (v.is_list()) return v.list().depth;
  if (v.is_dict()) return v.dict().depth;
  return 0;
}

void check_nesting(int depth) {
  if (depth > budget().max_nesting)
    throw Failure(fmt::format("lists and dicts nest deeper than {} levels (the limit)", budget().max_nesting));
}

}  // namespace

Value Value::undefined(std::string hint, bool unsafe) {
  Value v;
  v.p_ = std::make_shared<const UndefinedInfo>(UndefinedInfo{std::move(hint), unsafe});
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}

Value Value::real(double d) {
  Value v;
  v.kind_ = Kind::Float;
  v.f_ = d;
  return v;
}

Value Value::string(std::string s) {
  budget().check_string(s.size());
  budget().charge(s.size());
  Value v;
  v.kind_ = Kind::String;
  v.p_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::markup(std::string s) {
  Value v = string(std::move(s));
  v.b_ = true;
  return v;
}

Value Value::string_like(const Value& like, std::string s) {
  return like.is_markup() ? markup(std::move(s)) : string(std::move(s));
}

Value Value::list(ValueList items, bool tuple) {
  int depth = 1;
  for (const Value& x : items) depth = std::max(depth, nesting_of(x) + 1);
  check_nesting(depth);
  budget().charge(items.size() * sizeof(Value));
  Value v;
  v.kind_ = Kind::List;
  v.p_ = std::make_shared<const ListData>(ListData{std::move(items), tuple, depth});
  return v;
}

Value Value::dict(DictData d) {
  int depth = 1;
  for (const auto& [k, x] : d.items) depth = std::max(depth, nesting_of(x) + 1);
  check_nesting(depth);
  budget().charge(d.items.size() * 2 * sizeof(Value));
  d.depth = depth;
  Value v;
  v.kind_ = Kind::Dict;
  v.p_ = std::make_shared<const DictData>(std::move(d));
  return v;
}

Value Value::ns(std::shared_ptr<NamespaceData> n) {
  Value v;
  v.kind_ = Kind::Namespace;
  v.p_ = std::move(n);
  return v;
}

Value Value::callable(Callable c) {
  Value v;
  v.kind_ = Kind::Callable;
  v.p_ = std::make_shared<const Callable>(std::move(c));
  return v;
}

std::string Value::undefined_hint() const {
  if (kind_ != Kind::Undefined || !p_) return {};
  return static_cast<const UndefinedInfo*>(p_.get())->hint;
}

bool Value::undefined_unsafe() const {
  return kind_ == Kind::Undefined && p_ && static_cast<const UndefinedInfo*>(p_.get())->unsafe;
}

// ------------------------------------------------------------------------------------ DictData

const Value* DictData::find(const Value& key) const {
  if (key.is_string() && !index_.empty()) {
    const auto it = index_.find(key.str());
    return it == index_.end() ? nullptr : &items[it->second].second;
  }
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

Value* DictData::find(const Value& key) { return const_cast<Value*>(std::as_const(*this).find(key)); }

const Value* DictData::find_str(std::string_view key) const {
  if (!index_.empty()) {
    const auto it = index_.find(std::string(key));
    return it == index_.end() ? nullptr : &items[it->second].second;
  }
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  if (Value* v = find(key)) {
    *v = std::move(value);
    return;
  }
  items.emplace_back(std::move(key), std::move(value));
  constexpr size_t kIndexFrom = 8;  // a linear scan is faster below this
  if (items.size() == kIndexFrom) {
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].first.is_string()) index_.emplace(items[i].first.str(), i);
  } else if (items.size() > kIndexFrom && items.back().first.is_string()) {
    index_.emplace(items.back().first.str(), items.size() - 1);
  }
}

// ---------------------------------------------------------------------------------- from_json

namespace {

template <class J>
Value from_json_at(const J& j, int depth) {
  if (depth > budget().max_nesting)
    throw Failure(fmt::format("the variables nest deeper than {} levels (the limit)", budget().max_nesting));
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::real(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::real(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json_at(x, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      DictData d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(Value::string(it.key()), from_json_at(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      throw Failure("a variable holds binary data, which a template cannot use");
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 1); }
Value from_json(const nlohmann::json& j) { return from_json_at(j, 1); }

// ------------------------------------------------------------------------------ names, errors

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return v.is_markup() ? "Markup" : "str";
    case Value::Kind::List: return v.list().tuple ? "tuple" : "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return v.ns().loop ? "LoopContext" : "Namespace";
    case Value::Kind::Callable:
      switch (v.call().kind) {
        case Callable::Kind::Macro: return "Macro";
        case Callable::Kind::Method: return "builtin_function_or_method";
        case Callable::Kind::Global: return "function";
      }
  }
  return "object";
}


void raise(std::string_view type, std::string_view msg) { throw Failure(fmt::format("{}: {}", type, msg)); }

void undefined_error(const Value& v) {
  std::string hint = v.undefined_hint();
  if (v.undefined_unsafe()) raise("SecurityError", hint);
  raise("UndefinedError", hint.empty() ? "a value is undefined" : hint);
}

// -------------------------------------------------------------------------- truth, str, repr

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_float() != 0.0;
    case Value::Kind::String: return !v.str().empty();
    case Value::Kind::List: return !v.list().items.empty();
    case Value::Kind::Dict: return !v.dict().items.empty();
    case Value::Kind::Namespace:
    case Value::Kind::Callable: return true;
  }
  return false;
}

namespace {

void append_repr(std::string& out, const Value& v);

void append_checked(std::string& out, std::string_view s) {
  out += s;
  budget().check_string(out.size());
}

void append_dict_repr(std::string& out, const DictData& d) {
  out += '{';
  bool first = true;
  for (const auto& [k, x] : d.items) {
    if (!first) out += ", ";
    first = false;
    append_repr(out, k);
    out += ": ";
    append_repr(out, x);
  }
  out += '}';
}

// Printing recurses into lists, dicts and namespaces. Lists and dicts have a bounded depth, but
// namespaces are mutable: one can hold itself (printed as {...}, as Python's reprlib guard does)
// or a chain as long as the render's steps allow, which must not overflow the stack.
thread_local int g_print_depth = 0;
thread_local std::vector<const void*> g_printing;  // namespaces being printed

struct PrintDepth {
  PrintDepth() {
    if (++g_print_depth > 2 * budget().max_nesting) {
      --g_print_depth;
      throw Failure(fmt::format("a value nests deeper than {} levels to print (the limit)", 2 * budget().max_nesting));
    }
  }
  ~PrintDepth() { --g_print_depth; }
};

void append_str(std::string& out, const Value& v) {
  PrintDepth guard;
  switch (v.kind()) {
    case Value::Kind::Undefined: return;
    case Value::Kind::None: out += "None"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "True" : "False"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: out += py::float_repr(v.as_float()); return;
    case Value::Kind::String: append_checked(out, v.str()); return;
    case Value::Kind::List: {
      const ListData& l = v.list();
      out += l.tuple ? '(' : '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        append_repr(out, l.items[i]);
      }
      if (l.tuple && l.items.size() == 1) out += ',';
      out += l.tuple ? ')' : ']';
      return;
    }
    case Value::Kind::Dict: append_dict_repr(out, v.dict()); return;
    case Value::Kind::Namespace: {
      const NamespaceData& n = v.ns();
      if (n.loop) {
        const Value* index = n.attrs.find_str("index");
        const Value* length = n.attrs.find_str("length");
        out += fmt::format("<LoopContext {}/{}>", index ? to_str(*index) : "?", length ? to_str(*length) : "?");
      } else if (std::find(g_printing.begin(), g_printing.end(), &n) != g_printing.end()) {
        out += "<Namespace {...}>";
      } else {
        g_printing.push_back(&n);
        try {
          out += "<Namespace ";
          append_dict_repr(out, n.attrs);
          out += '>';
        } catch (...) {
          g_printing.pop_back();
          throw;
        }
        g_printing.pop_back();
      }
      return;
    }
    case Value::Kind::Callable: {
      const Callable& c = v.call();
      if (c.kind == Callable::Kind::Macro) {
        out += "<Macro " + py::repr(c.name) + ">";
      } else if (c.kind == Callable::Kind::Method) {
        out += fmt::format("<built-in method {} of {} object>", c.name, type_name(c.self));
      } else {
        out += "<function " + c.name + ">";
      }
      return;
    }
  }
}

void append_repr(std::string& out, const Value& v) {
  if (v.is_markup()) {
    append_checked(out, "Markup(" + py::repr(v.str()) + ")");
  } else if (v.is_string()) {
    append_checked(out, py::repr(v.str()));
  } else if (v.is_undefined()) {
    out += "Undefined";
  } else {
    append_str(out, v);
  }
  budget().check_string(out.size());
}

}  // namespace

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  append_str(out, v);
  return out;
}

std::string to_repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

// ------------------------------------------------------------------------------------ to_json

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (char32_t c : py::decode(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c > 0xFFFF) {
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                      static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      py::append_cp(out, c);
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return py::float_repr(d);
}

struct JsonWriter {
  const JsonOptions& opt;
  std::string item_sep, key_sep;
  std::string out;

  void newline(int level) {
    if (!opt.indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += *opt.indent;
  }

  std::string key_text(const Value& k) {
    switch (k.kind()) {
      case Value::Kind::String: return k.str();
      case Value::Kind::Float: return json_float(k.as_float());
      case Value::Kind::Bool: return k.as_bool() ? "true" : "false";
      case Value::Kind::None: return "null";
      case Value::Kind::Int: return std::to_string(k.as_int());
      default: raise("TypeError", "keys must be str, int, float, bool or None, not " + type_name(k));
    }
  }

  void write(const Value& v, int level) {
    budget().check_string(out.size());
    switch (v.kind()) {
      case Value::Kind::None: out += "null"; return;
      case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::Int: out += std::to_string(v.as_int()); return;
      case Value::Kind::Float: out += json_float(v.as_float()); return;
      case Value::Kind::String: json_string(out, v.str(), opt.ensure_ascii); return;
      case Value::Kind::List: {
        const ValueList& items = v.list().items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        newline(level + 1);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) {
            out += item_sep;
            newline(level + 1);
          }
          write(items[i], level + 1);
        }
        newline(level);
        out += ']';
        return;
      }
      case Value::Kind::Dict: {
        std::vector<const std::pair<Value, Value>*> items;
        for (const auto& kv : v.dict().items) items.push_back(&kv);
        if (items.empty()) {
          out += "{}";
          return;
        }
        if (opt.sort_keys) {
          std::stable_sort(items.begin(), items.end(),
                           [](const auto* a, const auto* b) { return compare(a->first, b->first, "<") < 0; });
        }
        out += '{';
        newline(level + 1);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) {
            out += item_sep;
            newline(level + 1);
          }
          json_string(out, key_text(items[i]->first), opt.ensure_ascii);
          out += key_sep;
          write(items[i]->second, level + 1);
        }
        newline(level);
        out += '}';
        return;
      }
      default:
        raise("TypeError", fmt::format("Object of type {} is not JSON serializable", type_name(v)));
    }
  }
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opt) {
  JsonWriter w{opt, opt.indent ? "," : ", ", ": ", {}};
  if (opt.separators) std::tie(w.item_sep, w.key_sep) = *opt.separators;
  w.write(v, 0);
  budget().check_string(w.out.size());
  return std::move(w.out);
}

// ------------------------------------------------------------------------------- Markup

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value escape(const Value& v) { return v.is_markup() ? v : Value::markup(html_escape(to_str(v))); }

}  // namespace sinkq::jinja
