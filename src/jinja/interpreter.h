// Executes a parsed Jinja template the way jinja2's ImmutableSandboxedEnvironment
// does: Python semantics for operators, truthiness and printing; jinja2's
// scoping (a for loop's body gets a fresh scope per iteration, `if` none, a
// macro a scope over the template's top level); lists and dicts immutable except
// namespaces; jinja2's default Undefined.
//
// Failure: runtime errors throw pagoda::Error "<origin>:<line>: <message>";
// raise_exception(msg) throws pagoda::Error whose what() is exactly msg.
// Limits: nesting depth, output bytes and executed steps are capped
// (RenderLimits), each overrun being an error, never a crash.
//
// One Interpreter renders one template once; not thread-safe.
#pragma once

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "jinja/parser.h"
#include "jinja/value.h"

namespace pagoda::jinja {

// What raise_exception() throws: what() is exactly the template's message.
class RaisedError : public Error {
 public:
  explicit RaisedError(const std::string& message) : Error(ErrorCode::kInvalidArgument, message) {}
};

struct RenderLimits {
  size_t max_output_bytes = 64u << 20;
  int max_depth = 500;  // nested expressions, blocks and macro calls, together
  int64_t max_steps = 20'000'000;  // statements executed plus loop iterations
};

class Interpreter {
 public:
  // `origin` names the template in errors; `now` is what strftime_now formats
  // (local time); nullopt = the current time.
  Interpreter(const std::string& origin, RenderLimits limits, std::optional<std::time_t> now);

  // Renders `nodes` with `context` (name -> value) as the template's top level.
  std::string Render(const NodeList& nodes, const DictData& context);

  // Calls a function value (macro, global, method) with evaluated arguments.
  Value CallValue(const Value& callee, CallArgs& args);

  // Filters and tests by name (filters.cc). Throw for unknown names.
  Value ApplyFilter(const std::string& name, const Value& operand, CallArgs& args);
  bool ApplyTest(const std::string& name, const Value& operand, CallArgs& args);
  // Returns true and sets *result when `object` has a method `name` (str.strip,
  // dict.items, ...): the sandbox allows only non-mutating methods.
  bool CallMethod(const Value& object, const std::string& name, CallArgs& args, Value* result);

  // Python's getattr/getitem as jinja2's sandbox performs them.
  Value GetAttr(const Value& object, const std::string& name);
  Value GetItem(const Value& object, const Value& key);

  // Throws pagoda::Error if a string of `bytes` would exceed the output limit.
  void CheckSize(size_t bytes) const;
  [[noreturn]] void Fail(const std::string& message) const;
  // Rethrows `e` with this template's origin:line unless it already has one
  // (or is a RaisedError, which passes through untouched).
  [[noreturn]] void Rethrow(const Error& e) const;
  std::time_t now() const;

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct Scope {
    std::vector<std::pair<std::string, Value>> vars;
    int parent;  // index of the enclosing scope, -1 for the top level
  };
  struct DepthGuard {
    explicit DepthGuard(Interpreter* in) : in(in) {
      if (++in->depth_ > in->limits_.max_depth) {
        in->Fail("template recursion too deep (more than " +
                 std::to_string(in->limits_.max_depth) + " nested levels)");
      }
    }
    ~DepthGuard() { --in->depth_; }
    Interpreter* in;
  };

  Flow ExecNodes(const NodeList& nodes);
  Flow Exec(const Node& node);
  void ExecFor(const Node& node, const Value& iterable, int64_t depth0);
  void ExecSet(const Node& node);
  void DefineMacro(const Node& node);
  Value CallMacro(const Node& node, CallArgs& args, const Value& caller);
  std::string RenderToString(const NodeList& nodes);

  Value Eval(const Expr& expr);
  Value EvalBinary(const Expr& expr);
  Value EvalCall(const Expr& expr);
  Value EvalFilter(const Expr& expr, const Value* block_operand);
  bool EvalCompare(const Expr& expr);
  void EvalArgs(const Expr& expr, size_t first, CallArgs* args);

  const Value* Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value value);
  Value LookupGlobal(const std::string& name);

  const std::string& origin_;
  RenderLimits limits_;
  std::optional<std::time_t> now_;
  std::vector<Scope> scopes_;
  std::string* out_ = nullptr;
  int depth_ = 0;
  int64_t steps_ = 0;
  int line_ = 0;  // line of the node or expression being evaluated
};

// Python semantics helpers shared by the interpreter and the filters.
Value BinaryOp(const std::string& op, const Value& a, const Value& b);
bool Contains(const Value& container, const Value& item);
// Iterates a value as Python's iter() would (str: code points, dict: keys).
std::vector<Value> Iterate(const Value& value);
// Length in Python's len() sense (code points for strings).
int64_t Length(const Value& value);
Value Slice(const Value& object, const Value& start, const Value& stop, const Value& step);

}  // namespace pagoda::jinja
