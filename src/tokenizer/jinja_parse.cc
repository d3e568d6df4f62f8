// sinkq/tokenizer/jinja_parse.cc — the parser of chat templates (see jinja_ast.h).
//
// jinja2's grammar (precedence from loosest: `x if c else y`, or, and, not, comparisons and `in`,
// + -, ~, * / // %, **, unary - +, then filters `|f` and tests `is t`, then postfix .attr [index]
// (call)), restricted to the statements chat templates use. Filter and test names are resolved
// here, so an unknown or unsupported one is a syntax error with its position.
#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_lex.h"

namespace sinkq::jinja {

namespace {

// Recursion guard: templates nest a handful of levels; a hostile one must not overflow the stack.
constexpr int kMaxNesting = 400;

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::Data: return "text";
    case Tok::VarBegin: return "'{{'";
    case Tok::VarEnd: return "'}}'";
    case Tok::BlockBegin: return "'{%'";
    case Tok::BlockEnd: return "'%}'";
    case Tok::Name: return "'" + t.text + "'";
    case Tok::String: return "a string";
    case Tok::Int:
    case Tok::Float: return "a number";
    case Tok::Op: return "'" + t.text + "'";
    case Tok::Eof: return "the end of the template";
  }
  return "?";
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse() {
    Body body = subparse({});
    if (cur().type != Tok::Eof) syntax_error(cur().pos, "unexpected " + describe(cur()));
    return body;
  }

 private:
  // ------------------------------------------------------------------------- token stream
  const Token& cur() const { return t_[i_]; }
  const Token& look() const { return t_[std::min(i_ + 1, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool is_op(std::string_view op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) syntax_error(cur().pos, fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  const Token& expect_name() {
    if (cur().type != Tok::Name) syntax_error(cur().pos, "expected a name, got " + describe(cur()));
    return next();
  }
  void expect_block_end(std::string_view tag) {
    if (cur().type != Tok::BlockEnd)
      syntax_error(cur().pos, fmt::format("expected '%}}' to end the '{}' tag, got {}", tag, describe(cur())));
    next();
  }

  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting)
        syntax_error(p_.cur().pos, fmt::format("the template nests deeper than {} levels (the limit)", kMaxNesting));
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  static ExprPtr make(ExprKind k, uint32_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = pos;
    return e;
  }
  static ExprPtr make2(ExprKind k, uint32_t pos, ExprPtr a, ExprPtr b) {
    ExprPtr e = make(k, pos);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  // ---------------------------------------------------------------------------- statements

  // Nodes until a {% tag %} whose name is in `ends` (left as the current token) or the end.
  Body subparse(std::initializer_list<std::string_view> ends) {
    Depth d(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) return body;
      if (t.type == Tok::Data) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::Text;
        n->pos = t.pos;
        n->text = t.text;
        body.push_back(std::move(n));
        next();
      } else if (t.type == Tok::VarBegin) {
        next();
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::Print;
        n->pos = t.pos;
        n->expr = parse_tuple(true, {});
        if (cur().type != Tok::VarEnd) syntax_error(cur().pos, "expected '}}', got " + describe(cur()));
        next();
        body.push_back(std::move(n));
      } else if (t.type == Tok::BlockBegin) {
        next();
        if (cur().type != Tok::Name) syntax_error(cur().pos, "expected a tag name after '{%', got " + describe(cur()));
        for (std::string_view e : ends)
          if (cur().text == e) return body;
        if (NodePtr n = statement(t.pos)) body.push_back(std::move(n));
      } else {
        syntax_error(t.pos, "unexpected " + describe(t));
      }
    }
  }

  // After the tag's first line: the body up to one of `ends` (which is consumed; returned in *end).
  Body block_body(std::string_view tag, uint32_t tag_pos, std::initializer_list<std::string_view> ends,
                  std::string* end = nullptr) {
    expect_block_end(tag);
    Body body = subparse(ends);
    if (cur().type == Tok::Eof) {
      std::string want;
      for (std::string_view e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
      syntax_error(tag_pos, fmt::format("this '{}' tag is never closed (expected {})", tag, want));
    }
    if (end) *end = cur().text;
    next();
    return body;
  }

  NodePtr statement(uint32_t pos) {
    const std::string name = cur().text;
    const uint32_t name_pos = cur().pos;
    auto n = std::make_unique<Node>();
    n->pos = pos;
    if (name == "if") {
      next();
      n->kind = NodeKind::If;
      while (true) {
        n->tests.push_back(parse_tuple(false, {}));
        std::string end;
        n->bodies.push_back(block_body("if", pos, {"elif", "else", "endif"}, &end));
        if (end == "elif") continue;
        if (end == "else") n->else_body = block_body("else", pos, {"endif"});
        break;
      }
      expect_block_end("endif");
    } else if (name == "for") {
      next();
      n->kind = NodeKind::For;
      n->target = parse_target(false, {"in"});
      if (!skip_name("in")) syntax_error(cur().pos, "expected 'in' in the for tag, got " + describe(cur()));
      n->expr = parse_tuple(false, {"recursive"});
      if (skip_name("if")) n->cond = parse_expression(true);
      if (is_name("recursive")) syntax_error(cur().pos, "recursive for loops are not supported");
      ++loops_;
      std::string end;
      n->body = block_body("for", pos, {"endfor", "else"}, &end);
      --loops_;
      if (end == "else") n->else_body = block_body("else", pos, {"endfor"});
      expect_block_end("endfor");
    } else if (name == "set") {
      next();
      n->target = parse_target(true, {});
      if (skip_op("=")) {
        n->kind = NodeKind::Set;
        n->expr = parse_tuple(true, {});
        expect_block_end("set");
      } else {
        n->kind = NodeKind::SetBlock;
        while (skip_op("|")) n->filters.push_back(parse_filter(nullptr));
        n->body = block_body("set", pos, {"endset"});
        expect_block_end("endset");
      }
    } else if (name == "macro") {
      next();
      n->kind = NodeKind::Macro;
      n->macro = std::make_unique<MacroNode>();
      n->macro->pos = pos;
      n->macro->name = expect_name().text;
      expect_op("(");
      while (!is_op(")")) {
        if (!n->macro->params.empty()) expect_op(",");
        if (is_op(")")) break;
        MacroParam param;
        const Token& pt = expect_name();
        param.name = pt.text;
        if (skip_op("=")) {
          param.default_value = parse_expression(true);
        } else if (!n->macro->params.empty() && n->macro->params.back().default_value) {
          syntax_error(pt.pos, "non-default argument follows default argument");
        }
        n->macro->params.push_back(std::move(param));
      }
      expect_op(")");
      const int saved_loops = loops_;
      loops_ = 0;
      n->macro->body = block_body("macro", pos, {"endmacro"});
      loops_ = saved_loops;
      if (cur().type == Tok::Name) next();  // {% endmacro name %}
      expect_block_end("endmacro");
    } else if (name == "filter") {
      next();
      n->kind = NodeKind::FilterBlock;
      n->filters.push_back(parse_filter(nullptr));
      while (skip_op("|")) n->filters.push_back(parse_filter(nullptr));
      n->body = block_body("filter", pos, {"endfilter"});
      expect_block_end("endfilter");
    } else if (name == "with") {
      next();
      n->kind = NodeKind::With;
      while (cur().type != Tok::BlockEnd) {
        if (!n->targets.empty()) expect_op(",");
        n->targets.push_back(parse_target(false, {}));
        expect_op("=");
        n->values.push_back(parse_expression(true));
      }
      n->body = block_body("with", pos, {"endwith"});
      expect_block_end("endwith");
    } else if (name == "generation") {
      next();
      n->kind = NodeKind::Scope;
      n->body = block_body("generation", pos, {"endgeneration"});
      expect_block_end("endgeneration");
    } else if (name == "break" || name == "continue") {
      next();
      if (loops_ == 0) syntax_error(name_pos, fmt::format("'{}' outside a for loop", name));
      n->kind = name == "break" ? NodeKind::Break : NodeKind::Continue;
      expect_block_end(name);
    } else if (name == "print") {
      next();
      n->kind = NodeKind::Print;  // each comma-separated expression is printed in turn
      do {
        n->values.push_back(parse_expression(true));
      } while (skip_op(","));
      expect_block_end("print");
    } else if (name == "block" || name == "extends" || name == "include" || name == "import" || name == "from" ||
               name == "call" || name == "autoescape" || name == "trans") {
      syntax_error(name_pos, fmt::format("the '{}' tag is not supported in chat templates", name));
    } else {
      syntax_error(name_pos, fmt::format("unknown tag '{}'", name));
    }
    return n;
  }

  // Assignment target: name, tuple of names (in parentheses or not), or (for set) name.attr.
  Target parse_target(bool with_namespace, std::initializer_list<std::string_view> extra_end) {
    Target t;
    t.pos = cur().pos;
    if (with_namespace && cur().type == Tok::Name && look().type == Tok::Op && look().text == ".") {
      t.kind = Target::Kind::Attr;
      t.name = next().text;
      next();
      t.attr = expect_name().text;
      return t;
    }
    // simplified tuple: primaries separated by commas
    std::vector<Target> items;
    bool tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        tuple = true;
        if (tuple_end(extra_end)) break;
      }
      items.push_back(target_primary());
    }
    if (!tuple) return std::move(items[0]);
    t.kind = Target::Kind::Tuple;
    t.items = std::move(items);
    return t;
  }

  Target target_primary() {
    Depth d(*this);
    Target t;
    t.pos = cur().pos;
    if (skip_op("(")) {
      if (skip_op(")")) syntax_error(t.pos, "cannot assign to an empty tuple");
      t = parse_target(false, {});
      if (t.kind != Target::Kind::Tuple && is_op(",")) syntax_error(cur().pos, "unexpected ','");
      expect_op(")");
      return t;
    }
    const Token& n = expect_name();
    if (n.text == "true" || n.text == "false" || n.text == "none" || n.text == "True" || n.text == "False" ||
        n.text == "None")
      syntax_error(n.pos, fmt::format("cannot assign to '{}'", n.text));
    t.name = n.text;
    return t;
  }

  // ---------------------------------------------------------------------------- expressions

  bool tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof) return true;
    if (t.type == Tok::Op && (t.text == ")" || t.text == "]" || t.text == "}" || t.text == "=")) return true;
    if (t.type == Tok::Name)
      for (std::string_view e : extra_end)
        if (t.text == e) return true;
    return false;
  }

  // Comma-separated expressions: a tuple if there is a comma, else the one expression.
  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end, bool explicit_parens = false) {
    const uint32_t pos = cur().pos;
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        comma = true;
      }
      if (tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
    }
    if (!comma) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) syntax_error(cur().pos, "expected an expression, got " + describe(cur()));
    }
    ExprPtr e = make(ExprKind::Tuple, pos);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    Depth d(*this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const uint32_t pos = next().pos;
      ExprPtr c = make(ExprKind::Cond, pos);
      c->args.push_back(std::move(e));
      c->args.push_back(parse_or());
      c->args.push_back(skip_name("else") ? parse_condexpr() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const uint32_t pos = next().pos;
      e = make2(ExprKind::Or, pos, std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const uint32_t pos = next().pos;
      e = make2(ExprKind::And, pos, std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    Depth d(*this);
    if (is_name("not")) {
      const uint32_t pos = next().pos;
      ExprPtr e = make(ExprKind::Not, pos);
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const uint32_t pos = cur().pos;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      CmpOp op;
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
                                    cur().text == ">" || cur().text == ">=")) {
        const std::string& o = next().text;
        op = o == "==" ? CmpOp::Eq : o == "!=" ? CmpOp::Ne : o == "<" ? CmpOp::Lt : o == "<=" ? CmpOp::Le
             : o == ">" ? CmpOp::Gt : CmpOp::Ge;
      } else if (skip_name("in")) {
        op = CmpOp::In;
      } else if (is_name("not") && look().type == Tok::Name && look().text == "in") {
        next();
        next();
        op = CmpOp::NotIn;
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::Compare, pos);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      ExprPtr b = make2(ExprKind::Binary, t.pos, std::move(e), parse_concat());
      b->op = t.text == "+" ? BinOp::Add : BinOp::Sub;
      e = std::move(b);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const uint32_t pos = next().pos;
      e = make2(ExprKind::Concat, pos, std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      ExprPtr b = make2(ExprKind::Binary, t.pos, std::move(e), parse_pow());
      b->op = t.text == "*" ? BinOp::Mul : t.text == "/" ? BinOp::Div : t.text == "//" ? BinOp::FloorDiv : BinOp::Mod;
      e = std::move(b);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const uint32_t pos = next().pos;
      ExprPtr b = make2(ExprKind::Binary, pos, std::move(e), parse_unary(true));
      b->op = BinOp::Pow;
      e = std::move(b);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    Depth d(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = make(t.text == "-" ? ExprKind::Neg : ExprKind::Pos, t.pos);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    Depth d(*this);
    const Token& t = cur();
    const uint32_t pos = t.pos;
    switch (t.type) {
      case Tok::Name: {
        next();
        ExprPtr e = make(ExprKind::Const, pos);
        if (t.text == "true" || t.text == "True") {
          e->value = Value::boolean(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value::boolean(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::none();
        } else {
          e->kind = ExprKind::Name;
          e->name = t.text;
        }
        return e;
      }
      case Tok::String: {
        std::string s;
        while (cur().type == Tok::String) s += next().text;  // adjacent literals concatenate
        ExprPtr e = make(ExprKind::Const, pos);
        e->value = Value::string(std::move(s));
        return e;
      }
      case Tok::Int:
      case Tok::Float: {
        next();
        ExprPtr e = make(ExprKind::Const, pos);
        e->value = t.type == Tok::Int ? Value::integer(t.i) : Value::real(t.f);
        return e;
      }
      case Tok::Op:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, {}, /*explicit_parens=*/true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          ExprPtr e = make(ExprKind::List, pos);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(parse_expression(true));
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          next();
          ExprPtr e = make(ExprKind::Dict, pos);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            e->args.push_back(parse_expression(true));
            expect_op(":");
            e->args.push_back(parse_expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    syntax_error(pos, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const uint32_t pos = next().pos;
        if (cur().type == Tok::Name) {
          ExprPtr a = make(ExprKind::Attr, pos);
          a->name = next().text;
          a->args.push_back(std::move(e));
          e = std::move(a);
        } else if (cur().type == Tok::Int) {
          ExprPtr key = make(ExprKind::Const, cur().pos);
          key->value = Value::integer(next().i);
          e = make2(ExprKind::Item, pos, std::move(e), std::move(key));
        } else {
          syntax_error(cur().pos, "expected a name or a number after '.', got " + describe(cur()));
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    Depth d(*this);
    const uint32_t pos = next().pos;  // '['
    std::vector<ExprPtr> subs;
    while (!is_op("]")) {
      if (!subs.empty()) expect_op(",");
      subs.push_back(parse_subscribed());
    }
    expect_op("]");
    if (subs.empty()) syntax_error(pos, "expected a subscript");
    if (subs.size() == 1 && subs[0]->kind == ExprKind::Slice) {
      subs[0]->args[0] = std::move(obj);
      return std::move(subs[0]);
    }
    ExprPtr key;
    if (subs.size() == 1) {
      key = std::move(subs[0]);
    } else {
      key = make(ExprKind::Tuple, pos);
      for (auto& s : subs) {
        if (s->kind == ExprKind::Slice) syntax_error(s->pos, "slices inside a tuple subscript are not supported");
        key->args.push_back(std::move(s));
      }
    }
    return make2(ExprKind::Item, pos, std::move(obj), std::move(key));
  }

  // An index expression, or a slice (an Expr of kind Slice whose args[0] is filled in later).
  ExprPtr parse_subscribed() {
    const uint32_t pos = cur().pos;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();  // ':'
    ExprPtr s = make(ExprKind::Slice, pos);
    s->args.push_back(nullptr);
    s->args.push_back(std::move(start));
    s->args.push_back(is_op(":") || is_op("]") || is_op(",") ? nullptr : parse_expression(true));
    if (skip_op(":")) {
      s->args.push_back(is_op("]") || is_op(",") ? nullptr : parse_expression(true));
    } else {
      s->args.push_back(nullptr);
    }
    return s;
  }

  // (args, name=kwargs) into e->args (after what is already there) and e->kwargs.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool need_comma = false;
    while (!is_op(")")) {
      if (need_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) syntax_error(cur().pos, "*args and **kwargs in calls are not supported");
      if (cur().type == Tok::Name && look().type == Tok::Op && look().text == "=") {
        Keyword k;
        k.name = next().text;
        next();
        k.value = parse_expression(true);
        e.kwargs.push_back(std::move(k));
      } else {
        if (!e.kwargs.empty()) syntax_error(cur().pos, "positional argument follows keyword argument");
        e.args.push_back(parse_expression(true));
      }
      need_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    Depth d(*this);
    ExprPtr e = make(ExprKind::Call, cur().pos);
    e->args.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  // One filter after '|' (already consumed): name(.name)* [(args)].
  ExprPtr parse_filter(ExprPtr input) {
    Depth d(*this);
    const Token& t = expect_name();
    ExprPtr e = make(ExprKind::Filter, t.pos);
    e->name = t.text;
    while (skip_op(".")) e->name += "." + expect_name().text;
    e->builtin = find_filter(e->name);
    if (e->builtin == kUnsupported) syntax_error(t.pos, fmt::format("the '{}' filter is not supported", e->name));
    if (e->builtin == kUnknown) syntax_error(t.pos, fmt::format("no filter named '{}'", e->name));
    e->args.push_back(std::move(input));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (skip_op("|")) {
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_test(ExprPtr input) {
    Depth d(*this);
    const uint32_t pos = next().pos;  // 'is'
    ExprPtr e = make(ExprKind::Test, pos);
    e->negated = skip_name("not");
    const Token& t = expect_name();
    e->name = t.text;
    while (skip_op(".")) e->name += "." + expect_name().text;
    e->builtin = find_test(e->name);
    if (e->builtin == kUnsupported) syntax_error(t.pos, fmt::format("the '{}' test is not supported", e->name));
    if (e->builtin == kUnknown) syntax_error(t.pos, fmt::format("no test named '{}'", e->name));
    e->args.push_back(std::move(input));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) syntax_error(cur().pos, "tests cannot be chained with 'is'");
      e->args.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
    }
    return e;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;  // for loops around the current position (break/continue need one)
};

}  // namespace

Body parse_template(std::string_view text) {
  if (text.size() >= kNoPos) throw Failure("the template is larger than 4 GiB");
  Parser parser(lex(text));
  return parser.parse();
}

}  // namespace sinkq::jinja
