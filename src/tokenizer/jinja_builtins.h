// sinkq/tokenizer/jinja_builtins.h — the filters, tests, methods and global functions a chat template
// can call (internal header; see chat_template.h for the list). Filters and tests are in
// jinja_filters.cc, methods and globals in jinja_methods.cc.
//
// Each follows jinja2 3.1 / Python 3 behaviour, with transformers' additions: the tojson filter is
// json.dumps(x, ensure_ascii=False, indent, separators, sort_keys) (no HTML escaping, keys in
// insertion order), and the globals raise_exception(msg) and strftime_now(fmt). Filters and tests
// are resolved by name when the template is parsed, so a template naming one sinkq lacks fails at
// construction, not halfway through a conversation.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace sinkq::jinja {

struct CallArgs {
  ValueList pos;
  std::vector<std::pair<std::string, Value>> kw;
};

// What builtins need from the render: the time strftime_now() formats, and a register of the
// namespace() objects made (the render empties them at its end: a namespace can hold itself, and
// only namespaces can close such a cycle or an unbounded chain of references).
struct BuiltinContext {
  std::tm now{};
  std::vector<std::shared_ptr<NamespaceData>>* namespaces = nullptr;
};

// Index of a filter / test, or kUnknown (not a jinja2 name) / kUnsupported (jinja2 has it, sinkq
// does not implement it).
inline constexpr int kUnknown = -1;
inline constexpr int kUnsupported = -2;
int find_filter(std::string_view name);
int find_test(std::string_view name);

Value call_filter(int index, const Value& input, CallArgs& args, const BuiltinContext& ctx);
bool call_test(int index, const Value& input, CallArgs& args);

// str / dict / list methods (the receiver and name of a Callable::Kind::Method).
Value call_method(const Value& self, const std::string& name, CallArgs& args);

// Global functions: range, namespace, dict, raise_exception, strftime_now (and jinja2's lipsum,
// cycler, joiner, which exist but fail when called). global_function() is an undefined Value for
// other names.
Value global_function(std::string_view name);
Value call_global(const std::string& name, CallArgs& args, const BuiltinContext& ctx);

// ------------------------------------------------ helpers of the builtins (jinja_filters.cc, jinja_methods.cc)

// Binds positional and keyword arguments to named parameters, as a Python call does.
class Params {
 public:
  Params(CallArgs& args, std::string_view fn, std::initializer_list<std::string_view> names)
      : names_(names), slots_(names.size(), nullptr) {
    if (args.pos.size() > names_.size()) {
      raise("TypeError", fmt::format("{}() takes at most {} argument(s) ({} given)", fn, names_.size(), args.pos.size()));
    }
    for (size_t i = 0; i < args.pos.size(); ++i) slots_[i] = &args.pos[i];
    for (auto& [k, v] : args.kw) {
      const auto it = std::find(names_.begin(), names_.end(), k);
      if (it == names_.end()) raise("TypeError", fmt::format("{}() got an unexpected keyword argument '{}'", fn, k));
      const size_t i = static_cast<size_t>(it - names_.begin());
      if (slots_[i]) raise("TypeError", fmt::format("{}() got multiple values for argument '{}'", fn, k));
      slots_[i] = &v;
    }
  }
  bool has(size_t i) const { return slots_[i] != nullptr; }
  const Value& at(size_t i) const { return *slots_[i]; }
  Value get(size_t i, Value dflt) const { return slots_[i] ? *slots_[i] : std::move(dflt); }
  bool flag(size_t i, bool dflt) const { return slots_[i] ? truthy(*slots_[i]) : dflt; }
  // An argument Python would reject if not an int (bool counts).
  int64_t integer(size_t i, int64_t dflt, std::string_view what) const {
    if (!slots_[i] || slots_[i]->is_none()) return dflt;
    if (!slots_[i]->is_integral()) raise("TypeError", fmt::format("{} must be an integer, not {}", what, type_name(*slots_[i])));
    return slots_[i]->as_int();
  }
  std::optional<std::string> opt_string(size_t i) const {
    if (!slots_[i] || slots_[i]->is_none()) return std::nullopt;
    if (!slots_[i]->is_string()) raise("TypeError", fmt::format("expected a str, not {}", type_name(*slots_[i])));
    return slots_[i]->str();
  }

 private:
  std::vector<std::string_view> names_;
  std::vector<const Value*> slots_;
};

inline void no_args(CallArgs& args, std::string_view fn) { Params(args, fn, {}); }

inline const std::string& need_str(const Value& v, std::string_view what) {
  if (!v.is_string()) raise("TypeError", fmt::format("{} must be str, not {}", what, type_name(v)));
  return v.str();
}

inline Value tuple2(Value a, Value b) { return Value::list({std::move(a), std::move(b)}, /*tuple=*/true); }

}  // namespace sinkq::jinja
