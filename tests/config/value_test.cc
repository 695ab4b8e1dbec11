#include <gtest/gtest.h>

#include "kiln/config/value.h"

namespace kiln::config {
namespace {

TEST(Literals, IntegersAllowUnderscoresLikeYaml) {
  EXPECT_EQ(parse_int_literal("150_001"), 150001);
  EXPECT_EQ(parse_int_literal("-1"), -1);
  EXPECT_EQ(parse_int_literal("+7"), 7);
  EXPECT_FALSE(parse_int_literal("1.5"));
  EXPECT_FALSE(parse_int_literal("12abc"));
  EXPECT_FALSE(parse_int_literal(""));
  EXPECT_FALSE(parse_int_literal("99999999999999999999"));  // overflow is not a number
}

TEST(Literals, FloatsInEveryYamlSpelling) {
  EXPECT_DOUBLE_EQ(*parse_float_literal("1.e-05"), 1e-5);  // MaxText's spelling
  EXPECT_DOUBLE_EQ(*parse_float_literal("1e-5"), 1e-5);
  EXPECT_DOUBLE_EQ(*parse_float_literal("3.0e-5"), 3e-5);
  EXPECT_DOUBLE_EQ(*parse_float_literal("0."), 0.0);
  EXPECT_DOUBLE_EQ(*parse_float_literal(".5"), 0.5);
  EXPECT_DOUBLE_EQ(*parse_float_literal("10_000.0"), 10000.0);
  EXPECT_DOUBLE_EQ(*parse_float_literal("7"), 7.0);
  EXPECT_TRUE(std::isinf(*parse_float_literal("-.inf")));
  EXPECT_FALSE(parse_float_literal("1e"));
  EXPECT_FALSE(parse_float_literal("e5"));
  EXPECT_FALSE(parse_float_literal("1.2.3"));
  EXPECT_FALSE(parse_float_literal("abc"));
}

TEST(Literals, InferScalarTypesBySpelling) {
  EXPECT_EQ(infer_scalar("true").kind(), ValueKind::kBool);
  EXPECT_EQ(infer_scalar("False").kind(), ValueKind::kBool);
  EXPECT_EQ(infer_scalar("32_000").kind(), ValueKind::kInt);
  EXPECT_EQ(infer_scalar("1.0e-5").kind(), ValueKind::kFloat);
  EXPECT_EQ(infer_scalar("bfloat16").kind(), ValueKind::kString);
  EXPECT_EQ(infer_scalar("llama3.1").kind(), ValueKind::kString);
}

TEST(Value, YamlTextReadsBackToTheSameValue) {
  EXPECT_EQ(Value::floating(12.0).to_yaml(), "12.0");
  EXPECT_EQ(Value::floating(3e-5).to_yaml(), "3e-05");
  EXPECT_EQ(Value::integer(-1).to_yaml(), "-1");
  EXPECT_EQ(Value::string("").to_yaml(), "\"\"");
  EXPECT_EQ(Value::string("gpt-oss-20b").to_yaml(), "gpt-oss-20b");
  EXPECT_EQ(Value::string("true").to_yaml(), "\"true\"");  // else it would read back as a bool
  EXPECT_EQ(Value::string("12").to_yaml(), "\"12\"");
  EXPECT_EQ(Value::string("a b: c").to_yaml(), "\"a b: c\"");
  EXPECT_EQ(Value::list({Value::string("kv"), Value::list({})}).to_yaml(), "[kv, []]");
}

TEST(ConvertLike, IntsAreAcceptedForFloatsButNotTheReverse) {
  Result<Value> f = convert_like(Value::integer(4), Value::floating(1.0));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind(), ValueKind::kFloat);
  EXPECT_DOUBLE_EQ(f->as_float(), 4.0);
  Result<Value> i = convert_like(Value::floating(1.5), Value::integer(1));
  ASSERT_FALSE(i.ok());
  EXPECT_EQ(i.status().message(), "expected an integer, got 1.5");
  EXPECT_FALSE(convert_like(Value::integer(1), Value::boolean(true)).ok());
}

TEST(ConvertLike, ListElementsFollowTheDefaultsElementType) {
  Value floats = Value::list({Value::floating(1.0)});
  Result<Value> ok = convert_like(Value::list({Value::integer(1), Value::floating(2.5)}), floats);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->as_list()[0].kind(), ValueKind::kFloat);
  Value names = Value::list({Value::string("silu")});
  EXPECT_FALSE(convert_like(Value::list({Value::integer(3)}), names).ok());
  EXPECT_FALSE(convert_like(Value::string("silu"), names).ok());
  // An empty default accepts any list.
  EXPECT_TRUE(convert_like(Value::list({Value::string("bias")}), Value::list({})).ok());
}

TEST(OverrideText, TypedByTheDefault) {
  EXPECT_EQ(parse_override_text("1_000", Value::integer(0))->as_int(), 1000);
  EXPECT_DOUBLE_EQ(parse_override_text("2", Value::floating(0))->as_float(), 2.0);
  EXPECT_EQ(parse_override_text("TRUE", Value::boolean(false))->as_bool(), true);
  EXPECT_EQ(parse_override_text("false", Value::boolean(true))->as_bool(), false);
  EXPECT_EQ(parse_override_text("", Value::string("x"))->as_string(), "");
  EXPECT_EQ(parse_override_text("'quoted'", Value::string("x"))->as_string(), "quoted");
  Result<Value> list = parse_override_text("[sigmoid,linear]", Value::list({Value::string("a")}));
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->to_yaml(), "[sigmoid, linear]");
  Result<Value> nested = parse_override_text("[[embed, [fsdp]], [kv, []]]", Value::list({}));
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(nested->to_yaml(), "[[embed, [fsdp]], [kv, []]]");
}

TEST(OverrideText, RejectsWhatTheKeyCannotHold) {
  EXPECT_EQ(parse_override_text("abc", Value::integer(0)).status().message(),
            "expected an integer, got abc");
  EXPECT_EQ(parse_override_text("1.5", Value::integer(0)).status().message(),
            "expected an integer, got 1.5");
  EXPECT_EQ(parse_override_text("yes", Value::boolean(false)).status().message(),
            "expected true or false, got yes");
  EXPECT_EQ(parse_override_text("x", Value::floating(0)).status().message(),
            "expected a number, got x");
  EXPECT_EQ(parse_override_text("a,b", Value::list({})).status().message(),
            "expected a list like [a, b], got a,b");
  EXPECT_FALSE(parse_override_text("[a,", Value::list({})).ok());
}

}  // namespace
}  // namespace kiln::config
