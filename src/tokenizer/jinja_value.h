// sinkq/tokenizer/jinja_value.h — the values of the chat-template interpreter and the Python
// semantics of their operators (internal header; see chat_template.h).
//
// A chat template computes on Python objects: None, bool, int, float, str, list, tuple, dict, plus
// Jinja's Undefined (a missing variable, attribute or element: prints as "", is false, iterates as
// empty, and raises on any other use), namespace() objects (the one mutable thing a template can
// make) and callables (macros, str/dict/list methods, global functions). Value holds one of these.
// A str may be a markupsafe Markup (what the safe and escape filters return): concatenating a plain
// str to it HTML-escapes the plain one, as Python does; a real template (Mistral's) relies on it.
// The free functions below give Python's behaviour for printing (str/repr), json.dumps and truth
// (jinja_value.cc), and for ==/</+/-/*/..., `in`, slices and attribute/item access as jinja2's
// ImmutableSandboxedEnvironment does them (jinja_ops.cc: dict.update, list.append and the other
// mutating methods are "unsafe", an Undefined that raises when called). Dicts keep insertion
// order, as Python's do.
//
// Numbers: int is 64-bit here (Python's is unbounded): results that do not fit raise an error.
// Lists, dicts and strings are immutable and shared (copying a Value is cheap); namespaces are
// shared and mutable, as in Python.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sinkq::jinja {

inline constexpr uint32_t kNoPos = UINT32_MAX;

// An error raised while parsing or rendering. `pos` is the byte offset in the (newline-normalised)
// template text where it happened; kNoPos until the innermost expression that can place it does.
// Kind::Refused is the template's own raise_exception(message).
struct Failure : std::exception {
  enum class Kind { Error, Refused };
  explicit Failure(std::string msg, Kind k = Kind::Error, uint32_t at = kNoPos)
      : message(std::move(msg)), kind(k), pos(at) {}
  const char* what() const noexcept override { return message.c_str(); }
  std::string message;
  Kind kind;
  uint32_t pos;
};

// Resource limits of one render (ChatTemplate::Limits fills them). Every loop iteration and macro
// call is a step; every string, list or dict an operator builds, and every linear scan of one
// (`in`, len() of a str, str methods, iteration), is charged its size in bytes as work, so
// quadratic work is stopped, not only long output; no string may exceed max_string_bytes and no
// list/dict may nest deeper than max_nesting.
struct Budget {
  size_t max_string_bytes = size_t{64} << 20;
  uint64_t max_steps = 10'000'000;
  uint64_t max_work_bytes = uint64_t{1} << 30;
  int max_nesting = 256;
  uint64_t steps = 0;
  uint64_t work = 0;

  void step();
  void check_string(size_t bytes) const;
  void charge(uint64_t bytes);
};
// The budget of the render running on this thread (a default one outside a render).
Budget& budget();
// Installs `b` as this thread's budget for its lifetime.
class BudgetScope {
 public:
  explicit BudgetScope(Budget& b);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  Budget* saved_;
};

class Value;
using ValueList = std::vector<Value>;
struct ListData;
struct DictData;
struct NamespaceData;
struct Callable;
struct UndefinedInfo;

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

  Value() = default;  // Undefined
  static Value undefined(std::string hint, bool unsafe = false);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value real(double d);
  static Value string(std::string s);
  static Value markup(std::string s);  // a markupsafe.Markup str
  // A str like `like` (Markup if it is): what Markup's own methods return.
  static Value string_like(const Value& like, std::string s);
  static Value list(ValueList items, bool tuple = false);
  static Value dict(DictData d);
  static Value ns(std::shared_ptr<NamespaceData> n);
  static Value callable(Callable c);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }  // str or Markup
  bool is_markup() const { return kind_ == Kind::String && b_; }
  bool is_list() const { return kind_ == Kind::List; }  // list or tuple
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_ns() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Callable; }
  bool is_number() const { return kind_ == Kind::Bool || kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Bool || kind_ == Kind::Int; }  // Python int (bool is one)

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? int64_t{b_} : i_; }  // bool or int
  double as_float() const { return kind_ == Kind::Float ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return *static_cast<const std::string*>(p_.get()); }
  const ListData& list() const { return *static_cast<const ListData*>(p_.get()); }
  const DictData& dict() const { return *static_cast<const DictData*>(p_.get()); }
  NamespaceData& ns() const { return *const_cast<NamespaceData*>(static_cast<const NamespaceData*>(p_.get())); }
  const Callable& call() const { return *static_cast<const Callable*>(p_.get()); }
  // Why a value is undefined ("'x' is undefined"), and whether it is an unsafe attribute.
  std::string undefined_hint() const;
  bool undefined_unsafe() const;
  // The shared object behind a str/list/dict/namespace/callable (Python `is` for those).
  const void* identity() const { return p_.get(); }

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const void> p_;
};

struct ListData {
  ValueList items;
  bool tuple = false;
  int depth = 1;  // nesting depth (1 = no list or dict inside)
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order
  int depth = 1;
  // Python key equality (1 == 1.0 == True); nullptr when absent.
  const Value* find(const Value& key) const;
  Value* find(const Value& key);
  const Value* find_str(std::string_view key) const;  // find(a str key) without making a Value
  // Inserts, or replaces the value of an existing key in place (as a Python dict does).
  void set(Value key, Value value);

 private:
  std::unordered_map<std::string, size_t> index_;  // str keys -> position, once there are many
};

struct NamespaceData {
  DictData attrs;
  bool loop = false;  // the `loop` object of a for-loop (read-only)
};

struct MacroNode;
struct Scope;
struct Callable {
  enum class Kind { Global, Method, Macro };
  Kind kind = Kind::Global;
  std::string name;
  Value self;                      // Method: the receiver
  const MacroNode* macro = nullptr;  // Macro: its definition...
  std::weak_ptr<Scope> closure;      // ...and the scope it was defined in (weak: that scope holds
                                     // the macro; when gone, the template's top level is used)
};

struct UndefinedInfo {
  std::string hint;
  bool unsafe = false;
};

// JSON variables as Python sees them after json.loads (objects keep their key order).
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

// Python's name of the type ("str", "int", "NoneType", "list", "Undefined", ...).
std::string type_name(const Value& v);
// Raises the UndefinedError (or SecurityError, for unsafe attributes) of an undefined value.
[[noreturn]] void undefined_error(const Value& v);
// Python exception of a given type: "TypeError: msg".
[[noreturn]] void raise(std::string_view type, std::string_view msg);

bool truthy(const Value& v);
std::string to_str(const Value& v);   // str(v); Undefined -> ""
std::string to_repr(const Value& v);  // repr(v)

// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' tojson filter calls it.
struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& opt);

bool equals(const Value& a, const Value& b);
// Python ordering: -1, 0, 1, or kUnordered when a NaN is involved (every ordering comparison is
// then false); raises TypeError for pairs Python cannot order (`op` names the operator).
inline constexpr int kUnordered = 2;
int compare(const Value& a, const Value& b, std::string_view op);

enum class BinOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
Value binary(BinOp op, const Value& a, const Value& b);
Value negate(const Value& v);
Value unary_plus(const Value& v);
Value concat(const Value& a, const Value& b);  // a ~ b
bool contains(const Value& container, const Value& item);  // item in container

// obj.name and obj[key] as the immutable sandbox resolves them; obj[start:stop:step].
Value getattr(const Value& obj, const std::string& name);
Value getitem(const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a for-loop sees: list/tuple items, dict keys, str code points, nothing for Undefined.
ValueList iterate(const Value& v);

// printf-style formatting, `fmt % args` (the `format` filter and the % operator on a str);
// `escape`: the format is a Markup, whose % HTML-escapes what %s and %r insert.
std::string percent_format(const std::string& fmt, const Value& args, bool escape = false);

// markupsafe.escape: & < > " ' as HTML entities; of a value: Markup unchanged, else its str() escaped.
std::string html_escape(std::string_view s);
Value escape(const Value& v);

}  // namespace sinkq::jinja
