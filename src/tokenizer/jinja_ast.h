// sinkq/tokenizer/jinja_ast.h — the syntax tree of a parsed chat template and the parser's entry
// point (internal header; see chat_template.h for the supported subset; jinja_lex.cc, jinja_parse.cc).
//
// Positions are byte offsets into the template text after newline normalisation (\r\n and \r
// become \n, and one trailing newline is dropped, as jinja2 does); line_col() turns one into the
// 1-based line and column (in code points) that error messages show.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace sinkq::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  Const,    // value
  Name,     // name
  List,     // args: items
  Tuple,    // args: items
  Dict,     // args: key0, value0, key1, value1, ...
  Attr,     // args[0].name
  Item,     // args[0][args[1]]
  Slice,    // args[0][args[1]:args[2]:args[3]] (absent parts are null)
  Call,     // args[0](args[1..], kwargs)
  Filter,   // args[0] | name(args[1..], kwargs); args[0] is null in {% filter %} / {% set x | f %}
  Test,     // args[0] is [not] name(args[1..], kwargs)
  Neg,      // -args[0]
  Pos,      // +args[0]
  Not,      // not args[0]
  Binary,   // args[0] op args[1]
  Concat,   // args[0] ~ args[1]
  And,      // args[0] and args[1]
  Or,       // args[0] or args[1]
  Compare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained, as Python)
  Cond,     // args[0] if args[1] else args[2] (args[2] null: no else)
};

enum class CmpOp { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Keyword {
  std::string name;
  ExprPtr value;
};

struct Expr {
  ExprKind kind = ExprKind::Const;
  uint32_t pos = 0;
  Value value;                  // Const
  std::string name;             // Name, Attr, Filter, Test
  BinOp op = BinOp::Add;        // Binary
  bool negated = false;         // Test: `is not`
  int builtin = -1;             // Filter, Test: index in the builtin table (jinja_builtins.h)
  std::vector<ExprPtr> args;
  std::vector<Keyword> kwargs;  // Call, Filter, Test
  std::vector<CmpOp> ops;       // Compare
};

// An assignment target: a name, a tuple of targets (`for k, v in ...`), or ns.attr.
struct Target {
  enum class Kind { Name, Tuple, Attr };
  Kind kind = Kind::Name;
  uint32_t pos = 0;
  std::string name;  // Name; Attr: the namespace variable
  std::string attr;  // Attr
  std::vector<Target> items;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct MacroNode {
  uint32_t pos = 0;
  std::string name;
  std::vector<MacroParam> params;
  Body body;
};

enum class NodeKind {
  Text,         // text
  Print,        // {{ expr }}; {% print values... %}
  If,           // tests[i] -> bodies[i], else else_body
  For,          // for target in expr [if cond]: body, else else_body
  Set,          // set target = expr
  SetBlock,     // set target [| filters]: body endset
  Macro,        // macro
  FilterBlock,  // filter filters: body endfilter
  With,         // with targets = values: body endwith
  Scope,        // generation: body endgeneration (transformers' assistant-mask tag; renders its body)
  Break,
  Continue,
};

struct Node {
  NodeKind kind = NodeKind::Text;
  uint32_t pos = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<ExprPtr> tests;
  std::vector<Body> bodies;
  Body body, else_body;
  Target target;
  std::vector<Target> targets;
  std::vector<ExprPtr> values;
  std::vector<ExprPtr> filters;  // Filter expressions with a null input, applied in order
  std::unique_ptr<MacroNode> macro;
};

// jinja2's newline handling: \r\n and \r become \n, and one trailing newline is removed.
std::string normalize_newlines(std::string_view text);
// 1-based line and column (in code points) of byte offset `pos` in normalised text.
std::pair<int, int> line_col(std::string_view text, uint32_t pos);

// Parses normalised template text (trim_blocks and lstrip_blocks on, as transformers sets them).
// Throws Failure (with pos) for syntax errors and constructs outside the supported subset.
Body parse_template(std::string_view text);

}  // namespace sinkq::jinja
