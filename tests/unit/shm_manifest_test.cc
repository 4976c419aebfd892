// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "transport/shm_manifest.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace ps {
namespace {

const std::string kName = "/layerps-shm-42-0";

TEST(ShmManifestTest, RoundTrip) {
  std::vector<ShmEntry> e = {{0, 3, 0, 65536}, {2, 4, 65536, 100000}};
  const std::string bytes = EncodeShmManifest(kName, e);
  EXPECT_EQ(bytes.size(), sizeof(ShmHead) + 2 * sizeof(ShmEntry));
  ShmManifest m;
  ASSERT_TRUE(ParseShmManifest(bytes.data(), bytes.size(), {0, 7, 0}, &m).ok());
  EXPECT_EQ(m.segment, kName);
  ASSERT_EQ(m.frames.size(), 2u);
  EXPECT_EQ(m.frames[1].frame, 2u);
  EXPECT_EQ(m.frames[1].offset, 65536u);
}

TEST(ShmManifestTest, RefusesWhatCouldReachOutsideTheSegmentOrTheMessage) {
  auto refused = [](const std::string& name, std::vector<ShmEntry> e, std::vector<size_t> frames) {
    const std::string bytes = EncodeShmManifest(name, e);
    ShmManifest m;
    return ParseShmManifest(bytes.data(), bytes.size(), frames, &m).code() ==
           StatusCode::kProtocolError;
  };
  EXPECT_TRUE(refused(kName, {}, {0}));                                  // no entry
  EXPECT_TRUE(refused(kName, {{1, 0, 0, 10}}, {0}));                     // no such frame
  EXPECT_TRUE(refused(kName, {{0, 0, 0, 10}}, {5}));                     // frame not empty
  EXPECT_TRUE(refused(kName, {{0, 0, 0, 10}, {0, 1, 64, 10}}, {0}));     // frame twice
  EXPECT_TRUE(refused(kName, {{0, 1, 0, 10}, {1, 1, 64, 10}}, {0, 0}));  // slot twice
  EXPECT_TRUE(refused(kName, {{1, 0, 0, 10}, {0, 1, 64, 10}}, {0, 0}));  // not ascending
  EXPECT_TRUE(refused(kName, {{0, kShmSlots, 0, 10}}, {0}));             // slot
  EXPECT_TRUE(refused(kName, {{0, 0, 0, 0}}, {0}));                      // empty block
  EXPECT_TRUE(refused(kName, {{0, 0, kShmDataBytes - 64, 65}}, {0}));    // past the end
  EXPECT_TRUE(refused(kName, {{0, 0, ~uint64_t{0} - 63, 8}}, {0}));      // wraps
  EXPECT_TRUE(refused(kName, {{0, 0, 65, 8}}, {0}));                     // misaligned
  EXPECT_TRUE(refused("/dev/shm/x", {{0, 0, 0, 8}}, {0}));               // not ours
  EXPECT_TRUE(refused("/layerps-shm-../../x", {{0, 0, 0, 8}}, {0}));     // a path
  EXPECT_TRUE(refused("/layerps-shm-", {{0, 0, 0, 8}}, {0}));            // prefix only
  EXPECT_FALSE(refused(kName, {{0, kShmSlots - 1, kShmDataBytes - 64, 64}}, {0}));
  // Sizes that are not 72 + 24n, or above the largest manifest, and a wrong magic or count.
  ShmManifest m;
  std::string bytes = EncodeShmManifest(kName, {{0, 0, 0, 8}});
  EXPECT_FALSE(ParseShmManifest(bytes.data(), bytes.size() - 1, {0}, &m).ok());
  EXPECT_FALSE(ParseShmManifest(bytes.data(), 10, {0}, &m).ok());
  std::vector<ShmEntry> nine(kMaxFrames + 1, ShmEntry{0, 0, 0, 8});
  for (uint32_t i = 0; i < nine.size(); ++i) nine[i] = {i, i, 64u * i, 8};
  const std::string big = EncodeShmManifest(kName, nine);
  EXPECT_FALSE(ParseShmManifest(big.data(), big.size(), std::vector<size_t>(9, 0), &m).ok());
  bytes[0] ^= 1;
  EXPECT_FALSE(ParseShmManifest(bytes.data(), bytes.size(), {0}, &m).ok());
  bytes[0] ^= 1;
  bytes[8] = 2;  // count
  EXPECT_FALSE(ParseShmManifest(bytes.data(), bytes.size(), {0}, &m).ok());
}

}  // namespace
}  // namespace ps
