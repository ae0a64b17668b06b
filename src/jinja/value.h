// The dynamic value type of the Jinja interpreter, modelled on the Python objects
// that jinja2 manipulates: Undefined, None, bool, int, float, str, list/tuple,
// dict (insertion-ordered, string keys), callables and the `loop` object.
//
// Invariants:
//   - Lists and dicts have reference semantics (shared_ptr), as in Python, so a
//     namespace mutated through `{% set ns.x = ... %}` is seen by every alias.
//     Templates run in an immutable sandbox: only namespaces are ever mutated.
//   - Str() is Python's str(), Repr() Python's repr(); floats print with
//     Python's shortest round-trip repr (1.0, 1e-05, 1e+16).
//   - Undefined is jinja2's default Undefined: prints as '', is falsy, iterates
//     as empty, and raises on arithmetic or attribute access.
//
// Not thread-safe; values are created and destroyed within one Render() call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagoda::jinja {

class Value;
class Interpreter;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  // Non-empty for a namedtuple (groupby's (grouper, list)): attribute names of items.
  std::vector<std::string> field_names;
};

struct DictData {
  std::vector<std::pair<std::string, Value>> items;  // insertion order
  bool is_namespace = false;

  // Returns the value for key, or nullptr.
  const Value* Find(std::string_view key) const;
  // Replaces the value of an existing key in place, or appends a new one.
  void Set(std::string key, Value value);
};

// Positional and keyword arguments of a call, evaluated.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Looks up argument `name` at position `index` (or by keyword); returns
  // nullptr when absent.
  const Value* Get(size_t index, std::string_view name) const;
};

// A callable: a macro, a global function, a bound method or a loop helper.
struct Function {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> call;
};

// State of the innermost `loop` variable of a for loop.
struct LoopInfo {
  int64_t index0 = 0;
  int64_t length = 0;
  int64_t depth0 = 0;
  std::shared_ptr<ListData> items;  // the iterated (filtered) items
  std::function<Value(Interpreter&, CallArgs&)> recurse;  // for `recursive` loops
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction, kLoop
  };

  Value() = default;  // Undefined
  static Value Undefined(std::string hint = {});
  static Value None();
  Value(bool b) : kind_(Kind::kBool), int_(b) {}
  Value(int v) : kind_(Kind::kInt), int_(v) {}
  Value(int64_t v) : kind_(Kind::kInt), int_(v) {}
  Value(double v) : kind_(Kind::kFloat), float_(v) {}
  Value(std::string s) : kind_(Kind::kString), str_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::kString), str_(s) {}
  Value(std::shared_ptr<ListData> list) : kind_(Kind::kList), list_(std::move(list)) {}
  Value(std::shared_ptr<DictData> dict) : kind_(Kind::kDict), dict_(std::move(dict)) {}
  Value(std::shared_ptr<Function> fn) : kind_(Kind::kFunction), fn_(std::move(fn)) {}
  Value(std::shared_ptr<LoopInfo> loop) : kind_(Kind::kLoop), loop_(std::move(loop)) {}

  static Value MakeList(std::vector<Value> items = {}, bool is_tuple = false);
  static Value MakeDict();
  static Value MakeFunction(std::string name,
                            std::function<Value(Interpreter&, CallArgs&)> call);

  // Converts JSON (ordered or not) to a Value: objects keep their key order.
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool is_loop() const { return kind_ == Kind::kLoop; }

  // REQUIRES: the matching kind (bool/int share int_).
  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_float() const { return float_; }
  // Numeric value of a bool, int or float.
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_; }
  std::string& mutable_string() { return str_; }
  const std::shared_ptr<ListData>& list() const { return list_; }
  const std::shared_ptr<DictData>& dict() const { return dict_; }
  const std::shared_ptr<Function>& function() const { return fn_; }
  const std::shared_ptr<LoopInfo>& loop() const { return loop_; }
  // For Undefined: a description of what was missing ("'x' is undefined").
  const std::string& undefined_hint() const { return str_; }

  bool Truthy() const;
  std::string Str() const;   // Python str()
  std::string Repr() const;  // Python repr()
  void AppendStr(std::string* out) const;
  // Python's type name, for error messages ("dict object", "str object").
  std::string TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<Function> fn_;
  std::shared_ptr<LoopInfo> loop_;
};

// Python's repr() of a float: shortest round-trip digits, exponent form when
// the decimal exponent is < -4 or >= 16; "inf", "-inf", "nan".
std::string FormatPythonFloat(double v);
// Python's repr() of a str: single quotes unless the text has ' and no ".
std::string PythonStringRepr(std::string_view s);

// Python ==, as jinja2 sees it (1 == 1.0 == True; Undefined == Undefined).
bool ValuesEqual(const Value& a, const Value& b);
// Python <: returns negative/zero/positive; throws pagoda::Error for types that
// do not compare (str vs int).
int CompareValues(const Value& a, const Value& b);

struct JsonFormat {
  int indent = -1;  // < 0: no newlines (json.dumps(indent=None))
  std::string indent_string;  // used when set (json.dumps(indent="\t"))
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps(value, ...) with the given format. Throws pagoda::Error for values
// JSON cannot hold (Undefined, functions).
std::string ToJsonString(const Value& value, const JsonFormat& format);

}  // namespace pagoda::jinja
