// Expression evaluation of the Interpreter (statements are in interpreter.cc).
#include <ctime>

#include "core/error.h"
#include "jinja/filters.h"
#include "jinja/interpreter.h"

namespace pagoda::jinja {

Value Interpreter::Eval(const Expr& expr) {
  DepthGuard guard(this);
  line_ = expr.line;
  switch (expr.kind) {
    case Expr::Kind::kLiteral:
      return expr.value;
    case Expr::Kind::kName: {
      if (const Value* v = Lookup(expr.name)) return *v;
      return LookupGlobal(expr.name);
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      items.reserve(expr.children.size());
      for (const auto& c : expr.children) items.push_back(Eval(*c));
      return Value::MakeList(std::move(items), expr.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      Value dict = Value::MakeDict();
      for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        Value key = Eval(*expr.children[i]);
        if (!key.is_string()) Fail("only string keys are supported in dict literals");
        dict.dict()->Set(key.as_string(), Eval(*expr.children[i + 1]));
      }
      return dict;
    }
    case Expr::Kind::kGetAttr: {
      Value object = Eval(*expr.children[0]);
      line_ = expr.line;
      return GetAttr(object, expr.name);
    }
    case Expr::Kind::kGetItem: {
      Value object = Eval(*expr.children[0]);
      Value key = Eval(*expr.children[1]);
      line_ = expr.line;
      return GetItem(object, key);
    }
    case Expr::Kind::kSlice: {
      Value object = Eval(*expr.children[0]);
      Value parts[3];
      for (int i = 0; i < 3; ++i) {
        parts[i] = expr.children[i + 1] ? Eval(*expr.children[i + 1]) : Value::None();
      }
      line_ = expr.line;
      if (object.is_undefined()) Fail(object.undefined_hint());
      try {
        return Slice(object, parts[0], parts[1], parts[2]);
      } catch (const Error& e) {
        Rethrow(e);
      }
    }
    case Expr::Kind::kCall:
      return EvalCall(expr);
    case Expr::Kind::kFilter:
      return EvalFilter(expr, nullptr);
    case Expr::Kind::kTest: {
      Value operand = Eval(*expr.children[0]);
      CallArgs args;
      EvalArgs(expr, 1, &args);
      line_ = expr.line;
      return Value(ApplyTest(expr.name, operand, args) != expr.negated);
    }
    case Expr::Kind::kUnary: {
      Value v = Eval(*expr.children[0]);
      line_ = expr.line;
      if (expr.name == "not") return Value(!v.Truthy());
      if (v.is_undefined()) Fail(v.undefined_hint());
      if (!v.is_number()) Fail("bad operand type for unary " + expr.name + ": '" + v.TypeName() + "'");
      if (expr.name == "+") return v.is_bool() ? Value(v.as_int()) : v;
      if (v.is_float()) return Value(-v.as_float());
      return Value(-v.as_int());
    }
    case Expr::Kind::kBinary:
      return EvalBinary(expr);
    case Expr::Kind::kCompare:
      return Value(EvalCompare(expr));
    case Expr::Kind::kCondExpr: {
      if (Eval(*expr.children[0]).Truthy()) return Eval(*expr.children[1]);
      if (expr.children[2]) return Eval(*expr.children[2]);
      return Value::Undefined("the inline if-expression on line " + std::to_string(expr.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  return Value();
}

Value Interpreter::EvalBinary(const Expr& expr) {
  const std::string& op = expr.name;
  Value left = Eval(*expr.children[0]);
  if (op == "and") return left.Truthy() ? Eval(*expr.children[1]) : left;
  if (op == "or") return left.Truthy() ? left : Eval(*expr.children[1]);
  Value right = Eval(*expr.children[1]);
  line_ = expr.line;
  if (op == "~" || (op == "+" && left.is_string() && right.is_string())) {
    // Append in place: templates build prompts as long left-leaning chains.
    if (!left.is_string()) left = Value(left.Str());
    right.AppendStr(&left.mutable_string());
    CheckSize(left.as_string().size());
    return left;
  }
  if (left.is_undefined()) Fail(left.undefined_hint());
  if (right.is_undefined()) Fail(right.undefined_hint());
  try {
    if (op == "*") {
      // Guard repetition before it allocates: 'x' * 10**12 must fail cleanly.
      const Value& seq = left.is_string() || left.is_list() ? left : right;
      const Value& count = &seq == &left ? right : left;
      if ((seq.is_string() || seq.is_list()) && count.is_int() && count.as_int() > 0) {
        size_t unit = seq.is_string() ? seq.as_string().size() : seq.list()->items.size();
        if (unit > 0 && static_cast<uint64_t>(count.as_int()) > limits_.max_output_bytes / unit) {
          CheckSize(limits_.max_output_bytes + 1);
        }
      }
    }
    Value result = BinaryOp(op, left, right);
    if (result.is_string()) CheckSize(result.as_string().size());
    return result;
  } catch (const Error& e) {
    line_ = expr.line;
    Rethrow(e);
  }
}

bool Interpreter::EvalCompare(const Expr& expr) {
  Value left = Eval(*expr.children[0]);
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    Value right = Eval(*expr.children[i + 1]);
    line_ = expr.line;
    const std::string& op = expr.ops[i];
    bool ok;
    if (op == "==") {
      ok = ValuesEqual(left, right);
    } else if (op == "!=") {
      ok = !ValuesEqual(left, right);
    } else if (op == "in" || op == "not in") {
      if (right.is_undefined()) {
        ok = false;
      } else {
        try {
          ok = Contains(right, left);
        } catch (const Error& e) {
          Rethrow(e);
        }
      }
      if (op == "not in") ok = !ok;
    } else {
      if (left.is_undefined()) Fail(left.undefined_hint());
      if (right.is_undefined()) Fail(right.undefined_hint());
      int c;
      try {
        c = CompareValues(left, right);
      } catch (const Error& e) {
        Rethrow(e);
      }
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return false;
    left = std::move(right);
  }
  return true;
}

void Interpreter::EvalArgs(const Expr& expr, size_t first, CallArgs* args) {
  for (size_t i = first; i < expr.children.size(); ++i) {
    args->positional.push_back(Eval(*expr.children[i]));
  }
  for (const auto& [k, v] : expr.kwargs) args->keyword.emplace_back(k, Eval(*v));
}

Value Interpreter::EvalCall(const Expr& expr) {
  const Expr& callee_expr = *expr.children[0];
  if (callee_expr.kind == Expr::Kind::kGetAttr) {
    // Method calls (`s.strip()`, `d.items()`) skip creating a bound function.
    Value object = Eval(*callee_expr.children[0]);
    CallArgs args;
    EvalArgs(expr, 1, &args);
    line_ = expr.line;
    Value result;
    if (CallMethod(object, callee_expr.name, args, &result)) return result;
    Value callee = GetAttr(object, callee_expr.name);
    line_ = expr.line;
    return CallValue(callee, args);
  }
  Value callee = Eval(callee_expr);
  CallArgs args;
  EvalArgs(expr, 1, &args);
  line_ = expr.line;
  return CallValue(callee, args);
}

Value Interpreter::EvalFilter(const Expr& expr, const Value* block_operand) {
  Value operand;
  if (expr.children[0] == nullptr) {
    operand = block_operand ? *block_operand : Value();
  } else if (expr.children[0]->kind == Expr::Kind::kFilter) {
    operand = EvalFilter(*expr.children[0], block_operand);
  } else {
    operand = Eval(*expr.children[0]);
  }
  CallArgs args;
  EvalArgs(expr, 1, &args);
  line_ = expr.line;
  return ApplyFilter(expr.name, operand, args);
}

Value Interpreter::GetAttr(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      Fail(object.undefined_hint().empty() ? "'" + name + "' accessed on an undefined value"
                                           : object.undefined_hint());
    case Value::Kind::kDict: {
      if (!object.dict()->is_namespace && IsDictMethod(name)) {
        return BoundMethod(object, name);
      }
      if (const Value* v = object.dict()->Find(name)) return *v;
      return Value::Undefined("'" + object.TypeName() + " object' has no attribute '" + name + "'");
    }
    case Value::Kind::kLoop:
      return LoopAttr(*object.loop(), name);
    case Value::Kind::kList: {
      const auto& fields = object.list()->field_names;
      for (size_t i = 0; i < fields.size() && i < object.list()->items.size(); ++i) {
        if (fields[i] == name) return object.list()->items[i];
      }
      if (HasMethod(object, name)) return BoundMethod(object, name);
      break;
    }
    case Value::Kind::kString:
      if (HasMethod(object, name)) return BoundMethod(object, name);
      break;
    default:
      break;
  }
  if (object.is_none()) return Value::Undefined("'None' has no attribute '" + name + "'");
  return Value::Undefined("'" + object.TypeName() + " object' has no attribute '" + name + "'");
}

Value Interpreter::GetItem(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      Fail(object.undefined_hint().empty() ? "indexing an undefined value"
                                           : object.undefined_hint());
    case Value::Kind::kDict:
      if (key.is_string()) {
        if (const Value* v = object.dict()->Find(key.as_string())) return *v;
        if (!object.dict()->is_namespace && IsDictMethod(key.as_string())) {
          return BoundMethod(object, key.as_string());
        }
        return Value::Undefined("'dict object' has no attribute '" + key.as_string() + "'");
      }
      return Value::Undefined("'dict object' has no attribute " + key.Repr());
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (key.is_int() || key.is_bool()) {
        int64_t n = Length(object);
        int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
        if (i < 0 || i >= n) {
          return Value::Undefined("'" + object.TypeName() + " object' has no element " +
                                  key.Repr());
        }
        if (object.is_list()) return object.list()->items[i];
        return Value(CodePointAt(object.as_string(), i));
      }
      if (key.is_string()) return GetAttr(object, key.as_string());
      break;
    case Value::Kind::kLoop:
      if (key.is_string()) return LoopAttr(*object.loop(), key.as_string());
      break;
    default:
      break;
  }
  return Value::Undefined("'" + object.TypeName() + " object' has no element " + key.Repr());
}

Value Interpreter::LookupGlobal(const std::string& name) {
  Value v = GlobalFunction(name);
  if (!v.is_undefined()) return v;
  return Value::Undefined("'" + name + "' is undefined");
}

}  // namespace pagoda::jinja
