// jinja2's built-in filters and tests, with Hugging Face's tojson.
#include "jinja/filters.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "jinja/interpreter.h"

namespace pagoda::jinja {
namespace {

const Value kNoneValue = Value::None();

Value Arg(const CallArgs& args, size_t i, std::string_view name, const Value& fallback) {
  const Value* v = args.Get(i, name);
  return v ? *v : fallback;
}

bool BoolArg(const CallArgs& args, size_t i, std::string_view name, bool fallback) {
  const Value* v = args.Get(i, name);
  return v ? v->Truthy() : fallback;
}

// jinja2's make_attrgetter: "a.b.0" walks items/attributes.
Value GetPath(Interpreter& in, const Value& item, const Value& path) {
  if (path.is_int()) return in.GetItem(item, path);
  Value v = item;
  std::string p = path.Str();
  size_t start = 0;
  while (true) {
    size_t dot = p.find('.', start);
    std::string part = p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = in.GetItem(v, numeric ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(AsciiLower(v.as_string()));
  return v;
}

std::vector<Value> SortedItems(Interpreter& in, std::vector<Value> items, const CallArgs& args,
                               size_t reverse_pos, size_t case_pos, size_t attr_pos) {
  bool reverse = BoolArg(args, reverse_pos, "reverse", false);
  bool case_sensitive = BoolArg(args, case_pos, "case_sensitive", false);
  Value attribute = Arg(args, attr_pos, "attribute", kNoneValue);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) {
    Value key = attribute.is_none() ? item : GetPath(in, item, attribute);
    keyed.emplace_back(SortKey(key, case_sensitive), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? CompareValues(b.first, a.first) < 0 : CompareValues(a.first, b.first) < 0;
  });
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return out;
}

// select/reject/selectattr/rejectattr.
Value SelectOrReject(Interpreter& in, const Value& operand, const CallArgs& args, bool select,
                     bool by_attr) {
  std::vector<Value> out;
  size_t test_pos = by_attr ? 1 : 0;
  const Value* attr = by_attr ? args.Get(0, "attribute") : nullptr;
  if (by_attr && attr == nullptr) in.Fail("selectattr/rejectattr need an attribute");
  const Value* test = args.positional.size() > test_pos ? &args.positional[test_pos] : nullptr;
  CallArgs test_args;
  for (size_t i = test_pos + 1; i < args.positional.size(); ++i) {
    test_args.positional.push_back(args.positional[i]);
  }
  for (const auto& item : Iterate(operand)) {
    Value v = attr ? GetPath(in, item, *attr) : item;
    bool ok = test ? in.ApplyTest(test->Str(), v, test_args) : v.Truthy();
    if (ok == select) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string JinjaTitle(const std::string& s) {
  // jinja2: split on runs of [-\s({\[<], capitalize each piece.
  std::string out;
  bool word_start = true;
  for (char c : s) {
    bool boundary = c == '-' || IsPyWhitespace(static_cast<unsigned char>(c)) || c == '(' ||
                    c == '{' || c == '[' || c == '<';
    if (boundary) {
      out += c;
      word_start = true;
    } else {
      out += word_start ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
                        : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      word_start = false;
    }
  }
  return out;
}

std::string Indent(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::string text = s;
  std::string out;
  size_t start = 0;
  bool is_first = true;
  while (start <= text.size()) {
    size_t nl = text.find('\n', start);
    std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    bool indent = is_first ? first : (blank || !line.empty());
    if (!is_first) out += '\n';
    if (indent) out += pad;
    out += line;
    is_first = false;
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}

Value ToJsonFilter(const Value& operand, const CallArgs& args) {
  JsonFormat format;
  Value indent = Arg(args, 1, "indent", kNoneValue);
  if (indent.is_int()) {
    format.indent = static_cast<int>(std::max<int64_t>(0, indent.as_int()));
  } else if (indent.is_string()) {
    format.indent_string = indent.as_string();
    format.indent = 0;
  }
  bool pretty = format.indent >= 0;
  format.item_separator = pretty ? "," : ", ";
  Value separators = Arg(args, 2, "separators", kNoneValue);
  if (separators.is_list() && separators.list()->items.size() == 2) {
    format.item_separator = separators.list()->items[0].Str();
    format.key_separator = separators.list()->items[1].Str();
  }
  format.sort_keys = BoolArg(args, 3, "sort_keys", false);
  format.ensure_ascii = BoolArg(args, 0, "ensure_ascii", false);
  return Value(ToJsonString(operand, format));
}

double ToNumber(const Value& v, bool* ok) {
  *ok = true;
  if (v.is_number()) return v.as_double();
  if (v.is_string()) {
    std::string s = PyStrip(v.as_string(), nullptr, true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return d;
  }
  *ok = false;
  return 0;
}

Value PyRound(double x, int64_t precision, const std::string& method) {
  double scale = std::pow(10.0, static_cast<double>(precision));
  double y = x * scale;
  double r;
  if (method == "ceil") r = std::ceil(y);
  else if (method == "floor") r = std::floor(y);
  else r = std::nearbyint(y);  // round-half-even, like Python's round()
  return Value(r / scale);
}

}  // namespace

bool IsKnownFilter(std::string_view name) {
  static const char* const kFilters[] = {
      "default", "d", "length", "count", "tojson", "trim", "string", "upper", "lower",
      "capitalize", "title", "items", "join", "list", "first", "last", "reverse", "replace",
      "select", "reject", "selectattr", "rejectattr", "map", "sort", "dictsort", "unique", "min",
      "max", "sum", "abs", "int", "float", "round", "safe", "pprint", "escape", "e",
      "forceescape", "indent", "center", "wordcount", "format", "attr", "batch", "slice",
      "groupby", "truncate"};
  for (const char* f : kFilters) {
    if (name == f) return true;
  }
  return false;
}

bool IsKnownTest(std::string_view name) {
  static const char* const kTests[] = {
      "defined", "undefined", "none", "string", "mapping", "boolean", "true", "false",
      "integer", "float", "number", "iterable", "sequence", "callable", "lower", "upper",
      "escaped", "even", "odd", "divisibleby", "eq", "equalto", "==", "ne", "!=", "sameas", "lt",
      "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "filter", "test"};
  for (const char* t : kTests) {
    if (name == t) return true;
  }
  return false;
}

Value Interpreter::ApplyFilter(const std::string& name, const Value& operand, CallArgs& args) {
  try {
    const Value& v = operand;
    if (name == "default" || name == "d") {
      bool boolean = BoolArg(args, 1, "boolean", false);
      if (v.is_undefined() || (boolean && !v.Truthy())) return Arg(args, 0, "default_value", Value(""));
      return v;
    }
    if (name == "length" || name == "count") return Value(Length(v));
    if (name == "tojson") return ToJsonFilter(v, args);
    if (name == "trim") {
      Value chars = Arg(args, 0, "chars", kNoneValue);
      return Value(PyStrip(v.Str(), chars.is_string() ? &chars.as_string() : nullptr, true, true));
    }
    if (name == "string") return Value(v.Str());
    if (name == "upper") return Value(AsciiUpper(v.Str()));
    if (name == "lower") return Value(AsciiLower(v.Str()));
    if (name == "capitalize") {
      std::string s = AsciiLower(v.Str());
      if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
      return Value(s);
    }
    if (name == "title") return Value(JinjaTitle(v.Str()));
    if (name == "items") {
      if (v.is_undefined()) return Value::MakeList();
      if (!v.is_dict()) Fail("Can only get item pairs from a mapping.");
      Value result;
      CallMethod(v, "items", args, &result);
      return result;
    }
    if (name == "join") {
      Value sep = Arg(args, 0, "d", Value(""));
      Value attribute = Arg(args, 1, "attribute", kNoneValue);
      std::string out;
      bool first = true;
      for (const auto& item : Iterate(v)) {
        if (!first) out += sep.Str();
        first = false;
        (attribute.is_none() ? item : GetPath(*this, item, attribute)).AppendStr(&out);
        CheckSize(out.size());
      }
      return Value(std::move(out));
    }
    if (name == "list") return Value::MakeList(Iterate(v));
    if (name == "first" || name == "last") {
      std::vector<Value> items = Iterate(v);
      if (items.empty()) return Value::Undefined("No " + name + " item, sequence was empty.");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "reverse") {
      if (v.is_string()) {
        return Slice(v, kNoneValue, kNoneValue, Value(int64_t{-1}));
      }
      std::vector<Value> items = Iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::MakeList(std::move(items));
    }
    if (name == "replace") {
      Value count = Arg(args, 2, "count", kNoneValue);
      return Value(PyReplace(v.Str(), Arg(args, 0, "old", Value("")).Str(),
                             Arg(args, 1, "new", Value("")).Str(),
                             count.is_none() ? -1 : count.as_int()));
    }
    if (name == "select" || name == "reject") return SelectOrReject(*this, v, args, name == "select", false);
    if (name == "selectattr" || name == "rejectattr") {
      return SelectOrReject(*this, v, args, name == "selectattr", true);
    }
    if (name == "map") {
      std::vector<Value> out;
      const Value* attribute = args.Get(SIZE_MAX, "attribute");
      if (attribute != nullptr) {
        const Value* fallback = args.Get(SIZE_MAX, "default");
        for (const auto& item : Iterate(v)) {
          Value x = GetPath(*this, item, *attribute);
          out.push_back(x.is_undefined() && fallback ? *fallback : x);
        }
      } else {
        if (args.positional.empty()) Fail("map requires a filter name or attribute=");
        std::string filter = args.positional[0].Str();
        CallArgs rest;
        rest.positional.assign(args.positional.begin() + 1, args.positional.end());
        rest.keyword = args.keyword;
        for (const auto& item : Iterate(v)) out.push_back(ApplyFilter(filter, item, rest));
      }
      return Value::MakeList(std::move(out));
    }
    if (name == "sort") return Value::MakeList(SortedItems(*this, Iterate(v), args, 0, 1, 2));
    if (name == "dictsort") {
      if (!v.is_dict()) Fail("dictsort: expected a mapping");
      bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
      std::string by = Arg(args, 1, "by", Value("key")).Str();
      bool reverse = BoolArg(args, 2, "reverse", false);
      std::vector<Value> pairs;
      for (const auto& [k, x] : v.dict()->items) pairs.push_back(Value::MakeList({Value(k), x}, true));
      size_t index = by == "value" ? 1 : 0;
      std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
        int c = CompareValues(SortKey(a.list()->items[index], case_sensitive),
                              SortKey(b.list()->items[index], case_sensitive));
        return reverse ? c > 0 : c < 0;
      });
      return Value::MakeList(std::move(pairs));
    }
    if (name == "unique") {
      bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
      Value attribute = Arg(args, 1, "attribute", kNoneValue);
      std::vector<Value> out, seen;
      for (const auto& item : Iterate(v)) {
        Value key = SortKey(attribute.is_none() ? item : GetPath(*this, item, attribute),
                            case_sensitive);
        bool dup = false;
        for (const auto& s : seen) dup = dup || ValuesEqual(s, key);
        if (!dup) {
          seen.push_back(key);
          out.push_back(item);
        }
      }
      return Value::MakeList(std::move(out));
    }
    if (name == "min" || name == "max") {
      std::vector<Value> items = Iterate(v);
      if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
      bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
      Value attribute = Arg(args, 1, "attribute", kNoneValue);
      size_t best = 0;
      auto key = [&](size_t i) {
        return SortKey(attribute.is_none() ? items[i] : GetPath(*this, items[i], attribute),
                       case_sensitive);
      };
      for (size_t i = 1; i < items.size(); ++i) {
        int c = CompareValues(key(i), key(best));
        if (name == "min" ? c < 0 : c > 0) best = i;
      }
      return items[best];
    }
    if (name == "sum") {
      Value attribute = Arg(args, 0, "attribute", kNoneValue);
      Value total = Arg(args, 1, "start", Value(int64_t{0}));
      for (const auto& item : Iterate(v)) {
        total = BinaryOp("+", total, attribute.is_none() ? item : GetPath(*this, item, attribute));
      }
      return total;
    }
    if (name == "abs") {
      if (v.is_float()) return Value(std::fabs(v.as_float()));
      if (v.is_number()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
      Fail("bad operand type for abs(): '" + v.TypeName() + "'");
    }
    if (name == "int") {
      Value fallback = Arg(args, 0, "default", Value(int64_t{0}));
      if (v.is_int()) return v;
      if (v.is_bool()) return Value(v.as_int());
      if (v.is_string()) {
        std::string s = PyStrip(v.as_string(), nullptr, true, true);
        char* end = nullptr;
        long long n = std::strtoll(s.c_str(), &end, static_cast<int>(Arg(args, 1, "base", Value(10)).as_int()));
        if (!s.empty() && end == s.c_str() + s.size()) return Value(static_cast<int64_t>(n));
      }
      bool ok;
      double d = ToNumber(v, &ok);
      if (!ok || !std::isfinite(d)) return fallback;
      return Value(static_cast<int64_t>(d));
    }
    if (name == "float") {
      bool ok;
      double d = ToNumber(v, &ok);
      return ok ? Value(d) : Arg(args, 0, "default", Value(0.0));
    }
    if (name == "round") {
      int64_t precision = Arg(args, 0, "precision", Value(int64_t{0})).as_int();
      std::string method = Arg(args, 1, "method", Value("common")).Str();
      if (!v.is_number()) Fail("round: expected a number");
      if (!v.is_float() && method == "common" && precision >= 0) return Value(v.as_int());
      return PyRound(v.as_double(), precision, method);
    }
    if (name == "safe" || name == "pprint") return name == "safe" ? v : Value(v.Repr());
    if (name == "escape" || name == "e" || name == "forceescape") return Value(HtmlEscape(v.Str()));
    if (name == "indent") {
      Value width = Arg(args, 0, "width", Value(int64_t{4}));
      std::string pad = width.is_string() ? width.as_string()
                                          : std::string(static_cast<size_t>(width.as_int()), ' ');
      return Value(Indent(v.Str(), pad, BoolArg(args, 1, "first", false), BoolArg(args, 2, "blank", false)));
    }
    if (name == "center") {
      int64_t width = Arg(args, 0, "width", Value(int64_t{80})).as_int();
      std::string s = v.Str();
      int64_t n = Length(Value(s));
      if (width <= n) return Value(s);
      int64_t total = width - n, left = total / 2 + (total & width & 1);
      return Value(std::string(left, ' ') + s + std::string(total - left, ' '));
    }
    if (name == "wordcount") return Value(static_cast<int64_t>(PySplit(v.Str(), nullptr, -1).size()));
    if (name == "format") {
      return Value(PyPercentFormat(v.Str(), Value::MakeList(args.positional, true)));
    }
    if (name == "attr") {
      std::string attr = Arg(args, 0, "name", Value("")).Str();
      if (v.is_dict() && !v.dict()->is_namespace && !IsDictMethod(attr)) {
        return Value::Undefined("'dict object' has no attribute '" + attr + "'");
      }
      return GetAttr(v, attr);
    }
    if (name == "batch" || name == "slice") {
      int64_t n = Arg(args, 0, name == "batch" ? "linecount" : "slices", Value(int64_t{1})).as_int();
      if (n <= 0) Fail(name + ": count must be positive");
      const Value* fill = args.Get(1, "fill_with");
      std::vector<Value> items = Iterate(v), groups;
      if (name == "batch") {
        for (size_t i = 0; i < items.size(); i += n) {
          std::vector<Value> g(items.begin() + i, items.begin() + std::min(items.size(), i + n));
          while (fill && static_cast<int64_t>(g.size()) < n) g.push_back(*fill);
          groups.push_back(Value::MakeList(std::move(g)));
        }
      } else {
        size_t per = items.size() / n, extra = items.size() % n, offset = 0;
        for (int64_t i = 0; i < n; ++i) {
          size_t count = per + (static_cast<size_t>(i) < extra ? 1 : 0);
          std::vector<Value> g(items.begin() + offset, items.begin() + offset + count);
          offset += count;
          if (fill && static_cast<size_t>(i) >= extra && extra > 0) g.push_back(*fill);
          groups.push_back(Value::MakeList(std::move(g)));
        }
      }
      return Value::MakeList(std::move(groups));
    }
    if (name == "groupby") {
      const Value* attribute = args.Get(0, "attribute");
      if (attribute == nullptr) Fail("groupby requires an attribute");
      CallArgs sort_args;
      sort_args.keyword.emplace_back("attribute", *attribute);
      std::vector<Value> sorted = SortedItems(*this, Iterate(v), sort_args, 0, 1, 2);
      std::vector<Value> groups;
      for (const auto& item : sorted) {
        Value key = GetPath(*this, item, *attribute);
        if (groups.empty() || !ValuesEqual(groups.back().list()->items[0], key)) {
          groups.push_back(Value::MakeList({key, Value::MakeList()}, true));
          groups.back().list()->field_names = {"grouper", "list"};
        }
        groups.back().list()->items[1].list()->items.push_back(item);
      }
      return Value::MakeList(std::move(groups));
    }
    if (name == "truncate") {
      int64_t length = Arg(args, 0, "length", Value(int64_t{255})).as_int();
      bool killwords = BoolArg(args, 1, "killwords", false);
      std::string end = Arg(args, 2, "end", Value("...")).Str();
      int64_t leeway = Arg(args, 3, "leeway", Value(int64_t{5})).as_int();
      std::string s = v.Str();
      int64_t n = Length(Value(s));
      if (n <= length + leeway) return Value(s);
      int64_t keep = std::max<int64_t>(0, length - Length(Value(end)));
      std::string head = Slice(Value(s), Value(int64_t{0}), Value(keep), kNoneValue).as_string();
      if (killwords) return Value(head + end);
      size_t space = head.rfind(' ');
      return Value((space == std::string::npos ? head : head.substr(0, space)) + end);
    }
  } catch (const Error& e) {
    Rethrow(e);
  }
  Fail("no filter named '" + name + "'");
}

bool Interpreter::ApplyTest(const std::string& name, const Value& v, CallArgs& args) {
  auto other = [&]() -> const Value& {
    const Value* o = args.Get(0, "other");
    if (o == nullptr) Fail("test '" + name + "' needs an argument");
    return *o;
  };
  try {
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict() && !v.dict()->is_namespace;
    if (name == "boolean") return v.is_bool();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "number") return v.is_number();
    if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
    if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
    if (name == "callable") return v.is_function() || (v.is_loop() && v.loop()->recurse);
    if (name == "lower") return v.is_string() && AsciiLower(v.as_string()) == v.as_string();
    if (name == "upper") return v.is_string() && AsciiUpper(v.as_string()) == v.as_string();
    if (name == "escaped") return false;
    if (name == "even" || name == "odd") {
      if (!v.is_number() || v.is_float()) Fail("test '" + name + "' needs an integer");
      return (v.as_int() % 2 == 0) == (name == "even");
    }
    if (name == "divisibleby") {
      Value n = Arg(args, 0, "num", Value(int64_t{1}));
      if (n.as_int() == 0) Fail("integer division or modulo by zero");
      return BinaryOp("%", v, n).as_double() == 0;
    }
    if (name == "eq" || name == "equalto" || name == "==") return ValuesEqual(v, other());
    if (name == "ne" || name == "!=") return !ValuesEqual(v, other());
    if (name == "sameas") {
      const Value& o = other();
      if (v.is_none() || v.is_bool() || o.is_none() || o.is_bool()) {
        return v.kind() == o.kind() && (v.is_none() || v.as_bool() == o.as_bool());
      }
      if (v.is_list() && o.is_list()) return v.list() == o.list();
      if (v.is_dict() && o.is_dict()) return v.dict() == o.dict();
      return false;
    }
    if (name == "lt" || name == "lessthan" || name == "<") return CompareValues(v, other()) < 0;
    if (name == "le" || name == "<=") return CompareValues(v, other()) <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return CompareValues(v, other()) > 0;
    if (name == "ge" || name == ">=") return CompareValues(v, other()) >= 0;
    if (name == "in") return Contains(Arg(args, 0, "seq", Value()), v);
    if (name == "filter") return false;
    if (name == "test") return false;
  } catch (const Error& e) {
    Rethrow(e);
  }
  Fail("no test named '" + name + "'");
}

}  // namespace pagoda::jinja
