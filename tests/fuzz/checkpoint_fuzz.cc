// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// A checkpoint file (server/checkpoint.h) as a restoring server reads it: the input is
// written as the only file of a set, opened (trailer, footer, offsets), and every table it
// names whose spec is valid and small is restored into a store that holds the whole
// table, as a one-server cluster would. Nothing in the file may make the reader read out
// of bounds, allocate by a size the file claims, or crash; a restore either succeeds or
// returns an error.
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "common/cluster_map.h"
#include "fuzz_util.h"
#include "server/checkpoint.h"
#include "server/store.h"

namespace {
std::string g_dir;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ps::fuzz::QuietLogs();
  char tmpl[] = "/tmp/layerps-checkpoint-fuzz-XXXXXX";
  const char* d = mkdtemp(tmpl);
  if (d == nullptr) abort();
  g_dir = d;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps;
  const std::string path = g_dir + "/server-0.lpsckpt";
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) abort();
  if (size > 0 && fwrite(data, 1, size, f) != size) abort();
  fclose(f);
  StatusOr<std::unique_ptr<CheckpointSet>> set = CheckpointSet::Open(g_dir);
  if (!set.ok()) return 0;
  FUZZ_ASSERT((*set)->num_servers() == 1);
  TableId id = 1;
  for (const TableSpec& spec : (*set)->Specs()) {
    if (!spec.Validate().ok()) continue;
    if (spec.kind == TableKind::kDense && spec.size > (uint64_t{1} << 16)) continue;
    if (spec.kind == TableKind::kSparse && spec.dim > 64) continue;
    if (spec.cold_tier) continue;  // needs a RocksDB directory: not this harness's business
    TableInfo info;
    info.id = id;
    info.spec = spec;
    if (spec.kind == TableKind::kDense) {
      info.chunk_elems = 1024;
      info.ranges.push_back(KeyRange{0, info.num_chunks(), 1});
    } else {
      info.ranges.push_back(KeyRange{0, 0, 1});
    }
    Store store(/*self=*/1);
    if (!store.Install(info).ok()) continue;
    bool restored = false;
    (void)(*set)->Restore(id, spec, &store, &restored);
    ++id;
  }
  return 0;
}
