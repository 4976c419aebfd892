// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Command-line handling shared by the LayerPS tools: --help prints the usage and this
// program's flags; any unknown flag or bad value prints one line and exits with code 2.
#ifndef PS_TOOLS_CLI_H_
#define PS_TOOLS_CLI_H_

#include <gflags/gflags.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ps/options.h"
#include "ps/version.h"

namespace ps {
namespace cli {

// A flag LayerPS defines (libraries linked in may define their own: Debian's RocksDB
// brings some 60 of its tools' flags, from "./tools/...", which are neither listed by
// --help nor accepted).
inline bool IsOurFlag(const gflags::CommandLineFlagInfo& f) {
  const std::string& file = f.filename;
  if (file.find("gflags") != std::string::npos) return false;
  return file.find("tools/layerps_") != std::string::npos ||
         file.find("common/flags.cc") != std::string::npos ||
         file.find("bench/") != std::string::npos || file.find("examples/") != std::string::npos;
}

// True when the option-table row is read by one of `roles` ("S" scheduler, "s" server,
// "w" worker).
inline bool ForRoles(const OptionInfo& o, const std::string& roles) {
  return (o.scheduler && roles.find('S') != std::string::npos) ||
         (o.server && roles.find('s') != std::string::npos) ||
         (o.worker && roles.find('w') != std::string::npos);
}

inline const OptionInfo* TableRow(const std::string& name) {
  for (const OptionInfo& o : OptionTable()) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

// The usage, then this program's flags: the node options its roles read (with their
// environment variable and default, from the option table) and its own flags.
inline void PrintHelp(const char* prog, const char* usage, const std::string& roles) {
  std::printf("%s\n\nFlags (a flag wins over its environment variable, which wins over the default):\n",
              usage);
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);
  const Options defaults;
  for (const auto& f : flags) {
    if (!IsOurFlag(f)) continue;
    if (const OptionInfo* row = TableRow(f.name)) {
      if (!ForRoles(*row, roles)) continue;
      const std::string d = OptionValue(defaults, row->name);
      std::printf("  --%s (%s; env %s; default %s)\n      %s\n", f.name.c_str(), row->type.c_str(),
                  row->env.c_str(), d.empty() ? "\"\"" : d.c_str(), row->help.c_str());
      continue;
    }
    std::string d = f.default_value;
    if (f.type == "double") {  // gflags prints 0.1 as 0.10000000000000001
      char shortest[32];
      std::snprintf(shortest, sizeof(shortest), "%g", std::strtod(d.c_str(), nullptr));
      d = shortest;
    }
    std::printf("  --%s (%s, default %s)\n      %s\n", f.name.c_str(), f.type.c_str(),
                d.empty() ? "\"\"" : d.c_str(), f.description.c_str());
  }
  std::printf("  --help\n      Print this help and exit.\n");
  std::printf("  --version\n      Print the LayerPS version and commit, and exit.\n");
}

// The one line --version prints: "<prog> (LayerPS <version>, commit <commit>)".
inline void PrintVersion(const char* prog) {
  std::printf("%s (LayerPS %s, commit %s)\n", prog, Version(), BuildCommit());
}

[[noreturn]] inline void Fail(const char* prog, const std::string& line) {
  std::fprintf(stderr, "%s: %s (see --help)\n", prog, line.c_str());
  std::exit(2);
}

// Parses argv: "--name=value", "--name value" (a value may not start with "--": write
// "--name=--x"), "--bool", "--nobool". Stops at "--" or the first non-flag argument
// when `stop_at_positional`; returns what follows.
// `roles`: whose node options this program reads ("S" scheduler, "s" server, "w" worker):
// --help lists only those. The other roles' node options are accepted and have no effect,
// so that one list of flags can be given to every daemon of a cluster.
inline std::vector<std::string> ParseOrExit(int argc, char** argv, const char* usage,
                                            bool stop_at_positional = false,
                                            const std::string& roles = "Ssw") {
  const char* prog = std::strrchr(argv[0], '/') ? std::strrchr(argv[0], '/') + 1 : argv[0];
  gflags::SetUsageMessage(usage);
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      for (int j = i + 1; j < argc; ++j) rest.push_back(argv[j]);
      break;
    }
    if (a.size() < 2 || a[0] != '-') {
      if (!stop_at_positional) Fail(prog, "unexpected argument '" + a + "'");
      for (int j = i; j < argc; ++j) rest.push_back(argv[j]);
      break;
    }
    std::string body = a.substr(a[1] == '-' ? 2 : 1);
    if (body == "help" || body == "h" || body == "helpfull") {
      PrintHelp(prog, usage, roles);
      std::exit(0);
    }
    if (body == "version") {
      PrintVersion(prog);
      std::exit(0);
    }
    std::string name = body, value;
    bool has_value = false;
    const size_t eq = body.find('=');
    if (eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    gflags::CommandLineFlagInfo info;
    bool known = gflags::GetCommandLineFlagInfo(name.c_str(), &info) && IsOurFlag(info);
    if (!known && !has_value && name.rfind("no", 0) == 0 &&
        gflags::GetCommandLineFlagInfo(name.substr(2).c_str(), &info) && IsOurFlag(info) &&
        info.type == "bool") {
      name = name.substr(2);
      value = "false";
      has_value = true;
      known = true;
    }
    if (!known) Fail(prog, "unknown flag --" + name);
    if (!has_value) {
      // "--token --num_servers=2" is a forgotten value, not the token "--num_servers=2".
      if (info.type == "bool") {
        value = "true";
      } else if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) {
        value = argv[++i];
      } else {
        Fail(prog, "flag --" + name + " needs a value (--" + name + "=VALUE)");
      }
    }
    if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
      Fail(prog, "bad value '" + value + "' for --" + name + " (" + info.type + ")");
    }
  }
  return rest;
}

}  // namespace cli
}  // namespace ps

#endif  // PS_TOOLS_CLI_H_
