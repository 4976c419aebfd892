// Copyright LayerPS authors. Licensed under Apache-2.0.
#include "ps/options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <algorithm>

#include "ps/launcher.h"
#include "ps/types.h"

namespace ps {
namespace {

class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~EnvGuard() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(OptionsTest, DefaultsAreValid) { EXPECT_TRUE(Options().Validate().ok()); }

TEST(OptionsTest, RejectsBadFields) {
  Options o;
  o.scheduler_address = "http://x";
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o = Options();
  o.num_servers = -1;
  EXPECT_NE(o.Validate().message().find("num_servers"), std::string::npos);
  o.num_servers = 0;  // a job of collectives only
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  o = Options();
  o.heartbeat_timeout_ms = o.heartbeat_interval_ms;  // must exceed 2x
  EXPECT_FALSE(o.Validate().ok());
  o = Options();
  o.dense_chunk_elems = 0;
  EXPECT_FALSE(o.Validate().ok());
  o = Options();
  o.bind_address = "10.0.0.1:5";
  EXPECT_FALSE(o.Validate().ok());
}

TEST(OptionsTest, FromEnvReadsVariables) {
  EnvGuard a("LAYERPS_SCHEDULER", "tcp://10.1.2.3:7000");
  EnvGuard b("LAYERPS_NUM_WORKERS", "8");
  EnvGuard c("LAYERPS_TOKEN", "s3cret");
  EnvGuard d("LAYERPS_SHARED_MEMORY", "0");
  StatusOr<Options> o = Options::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->scheduler_address, "tcp://10.1.2.3:7000");
  EXPECT_EQ(o->num_workers, 8);
  EXPECT_EQ(o->token, "s3cret");
  EXPECT_FALSE(o->shared_memory);
}

// Issue 13, item 6: ZeroMQ would bind a random port for tcp://HOST:99999.
TEST(OptionsTest, TcpPortsMustBeInRange) {
  for (const char* good : {"tcp://127.0.0.1:0", "tcp://0.0.0.0:65535", "tcp://h:*",
                           "tcp://[::1]:7000", "ipc:///tmp/x", "inproc://x"}) {
    Options o;
    o.scheduler_address = good;
    o.bind_address = good;
    EXPECT_TRUE(o.Validate().ok()) << good << ": " << o.Validate();
  }
  for (const char* bad : {"tcp://127.0.0.1:99999", "tcp://127.0.0.1:65536", "tcp://127.0.0.1",
                          "tcp://127.0.0.1:", "tcp://127.0.0.1:-1", "tcp://h:12x"}) {
    Options o;
    o.scheduler_address = bad;
    EXPECT_NE(o.Validate().message().find("port"), std::string::npos) << bad;
    o = Options();
    o.bind_address = bad;
    EXPECT_NE(o.Validate().message().find("bind_address"), std::string::npos) << bad;
  }
}

// Issue 13, item 1: the message size limits are options with sane defaults.
TEST(OptionsTest, MessageSizeLimits) {
  Options o;
  EXPECT_EQ(o.max_message_bytes, int64_t{256} << 20);
  EXPECT_EQ(o.scheduler_max_message_bytes, int64_t{1} << 20);
  o.scheduler_max_message_bytes = 100;
  EXPECT_NE(o.Validate().message().find("scheduler_max_message_bytes"), std::string::npos);
  EnvGuard a("LAYERPS_MAX_MESSAGE_BYTES", "1073741824");
  EnvGuard b("LAYERPS_SCHEDULER_MAX_MESSAGE_BYTES", "65536");
  StatusOr<Options> env = Options::FromEnv();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->max_message_bytes, int64_t{1} << 30);
  EXPECT_EQ(env->scheduler_max_message_bytes, 65536);
  EXPECT_EQ(env->scheduler().scheduler_max_message_bytes, 65536);
  EnvGuard c("LAYERPS_MAX_MESSAGE_BYTES", "10");
  EXPECT_FALSE(Options::FromEnv().ok());
}

TEST(OptionsTest, FromEnvNamesTheBadVariable) {
  EnvGuard a("LAYERPS_NUM_SERVERS", "two");
  StatusOr<Options> o = Options::FromEnv();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("LAYERPS_NUM_SERVERS"), std::string::npos);
  EnvGuard b("LAYERPS_NUM_SERVERS", "99999");
  EXPECT_FALSE(Options::FromEnv().ok());
}

// DetectLauncher reads the environment through a function: a map stands in for it.
std::map<std::string, std::string>* g_fake_env = nullptr;
const char* FakeGetenv(const char* name) {
  auto it = g_fake_env->find(name);
  return it == g_fake_env->end() ? nullptr : it->second.c_str();
}
StatusOr<LauncherEnv> Detect(std::map<std::string, std::string> env) {
  g_fake_env = &env;
  StatusOr<LauncherEnv> e = DetectLauncher(&FakeGetenv);
  g_fake_env = nullptr;
  return e;
}

TEST(LauncherEnvTest, TorchrunSlurmAndMpiGiveRankSizeAndScheduler) {
  auto none = Detect({{"HOME", "/root"}});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->launcher.empty());

  auto t = Detect({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "node1"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->launcher, "torchrun");
  EXPECT_EQ(t->rank, 3);
  EXPECT_EQ(t->size, 4);
  EXPECT_EQ(t->local_rank, 1);
  EXPECT_EQ(t->local_size, 2);
  EXPECT_EQ(t->scheduler_address(), "tcp://node1:29501");  // MASTER_PORT + 1

  auto s = Detect({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                   {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_JOB_NODELIST", "gpu[07-08],cpu1"},
                   {"LAYERPS_PORT", "7000"}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->launcher, "slurm");
  EXPECT_EQ(s->rank, 5);
  EXPECT_EQ(s->local_size, 4);
  EXPECT_EQ(s->scheduler_address(), "tcp://gpu07:7000");

  auto m = Detect({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"LAYERPS_SCHEDULER_HOST", "10.0.0.1"}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->launcher, "mpi");
  EXPECT_EQ(m->scheduler_address(), "tcp://10.0.0.1:29501");
  auto pmi = Detect({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MASTER_ADDR", "h"}});
  ASSERT_TRUE(pmi.ok()) << pmi.status();
  EXPECT_EQ(pmi->rank, 1);

  EXPECT_EQ(FirstSlurmNode("node[01-04,07],gpu1"), "node01");
  EXPECT_EQ(FirstSlurmNode("a,b"), "a");
  EXPECT_EQ(FirstSlurmNode("n[3]x"), "n3x");
}

TEST(LauncherEnvTest, AnIncompleteEnvironmentNamesTheMissingVariable) {
  auto t = Detect({{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("MASTER_ADDR"), std::string::npos) << t.status();
  auto s = Detect({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"SLURM_JOB_NODELIST", "a"}});
  EXPECT_NE(s.status().message().find("SLURM_NTASKS"), std::string::npos) << s.status();
  auto nodes = Detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}});
  EXPECT_NE(nodes.status().message().find("SLURM_JOB_NODELIST"), std::string::npos) << nodes.status();
  auto m = Detect({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_NE(m.status().message().find("LAYERPS_SCHEDULER_HOST"), std::string::npos) << m.status();
  auto bad = Detect({{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"},
                     {"SLURM_NODELIST", "a"}});
  EXPECT_NE(bad.status().message().find("SLURM_PROCID='x'"), std::string::npos) << bad.status();
  auto over = Detect({{"PMI_RANK", "2"}, {"PMI_SIZE", "2"}, {"MASTER_ADDR", "h"}});
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
}

// Pods (docs/kubernetes.md): LAYERPS_ROLE and LAYERPS_RANK, a Kubernetes Indexed Job's
// JOB_COMPLETION_INDEX, a Kubeflow PyTorchJob's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT.
TEST(LauncherEnvTest, PodsSayTheirRoleAndRank) {
  auto sched = Detect({{"LAYERPS_ROLE", "scheduler"}, {"LAYERPS_NUM_WORKERS", "4"},
                       {"LAYERPS_SCHEDULER_HOST", "layerps-scheduler"}});
  ASSERT_TRUE(sched.ok()) << sched.status();
  EXPECT_EQ(sched->launcher, "role");
  EXPECT_EQ(sched->role, "scheduler");
  EXPECT_EQ(sched->size, 4);
  EXPECT_EQ(sched->scheduler_address(), "tcp://0.0.0.0:29501");  // binds every interface

  auto server = Detect({{"LAYERPS_ROLE", "server"}, {"LAYERPS_RANK", "1"}, {"LAYERPS_NUM_SERVERS", "2"},
                        {"LAYERPS_SCHEDULER_HOST", "layerps-scheduler"}, {"LAYERPS_PORT", "7000"},
                        {"RANK", "5"}, {"WORLD_SIZE", "8"}, {"JOB_COMPLETION_INDEX", "3"}});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(server->launcher, "role");  // the role wins over the workers' variables
  EXPECT_EQ(server->role, "server");
  EXPECT_EQ(server->rank, 1);
  EXPECT_EQ(server->scheduler_address(), "tcp://layerps-scheduler:7000");
  auto any_server = Detect({{"LAYERPS_ROLE", "server"}, {"MASTER_ADDR", "m"}});
  ASSERT_TRUE(any_server.ok()) << any_server.status();
  EXPECT_EQ(any_server->rank, -1);  // the lowest free rank
  EXPECT_EQ(any_server->scheduler_address(), "tcp://m:29501");

  auto job = Detect({{"JOB_COMPLETION_INDEX", "2"}, {"LAYERPS_NUM_WORKERS", "3"},
                     {"LAYERPS_SCHEDULER_HOST", "layerps-scheduler"}});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->launcher, "indexed-job");
  EXPECT_EQ(job->role, "worker");
  EXPECT_EQ(job->rank, 2);
  EXPECT_EQ(job->size, 3);
  EXPECT_EQ(job->local_rank, 0);
  EXPECT_EQ(job->scheduler_address(), "tcp://layerps-scheduler:29501");
  auto job_rank = Detect({{"JOB_COMPLETION_INDEX", "2"}, {"LAYERPS_RANK", "0"}, {"LAYERPS_ROLE", "worker"},
                          {"LAYERPS_NUM_WORKERS", "3"}, {"LAYERPS_SCHEDULER_HOST", "s"}});
  ASSERT_TRUE(job_rank.ok()) << job_rank.status();
  EXPECT_EQ(job_rank->rank, 0);  // LAYERPS_RANK wins

  auto pj = Detect({{"RANK", "1"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "job-master-0"},
                    {"MASTER_PORT", "23456"}, {"PYTHONUNBUFFERED", "1"}});
  ASSERT_TRUE(pj.ok()) << pj.status();
  EXPECT_EQ(pj->launcher, "pytorchjob");
  EXPECT_EQ(pj->role, "worker");
  EXPECT_EQ(pj->rank, 1);
  EXPECT_EQ(pj->size, 3);
  EXPECT_EQ(pj->scheduler_address(), "tcp://job-master-0:23457");  // MASTER_PORT + 1
  auto pj_sched = Detect({{"RANK", "0"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "job-master-0"},
                          {"MASTER_PORT", "23456"}, {"LAYERPS_SCHEDULER_HOST", "layerps-scheduler"},
                          {"LAYERPS_PORT", "29501"}});
  ASSERT_TRUE(pj_sched.ok()) << pj_sched.status();
  EXPECT_EQ(pj_sched->scheduler_address(), "tcp://layerps-scheduler:29501");
  // torchrun inside a PyTorchJob's pod (LOCAL_RANK set) is torchrun.
  auto tr = Detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "m"},
                    {"MASTER_PORT", "1000"}, {"JOB_COMPLETION_INDEX", "0"}});
  ASSERT_TRUE(tr.ok()) << tr.status();
  EXPECT_EQ(tr->launcher, "torchrun");

  auto worker = Detect({{"LAYERPS_ROLE", "worker"}, {"LAYERPS_NUM_WORKERS", "2"}, {"MASTER_ADDR", "m"}});
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(worker->launcher, "role");
  EXPECT_EQ(worker->rank, -1);
  auto unset = Detect({{"LAYERPS_ROLE", ""}});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_TRUE(unset->launcher.empty());
}

// Options::FromEnv of a pod: the scheduler binds every interface, a worker of an Indexed
// Job takes its index as rank and reaches the scheduler's Service.
TEST(LauncherEnvTest, FromEnvOfPods) {
  {
    EnvGuard role("LAYERPS_ROLE", "scheduler");
    EnvGuard workers("LAYERPS_NUM_WORKERS", "3");
    StatusOr<Options> o = Options::FromEnv();
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(o->scheduler_address, "tcp://0.0.0.0:29501");
    EXPECT_EQ(o->num_workers, 3);
  }
  {
    EnvGuard index("JOB_COMPLETION_INDEX", "2");
    EnvGuard workers("LAYERPS_NUM_WORKERS", "3");
    EnvGuard host("LAYERPS_SCHEDULER_HOST", "layerps-scheduler");
    StatusOr<Options> o = Options::FromEnv();
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(o->scheduler_address, "tcp://layerps-scheduler:29501");
    EXPECT_EQ(o->rank, 2);
    EnvGuard bad_role("LAYERPS_ROLE", "ps");
    StatusOr<Options> bad = Options::FromEnv();
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("LAYERPS_ROLE"), std::string::npos) << bad.status();
  }
}

TEST(LauncherEnvTest, ABadPodEnvironmentNamesTheVariableAndTheRank) {
  auto role = Detect({{"LAYERPS_ROLE", "master"}});
  EXPECT_EQ(role.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(role.status().message().find("LAYERPS_ROLE='master'"), std::string::npos) << role.status();
  EXPECT_NE(role.status().message().find("scheduler, server or worker"), std::string::npos) << role.status();

  auto job = Detect({{"JOB_COMPLETION_INDEX", "3"}, {"LAYERPS_NUM_WORKERS", "3"}, {"LAYERPS_SCHEDULER_HOST", "s"}});
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("rank 3 (JOB_COMPLETION_INDEX)"), std::string::npos) << job.status();
  EXPECT_NE(job.status().message().find("3 (LAYERPS_NUM_WORKERS)"), std::string::npos) << job.status();
  auto pj = Detect({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}});
  EXPECT_EQ(pj.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pj.status().message().find("rank 4 (RANK)"), std::string::npos) << pj.status();
  EXPECT_NE(pj.status().message().find("(WORLD_SIZE)"), std::string::npos) << pj.status();
  auto lr = Detect({{"LAYERPS_ROLE", "worker"}, {"LAYERPS_RANK", "2"}, {"LAYERPS_NUM_WORKERS", "2"},
                    {"LAYERPS_SCHEDULER_HOST", "s"}});
  EXPECT_NE(lr.status().message().find("rank 2 (LAYERPS_RANK)"), std::string::npos) << lr.status();
  auto server = Detect({{"LAYERPS_ROLE", "server"}, {"LAYERPS_RANK", "2"}, {"LAYERPS_NUM_SERVERS", "2"},
                        {"LAYERPS_SCHEDULER_HOST", "s"}});
  EXPECT_NE(server.status().message().find("rank 2 (LAYERPS_RANK)"), std::string::npos) << server.status();
  EXPECT_NE(server.status().message().find("LAYERPS_NUM_SERVERS"), std::string::npos) << server.status();
  auto negative = Detect({{"JOB_COMPLETION_INDEX", "-1"}, {"LAYERPS_NUM_WORKERS", "2"}, {"LAYERPS_SCHEDULER_HOST", "s"}});
  EXPECT_NE(negative.status().message().find("JOB_COMPLETION_INDEX='-1'"), std::string::npos) << negative.status();

  auto no_size = Detect({{"JOB_COMPLETION_INDEX", "0"}, {"LAYERPS_SCHEDULER_HOST", "s"}});
  EXPECT_NE(no_size.status().message().find("LAYERPS_NUM_WORKERS is not set"), std::string::npos) << no_size.status();
  auto no_host = Detect({{"JOB_COMPLETION_INDEX", "0"}, {"LAYERPS_NUM_WORKERS", "1"}});
  EXPECT_NE(no_host.status().message().find("LAYERPS_SCHEDULER_HOST"), std::string::npos) << no_host.status();
  auto no_sched = Detect({{"LAYERPS_ROLE", "server"}});
  EXPECT_NE(no_sched.status().message().find("LAYERPS_SCHEDULER_HOST"), std::string::npos) << no_sched.status();
  auto no_port = Detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}});
  EXPECT_NE(no_port.status().message().find("MASTER_PORT is not set"), std::string::npos) << no_port.status();
}

TEST(TableSpecTest, Validate) {
  EXPECT_TRUE(TableSpec::Dense("w", 10).Validate().ok());
  EXPECT_TRUE(TableSpec::Sparse("e", 16).Validate().ok());
  EXPECT_FALSE(TableSpec::Dense("", 10).Validate().ok());
  EXPECT_FALSE(TableSpec::Dense("w", 0).Validate().ok());
  Status dim0 = TableSpec::Sparse("e", 0).Validate();
  EXPECT_EQ(dim0.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dim0.message().find("dim"), std::string::npos);
  TableSpec s = TableSpec::Dense("w", 4, UpdateRule::kSgd);
  s.learning_rate = -1;
  EXPECT_FALSE(s.Validate().ok());
  s = TableSpec::Dense("w", 4);
  s.init = Initializer::kUniform;
  s.init_a = 1;
  s.init_b = 0;
  EXPECT_FALSE(s.Validate().ok());
  s.dtype = static_cast<DType>(7);
  EXPECT_FALSE(s.Validate().ok());
}

TEST(TableSpecTest, SameAs) {
  TableSpec a = TableSpec::Dense("w", 4);
  TableSpec b = a;
  EXPECT_TRUE(a.SameAs(b));
  b.size = 5;
  EXPECT_FALSE(a.SameAs(b));
  b = a;
  b.layer = "fc1";
  EXPECT_FALSE(a.SameAs(b));
  b = a;
  b.sync = SyncMode::kBsp;  // another synchronization: another table
  EXPECT_FALSE(a.SameAs(b));
  b = a;
  b.elastic_alpha = 0.25f;
  EXPECT_FALSE(a.SameAs(b));
}

TEST(TableSpecTest, BoundedSparseFields) {
  TableSpec s = TableSpec::Sparse("e", 8);
  EXPECT_FALSE(s.bounded());
  s.capacity = 100;
  s.eviction = Eviction::kLfu;
  s.expiry_steps = 10;
  s.admit_after = 2;
  s.admit_probability = 0.5f;
  EXPECT_TRUE(s.bounded());
  EXPECT_TRUE(s.Validate().ok()) << s.Validate();
  auto bad = [](TableSpec t, const std::string& field) {
    Status st = t.Validate();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  };
  TableSpec d = TableSpec::Dense("w", 4);
  d.capacity = 10;
  d.eviction = Eviction::kLru;
  bad(d, "capacity");  // sparse only
  d = TableSpec::Dense("w", 4);
  d.admit_after = 3;
  bad(d, "admit_after");
  TableSpec t = TableSpec::Sparse("e", 8);
  t.capacity = 10;  // no eviction
  bad(t, "eviction");
  t = TableSpec::Sparse("e", 8);
  t.eviction = Eviction::kLru;  // no capacity
  bad(t, "capacity");
  t = TableSpec::Sparse("e", 8);
  t.eviction = static_cast<Eviction>(9);
  bad(t, "eviction");
  for (float p : {0.0f, -0.5f, 1.5f, std::nanf("")}) {
    t = TableSpec::Sparse("e", 8);
    t.admit_probability = p;
    bad(t, "admit_probability");
  }
  EXPECT_EQ(ParseEviction("lfu").value(), Eviction::kLfu);
  Status unknown = ParseEviction("fifo").status();
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("fifo"), std::string::npos);
  // Re-declaring with another bound names the field.
  TableSpec a = TableSpec::Sparse("e", 8);
  TableSpec b = a;
  b.capacity = 5;
  b.eviction = Eviction::kLru;
  EXPECT_FALSE(a.SameAs(b));
  EXPECT_EQ(a.Difference(b), "capacity: 0 declared, 5 asked");
  b = a;
  b.expiry_steps = 7;
  EXPECT_EQ(a.Difference(b), "expiry_steps: 0 declared, 7 asked");
  b = a;
  b.admit_probability = 0.5f;
  EXPECT_EQ(a.Difference(b), "admit_probability: 1 declared, 0.5 asked");
  b = a;
  b.admit_after = 4;
  EXPECT_EQ(a.Difference(b), "admit_after: 0 declared, 4 asked");
}

// streams 0 and io_threads 0 resolve from the core count: 1 stream below 8 cores, else
// min(4, cores / 4), and one I/O thread per stream; given values are kept.
TEST(OptionsTest, StreamsAndIoThreadsResolveFromTheCores) {
  const unsigned cores = std::thread::hardware_concurrency();
  const int want = cores < 8 ? 1 : static_cast<int>(std::min(4u, cores / 4));
  MemberOptions o;
  EXPECT_EQ(o.streams, 0);
  EXPECT_EQ(o.io_threads, 0);
  EXPECT_EQ(o.ResolvedStreams(), want);
  EXPECT_EQ(o.ResolvedIoThreads(), want);
  o.streams = 3;
  EXPECT_EQ(o.ResolvedStreams(), 3);
  EXPECT_EQ(o.ResolvedIoThreads(), 3);
  o.io_threads = 5;
  EXPECT_EQ(o.ResolvedIoThreads(), 5);
  o.scheduler_address = "tcp://127.0.0.1:9000";
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  o.streams = 17;
  EXPECT_NE(o.Validate().message().find("streams=17 is outside [0, 16]"), std::string::npos)
      << o.Validate();
  o.streams = -1;
  EXPECT_NE(o.Validate().message().find("streams=-1"), std::string::npos) << o.Validate();
}

}  // namespace
}  // namespace ps
