// sinkq/tokenizer/jinja_methods.cc — str, Markup, dict and list methods and the global functions
// of the chat-template interpreter (see jinja_builtins.h).
#include <fmt/format.h>
#include <unicode/uchar.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_pystr.h"

namespace sinkq::jinja {

namespace {

Value str_list(std::vector<std::string> parts) {
  ValueList out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

// -------------------------------------------------------------------------------- str methods

Value str_format(const std::string& fmt_str, CallArgs& a) {
  // str.format with {} / {0} / {name}, an optional !s or !r conversion and no format spec.
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    const char c = fmt_str[i];
    if (c == '}') {
      if (i + 1 < fmt_str.size() && fmt_str[i + 1] == '}') ++i;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt_str.size() && fmt_str[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt_str.find('}', i);
    if (close == std::string::npos) raise("ValueError", "Single '{' encountered in format string");
    std::string field = fmt_str.substr(i + 1, close - i - 1);
    i = close;
    char conv = 's';
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      conv = bang + 1 < field.size() ? field[bang + 1] : 's';
      field = field.substr(0, bang);
    }
    if (field.find(':') != std::string::npos) raise("ValueError", "format specs in str.format are not supported by sinkq");
    const Value* arg = nullptr;
    if (field.empty()) {
      if (auto_index >= a.pos.size()) raise("IndexError", "Replacement index out of range for positional args tuple");
      arg = &a.pos[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t k = static_cast<size_t>(std::stoul(field));
      if (k >= a.pos.size()) raise("IndexError", "Replacement index out of range for positional args tuple");
      arg = &a.pos[k];
    } else {
      for (const auto& [k, x] : a.kw)
        if (k == field) arg = &x;
      if (!arg) raise("KeyError", py::repr(field));
    }
    out += conv == 'r' ? to_repr(*arg) : to_str(*arg);
    budget().check_string(out.size());
  }
  return Value::string(std::move(out));
}

bool prefix_test(const std::string& s, const Value& prefixes, bool at_start, std::string_view fn) {
  auto one = [&](const Value& p) {
    const std::string& x = need_str(p, std::string(fn) + " argument");
    if (x.size() > s.size()) return false;
    return at_start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (prefixes.is_list() && prefixes.list().tuple)
    return std::any_of(prefixes.list().items.begin(), prefixes.list().items.end(), one);
  return one(prefixes);
}

template <class Pred>
bool all_cps(const std::string& s, Pred pred) {
  const std::u32string cps = py::decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

Value str_method(const std::string& s, const std::string& name, CallArgs& a);

// Markup's methods (markupsafe): string arguments are escaped first, string results are Markup
// (split and its kin return lists of Markup; join escapes the items).
Value markup_method(const Value& self, const std::string& name, CallArgs& a) {
  const bool wraps_args = name != "split" && name != "rsplit" && name != "splitlines" && name != "join";
  if (wraps_args) {
    for (Value& v : a.pos)
      if (v.is_string()) v = escape(v);
    for (auto& kv : a.kw)
      if (kv.second.is_string()) kv.second = escape(kv.second);
  }
  if (name == "join" && !a.pos.empty()) {
    ValueList items;
    for (const Value& x : iterate(a.pos[0])) items.push_back(x.is_string() ? escape(x) : x);
    a.pos[0] = Value::list(std::move(items));
  }
  Value r = str_method(self.str(), name, a);
  if (r.is_string()) return Value::markup(r.str());
  if (r.is_list() && (name == "split" || name == "rsplit" || name == "splitlines" || name == "partition" ||
                      name == "rpartition")) {
    ValueList items;
    for (const Value& x : r.list().items) items.push_back(Value::markup(x.str()));
    return Value::list(std::move(items), r.list().tuple);
  }
  return r;
}

Value str_method(const std::string& s, const std::string& name, CallArgs& a) {
  budget().charge(s.size());  // every str method scans its string at least once
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Params p(a, name, {"chars"});
    return Value::string(py::strip(s, p.opt_string(0), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    Params p(a, name, {"sep", "maxsplit"});
    const std::optional<std::string> sep = p.opt_string(0);
    const int64_t maxsplit = p.integer(1, -1, "maxsplit");
    return str_list(name == "split" ? py::split(s, sep, maxsplit) : py::rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    Params p(a, name, {"keepends"});
    return str_list(py::splitlines(s, p.flag(0, false)));
  }
  if (name == "startswith" || name == "endswith") {
    Params p(a, name, {"prefix", "start", "end"});
    if (!p.has(0)) raise("TypeError", name + "() takes at least 1 argument (0 given)");
    if (p.has(1) || p.has(2)) raise("TypeError", name + "() with start/end is not supported by sinkq");
    return Value::boolean(prefix_test(s, p.at(0), name == "startswith", name));
  }
  if (name == "upper") return no_args(a, name), Value::string(py::upper(s));
  if (name == "lower" || name == "casefold") return no_args(a, name), Value::string(py::lower(s));
  if (name == "title") return no_args(a, name), Value::string(py::title(s));
  if (name == "capitalize") return no_args(a, name), Value::string(py::capitalize(s));
  if (name == "replace") {
    Params p(a, name, {"old", "new", "count"});
    if (!p.has(0) || !p.has(1)) raise("TypeError", "replace expected at least 2 arguments");
    return Value::string(py::replace(s, need_str(p.at(0), "replace() argument 1"), need_str(p.at(1), "replace() argument 2"),
                                     p.integer(2, -1, "count")));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Params p(a, name, {"sub"});
    if (!p.has(0)) raise("TypeError", name + "() takes at least 1 argument (0 given)");
    const std::string& sub = need_str(p.at(0), "must be str");
    if (name == "count") return Value::integer(py::count(s, sub));
    const int64_t at = name == "find" || name == "index" ? py::find(s, sub) : py::rfind(s, sub);
    if (at < 0 && (name == "index" || name == "rindex")) raise("ValueError", "substring not found");
    return Value::integer(at);
  }
  if (name == "join") {
    Params p(a, name, {"iterable"});
    if (!p.has(0)) raise("TypeError", "join() takes exactly one argument (0 given)");
    std::string out;
    size_t i = 0;
    for (const Value& x : iterate(p.at(0))) {
      if (!x.is_string())
        raise("TypeError", fmt::format("sequence item {}: expected str instance, {} found", i, type_name(x)));
      if (i++) out += s;
      out += x.str();
      budget().check_string(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "format") return str_format(s, a);
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    Params p(a, name, {"width", "fillchar"});
    const int64_t width = p.integer(0, 0, "width");
    const int64_t len = py::length(s);
    if (width <= len) return Value::string(s);
    budget().check_string(static_cast<size_t>(width) * 4);
    if (name == "center") {
      if (p.has(1)) raise("TypeError", "center() with a fill character is not supported by sinkq");
      return Value::string(py::center(s, width));
    }
    std::string fill = name == "zfill" ? "0" : (p.has(1) ? need_str(p.at(1), "fillchar") : " ");
    std::string pad;
    for (int64_t i = 0; i < width - len; ++i) pad += fill;
    if (name == "ljust") return Value::string(s + pad);
    if (name == "zfill" && !s.empty() && (s[0] == '+' || s[0] == '-')) return Value::string(s.substr(0, 1) + pad + s.substr(1));
    return Value::string(pad + s);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Params p(a, name, {"affix"});
    if (!p.has(0)) raise("TypeError", name + "() takes exactly one argument (0 given)");
    const std::string& x = need_str(p.at(0), name + "() argument");
    if (name == "removeprefix") return Value::string(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
    const bool ends = x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
    return Value::string(ends ? s.substr(0, s.size() - x.size()) : s);
  }
  if (name == "partition" || name == "rpartition") {
    Params p(a, name, {"sep"});
    if (!p.has(0)) raise("TypeError", name + "() takes exactly one argument (0 given)");
    const std::string& sep = need_str(p.at(0), name + "() argument");
    if (sep.empty()) raise("ValueError", "empty separator");
    const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos) {
      if (name == "partition") return Value::list({Value::string(s), Value::string(""), Value::string("")}, true);
      return Value::list({Value::string(""), Value::string(""), Value::string(s)}, true);
    }
    return Value::list({Value::string(s.substr(0, at)), Value::string(sep), Value::string(s.substr(at + sep.size()))}, true);
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") {
    no_args(a, name);
    return Value::boolean(all_cps(s, [](char32_t c) { return u_isdigit(static_cast<UChar32>(c)) != 0; }));
  }
  if (name == "isalpha") {
    no_args(a, name);
    return Value::boolean(all_cps(s, [](char32_t c) { return u_isalpha(static_cast<UChar32>(c)) != 0; }));
  }
  if (name == "isalnum") {
    no_args(a, name);
    return Value::boolean(all_cps(s, [](char32_t c) { return u_isalnum(static_cast<UChar32>(c)) != 0; }));
  }
  if (name == "isspace") return no_args(a, name), Value::boolean(all_cps(s, py::is_space));
  if (name == "islower") return no_args(a, name), Value::boolean(py::is_lower(s));
  if (name == "isupper") return no_args(a, name), Value::boolean(py::is_upper(s));
  raise("NotImplementedError", fmt::format("str.{}() is not supported by sinkq", name));
}

// ----------------------------------------------------------------------- dict and list methods

Value dict_method(const Value& self, const std::string& name, CallArgs& a) {
  const DictData& d = self.dict();
  if (name == "items" || name == "keys" || name == "values") {
    no_args(a, name);
    ValueList out;
    for (const auto& [k, v] : d.items) out.push_back(name == "items" ? tuple2(k, v) : name == "keys" ? k : v);
    return Value::list(std::move(out));
  }
  if (name == "get") {
    Params p(a, name, {"key", "default"});
    if (!p.has(0)) raise("TypeError", "get expected at least 1 argument, got 0");
    const Value& key = p.at(0);
    if ((key.is_list() && !key.list().tuple) || key.is_dict()) raise("TypeError", fmt::format("unhashable type: '{}'", type_name(key)));
    if (const Value* v = d.find(key)) return *v;
    return p.get(1, Value::none());
  }
  if (name == "copy") return no_args(a, name), self;
  raise("NotImplementedError", fmt::format("dict.{}() is not supported by sinkq", name));
}

Value list_method(const Value& self, const std::string& name, CallArgs& a) {
  const ValueList& items = self.list().items;
  budget().charge(items.size() * sizeof(Value));
  if (name == "count" || name == "index") {
    Params p(a, name, {"value"});
    if (!p.has(0)) raise("TypeError", name + "() takes exactly one argument (0 given)");
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!equals(items[i], p.at(0))) continue;
      if (name == "index") return Value::integer(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") raise("ValueError", fmt::format("{} is not in {}", to_repr(p.at(0)), type_name(self)));
    return Value::integer(n);
  }
  if (name == "copy") return no_args(a, name), self;
  raise("NotImplementedError", fmt::format("{}.{}() is not supported by sinkq", type_name(self), name));
}

// ---------------------------------------------------------------------------------- globals

constexpr std::string_view kGlobals[] = {"range", "namespace", "dict", "raise_exception", "strftime_now",
                                         "lipsum", "cycler", "joiner"};

// dict(mapping_or_pairs, **kwargs), as namespace() and dict() build their contents.
DictData dict_from_args(CallArgs& a, std::string_view fn) {
  if (a.pos.size() > 1) raise("TypeError", fmt::format("{} expected at most 1 argument, got {}", fn, a.pos.size()));
  DictData d;
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict()) {
      d = src.dict();
    } else if (src.is_ns()) {
      d = src.ns().attrs;
    } else {
      for (const Value& pair : iterate(src)) {
        if (!pair.is_list() || pair.list().items.size() != 2)
          raise("ValueError", "dictionary update sequence element has the wrong length; 2 is required");
        d.set(pair.list().items[0], pair.list().items[1]);
      }
    }
  }
  for (auto& [k, v] : a.kw) d.set(Value::string(k), v);
  return d;
}

std::string strftime_py(const std::string& format, const std::tm& now) {
  // %f (microseconds) is Python's own; the time here has whole seconds.
  const std::string f = py::replace(format, "%f", "000000", -1);
  if (f.empty()) return {};
  std::vector<char> buf(256);
  while (true) {
    const size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &now);
    if (n > 0) return std::string(buf.data(), n);
    if (buf.size() > (1u << 20)) return {};
    buf.resize(buf.size() * 4);
  }
}

}  // namespace

Value call_method(const Value& self, const std::string& name, CallArgs& args) {
  if (self.is_markup()) return markup_method(self, name, args);
  if (self.is_string()) return str_method(self.str(), name, args);
  if (self.is_dict()) return dict_method(self, name, args);
  if (self.is_list()) return list_method(self, name, args);
  if (self.is_int() && name == "cycle") {  // loop.cycle(...): the receiver is loop.index0
    if (args.pos.empty()) raise("TypeError", "no items for cycling given");
    return args.pos[static_cast<size_t>(self.as_int() % static_cast<int64_t>(args.pos.size()))];
  }
  raise("TypeError", fmt::format("'{}' object has no method '{}'", type_name(self), name));
}

Value global_function(std::string_view name) {
  for (std::string_view g : kGlobals)
    if (g == name) return Value::callable(Callable{Callable::Kind::Global, std::string(name), Value(), nullptr, {}});
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Value call_global(const std::string& name, CallArgs& a, const BuiltinContext& ctx) {
  if (name == "raise_exception") {
    Params p(a, name, {"message"});
    throw Failure(p.has(0) ? to_str(p.at(0)) : "", Failure::Kind::Refused);
  }
  if (name == "strftime_now") {
    Params p(a, name, {"format"});
    if (!p.has(0)) raise("TypeError", "strftime_now() missing 1 required positional argument: 'format'");
    return Value::string(strftime_py(need_str(p.at(0), "strftime() argument 1"), ctx.now));
  }
  if (name == "namespace") {
    auto ns = std::make_shared<NamespaceData>();
    ns->attrs = dict_from_args(a, "namespace");
    budget().charge(sizeof(NamespaceData) + ns->attrs.items.size() * 2 * sizeof(Value));
    if (ctx.namespaces) ctx.namespaces->push_back(ns);
    return Value::ns(std::move(ns));
  }
  if (name == "dict") return Value::dict(dict_from_args(a, "dict"));
  if (name == "range") {
    if (!a.kw.empty()) raise("TypeError", "range() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 3) raise("TypeError", fmt::format("range expected 1 to 3 arguments, got {}", a.pos.size()));
    for (const Value& v : a.pos)
      if (!v.is_integral()) raise("TypeError", fmt::format("'{}' object cannot be interpreted as an integer", type_name(v)));
    const int64_t start = a.pos.size() == 1 ? 0 : a.pos[0].as_int();
    const int64_t stop = a.pos.size() == 1 ? a.pos[0].as_int() : a.pos[1].as_int();
    const int64_t step = a.pos.size() == 3 ? a.pos[2].as_int() : 1;
    if (step == 0) raise("ValueError", "range() arg 3 must not be zero");
    // The sandbox's limit (jinja2.sandbox.MAX_RANGE).
    constexpr int64_t kMaxRange = 100000;
    const double count = step > 0 ? std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step))
                                   : std::ceil((static_cast<double>(start) - static_cast<double>(stop)) / static_cast<double>(-step));
    if (count > static_cast<double>(kMaxRange))
      raise("OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    ValueList out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      out.push_back(Value::integer(i));
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    return Value::list(std::move(out));
  }
  raise("NotImplementedError", fmt::format("{}() is not supported by sinkq", name));
}

}  // namespace sinkq::jinja
