// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The servers' sync policies driven directly (no network): bsp applies each step once to
// the sum of the live workers' pushes and answers pulls by version; duplicates are never
// applied twice; ssp holds a pull while its worker is more than s clocks ahead; gone
// workers stop counting; held requests time out; bad clocks are refused; a pushpull on an
// elastic table returns the centre before its update.
#include "server/sync_policy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "server/optimizer.h"
#include "server/sync_state.h"

namespace ps {
namespace {

constexpr NodeId kServer = 1;
constexpr NodeId kA = 5, kB = 6, kC = 7;

struct Answer {
  Header h;
  Status status;
  std::vector<float> values;
};

class SyncPolicyTest : public ::testing::Test {
 protected:
  // One table held whole by this server; the policy learns it from a map.
  void SetUpTable(TableSpec spec, std::unique_ptr<SyncPolicy> policy, int workers = 2) {
    TableInfo t;
    t.id = 3;
    t.spec = std::move(spec);
    if (t.dense()) {
      t.chunk_elems = 1024;
      t.ranges = {KeyRange{0, 1, kServer}};
    } else {
      t.ranges = {KeyRange{0, 0, kServer}};
    }
    ASSERT_TRUE(store_.Install(t).ok());
    ClusterMap map;
    map.tables[t.id] = t;
    policy_ = std::move(policy);
    policy_->OnMap(map, kServer);
    std::set<NodeId> live;
    for (int i = 0; i < workers; ++i) live.insert(kA + i);
    policy_->SetWorkers(live, store_, Reply());
    table_ = t;
  }

  SyncPolicy::ReplyFn Reply() {
    return [this](const Header& h, const Status& s, std::vector<Frame> frames) {
      Answer a{h, s, {}};
      if (s.ok() && !frames.empty()) {
        a.values.resize(frames[0].size() / sizeof(float));
        std::memcpy(a.values.data(), frames[0].data(), frames[0].size());
      }
      answers_.push_back(std::move(a));
    };
  }

  DataRequest Dense(MsgType type, NodeId from, uint32_t clock, std::vector<float> values = {}) {
    DataRequest r;
    r.header.type = static_cast<uint16_t>(type);
    r.header.sender = from;
    r.header.table = table_.id;
    r.header.request_id = ++next_id_;
    r.header.offset = 0;
    r.header.count = table_.spec.size;
    r.header.clock = clock;
    r.pushes = type != MsgType::kPull;
    r.pulls = type == MsgType::kPull || type == MsgType::kPushPull;
    r.op = type == MsgType::kAssign ? ApplyOp::kAssign : ApplyOp::kRule;
    if (r.pushes) r.frames.push_back(Frame::Copy(values.data(), values.size() * sizeof(float)));
    return r;
  }

  DataRequest Sparse(MsgType type, NodeId from, uint32_t clock, std::vector<Key> keys,
                     std::vector<float> rows = {}) {
    DataRequest r = Dense(type, from, clock);
    r.header.flags = kFlagSparse;
    r.header.count = keys.size();
    r.header.dim = table_.spec.dim;
    r.frames.clear();
    r.frames.push_back(Frame::Copy(keys.data(), keys.size() * sizeof(Key)));
    if (r.pushes) r.frames.push_back(Frame::Copy(rows.data(), rows.size() * sizeof(float)));
    return r;
  }

  void Send(DataRequest r) { policy_->Handle(std::move(r), store_, Reply()); }

  std::vector<float> Values() {
    std::vector<float> v(table_.spec.size);
    EXPECT_TRUE(store_.ReadDense(table_.id, 0, v.size(), v.data()).ok());
    return v;
  }

  Store store_{kServer};
  TableInfo table_;
  std::unique_ptr<SyncPolicy> policy_;
  std::vector<Answer> answers_;
  uint64_t next_id_ = 0;
};

TableSpec DenseSpec(UpdateRule rule, SyncMode sync, int32_t staleness = 0) {
  TableSpec s = TableSpec::Dense("w", 3, rule);
  s.learning_rate = 0.5f;
  s.sync = sync;
  s.staleness = staleness;
  return s;
}

TEST(WorkerClockTest, CountsInOrderAndOutOfOrderOnceAndBoundsTheLead) {
  sync::WorkerClock c;
  EXPECT_EQ(c.Count(0), sync::WorkerClock::Outcome::kCounted);
  EXPECT_EQ(c.Count(0), sync::WorkerClock::Outcome::kDuplicate);
  EXPECT_EQ(c.Count(2), sync::WorkerClock::Outcome::kCounted);  // past a gap
  EXPECT_EQ(c.clock(), 1u);
  EXPECT_EQ(c.Count(2), sync::WorkerClock::Outcome::kDuplicate);
  EXPECT_EQ(c.Count(1), sync::WorkerClock::Outcome::kCounted);  // fills it
  EXPECT_EQ(c.clock(), 3u);
  EXPECT_EQ(c.Count(3 + sync::kMaxClockLead + 1), sync::WorkerClock::Outcome::kTooFar);
  EXPECT_EQ(c.clock(), 3u);
}

TEST_F(SyncPolicyTest, BspAppliesEachStepOnceToTheSumAndAnswersPullsByVersion) {
  SetUpTable(DenseSpec(UpdateRule::kSgd, SyncMode::kBsp), NewBspPolicy(60000));
  Send(Dense(MsgType::kPush, kA, 0, {1, 2, 3}));
  ASSERT_EQ(answers_.size(), 1u);  // a push is acknowledged once counted...
  EXPECT_TRUE(answers_[0].status.ok());
  EXPECT_EQ(Values(), std::vector<float>({0, 0, 0}));  // ...but not applied alone
  Send(Dense(MsgType::kPull, kA, 1));                  // the state after step 0: waits
  EXPECT_EQ(answers_.size(), 1u);
  EXPECT_EQ(policy_->held(), 1u);
  Send(Dense(MsgType::kPush, kA, 0, {1, 2, 3}));  // a duplicate: acknowledged, not counted
  ASSERT_EQ(answers_.size(), 2u);
  EXPECT_EQ(Values(), std::vector<float>({0, 0, 0}));
  Send(Dense(MsgType::kPushPull, kB, 0, {3, 2, 1}));  // completes step 0
  // x = 0 - 0.5 * (g_A + g_B), once; both pulls answered with it.
  const std::vector<float> after0 = {-2, -2, -2};
  EXPECT_EQ(Values(), after0);
  ASSERT_EQ(answers_.size(), 4u);
  EXPECT_EQ(answers_[2].values, after0);
  EXPECT_EQ(answers_[3].values, after0);
  EXPECT_EQ(policy_->held(), 0u);
  // Step 1 with a duplicate in the middle: still applied once, to g_A + g_B.
  Send(Dense(MsgType::kPushPull, kA, 1, {2, 0, 0}));
  Send(Dense(MsgType::kPushPull, kA, 1, {2, 0, 0}));
  EXPECT_EQ(policy_->held(), 2u);
  Send(Dense(MsgType::kPushPull, kB, 1, {0, 0, 2}));
  EXPECT_EQ(Values(), std::vector<float>({-3, -2, -3}));
  EXPECT_EQ(policy_->held(), 0u);
  ASSERT_EQ(answers_.size(), 7u);
  for (size_t i = 4; i < 7; ++i) EXPECT_EQ(answers_[i].values, std::vector<float>({-3, -2, -3}));
  // A pull of clock 0 (nothing pushed yet, as a fresh worker) is answered at once.
  Send(Dense(MsgType::kPull, kB, 0));
  ASSERT_EQ(answers_.size(), 8u);
}

TEST_F(SyncPolicyTest, BspAppliesAStatefulRuleOnceToTheStepsSum) {
  TableSpec spec = DenseSpec(UpdateRule::kAdam, SyncMode::kBsp);
  SetUpTable(spec, NewBspPolicy(60000), /*workers=*/3);
  auto adam = MakeOptimizer(spec);
  ASSERT_TRUE(adam.ok());
  std::vector<float> x(3, 0.0f), state(3 * (*adam)->state_width(), 0.0f);
  for (uint32_t step = 0; step < 3; ++step) {
    std::vector<float> sum(3, 0.0f);
    for (NodeId w : {kA, kB, kC}) {
      std::vector<float> g = {0.1f * w, -0.2f * step, 1.0f + w};
      for (int i = 0; i < 3; ++i) sum[i] += g[i];
      Send(Dense(MsgType::kPush, w, step, g));
    }
    (*adam)->Apply(x.data(), state.data(), 3, sum.data(), 3);
    EXPECT_EQ(Values(), x) << "step " << step;
  }
}

TEST_F(SyncPolicyTest, BspSumsSparsePushesWithDifferentKeys) {
  TableSpec spec = TableSpec::Sparse("e", 2, UpdateRule::kSum);
  spec.sync = SyncMode::kBsp;
  SetUpTable(spec, NewBspPolicy(60000));
  Send(Sparse(MsgType::kPush, kA, 0, {7, 9}, {1, 1, 2, 2}));
  Send(Sparse(MsgType::kPull, kA, 1, {7, 9, 11}));
  EXPECT_EQ(policy_->held(), 1u);
  Send(Sparse(MsgType::kPush, kB, 0, {}, {}));  // an empty push still counts
  ASSERT_EQ(answers_.size(), 3u);               // the held pull, then B's acknowledgement
  EXPECT_EQ(answers_[1].values, std::vector<float>({1, 1, 2, 2, 0, 0}));
  Send(Sparse(MsgType::kPush, kA, 1, {9}, {1, 0}));
  Send(Sparse(MsgType::kPushPull, kB, 1, {9, 11}, {1, 0, 5, 5}));
  ASSERT_EQ(answers_.size(), 5u);
  EXPECT_EQ(answers_[4].values, std::vector<float>({4, 2, 5, 5}));
}

TEST_F(SyncPolicyTest, BspGoneWorkerStopsCountingAndItsHeldPullsAreDropped) {
  SetUpTable(DenseSpec(UpdateRule::kSum, SyncMode::kBsp), NewBspPolicy(60000), 3);
  Send(Dense(MsgType::kPushPull, kA, 0, {1, 1, 1}));
  Send(Dense(MsgType::kPushPull, kC, 0, {1, 1, 1}));
  EXPECT_EQ(policy_->held(), 2u);
  EXPECT_TRUE(answers_.empty());
  // B never pushed step 0: once it is gone, the step completes with A's and C's.
  std::string held_up = policy_->SetWorkers({kA, kC}, store_, Reply());
  EXPECT_NE(held_up.find("node 6 at clock 0"), std::string::npos) << held_up;
  ASSERT_EQ(answers_.size(), 2u);
  EXPECT_EQ(answers_[0].values, std::vector<float>({2, 2, 2}));
  EXPECT_EQ(answers_[1].values, std::vector<float>({2, 2, 2}));
  // A pushes step 1 and waits for C; then A is gone: its held pull is dropped (nobody
  // to answer), its push stays in step 1's sum, which C completes.
  Send(Dense(MsgType::kPushPull, kA, 1, {1, 1, 1}));
  EXPECT_EQ(policy_->held(), 1u);
  policy_->SetWorkers({kC}, store_, Reply());
  EXPECT_EQ(policy_->held(), 0u);
  EXPECT_EQ(answers_.size(), 2u);
  Send(Dense(MsgType::kPushPull, kC, 1, {1, 1, 1}));
  ASSERT_EQ(answers_.size(), 3u);
  EXPECT_EQ(answers_[2].values, std::vector<float>({4, 4, 4}));
  EXPECT_EQ(answers_[2].h.sender, kC);
}

TEST_F(SyncPolicyTest, BspRefusesBadClocksSendersAndShapes) {
  SetUpTable(DenseSpec(UpdateRule::kSum, SyncMode::kBsp), NewBspPolicy(60000));
  Send(Dense(MsgType::kPush, kA, 1000, {1, 1, 1}));  // far ahead of step 0
  Send(Dense(MsgType::kPull, kA, 1000));             // would wait for pushes never made
  Send(Dense(MsgType::kPush, 99, 0, {1, 1, 1}));     // not a live worker
  DataRequest part = Dense(MsgType::kPush, kA, 0, {1, 1});
  part.header.count = 2;  // not the whole range
  Send(std::move(part));
  ASSERT_EQ(answers_.size(), 4u);
  EXPECT_EQ(answers_[0].status.code(), StatusCode::kResourceExhausted) << answers_[0].status;
  EXPECT_EQ(answers_[1].status.code(), StatusCode::kInvalidArgument) << answers_[1].status;
  EXPECT_EQ(answers_[2].status.code(), StatusCode::kFailedPrecondition) << answers_[2].status;
  EXPECT_EQ(answers_[3].status.code(), StatusCode::kInvalidArgument) << answers_[3].status;
  EXPECT_EQ(Values(), std::vector<float>({0, 0, 0}));
  EXPECT_EQ(policy_->held(), 0u);
}

TEST_F(SyncPolicyTest, HeldPullsTimeOutWithUnavailable) {
  SetUpTable(DenseSpec(UpdateRule::kSum, SyncMode::kBsp), NewBspPolicy(/*hold_timeout_ms=*/0));
  Send(Dense(MsgType::kPushPull, kA, 0, {1, 1, 1}));
  EXPECT_EQ(policy_->held(), 1u);
  policy_->Tick(sync::NowMs() + 1, store_, Reply());
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0].status.code(), StatusCode::kUnavailable);
  EXPECT_NE(answers_[0].status.message().find("worker node(s) 6"), std::string::npos)
      << answers_[0].status;
  EXPECT_EQ(policy_->held(), 0u);
}

TEST_F(SyncPolicyTest, SspHoldsAPullWhileItsWorkerIsMoreThanSAhead) {
  SetUpTable(DenseSpec(UpdateRule::kSum, SyncMode::kSsp, /*staleness=*/1), NewSspPolicy(60000));
  Send(Dense(MsgType::kPushPull, kA, 0, {1, 1, 1}));  // A at clock 1, B at 0: 1 - 0 <= 1
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0].values, std::vector<float>({1, 1, 1}));  // applied on arrival
  Send(Dense(MsgType::kPushPull, kA, 1, {1, 1, 1}));             // A at clock 2: 2 - 0 > 1, held
  EXPECT_EQ(answers_.size(), 1u);
  EXPECT_EQ(Values(), std::vector<float>({2, 2, 2}));
  Send(Dense(MsgType::kPushPull, kA, 1, {1, 1, 1}));  // duplicate: not applied again
  EXPECT_EQ(Values(), std::vector<float>({2, 2, 2}));
  Send(Dense(MsgType::kPush, kB, 0, {5, 5, 5}));  // B at clock 1: both of A's answered
  ASSERT_EQ(answers_.size(), 4u);
  EXPECT_EQ(answers_[1].values, std::vector<float>({7, 7, 7}));
  EXPECT_EQ(answers_[2].values, std::vector<float>({7, 7, 7}));
  // B gone: nobody is behind A any more.
  Send(Dense(MsgType::kPull, kA, 5));
  EXPECT_EQ(policy_->held(), 1u);
  policy_->SetWorkers({kA}, store_, Reply());
  EXPECT_EQ(policy_->held(), 1u);  // A itself has made 2 pushes: 5 - 2 > 1
  Send(Dense(MsgType::kPush, kA, 2, {0, 0, 0}));
  Send(Dense(MsgType::kPush, kA, 3, {0, 0, 0}));
  EXPECT_EQ(policy_->held(), 0u);
}

TEST_F(SyncPolicyTest, SspWithZeroStalenessAnswersEveryPullOfAStepTogether) {
  SetUpTable(DenseSpec(UpdateRule::kSgd, SyncMode::kSsp, 0), NewSspPolicy(60000));
  Send(Dense(MsgType::kPushPull, kA, 0, {2, 2, 2}));
  EXPECT_EQ(policy_->held(), 1u);
  Send(Dense(MsgType::kPushPull, kB, 0, {2, 4, 6}));
  ASSERT_EQ(answers_.size(), 2u);
  EXPECT_EQ(answers_[0].values, std::vector<float>({-2, -3, -4}));
  EXPECT_EQ(answers_[1].values, answers_[0].values);
}

TEST_F(SyncPolicyTest, ElasticPushPullReturnsTheCentreBeforeItsUpdate) {
  TableSpec spec = TableSpec::Dense("centre", 3, UpdateRule::kElastic);
  spec.elastic_alpha = 0.25f;
  SetUpTable(spec, NewApplyOnArrival());
  Send(Dense(MsgType::kAssign, kA, 0, {4, 0, -4}));
  Send(Dense(MsgType::kPushPull, kA, 0, {8, 8, 8}));
  ASSERT_EQ(answers_.size(), 2u);
  EXPECT_EQ(answers_[1].values, std::vector<float>({4, 0, -4}));  // before
  EXPECT_EQ(Values(), std::vector<float>({5, 2, -1}));            // x += 0.25 (x_i - x)
}

}  // namespace
}  // namespace ps
