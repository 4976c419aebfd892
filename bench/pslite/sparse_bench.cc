// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// pslite-sparse-bench: the sparse pull (and push) of ps-lite, a peer parameter server,
// measured the way layerps-bench measures LayerPS's (--modes=sparse), so that the two can
// run side by side (bench/pslite_sparse_ab.sh). Built outside the project's build, against
// a ps-lite source tree, by bench/pslite/build.sh: ps-lite's headers are include/ps/ too,
// in namespace ps, so it never links with LayerPS.
//
// One binary for every role (DMLC_ROLE; ps-lite's environment, see its docs/env.md). The
// server keeps rows of --dim floats in a hash map (created as zeros on first touch) and
// sums pushed rows into them; the worker draws --key_batches batches of --keys uniform keys
// from [0, --key_space) as layerps-bench does (ranks scattered over the 64-bit ids), each
// batch --keys distinct keys in ascending order as ps-lite requires (drawn and sorted once,
// before timing: ps-lite leaves that to the caller; layerps-bench --sorted_keys gives
// LayerPS the same batches), pushes each batch once, then keeps --inflight requests in
// flight for --seconds per repeat, --repeats times. It prints one line per repeat and a
// summary: keys/s counts --keys per request, as layerps-bench does; one pulled row in 64
// is checked against the sum of what was pushed.
//
// Usage (normally through bench/pslite_sparse_ab.sh):
//   DMLC_ROLE=scheduler|server|worker DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1
//   DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=PORT pslite-sparse-bench
//     [--op=pull|push] [--keys=100000] [--dim=16] [--inflight=8] [--key_batches=4]
//     [--key_space=10000000] [--repeats=5] [--seconds=0.3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ps/ps.h"

namespace {

struct Flags {
  std::string op = "pull";
  size_t keys = 100000;
  int dim = 16;
  int inflight = 8;
  int key_batches = 4;
  uint64_t key_space = 10000000;
  int repeats = 5;
  double seconds = 0.3;
};

bool Parse(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string k = a.substr(0, eq), v = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (k == "--help" || k == "-h") return false;
    if (eq == std::string::npos || v.empty()) {
      std::fprintf(stderr, "pslite-sparse-bench: %s needs a value (--flag=value)\n", a.c_str());
      std::exit(2);
    }
    if (k == "--op") f->op = v;
    else if (k == "--keys") f->keys = std::stoull(v);
    else if (k == "--dim") f->dim = std::stoi(v);
    else if (k == "--inflight") f->inflight = std::stoi(v);
    else if (k == "--key_batches") f->key_batches = std::stoi(v);
    else if (k == "--key_space") f->key_space = std::stoull(v);
    else if (k == "--repeats") f->repeats = std::stoi(v);
    else if (k == "--seconds") f->seconds = std::stod(v);
    else {
      std::fprintf(stderr, "pslite-sparse-bench: unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  if ((f->op != "pull" && f->op != "push") || f->keys == 0 || f->dim < 1 || f->inflight < 1 ||
      f->key_batches < 1 || f->key_space < f->keys || f->repeats < 1 || f->seconds <= 0) {
    std::fprintf(stderr, "pslite-sparse-bench: bad flag value\n");
    std::exit(2);
  }
  return true;
}

// Rows of `dim` floats, zero on first touch; a push adds. ps-lite leaves the store to its
// user: this one keeps every row in one flat array, found through a hash map of key ->
// row number (reserved up front), the layout a careful user would pick.
class RowStore {
 public:
  explicit RowStore(int dim) : dim_(dim) {
    index_->reserve(1 << 20);
    data_->reserve(size_t{1} << 24);
  }
  void operator()(const ps::KVMeta& req, const ps::KVPairs<float>& data, ps::KVServer<float>* server) {
    const size_t n = data.keys.size();
    if (req.push) {
      if (data.vals.size() != n * static_cast<size_t>(dim_)) {
        std::fprintf(stderr, "server: push of %zu keys with %zu values\n", n, data.vals.size());
        std::exit(1);
      }
      for (size_t i = 0; i < n; ++i) {
        float* row = Row(data.keys[i]);
        const float* src = data.vals.data() + i * dim_;
        for (int d = 0; d < dim_; ++d) row[d] += src[d];
      }
      server->Response(req);
    } else {
      ps::KVPairs<float> res;
      res.keys = data.keys;
      res.vals.resize(n * dim_);
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(res.vals.data() + i * dim_, Row(data.keys[i]), dim_ * sizeof(float));
      }
      server->Response(req, res);
    }
  }

 private:
  float* Row(ps::Key k) {
    auto it = index_->find(k);
    if (it == index_->end()) {
      it = index_->emplace(k, data_->size() / dim_).first;
      data_->resize(data_->size() + dim_, 0.0f);
    }
    return data_->data() + it->second * dim_;
  }
  const int dim_;
  // Shared: ps-lite copies the handle (a std::function) when it is set.
  std::shared_ptr<std::unordered_map<ps::Key, size_t>> index_ =
      std::make_shared<std::unordered_map<ps::Key, size_t>>();
  std::shared_ptr<std::vector<float>> data_ = std::make_shared<std::vector<float>>();
};

constexpr uint64_t kMinRequests = 16;

float RowValue(ps::Key k, int d) { return static_cast<float>((k % 97) + d) * 0.25f; }

void RunWorker(const Flags& f) {
  ps::KVWorker<float> kv(0, 0);
  std::vector<ps::SArray<ps::Key>> batches(f.key_batches);
  std::vector<ps::SArray<float>> rows(f.key_batches);
  std::unordered_map<ps::Key, int> pushed;  // times each key was pushed
  for (int b = 0; b < f.key_batches; ++b) {
    // layerps-bench's uniform keys (MakeKeys): ranks scattered over the 64-bit ids.
    std::mt19937_64 rng(1000003ull + b);
    // --keys distinct keys (a repeat is drawn again), sorted.
    std::vector<ps::Key> k;
    std::unordered_set<ps::Key> seen;
    while (k.size() < f.keys) {
      const ps::Key x = (rng() % f.key_space) * 0x9E3779B97F4A7C15ull;
      if (seen.insert(x).second) k.push_back(x);
    }
    std::sort(k.begin(), k.end());
    batches[b].CopyFrom(k.data(), k.size());
    rows[b].resize(k.size() * f.dim);
    for (size_t i = 0; i < k.size(); ++i)
      for (int d = 0; d < f.dim; ++d) rows[b][i * f.dim + d] = RowValue(k[i], d);
  }
  // Every batch pushed once (a pull then reads existing rows, as in layerps-bench).
  for (int b = 0; b < f.key_batches; ++b) {
    kv.Wait(kv.ZPush(batches[b], rows[b]));
    for (size_t i = 0; i < batches[b].size(); ++i) ++pushed[batches[b][i]];
  }
  const bool pull = f.op == "pull";
  std::vector<ps::SArray<float>> out(f.inflight);
  double best = 0;
  std::vector<double> rates;
  uint64_t checked = 0;
  for (int rep = 0; rep < f.repeats; ++rep) {
    std::deque<std::pair<int, int>> window;  // (timestamp, slot)
    std::vector<int> slot_batch(f.inflight, 0);
    uint64_t keys_done = 0, issued = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const auto stop = t0 + std::chrono::duration<double>(f.seconds);
    auto issue = [&](int slot) {
      const int b = static_cast<int>(issued++ % batches.size());
      slot_batch[slot] = b;
      const int ts = pull ? kv.ZPull(batches[b], &out[slot]) : kv.ZPush(batches[b], rows[b]);
      if (!pull) {
        for (size_t i = 0; i < batches[b].size(); ++i) ++pushed[batches[b][i]];
      }
      window.emplace_back(ts, slot);
    };
    for (int s = 0; s < f.inflight; ++s) issue(s);
    while (!window.empty()) {
      const auto [ts, slot] = window.front();
      window.pop_front();
      kv.Wait(ts);
      const ps::SArray<ps::Key>& keys = batches[slot_batch[slot]];
      keys_done += f.keys;
      if (pull) {
        // Check one row in 64.
        const ps::SArray<float>& v = out[slot];
        if (v.size() != keys.size() * f.dim) {
          std::fprintf(stderr, "worker: pulled %zu values for %zu keys\n", v.size(), keys.size());
          std::exit(1);
        }
        for (size_t i = 0; i < keys.size(); i += 64) {
          for (int d = 0; d < f.dim; ++d) {
            const float want = RowValue(keys[i], d) * pushed[keys[i]];
            if (v[i * f.dim + d] != want) {
              std::fprintf(stderr, "worker: key %llu column %d: %g, expected %g\n",
                           static_cast<unsigned long long>(keys[i]), d, v[i * f.dim + d], want);
              std::exit(1);
            }
          }
          ++checked;
        }
      }
      // At least kMinRequests a repeat, as layerps-bench (--min_requests=16).
      if (std::chrono::steady_clock::now() < stop || issued < kMinRequests) issue(slot);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = keys_done / secs;
    rates.push_back(rate);
    best = std::max(best, rate);
    std::printf("pslite tcp 1x1 sparse %s keys=%zu dim=%d inflight=%d repeat %d: %.3fM keys/s (%llu requests in %.3f s)\n",
                f.op.c_str(), f.keys, f.dim, f.inflight, rep + 1, rate / 1e6,
                static_cast<unsigned long long>(issued), secs);
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  std::printf("pslite tcp 1x1 sparse %s keys=%zu dim=%d inflight=%d: median %.3fM keys/s [%.3f, %.3f] over %d repeats; %llu rows checked\n",
              f.op.c_str(), f.keys, f.dim, f.inflight, sorted[sorted.size() / 2] / 1e6,
              sorted.front() / 1e6, sorted.back() / 1e6, f.repeats,
              static_cast<unsigned long long>(checked));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!Parse(argc, argv, &f)) {
    std::printf("%s", "pslite-sparse-bench: ps-lite's sparse pull/push, measured as layerps-bench measures LayerPS's.\n"
                      "Roles and cluster from ps-lite's environment (DMLC_ROLE, DMLC_NUM_SERVER, DMLC_NUM_WORKER,\n"
                      "DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT). Flags: --op=pull|push --keys=N --dim=D --inflight=K\n"
                      "--key_batches=B --key_space=S --repeats=R --seconds=T. See bench/pslite_sparse_ab.sh.\n");
    return 0;
  }
  ps::Start(0);
  if (ps::IsServer()) {
    auto* server = new ps::KVServer<float>(0);
    server->set_request_handle(RowStore(f.dim));
    ps::RegisterExitCallback([server]() { delete server; });
  }
  if (ps::IsWorker()) RunWorker(f);
  ps::Finalize(0, true);
  return 0;
}
