#include "worker/hardware.h"

#include <stdexcept>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

// A worker count that is not a number is refused, not read up to its first non-digit (std::stoi
// took "4x" for 4).
TEST(Hardware, NprocPerNodeIsANumberOrAName) {
  EXPECT_EQ(resolve_nproc_per_node("4"), 4);
  EXPECT_GE(resolve_nproc_per_node("cpu"), 1);
  EXPECT_THROW(resolve_nproc_per_node("4x"), std::runtime_error);
  EXPECT_THROW(resolve_nproc_per_node("0"), std::runtime_error);
}

}  // namespace
}  // namespace mlrun
