// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Analytic profiles of the standard CNNs, computed from their layer shapes (no tables of
// numbers copied from elsewhere: the unit tests compare the totals with the published
// parameter counts). ReLU, dropout and flatten are folded into the layer before them;
// batch norm is folded into the conv it follows (2 x C parameters, 2 FLOPs per output).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ps/placement.h"

namespace ps {
namespace placement {
namespace {

constexpr uint64_t kFloat = 4;

// A tensor flowing through the model: the layer that produced it and its geometry.
struct Tensor {
  std::string layer;  // empty: the model input
  uint32_t c = 0, h = 0, w = 0;
  uint64_t Elements() const { return uint64_t{c} * h * w; }
};

// Appends layers to a profile while tracking shapes. Every Add* returns the output.
class Builder {
 public:
  Builder(std::string name, uint32_t c, uint32_t h, uint32_t w) {
    profile_.name = std::move(name);
    input_ = Tensor{"", c, h, w};
    profile_.input_bytes_per_sample = input_.Elements() * kFloat;
  }
  const Tensor& input() const { return input_; }

  // kh x kw convolution, `stride`, padding (ph, pw); bias unless `bn` (then batch norm:
  // scale and shift per output channel).
  Tensor Conv(const std::string& name, const Tensor& x, uint32_t out_c, uint32_t kh, uint32_t kw,
              uint32_t stride, uint32_t ph, uint32_t pw, bool bn) {
    Tensor y{name, out_c, (x.h + 2 * ph - kh) / stride + 1, (x.w + 2 * pw - kw) / stride + 1};
    const uint64_t weights = uint64_t{out_c} * x.c * kh * kw;
    LayerProfile l = Layer(name, LayerKind::kConv, x, y);
    l.param_bytes = (weights + (bn ? 2 * uint64_t{out_c} : out_c)) * kFloat;
    l.flops_per_sample = 2.0 * static_cast<double>(y.Elements()) * x.c * kh * kw +
                         (bn ? 2.0 * static_cast<double>(y.Elements()) : 0.0);
    l.tables = {name + ".weight", name + (bn ? ".bn" : ".bias")};
    l.shape.kernel_h = kh;
    l.shape.kernel_w = kw;
    l.shape.stride = stride;
    l.shape.padding = ph;
    if (pw != ph) l.shape.padding_w = static_cast<int32_t>(pw);
    profile_.layers.push_back(std::move(l));
    return y;
  }
  Tensor Conv(const std::string& name, const Tensor& x, uint32_t out_c, uint32_t k, uint32_t stride,
              uint32_t pad, bool bn) {
    return Conv(name, x, out_c, k, k, stride, pad, pad, bn);
  }

  // Max or average pooling, k x k window: one comparison or add per window element.
  Tensor Pool(const std::string& name, const Tensor& x, uint32_t k, uint32_t stride, uint32_t pad) {
    Tensor y{name, x.c, (x.h + 2 * pad - k) / stride + 1, (x.w + 2 * pad - k) / stride + 1};
    LayerProfile l = Layer(name, LayerKind::kPool, x, y);
    l.flops_per_sample = static_cast<double>(y.Elements()) * k * k;
    l.shape.kernel_h = l.shape.kernel_w = k;
    l.shape.stride = stride;
    l.shape.padding = pad;
    profile_.layers.push_back(std::move(l));
    return y;
  }

  // Global average pooling to c x 1 x 1.
  Tensor GlobalPool(const std::string& name, const Tensor& x) {
    Tensor y{name, x.c, 1, 1};
    LayerProfile l = Layer(name, LayerKind::kPool, x, y);
    l.flops_per_sample = static_cast<double>(x.Elements());
    l.shape.kernel_h = x.h;
    l.shape.kernel_w = x.w;
    l.shape.stride = x.h;
    profile_.layers.push_back(std::move(l));
    return y;
  }

  // Fully connected on the flattened input.
  Tensor Fc(const std::string& name, const Tensor& x, uint32_t out) {
    const uint64_t in = x.Elements();
    Tensor y{name, out, 1, 1};
    LayerProfile l = Layer(name, LayerKind::kFc, x, y);
    l.param_bytes = (in * out + out) * kFloat;
    l.flops_per_sample = 2.0 * static_cast<double>(in) * out;
    l.tables = {name + ".weight", name + ".bias"};
    l.shape.in_channels = static_cast<uint32_t>(in);
    l.shape.in_height = l.shape.in_width = 1;
    profile_.layers.push_back(std::move(l));
    return y;
  }

  // Element-wise sum of same-shaped tensors (a residual join), followed by a ReLU.
  Tensor Add(const std::string& name, const std::vector<Tensor>& xs) {
    Tensor y{name, xs[0].c, xs[0].h, xs[0].w};
    LayerProfile l;
    l.name = name;
    l.kind = LayerKind::kOther;
    for (const Tensor& x : xs) l.inputs.push_back(x.layer);
    l.activation_bytes = y.Elements() * kFloat;
    l.flops_per_sample = static_cast<double>(y.Elements()) * xs.size();
    profile_.layers.push_back(std::move(l));
    return y;
  }

  // Concatenation along channels (an Inception block's output): no arithmetic.
  Tensor Concat(const std::string& name, const std::vector<Tensor>& xs) {
    Tensor y{name, 0, xs[0].h, xs[0].w};
    LayerProfile l;
    l.name = name;
    l.kind = LayerKind::kOther;
    for (const Tensor& x : xs) {
      y.c += x.c;
      l.inputs.push_back(x.layer);
    }
    l.activation_bytes = y.Elements() * kFloat;
    profile_.layers.push_back(std::move(l));
    return y;
  }

  ModelProfile Take() { return std::move(profile_); }

 private:
  LayerProfile Layer(const std::string& name, LayerKind kind, const Tensor& x, const Tensor& y) {
    LayerProfile l;
    l.name = name;
    l.kind = kind;
    if (!x.layer.empty()) l.inputs.push_back(x.layer);
    l.activation_bytes = y.Elements() * kFloat;
    l.shape.in_channels = x.c;
    l.shape.in_height = x.h;
    l.shape.in_width = x.w;
    l.shape.out_channels = y.c;
    l.shape.out_height = y.h;
    l.shape.out_width = y.w;
    return l;
  }

  ModelProfile profile_;
  Tensor input_;
};

// torchvision alexnet: the adaptive 6x6 average pool is the identity at 224 and omitted.
ModelProfile AlexNet() {
  Builder b("alexnet", 3, 224, 224);
  Tensor x = b.Conv("conv1", b.input(), 64, 11, 4, 2, false);
  x = b.Pool("pool1", x, 3, 2, 0);
  x = b.Conv("conv2", x, 192, 5, 1, 2, false);
  x = b.Pool("pool2", x, 3, 2, 0);
  x = b.Conv("conv3", x, 384, 3, 1, 1, false);
  x = b.Conv("conv4", x, 256, 3, 1, 1, false);
  x = b.Conv("conv5", x, 256, 3, 1, 1, false);
  x = b.Pool("pool5", x, 3, 2, 0);  // 256 x 6 x 6 = 9,216
  x = b.Fc("fc6", x, 4096);
  x = b.Fc("fc7", x, 4096);
  b.Fc("fc8", x, 1000);
  return b.Take();
}

// torchvision vgg16 (configuration D, no batch norm).
ModelProfile Vgg16() {
  Builder b("vgg16", 3, 224, 224);
  const std::vector<std::vector<uint32_t>> stages = {
      {64, 64}, {128, 128}, {256, 256, 256}, {512, 512, 512}, {512, 512, 512}};
  Tensor x = b.input();
  for (size_t s = 0; s < stages.size(); ++s) {
    for (size_t i = 0; i < stages[s].size(); ++i) {
      x = b.Conv("conv" + std::to_string(s + 1) + "_" + std::to_string(i + 1), x, stages[s][i], 3,
                 1, 1, false);
    }
    x = b.Pool("pool" + std::to_string(s + 1), x, 2, 2, 0);
  }  // 512 x 7 x 7 = 25,088
  x = b.Fc("fc6", x, 4096);
  x = b.Fc("fc7", x, 4096);
  b.Fc("fc8", x, 1000);
  return b.Take();
}

// torchvision resnet50 (v1.5: the stride of a downsampling bottleneck is on its 3x3 conv).
ModelProfile ResNet50() {
  Builder b("resnet50", 3, 224, 224);
  Tensor x = b.Conv("conv1", b.input(), 64, 7, 2, 3, true);
  x = b.Pool("maxpool", x, 3, 2, 1);
  const uint32_t widths[] = {64, 128, 256, 512};
  const int blocks[] = {3, 4, 6, 3};
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < blocks[s]; ++i) {
      const std::string p = "layer" + std::to_string(s + 1) + "." + std::to_string(i) + ".";
      const uint32_t w = widths[s];
      const uint32_t stride = (i == 0 && s > 0) ? 2 : 1;
      Tensor y = b.Conv(p + "conv1", x, w, 1, 1, 0, true);
      y = b.Conv(p + "conv2", y, w, 3, stride, 1, true);
      y = b.Conv(p + "conv3", y, 4 * w, 1, 1, 0, true);
      Tensor shortcut = x;
      if (i == 0) shortcut = b.Conv(p + "downsample", x, 4 * w, 1, stride, 0, true);
      x = b.Add(p + "add", {y, shortcut});
    }
  }
  x = b.GlobalPool("avgpool", x);  // 2,048
  b.Fc("fc", x, 1000);
  return b.Take();
}

// torchvision inception_v3 without the auxiliary classifier (aux_logits=False), 299x299.
// Every conv is a BasicConv2d: conv without bias + batch norm + ReLU.
ModelProfile InceptionV3() {
  Builder b("inception_v3", 3, 299, 299);
  auto conv = [&b](const std::string& name, const Tensor& x, uint32_t c, uint32_t kh, uint32_t kw,
                   uint32_t stride, uint32_t ph,
                   uint32_t pw) { return b.Conv(name, x, c, kh, kw, stride, ph, pw, true); };
  auto conv_k = [&conv](const std::string& name, const Tensor& x, uint32_t c, uint32_t k,
                        uint32_t stride,
                        uint32_t pad) { return conv(name, x, c, k, k, stride, pad, pad); };
  Tensor x = conv_k("Conv2d_1a_3x3", b.input(), 32, 3, 2, 0);  // 149
  x = conv_k("Conv2d_2a_3x3", x, 32, 3, 1, 0);                 // 147
  x = conv_k("Conv2d_2b_3x3", x, 64, 3, 1, 1);                 // 147
  x = b.Pool("maxpool1", x, 3, 2, 0);                          // 73
  x = conv_k("Conv2d_3b_1x1", x, 80, 1, 1, 0);                 // 73
  x = conv_k("Conv2d_4a_3x3", x, 192, 3, 1, 0);                // 71
  x = b.Pool("maxpool2", x, 3, 2, 0);                          // 35

  auto inception_a = [&](const std::string& m, const Tensor& in, uint32_t pool_features) {
    Tensor b1 = conv_k(m + ".branch1x1", in, 64, 1, 1, 0);
    Tensor b5 = conv_k(m + ".branch5x5_1", in, 48, 1, 1, 0);
    b5 = conv_k(m + ".branch5x5_2", b5, 64, 5, 1, 2);
    Tensor b3 = conv_k(m + ".branch3x3dbl_1", in, 64, 1, 1, 0);
    b3 = conv_k(m + ".branch3x3dbl_2", b3, 96, 3, 1, 1);
    b3 = conv_k(m + ".branch3x3dbl_3", b3, 96, 3, 1, 1);
    Tensor bp = b.Pool(m + ".avg_pool", in, 3, 1, 1);
    bp = conv_k(m + ".branch_pool", bp, pool_features, 1, 1, 0);
    return b.Concat(m, {b1, b5, b3, bp});
  };
  x = inception_a("Mixed_5b", x, 32);  // 256 x 35 x 35
  x = inception_a("Mixed_5c", x, 64);  // 288
  x = inception_a("Mixed_5d", x, 64);  // 288

  {  // Mixed_6a (InceptionB): 35 -> 17
    const std::string m = "Mixed_6a";
    Tensor b3 = conv_k(m + ".branch3x3", x, 384, 3, 2, 0);
    Tensor bd = conv_k(m + ".branch3x3dbl_1", x, 64, 1, 1, 0);
    bd = conv_k(m + ".branch3x3dbl_2", bd, 96, 3, 1, 1);
    bd = conv_k(m + ".branch3x3dbl_3", bd, 96, 3, 2, 0);
    Tensor bp = b.Pool(m + ".max_pool", x, 3, 2, 0);
    x = b.Concat(m, {b3, bd, bp});  // 768 x 17 x 17
  }

  auto inception_c = [&](const std::string& m, const Tensor& in, uint32_t c7) {
    Tensor b1 = conv_k(m + ".branch1x1", in, 192, 1, 1, 0);
    Tensor b7 = conv_k(m + ".branch7x7_1", in, c7, 1, 1, 0);
    b7 = conv(m + ".branch7x7_2", b7, c7, 1, 7, 1, 0, 3);
    b7 = conv(m + ".branch7x7_3", b7, 192, 7, 1, 1, 3, 0);
    Tensor bd = conv_k(m + ".branch7x7dbl_1", in, c7, 1, 1, 0);
    bd = conv(m + ".branch7x7dbl_2", bd, c7, 7, 1, 1, 3, 0);
    bd = conv(m + ".branch7x7dbl_3", bd, c7, 1, 7, 1, 0, 3);
    bd = conv(m + ".branch7x7dbl_4", bd, c7, 7, 1, 1, 3, 0);
    bd = conv(m + ".branch7x7dbl_5", bd, 192, 1, 7, 1, 0, 3);
    Tensor bp = b.Pool(m + ".avg_pool", in, 3, 1, 1);
    bp = conv_k(m + ".branch_pool", bp, 192, 1, 1, 0);
    return b.Concat(m, {b1, b7, bd, bp});
  };
  x = inception_c("Mixed_6b", x, 128);
  x = inception_c("Mixed_6c", x, 160);
  x = inception_c("Mixed_6d", x, 160);
  x = inception_c("Mixed_6e", x, 192);

  {  // Mixed_7a (InceptionD): 17 -> 8
    const std::string m = "Mixed_7a";
    Tensor b3 = conv_k(m + ".branch3x3_1", x, 192, 1, 1, 0);
    b3 = conv_k(m + ".branch3x3_2", b3, 320, 3, 2, 0);
    Tensor b7 = conv_k(m + ".branch7x7x3_1", x, 192, 1, 1, 0);
    b7 = conv(m + ".branch7x7x3_2", b7, 192, 1, 7, 1, 0, 3);
    b7 = conv(m + ".branch7x7x3_3", b7, 192, 7, 1, 1, 3, 0);
    b7 = conv_k(m + ".branch7x7x3_4", b7, 192, 3, 2, 0);
    Tensor bp = b.Pool(m + ".max_pool", x, 3, 2, 0);
    x = b.Concat(m, {b3, b7, bp});  // 1280 x 8 x 8
  }

  auto inception_e = [&](const std::string& m, const Tensor& in) {
    Tensor b1 = conv_k(m + ".branch1x1", in, 320, 1, 1, 0);
    Tensor b3 = conv_k(m + ".branch3x3_1", in, 384, 1, 1, 0);
    Tensor b3a = conv(m + ".branch3x3_2a", b3, 384, 1, 3, 1, 0, 1);
    Tensor b3b = conv(m + ".branch3x3_2b", b3, 384, 3, 1, 1, 1, 0);
    Tensor bd = conv_k(m + ".branch3x3dbl_1", in, 448, 1, 1, 0);
    bd = conv_k(m + ".branch3x3dbl_2", bd, 384, 3, 1, 1);
    Tensor bda = conv(m + ".branch3x3dbl_3a", bd, 384, 1, 3, 1, 0, 1);
    Tensor bdb = conv(m + ".branch3x3dbl_3b", bd, 384, 3, 1, 1, 1, 0);
    Tensor bp = b.Pool(m + ".avg_pool", in, 3, 1, 1);
    bp = conv_k(m + ".branch_pool", bp, 192, 1, 1, 0);
    return b.Concat(m, {b1, b3a, b3b, bda, bdb, bp});
  };
  x = inception_e("Mixed_7b", x);  // 2048 x 8 x 8
  x = inception_e("Mixed_7c", x);
  x = b.GlobalPool("avgpool", x);  // 2,048
  b.Fc("fc", x, 1000);
  return b.Take();
}

}  // namespace

ModelProfile BigFcProfile(uint32_t in_channels) {
  Builder b("bigfc", in_channels, 32, 32);
  Tensor x = b.Conv("conv1", b.input(), 32, 5, 1, 2, false);  // 32 x 32 x 32
  x = b.Pool("pool1", x, 2, 2, 0);                            // 32 x 16 x 16
  x = b.Conv("conv2", x, 64, 5, 1, 2, false);                 // 64 x 16 x 16
  x = b.Pool("pool2", x, 2, 2, 0);                            // 64 x 8 x 8 = 4,096
  x = b.Fc("fc1", x, 1024);
  x = b.Fc("fc2", x, 1024);
  b.Fc("fc3", x, 10);
  return b.Take();
}

std::vector<std::string> BuiltinProfileNames() {
  return {"alexnet", "vgg16", "resnet50", "inception_v3", "bigfc"};
}

StatusOr<ModelProfile> BuiltinProfile(const std::string& name) {
  if (name == "alexnet") return AlexNet();
  if (name == "vgg16") return Vgg16();
  if (name == "resnet50") return ResNet50();
  if (name == "inception_v3") return InceptionV3();
  if (name == "bigfc") return BigFcProfile(3);
  std::string known;
  for (const std::string& n : BuiltinProfileNames()) known += (known.empty() ? "" : ", ") + n;
  return NotFound("no built-in profile '" + name + "' (built-in: " + known + ")");
}

}  // namespace placement
}  // namespace ps
