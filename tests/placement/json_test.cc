// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// JSON round trips and bad input for profiles, cluster specs and plans; the unit parsers
// and ClusterSpec::Validate.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "ps/placement.h"

namespace ps {
namespace placement {
namespace {

void ExpectBad(const Status& s, const std::vector<std::string>& needles) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  for (const std::string& n : needles) {
    EXPECT_NE(s.message().find(n), std::string::npos) << "'" << n << "' not in: " << s;
  }
}

TEST(ProfileJsonTest, BuiltinsRoundTrip) {
  for (const std::string& name : BuiltinProfileNames()) {
    ModelProfile m = *BuiltinProfile(name);
    const std::string text = ModelProfileToJson(m);
    StatusOr<ModelProfile> back = ModelProfileFromJson(text);
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_EQ(ModelProfileToJson(*back), text) << name;
    ASSERT_EQ(back->layers.size(), m.layers.size());
    EXPECT_EQ(back->TotalParamBytes(), m.TotalParamBytes());
    EXPECT_EQ(back->TotalFlopsPerSample(), m.TotalFlopsPerSample());
    EXPECT_EQ(back->input_bytes_per_sample, m.input_bytes_per_sample);
    for (size_t i = 0; i < m.layers.size(); ++i) {
      const LayerProfile& a = m.layers[i];
      const LayerProfile& b = back->layers[i];
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.kind, b.kind);
      EXPECT_EQ(a.inputs, b.inputs);
      EXPECT_EQ(a.tables, b.tables);
      EXPECT_EQ(a.activation_bytes, b.activation_bytes);
      EXPECT_EQ(a.shape.kernel_w, b.shape.kernel_w);
      EXPECT_EQ(a.shape.PaddingW(), b.shape.PaddingW());
      EXPECT_EQ(a.shape.padding_w, b.shape.padding_w);
      EXPECT_EQ(a.shape.out_height, b.shape.out_height);
    }
  }
}

TEST(ProfileJsonTest, MinimalHandWrittenProfile) {
  StatusOr<ModelProfile> m = ModelProfileFromJson(R"({
    "name": "mlp",
    "layers": [
      {"name": "fc1", "kind": "fc", "param_bytes": 1000, "activation_bytes": 40},
      {"name": "fc2", "kind": "fc", "param_bytes": 80, "flops_per_sample": 1.5e3,
       "inputs": ["fc1"]}
    ]})");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->TotalParamBytes(), 1080u);
  EXPECT_EQ(m->layers[1].flops_per_sample, 1500);
  EXPECT_EQ(FindCutPoints(*m).size(), 1u);
}

// Measured layer times and the FLOP/s they were measured at survive a round trip; times
// without that FLOP/s are refused.
TEST(ProfileJsonTest, MeasuredLayerTimes) {
  StatusOr<ModelProfile> m = ModelProfileFromJson(R"({
    "name": "mlp", "reference_flops": 7.4e9,
    "layers": [
      {"name": "fc1", "kind": "fc", "param_bytes": 1000, "train_seconds_per_sample": 2.5e-4},
      {"name": "fc2", "kind": "fc", "param_bytes": 80, "flops_per_sample": 1.5e3, "inputs": ["fc1"]}
    ]})");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->reference_flops, 7.4e9);
  EXPECT_EQ(m->layers[0].train_seconds_per_sample, 2.5e-4);
  EXPECT_EQ(m->layers[1].train_seconds_per_sample, 0);
  const std::string text = ModelProfileToJson(*m);
  StatusOr<ModelProfile> back = ModelProfileFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ModelProfileToJson(*back), text);
  EXPECT_EQ(back->TrainFlopsPerSample(0, 2.0), 2.5e-4 * 7.4e9);
  ExpectBad(ModelProfileFromJson(R"({"name": "m", "layers": [
                {"name": "a", "kind": "fc", "train_seconds_per_sample": 1e-3}]})")
                .status(),
            {"'a'", "reference_flops"});
  ExpectBad(ModelProfileFromJson(R"({"name": "m", "reference_flops": 1e9, "layers": [
                {"name": "a", "kind": "fc", "train_seconds_per_sample": -1}]})")
                .status(),
            {"'a'", "train_seconds_per_sample"});
  ExpectBad(ModelProfileFromJson(
                R"({"name": "m", "reference_flops": -1, "layers": [{"name": "a", "kind": "fc"}]})")
                .status(),
            {"reference_flops"});
}

TEST(ProfileJsonTest, BadInputNamesTheProblem) {
  ExpectBad(ModelProfileFromJson("{").status(), {"bad JSON"});
  ExpectBad(ModelProfileFromJson("[]").status(), {"JSON object"});
  ExpectBad(ModelProfileFromJson(R"({"layers": []})").status(), {"'name'", "required"});
  ExpectBad(ModelProfileFromJson(R"({"name": "m", "layers": {}})").status(), {"'layers'"});
  ExpectBad(ModelProfileFromJson(R"({"name": "m", "layers": []})").status(), {"no layers"});
  ExpectBad(
      ModelProfileFromJson(R"({"name": "m", "layers": [{"name": "a", "kind": "lstm"}]})").status(),
      {"'a'", "lstm"});
  ExpectBad(ModelProfileFromJson(
                R"({"name": "m", "layers": [{"name": "a", "kind": "fc", "param_bytes": -4}]})")
                .status(),
            {"'a'", "param_bytes", "negative"});
  ExpectBad(ModelProfileFromJson(
                R"({"name": "m", "layers": [{"name": "a", "kind": "fc", "flops_per_sample": -1}]})")
                .status(),
            {"'a'", "flops_per_sample"});
  ExpectBad(ModelProfileFromJson(
                R"({"name": "m", "layers": [{"name": "a", "kind": "fc", "param_bytes": 1.5}]})")
                .status(),
            {"param_bytes", "integer"});
  ExpectBad(ModelProfileFromJson(
                R"({"name": "m", "layers": [{"name": "a", "kind": "fc", "paramm_bytes": 4}]})")
                .status(),
            {"paramm_bytes", "unknown key"});
  ExpectBad(ModelProfileFromJson(R"({"name": "m", "layers": [
                {"name": "a", "kind": "fc", "inputs": ["b"]},
                {"name": "b", "kind": "fc", "inputs": ["a"]}]})")
                .status(),
            {"'a'", "cycle"});
  ExpectBad(ModelProfileFromJson(R"({"name": "m", "layers": [
                {"name": "a", "kind": "fc"}, {"name": "a", "kind": "fc"}]})")
                .status(),
            {"duplicate"});
  ExpectBad(ModelProfileFromJson(
                R"({"name": "m", "version": 2, "layers": [{"name": "a", "kind": "fc"}]})")
                .status(),
            {"version"});
  ExpectBad(ModelProfileFromJson(R"({"name": "m", "layers": [
                {"name": "a", "kind": "conv", "shape": {"kernel_h": -3}}]})")
                .status(),
            {"'a'", "kernel_h"});
}

TEST(ClusterJsonTest, RoundTripAndUnits) {
  ClusterSpec c;
  c.servers = 3;
  c.workers = 8;
  c.server_bandwidth_bps = 25e9;
  c.worker_bandwidth_bps = 1e9;
  c.latency_s = 2e-4;
  c.worker_flops = 7e12;
  c.server_flops = 1e12;
  c.server_memory_bytes = 1ull << 36;
  c.worker_memory_bytes = 1ull << 33;
  c.server_loopback_bps = 6e9;
  c.worker_loopback_bps = 9e9;
  c.worker_link_bps = 1e9;
  c.server_link_bps = 2e9;
  StatusOr<ClusterSpec> back = ClusterSpecFromJson(ClusterSpecToJson(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ClusterSpecToJson(*back), ClusterSpecToJson(c));
  EXPECT_EQ(back->latency_s, 2e-4);
  EXPECT_EQ(back->server_loopback_bps, 6e9);
  EXPECT_EQ(back->worker_loopback_bps, 9e9);
  EXPECT_EQ(back->worker_link_bps, 1e9);
  EXPECT_EQ(back->server_link_bps, 2e9);

  StatusOr<ClusterSpec> u = ClusterSpecFromJson(R"({"servers": 2, "workers": 4,
      "bandwidth": "1Gbit", "worker_bandwidth_bps": "25Gbps", "latency_s": "50us",
      "worker_flops": "5T", "server_memory_bytes": "64GiB"})");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->server_bandwidth_bps, 1e9);
  EXPECT_EQ(u->worker_bandwidth_bps, 25e9);
  EXPECT_DOUBLE_EQ(u->latency_s, 50e-6);
  EXPECT_EQ(u->worker_flops, 5e12);
  EXPECT_EQ(u->server_memory_bytes, uint64_t{64} << 30);

  ExpectBad(ClusterSpecFromJson(R"({"workers": 0})").status(), {"workers"});
  ExpectBad(ClusterSpecFromJson(R"({"bandwidth": "fast"})").status(), {"bandwidth", "fast"});
  ExpectBad(ClusterSpecFromJson(R"({"bandwidth": 0})").status(), {"bandwidth"});
  ExpectBad(ClusterSpecFromJson(R"({"latency_s": -1})").status(), {"latency_s"});
  ExpectBad(ClusterSpecFromJson(R"({"server_loopback_bps": -5})").status(),
            {"server_loopback_bps"});
  EXPECT_EQ(ClusterSpecFromJson(R"({"server_loopback_bps": "8Gbit"})")->server_loopback_bps, 8e9);
  ExpectBad(ClusterSpecFromJson(R"({"worker_loopback_bps": "-1Gbit"})").status(),
            {"worker_loopback_bps"});
  EXPECT_EQ(ClusterSpecFromJson(R"({"worker_loopback_bps": "30Gbit"})")->worker_loopback_bps, 30e9);
  ExpectBad(ClusterSpecFromJson(R"({"nodes": 3})").status(), {"nodes", "unknown key"});
  ExpectBad(ClusterSpecFromJson("servers: 2").status(), {"bad JSON"});
}

TEST(PlanJsonTest, RoundTripKeepsEverything) {
  ModelProfile m = *BuiltinProfile("vgg16");
  ClusterSpec c;
  c.workers = 4;
  c.servers = 3;
  PlanOptions o;
  o.batch = 32;
  for (auto make : {ParkPlan, StanzaPlan, BalancedPlan}) {
    StatusOr<Plan> p = make(m, c, o);
    ASSERT_TRUE(p.ok()) << p.status();
    const std::string text = PlanToJson(*p);
    StatusOr<Plan> back = PlanFromJson(text);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(PlanToJson(*back), text);
    EXPECT_TRUE(ValidatePlan(*back, m).ok()) << ValidatePlan(*back, m);
    // Predicting the parsed plan again gives the same numbers.
    Plan again = *back;
    ASSERT_TRUE(PredictPlan(m, o, &again).ok());
    EXPECT_EQ(again.prediction.worker_bytes, p->prediction.worker_bytes);
    EXPECT_EQ(again.prediction.step_s, p->prediction.step_s);
    EXPECT_EQ(back->reason, p->reason);
    EXPECT_EQ(back->roles.fc_node_of_worker, p->roles.fc_node_of_worker);
  }
}

TEST(PlanJsonTest, BadPlans) {
  ModelProfile m = *BuiltinProfile("alexnet");
  ClusterSpec c;
  c.workers = 2;
  c.servers = 2;
  const std::string good = PlanToJson(*ParkPlan(m, c, PlanOptions()));
  ASSERT_TRUE(PlanFromJson(good).ok());
  auto edit = [&good](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
  };
  // A server that does not exist.
  ExpectBad(PlanFromJson(edit("\"dedicated_servers\": [\n      1\n    ]",
                              "\"dedicated_servers\": [\n      7\n    ]"))
                .status(),
            {"dedicated_servers", "rank 7"});
  ExpectBad(PlanFromJson(edit("\"mode\": \"ps\"", "\"mode\": \"gossip\"")).status(), {"gossip"});
  ExpectBad(PlanFromJson(edit("\"batch\": 32", "\"batch\": 0")).status(), {"batch"});
  ExpectBad(PlanFromJson(edit("\"fc_parallel\": \"data\"", "\"fc_parallel\": \"pipeline\"")).status(),
            {"fc_parallel", "pipeline"});
  StatusOr<Plan> channel = PlanFromJson(edit("\"fc_parallel\": \"data\"", "\"fc_parallel\": \"channel\""));
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_EQ(channel->fc_parallel, "channel");
  ExpectBad(PlanFromJson(edit("\"format\": \"layerps.plan\"", "\"format\": \"layerps.cluster\""))
                .status(),
            {"format"});
  ExpectBad(PlanFromJson("{}").status(), {"strategy"});
  ExpectBad(PlanFromJson("not json").status(), {"bad JSON"});
  // Well formed, but not a plan for this model.
  StatusOr<Plan> other = PlanFromJson(PlanToJson(*UniformPlan(*BuiltinProfile("vgg16"), c, {})));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(ValidatePlan(*other, m).ok());
}

// Inputs tests/fuzz/plan_json_fuzz found or that guard what it found (the corpus keeps
// them as regression-*): plans the reader accepted, ValidatePlan passed, and the cost
// model then misread.
TEST(PlanJsonTest, FuzzRegressions) {
  ModelProfile m = *BuiltinProfile("bigfc");
  ClusterSpec c;
  c.workers = 2;
  c.servers = 2;
  // The array after the first `"key": [` replaced by `to`.
  auto with = [](std::string s, const std::string& key, const std::string& to) {
    const size_t at = s.find("\"" + key + "\": [");
    EXPECT_NE(at, std::string::npos) << key;
    if (at == std::string::npos) return s;
    const size_t open = s.find('[', at), close = s.find(']', open);
    s.replace(open, close - open + 1, to);
    return s;
  };
  const std::string uniform = PlanToJson(*UniformPlan(m, c, PlanOptions()));
  ASSERT_TRUE(PlanFromJson(with(uniform, "fc_node_of_worker", "[]")).ok());
  // FC-node indices without FC nodes (no cut: ValidatePlan does not look at them, and
  // PredictPlan counted workers_of_fc[5] of an empty vector).
  ExpectBad(PlanFromJson(with(uniform, "fc_node_of_worker", "[5]")).status(),
            {"fc_node_of_worker", "FC node 5", "fc_nodes has 0"});
  ExpectBad(PlanFromJson(with(uniform, "fc_node_of_worker", "[-1]")).status(),
            {"fc_node_of_worker", "FC node -1"});
  const std::string stanza = PlanToJson(*StanzaPlan(m, c, PlanOptions()));
  ASSERT_TRUE(PlanFromJson(stanza).ok());
  ExpectBad(PlanFromJson(with(stanza, "fc_node_of_worker", "[0, 0, 0]")).status(),
            {"fc_node_of_worker", "3 entries", "2 workers"});
  // 2^64 - 1 read as -1.
  ExpectBad(PlanFromJson(with(uniform, "fc_node_of_worker", "[18446744073709551615]")).status(),
            {"fc_node_of_worker", "[-1, 2^20]"});
  ExpectBad(PlanFromJson(with(uniform, "conv_workers", "[0, 18446744073709551615]")).status(),
            {"conv_workers", "[-1, 2^20]"});
  // Shares that wrap around to the layer's bytes (conv1: 9728) passed ValidatePlan, and
  // the cost model multiplied them by W.
  ASSERT_EQ(m.layers[0].param_bytes, 9728u);
  ASSERT_TRUE(PlanFromJson(with(uniform, "server_bytes", "[4864, 4864]")).ok());
  ExpectBad(PlanFromJson(with(uniform, "server_bytes", "[9729, 18446744073709551615]")).status(),
            {"layer 0", "server_bytes", "[0, 2^40]"});
  StatusOr<Plan> big = PlanFromJson(with(uniform, "server_bytes", "[1099511627776, 0]"));
  ASSERT_TRUE(big.ok()) << big.status();  // 2^40: as large as a layer may be
  EXPECT_FALSE(ValidatePlan(*big, m).ok());
}

TEST(ComparisonJsonTest, NamesTheChoice) {
  ClusterSpec c;
  c.workers = 4;
  c.servers = 2;
  StatusOr<Comparison> cmp = ComparePlans(*BuiltinProfile("bigfc"), c, {}, DefaultStrategies());
  ASSERT_TRUE(cmp.ok());
  const std::string text = ComparisonToJson(*cmp);
  EXPECT_NE(text.find("\"chosen\": \"" + cmp->plans[cmp->chosen].strategy + "\""),
            std::string::npos);
  EXPECT_NE(text.find("\"plans\""), std::string::npos);
}

TEST(UnitsTest, Bandwidth) {
  EXPECT_EQ(*ParseBandwidth("1Gbit"), 1e9);
  EXPECT_EQ(*ParseBandwidth("100Mbit"), 1e8);
  EXPECT_EQ(*ParseBandwidth("10Gbit"), 1e10);
  EXPECT_EQ(*ParseBandwidth("25Gbps"), 25e9);
  EXPECT_EQ(*ParseBandwidth("800Kbit"), 8e5);
  EXPECT_EQ(*ParseBandwidth("1.25GB/s"), 1e10);
  EXPECT_EQ(*ParseBandwidth("1e9"), 1e9);
  EXPECT_EQ(*ParseBandwidth(" 2 Gbit "), 2e9);
  EXPECT_EQ(*ParseBandwidth("1MiB/s"), 8.0 * 1048576);
  for (const char* bad :
       {"", "fast", "0Gbit", "-1Gbit", "1Gbitx", "nan", "inf", "1Xbit", "0x10", "Gbit"}) {
    EXPECT_EQ(ParseBandwidth(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(UnitsTest, DurationsRatesAndSizes) {
  EXPECT_DOUBLE_EQ(*ParseDuration("50us"), 50e-6);
  EXPECT_DOUBLE_EQ(*ParseDuration("0.2ms"), 2e-4);
  EXPECT_EQ(*ParseDuration("1s"), 1);
  EXPECT_DOUBLE_EQ(*ParseDuration("100ns"), 1e-7);
  EXPECT_EQ(*ParseDuration("0"), 0);
  for (const char* bad : {"-1ms", "5 minutes", "", "ms"}) {
    EXPECT_FALSE(ParseDuration(bad).ok()) << bad;
  }
  EXPECT_EQ(*ParseSiValue("5T"), 5e12);
  EXPECT_EQ(*ParseSiValue("2.5TFLOPS"), 2.5e12);
  EXPECT_EQ(*ParseSiValue("900G"), 9e11);
  EXPECT_EQ(*ParseSiValue("5e12"), 5e12);
  for (const char* bad : {"0", "x", "5Tbit", "-3G"}) EXPECT_FALSE(ParseSiValue(bad).ok()) << bad;
  EXPECT_EQ(*ParseBytes("64GiB"), uint64_t{64} << 30);
  EXPECT_EQ(*ParseBytes("16GB"), 16'000'000'000u);
  EXPECT_EQ(*ParseBytes("1048576"), 1048576u);
  for (const char* bad : {"0", "-5", "1.5.3", "12 apples"})
    EXPECT_FALSE(ParseBytes(bad).ok()) << bad;
}

TEST(ClusterSpecTest, Validate) {
  ClusterSpec ok;
  EXPECT_TRUE(ok.Validate().ok());
  auto bad = [](auto mutate, const std::string& needle) {
    ClusterSpec c;
    mutate(c);
    Status s = c.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s;
  };
  bad([](ClusterSpec& c) { c.servers = 0; }, "servers");
  bad([](ClusterSpec& c) { c.workers = -2; }, "workers");
  bad([](ClusterSpec& c) { c.server_bandwidth_bps = 0; }, "server_bandwidth_bps");
  bad([](ClusterSpec& c) { c.worker_bandwidth_bps = std::nan(""); }, "worker_bandwidth_bps");
  bad([](ClusterSpec& c) { c.latency_s = -1; }, "latency_s");
  bad([](ClusterSpec& c) { c.worker_flops = 0; }, "worker_flops");
  bad([](ClusterSpec& c) { c.server_flops = INFINITY; }, "server_flops");
  bad([](ClusterSpec& c) { c.server_memory_bytes = 0; }, "server_memory_bytes");
  bad([](ClusterSpec& c) { c.server_loopback_bps = -1; }, "server_loopback_bps");
  bad([](ClusterSpec& c) { c.worker_loopback_bps = std::nan(""); }, "worker_loopback_bps");
  bad([](ClusterSpec& c) { c.worker_link_bps = INFINITY; }, "worker_link_bps");
  bad([](ClusterSpec& c) { c.server_link_bps = -3; }, "server_link_bps");
}

}  // namespace
}  // namespace placement
}  // namespace ps
