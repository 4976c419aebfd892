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

namespace ps {
namespace cli {

inline bool IsOurFlag(const gflags::CommandLineFlagInfo& f) {
  const std::string& file = f.filename;
  if (file.find("gflags") != std::string::npos) return false;
  return file.find("tools/") != std::string::npos ||
         file.find("common/flags.cc") != std::string::npos ||
         file.find("bench/") != std::string::npos || file.find("examples/") != std::string::npos;
}

inline void PrintHelp(const char* prog, const char* usage) {
  std::printf("%s\n\nFlags:\n", usage);
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);
  for (const auto& f : flags) {
    if (!IsOurFlag(f)) continue;
    std::printf("  --%s (%s, default %s)\n      %s\n", f.name.c_str(), f.type.c_str(),
                f.default_value.empty() ? "\"\"" : f.default_value.c_str(), f.description.c_str());
  }
  std::printf("  --help\n      Print this help and exit.\n");
}

[[noreturn]] inline void Fail(const char* prog, const std::string& line) {
  std::fprintf(stderr, "%s: %s (see --help)\n", prog, line.c_str());
  std::exit(2);
}

// Parses argv: "--name=value", "--name value" (a value may not start with "--": write
// "--name=--x"), "--bool", "--nobool". Stops at "--" or the first non-flag argument
// when `stop_at_positional`; returns what follows.
inline std::vector<std::string> ParseOrExit(int argc, char** argv, const char* usage,
                                            bool stop_at_positional = false) {
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
      PrintHelp(prog, usage);
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
