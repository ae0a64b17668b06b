// Python operator semantics (+ - * / // % **, in, len, iter, slicing) and the
// UTF-8 string helpers behind them.
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "jinja/filters.h"
#include "jinja/interpreter.h"

namespace pagoda::jinja {

bool IsAscii(std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) offsets.push_back(i);
  }
  offsets.push_back(s.size());
  return offsets;
}

std::string CodePointAt(std::string_view s, int64_t i) {
  if (IsAscii(s)) return std::string(1, s[i]);
  std::vector<size_t> off = CodePointOffsets(s);
  return std::string(s.substr(off[i], off[i + 1] - off[i]));
}

std::vector<Value> Iterate(const Value& value) {
  std::vector<Value> out;
  switch (value.kind()) {
    case Value::Kind::kList:
      return value.list()->items;
    case Value::Kind::kDict:
      for (const auto& [k, v] : value.dict()->items) out.emplace_back(k);
      return out;
    case Value::Kind::kString: {
      const std::string& s = value.as_string();
      std::vector<size_t> off = CodePointOffsets(s);
      for (size_t i = 0; i + 1 < off.size(); ++i) {
        out.emplace_back(s.substr(off[i], off[i + 1] - off[i]));
      }
      return out;
    }
    case Value::Kind::kUndefined:
      return out;
    default:
      ThrowInvalidArgument("'" + value.TypeName() + "' object is not iterable");
  }
}

int64_t Length(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kList: return static_cast<int64_t>(value.list()->items.size());
    case Value::Kind::kDict: return static_cast<int64_t>(value.dict()->items.size());
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: {
      const std::string& s = value.as_string();
      int64_t n = 0;
      for (unsigned char c : s) n += (c & 0xC0) != 0x80;
      return n;
    }
    default:
      ThrowInvalidArgument("object of type '" + value.TypeName() + "' has no len()");
  }
}

bool Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string()) {
        ThrowInvalidArgument("'in <string>' requires string as left operand, not " +
                             item.TypeName());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& v : container.list()->items) {
        if (ValuesEqual(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.is_string() && container.dict()->Find(item.as_string()) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      ThrowInvalidArgument("argument of type '" + container.TypeName() + "' is not iterable");
  }
}

namespace {

int64_t SliceIndex(const Value& v, int64_t n, int64_t default_value, bool for_stop,
                   int64_t step) {
  if (v.is_none()) return default_value;
  if (!v.is_int() && !v.is_bool()) {
    ThrowInvalidArgument("slice indices must be integers or None");
  }
  int64_t i = v.as_int();
  if (i < 0) i += n;
  if (step > 0) return std::clamp<int64_t>(i, 0, n);
  return std::clamp<int64_t>(i, -1, n - 1);
}

[[noreturn]] void Unsupported(const std::string& op, const Value& a, const Value& b) {
  ThrowInvalidArgument("unsupported operand type(s) for " + op + ": '" + a.TypeName() +
                       "' and '" + b.TypeName() + "'");
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value Repeat(const Value& seq, int64_t count) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < count; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < count; ++i) {
    items.insert(items.end(), seq.list()->items.begin(), seq.list()->items.end());
  }
  return Value::MakeList(std::move(items), seq.list()->is_tuple);
}

}  // namespace

Value Slice(const Value& object, const Value& start_v, const Value& stop_v, const Value& step_v) {
  int64_t step = step_v.is_none() ? 1 : step_v.as_int();
  if (!step_v.is_none() && !step_v.is_int()) ThrowInvalidArgument("slice step must be an integer");
  if (step == 0) ThrowInvalidArgument("slice step cannot be zero");
  int64_t n = Length(object);
  int64_t start = SliceIndex(start_v, n, step > 0 ? 0 : n - 1, false, step);
  int64_t stop = SliceIndex(stop_v, n, step > 0 ? n : -1, true, step);
  std::vector<int64_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
  if (object.is_list()) {
    std::vector<Value> items;
    items.reserve(picks.size());
    for (int64_t i : picks) items.push_back(object.list()->items[i]);
    return Value::MakeList(std::move(items), object.list()->is_tuple);
  }
  if (object.is_string()) {
    const std::string& s = object.as_string();
    std::string out;
    if (IsAscii(s)) {
      for (int64_t i : picks) out += s[i];
    } else {
      std::vector<size_t> off = CodePointOffsets(s);
      for (int64_t i : picks) out.append(s, off[i], off[i + 1] - off[i]);
    }
    return Value(std::move(out));
  }
  ThrowInvalidArgument("'" + object.TypeName() + "' object is not subscriptable");
}

Value BinaryOp(const std::string& op, const Value& a, const Value& b) {
  bool numbers = a.is_number() && b.is_number();
  bool any_float = a.is_float() || b.is_float();
  char c = op[0];
  if (op == "+") {
    if (numbers) {
      if (any_float) return Value(a.as_double() + b.as_double());
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) ThrowInvalidArgument("integer overflow");
      return Value(r);
    }
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.list()->is_tuple == b.list()->is_tuple) {
      std::vector<Value> items = a.list()->items;
      items.insert(items.end(), b.list()->items.begin(), b.list()->items.end());
      return Value::MakeList(std::move(items), a.list()->is_tuple);
    }
    if (a.is_string()) {
      ThrowInvalidArgument("can only concatenate str (not \"" + b.TypeName() + "\") to str");
    }
    if (a.is_list()) {
      ThrowInvalidArgument("can only concatenate list (not \"" + b.TypeName() + "\") to list");
    }
    Unsupported(op, a, b);
  }
  if (op == "-") {
    if (!numbers) Unsupported(op, a, b);
    if (any_float) return Value(a.as_double() - b.as_double());
    int64_t r;
    if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) ThrowInvalidArgument("integer overflow");
    return Value(r);
  }
  if (op == "*") {
    if (numbers) {
      if (any_float) return Value(a.as_double() * b.as_double());
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) ThrowInvalidArgument("integer overflow");
      return Value(r);
    }
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return Repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return Repeat(b, a.as_int());
    Unsupported(op, a, b);
  }
  if (op == "/") {
    if (!numbers) Unsupported(op, a, b);
    if (b.as_double() == 0) ThrowInvalidArgument("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || c == '%') {
    if (c == '%' && a.is_string()) return Value(PyPercentFormat(a.as_string(), b));
    if (!numbers) Unsupported(op, a, b);
    if (b.as_double() == 0) {
      ThrowInvalidArgument(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    }
    if (any_float) {
      double x = a.as_double(), y = b.as_double();
      double mod = std::fmod(x, y);
      if (mod != 0 && ((mod < 0) != (y < 0))) mod += y;
      if (op == "%") return Value(mod);
      return Value(std::floor(x / y));
    }
    int64_t x = a.as_int(), y = b.as_int();
    if (op == "//") return Value(FloorDiv(x, y));
    int64_t mod = x % y;
    if (mod != 0 && ((mod < 0) != (y < 0))) mod += y;
    return Value(mod);
  }
  if (op == "**") {
    if (!numbers) Unsupported(op, a, b);
    if (!any_float && b.as_int() >= 0) {
      int64_t result = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(result, base, &result)) {
          ThrowInvalidArgument("integer overflow");
        }
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) ThrowInvalidArgument("integer overflow");
      }
      return Value(result);
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  ThrowInvalidArgument("unknown operator " + op);
}

std::string PyPercentFormat(const std::string& format, const Value& args) {
  std::vector<Value> values;
  if (args.is_list() && args.list()->is_tuple) values = args.list()->items;
  else values.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    size_t j = i + 1;
    std::string spec = "%";
    while (j < format.size() && std::string_view("-+ #0123456789.").find(format[j]) !=
                                    std::string_view::npos) {
      spec += format[j++];
    }
    if (j >= format.size()) ThrowInvalidArgument("incomplete format");
    char conv = format[j];
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) ThrowInvalidArgument("not enough arguments for format string");
    const Value& v = values[next++];
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        std::string s = conv == 's' ? v.Str() : v.Repr();
        std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), s.c_str());
        out += spec == "%" ? s : std::string(buf);
        break;
      }
      case 'd':
      case 'i':
        if (!v.is_number()) ThrowInvalidArgument("%d format: a real number is required");
        std::snprintf(buf, sizeof(buf), (spec + "lld").c_str(),
                      static_cast<long long>(v.is_float() ? std::trunc(v.as_float()) : v.as_int()));
        out += buf;
        break;
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G':
        if (!v.is_number()) ThrowInvalidArgument("must be real number, not " + v.TypeName());
        std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v.as_double());
        out += buf;
        break;
      case 'x': case 'X': case 'o':
        if (!v.is_int()) ThrowInvalidArgument("an integer is required");
        std::snprintf(buf, sizeof(buf), (spec + "ll" + conv).c_str(),
                      static_cast<long long>(v.as_int()));
        out += buf;
        break;
      default:
        ThrowInvalidArgument(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (next < values.size()) {
    ThrowInvalidArgument("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace pagoda::jinja
