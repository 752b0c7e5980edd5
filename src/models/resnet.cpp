// torchvision's ResNets (resnet.py): BasicBlock (18, 34) and Bottleneck (50, 101, 152; the
// stride on the 3×3 convolution, "ResNet v1.5"), four stages of 64·2^i planes, registered in
// torchvision's order so that the state_dict keys and their order are its own.
#include <cmath>
#include <string>

#include <meganeura/vision.h>

namespace mn::vision {

namespace {

std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  auto c = std::make_shared<nn::Conv2d>(
      in, out, std::array<int64_t, 2>{kernel, kernel},
      nn::Conv2dConfig{.stride = {stride, stride}, .padding = {kernel / 2, kernel / 2},
                       .bias = false});
  // torchvision: kaiming_normal_(mode="fan_out", nonlinearity="relu").
  c->reset_init("weight", Init::normal(0.0, std::sqrt(2.0 / static_cast<double>(out * kernel * kernel)), 0));
  return c;
}

std::shared_ptr<nn::BatchNorm2d> bn(int64_t channels) {
  return std::make_shared<nn::BatchNorm2d>(channels);
}

// The 1×1 projection of the identity path where a block changes the resolution or the width.
std::shared_ptr<nn::Sequential> downsample(int64_t in, int64_t out, int64_t stride) {
  return std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{conv(in, out, 1, stride), bn(out)});
}

class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in, int64_t planes, int64_t stride) : Module("BasicBlock") {
    conv1_ = register_module("conv1", conv(in, planes, 3, stride));
    bn1_ = register_module("bn1", bn(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3, 1));
    bn2_ = register_module("bn2", bn(planes));
    if (stride != 1 || in != planes) {
      downsample_ = register_module("downsample", downsample(in, planes, stride));
    }
  }
  Tensor forward(Tensor x) override {
    Tensor out = relu(bn1_->forward(conv1_->forward(x)));
    out = bn2_->forward(conv2_->forward(out));
    return relu(out + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::Sequential> downsample_;
};

class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in, int64_t planes, int64_t stride) : Module("Bottleneck") {
    conv1_ = register_module("conv1", conv(in, planes, 1, 1));
    bn1_ = register_module("bn1", bn(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3, stride));
    bn2_ = register_module("bn2", bn(planes));
    conv3_ = register_module("conv3", conv(planes, planes * kExpansion, 1, 1));
    bn3_ = register_module("bn3", bn(planes * kExpansion));
    if (stride != 1 || in != planes * kExpansion) {
      downsample_ = register_module("downsample", downsample(in, planes * kExpansion, stride));
    }
  }
  Tensor forward(Tensor x) override {
    Tensor out = relu(bn1_->forward(conv1_->forward(x)));
    out = relu(bn2_->forward(conv2_->forward(out)));
    out = bn3_->forward(conv3_->forward(out));
    return relu(out + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_, bn3_;
  std::shared_ptr<nn::Sequential> downsample_;
};

struct Layout {
  bool bottleneck;
  std::array<int64_t, 4> blocks;
};

Layout layout_of(int depth) {
  switch (depth) {
    case 18: return {false, {2, 2, 2, 2}};
    case 34: return {false, {3, 4, 6, 3}};
    case 50: return {true, {3, 4, 6, 3}};
    case 101: return {true, {3, 4, 23, 3}};
    case 152: return {true, {3, 8, 36, 3}};
    default:
      throw Error("resnet: depth " + std::to_string(depth) +
                  " is not one of torchvision's (18, 34, 50, 101, 152)");
  }
}

class ResNet : public nn::Module {
 public:
  explicit ResNet(const ResNetConfig& c) : Module("ResNet"), small_stem_(c.small_input_stem) {
    if (c.num_classes < 1 || c.in_channels < 1) {
      throw Error("resnet: num_classes " + std::to_string(c.num_classes) + " and in_channels " +
                  std::to_string(c.in_channels) + " must be positive");
    }
    const Layout l = layout_of(c.depth);
    const int64_t expansion = l.bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
    conv1_ = register_module("conv1", small_stem_ ? conv(c.in_channels, 64, 3, 1)
                                                  : conv(c.in_channels, 64, 7, 2));
    bn1_ = register_module("bn1", bn(64));
    int64_t in = 64;
    for (int stage = 0; stage < 4; ++stage) {
      const int64_t planes = int64_t{64} << stage;
      auto layer = std::make_shared<nn::Sequential>();
      for (int64_t b = 0; b < l.blocks[static_cast<size_t>(stage)]; ++b) {
        const int64_t stride = b == 0 && stage > 0 ? 2 : 1;
        if (l.bottleneck) {
          layer->push_back(std::make_shared<Bottleneck>(in, planes, stride));
        } else {
          layer->push_back(std::make_shared<BasicBlock>(in, planes, stride));
        }
        in = planes * expansion;
      }
      layers_[static_cast<size_t>(stage)] =
          register_module("layer" + std::to_string(stage + 1), layer);
    }
    fc_ = register_module("fc", std::make_shared<nn::Linear>(512 * expansion, c.num_classes));
  }

  Tensor forward(Tensor x) override {
    if (x.rank() != 4) {
      throw ShapeError(where() + ": expected images [N, C, H, W], got " + x.type().str());
    }
    Tensor h = relu(bn1_->forward(conv1_->forward(x)));
    if (!small_stem_) {
      h = max_pool2d(h, Pool2dOptions{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
    }
    for (const auto& layer : layers_) h = layer->forward(h);
    h = global_avg_pool2d(h);
    return fc_->forward(reshape(h, {h.dim(0), h.dim(1)}));
  }

 private:
  bool small_stem_;
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::array<std::shared_ptr<nn::Sequential>, 4> layers_;
  std::shared_ptr<nn::Linear> fc_;
};

}  // namespace

std::shared_ptr<nn::Module> resnet(const ResNetConfig& config) {
  return std::make_shared<ResNet>(config);
}

ResNetConfig resnet_config_of(const std::map<std::string, Shape>& shapes) {
  auto shape = [&](const std::string& key) -> const Shape& {
    auto it = shapes.find(key);
    if (it == shapes.end()) throw Error("not a torchvision ResNet state_dict: no '" + key + "'");
    return it->second;
  };
  ResNetConfig c;
  const Shape& stem = shape("conv1.weight");
  if (stem.size() != 4 || stem[0] != 64 || stem[2] != stem[3] || (stem[2] != 7 && stem[2] != 3)) {
    throw Error("not a torchvision ResNet state_dict: conv1.weight is " + shape_str(stem) +
                ", expected [64, channels, 7, 7] (or 3, 3 for the small stem)");
  }
  c.in_channels = stem[1];
  c.small_input_stem = stem[2] == 3;
  const Shape& fc = shape("fc.weight");
  if (fc.size() != 2) throw Error("not a torchvision ResNet state_dict: fc.weight is " + shape_str(fc));
  c.num_classes = fc[0];
  const bool bottleneck = shapes.count("layer1.0.conv3.weight") != 0;
  std::array<int64_t, 4> blocks{};
  for (int s = 0; s < 4; ++s) {
    while (shapes.count("layer" + std::to_string(s + 1) + "." + std::to_string(blocks[s]) +
                        ".conv1.weight")) {
      ++blocks[s];
    }
  }
  for (int depth : {18, 34, 50, 101, 152}) {
    const Layout l = layout_of(depth);
    if (l.bottleneck == bottleneck && l.blocks == blocks) {
      c.depth = depth;
      return c;
    }
  }
  throw Error("not a torchvision ResNet state_dict: " + std::string(bottleneck ? "bottleneck" : "basic") +
              " blocks " + std::to_string(blocks[0]) + ", " + std::to_string(blocks[1]) + ", " +
              std::to_string(blocks[2]) + ", " + std::to_string(blocks[3]) +
              " per stage match no depth of 18, 34, 50, 101, 152");
}

int resnet_depth(const std::string& name) {
  for (int depth : {18, 34, 50, 101, 152}) {
    if (name == "resnet" + std::to_string(depth)) return depth;
  }
  throw Error("unknown model '" + name + "': expected resnet18, resnet34, resnet50, resnet101 or resnet152");
}

}  // namespace mn::vision
