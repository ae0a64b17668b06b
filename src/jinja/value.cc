#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace pagoda::jinja {

const Value* DictData::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void DictData::Set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::Get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::Undefined(std::string hint) {
  Value v;
  v.str_ = std::move(hint);
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::MakeList(std::vector<Value> items, bool is_tuple) {
  auto list = std::make_shared<ListData>();
  list->items = std::move(items);
  list->is_tuple = is_tuple;
  return Value(std::move(list));
}

Value Value::MakeDict() { return Value(std::make_shared<DictData>()); }

Value Value::MakeFunction(std::string name, std::function<Value(Interpreter&, CallArgs&)> call) {
  auto fn = std::make_shared<Function>();
  fn->name = std::move(name);
  fn->call = std::move(call);
  return Value(std::move(fn));
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  using J = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case J::null:
      return None();
    case J::boolean:
      return Value(json.get<bool>());
    case J::number_integer:
      return Value(json.get<int64_t>());
    case J::number_unsigned: {
      uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case J::number_float:
      return Value(json.get<double>());
    case J::string:
      return Value(json.get<std::string>());
    case J::array: {
      auto list = std::make_shared<ListData>();
      list->items.reserve(json.size());
      for (const auto& item : json) list->items.push_back(FromJson(item));
      return Value(std::move(list));
    }
    case J::object: {
      auto dict = std::make_shared<DictData>();
      dict->items.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) {
        dict->items.emplace_back(it.key(), FromJson(it.value()));
      }
      return Value(std::move(dict));
    }
    default:
      return None();
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0.0;
    case Kind::kString:
      return !str_.empty();
    case Kind::kList:
      return !list_->items.empty();
    case Kind::kDict:
      return !dict_->items.empty() || dict_->is_namespace;
    case Kind::kFunction:
    case Kind::kLoop:
      return true;
  }
  return false;
}

std::string FormatPythonFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);  // like "-1.2345e+16"
  bool negative = !sci.empty() && sci[0] == '-';
  if (negative) sci.remove_prefix(1);
  size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exponent + 1;  // position of the decimal point after digits[0..decpt)
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits;
      out.append(decpt - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, decpt);
      out += '.';
      out += digits.substr(decpt);
    }
    return out;
  }
  out += digits[0];
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  out += exp_buf;
  return out;
}

std::string PythonStringRepr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == quote) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += quote;
  return out;
}

void Value::AppendStr(std::string* out) const {
  switch (kind_) {
    case Kind::kUndefined:
      return;
    case Kind::kString:
      *out += str_;
      return;
    case Kind::kInt:
      *out += std::to_string(int_);
      return;
    default:
      *out += Str();
  }
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return str_;
    case Kind::kNone:
      return "None";
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return FormatPythonFloat(float_);
    case Kind::kString:
      return PythonStringRepr(str_);
    case Kind::kList: {
      std::string out = list_->is_tuple ? "(" : "[";
      for (size_t i = 0; i < list_->items.size(); ++i) {
        if (i > 0) out += ", ";
        out += list_->items[i].Repr();
      }
      if (list_->is_tuple && list_->items.size() == 1) out += ",";
      out += list_->is_tuple ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      std::string out = dict_->is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : dict_->items) {
        if (!first) out += ", ";
        first = false;
        out += PythonStringRepr(k);
        out += ": ";
        out += v.Repr();
      }
      out += dict_->is_namespace ? "}>" : "}";
      return out;
    }
    case Kind::kFunction:
      return "<function " + fn_->name + ">";
    case Kind::kLoop:
      return "<LoopContext " + std::to_string(loop_->index0 + 1) + "/" +
             std::to_string(loop_->length) + ">";
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return list_->is_tuple ? "tuple" : "list";
    case Kind::kDict: return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::kFunction: return "function";
    case Kind::kLoop: return "LoopContext";
  }
  return "object";
}

bool ValuesEqual(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const auto& x = a.list()->items;
      const auto& y = b.list()->items;
      if (a.list()->is_tuple != b.list()->is_tuple || x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!ValuesEqual(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict() == b.dict()) return true;
      if (a.dict()->is_namespace || b.dict()->is_namespace) return false;
      const auto& x = a.dict()->items;
      if (x.size() != b.dict()->items.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = b.dict()->Find(k);
        if (other == nullptr || !ValuesEqual(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction:
      return a.function() == b.function();
    case Value::Kind::kLoop:
      return a.loop() == b.loop();
    default:
      return false;
  }
}

int CompareValues(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.list()->is_tuple == b.list()->is_tuple) {
    const auto& x = a.list()->items;
    const auto& y = b.list()->items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (ValuesEqual(x[i], y[i])) continue;
      return CompareValues(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  ThrowInvalidArgument("'<' not supported between instances of '" + a.TypeName() + "' and '" +
                       b.TypeName() + "'");
}

namespace {

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = s[i];
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20 || (c == 0x7f && ensure_ascii)) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else if (c >= 0x80 && ensure_ascii) {
          // Decode one UTF-8 sequence and write it as \uXXXX (surrogate pairs).
          uint32_t cp = 0;
          int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
          cp = c & (0x3F >> extra);
          for (int k = 0; k < extra && i + 1 < s.size(); ++k) {
            cp = (cp << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F);
          }
          char buf[16];
          if (cp >= 0x10000) {
            cp -= 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10),
                          0xDC00 + (cp & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
          }
          *out += buf;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

void AppendNewline(const JsonFormat& f, int level, std::string* out) {
  *out += '\n';
  for (int i = 0; i < level; ++i) {
    if (!f.indent_string.empty()) {
      *out += f.indent_string;
    } else {
      out->append(static_cast<size_t>(f.indent), ' ');
    }
  }
}

void AppendJson(const Value& v, const JsonFormat& f, int level, std::string* out) {
  if (level > 512) ThrowInvalidArgument("tojson: value nested too deeply");
  bool pretty = f.indent >= 0 || !f.indent_string.empty();
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return;
    case Value::Kind::kBool: *out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: *out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      double d = v.as_float();
      if (std::isnan(d)) *out += "NaN";
      else if (std::isinf(d)) *out += d > 0 ? "Infinity" : "-Infinity";
      else *out += FormatPythonFloat(d);
      return;
    }
    case Value::Kind::kString: AppendJsonString(v.as_string(), f.ensure_ascii, out); return;
    case Value::Kind::kList: {
      const auto& items = v.list()->items;
      if (items.empty()) { *out += "[]"; return; }
      *out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += f.item_separator;
        if (pretty) AppendNewline(f, level + 1, out);
        AppendJson(items[i], f, level + 1, out);
      }
      if (pretty) AppendNewline(f, level, out);
      *out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict()->is_namespace) break;
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.dict()->items) entries.push_back(&e);
      if (entries.empty()) { *out += "{}"; return; }
      if (f.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      *out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += f.item_separator;
        if (pretty) AppendNewline(f, level + 1, out);
        AppendJsonString(entries[i]->first, f.ensure_ascii, out);
        *out += f.key_separator;
        AppendJson(entries[i]->second, f, level + 1, out);
      }
      if (pretty) AppendNewline(f, level, out);
      *out += '}';
      return;
    }
    default:
      break;
  }
  ThrowInvalidArgument("Object of type " + v.TypeName() + " is not JSON serializable");
}

}  // namespace

std::string ToJsonString(const Value& value, const JsonFormat& format) {
  std::string out;
  AppendJson(value, format, 0, &out);
  return out;
}

}  // namespace pagoda::jinja
