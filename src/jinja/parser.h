// The Jinja syntax tree and the parser that builds it from lexer tokens.
//
// Statements supported: if/elif/else, for (with `if` filter, else, recursive),
// set (names, tuples, `ns.attr`, block set), macro, call, filter blocks, with,
// break/continue (loopcontrols), raw (handled by the lexer) and Hugging Face's
// `generation` block. include/extends/import/block have no loader in a chat
// template and are rejected at parse time.
//
// Syntax errors throw pagoda::Error: "<origin>:<line>: syntax error: ...".
// Nesting deeper than kMaxNesting (expressions or blocks) is a syntax error,
// so a hostile template cannot overflow the stack.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/lexer.h"
#include "jinja/value.h"

namespace pagoda::jinja {

inline constexpr int kMaxNesting = 200;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // children
    kTuple,     // children
    kDict,      // children: key0, value0, key1, value1, ...
    kGetAttr,   // children[0].name
    kGetItem,   // children[0][children[1]]
    kSlice,     // children[0][children[1]:children[2]:children[3]] (null = omitted)
    kCall,      // children[0](children[1..], kwargs)
    kFilter,    // name(children[0], children[1..], kwargs); children[0] null in filter blocks
    kTest,      // children[0] is name(children[1..], kwargs); negated
    kUnary,     // name in {"-", "+", "not"} applied to children[0]
    kBinary,    // children[0] name children[1]; name in + - * / // % ** ~ and or in "not in"
    kCompare,   // children[0] ops[0] children[1] ops[1] children[2] ...
    kCondExpr,  // children[1] if children[0] else children[2] (children[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Node;
using NodeList = std::vector<std::unique_ptr<Node>>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Node {
  enum class Kind {
    kData,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches: (cond, body)...; else_body
    kFor,          // for targets in expr [if filter] body [else else_body]
    kSet,          // targets (or ns.attr when attr non-empty) = expr
    kSetBlock,     // {% set targets[0] | filter %} body {% endset %}
    kMacro,        // name(params) body
    kCallBlock,    // {% call(params) expr %} body: caller()
    kFilterBlock,  // {% filter expr %} body (expr is a kFilter chain with null operand)
    kWith,         // with targets = values: body
    kBreak,
    kContinue,
    kScope,        // body in place (generation blocks)
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;  // for-loop `if`, set-block filter
  std::vector<std::string> targets;
  std::string attr;  // set ns.attr
  std::vector<ExprPtr> values;  // with
  std::vector<std::pair<ExprPtr, NodeList>> branches;
  NodeList body;
  NodeList else_body;
  std::vector<MacroParam> params;
  bool recursive = false;
};

// Parses a whole template. Throws pagoda::Error on syntax errors.
NodeList ParseTemplate(std::vector<Token> tokens, const std::string& origin);

}  // namespace pagoda::jinja
