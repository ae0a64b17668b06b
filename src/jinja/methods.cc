// Methods a sandboxed template may call on str/list/dict, the `loop` object,
// the global functions, and Python's string algorithms they rely on.
#include <algorithm>
#include <ctime>

#include "core/error.h"
#include "jinja/filters.h"
#include "jinja/interpreter.h"

namespace pagoda::jinja {
namespace {

uint32_t DecodeAt(std::string_view s, size_t i, size_t* len) {
  unsigned char c = s[i];
  int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  uint32_t cp = c & (0x7F >> extra);
  size_t k = 1;
  for (; k <= static_cast<size_t>(extra) && i + k < s.size(); ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  }
  *len = k;
  return cp;
}

Value Arg(CallArgs& args, size_t i, std::string_view name, const Value& fallback) {
  const Value* v = args.Get(i, name);
  return v ? *v : fallback;
}

std::string StrArg(CallArgs& args, size_t i, std::string_view name, const char* method) {
  const Value* v = args.Get(i, name);
  if (v == nullptr || !v->is_string()) {
    ThrowInvalidArgument(std::string(method) + "() argument must be str");
  }
  return v->as_string();
}

bool StartsOrEnds(const std::string& s, const Value& affix, bool start) {
  auto test = [&](const Value& a) {
    if (!a.is_string()) ThrowInvalidArgument("startswith/endswith first arg must be str or tuple");
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) {
    for (const auto& a : affix.list()->items) {
      if (test(a)) return true;
    }
    return false;
  }
  return test(affix);
}

std::string PyTitle(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& ch : out) {
    bool is_alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
    if (is_alpha) {
      ch = prev_cased ? static_cast<char>(std::tolower(ch)) : static_cast<char>(std::toupper(ch));
    }
    prev_cased = is_alpha;
  }
  return out;
}

// Python's str.format with {} / {0} / {name} fields (no format specs).
std::string PyFormat(const std::string& fmt, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') { out += '{'; ++i; continue; }
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') { out += '}'; ++i; continue; }
    if (c != '{') { out += c; continue; }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) ThrowInvalidArgument("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < args.positional.size() ? &args.positional[auto_index++] : nullptr;
    } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
      size_t k = std::stoul(field);
      v = k < args.positional.size() ? &args.positional[k] : nullptr;
    } else {
      for (const auto& [name, value] : args.keyword) {
        if (name == field) v = &value;
      }
    }
    if (v == nullptr) ThrowInvalidArgument("format(): missing argument for {" + field + "}");
    out += v->Str();
  }
  return out;
}

bool StringMethod(const std::string& s, const std::string& name, CallArgs& args, Value* out) {
  static const Value kNone = Value::None();
  const Value* chars_value = args.Get(0, "chars");
  auto chars_arg = [&]() -> const std::string* {
    return chars_value && chars_value->is_string() ? &chars_value->as_string() : nullptr;
  };
  if (name == "strip") *out = Value(PyStrip(s, chars_arg(), true, true));
  else if (name == "lstrip") *out = Value(PyStrip(s, chars_arg(), true, false));
  else if (name == "rstrip") *out = Value(PyStrip(s, chars_arg(), false, true));
  else if (name == "upper") *out = Value(AsciiUpper(s));
  else if (name == "lower") *out = Value(AsciiLower(s));
  else if (name == "title") *out = Value(PyTitle(s));
  else if (name == "capitalize") {
    std::string r = AsciiLower(s);
    if (!r.empty()) r[0] = static_cast<char>(std::toupper(r[0]));
    *out = Value(std::move(r));
  } else if (name == "split" || name == "rsplit") {
    Value sep = Arg(args, 0, "sep", kNone);
    Value maxsplit = Arg(args, 1, "maxsplit", Value(int64_t{-1}));
    if (name == "rsplit" && maxsplit.as_int() >= 0) {
      ThrowInvalidArgument("rsplit with maxsplit is not supported");
    }
    std::vector<Value> parts;
    for (auto& p : PySplit(s, sep.is_string() ? &sep.as_string() : nullptr, maxsplit.as_int())) {
      parts.emplace_back(std::move(p));
    }
    *out = Value::MakeList(std::move(parts));
  } else if (name == "splitlines") {
    std::vector<Value> parts;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        parts.emplace_back(s.substr(start, i - start));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) parts.emplace_back(s.substr(start));
    *out = Value::MakeList(std::move(parts));
  } else if (name == "startswith" || name == "endswith") {
    const Value* affix = args.Get(0, "prefix");
    if (affix == nullptr) ThrowInvalidArgument(name + "() takes at least 1 argument");
    *out = Value(StartsOrEnds(s, *affix, name == "startswith"));
  } else if (name == "replace") {
    Value count = Arg(args, 2, "count", Value(int64_t{-1}));
    *out = Value(PyReplace(s, StrArg(args, 0, "old", "replace"), StrArg(args, 1, "new", "replace"),
                           count.as_int()));
  } else if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    std::string sub = StrArg(args, 0, "sub", name.c_str());
    if (name == "count") {
      int64_t n = 0;
      if (sub.empty()) {
        n = Length(Value(s)) + 1;
      } else {
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      }
      *out = Value(n);
    } else {
      size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos && name == "index") ThrowInvalidArgument("substring not found");
      *out = Value(p == std::string::npos ? int64_t{-1} : Length(Value(s.substr(0, p))));
    }
  } else if (name == "join") {
    const Value* items = args.Get(0, "iterable");
    if (items == nullptr) ThrowInvalidArgument("join() takes exactly one argument");
    std::string r;
    bool first = true;
    for (const auto& v : Iterate(*items)) {
      if (!v.is_string()) ThrowInvalidArgument("sequence item: expected str instance");
      if (!first) r += s;
      first = false;
      r += v.as_string();
    }
    *out = Value(std::move(r));
  } else if (name == "format") {
    *out = Value(PyFormat(s, args));
  } else if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
             name == "isupper" || name == "islower") {
    bool ok = !s.empty();
    bool cased = false;
    for (unsigned char c : s) {
      bool digit = c >= '0' && c <= '9', alpha = std::isalpha(c) != 0;
      if (name == "isdigit") ok &= digit;
      else if (name == "isalpha") ok &= alpha;
      else if (name == "isalnum") ok &= digit || alpha;
      else if (name == "isspace") ok &= IsPyWhitespace(c);
      else if (name == "isupper") { ok &= !std::islower(c); cased |= std::isupper(c) != 0; }
      else { ok &= !std::isupper(c); cased |= std::islower(c) != 0; }
    }
    if (name == "isupper" || name == "islower") ok &= cased;
    *out = Value(ok);
  } else {
    return false;
  }
  return true;
}

const char* const kStringMethods[] = {
    "strip", "lstrip", "rstrip", "upper", "lower", "title", "capitalize", "split", "rsplit",
    "splitlines", "startswith", "endswith", "replace", "find", "rfind", "index", "count", "join",
    "format", "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower"};

}  // namespace

bool IsPyWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  auto strip_cp = [&](uint32_t cp, std::string_view bytes) {
    if (chars == nullptr) return IsPyWhitespace(cp);
    return chars->find(bytes) != std::string::npos;
  };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t len;
      uint32_t cp = DecodeAt(s, begin, &len);
      if (!strip_cp(cp, s.substr(begin, len))) break;
      begin += len;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t len;
      uint32_t cp = DecodeAt(s, start, &len);
      if (!strip_cp(cp, s.substr(start, end - start))) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep != nullptr) {
    if (sep->empty()) ThrowInvalidArgument("empty separator");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t p = s.find(*sep, start);
      if (p == std::string::npos) break;
      parts.emplace_back(s.substr(start, p - start));
      start = p + sep->size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  size_t i = 0;
  while (true) {
    while (i < s.size()) {
      size_t len;
      if (!IsPyWhitespace(DecodeAt(s, i, &len))) break;
      i += len;
    }
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      parts.emplace_back(PyStrip(s.substr(i), nullptr, false, true));
      break;
    }
    size_t start = i;
    while (i < s.size()) {
      size_t len;
      if (IsPyWhitespace(DecodeAt(s, i, &len))) break;
      i += len;
    }
    parts.emplace_back(s.substr(start, i - start));
  }
  return parts;
}

std::string PyReplace(std::string_view s, std::string_view from, std::string_view to,
                      int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between code points (and at both ends).
    std::vector<size_t> off = CodePointOffsets(s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < off.size(); ++i) {
      if (count < 0 || done < count) { out += to; ++done; }
      out.append(s.substr(off[i], off[i + 1] - off[i]));
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  for (size_t p = s.find(from); p != std::string::npos && (count < 0 || done < count);
       p = s.find(from, start)) {
    out.append(s.substr(start, p - start));
    out.append(to);
    start = p + from.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

std::string AsciiLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string AsciiUpper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool IsDictMethod(std::string_view name) {
  return name == "items" || name == "keys" || name == "values" || name == "get";
}

bool HasMethod(const Value& object, std::string_view name) {
  if (object.is_string()) {
    for (const char* m : kStringMethods) {
      if (name == m) return true;
    }
    return false;
  }
  if (object.is_list()) return name == "index" || name == "count";
  if (object.is_dict()) return !object.dict()->is_namespace && IsDictMethod(name);
  return false;
}

Value BoundMethod(const Value& object, const std::string& name) {
  return Value::MakeFunction(name, [object, name](Interpreter& in, CallArgs& args) {
    Value result;
    if (!in.CallMethod(object, name, args, &result)) in.Fail("no method " + name);
    return result;
  });
}

bool Interpreter::CallMethod(const Value& object, const std::string& name, CallArgs& args,
                             Value* result) {
  try {
    if (object.is_string()) return StringMethod(object.as_string(), name, args, result);
    if (object.is_dict() && !object.dict()->is_namespace) {
      const auto& items = object.dict()->items;
      if (name == "items" || name == "keys" || name == "values") {
        std::vector<Value> out;
        out.reserve(items.size());
        for (const auto& [k, v] : items) {
          if (name == "items") out.push_back(Value::MakeList({Value(k), v}, true));
          else out.push_back(name == "keys" ? Value(k) : v);
        }
        *result = Value::MakeList(std::move(out));
        return true;
      }
      if (name == "get") {
        const Value* key = args.Get(0, "key");
        if (key == nullptr) Fail("get expected at least 1 argument");
        const Value* found = key->is_string() ? object.dict()->Find(key->as_string()) : nullptr;
        *result = found ? *found : Arg(args, 1, "default", Value::None());
        return true;
      }
      if (name == "pop" || name == "update" || name == "setdefault" || name == "clear" ||
          name == "popitem") {
        Fail("access to attribute '" + name + "' of 'dict' object is unsafe.");
      }
      return false;
    }
    if (object.is_list()) {
      if (name == "index" || name == "count") {
        const Value* x = args.Get(0, "value");
        if (x == nullptr) Fail(name + "() takes exactly one argument");
        int64_t n = 0;
        const auto& items = object.list()->items;
        for (size_t i = 0; i < items.size(); ++i) {
          if (!ValuesEqual(items[i], *x)) continue;
          if (name == "index") {
            *result = Value(static_cast<int64_t>(i));
            return true;
          }
          ++n;
        }
        if (name == "index") Fail(x->Repr() + " is not in list");
        *result = Value(n);
        return true;
      }
      if (name == "append" || name == "pop" || name == "extend" || name == "insert" ||
          name == "remove" || name == "sort" || name == "reverse" || name == "clear") {
        Fail("access to attribute '" + name + "' of '" + object.TypeName() + "' object is unsafe.");
      }
      return false;
    }
    if (object.is_loop() && name == "cycle") {
      if (args.positional.empty()) Fail("no items for cycling given");
      *result = args.positional[object.loop()->index0 % args.positional.size()];
      return true;
    }
  } catch (const Error& e) {
    Rethrow(e);
  }
  return false;
}

Value LoopAttr(const LoopInfo& loop, const std::string& name) {
  int64_t i = loop.index0, n = loop.length;
  if (name == "index") return Value(i + 1);
  if (name == "index0") return Value(i);
  if (name == "revindex") return Value(n - i);
  if (name == "revindex0") return Value(n - i - 1);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i == n - 1);
  if (name == "length") return Value(n);
  if (name == "depth") return Value(loop.depth0 + 1);
  if (name == "depth0") return Value(loop.depth0);
  if (name == "previtem") {
    return i > 0 ? loop.items->items[i - 1] : Value::Undefined("there is no previous item");
  }
  if (name == "nextitem") {
    return i + 1 < n ? loop.items->items[i + 1] : Value::Undefined("there is no next item");
  }
  if (name == "cycle") {
    int64_t index0 = i;
    return Value::MakeFunction("cycle", [index0](Interpreter& in, CallArgs& args) {
      if (args.positional.empty()) in.Fail("no items for cycling given");
      return args.positional[index0 % args.positional.size()];
    });
  }
  return Value::Undefined("'LoopContext object' has no attribute '" + name + "'");
}

Value GlobalFunction(const std::string& name) {
  if (name == "range") {
    return Value::MakeFunction(name, [](Interpreter& in, CallArgs& args) {
      auto& p = args.positional;
      for (const auto& v : p) {
        if (!v.is_int() && !v.is_bool()) in.Fail("range() integer arguments expected");
      }
      int64_t start = 0, stop = 0, step = 1;
      if (p.size() == 1) stop = p[0].as_int();
      else if (p.size() == 2 || p.size() == 3) {
        start = p[0].as_int();
        stop = p[1].as_int();
        if (p.size() == 3) step = p[2].as_int();
      } else {
        in.Fail("range expected 1 to 3 arguments");
      }
      if (step == 0) in.Fail("range() arg 3 must not be zero");
      int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                               : (start > stop ? (start - stop - step - 1) / -step : 0);
      // jinja2's sandbox caps range() at MAX_RANGE = 100000 items.
      if (count > 100000) in.Fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      std::vector<Value> items;
      items.reserve(count);
      for (int64_t k = 0; k < count; ++k) items.emplace_back(start + k * step);
      return Value::MakeList(std::move(items));
    });
  }
  if (name == "namespace" || name == "dict") {
    bool is_namespace = name == "namespace";
    return Value::MakeFunction(name, [is_namespace](Interpreter& in, CallArgs& args) {
      Value result = Value::MakeDict();
      result.dict()->is_namespace = is_namespace;
      for (const auto& v : args.positional) {
        if (!v.is_dict()) in.Fail("namespace()/dict() positional argument must be a mapping");
        for (const auto& [k, x] : v.dict()->items) result.dict()->Set(k, x);
      }
      for (const auto& [k, v] : args.keyword) result.dict()->Set(k, v);
      return result;
    });
  }
  if (name == "raise_exception") {
    return Value::MakeFunction(name, [](Interpreter&, CallArgs& args) -> Value {
      const Value* message = args.Get(0, "message");
      throw RaisedError(message ? message->Str() : std::string("raise_exception called"));
    });
  }
  if (name == "strftime_now") {
    return Value::MakeFunction(name, [](Interpreter& in, CallArgs& args) {
      const Value* format = args.Get(0, "format");
      if (format == nullptr || !format->is_string()) in.Fail("strftime_now(format) needs a string");
      std::time_t now = in.now();
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[512];
      size_t n = std::strftime(buf, sizeof(buf), format->as_string().c_str(), &tm);
      return Value(std::string(buf, n));
    });
  }
  return Value();
}

}  // namespace pagoda::jinja
