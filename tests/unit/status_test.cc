// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "ps/status.h"

#include <gtest/gtest.h>

namespace ps {
namespace {

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(s.message(), "");
}

TEST(StatusTest, CarriesCodeAndMessage) {
  Status s = Timeout("waited 5 ms");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_EQ(s.ToString(), "Timeout: waited 5 ms");
  EXPECT_EQ(s.WithContext("pull").ToString(), "Timeout: pull: waited 5 ms");
  EXPECT_TRUE(Status::OK().WithContext("x").ok());
  EXPECT_EQ(Status(StatusCode::kOk, "ignored").message(), "");
}

TEST(StatusTest, EveryCodeHasAName) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kIoError); ++c) {
    EXPECT_STRNE(StatusCodeName(static_cast<StatusCode>(c)), "Unknown") << c;
  }
}

TEST(StatusOrTest, ValueOrError) {
  StatusOr<int> v = 7;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  StatusOr<int> e = NotFound("no");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  StatusOr<int> bad = Status::OK();  // a programming error becomes kInternal, not UB
  EXPECT_EQ(bad.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace ps
