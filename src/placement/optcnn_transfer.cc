// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// t_x of Eq. 1: the forward activations and backward activation gradients one edge moves
// between a source and a destination configuration, from the intervals each destination
// tile needs of its source (docs/optcnn.md, "Cost"). TransferModel is declared in
// optcnn_internal.h; optcnn_model.cc fills every edge's cost matrix with it.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "placement/optcnn_internal.h"

namespace ps {
namespace placement {
namespace optcnn {
namespace internal {
namespace {

// The needed interval, in source coordinates, of one dimension.
Interval Needed(Reader::Mode mode, int64_t o0, int64_t o1, int64_t src_size, int64_t offset,
                int64_t k, int64_t stride, int64_t pad) {
  Interval r;
  switch (mode) {
    case Reader::kWhole:
      r = {0, src_size};
      break;
    case Reader::kSame:
      r = {o0, o1};
      break;
    case Reader::kOffset:
      r = {o0 - offset, o1 - offset};
      break;
    case Reader::kWindow:
      r = {o0 * stride - pad, (o1 - 1) * stride - pad + k};
      break;
  }
  r.lo = std::max<int64_t>(r.lo, 0);
  r.hi = std::min<int64_t>(r.hi, src_size);
  return r;
}

DimNeeds BuildNeeds(int max_degree, int64_t dst_size, int64_t src_size, Reader::Mode mode,
                    int64_t offset, int64_t k, int64_t stride, int64_t pad) {
  DimNeeds dn;
  dn.needs.resize(max_degree + 1);
  for (int d = 1; d <= max_degree; ++d) {
    if (dst_size % d != 0) continue;
    const int64_t len = dst_size / d;
    for (int i = 0; i < d; ++i) {
      dn.needs[d].push_back(Needed(mode, i * len, (i + 1) * len, src_size, offset, k, stride, pad));
    }
  }
  return dn;
}

}  // namespace

TransferModel::TransferModel(const Geometry& src, const Geometry& dst, const Reader& r, int batch,
                             int max_degree, double bits_per_s, double latency, int devices)
    : src_(src), bits_per_s_(bits_per_s), latency_(latency), batch_(batch) {
  const int64_t sc = static_cast<int64_t>(src.c), sh = static_cast<int64_t>(src.h),
                sw = static_cast<int64_t>(src.w);
  const bool opaque =
      r.c_mode == Reader::kWhole && r.h_mode == Reader::kWhole && r.w_mode == Reader::kWhole;
  // A destination that reads whole samples needs nothing from the tile coordinates
  // beyond the sample; its own C/H/W sizes are irrelevant (use 1 so any degree maps).
  const int64_t dc = opaque ? 1 : static_cast<int64_t>(dst.c);
  const int64_t dh = r.h_mode == Reader::kWhole ? 1 : static_cast<int64_t>(dst.h);
  const int64_t dw = r.w_mode == Reader::kWhole ? 1 : static_cast<int64_t>(dst.w);
  whole_c_ = r.c_mode == Reader::kWhole;
  whole_h_ = r.h_mode == Reader::kWhole;
  whole_w_ = r.w_mode == Reader::kWhole;
  n_ = BuildNeeds(max_degree, batch, batch, Reader::kSame, 0, 1, 1, 0);
  c_ = BuildNeeds(max_degree, whole_c_ ? 1 : dc, sc, r.c_mode, r.c_offset, 1, 1, 0);
  h_ = BuildNeeds(max_degree, dh, sh, r.h_mode, 0, r.kh, r.stride, r.ph);
  w_ = BuildNeeds(max_degree, dw, sw, r.w_mode, 0, r.kw, r.stride, r.pw);
  fwd_.assign(devices, 0);
  bwd_.assign(devices, 0);
}

EdgeCost TransferModel::Cost(const Degrees& sd, const std::vector<int>& sdev,
                             const std::vector<int>& s_on, const std::vector<TileCoord>& scoord,
                             const Degrees& dd, const std::vector<int>& ddev,
                             const std::vector<int>& d_on, const std::vector<TileCoord>& dcoord) {
  scoord_ = &scoord;
  dcoord_ = &dcoord;
  if (!s_on.empty() && !d_on.empty()) return OneTilePerDevice(sd, sdev, s_on, dd, ddev, d_on);
  std::fill(fwd_.begin(), fwd_.end(), 0);
  std::fill(bwd_.begin(), bwd_.end(), 0);
  uint64_t total = 0;
  const int64_t sn_len = batch_ / sd.n;
  const int64_t sc_len = static_cast<int64_t>(src_.c) / sd.c;
  const int64_t sh_len = static_cast<int64_t>(src_.h) / sd.h;
  const int64_t sw_len = static_cast<int64_t>(src_.w) / sd.w;
  const int p = dd.Product();
  for (int t = 0; t < p; ++t) {
    const TileCoord x = (*dcoord_)[t];
    const Interval in = n_.needs[dd.n][x.n];
    const Interval ic = c_.needs[whole_c_ ? 1 : dd.c][whole_c_ ? 0 : x.c];
    const Interval ih = h_.needs[whole_h_ ? 1 : dd.h][whole_h_ ? 0 : x.h];
    const Interval iw = w_.needs[whole_w_ ? 1 : dd.w][whole_w_ ? 0 : x.w];
    if (in.hi <= in.lo || ic.hi <= ic.lo || ih.hi <= ih.lo || iw.hi <= iw.lo) continue;
    const int dev = ddev[t];
    for (int64_t a = in.lo / sn_len; a * sn_len < in.hi; ++a) {
      const int64_t on = Overlap(in, a * sn_len, sn_len);
      for (int64_t b = ic.lo / sc_len; b * sc_len < ic.hi; ++b) {
        const int64_t oc = Overlap(ic, b * sc_len, sc_len);
        for (int64_t e = ih.lo / sh_len; e * sh_len < ih.hi; ++e) {
          const int64_t oh = Overlap(ih, e * sh_len, sh_len);
          for (int64_t f = iw.lo / sw_len; f * sw_len < iw.hi; ++f) {
            const int s = static_cast<int>(((a * sd.c + b) * sd.h + e) * sd.w + f);
            const int sdv = sdev[s];
            if (sdv == dev) continue;  // already local
            const uint64_t vol =
                static_cast<uint64_t>(on * oc * oh * Overlap(iw, f * sw_len, sw_len));
            fwd_[dev] += vol;  // activations into the destination's device
            bwd_[sdv] += vol;  // their gradients back into the source's device
            total += vol;
          }
        }
      }
    }
  }
  if (total == 0) return EdgeCost{};
  return Finish(total, *std::max_element(fwd_.begin(), fwd_.end()),
                *std::max_element(bwd_.begin(), bwd_.end()));
}

int64_t TransferModel::Overlap(const Interval& i, int64_t lo, int64_t len) {
  return std::min(i.hi, lo + len) - std::max(i.lo, lo);
}
int64_t TransferModel::Clipped(const Interval& i, int64_t lo, int64_t len) {
  return std::max<int64_t>(0, Overlap(i, lo, len));
}

// The needed box of destination tile t, per dimension.
void TransferModel::Box(const Degrees& dd, int t, Interval box[4]) const {
  const TileCoord x = (*dcoord_)[t];
  box[0] = n_.needs[dd.n][x.n];
  box[1] = c_.needs[whole_c_ ? 1 : dd.c][whole_c_ ? 0 : x.c];
  box[2] = h_.needs[whole_h_ ? 1 : dd.h][whole_h_ ? 0 : x.h];
  box[3] = w_.needs[whole_w_ ? 1 : dd.w][whole_w_ ? 0 : x.w];
}

// sums[k] = sum over the destination tiles' needed intervals along one dimension of
// their overlap with source tile k of that dimension.
void TransferModel::DimSums(const DimNeeds& dn, int ddeg, int64_t repeat, int64_t slen, int sdeg,
                            std::vector<int64_t>* sums) {
  sums->assign(sdeg, 0);
  for (const Interval& iv : dn.needs[ddeg]) {
    if (iv.hi <= iv.lo) continue;
    for (int64_t k = iv.lo / slen; k * slen < iv.hi; ++k)
      (*sums)[k] += repeat * Overlap(iv, k * slen, slen);
  }
}

// With at most one tile of each configuration per device, what device d receives
// forward is its tile's needed box minus the part of it the device already holds, and
// what source device s receives backward is the sum over all destination tiles of their
// overlap with its tile (which factorizes over the dimensions, because the destination
// tiles form a grid) minus the local part. O(tiles) per pair instead of O(tile pairs).
EdgeCost TransferModel::OneTilePerDevice(const Degrees& sd, const std::vector<int>& sdev,
                                         const std::vector<int>& s_on, const Degrees& dd,
                                         const std::vector<int>& ddev,
                                         const std::vector<int>& d_on) {
  const int64_t len[4] = {batch_ / sd.n, static_cast<int64_t>(src_.c) / sd.c,
                          static_cast<int64_t>(src_.h) / sd.h, static_cast<int64_t>(src_.w) / sd.w};
  auto local = [&](const Interval box[4], int s) {
    const TileCoord y = (*scoord_)[s];
    const int64_t k[4] = {y.n, y.c, y.h, y.w};
    int64_t v = 1;
    for (int d = 0; d < 4; ++d) v *= Clipped(box[d], k[d] * len[d], len[d]);
    return static_cast<uint64_t>(v);
  };
  uint64_t total = 0, max_f = 0, max_b = 0;
  Interval box[4];
  for (int t = 0; t < dd.Product(); ++t) {
    Box(dd, t, box);
    int64_t need = 1;
    for (const Interval& iv : box) need *= std::max<int64_t>(0, iv.hi - iv.lo);
    if (need == 0) continue;
    const int s = s_on[ddev[t]];
    const uint64_t in = static_cast<uint64_t>(need) - (s >= 0 ? local(box, s) : 0);
    total += in;
    max_f = std::max(max_f, in);
  }
  if (total == 0) return EdgeCost{};
  // A dimension read whole is needed by every destination tile along it: its sum
  // counts each of them (repeat = the destination's degree there).
  DimSums(n_, dd.n, 1, len[0], sd.n, &sums_[0]);
  DimSums(c_, whole_c_ ? 1 : dd.c, whole_c_ ? dd.c : 1, len[1], sd.c, &sums_[1]);
  DimSums(h_, whole_h_ ? 1 : dd.h, whole_h_ ? dd.h : 1, len[2], sd.h, &sums_[2]);
  DimSums(w_, whole_w_ ? 1 : dd.w, whole_w_ ? dd.w : 1, len[3], sd.w, &sums_[3]);
  for (int s = 0; s < sd.Product(); ++s) {
    const TileCoord y = (*scoord_)[s];
    const uint64_t all =
        static_cast<uint64_t>(sums_[0][y.n] * sums_[1][y.c] * sums_[2][y.h] * sums_[3][y.w]);
    if (all == 0) continue;
    const int t = d_on[sdev[s]];
    uint64_t mine = 0;
    if (t >= 0) {
      Box(dd, t, box);
      mine = local(box, s);
    }
    max_b = std::max(max_b, all - mine);
  }
  return Finish(total, max_f, max_b);
}

EdgeCost TransferModel::Finish(uint64_t total, uint64_t max_f, uint64_t max_b) const {
  EdgeCost ec;
  if (total == 0) return ec;
  const double eb = static_cast<double>(src_.elem_bytes);
  ec.bytes = 2.0 * static_cast<double>(total) * eb;
  ec.seconds = static_cast<double>(max_f + max_b) * eb * 8.0 / bits_per_s_ + 2.0 * latency_;
  return ec;
}

}  // namespace internal
}  // namespace optcnn
}  // namespace placement
}  // namespace ps
