#include "jinja/parser.h"

#include <cstdlib>
#include <initializer_list>

#include "core/error.h"
#include "jinja/filters.h"

namespace pagoda::jinja {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin)
      : tokens_(std::move(tokens)), origin_(origin) {}

  NodeList ParseAll() {
    std::string end_tag;
    NodeList body = ParseBody({}, &end_tag);
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t k = 1) const {
    return tokens_[std::min(pos_ + k, tokens_.size() - 1)];
  }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(const char* op) const { return Cur().type == TokenType::kOperator && Cur().text == op; }
  bool IsName(const char* name) const {
    return Cur().type == TokenType::kName && Cur().text == name;
  }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(const char* name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  [[noreturn]] void Fail(const std::string& message, int line = 0) const {
    ThrowInvalidArgument(origin_ + ":" + std::to_string(line ? line : Cur().line) +
                         ": syntax error: " + message);
  }
  std::string Describe(const Token& t) const {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kVarEnd: return "end of print statement";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kData: return "template data";
      case TokenType::kString: return "string";
      default: return "'" + t.text + "'";
    }
  }
  void ExpectOp(const char* op) {
    if (!SkipOp(op)) Fail(std::string("expected '") + op + "', got " + Describe(Cur()));
  }
  std::string ExpectName() {
    if (Cur().type != TokenType::kName) Fail("expected a name, got " + Describe(Cur()));
    std::string name = Cur().text;
    Next();
    return name;
  }
  void ExpectBlockEnd() {
    if (Cur().type != TokenType::kBlockEnd) {
      Fail("expected end of statement block, got " + Describe(Cur()));
    }
    Next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->depth_ > kMaxNesting) p->Fail("template nested too deeply");
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };

  ExprPtr Make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----

  // Parses nodes until a block whose first name is in `end_tags` (left unconsumed
  // after `{%`, name stored in *end_tag) or the end of the template.
  NodeList ParseBody(std::initializer_list<const char*> end_tags, std::string* end_tag,
                     const char* opener = nullptr, int opener_line = 0) {
    DepthGuard guard(this);
    NodeList body;
    while (true) {
      const Token& t = Cur();
      if (t.type == TokenType::kEof) {
        if (end_tags.size() == 0) return body;
        std::string wanted;
        for (const char* tag : end_tags) wanted += (wanted.empty() ? "'" : " or '") + std::string(tag) + "'";
        Fail(std::string("unexpected end of template; looking for ") + wanted + " to close '" +
                 opener + "'",
             opener_line);
      }
      if (t.type == TokenType::kData) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kData;
        node->line = t.line;
        node->text = t.text;
        body.push_back(std::move(node));
        Next();
      } else if (t.type == TokenType::kVarBegin) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kOutput;
        node->line = t.line;
        Next();
        node->expr = ParseTuple(true);
        if (Cur().type != TokenType::kVarEnd) Fail("expected '}}', got " + Describe(Cur()));
        Next();
        body.push_back(std::move(node));
      } else if (t.type == TokenType::kBlockBegin) {
        Next();
        if (Cur().type == TokenType::kName) {
          for (const char* tag : end_tags) {
            if (Cur().text == tag) {
              *end_tag = tag;
              Next();
              return body;
            }
          }
        }
        body.push_back(ParseStatement());
      } else {
        Fail("unexpected " + Describe(t));
      }
    }
  }

  std::unique_ptr<Node> NewNode(Node::Kind kind, int line) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->line = line;
    return node;
  }

  std::unique_ptr<Node> ParseStatement() {
    int line = Cur().line;
    if (Cur().type != TokenType::kName) Fail("tag name expected");
    std::string tag = Cur().text;
    Next();
    if (tag == "if") return ParseIf(line);
    if (tag == "for") return ParseFor(line);
    if (tag == "set") return ParseSet(line);
    if (tag == "macro") return ParseMacro(line);
    if (tag == "call") return ParseCall(line);
    if (tag == "filter") return ParseFilterBlock(line);
    if (tag == "with") return ParseWith(line);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) Fail("'" + tag + "' outside of a loop");
      ExpectBlockEnd();
      return NewNode(tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, line);
    }
    if (tag == "generation") {
      auto node = NewNode(Node::Kind::kScope, line);
      ExpectBlockEnd();
      std::string end;
      node->body = ParseBody({"endgeneration"}, &end, "generation", line);
      ExpectBlockEnd();
      return node;
    }
    if (tag == "include" || tag == "extends" || tag == "import" || tag == "from" ||
        tag == "block") {
      Fail("'" + tag + "' is not supported in chat templates", line);
    }
    Fail("encountered unknown tag '" + tag + "'", line);
  }

  std::unique_ptr<Node> ParseIf(int line) {
    auto node = NewNode(Node::Kind::kIf, line);
    while (true) {
      ExprPtr cond = ParseTuple(false);
      ExpectBlockEnd();
      std::string end;
      ++if_depth_;
      NodeList body = ParseBody({"elif", "else", "endif"}, &end, "if", line);
      --if_depth_;
      node->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        ExpectBlockEnd();
        ++if_depth_;
        node->else_body = ParseBody({"endif"}, &end, "if", line);
        --if_depth_;
      }
      ExpectBlockEnd();
      return node;
    }
  }

  // A name or a tuple of names: `a`, `a, b`, `(a, b)`.
  std::vector<std::string> ParseTargets() {
    std::vector<std::string> names;
    bool paren = SkipOp("(");
    do {
      if (Cur().type != TokenType::kName) break;
      names.push_back(ExpectName());
    } while (SkipOp(","));
    if (paren) ExpectOp(")");
    if (names.empty()) Fail("expected an assignment target, got " + Describe(Cur()));
    return names;
  }

  std::unique_ptr<Node> ParseFor(int line) {
    auto node = NewNode(Node::Kind::kFor, line);
    node->targets = ParseTargets();
    if (!SkipName("in")) Fail("expected 'in', got " + Describe(Cur()));
    node->expr = ParseTuple(false, /*stop_at_name=*/"recursive");
    if (SkipName("if")) node->filter = ParseExpression(true);
    if (SkipName("recursive")) node->recursive = true;
    ExpectBlockEnd();
    std::string end;
    ++loop_depth_;
    node->body = ParseBody({"endfor", "else"}, &end, "for", line);
    --loop_depth_;
    if (end == "else") {
      ExpectBlockEnd();
      node->else_body = ParseBody({"endfor"}, &end, "for", line);
    }
    ExpectBlockEnd();
    return node;
  }

  std::unique_ptr<Node> ParseSet(int line) {
    if (Cur().type == TokenType::kName && Peek().type == TokenType::kOperator &&
        Peek().text == ".") {
      auto node = NewNode(Node::Kind::kSet, line);
      node->targets.push_back(ExpectName());
      Next();
      node->attr = ExpectName();
      ExpectOp("=");
      node->expr = ParseTuple(true);
      ExpectBlockEnd();
      return node;
    }
    std::vector<std::string> targets = ParseTargets();
    if (SkipOp("=")) {
      auto node = NewNode(Node::Kind::kSet, line);
      node->targets = std::move(targets);
      node->expr = ParseTuple(true);
      ExpectBlockEnd();
      return node;
    }
    auto node = NewNode(Node::Kind::kSetBlock, line);
    node->targets = std::move(targets);
    if (IsOp("|")) node->filter = ParseFilterChain(nullptr);
    ExpectBlockEnd();
    std::string end;
    int saved_loop_depth = loop_depth_;
    node->body = ParseBody({"endset"}, &end, "set", line);
    loop_depth_ = saved_loop_depth;
    ExpectBlockEnd();
    return node;
  }

  std::vector<MacroParam> ParseParams() {
    std::vector<MacroParam> params;
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!params.empty()) ExpectOp(",");
      if (IsOp(")")) break;
      MacroParam param;
      param.name = ExpectName();
      if (SkipOp("=")) param.default_value = ParseExpression(true);
      params.push_back(std::move(param));
    }
    ExpectOp(")");
    return params;
  }

  std::unique_ptr<Node> ParseMacro(int line) {
    auto node = NewNode(Node::Kind::kMacro, line);
    node->text = ExpectName();
    node->params = ParseParams();
    ExpectBlockEnd();
    std::string end;
    int saved = loop_depth_;
    loop_depth_ = 0;
    node->body = ParseBody({"endmacro"}, &end, "macro", line);
    loop_depth_ = saved;
    if (Cur().type == TokenType::kName) Next();  // {% endmacro name %}
    ExpectBlockEnd();
    return node;
  }

  std::unique_ptr<Node> ParseCall(int line) {
    auto node = NewNode(Node::Kind::kCallBlock, line);
    if (IsOp("(")) node->params = ParseParams();
    node->expr = ParseExpression(true);
    if (node->expr->kind != Expr::Kind::kCall) Fail("expected a call", line);
    ExpectBlockEnd();
    std::string end;
    int saved = loop_depth_;
    loop_depth_ = 0;
    node->body = ParseBody({"endcall"}, &end, "call", line);
    loop_depth_ = saved;
    ExpectBlockEnd();
    return node;
  }

  std::unique_ptr<Node> ParseFilterBlock(int line) {
    auto node = NewNode(Node::Kind::kFilterBlock, line);
    node->filter = ParseFilterChain(nullptr, /*leading_pipe=*/false);
    ExpectBlockEnd();
    std::string end;
    node->body = ParseBody({"endfilter"}, &end, "filter", line);
    ExpectBlockEnd();
    return node;
  }

  std::unique_ptr<Node> ParseWith(int line) {
    auto node = NewNode(Node::Kind::kWith, line);
    while (Cur().type != TokenType::kBlockEnd) {
      if (!node->targets.empty()) ExpectOp(",");
      node->targets.push_back(ExpectName());
      ExpectOp("=");
      node->values.push_back(ParseExpression(true));
    }
    ExpectBlockEnd();
    std::string end;
    node->body = ParseBody({"endwith"}, &end, "with", line);
    ExpectBlockEnd();
    return node;
  }

  // ---- expressions ----

  // Comma-separated expressions; a tuple when a comma appears.
  ExprPtr ParseTuple(bool with_condexpr, const char* stop_at_name = nullptr) {
    int line = Cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!SkipOp(",")) break;
        is_tuple = true;
      }
      if (Cur().type == TokenType::kVarEnd || Cur().type == TokenType::kBlockEnd ||
          IsOp(")") || (stop_at_name && IsName(stop_at_name)) ||
          (!items.empty() && IsName("if"))) {
        break;
      }
      items.push_back(ParseExpression(with_condexpr));
    }
    if (!is_tuple) {
      if (items.empty()) Fail("expected an expression, got " + Describe(Cur()));
      return std::move(items[0]);
    }
    auto e = Make(Expr::Kind::kTuple, line);
    e->children = std::move(items);
    return e;
  }

  ExprPtr ParseExpression(bool with_condexpr) {
    DepthGuard guard(this);
    ExprPtr expr = ParseOr();
    if (!with_condexpr) return expr;
    while (IsName("if")) {
      int line = Cur().line;
      Next();
      auto e = Make(Expr::Kind::kCondExpr, line);
      e->children.push_back(ParseOr());
      e->children.push_back(std::move(expr));
      if (SkipName("else")) {
        e->children.push_back(ParseExpression(true));
      } else {
        e->children.push_back(nullptr);
      }
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr Binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
    auto e = Make(Expr::Kind::kBinary, line);
    e->name = op;
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      int line = Cur().line;
      Next();
      left = Binary("or", std::move(left), ParseAnd(), line);
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      int line = Cur().line;
      Next();
      left = Binary("and", std::move(left), ParseNot(), line);
    }
    return left;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(this);
      auto e = Make(Expr::Kind::kUnary, Cur().line);
      Next();
      e->name = "not";
      e->children.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    int line = Cur().line;
    ExprPtr first = ParseMath1();
    ExprPtr result;
    while (true) {
      std::string op;
      if (Cur().type == TokenType::kOperator &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == TokenType::kName && Peek().text == "in") {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      if (!result) {
        result = Make(Expr::Kind::kCompare, line);
        result->children.push_back(std::move(first));
      }
      result->ops.push_back(op);
      result->children.push_back(ParseMath1());
    }
    return result ? std::move(result) : std::move(first);
  }

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      std::string op = Cur().text;
      int line = Cur().line;
      Next();
      left = Binary(op, std::move(left), ParseConcat(), line);
    }
    return left;
  }

  ExprPtr ParseConcat() {
    ExprPtr left = ParseMath2();
    while (IsOp("~")) {
      int line = Cur().line;
      Next();
      left = Binary("~", std::move(left), ParseMath2(), line);
    }
    return left;
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = Cur().text;
      int line = Cur().line;
      Next();
      left = Binary(op, std::move(left), ParsePow(), line);
    }
    return left;
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOp("**")) {
      int line = Cur().line;
      Next();
      left = Binary("**", std::move(left), ParseUnary(true), line);
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = Make(Expr::Kind::kUnary, Cur().line);
      node->name = Cur().text;
      Next();
      node->children.push_back(ParseUnary(false));
    } else {
      node = ParsePostfix(ParsePrimary());
    }
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  ExprPtr ParsePrimary() {
    DepthGuard guard(this);
    const Token& t = Cur();
    int line = t.line;
    switch (t.type) {
      case TokenType::kName: {
        auto e = Make(Expr::Kind::kLiteral, line);
        if (t.text == "true" || t.text == "True") e->value = Value(true);
        else if (t.text == "false" || t.text == "False") e->value = Value(false);
        else if (t.text == "none" || t.text == "None") e->value = Value::None();
        else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        Next();
        return e;
      }
      case TokenType::kString: {
        std::string s;
        while (Cur().type == TokenType::kString) {
          s += Cur().text;
          Next();
        }
        auto e = Make(Expr::Kind::kLiteral, line);
        e->value = Value(std::move(s));
        return e;
      }
      case TokenType::kInt: {
        auto e = Make(Expr::Kind::kLiteral, line);
        errno = 0;
        long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) Fail("integer literal out of range");
        e->value = Value(static_cast<int64_t>(v));
        Next();
        return e;
      }
      case TokenType::kFloat: {
        auto e = Make(Expr::Kind::kLiteral, line);
        e->value = Value(std::strtod(t.text.c_str(), nullptr));
        Next();
        return e;
      }
      case TokenType::kOperator:
        if (t.text == "(") {
          Next();
          if (SkipOp(")")) {
            return Make(Expr::Kind::kTuple, line);
          }
          ExprPtr inner = ParseTuple(true);
          ExpectOp(")");
          return inner;
        }
        if (t.text == "[") {
          Next();
          auto e = Make(Expr::Kind::kList, line);
          while (!IsOp("]")) {
            if (!e->children.empty()) ExpectOp(",");
            if (IsOp("]")) break;
            e->children.push_back(ParseExpression(true));
          }
          ExpectOp("]");
          return e;
        }
        if (t.text == "{") {
          Next();
          auto e = Make(Expr::Kind::kDict, line);
          while (!IsOp("}")) {
            if (!e->children.empty()) ExpectOp(",");
            if (IsOp("}")) break;
            e->children.push_back(ParseExpression(true));
            ExpectOp(":");
            e->children.push_back(ParseExpression(true));
          }
          ExpectOp("}");
          return e;
        }
        break;
      default:
        break;
    }
    Fail("unexpected " + Describe(t));
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    while (true) {
      int line = Cur().line;
      if (IsOp(".")) {
        Next();
        if (Cur().type == TokenType::kName) {
          auto e = Make(Expr::Kind::kGetAttr, line);
          e->name = Cur().text;
          Next();
          e->children.push_back(std::move(node));
          node = std::move(e);
        } else if (Cur().type == TokenType::kInt) {
          auto e = Make(Expr::Kind::kGetItem, line);
          e->children.push_back(std::move(node));
          auto index = Make(Expr::Kind::kLiteral, line);
          index->value = Value(static_cast<int64_t>(std::strtoll(Cur().text.c_str(), nullptr, 10)));
          e->children.push_back(std::move(index));
          Next();
          node = std::move(e);
        } else {
          Fail("expected name or number after '.'");
        }
      } else if (IsOp("[")) {
        Next();
        node = ParseSubscript(std::move(node), line);
      } else if (IsOp("(")) {
        node = ParseCallArgs(Make(Expr::Kind::kCall, line), std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr object, int line) {
    ExprPtr parts[3];
    bool is_slice = false;
    for (int i = 0; i < 3; ++i) {
      if (!IsOp(":") && !IsOp("]")) parts[i] = ParseExpression(true);
      if (i < 2 && SkipOp(":")) {
        is_slice = true;
        continue;
      }
      break;
    }
    ExpectOp("]");
    if (!is_slice) {
      if (!parts[0]) Fail("expected an index");
      auto e = Make(Expr::Kind::kGetItem, line);
      e->children.push_back(std::move(object));
      e->children.push_back(std::move(parts[0]));
      return e;
    }
    auto e = Make(Expr::Kind::kSlice, line);
    e->children.push_back(std::move(object));
    for (auto& p : parts) e->children.push_back(std::move(p));
    return e;
  }

  // Parses `(args, key=value)` into `call`, whose children[0] becomes `callee`.
  ExprPtr ParseCallArgs(ExprPtr call, ExprPtr callee) {
    ExpectOp("(");
    call->children.push_back(std::move(callee));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) ExpectOp(",");
      first = false;
      if (IsOp(")")) break;
      if (Cur().type == TokenType::kName && Peek().type == TokenType::kOperator &&
          Peek().text == "=") {
        std::string key = Cur().text;
        Next();
        Next();
        call->kwargs.emplace_back(key, ParseExpression(true));
      } else {
        if (!call->kwargs.empty()) Fail("positional argument after keyword argument");
        call->children.push_back(ParseExpression(true));
      }
    }
    ExpectOp(")");
    return call;
  }

  // `| f(args) | g ...` applied to operand (null for filter blocks).
  ExprPtr ParseFilterChain(ExprPtr operand, bool leading_pipe = true) {
    bool first = true;
    while ((first && !leading_pipe) || SkipOp("|")) {
      first = false;
      int line = Cur().line;
      std::string name = ExpectName();
      while (IsOp(".")) {
        Next();
        name += "." + ExpectName();
      }
      if (if_depth_ == 0 && !IsKnownFilter(name)) Fail("no filter named '" + name + "'", line);
      auto e = Make(Expr::Kind::kFilter, line);
      e->name = name;
      if (IsOp("(")) {
        e = ParseCallArgs(std::move(e), std::move(operand));
      } else {
        e->children.push_back(std::move(operand));
      }
      operand = std::move(e);
    }
    return operand;
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        node = ParseFilterChain(std::move(node));
      } else if (IsName("is")) {
        int line = Cur().line;
        Next();
        auto e = Make(Expr::Kind::kTest, line);
        e->negated = SkipName("not");
        e->name = ExpectName();
        while (IsOp(".")) {
          Next();
          e->name += "." + ExpectName();
        }
        if (if_depth_ == 0 && !IsKnownTest(e->name)) Fail("no test named '" + e->name + "'", line);
        if (IsOp("(")) {
          e = ParseCallArgs(std::move(e), std::move(node));
        } else {
          e->children.push_back(std::move(node));
          const Token& t = Cur();
          bool starts_arg = t.type == TokenType::kName || t.type == TokenType::kString ||
                            t.type == TokenType::kInt || t.type == TokenType::kFloat ||
                            IsOp("[") || IsOp("{");
          if (starts_arg && !IsName("else") && !IsName("or") && !IsName("and") &&
              !IsName("if") && !IsName("is") && !IsName("in") && !IsName("not") &&
              !IsName("recursive")) {
            e->children.push_back(ParsePostfix(ParsePrimary()));
          }
        }
        node = std::move(e);
      } else if (IsOp("(")) {
        node = ParseCallArgs(Make(Expr::Kind::kCall, Cur().line), std::move(node));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> tokens_;
  const std::string& origin_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int if_depth_ = 0;  // unknown filters/tests inside if blocks fail at run time (jinja2 3.x)
};

}  // namespace

NodeList ParseTemplate(std::vector<Token> tokens, const std::string& origin) {
  return Parser(std::move(tokens), origin).ParseAll();
}

}  // namespace pagoda::jinja
