// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// OptCNN's output: FormatReport (the table layerps-plan --strategy=optcnn prints) and
// ReportToJson (its --json form).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ps/optcnn.h"

namespace ps {
namespace placement {
namespace optcnn {

namespace {

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::string StrategyJson(const ParallelStrategy& s, bool with_layers) {
  std::string j =
      "{\"name\": " + JsonString(s.name) + ", \"step_time_s\": " + JsonNumber(s.step_time_s) +
      ", \"compute_s\": " + JsonNumber(s.compute_s) + ", \"sync_s\": " + JsonNumber(s.sync_s) +
      ", \"transfer_s\": " + JsonNumber(s.transfer_s) +
      ", \"bytes_per_step\": " + JsonNumber(s.bytes_per_step) +
      ", \"executable_by_split_step\": " + (s.executable ? "true" : "false");
  if (!s.executable) j += ", \"not_executable_reason\": " + JsonString(s.not_executable_reason);
  if (with_layers) {
    j += ", \"layers\": [";
    for (size_t i = 0; i < s.layers.size(); ++i) {
      const LayerChoice& c = s.layers[i];
      j += std::string(i ? ", " : "") + "{\"layer\": " + JsonString(c.layer) +
           ", \"kind\": " + JsonString(LayerKindName(c.kind)) +
           ", \"config\": " + JsonString(c.degrees.ToString()) +
           ", \"degrees\": {\"n\": " + std::to_string(c.degrees.n) +
           ", \"c\": " + std::to_string(c.degrees.c) + ", \"h\": " + std::to_string(c.degrees.h) +
           ", \"w\": " + std::to_string(c.degrees.w) + "}" +
           ", \"compute_s\": " + JsonNumber(c.compute_s) + ", \"sync_s\": " + JsonNumber(c.sync_s) +
           ", \"sync_bytes\": " + JsonNumber(c.sync_bytes) + "}";
    }
    j += "]";
  }
  return j + "}";
}

}  // namespace

std::string FormatReport(const Report& rep) {
  std::string out = "optcnn: " + rep.model + " on " + std::to_string(rep.num_devices) +
                    " devices, batch " + std::to_string(rep.batch_size) + "\n";
  out += "  search: " + std::to_string(rep.search.eliminated_nodes) + " nodes and " +
         std::to_string(rep.search.eliminated_edges) + " edges eliminated, " +
         std::to_string(rep.search.residual_nodes) + " residual nodes" +
         (rep.search.branch_and_bound ? " (branch and bound)" : "") + "; tables " +
         Fixed(rep.tables_seconds * 1e3, 2) + " ms, search " + Fixed(rep.search_seconds * 1e3, 3) +
         " ms\n\n";
  char line[256];
  std::snprintf(line, sizeof(line), "  %-32s %-6s %-10s %12s %12s\n", "layer", "kind", "config",
                "compute ms", "sync ms");
  out += line;
  for (const LayerChoice& c : rep.optcnn.layers) {
    std::snprintf(line, sizeof(line), "  %-32s %-6s %-10s %12.3f %12.3f\n", c.layer.c_str(),
                  LayerKindName(c.kind), c.degrees.ToString().c_str(), c.compute_s * 1e3,
                  c.sync_s * 1e3);
    out += line;
  }
  out += "\n";
  std::snprintf(line, sizeof(line), "  %-8s %12s %12s %12s %12s %14s %10s %s\n", "strategy",
                "step ms", "compute ms", "sync ms", "transfer ms", "MB per step", "speedup",
                "split step");
  out += line;
  std::vector<const ParallelStrategy*> all = {&rep.optcnn};
  for (const ParallelStrategy& b : rep.baselines) all.push_back(&b);
  for (const ParallelStrategy* s : all) {
    std::snprintf(line, sizeof(line), "  %-8s %12.3f %12.3f %12.3f %12.3f %14.2f %9.2fx %s\n",
                  s->name.c_str(), s->step_time_s * 1e3, s->compute_s * 1e3, s->sync_s * 1e3,
                  s->transfer_s * 1e3, s->bytes_per_step / 1e6,
                  s->step_time_s > 0 ? s->step_time_s / rep.optcnn.step_time_s : 1.0,
                  s->executable ? "yes" : "no");
    out += line;
  }
  out += "  (speedup: the strategy's predicted step time over optcnn's; split step: the placement\n"
         "  executor's split step runs it too; layerps.placement.LayerwiseTrainer runs any of them\n"
         "  on a sequential model)\n";
  return out;
}

std::string ReportToJson(const Report& rep) {
  std::string j = "{\"strategy\": \"optcnn\", \"model\": " + JsonString(rep.model) +
                  ", \"devices\": " + std::to_string(rep.num_devices) +
                  ", \"batch_size\": " + std::to_string(rep.batch_size) + ", \"search\": {" +
                  "\"eliminated_nodes\": " + std::to_string(rep.search.eliminated_nodes) +
                  ", \"eliminated_edges\": " + std::to_string(rep.search.eliminated_edges) +
                  ", \"residual_nodes\": " + std::to_string(rep.search.residual_nodes) +
                  ", \"residual_edges\": " + std::to_string(rep.search.residual_edges) +
                  ", \"branch_and_bound\": " + (rep.search.branch_and_bound ? "true" : "false") +
                  ", \"tables_seconds\": " + JsonNumber(rep.tables_seconds) +
                  ", \"search_seconds\": " + JsonNumber(rep.search_seconds) + "}" +
                  ", \"optcnn\": " + StrategyJson(rep.optcnn, true) + ", \"baselines\": [";
  for (size_t i = 0; i < rep.baselines.size(); ++i) {
    j += std::string(i ? ", " : "") + StrategyJson(rep.baselines[i], true);
  }
  return j + "]}";
}

}  // namespace optcnn
}  // namespace placement
}  // namespace ps
