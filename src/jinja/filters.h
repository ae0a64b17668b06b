// Jinja built-ins: filters, tests, the methods the sandbox lets a template call
// on str/list/dict, the `loop` object's attributes and the global functions
// (range, namespace, dict, raise_exception, strftime_now), plus the UTF-8 and
// Python string helpers they share. Filters and tests themselves are reached
// through Interpreter::ApplyFilter/ApplyTest (filters.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/value.h"

namespace pagoda::jinja {

// ---- Python string helpers (strings are UTF-8; Python counts code points) ----

// Byte offsets of each code point start, plus s.size() at the end.
std::vector<size_t> CodePointOffsets(std::string_view s);
bool IsAscii(std::string_view s);
// The i-th code point of s as a string. REQUIRES: 0 <= i < code point count.
std::string CodePointAt(std::string_view s, int64_t i);
// Python's str.isspace() for one code point.
bool IsPyWhitespace(uint32_t cp);
// Python's str.strip/lstrip/rstrip: `chars` null = Unicode whitespace.
std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right);
// Python's str.split(sep, maxsplit); sep null = runs of whitespace.
std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit);
std::string PyReplace(std::string_view s, std::string_view from, std::string_view to,
                      int64_t count);
std::string AsciiLower(std::string s);
std::string AsciiUpper(std::string s);
// Python's str % args ('%s', '%d', '%r', '%f', '%x', '%%', with flags/width/precision).
std::string PyPercentFormat(const std::string& format, const Value& args);

// Names of jinja2's built-in filters and tests that ApplyFilter/ApplyTest know.
bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

// ---- methods, loop attributes, globals ----

bool IsDictMethod(std::string_view name);
// Whether `object` (a str or list) has a callable method `name`.
bool HasMethod(const Value& object, std::string_view name);
// A function value that calls method `name` of `object`.
Value BoundMethod(const Value& object, const std::string& name);
Value LoopAttr(const LoopInfo& loop, const std::string& name);
// range, namespace, dict, raise_exception, strftime_now; Undefined for others.
Value GlobalFunction(const std::string& name);

}  // namespace pagoda::jinja
