#include "rendezvous/integer.h"

#include <cstdint>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

TEST(ParseInteger, AllOfTheTextInRange) {
  int v = -1;
  EXPECT_TRUE(parse_integer("42", v));
  EXPECT_EQ(v, 42);
  EXPECT_TRUE(parse_integer("-7", v));
  EXPECT_EQ(v, -7);
  EXPECT_TRUE(parse_integer("0", v, 0, 3));
  EXPECT_EQ(v, 0);
  std::int64_t big = 0;
  EXPECT_TRUE(parse_integer("9000000000", big));
  EXPECT_EQ(big, 9000000000);
}

TEST(ParseInteger, RefusesAnythingElseAndLeavesOutAlone) {
  for (const char* bad : {"", " 1", "1 ", "+1", "1x", "x1", "0x10", "1.5", "--1", "2147483648"}) {
    int v = 99;
    EXPECT_FALSE(parse_integer(bad, v)) << bad;
    EXPECT_EQ(v, 99) << bad;
  }
  int v = 99;
  EXPECT_FALSE(parse_integer("4", v, 0, 3));
  EXPECT_FALSE(parse_integer("-1", v, 0));
  EXPECT_EQ(v, 99);
  unsigned u = 5;
  EXPECT_FALSE(parse_integer("-1", u));
  EXPECT_EQ(u, 5u);
}

}  // namespace
}  // namespace mlrun
