// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps-launch: starts a scheduler, M servers and N copies of a worker command on this
// machine, forwards their output with a role prefix, stops everything when the workers
// finish or any process fails, and exits non-zero on failure.
#include <fcntl.h>
#include <gflags/gflags.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "host_discovery.h"
#include "hosts.h"
#include "ps/flags.h"

DEFINE_string(bin_dir, "",
              "Directory holding layerps-scheduler and layerps-server. Default: the "
              "directory of layerps-launch itself");
DEFINE_int32(timeout_s, 0, "Stop everything and fail after this many seconds; 0 = no limit");
DEFINE_int32(grace_s, 10,
             "After the workers finish (or on failure), how long the others get to "
             "exit before they are killed");
DEFINE_string(host_discovery_script, "",
              "Elastic jobs (--max_workers above --num_workers): a script printing the hosts "
              "available now, one HOST:SLOTS line each; run every 2 s, a worker is started on "
              "each new slot while fewer than max_workers run (workers of hosts that "
              "disappeared are not restarted)");
DEFINE_bool(quiet_daemons, false, "Do not forward the scheduler's and servers' output");
DEFINE_bool(verbose, false,
            "Let every node log its INFO lines (tables declared, nodes up, traffic at exit); "
            "without it they log warnings and errors only, unless LAYERPS_LOG_LEVEL is set");
DEFINE_string(hosts, "",
              "Run the servers and workers on these hosts, through ssh: host1:2,host2:2 (slots "
              "= workers per host; servers go round the hosts). Also -H. The scheduler stays here");
DEFINE_string(H, "", "Same as --hosts");
DEFINE_string(hostfile, "",
              "A file of hosts, one per line: HOST, HOST:N or HOST slots=N ('#' comments); "
              "as --hosts");
DEFINE_string(ssh, "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new",
              "The command that runs a command on a host: its words, then the host and the "
              "command are appended (split on blanks, no quoting)");
DEFINE_string(forward_env, "",
              "Comma list of this environment's variables (e.g. PYTHONPATH,PATH) also set for "
              "the nodes on --hosts (the LAYERPS_* ones always are), as mpirun -x");
DEFINE_string(remote_bin_dir, "",
              "Where layerps-scheduler/-server are on the hosts. Default: --bin_dir (the same "
              "path as here)");
DEFINE_string(plan, "",
              "A placement plan (JSON from layerps-plan --write_plan) for the scheduler to put "
              "in force (layerps-scheduler --plan)");

namespace {

using Clock = std::chrono::steady_clock;
volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

struct Child {
  std::string label;  // "scheduler", "server 0", "worker 1" (and "@host" when remote)
  bool is_worker = false;
  bool is_daemon_output_hidden = false;
  pid_t pid = -1;
  int out_fd = -1;  // read end of the child's stdout+stderr
  int in_fd = -1;   // remote children: write end of ssh's stdin, held open (its EOF ends
                    // the remote node)
  std::string partial;
  bool exited = false;
  int status = 0;
  int server_rank = -1;  // servers: their rank
  std::string host;  // workers: the host it runs on ("localhost" here)
  bool handled = false;  // a server's death the cluster survives (replication, replacement)
  Clock::time_point started = Clock::now();
};

std::vector<Child> g_children;

std::string SelfDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string p(buf);
  return p.substr(0, p.rfind('/'));
}

std::string RandomToken() {
  std::random_device rd;
  char buf[33];
  for (int i = 0; i < 32; ++i) buf[i] = "0123456789abcdef"[rd() % 16];
  buf[32] = '\0';
  return buf;
}

// `hold_stdin`: the child's stdin is a pipe the launcher keeps open (ssh: the remote
// node is stopped when it closes).
bool Spawn(Child* c, const std::vector<std::string>& argv, const std::vector<std::string>& env,
           bool hold_stdin = false) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  int in[2] = {-1, -1};
  if (hold_stdin && pipe(in) != 0) return false;
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    if (hold_stdin) {
      dup2(in[0], STDIN_FILENO);
      close(in[0]);
      close(in[1]);
    }
    for (const auto& e : env) putenv(strdup(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  if (hold_stdin) {
    close(in[0]);
    fcntl(in[1], F_SETFD, FD_CLOEXEC);  // later children must not hold it
    c->in_fd = in[1];
  }
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  c->pid = pid;
  c->out_fd = fds[0];
  return true;
}

void Emit(Child& c, const std::string& line) {
  if (c.is_daemon_output_hidden) return;
  std::printf("[%s] %s\n", c.label.c_str(), line.c_str());
}

// Reads what the children printed (up to `wait_ms`) and forwards whole lines.
void Pump(int wait_ms) {
  std::vector<pollfd> pfds;
  std::vector<size_t> who;
  for (size_t i = 0; i < g_children.size(); ++i) {
    if (g_children[i].out_fd >= 0) {
      pfds.push_back({g_children[i].out_fd, POLLIN, 0});
      who.push_back(i);
    }
  }
  if (pfds.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    return;
  }
  if (poll(pfds.data(), pfds.size(), wait_ms) <= 0) return;
  char buf[65536];
  for (size_t k = 0; k < pfds.size(); ++k) {
    if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Child& c = g_children[who[k]];
    for (;;) {
      const ssize_t n = read(c.out_fd, buf, sizeof(buf));
      if (n > 0) {
        c.partial.append(buf, static_cast<size_t>(n));
        size_t nl;
        while ((nl = c.partial.find('\n')) != std::string::npos) {
          Emit(c, c.partial.substr(0, nl));
          c.partial.erase(0, nl + 1);
        }
        continue;
      }
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        if (!c.partial.empty()) Emit(c, c.partial);
        c.partial.clear();
        close(c.out_fd);
        c.out_fd = -1;
      }
      break;
    }
  }
  std::fflush(stdout);
}

void Reap() {
  for (auto& c : g_children) {
    if (c.exited || c.pid < 0) continue;
    int st = 0;
    if (waitpid(c.pid, &st, WNOHANG) == c.pid) {
      c.exited = true;
      c.status = st;
      if (c.in_fd >= 0) {
        close(c.in_fd);
        c.in_fd = -1;
      }
    }
  }
}

bool Failed(const Child& c) {
  return c.exited && !(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0);
}

std::string Describe(const Child& c) {
  if (WIFEXITED(c.status)) return "exited with code " + std::to_string(WEXITSTATUS(c.status));
  if (WIFSIGNALED(c.status))
    return std::string("was killed by signal ") + strsignal(WTERMSIG(c.status));
  return "ended";
}

// Waits up to grace_s for the living children to exit, then kills them (process groups).
// Without terminate_first (the workers finished and the daemons should exit on their
// own), those still running after grace_s get SIGTERM first, so that they print why they
// were still waiting (the scheduler names the nodes that never registered), and SIGKILL
// after kTermWaitS more.
void StopAll(bool terminate_first) {
  constexpr int kTermWaitS = 3;
  if (terminate_first) {
    for (auto& c : g_children)
      if (!c.exited && c.pid > 0) kill(-c.pid, SIGTERM);
  }
  auto deadline = Clock::now() + std::chrono::seconds(FLAGS_grace_s);
  bool terminated = terminate_first;
  for (;;) {
    Reap();
    bool any = false;
    for (auto& c : g_children) any |= (!c.exited && c.pid > 0);
    if (!any) break;
    if (!terminated && Clock::now() > deadline) {
      std::printf("[launch] the cluster did not shut down within %d s of the last worker's exit "
                  "(a worker that exits without starting a LayerPS worker, or without leaving, "
                  "leaves the daemons waiting); stopping them\n",
                  FLAGS_grace_s);
      for (auto& c : g_children) {
        if (!c.exited && c.pid > 0) {
          std::printf("[launch] stopping %s (SIGTERM)\n", c.label.c_str());
          kill(-c.pid, SIGTERM);
        }
      }
      terminated = true;
      deadline = Clock::now() + std::chrono::seconds(kTermWaitS);
      continue;
    }
    if (Clock::now() > deadline) {
      for (auto& c : g_children) {
        if (!c.exited && c.pid > 0) {
          std::printf("[launch] killing %s (did not exit within %d s)\n", c.label.c_str(),
                      terminate_first ? FLAGS_grace_s : FLAGS_grace_s + kTermWaitS);
          kill(-c.pid, SIGKILL);
        }
      }
      for (auto& c : g_children) {
        if (!c.exited && c.pid > 0) {
          waitpid(c.pid, &c.status, 0);
          c.exited = true;
        }
      }
      break;
    }
    Pump(50);
  }
  for (int i = 0; i < 5; ++i) Pump(10);  // drain what is left
}

// Hosts (-H / --hosts / --hostfile): the servers and workers run there through ssh; the
// scheduler runs here, reachable from them. An empty layout without hosts.
ps::hosts::Layout PlaceOnHosts(const char* prog, ps::Options* o) {
  if (!FLAGS_host_discovery_script.empty() && !o->elastic()) {
    ps::cli::Fail(prog, "--host_discovery_script needs an elastic job: --max_workers above --num_workers (" +
                            std::to_string(o->num_workers) + ")");
  }
  const std::string list = !FLAGS_hosts.empty() ? FLAGS_hosts : FLAGS_H;
  if (!FLAGS_hosts.empty() && !FLAGS_H.empty()) ps::cli::Fail(prog, "give -H or --hosts, not both");
  if (!list.empty() && !FLAGS_hostfile.empty()) {
    ps::cli::Fail(prog, "give --hosts (-H) or --hostfile, not both");
  }
  ps::StatusOr<std::vector<ps::hosts::Host>> parsed =
      !list.empty() ? ps::hosts::ParseList(list)
      : !FLAGS_hostfile.empty()
          ? ps::hosts::ParseFile(FLAGS_hostfile)
          : ps::StatusOr<std::vector<ps::hosts::Host>>(std::vector<ps::hosts::Host>{});
  if (!parsed.ok()) ps::cli::Fail(prog, parsed.status().message());
  if (parsed->empty()) return ps::hosts::Layout{};
  ps::StatusOr<ps::hosts::Layout> placed = ps::hosts::Place(*parsed, o->num_servers, o->num_workers);
  if (!placed.ok()) ps::cli::Fail(prog, placed.status().message());
  if (ps::hosts::SplitWords(FLAGS_ssh).empty()) ps::cli::Fail(prog, "--ssh is empty");
  if (o->scheduler_address.rfind("tcp://", 0) != 0) {
    ps::cli::Fail(prog, "--hosts needs a tcp:// scheduler address");
  }
  // Reachable from the hosts: every interface, on the port asked for (0: any).
  const std::string port = o->scheduler_address.substr(o->scheduler_address.rfind(':') + 1);
  o->scheduler_address = "tcp://0.0.0.0:" + port;
  return *placed;
}

// One launch: the children it started (g_children), how to start each role, and the loop
// that watches them until the workers finish or something fails. Every phase prints what
// went wrong as a "[launch] ..." line; Run returns the exit status.
class Launch {
 public:
  Launch(const char* prog, ps::Options options, ps::hosts::Layout layout, std::string bin,
         std::vector<std::string> command)
      : prog_(prog),
        o_(std::move(options)),
        layout_(std::move(layout)),
        bin_(std::move(bin)),
        remote_bin_(FLAGS_remote_bin_dir.empty() ? bin_ : FLAGS_remote_bin_dir),
        command_(std::move(command)) {
    char cwd_buf[4096];
    cwd_ = getcwd(cwd_buf, sizeof cwd_buf) ? cwd_buf : "/";
  }

  int Run() {
    char dir_template[] = "/tmp/layerps-launch-XXXXXX";
    if (!mkdtemp(dir_template)) ps::cli::Fail(prog_, "cannot create a temporary directory");
    dir_ = dir_template;
    address_file_ = dir_ + "/scheduler.address";
    int exit_code = Start() ? Supervise() : 1;
    unlink(address_file_.c_str());
    rmdir(dir_.c_str());
    std::printf("[launch] %s\n", exit_code == 0 ? "done" : "FAILED");
    return exit_code;
  }

 private:
  // The scheduler, then (once its address is known) the servers and the workers. False,
  // with everything stopped, when one could not start.
  bool Start() {
    common_env_ = CommonEnv();
    g_children.reserve(1 + o_.num_servers + o_.num_workers);
    if (!StartScheduler() || !WaitForScheduler()) return false;
    common_env_.push_back("LAYERPS_SCHEDULER=" + address_);
    for (int i = 0; i < o_.num_servers; ++i) {
      if (!StartServer(i, false)) {
        std::printf("[launch] cannot start a server\n");
        StopAll(true);
        return false;
      }
    }
    for (int i = 0; i < o_.num_workers; ++i) {
      g_children.push_back(Child{"worker " + std::to_string(i), true, false});
      std::vector<std::string> env = common_env_;
      env.push_back("LAYERPS_ROLE=worker");
      env.push_back("LAYERPS_RANK=" + std::to_string(i));
      env.push_back(MetricsEnv(1 + o_.num_servers + i));
      const std::string host = layout_.worker_hosts.empty() ? "" : layout_.worker_hosts[i];
      g_children.back().host = host.empty() ? "localhost" : host;
      if (!StartNode(&g_children.back(), host, command_, env)) {
        std::printf("[launch] cannot start worker %d\n", i);
        StopAll(true);
        return false;
      }
    }
    return true;
  }

  // Every node option that is the same on every node goes to every child, from the option
  // table (so a new option is forwarded without touching this file). The per-node ones
  // (scheduler address, rank) are set for each child.
  std::vector<std::string> CommonEnv() const {
    std::vector<std::string> env;
    for (const ps::OptionInfo& info : ps::OptionTable()) {
      const std::string value = ps::OptionValue(o_, info.name);
      if (info.per_node || value.empty()) continue;  // empty = the default
      env.push_back(info.env + "=" + value);
    }
    // Quiet by default: the nodes' INFO lines (one per table declared, one per node up, the
    // servers' traffic by table at exit) only with --verbose, or as LAYERPS_LOG_LEVEL says.
    if (std::getenv("LAYERPS_LOG_LEVEL") == nullptr) {
      env.push_back(std::string("LAYERPS_LOG_LEVEL=") + (FLAGS_verbose ? "INFO" : "WARNING"));
    }
    return env;
  }

  // --metrics_port=P: the scheduler serves on P, server i on P+1+i, worker i after them.
  std::string MetricsEnv(int offset) const {
    return "LAYERPS_METRICS_PORT=" + std::to_string(o_.metrics_port == 0 ? 0 : o_.metrics_port + offset);
  }

  // Starts a node: here, or on `host` through ssh (its environment on the remote command
  // line, with a wildcard bind and the host's name to advertise).
  bool StartNode(Child* c, const std::string& host, const std::vector<std::string>& argv,
                 std::vector<std::string> env) const {
    if (host.empty()) return Spawn(c, argv, env);
    c->label += "@" + host;
    std::string names = FLAGS_forward_env, name;
    std::istringstream list(names);
    while (std::getline(list, name, ',')) {
      if (const char* v = name.empty() ? nullptr : std::getenv(name.c_str())) {
        env.insert(env.begin(), name + "=" + v);
      }
    }
    env.push_back("LAYERPS_BIND=tcp://0.0.0.0:0");
    env.push_back("LAYERPS_ADVERTISE_HOST=" + host);
    std::vector<std::string> ssh = ps::hosts::SplitWords(FLAGS_ssh);
    ssh.push_back(host);
    ssh.push_back(ps::hosts::RemoteCommand(cwd_, env, argv));
    return Spawn(c, ssh, {}, /*hold_stdin=*/true);
  }

  bool StartScheduler() {
    if (o_.metrics_port != 0 && o_.metrics_port + o_.num_servers + o_.num_workers > 65535) {
      ps::cli::Fail(prog_, "--metrics_port=" + std::to_string(o_.metrics_port) + ": ports up to " +
                               std::to_string(o_.metrics_port + o_.num_servers + o_.num_workers) +
                               " are needed (one per node), above 65535");
    }
    g_children.push_back(Child{"scheduler", false, FLAGS_quiet_daemons});
    sched_env_ = common_env_;
    sched_env_.push_back(MetricsEnv(0));
    sched_env_.push_back("LAYERPS_SCHEDULER=" + o_.scheduler_address);
    sched_env_.push_back("LAYERPS_ROLE=scheduler");
    sched_args_ = {bin_ + "/layerps-scheduler", "--address_file=" + address_file_};
    if (!FLAGS_plan.empty()) {
      if (!std::ifstream(FLAGS_plan)) ps::cli::Fail(prog_, "cannot read --plan " + FLAGS_plan);
      sched_args_.push_back("--plan=" + FLAGS_plan);
    }
    if (!Spawn(&g_children.back(), sched_args_, sched_env_)) {
      ps::cli::Fail(prog_, "cannot start layerps-scheduler");
    }
    return true;
  }

  // The address the scheduler wrote to its address file (within connect_timeout_ms).
  bool WaitForScheduler() {
    const auto deadline = Clock::now() + std::chrono::milliseconds(o_.connect_timeout_ms);
    while (address_.empty()) {
      Pump(20);
      Reap();
      std::ifstream in(address_file_);
      if (in) std::getline(in, address_);
      if (!address_.empty()) break;
      if (g_children[0].exited || Clock::now() > deadline || g_signal) {
        std::printf("[launch] the scheduler did not come up (%s)\n",
                    g_children[0].exited ? Describe(g_children[0]).c_str() : "timed out");
        StopAll(true);
        return false;
      }
    }
    std::printf("[launch] scheduler at %s; starting %d server(s) and %d worker(s)\n",
                address_.c_str(), o_.num_servers, o_.num_workers);
    if (o_.metrics_port != 0) {
      std::printf("[launch] metrics: http://%s:%d/metrics (scheduler), ports %d.. (servers), "
                  "%d.. (workers)\n",
                  o_.metrics_host.c_str(), o_.metrics_port, o_.metrics_port + 1,
                  o_.metrics_port + 1 + o_.num_servers);
    }
    return true;
  }

  // How server i is started (again, as a replacement: docs/checkpoints.md).
  bool StartServer(int i, bool replacement) {
    g_children.push_back(Child{"server " + std::to_string(i), false, FLAGS_quiet_daemons});
    g_children.back().server_rank = i;
    std::vector<std::string> env = common_env_;
    env.push_back("LAYERPS_ROLE=server");
    env.push_back("LAYERPS_RANK=" + std::to_string(i));
    env.push_back(MetricsEnv(1 + i));
    if (replacement && !o_.checkpoint_dir.empty()) env.push_back("LAYERPS_RESTORE=" + o_.checkpoint_dir);
    const std::string host = layout_.server_hosts.empty() ? "" : layout_.server_hosts[i];
    return StartNode(&g_children.back(), host,
                     {(host.empty() ? bin_ : remote_bin_) + "/layerps-server"}, env);
  }

  static bool OtherServerLives(const Child& dead) {
    for (const Child& c : g_children) {
      if (&c != &dead && c.server_rank >= 0 && !c.exited) return true;
    }
    return false;
  }

  // A dead server the cluster survives: with replication, each one while another server
  // lives (its backup takes over; the scheduler ends the job if the backup's copy was not
  // complete yet); else with replace_servers_ms, replaced by a new server of its rank
  // restored from checkpoint_dir (its start is scheduled in replacing_). Marks it handled.
  void OnServerDeath(Child& c) {
    if (o_.replication && OtherServerLives(c)) {
      c.handled = true;
      std::printf("[launch] %s %s: its backup takes over its ranges (replication)\n",
                  c.label.c_str(), Describe(c).c_str());
    } else if (o_.replace_servers_ms > 0) {
      c.handled = true;
      const auto now = Clock::now();
      auto it = replacing_.find(c.server_rank);
      // A replacement that ran a while had been accepted: this is a new death.
      if (it != replacing_.end() && now - c.started > std::chrono::seconds(5)) {
        replacing_.erase(it);
        it = replacing_.end();
      }
      if (it == replacing_.end()) {
        std::printf("[launch] %s %s: starting a replacement%s\n", c.label.c_str(),
                    Describe(c).c_str(),
                    o_.checkpoint_dir.empty()
                        ? " (no checkpoint_dir: its ranges start from their initializers)"
                        : (" restored from " + o_.checkpoint_dir).c_str());
        replacing_[c.server_rank] = {now + std::chrono::seconds(1),
                                     now + std::chrono::milliseconds(o_.replace_servers_ms)};
      } else {
        it->second.first = now + std::chrono::seconds(1);
      }
    }
  }

  // Starts the replacements that are due. A replacement the scheduler refuses (it has not
  // yet declared the old one dead) is started again a second later, until
  // replace_servers_ms. False when one could not be started in time.
  bool StartDueReplacements() {
    for (auto it = replacing_.begin(); it != replacing_.end();) {
      const int rank = it->first;
      bool running = false;
      for (const auto& c : g_children) running |= c.server_rank == rank && !c.exited;
      if (running || Clock::now() < it->second.first) {
        ++it;
        continue;
      }
      if (Clock::now() > it->second.second) {
        std::printf("[launch] no replacement of server %d was accepted within "
                    "replace_servers_ms=%d\n", rank, o_.replace_servers_ms);
        return false;
      }
      it->second.first = Clock::time_point::max();  // until this one exits
      if (!StartServer(rank, true)) {
        std::printf("[launch] cannot start a replacement of server %d\n", rank);
        return false;
      }
      ++it;
    }
    return true;
  }

  // docs/recovery.md: a new scheduler on the same address takes the cluster over.
  bool RestartScheduler() {
    std::vector<std::string> args = sched_args_;
    args.push_back("--scheduler=" + address_);
    g_children.push_back(Child{"scheduler", false, FLAGS_quiet_daemons});
    if (!Spawn(&g_children.back(), args, sched_env_)) {
      std::printf("[launch] cannot start a new scheduler\n");
      return false;
    }
    return true;
  }

  // Watches the children until the workers finish (0, after the cluster shut down
  // cleanly), something fails, a signal comes or --timeout_s passes (1).
  // --host_discovery_script: every 2 s, a worker on each discovered slot that has none,
  // while fewer than max_workers run. False (the reason printed) when a worker cannot be
  // started; a failing script is reported and tried again.
  bool Discover(Clock::time_point start) {
    if (FLAGS_host_discovery_script.empty() || Clock::now() < next_discovery_) return true;
    next_discovery_ = Clock::now() + std::chrono::seconds(2);
    ps::StatusOr<std::map<std::string, int>> found = ps::hosts::Discover(FLAGS_host_discovery_script, 10);
    if (!found.ok()) {
      std::printf("[launch] %s\n", found.status().message().c_str());
      return true;
    }
    std::map<std::string, int> running;
    int live = 0;
    for (const Child& c : g_children) {
      // A worker that finished (exit 0), or a scheduler gone, means the job is ending:
      // its freed slots take no new worker.
      if (c.exited && ((c.is_worker && !Failed(c)) || c.label == "scheduler")) return true;
      if (!c.is_worker || c.exited) continue;
      ++running[c.host];
      ++live;
    }
    for (const auto& [host, slots] : *found) {
      for (int n = running[host]; n < slots && live < o_.MaxWorkers(); ++n, ++live) {
        const int k = ++elastic_started_;
        g_children.push_back(Child{"worker +" + std::to_string(k), true, false});
        g_children.back().host = host;
        std::vector<std::string> env = common_env_;
        env.push_back("LAYERPS_ROLE=worker");  // no LAYERPS_RANK: the scheduler gives one
        env.push_back(MetricsEnv(o_.num_servers + o_.num_workers + k));
        std::printf("[launch] host discovery: %s has %d slot(s): starting worker +%d there after %lld s\n",
                    host.c_str(), slots, k,
                    static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(
                                               Clock::now() - start).count()));
        if (!StartNode(&g_children.back(), ps::hosts::IsLocalHost(host) ? "" : host, command_, env)) {
          std::printf("[launch] cannot start worker +%d on %s\n", k, host.c_str());
          return false;
        }
      }
    }
    return true;
  }

  int Supervise() {
    const auto start = Clock::now();
    for (;;) {
      Pump(100);
      Reap();
      const Child* failed = nullptr;
      bool workers_done = true;
      bool restart_scheduler = false;
      for (auto& c : g_children) {
        if (Failed(c) && !c.handled && c.is_worker && o_.elastic()) {
          // An elastic job goes on without it; the scheduler ends it under min_workers.
          c.handled = true;
          std::printf("[launch] %s %s: the elastic job goes on without it\n", c.label.c_str(),
                      Describe(c).c_str());
        }
        if (Failed(c) && !c.handled && c.server_rank >= 0) OnServerDeath(c);
        if (Failed(c) && !c.handled && c.label == "scheduler" && o_.scheduler_recovery_ms > 0) {
          c.handled = true;
          restart_scheduler = true;
          std::printf("[launch] scheduler %s: starting a new one on %s (scheduler_recovery_ms)\n",
                      Describe(c).c_str(), address_.c_str());
        }
        if (Failed(c) && !c.handled && !failed) failed = &c;
        if (c.is_worker && !c.exited) workers_done = false;
      }
      if (!failed && ((restart_scheduler && !RestartScheduler()) || !StartDueReplacements())) {
        StopAll(true);
        return 1;
      }
      if (!failed && !Discover(start)) {
        StopAll(true);
        return 1;
      }
      if (failed) {
        std::printf("[launch] %s %s: stopping the cluster\n", failed->label.c_str(),
                    Describe(*failed).c_str());
        StopAll(true);
        return 1;
      }
      if (workers_done) {
        std::printf("[launch] all %d worker(s) finished; waiting for the cluster to shut down\n",
                    o_.num_workers);
        StopAll(false);
        int exit_code = 0;
        for (const auto& c : g_children) {
          if (Failed(c) && !c.handled) {
            std::printf("[launch] %s %s\n", c.label.c_str(), Describe(c).c_str());
            exit_code = 1;
          }
        }
        return exit_code;
      }
      if (g_signal) {
        std::printf("[launch] got signal %d: stopping the cluster\n", static_cast<int>(g_signal));
        StopAll(true);
        return 1;
      }
      if (FLAGS_timeout_s > 0 && Clock::now() - start > std::chrono::seconds(FLAGS_timeout_s)) {
        std::printf("[launch] --timeout_s=%d passed: stopping the cluster\n", FLAGS_timeout_s);
        StopAll(true);
        return 1;
      }
    }
  }

  const char* const prog_;
  const ps::Options o_;
  const ps::hosts::Layout layout_;
  const std::string bin_, remote_bin_;
  const std::vector<std::string> command_;
  std::string cwd_, dir_, address_file_;
  std::vector<std::string> common_env_;            // every child's environment
  std::vector<std::string> sched_args_, sched_env_;  // a (re)started scheduler's
  std::string address_;                            // the scheduler's, once it wrote it
  std::map<int, std::pair<Clock::time_point, Clock::time_point>>
      replacing_;  // server rank -> (next try, deadline)
  Clock::time_point next_discovery_;  // --host_discovery_script's next run
  int elastic_started_ = 0;           // workers it started
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> command = ps::cli::ParseOrExit(
      argc, argv,
      "layerps-launch: run a LayerPS cluster on this machine, or on hosts through ssh.\n\n"
      "Usage: layerps-launch --num_servers=M --num_workers=N [flags] -- COMMAND [ARGS...]\n"
      "       layerps-launch -H host1:2,host2:2 --num_servers=M --num_workers=N -- COMMAND\n"
      "       layerps-launch --hostfile=FILE ... -- COMMAND\n\n"
      "With hosts, the scheduler runs here (bound to every interface), server i on host\n"
      "i mod H, and the workers fill the hosts' slots in order; each starts through --ssh\n"
      "in this directory's path, and stops when its ssh connection ends (docs/launch.md).\n\n"
      "Starts layerps-scheduler, M layerps-server processes and N copies of COMMAND (the\n"
      "workers), with LAYERPS_SCHEDULER, LAYERPS_TOKEN, LAYERPS_NUM_SERVERS, LAYERPS_NUM_WORKERS,\n"
      "LAYERPS_ROLE and LAYERPS_RANK set (child i of a role asks the scheduler for rank i,\n"
      "so \"[worker i]\" in the output is the worker of rank i). Output is forwarded with a "
      "[role]\n"
      "prefix. Exits 0 when every worker exits 0 and the cluster shuts down cleanly; otherwise\n"
      "stops everything and exits 1.",
      /*stop_at_positional=*/true, /*roles=*/"Ssw");
  const char* prog = "layerps-launch";
  if (command.empty()) ps::cli::Fail(prog, "no worker command given (put it after --)");
  if (FLAGS_timeout_s < 0) ps::cli::Fail(prog, "--timeout_s must be >= 0");
  if (FLAGS_grace_s < 0) ps::cli::Fail(prog, "--grace_s must be >= 0");
  ps::StatusOr<ps::Options> options = ps::OptionsFromFlags();
  if (!options.ok()) ps::cli::Fail(prog, options.status().ToString());
  {
    gflags::CommandLineFlagInfo rank;
    if (gflags::GetCommandLineFlagInfo("rank", &rank) && !rank.is_default) {
      ps::cli::Fail(prog, "--rank is not a launcher option: child i of a role gets rank i");
    }
  }
  ps::Options o = *options;
  if (o.token.empty()) o.token = RandomToken();

  const std::string bin = FLAGS_bin_dir.empty() ? SelfDir() : FLAGS_bin_dir;
  for (const char* tool : {"layerps-scheduler", "layerps-server"}) {
    if (access((bin + "/" + tool).c_str(), X_OK) != 0) {
      ps::cli::Fail(prog, bin + "/" + tool + " is not executable (set --bin_dir)");
    }
  }
  ps::hosts::Layout layout = PlaceOnHosts(prog, &o);

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return Launch(prog, std::move(o), std::move(layout), bin, std::move(command)).Run();
}
