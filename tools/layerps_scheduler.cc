// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps-scheduler: runs the cluster's scheduler until every worker has left.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli.h"
#include "daemon_util.h"
#include "ps/flags.h"
#include "ps/placement.h"
#include "ps/scheduler.h"

DEFINE_string(address_file, "",
              "Write the bound scheduler address to this file (atomically) once "
              "listening; what layerps-launch reads to start the others");
DEFINE_string(plan, "",
              "A placement plan (JSON, as layerps-plan --write_plan writes it): the tables "
              "of each layer are pinned to the servers the plan gives it");
DEFINE_int32(run_timeout_s, 0,
             "Give up (exit 1) if the cluster has not finished after this many "
             "seconds; 0 = no limit");

int main(int argc, char** argv) {
  ps::cli::ParseOrExit(
      argc, argv,
      "layerps-scheduler: the LayerPS scheduler (membership, cluster map, barriers, failure\n"
      "detection). Exits 0 when every worker has left, 1 if a node died or on error.\n\n"
      "Usage: layerps-scheduler --scheduler=tcp://0.0.0.0:7000 --num_servers=2 --num_workers=4\n"
      "       [--plan=plan.json]",
      /*stop_at_positional=*/false, /*roles=*/"S");
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  if (FLAGS_run_timeout_s < 0) ps::cli::Fail("layerps-scheduler", "--run_timeout_s must be >= 0");
  ps::StatusOr<ps::Options> options = ps::OptionsFromFlags();
  if (!options.ok()) ps::cli::Fail("layerps-scheduler", options.status().ToString());
  ps::daemon::InstallStopHandlers();

  ps::Scheduler scheduler(*options);
  if (!FLAGS_plan.empty()) {
    ps::StatusOr<ps::placement::Plan> plan = ps::placement::ReadPlanFile(FLAGS_plan);
    if (!plan.ok()) ps::cli::Fail("layerps-scheduler", plan.status().ToString());
    if (plan->cluster.servers != options->num_servers) {
      ps::cli::Fail("layerps-scheduler", "--plan " + FLAGS_plan + " was made for " +
                                             std::to_string(plan->cluster.servers) +
                                             " server(s), --num_servers is " +
                                             std::to_string(options->num_servers));
    }
    ps::Status placed = scheduler.InstallPlacement(ps::placement::TablePlacementOf(*plan));
    if (!placed.ok())
      ps::cli::Fail("layerps-scheduler", "--plan " + FLAGS_plan + ": " + placed.ToString());
    std::cout << "layerps-scheduler: placement of plan '" << plan->strategy << "' for "
              << plan->model << " in force" << std::endl;
  }
  ps::daemon::WarnIfNoToken("layerps-scheduler", options->token);
  ps::Status s = scheduler.Start();
  if (!s.ok()) {
    std::cerr << "layerps-scheduler: " << s << std::endl;
    return 1;
  }
  std::cout << "layerps-scheduler listening at " << scheduler.address() << std::endl;
  if (!FLAGS_address_file.empty()) {
    const std::string tmp = FLAGS_address_file + ".tmp";
    std::ofstream(tmp) << scheduler.address() << "\n";
    if (std::rename(tmp.c_str(), FLAGS_address_file.c_str()) != 0) {
      std::cerr << "layerps-scheduler: cannot write " << FLAGS_address_file << std::endl;
      return 1;
    }
  }
  s = ps::daemon::JoinUntilDone([&](auto timeout) { return scheduler.Join(timeout); },
                                FLAGS_run_timeout_s, "--run_timeout_s");
  const std::string missing = scheduler.MissingNodes();
  scheduler.Stop();
  std::cout << "layerps-scheduler: " << (s.ok() ? "cluster finished" : s.ToString())
            << (s.ok() || missing.empty() ? "" : "; " + missing) << std::endl;
  return s.ok() ? 0 : 1;
}
