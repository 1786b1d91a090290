// tensor/precision.h: TF32 is off unless allowed, and the setting sticks.
#include "tensor/precision.h"

#include "gtest/gtest.h"

namespace coppice {
namespace {

TEST(Precision, Tf32OffByDefaultAndSettable) {
  EXPECT_FALSE(allow_tf32());
  set_allow_tf32(true);
  EXPECT_TRUE(allow_tf32());
  set_allow_tf32(false);
  EXPECT_FALSE(allow_tf32());
}

}  // namespace
}  // namespace coppice
