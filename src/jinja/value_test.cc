#include "jinja/value.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "core/error.h"

namespace pagoda::jinja {
namespace {

TEST(ValueTest, FormatsFloatsLikePythonRepr) {
  EXPECT_EQ(FormatPythonFloat(1.0), "1.0");
  EXPECT_EQ(FormatPythonFloat(-0.0), "-0.0");
  EXPECT_EQ(FormatPythonFloat(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatPythonFloat(1e16), "1e+16");
  EXPECT_EQ(FormatPythonFloat(1e15), "1000000000000000.0");
  EXPECT_EQ(FormatPythonFloat(0.0001), "0.0001");
  EXPECT_EQ(FormatPythonFloat(0.00001), "1e-05");
  EXPECT_EQ(FormatPythonFloat(1.5e300), "1.5e+300");
  EXPECT_EQ(FormatPythonFloat(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(FormatPythonFloat(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(FormatPythonFloat(std::nan("")), "nan");
}

TEST(ValueTest, ReprsStringsLikePython) {
  EXPECT_EQ(PythonStringRepr("abc"), "'abc'");
  EXPECT_EQ(PythonStringRepr("it's"), "\"it's\"");
  EXPECT_EQ(PythonStringRepr("'\""), "'\\'\"'");
  EXPECT_EQ(PythonStringRepr("a\nb\\"), "'a\\nb\\\\'");
  EXPECT_EQ(PythonStringRepr("é"), "'é'");
}

TEST(ValueTest, TruthinessAndEqualityFollowPython) {
  EXPECT_FALSE(Value().Truthy());
  EXPECT_FALSE(Value::None().Truthy());
  EXPECT_FALSE(Value("").Truthy());
  EXPECT_FALSE(Value::MakeList().Truthy());
  EXPECT_TRUE(Value(0.5).Truthy());
  EXPECT_TRUE(ValuesEqual(Value(1), Value(1.0)));
  EXPECT_TRUE(ValuesEqual(Value(true), Value(1)));
  EXPECT_FALSE(ValuesEqual(Value("1"), Value(1)));
  EXPECT_TRUE(ValuesEqual(Value(), Value()));
}

TEST(ValueTest, JsonKeepsInsertionOrderAndPythonSeparators) {
  Value v = Value::FromJson(nlohmann::ordered_json::parse(R"({"b": [1, 2.0], "a": null})"));
  JsonFormat compact;
  EXPECT_EQ(ToJsonString(v, compact), R"({"b": [1, 2.0], "a": null})");
  JsonFormat pretty;
  pretty.indent = 2;
  pretty.item_separator = ",";
  EXPECT_EQ(ToJsonString(v, pretty), "{\n  \"b\": [\n    1,\n    2.0\n  ],\n  \"a\": null\n}");
  JsonFormat sorted;
  sorted.sort_keys = true;
  EXPECT_EQ(ToJsonString(v, sorted), R"({"a": null, "b": [1, 2.0]})");
  EXPECT_THROW(ToJsonString(Value(), compact), Error);
}

}  // namespace
}  // namespace pagoda::jinja
