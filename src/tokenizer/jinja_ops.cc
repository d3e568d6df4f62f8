// sinkq/tokenizer/jinja_ops.cc — Python's operators on chat-template values: ==, ordering,
// arithmetic, `in`, attribute and item access as jinja2's immutable sandbox does them, slices,
// iteration and % formatting (see jinja_value.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "tokenizer/jinja_pystr.h"
#include "tokenizer/jinja_value.h"

namespace sinkq::jinja {

namespace {

// jinja2's object_type_repr: "None" for None, else "<type> object".
std::string object_type(const Value& v) { return v.is_none() ? "None" : type_name(v) + " object"; }

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("{} has no attribute {}", py::repr(object_type(obj)), py::repr(name)));
}

Value missing_element(const Value& obj, const Value& key) {
  return Value::undefined(fmt::format("{} has no element {}", object_type(obj), to_repr(key)));
}

Value unsafe_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(
      fmt::format("access to attribute {} of {} object is unsafe.", py::repr(name), py::repr(type_name(obj))), true);
}

}  // namespace

// ------------------------------------------------------------------------ equality, ordering

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String:
      if (a.str().size() != b.str().size()) return false;
      budget().charge(a.str().size());
      return a.str() == b.str();
    case Value::Kind::List: {
      const ListData& x = a.list();
      const ListData& y = b.list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const DictData& x = a.dict();
      const DictData& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (!w || !equals(v, *w)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

int compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    const double x = a.as_float(), y = b.as_float();
    if (x < y) return -1;
    if (x > y) return 1;
    if (x == y) return 0;
    return kUnordered;
  }
  if (a.is_string() && b.is_string()) {
    budget().charge(std::min(a.str().size(), b.str().size()));
    const int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0;
  }
  if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
    const ValueList& x = a.list().items;
    const ValueList& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i], op);
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  raise("TypeError",
        fmt::format("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b)));
}

// ---------------------------------------------------------------------------------- operators

namespace {

const char* op_symbol(BinOp op) {
  switch (op) {
    case BinOp::Add: return "+";
    case BinOp::Sub: return "-";
    case BinOp::Mul: return "*";
    case BinOp::Div: return "/";
    case BinOp::FloorDiv: return "//";
    case BinOp::Mod: return "%";
    case BinOp::Pow: return "**";
  }
  return "?";
}

[[noreturn]] void unsupported(BinOp op, const Value& a, const Value& b) {
  raise("TypeError", fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op_symbol(op), type_name(a),
                                 type_name(b)));
}

[[noreturn]] void overflow() { raise("OverflowError", "integer result does not fit in 64 bits"); }

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (n > 0 && s.size() > budget().max_string_bytes / static_cast<uint64_t>(n)) budget().check_string(SIZE_MAX);
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::string_like(seq, std::move(out));
  }
  const ListData& l = seq.list();
  if (n > 0 && !l.items.empty()) budget().charge(l.items.size() * static_cast<uint64_t>(n) * sizeof(Value));
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.items.begin(), l.items.end());
  return Value::list(std::move(out), l.tuple);
}

int64_t int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1)
      if (__builtin_mul_overflow(result, base, &result)) overflow();
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) overflow();
  }
  return result;
}

// Python's float divmod (Objects/floatobject.c float_divmod).
std::pair<double, double> float_divmod(double vx, double wx) {
  if (wx == 0.0) raise("ZeroDivisionError", "float divmod()");
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  return {floordiv, mod};
}

Value int_binary(BinOp op, int64_t x, int64_t y) {
  int64_t r = 0;
  switch (op) {
    case BinOp::Add:
      if (__builtin_add_overflow(x, y, &r)) overflow();
      return Value::integer(r);
    case BinOp::Sub:
      if (__builtin_sub_overflow(x, y, &r)) overflow();
      return Value::integer(r);
    case BinOp::Mul:
      if (__builtin_mul_overflow(x, y, &r)) overflow();
      return Value::integer(r);
    case BinOp::Div:
      if (y == 0) raise("ZeroDivisionError", "division by zero");
      return Value::real(static_cast<double>(x) / static_cast<double>(y));
    case BinOp::FloorDiv:
    case BinOp::Mod: {
      if (y == 0) raise("ZeroDivisionError", "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) overflow();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        q -= 1;
      }
      return Value::integer(op == BinOp::Mod ? m : q);
    }
    case BinOp::Pow:
      if (y < 0) {
        if (x == 0) raise("ZeroDivisionError", "0.0 cannot be raised to a negative power");
        return Value::real(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      return Value::integer(int_pow(x, y));
  }
  return Value();
}

Value float_binary(BinOp op, double x, double y) {
  switch (op) {
    case BinOp::Add: return Value::real(x + y);
    case BinOp::Sub: return Value::real(x - y);
    case BinOp::Mul: return Value::real(x * y);
    case BinOp::Div:
      if (y == 0.0) raise("ZeroDivisionError", "float division by zero");
      return Value::real(x / y);
    case BinOp::FloorDiv:
      if (y == 0.0) raise("ZeroDivisionError", "float floor division by zero");
      return Value::real(float_divmod(x, y).first);
    case BinOp::Mod:
      if (y == 0.0) raise("ZeroDivisionError", "float modulo");
      return Value::real(float_divmod(x, y).second);
    case BinOp::Pow:
      if (x == 0.0 && y < 0) raise("ZeroDivisionError", "0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y)) raise("ValueError", "a negative number to a fractional power is complex");
      return Value::real(std::pow(x, y));
  }
  return Value();
}

}  // namespace

Value binary(BinOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return int_binary(op, a.as_int(), b.as_int());
    return float_binary(op, a.as_float(), b.as_float());
  }
  switch (op) {
    case BinOp::Add:
      if (a.is_string() && b.is_string()) {
        budget().check_string(a.str().size() + b.str().size());
        if (a.is_markup() || b.is_markup()) {  // Markup.__add__ / __radd__ escape the plain str
          return Value::markup((a.is_markup() ? a.str() : html_escape(a.str())) +
                               (b.is_markup() ? b.str() : html_escape(b.str())));
        }
        return Value::string(a.str() + b.str());
      }
      if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
        ValueList items = a.list().items;
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        return Value::list(std::move(items), a.list().tuple);
      }
      if (a.is_string() || a.is_list()) {
        raise("TypeError", fmt::format("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b),
                                       type_name(a)));
      }
      unsupported(op, a, b);
    case BinOp::Mul:
      if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(a, b.as_int());
      if (a.is_integral() && (b.is_string() || b.is_list())) return repeat(b, a.as_int());
      if (a.is_string() || a.is_list() || b.is_string() || b.is_list()) {
        raise("TypeError", fmt::format("can't multiply sequence by non-int of type '{}'",
                                       type_name(a.is_string() || a.is_list() ? b : a)));
      }
      unsupported(op, a, b);
    case BinOp::Mod:
      if (a.is_string()) return Value::string_like(a, percent_format(a.str(), b, a.is_markup()));
      unsupported(op, a, b);
    default:
      unsupported(op, a, b);
  }
}

Value negate(const Value& v) {
  if (v.is_undefined()) undefined_error(v);
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) overflow();
    return Value::integer(-v.as_int());
  }
  if (v.is_float()) return Value::real(-v.as_float());
  raise("TypeError", fmt::format("bad operand type for unary -: '{}'", type_name(v)));
}

Value unary_plus(const Value& v) {
  if (v.is_undefined()) undefined_error(v);
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) return v;
  raise("TypeError", fmt::format("bad operand type for unary +: '{}'", type_name(v)));
}

Value concat(const Value& a, const Value& b) {
  std::string s = to_str(a);
  const std::string t = to_str(b);
  budget().check_string(s.size() + t.size());
  s += t;
  return Value::string(std::move(s));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined: return false;  // Undefined iterates as empty
    case Value::Kind::String:
      if (!item.is_string()) {
        raise("TypeError", fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      }
      budget().charge(container.str().size());
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::List:
      budget().charge(container.list().items.size() * sizeof(Value));
      for (const Value& x : container.list().items)
        if (equals(x, item)) return true;
      return false;
    case Value::Kind::Dict:
      if (item.is_list() && !item.list().tuple) raise("TypeError", "unhashable type: 'list'");
      if (item.is_dict()) raise("TypeError", "unhashable type: 'dict'");
      return container.dict().find(item) != nullptr;
    default:
      raise("TypeError", fmt::format("argument of type '{}' is not iterable", type_name(container)));
  }
}

// ---------------------------------------------------------------------- attribute, item, slice

namespace {

bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Python's str methods (all of them: a name here resolves to a method, even the ones sinkq does
// not implement, which then fail when called; any other name is undefined).
bool is_str_method(std::string_view n) {
  return one_of(n, {"capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
                    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
                    "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower",
                    "lstrip", "maketrans", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex",
                    "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip",
                    "swapcase", "title", "translate", "upper", "zfill"});
}

// Methods of dict and list; the mutating ones are unsafe in the immutable sandbox.
Value container_method(const Value& obj, const std::string& name, bool& found) {
  found = true;
  if (obj.is_dict()) {
    if (one_of(name, {"items", "keys", "values", "get", "copy", "fromkeys"}))
      return Value::callable(Callable{Callable::Kind::Method, name, obj, nullptr, {}});
    if (one_of(name, {"clear", "pop", "popitem", "setdefault", "update"})) return unsafe_attribute(obj, name);
  } else if (obj.is_list()) {
    if (one_of(name, {"count", "index"}) || (!obj.list().tuple && name == "copy"))
      return Value::callable(Callable{Callable::Kind::Method, name, obj, nullptr, {}});
    if (!obj.list().tuple && one_of(name, {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"}))
      return unsafe_attribute(obj, name);
  } else if (obj.is_string() && is_str_method(name)) {
    return Value::callable(Callable{Callable::Kind::Method, name, obj, nullptr, {}});
  }
  found = false;
  return Value();
}

// Python index of a sequence of length n (negative counts from the end); false if out of range.
bool resolve_index(int64_t i, int64_t n, int64_t& out) {
  if (i < 0) i += n;
  if (i < 0 || i >= n) return false;
  out = i;
  return true;
}

std::string cp_at(const std::string& s, int64_t i) {
  budget().charge(s.size());
  if (py::is_ascii(s)) return s.substr(static_cast<size_t>(i), 1);
  std::string out;
  py::append_cp(out, py::decode(s)[static_cast<size_t>(i)]);
  return out;
}

}  // namespace

Value getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) undefined_error(obj);
  bool found = false;
  Value m = container_method(obj, name, found);
  if (found) return m;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find_str(name)) return *v;
  } else if (obj.is_ns()) {
    if (const Value* v = obj.ns().attrs.find_str(name)) return *v;
  }
  return missing_attribute(obj, name);
}

Value getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  switch (obj.kind()) {
    case Value::Kind::Dict:
      if (!(key.is_list() && !key.list().tuple) && !key.is_dict())
        if (const Value* v = obj.dict().find(key)) return *v;
      break;
    case Value::Kind::List:
      if (key.is_integral()) {
        int64_t i;
        if (resolve_index(key.as_int(), static_cast<int64_t>(obj.list().items.size()), i))
          return obj.list().items[static_cast<size_t>(i)];
        return missing_element(obj, key);
      }
      break;
    case Value::Kind::String:
      if (key.is_integral()) {
        int64_t i;
        if (resolve_index(key.as_int(), py::length(obj.str()), i)) return Value::string_like(obj, cp_at(obj.str(), i));
        return missing_element(obj, key);
      }
      break;
    default: break;
  }
  // jinja2 falls back to the attribute of that name (a method, a namespace attribute).
  if (key.is_string()) {
    bool found = false;
    Value m = container_method(obj, key.str(), found);
    if (found) return m;
    if (obj.is_ns()) {
      if (const Value* v = obj.ns().attrs.find(key)) return *v;
    }
    return missing_attribute(obj, key.str());
  }
  return missing_element(obj, key);
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) undefined_error(obj);
  auto bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_integral()) raise("TypeError", fmt::format("slice {} must be an integer or None", what));
    return v.as_int();
  };
  const std::optional<int64_t> b0 = bound(start, "indices"), e0 = bound(stop, "indices"), s0 = bound(step, "indices");
  const int64_t st = s0.value_or(1);
  if (st == 0) raise("ValueError", "slice step cannot be zero");
  if (!obj.is_string() && !obj.is_list()) return missing_element(obj, Value::string("slice"));
  if (obj.is_string()) budget().charge(obj.str().size());
  const bool ascii = obj.is_string() && py::is_ascii(obj.str());
  std::u32string cps;
  if (obj.is_string() && !ascii) cps = py::decode(obj.str());
  const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list().items.size())
                                  : (ascii ? static_cast<int64_t>(obj.str().size()) : static_cast<int64_t>(cps.size()));
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t b = adjust(b0, st < 0 ? n - 1 : 0);
  const int64_t e = adjust(e0, st < 0 ? -1 : n);
  std::vector<int64_t> idx;
  if (st > 0) {
    for (int64_t i = b; i < e; i += st) idx.push_back(i);
  } else {
    for (int64_t i = b; i > e; i += st) idx.push_back(i);
  }
  if (obj.is_list()) {
    ValueList out;
    out.reserve(idx.size());
    for (int64_t i : idx) out.push_back(obj.list().items[static_cast<size_t>(i)]);
    return Value::list(std::move(out), obj.list().tuple);
  }
  std::string out;
  for (int64_t i : idx) {
    if (ascii) {
      out += obj.str()[static_cast<size_t>(i)];
    } else {
      py::append_cp(out, cps[static_cast<size_t>(i)]);
    }
  }
  return Value::string_like(obj, std::move(out));
}

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List:
      budget().charge(v.list().items.size() * sizeof(Value));
      return v.list().items;
    case Value::Kind::Dict: {
      budget().charge(v.dict().items.size() * sizeof(Value));
      ValueList keys;
      keys.reserve(v.dict().items.size());
      for (const auto& kv : v.dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::String: {
      ValueList chars;
      for (char32_t c : py::decode(v.str())) {
        std::string s;
        py::append_cp(s, c);
        chars.push_back(Value::string(std::move(s)));
      }
      return chars;
    }
    default: raise("TypeError", fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

// ------------------------------------------------------------------------------ % formatting

std::string percent_format(const std::string& fmt_str, const Value& args, bool escape_args) {
  const bool mapping = args.is_dict();
  ValueList positional;
  if (args.is_list() && args.list().tuple) {
    positional = args.list().items;
  } else if (!mapping) {
    positional.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    const char c = fmt_str[i];
    if (c != '%') {
      out += c;
      continue;
    }
    if (++i >= fmt_str.size()) raise("ValueError", "incomplete format");
    if (fmt_str[i] == '%') {
      out += '%';
      continue;
    }
    const Value* arg = nullptr;
    if (fmt_str[i] == '(') {
      const size_t close = fmt_str.find(')', i);
      if (close == std::string::npos || !mapping) raise("TypeError", "format requires a mapping");
      arg = args.dict().find_str(fmt_str.substr(i + 1, close - i - 1));
      if (!arg) raise("KeyError", py::repr(fmt_str.substr(i + 1, close - i - 1)));
      i = close + 1;
    }
    std::string spec = "%";
    while (i < fmt_str.size() && std::string_view("-+ #0123456789.").find(fmt_str[i]) != std::string_view::npos)
      spec += fmt_str[i++];
    if (i >= fmt_str.size()) raise("ValueError", "incomplete format");
    const char conv = fmt_str[i];
    if (!arg) {
      if (next >= positional.size()) raise("TypeError", "not enough arguments for format string");
      arg = &positional[next++];
    }
    char buf[512];
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = conv == 's' ? to_str(*arg) : to_repr(*arg);
        if (escape_args && !arg->is_markup()) s = html_escape(s);
        // Flags, width and precision of a %s: '-' pads on the right; .N keeps N code points.
        const size_t dot = spec.find('.');
        if (dot != std::string::npos) {
          const int64_t keep = std::atoll(spec.c_str() + dot + 1);
          if (py::length(s) > keep) s = py::encode(py::decode(s).substr(0, static_cast<size_t>(keep)));
        }
        const size_t digits = spec.find_first_of("123456789");
        const int64_t width = digits != std::string::npos && digits < dot ? std::atoll(spec.c_str() + digits) : 0;
        const int64_t pad = std::max<int64_t>(0, width - py::length(s));
        budget().check_string(static_cast<size_t>(pad) + s.size());  // "%99999999999s": the limit, not an allocation
        if (spec.find('-') != std::string::npos) {
          out += s + std::string(static_cast<size_t>(pad), ' ');
        } else {
          out += std::string(static_cast<size_t>(pad), ' ') + s;
        }
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        if (!arg->is_number()) raise("TypeError", fmt::format("%{} format: a real number is required, not {}", conv, type_name(*arg)));
        const long long v = arg->is_float() ? static_cast<long long>(arg->as_float()) : arg->as_int();
        const char cc = conv == 'i' || conv == 'u' ? 'd' : conv;
        std::snprintf(buf, sizeof buf, (spec + "ll" + cc).c_str(), v);
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        if (!arg->is_number()) raise("TypeError", fmt::format("must be real number, not {}", type_name(*arg)));
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), arg->as_float());
        out += buf;
        break;
      case 'c':
        if (arg->is_string() && py::length(arg->str()) == 1) {
          out += arg->str();
        } else if (arg->is_integral()) {
          py::append_cp(out, static_cast<char32_t>(arg->as_int()));
        } else {
          raise("TypeError", "%c requires int or char");
        }
        break;
      default:
        raise("ValueError", fmt::format("unsupported format character '{}'", conv));
    }
    budget().check_string(out.size());
  }
  if (!mapping && next < positional.size()) raise("TypeError", "not all arguments converted during string formatting");
  return out;
}

}  // namespace sinkq::jinja
