#include <gtest/gtest.h>

#include "kiln/base/check.h"
#include "kiln/base/hash.h"
#include "kiln/base/status.h"
#include "kiln/base/strings.h"

namespace kiln {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("value {} must be positive", x);
  return x;
}

Result<int> doubled(int x) {
  KILN_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

TEST(Status, ResultCarriesValueOrError) {
  EXPECT_EQ(*doubled(4), 8);
  Result<int> bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().to_string(), "invalid argument: value -1 must be positive");
  EXPECT_EQ(bad.status().with_context("x.yml").message(), "x.yml: value -1 must be positive");
}

TEST(Status, ResultFromOkStatusBecomesInternalError) {
  Result<int> r{Status()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(Check, FailureAbortsWithMessage) {
  EXPECT_DEATH({ KILN_CHECK(1 + 1 == 3) << "arithmetic"; }, "Check failed.*1 \\+ 1 == 3.*arithmetic");
}

TEST(Hash, Fnv1aKnownValues) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(hex64(255), "00000000000000ff");
  EXPECT_NE(mix64(1), mix64(2));
}

TEST(Strings, SplitTrimAndSuggestions) {
  EXPECT_EQ(split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(trim("  x y \n"), "x y");
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  std::vector<std::string> keys = {"learning_rate", "steps", "max_target_length"};
  EXPECT_EQ(closest_match("learnig_rate", keys), "learning_rate");
  EXPECT_EQ(closest_match("zzzzzzzzzzzz", keys), "");
}

}  // namespace
}  // namespace kiln
