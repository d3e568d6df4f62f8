// sinkq/tokenizer/jinja_filters.cc — the filters and tests of the chat-template interpreter (see
// jinja_builtins.h): jinja2 3.1's, with transformers' tojson.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <unordered_set>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_pystr.h"

namespace sinkq::jinja {

namespace {

// Python len().
int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String:
      budget().charge(v.str().size());
      return py::length(v.str());
    case Value::Kind::List: return static_cast<int64_t>(v.list().items.size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.dict().items.size());
    default: raise("TypeError", fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

Value lower_if_str(const Value& v) { return v.is_string() ? Value::string(py::lower(v.str())) : v; }

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0 (subscript semantics).
std::vector<Value> attribute_parts(const Value& attr) {
  std::vector<Value> parts;
  if (attr.is_string()) {
    for (const std::string& p : py::split(attr.str(), std::string("."), -1)) {
      const bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits ? Value::integer(std::strtoll(p.c_str(), nullptr, 10)) : Value::string(p));
    }
  } else if (!attr.is_none()) {
    parts.push_back(attr);
  }
  return parts;
}

Value get_path(Value item, const std::vector<Value>& parts, const Value* dflt = nullptr) {
  for (const Value& p : parts) {
    item = getitem(item, p);
    if (dflt && item.is_undefined()) item = *dflt;
  }
  return item;
}

// Stable sort by a key, raising TypeError as Python's sorted() does for unorderable keys.
void sort_by_key(ValueList& items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, size_t>> keyed;
  keyed.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(key(items[i]), i);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    const int c = reverse ? compare(b.first, a.first, "<") : compare(a.first, b.first, "<");
    return c == -1;
  });
  ValueList out;
  out.reserve(items.size());
  for (const auto& k : keyed) out.push_back(items[k.second]);
  items = std::move(out);
}

// Python float(str): surrounding whitespace, '_' between digits, inf/nan words.
std::optional<double> parse_float(std::string_view s0) {
  std::string s = py::strip(s0, std::nullopt, true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    t += s[i];
  }
  if (t.empty()) return std::nullopt;
  const std::string low = py::lower(t);
  const std::string body = low[0] == '+' || low[0] == '-' ? low.substr(1) : low;
  if (body == "inf" || body == "infinity" || body == "nan") {
    const double v = body == "nan" ? NAN : INFINITY;
    return low[0] == '-' ? -v : v;
  }
  if (body.empty() || !(std::isdigit(static_cast<unsigned char>(body[0])) || body[0] == '.')) return std::nullopt;
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

// Python int(str, base) for base 10 (and 0/2/8/16 prefixes when base is 0 or matches).
std::optional<int64_t> parse_int(std::string_view s0, int64_t base) {
  std::string s = py::strip(s0, std::nullopt, true, true);
  bool neg = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  std::string digits = s.substr(i);
  auto prefixed = [&](char p, int64_t b) {
    if (digits.size() > 2 && digits[0] == '0' && std::tolower(static_cast<unsigned char>(digits[1])) == p &&
        (base == 0 || base == b)) {
      digits = digits.substr(2);
      if (!digits.empty() && digits[0] == '_') digits = digits.substr(1);
      base = b;
      return true;
    }
    return false;
  };
  if (!prefixed('x', 16) && !prefixed('o', 8) && !prefixed('b', 2) && base == 0) base = 10;
  if (base < 2 || base > 36 || digits.empty()) return std::nullopt;
  int64_t v = 0;
  for (size_t k = 0; k < digits.size(); ++k) {
    const char c = digits[k];
    if (c == '_') {
      if (k == 0 || k + 1 == digits.size() || digits[k + 1] == '_') return std::nullopt;
      continue;
    }
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      d = std::tolower(static_cast<unsigned char>(c)) - 'a' + 10;
    } else {
      return std::nullopt;
    }
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return std::nullopt;
  }
  return neg ? -v : v;
}

// ------------------------------------------------------------------------------------ filters

using FilterFn = Value (*)(const Value&, CallArgs&, const BuiltinContext&);

Value f_abs(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "abs");
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) raise("OverflowError", "integer result does not fit in 64 bits");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (v.is_float()) return Value::real(std::fabs(v.as_float()));
  if (v.is_undefined()) undefined_error(v);
  raise("TypeError", fmt::format("bad operand type for abs(): '{}'", type_name(v)));
}

Value f_attr(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "attr", {"name"});
  if (!p.has(0)) raise("TypeError", "attr() missing required argument 'name'");
  // A Python attribute only: a dict's keys are not attributes (jinja2 checks with getattr_static).
  const std::string name = to_str(p.at(0));
  if (v.is_dict()) {
    const Value m = getattr(v, name);
    return m.is_callable() || m.undefined_unsafe() ? m : Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
  }
  return getattr(v, name);
}

Value f_capitalize(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "capitalize");
  return Value::string_like(v, py::capitalize(to_str(v)));
}

Value f_center(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "center", {"width"});
  return Value::string_like(v, py::center(to_str(v), p.integer(0, 80, "width")));
}

Value f_length(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "length");
  return Value::integer(length_of(v));
}

Value f_default(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "default", {"default_value", "boolean"});
  if (v.is_undefined() || (p.flag(1, false) && !truthy(v))) return p.get(0, Value::string(""));
  return v;
}

Value f_dictsort(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "dictsort", {"case_sensitive", "by", "reverse"});
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_dict()) raise("AttributeError", fmt::format("'{}' object has no attribute 'items'", type_name(v)));
  const bool case_sensitive = p.flag(0, false);
  const std::string by = p.has(1) ? to_str(p.at(1)) : "key";
  if (by != "key" && by != "value") raise("FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
  const size_t pos = by == "key" ? 0 : 1;
  ValueList items;
  for (const auto& [k, x] : v.dict().items) items.push_back(tuple2(k, x));
  sort_by_key(
      items,
      [&](const Value& kv) {
        const Value& x = kv.list().items[pos];
        return case_sensitive ? x : lower_if_str(x);
      },
      p.flag(2, false));
  return Value::list(std::move(items));
}

Value f_escape(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "escape");
  return escape(v);
}

Value f_first(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "first");
  if (v.is_list() && !v.list().items.empty()) return v.list().items.front();
  if (v.is_dict() && !v.dict().items.empty()) return v.dict().items.front().first;
  if (v.is_string() || v.is_list() || v.is_dict() || v.is_undefined()) {
    ValueList items = iterate(v);
    if (!items.empty()) return items.front();
    return Value::undefined("No first item, sequence was empty.");
  }
  raise("TypeError", fmt::format("'{}' object is not iterable", type_name(v)));
}

Value f_last(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "last");
  if (v.is_list() && !v.list().items.empty()) return v.list().items.back();
  if (v.is_dict() && !v.dict().items.empty()) return v.dict().items.back().first;
  if (v.is_string() || v.is_list() || v.is_dict() || v.is_undefined()) {
    ValueList items = iterate(v);
    if (!items.empty()) return items.back();
    return Value::undefined("No last item, sequence was empty.");
  }
  raise("TypeError", fmt::format("'{}' object is not reversible", type_name(v)));
}

Value f_float(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "float", {"default"});
  const Value dflt = p.get(0, Value::real(0.0));
  if (v.is_number()) return Value::real(v.as_float());
  if (v.is_string()) {
    if (auto d = parse_float(v.str())) return Value::real(*d);
  }
  return dflt;
}

Value f_format(const Value& v, CallArgs& a, const BuiltinContext&) {
  if (!a.pos.empty() && !a.kw.empty())
    raise("FilterArgumentError", "can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    DictData d;
    for (auto& [k, x] : a.kw) d.set(Value::string(k), x);
    return Value::string_like(v, percent_format(to_str(v), Value::dict(std::move(d)), v.is_markup()));
  }
  return Value::string_like(v, percent_format(to_str(v), Value::list(a.pos, /*tuple=*/true), v.is_markup()));
}

Value f_indent(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "indent", {"width", "first", "blank"});
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_string()) raise("TypeError", fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v)));
  std::string indention;
  if (p.has(0) && p.at(0).is_string()) {
    indention = p.at(0).str();
  } else {
    indention = std::string(static_cast<size_t>(std::max<int64_t>(0, p.integer(0, 4, "width"))), ' ');
  }
  const std::vector<std::string> lines = py::splitlines(v.str() + "\n", false);
  std::string rv;
  if (p.flag(2, false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (p.flag(1, false)) rv = indention + rv;
  return Value::string_like(v, std::move(rv));
}

Value f_int(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "int", {"default", "base"});
  const Value dflt = p.get(0, Value::integer(0));
  const int64_t base = p.integer(1, 10, "base");
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.str(), base)) return Value::integer(*i);
    if (auto d = parse_float(v.str()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
      return Value::integer(static_cast<int64_t>(*d));
  }
  return dflt;
}

Value f_items(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "items");
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) raise("TypeError", "Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, x] : v.dict().items) out.push_back(tuple2(k, x));
  return Value::list(std::move(out));
}

Value f_join(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "join", {"d", "attribute"});
  const std::string sep = p.has(0) ? to_str(p.at(0)) : "";
  const std::vector<Value> parts = p.has(1) ? attribute_parts(p.at(1)) : std::vector<Value>{};
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(parts.empty() ? item : get_path(item, parts));
    budget().check_string(out.size());
  }
  return Value::string(std::move(out));
}

Value f_list(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "list");
  return Value::list(iterate(v));
}

Value f_lower(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "lower");
  return Value::string_like(v, py::lower(to_str(v)));
}

Value f_upper(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "upper");
  return Value::string_like(v, py::upper(to_str(v)));
}

Value f_map(const Value& v, CallArgs& a, const BuiltinContext& ctx) {
  if (!truthy(v)) return Value::list({});
  ValueList out;
  const ValueList items = iterate(v);
  const auto attr = std::find_if(a.kw.begin(), a.kw.end(), [](const auto& kv) { return kv.first == "attribute"; });
  if (a.pos.empty() && attr != a.kw.end()) {
    std::optional<Value> dflt;
    for (const auto& [k, x] : a.kw) {
      if (k == "default") {
        dflt = x;
      } else if (k != "attribute") {
        raise("FilterArgumentError", fmt::format("Unexpected keyword argument '{}'", k));
      }
    }
    const std::vector<Value> parts = attribute_parts(attr->second);
    for (const Value& item : items) out.push_back(get_path(item, parts, dflt ? &*dflt : nullptr));
    return Value::list(std::move(out));
  }
  if (a.pos.empty()) raise("FilterArgumentError", "map requires a filter argument");
  const std::string name = to_str(a.pos[0]);
  const int index = find_filter(name);
  if (index < 0) raise("TemplateRuntimeError", fmt::format("No filter named '{}'.", name));
  for (const Value& item : items) {
    CallArgs rest{ValueList(a.pos.begin() + 1, a.pos.end()), a.kw};
    out.push_back(call_filter(index, item, rest, ctx));
  }
  return Value::list(std::move(out));
}

Value min_max(const Value& v, CallArgs& a, bool want_max) {
  Params p(a, want_max ? "max" : "min", {"case_sensitive", "attribute"});
  const bool case_sensitive = p.flag(0, false);
  const std::vector<Value> parts = p.has(1) ? attribute_parts(p.at(1)) : std::vector<Value>{};
  const ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) {
    Value k = parts.empty() ? x : get_path(x, parts);
    return case_sensitive ? k : lower_if_str(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    const int c = compare(k, best_key, want_max ? ">" : "<");
    if (want_max ? c == 1 : c == -1) best = i, best_key = std::move(k);
  }
  return items[best];
}

Value f_max(const Value& v, CallArgs& a, const BuiltinContext&) { return min_max(v, a, true); }
Value f_min(const Value& v, CallArgs& a, const BuiltinContext&) { return min_max(v, a, false); }

// select / reject / selectattr / rejectattr.
Value select_or_reject(const Value& v, CallArgs& a, bool keep_if, bool by_attr) {
  if (!truthy(v)) return Value::list({});
  size_t off = 0;
  std::vector<Value> parts;
  if (by_attr) {
    if (a.pos.empty()) raise("FilterArgumentError", "Missing parameter for attribute name");
    parts = attribute_parts(a.pos[0]);
    off = 1;
  }
  int test = kUnknown;
  if (a.pos.size() > off) {
    const std::string name = to_str(a.pos[off]);
    test = find_test(name);
    if (test < 0) raise("TemplateRuntimeError", fmt::format("No test named '{}'.", name));
  }
  ValueList out;
  for (const Value& item : iterate(v)) {
    const Value x = by_attr ? get_path(item, parts) : item;
    bool ok;
    if (test >= 0) {
      CallArgs rest{ValueList(a.pos.begin() + static_cast<std::ptrdiff_t>(off) + 1, a.pos.end()), a.kw};
      ok = call_test(test, x, rest);
    } else {
      ok = truthy(x);
    }
    if (ok == keep_if) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(const Value& v, CallArgs& a, const BuiltinContext&) { return select_or_reject(v, a, true, false); }
Value f_reject(const Value& v, CallArgs& a, const BuiltinContext&) { return select_or_reject(v, a, false, false); }
Value f_selectattr(const Value& v, CallArgs& a, const BuiltinContext&) { return select_or_reject(v, a, true, true); }
Value f_rejectattr(const Value& v, CallArgs& a, const BuiltinContext&) { return select_or_reject(v, a, false, true); }

Value f_replace(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "replace", {"old", "new", "count"});
  if (!p.has(0) || !p.has(1)) raise("TypeError", "replace() needs the old and the new string");
  std::string out = py::replace(to_str(v), to_str(p.at(0)), to_str(p.at(1)), p.integer(2, -1, "count"));
  return Value::string(std::move(out));
}

Value f_reverse(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "reverse");
  if (v.is_string()) {
    std::u32string cps = py::decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value::string_like(v, py::encode(cps));
  }
  if (v.is_list() || v.is_dict() || v.is_undefined()) {
    ValueList items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  raise("FilterArgumentError", "argument must be iterable");
}

Value f_round(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "round", {"precision", "method"});
  const int64_t precision = p.integer(0, 0, "precision");
  const std::string method = p.has(1) ? to_str(p.at(1)) : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    raise("FilterArgumentError", "method must be common, ceil or floor");
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_number()) raise("TypeError", fmt::format("type {} doesn't define __round__ method", type_name(v)));
  if (method == "common") {
    if (v.is_integral() && precision >= 0) return Value::integer(v.as_int());
    // round(x, n): correctly rounded, ties to even (to_chars rounds the exact binary value).
    const double x = v.as_float();
    if (!std::isfinite(x) || precision > 300) return Value::real(x);
    if (precision < 0) {
      const double m = std::pow(10.0, static_cast<double>(-precision));
      return Value::real(std::nearbyint(x / m) * m);
    }
    char buf[512];
    const auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed, static_cast<int>(precision));
    return Value::real(std::strtod(std::string(buf, res.ptr).c_str(), nullptr));
  }
  const double m = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_float() * m;
  return Value::real((method == "ceil" ? std::ceil(x) : std::floor(x)) / m);
}

Value f_safe(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "safe");
  return v.is_markup() ? v : Value::markup(to_str(v));
}

Value f_sort(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "sort", {"reverse", "case_sensitive", "attribute"});
  const bool case_sensitive = p.flag(1, false);
  // attribute may name several, comma-separated: sorted by the first, then the next...
  std::vector<std::vector<Value>> keys;
  if (p.has(2)) {
    if (p.at(2).is_string()) {
      for (const std::string& part : py::split(p.at(2).str(), std::string(","), -1))
        keys.push_back(attribute_parts(Value::string(part)));
    } else {
      keys.push_back(attribute_parts(p.at(2)));
    }
  }
  ValueList items = iterate(v);
  sort_by_key(
      items,
      [&](const Value& x) {
        if (keys.empty()) return case_sensitive ? x : lower_if_str(x);
        ValueList ks;
        for (const auto& parts : keys) {
          Value k = get_path(x, parts);
          ks.push_back(case_sensitive ? k : lower_if_str(k));
        }
        return keys.size() == 1 ? ks[0] : Value::list(std::move(ks));
      },
      p.flag(0, false));
  return Value::list(std::move(items));
}

Value f_string(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "string");
  return v.is_string() ? v : Value::string(to_str(v));
}

Value f_sum(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "sum", {"attribute", "start"});
  const std::vector<Value> parts = p.has(0) ? attribute_parts(p.at(0)) : std::vector<Value>{};
  Value total = p.get(1, Value::integer(0));
  for (const Value& item : iterate(v)) total = binary(BinOp::Add, total, parts.empty() ? item : get_path(item, parts));
  return total;
}

Value f_title(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "title");
  // jinja2: split on runs of [-\s({\[<] (kept), then word[0].upper() + word[1:].lower().
  const std::u32string cps = py::decode(to_str(v));
  auto is_sep = [](char32_t c) { return py::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    const bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    const std::string part = py::encode(std::u32string_view(cps).substr(i, j - i));
    if (sep) {
      out += part;
    } else {
      out += py::upper(py::encode(std::u32string_view(cps).substr(i, 1))) +
             py::lower(py::encode(std::u32string_view(cps).substr(i + 1, j - i - 1)));
    }
    i = j;
  }
  return Value::string(std::move(out));
}

Value f_tojson(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions opt;
  opt.ensure_ascii = p.flag(0, false);
  if (p.has(1) && !p.at(1).is_none()) {
    const Value& ind = p.at(1);
    if (ind.is_string()) {
      opt.indent = ind.str();
    } else if (ind.is_integral()) {
      opt.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(ind.as_int(), 0, 1 << 16)), ' ');
    } else {
      raise("TypeError", fmt::format("indent must be an int or a str, not {}", type_name(ind)));
    }
  }
  if (p.has(2) && !p.at(2).is_none()) {
    const Value& s = p.at(2);
    if (!s.is_list() || s.list().items.size() != 2) raise("ValueError", "separators must be a pair of strings");
    opt.separators = std::make_pair(need_str(s.list().items[0], "item separator"), need_str(s.list().items[1], "key separator"));
  }
  opt.sort_keys = p.flag(3, false);
  return Value::string(to_json(v, opt));
}

Value f_trim(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "trim", {"chars"});
  return Value::string_like(v, py::strip(to_str(v), p.opt_string(0), true, true));
}

Value f_unique(const Value& v, CallArgs& a, const BuiltinContext&) {
  Params p(a, "unique", {"case_sensitive", "attribute"});
  const bool case_sensitive = p.flag(0, false);
  const std::vector<Value> parts = p.has(1) ? attribute_parts(p.at(1)) : std::vector<Value>{};
  // A Python set of the keys: equal keys (1, 1.0, True) share one hash key; str keys and others
  // are told apart by a prefix.
  auto hash_key = [](const Value& k) {
    std::string key(1, k.is_number() ? 'n' : k.is_string() ? 's' : 'o');
    if (k.is_number()) {
      const double d = k.as_float();
      if (k.is_integral()) {
        key += std::to_string(k.as_int());
      } else if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) {
        key += std::to_string(static_cast<int64_t>(d));
      } else {
        key += to_repr(k);
      }
    } else {
      key += k.is_string() ? k.str() : to_repr(k);
    }
    return key;
  };
  ValueList out;
  std::unordered_set<std::string> seen;
  for (const Value& item : iterate(v)) {
    Value k = parts.empty() ? item : get_path(item, parts);
    if (!case_sensitive) k = lower_if_str(k);
    if ((k.is_list() && !k.list().tuple) || k.is_dict()) raise("TypeError", fmt::format("unhashable type: '{}'", type_name(k)));
    if (seen.insert(hash_key(k)).second) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_wordcount(const Value& v, CallArgs& a, const BuiltinContext&) {
  no_args(a, "wordcount");
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : py::decode(to_str(v))) {
    const bool w = py::is_word(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},           {"attr", f_attr},
    {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length},      {"d", f_default},
    {"default", f_default},   {"dictsort", f_dictsort},
    {"e", f_escape},          {"escape", f_escape},
    {"first", f_first},       {"float", f_float},
    {"format", f_format},     {"indent", f_indent},
    {"int", f_int},           {"items", f_items},
    {"join", f_join},         {"last", f_last},
    {"length", f_length},     {"list", f_list},
    {"lower", f_lower},       {"map", f_map},
    {"max", f_max},           {"min", f_min},
    {"reject", f_reject},     {"rejectattr", f_rejectattr},
    {"replace", f_replace},   {"reverse", f_reverse},
    {"round", f_round},       {"safe", f_safe},
    {"select", f_select},     {"selectattr", f_selectattr},
    {"sort", f_sort},         {"string", f_string},
    {"sum", f_sum},           {"title", f_title},
    {"tojson", f_tojson},     {"trim", f_trim},
    {"unique", f_unique},     {"upper", f_upper},
    {"wordcount", f_wordcount},
};

// jinja2 builtin filters sinkq does not implement.
constexpr std::string_view kUnsupportedFilters[] = {
    "batch",    "filesizeformat", "forceescape", "groupby", "pprint",  "random", "slice",
    "striptags", "truncate",      "unsafe",      "urlencode", "urlize", "wordwrap", "xmlattr",
};

// -------------------------------------------------------------------------------------- tests

using TestFn = bool (*)(const Value&, CallArgs&);

const Value& one_arg(CallArgs& a, std::string_view test) {
  Params p(a, test, {"other"});
  if (!p.has(0)) raise("TypeError", fmt::format("the '{}' test needs an argument", test));
  return p.at(0);
}

bool t_defined(const Value& v, CallArgs& a) { return no_args(a, "defined"), !v.is_undefined(); }
bool t_undefined(const Value& v, CallArgs& a) { return no_args(a, "undefined"), v.is_undefined(); }
bool t_none(const Value& v, CallArgs& a) { return no_args(a, "none"), v.is_none(); }
bool t_boolean(const Value& v, CallArgs& a) { return no_args(a, "boolean"), v.is_bool(); }
bool t_true(const Value& v, CallArgs& a) { return no_args(a, "true"), v.is_bool() && v.as_bool(); }
bool t_false(const Value& v, CallArgs& a) { return no_args(a, "false"), v.is_bool() && !v.as_bool(); }
bool t_integer(const Value& v, CallArgs& a) { return no_args(a, "integer"), v.is_int(); }
bool t_float(const Value& v, CallArgs& a) { return no_args(a, "float"), v.is_float(); }
bool t_number(const Value& v, CallArgs& a) { return no_args(a, "number"), v.is_number(); }
bool t_string(const Value& v, CallArgs& a) { return no_args(a, "string"), v.is_string(); }
bool t_mapping(const Value& v, CallArgs& a) { return no_args(a, "mapping"), v.is_dict(); }
// Undefined counts: it has __iter__, __len__ and __getitem__ (and __call__) in jinja2.
bool t_iterable(const Value& v, CallArgs& a) {
  return no_args(a, "iterable"), v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_sequence(const Value& v, CallArgs& a) { return t_iterable(v, a); }
bool t_callable(const Value& v, CallArgs& a) { return no_args(a, "callable"), v.is_callable() || v.is_undefined(); }
bool t_odd(const Value& v, CallArgs& a) {
  no_args(a, "odd");
  return equals(binary(BinOp::Mod, v, Value::integer(2)), Value::integer(1));
}
bool t_even(const Value& v, CallArgs& a) {
  no_args(a, "even");
  return equals(binary(BinOp::Mod, v, Value::integer(2)), Value::integer(0));
}
bool t_divisibleby(const Value& v, CallArgs& a) {
  return equals(binary(BinOp::Mod, v, one_arg(a, "divisibleby")), Value::integer(0));
}
bool t_eq(const Value& v, CallArgs& a) { return equals(v, one_arg(a, "eq")); }
bool t_ne(const Value& v, CallArgs& a) { return !equals(v, one_arg(a, "ne")); }
bool ordered(int c) { return c != kUnordered; }
bool t_lt(const Value& v, CallArgs& a) { return compare(v, one_arg(a, "lt"), "<") == -1; }
bool t_le(const Value& v, CallArgs& a) {
  const int c = compare(v, one_arg(a, "le"), "<=");
  return ordered(c) && c <= 0;
}
bool t_gt(const Value& v, CallArgs& a) { return compare(v, one_arg(a, "gt"), ">") == 1; }
bool t_ge(const Value& v, CallArgs& a) {
  const int c = compare(v, one_arg(a, "ge"), ">=");
  return ordered(c) && c >= 0;
}
bool t_in(const Value& v, CallArgs& a) { return contains(one_arg(a, "in"), v); }
bool t_lower(const Value& v, CallArgs& a) { return no_args(a, "lower"), py::is_lower(to_str(v)); }
bool t_upper(const Value& v, CallArgs& a) { return no_args(a, "upper"), py::is_upper(to_str(v)); }
// Python `is`: None, True and False are singletons, small ints are cached, other objects compare
// by identity.
bool t_sameas(const Value& v, CallArgs& a) {
  const Value& o = one_arg(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::None: return true;
    case Value::Kind::Bool: return v.as_bool() == o.as_bool();
    case Value::Kind::Int: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Value::Kind::Float:
    case Value::Kind::Undefined: return false;
    default: return v.identity() == o.identity();
  }
}
bool t_escaped(const Value& v, CallArgs& a) { return no_args(a, "escaped"), v.is_markup(); }

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"!=", t_ne},          {"<", t_lt},           {"<=", t_le},
    {"==", t_eq},          {">", t_gt},           {">=", t_ge},
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},
    {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq},
    {"escaped", t_escaped}, {"even", t_even},     {"false", t_false},
    {"float", t_float},    {"ge", t_ge},          {"greaterthan", t_gt},
    {"gt", t_gt},          {"in", t_in},          {"integer", t_integer},
    {"iterable", t_iterable}, {"le", t_le},       {"lessthan", t_lt},
    {"lower", t_lower},    {"lt", t_lt},          {"mapping", t_mapping},
    {"ne", t_ne},          {"none", t_none},      {"number", t_number},
    {"odd", t_odd},        {"sameas", t_sameas},  {"sequence", t_sequence},
    {"string", t_string},  {"true", t_true},      {"undefined", t_undefined},
    {"upper", t_upper},
};

constexpr std::string_view kUnsupportedTests[] = {"filter", "test"};

}  // namespace

int find_filter(std::string_view name) {
  for (size_t i = 0; i < std::size(kFilters); ++i)
    if (kFilters[i].name == name) return static_cast<int>(i);
  for (std::string_view u : kUnsupportedFilters)
    if (u == name) return kUnsupported;
  return kUnknown;
}

int find_test(std::string_view name) {
  for (size_t i = 0; i < std::size(kTests); ++i)
    if (kTests[i].name == name) return static_cast<int>(i);
  for (std::string_view u : kUnsupportedTests)
    if (u == name) return kUnsupported;
  return kUnknown;
}

Value call_filter(int index, const Value& input, CallArgs& args, const BuiltinContext& ctx) {
  return kFilters[static_cast<size_t>(index)].fn(input, args, ctx);
}

bool call_test(int index, const Value& input, CallArgs& args) { return kTests[static_cast<size_t>(index)].fn(input, args); }

}  // namespace sinkq::jinja
