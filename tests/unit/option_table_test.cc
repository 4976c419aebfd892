// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// The option table: every row round-trips through its LAYERPS_* variable and its flag,
// booleans take every spelling, a tcp:// address without a port gets ":0", and the
// table, the flags and Options stay in step (a new option without a row, a flag or a
// sample value here fails).
#include <gflags/gflags.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <set>
#include <string>

#include "ps/flags.h"
#include "ps/options.h"

namespace ps {
namespace {

// A valid value different from the default, for every row.
const std::map<std::string, std::string>& Samples() {
  static const std::map<std::string, std::string> k = {
      {"scheduler", "tcp://127.0.0.1:7001"},
      {"bind", "tcp://0.0.0.0:0"},
      {"advertise_host", "node7"},
      {"token", "s3cret"},
      {"cold_dir", "/tmp/cold"},
      {"curve_key_file", "/tmp/cluster.key"},
      {"restore", "/tmp/ckpt-restore"},
      {"checkpoint_keep", "7"},
      {"apply_threads", "3"},
      {"checkpoint_dir", "/tmp/ckpt"},
      {"checkpoint_every_s", "60"},
      {"replace_servers_ms", "20000"},
      {"replication", "true"},
      {"num_servers", "3"},
      {"num_workers", "5"},
      {"max_workers", "7"},
      {"min_workers", "2"},
      {"rank", "2"},
      {"heartbeat_interval_ms", "250"},
      {"heartbeat_timeout_ms", "4000"},
      {"scheduler_recovery_ms", "45000"},
      {"stall_warning_ms", "1500"},
      {"metrics_port", "9187"},
      {"metrics_host", "0.0.0.0"},
      {"timeline", "/tmp/trace-%r.json"},
      {"connect_timeout_ms", "1234"},
      {"request_timeout_ms", "4321"},
      {"dense_chunk_elems", "1024"},
      {"part_bytes", "65536"},
      {"wait_receive_us", "750"},
      {"io_threads", "3"},
      {"streams", "2"},
      {"shared_memory", "false"},
      {"tolerate_worker_loss", "true"},
      {"max_message_bytes", "1048576"},
      {"scheduler_max_message_bytes", "65536"},
  };
  return k;
}

class EnvGuard {
 public:
  ~EnvGuard() {
    for (const auto& info : OptionTable()) unsetenv(info.env.c_str());
  }
};

TEST(OptionTableTest, EveryRowHasASampleAFlagAndADistinctVariable) {
  std::set<std::string> envs, fields;
  for (const OptionInfo& info : OptionTable()) {
    EXPECT_EQ(Samples().count(info.name), 1u) << "no sample value for " << info.name;
    EXPECT_TRUE(envs.insert(info.env).second) << info.env;
    EXPECT_TRUE(fields.insert(info.field).second) << info.field;
    EXPECT_EQ(info.env.rfind("LAYERPS_", 0), 0u) << info.env;
    EXPECT_TRUE(info.scheduler || info.server || info.worker) << info.name;
    gflags::CommandLineFlagInfo flag;
    EXPECT_TRUE(gflags::GetCommandLineFlagInfo(info.name.c_str(), &flag)) << "no flag --" << info.name;
    EXPECT_NE(OptionValue(Options(), info.name), Samples().at(info.name)) << info.name;
  }
  EXPECT_EQ(OptionTable().size(), Samples().size());
}

TEST(OptionTableTest, EveryRowRoundTripsThroughTheEnvironment) {
  EnvGuard guard;
  for (const OptionInfo& info : OptionTable()) setenv(info.env.c_str(), Samples().at(info.name).c_str(), 1);
  StatusOr<Options> o = Options::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  for (const OptionInfo& info : OptionTable()) {
    EXPECT_EQ(OptionValue(*o, info.name), Samples().at(info.name)) << info.env;
  }
}

TEST(OptionTableTest, EveryRowRoundTripsThroughItsFlag) {
  EnvGuard guard;
  gflags::FlagSaver saver;
  for (const OptionInfo& info : OptionTable()) {
    ASSERT_FALSE(gflags::SetCommandLineOption(info.name.c_str(), Samples().at(info.name).c_str()).empty())
        << info.name;
  }
  StatusOr<Options> o = OptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  for (const OptionInfo& info : OptionTable()) {
    EXPECT_EQ(OptionValue(*o, info.name), Samples().at(info.name)) << "--" << info.name;
  }
}

// Every field lives in the struct of the roles that read it (the table's scheduler,
// server and worker columns) and in no other: a role's options, taken from an Options
// whose every field is set, hold exactly the fields of that role. The one exception is
// stall_warning_ms, read by the scheduler and the servers, held by CommonOptions (the
// one part both have); workers carry it unread.
TEST(OptionTableTest, EachRoleHoldsTheFieldsItReadsAndNoOther) {
  Options all;
  for (const OptionInfo& info : OptionTable()) {
    ASSERT_TRUE(SetOption(&all, info.name, Samples().at(info.name)).ok()) << info.name;
  }
  // Each role's part copied back into a default Options: a field the role holds keeps
  // its sample value, one it does not hold is back at its default.
  Options from_scheduler, from_server, from_worker;
  const SchedulerOptions s = all.scheduler();
  static_cast<CommonOptions&>(from_scheduler) = s;
  static_cast<SchedulerFields&>(from_scheduler) = s;
  const ServerOptions sv = all.server();
  static_cast<MemberOptions&>(from_server) = sv;
  static_cast<ServerFields&>(from_server) = sv;
  const WorkerOptions w = all.worker();
  static_cast<MemberOptions&>(from_worker) = w;
  static_cast<WorkerFields&>(from_worker) = w;
  const Options defaults;
  for (const OptionInfo& info : OptionTable()) {
    ASSERT_NE(OptionValue(defaults, info.name), Samples().at(info.name)) << info.name;
    const bool unread_by_workers = info.name == "stall_warning_ms";
    EXPECT_EQ(OptionValue(from_scheduler, info.name) == Samples().at(info.name), info.scheduler)
        << info.name << " in SchedulerOptions";
    EXPECT_EQ(OptionValue(from_server, info.name) == Samples().at(info.name), info.server)
        << info.name << " in ServerOptions";
    EXPECT_EQ(OptionValue(from_worker, info.name) == Samples().at(info.name),
              info.worker || unread_by_workers)
        << info.name << " in WorkerOptions";
  }
}

TEST(OptionTableTest, BooleansTakeEverySpelling) {
  EnvGuard guard;
  for (const char* yes : {"1", "true", "TRUE", "yes", "on"}) {
    setenv("LAYERPS_SHARED_MEMORY", yes, 1);
    StatusOr<Options> o = Options::FromEnv();
    ASSERT_TRUE(o.ok()) << yes << ": " << o.status().ToString();
    EXPECT_TRUE(o->shared_memory) << yes;
  }
  for (const char* no : {"0", "false", "No", "off"}) {
    setenv("LAYERPS_SHARED_MEMORY", no, 1);
    StatusOr<Options> o = Options::FromEnv();
    ASSERT_TRUE(o.ok()) << no;
    EXPECT_FALSE(o->shared_memory) << no;
  }
  setenv("LAYERPS_SHARED_MEMORY", "maybe", 1);
  StatusOr<Options> bad = Options::FromEnv();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("LAYERPS_SHARED_MEMORY='maybe' is not a boolean"), std::string::npos)
      << bad.status().message();
}

TEST(OptionTableTest, BadIntegersNameTheVariable) {
  EnvGuard guard;
  setenv("LAYERPS_IO_THREADS", "99", 1);
  StatusOr<Options> o = Options::FromEnv();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("LAYERPS_IO_THREADS=99 is outside [0, 64]"), std::string::npos)
      << o.status().message();
  setenv("LAYERPS_IO_THREADS", "2x", 1);
  EXPECT_NE(Options::FromEnv().status().message().find("not an integer"), std::string::npos);
  setenv("LAYERPS_IO_THREADS", "0", 1);
  setenv("LAYERPS_STREAMS", "17", 1);
  o = Options::FromEnv();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("LAYERPS_STREAMS=17 is outside [0, 16]"), std::string::npos)
      << o.status().message();
}

TEST(OptionTableTest, ATcpAddressWithoutAPortTakesAnyFreeOne) {
  Options o;
  ASSERT_TRUE(SetOption(&o, "scheduler", "tcp://0.0.0.0").ok());
  EXPECT_EQ(o.scheduler_address, "tcp://0.0.0.0:0");
  ASSERT_TRUE(SetOption(&o, "bind", "tcp://10.1.2.3:5555").ok());
  EXPECT_EQ(o.bind_address, "tcp://10.1.2.3:5555");
  ASSERT_TRUE(SetOption(&o, "scheduler", "tcp://[::1]").ok());
  EXPECT_EQ(o.scheduler_address, "tcp://[::1]:0");
  ASSERT_TRUE(SetOption(&o, "scheduler", "ipc:///tmp/x").ok());
  EXPECT_EQ(o.scheduler_address, "ipc:///tmp/x");
  EXPECT_EQ(SetOption(&o, "no_such_option", "1").code(), StatusCode::kNotFound);
}

// Issue 31 item 8: errors name the flag a user typed, not only the struct's field.
TEST(OptionTableTest, AddressErrorsNameTheFlag) {
  Options o;
  o.scheduler_address = "localhost:5555";
  Status s = o.Validate();
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--scheduler"), std::string::npos) << s;
  o.scheduler_address = "tcp://127.0.0.1:5555";
  o.bind_address = "10.0.0.1";
  s = o.Validate();
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--bind"), std::string::npos) << s;
}

}  // namespace
}  // namespace ps
