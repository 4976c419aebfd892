// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// TransferProgress (common/progress.h): the counters and the line it logs.
#include "common/progress.h"

#include <gtest/gtest.h>

namespace ps {
namespace {

TEST(TransferProgressTest, CountsBytesAndSaysHowFarOfTheEstimate) {
  TransferProgress p(std::chrono::milliseconds(0));
  EXPECT_FALSE(p.active());
  EXPECT_EQ(p.done(), 0u);
  p.Start("checkpoint set 7 (server rank 0)", 4 << 20);
  EXPECT_TRUE(p.active());
  p.Add(1 << 20);
  EXPECT_EQ(p.done(), 1u << 20);
  EXPECT_EQ(p.total(), 4u << 20);
  const std::string line = p.Line();
  EXPECT_NE(line.find("checkpoint set 7 (server rank 0): 1.0 of 4.0 MiB (25%) at "), std::string::npos)
      << line;
  p.Add(5 << 20);  // more than estimated: never over 100%, and the total follows
  EXPECT_NE(p.Line().find("6.0 of 6.0 MiB (100%)"), std::string::npos) << p.Line();
  p.Finish(true);
  EXPECT_FALSE(p.active());
  EXPECT_EQ(p.finished(), 1u);
  EXPECT_EQ(p.total(), 6u << 20);  // what it moved, once done
  EXPECT_GE(p.rate(), 0.0);
}

TEST(TransferProgressTest, AnUnknownTotalAndARestart) {
  TransferProgress p;
  p.Start("copy", 0);
  p.Add(512 << 10);
  EXPECT_NE(p.Line().find("copy: 0.5 MiB at "), std::string::npos) << p.Line();
  p.Finish(false);
  p.Start("copy again", 100);
  EXPECT_EQ(p.done(), 0u);
  EXPECT_EQ(p.total(), 100u);
  EXPECT_TRUE(p.active());
  EXPECT_EQ(p.finished(), 1u);
}

}  // namespace
}  // namespace ps
