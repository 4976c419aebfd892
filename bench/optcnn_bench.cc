// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps-optcnn-bench: the time of the OptCNN search (node/edge elimination, enumeration
// of the residual graph, undo) and of building its cost tables, for the built-in AlexNet,
// VGG-16 and Inception-v3 profiles on 4 and 16 devices. Prints a table (median and min
// over --repeats runs) and checks every search against the cost of its own assignment.
//
//   layerps-optcnn-bench [--repeats=N] [--models=a,b] [--devices=4,16] [--gbps=G]
//                        [--elimination=paper|extended] [--report]
//
// --elimination picks the search's node-elimination rule (default extended). --gbps sets the
// per-device link bandwidth (default: ClusterSpec's, 10 Gb/s); --report also prints each plan
// (FormatReport). Exit 1 when a check fails, 2 on bad flags.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "ps/optcnn.h"
#include "ps/placement.h"

namespace {

using ps::placement::ClusterSpec;
namespace optcnn = ps::placement::optcnn;

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 20;
  std::vector<std::string> models = {"alexnet", "vgg16", "inception_v3"};
  std::vector<int> devices = {4, 16};
  bool report = false;
  double gbps = 0;  // 0: ClusterSpec's default worker bandwidth
  optcnn::Elimination elimination = optcnn::Elimination::kExtended;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--repeats=", 0) == 0) {
      repeats = std::atoi(a.c_str() + 10);
    } else if (a.rfind("--models=", 0) == 0) {
      models = Split(a.substr(9));
    } else if (a.rfind("--devices=", 0) == 0) {
      devices.clear();
      for (const std::string& d : Split(a.substr(10))) devices.push_back(std::atoi(d.c_str()));
    } else if (a.rfind("--gbps=", 0) == 0) {
      gbps = std::atof(a.c_str() + 7);
    } else if (a == "--elimination=paper") {
      elimination = optcnn::Elimination::kPaper;
    } else if (a == "--elimination=extended") {
      elimination = optcnn::Elimination::kExtended;
    } else if (a == "--report") {
      report = true;
    } else {
      std::fprintf(stderr, "layerps-optcnn-bench: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (repeats < 1) {
    std::fprintf(stderr, "layerps-optcnn-bench: --repeats must be >= 1\n");
    return 2;
  }
  std::printf("%-14s %7s %7s %9s %9s %9s %12s %12s %12s %12s\n", "model", "devices", "layers",
              "configs", "residual", "b&b", "search ms", "search min", "tables ms", "paper s");
  int failures = 0;
  for (const std::string& name : models) {
    auto model = ps::placement::BuiltinProfile(name);
    if (!model.ok()) {
      std::fprintf(stderr, "layerps-optcnn-bench: %s\n", model.status().ToString().c_str());
      return 2;
    }
    const double paper = name == "alexnet" ? 0.02 : name == "vgg16" ? 0.1 : 0.4;
    for (int d : devices) {
      ClusterSpec cluster;
      cluster.workers = d;
      if (gbps > 0) cluster.worker_bandwidth_bps = gbps * 1e9;
      optcnn::Options opt;
      opt.search.elimination = elimination;
      std::vector<double> search_s, tables_s;
      optcnn::SearchResult last;
      size_t configs = 0;
      for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        auto tables = optcnn::BuildCostTables(*model, cluster, opt);
        const auto t1 = std::chrono::steady_clock::now();
        if (!tables.ok()) {
          std::fprintf(stderr, "layerps-optcnn-bench: %s\n", tables.status().ToString().c_str());
          return 2;
        }
        auto found = optcnn::Search(tables->graph, opt.search);
        const auto t2 = std::chrono::steady_clock::now();
        if (!found.ok()) {
          std::fprintf(stderr, "layerps-optcnn-bench: %s\n", found.status().ToString().c_str());
          return 1;
        }
        // Verify: the returned assignment costs what the search says.
        const double check = tables->graph.Evaluate(found->assignment).value();
        if (std::fabs(check - found->cost) > 1e-9 * std::max(1.0, std::fabs(check))) {
          std::fprintf(stderr, "%s/%d: search cost %.12g but its assignment costs %.12g\n",
                       name.c_str(), d, found->cost, check);
          ++failures;
        }
        tables_s.push_back(std::chrono::duration<double>(t1 - t0).count());
        search_s.push_back(std::chrono::duration<double>(t2 - t1).count());
        last = *found;
        configs = 0;
        for (const auto& c : tables->configs) configs += c.size();
      }
      std::printf("%-14s %7d %7zu %9zu %9d %9s %12.4f %12.4f %12.2f %12.2f\n", name.c_str(), d,
                  model->layers.size(), configs, last.residual_nodes,
                  last.branch_and_bound ? "yes" : "no", Median(search_s) * 1e3,
                  *std::min_element(search_s.begin(), search_s.end()) * 1e3, Median(tables_s) * 1e3,
                  paper);
      if (report) {
        auto rep = optcnn::Optimize(*model, cluster, opt);
        if (rep.ok()) std::printf("%s\n", optcnn::FormatReport(*rep).c_str());
      }
    }
  }
  return failures == 0 ? 0 : 1;
}
