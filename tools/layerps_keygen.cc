// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps-keygen: writes a new cluster key for CURVE encryption (curve_key_file).
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "ps/cluster_key.h"

int main(int argc, char** argv) {
  const std::vector<std::string> rest = ps::cli::ParseOrExit(
      argc, argv,
      "layerps-keygen: writes a new LayerPS cluster key (a CURVE secret key) to FILE, created\n"
      "with mode 0600; an existing FILE is never overwritten. Give every node of the cluster\n"
      "the same file with --curve_key_file=FILE (or LAYERPS_CURVE_KEY_FILE): every connection\n"
      "is then encrypted, and a node without the key cannot talk to the others.\n"
      "Exits 0 on success, 1 when the file cannot be written, 2 on a bad command line.\n\n"
      "Usage: layerps-keygen FILE",
      /*stop_at_positional=*/true, /*roles=*/"");
  if (rest.size() != 1) ps::cli::Fail("layerps-keygen", "expected one argument, the key file");
  const ps::Status s = ps::WriteClusterKeyFile(rest[0]);
  if (!s.ok()) {
    std::fprintf(stderr, "layerps-keygen: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("layerps-keygen: wrote the cluster key to %s (mode 0600)\n", rest[0].c_str());
  return 0;
}
