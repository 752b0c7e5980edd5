// The built-in image classifiers, written with nn modules.
#include <cmath>
#include <functional>

#include <meganeura/models.h>
#include <meganeura/nn.h>
#include <meganeura/vision.h>

namespace mn {

namespace {

constexpr std::pair<ModelKind, const char*> kModelNames[] = {
    {ModelKind::mlp, "mlp"},           {ModelKind::cnn, "cnn"},
    {ModelKind::resnet18, "resnet18"}, {ModelKind::resnet34, "resnet34"},
    {ModelKind::resnet50, "resnet50"},
};

}  // namespace

const char* model_name(ModelKind k) {
  for (const auto& [kind, name] : kModelNames) {
    if (kind == k) return name;
  }
  return "?";
}

ModelKind model_from_name(const std::string& name) {
  for (const auto& [kind, n] : kModelNames) {
    if (name == n) return kind;
  }
  throw Error("unknown model '" + name + "' (expected mlp, cnn, resnet18, resnet34 or resnet50)");
}

Tensor linear(Tensor x, int64_t out_features, const std::string& name, uint64_t seed, bool bias) {
  Graph& g = x.graph();
  const int64_t in = x.dim(-1);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  Tensor w = g.parameter(name + ".weight", {in, out_features}, Init::uniform(-bound, bound, seed));
  Tensor y = matmul(x, w);
  if (bias)
    y = y + g.parameter(name + ".bias", {out_features}, Init::uniform(-bound, bound, seed + 1));
  return y;
}

namespace {

// Fully connected layers fc1 ... fcN with ReLU between them.
class FullyConnected {
 public:
  FullyConnected(nn::Module& owner, int64_t in, const std::vector<int64_t>& hidden, int64_t classes,
                 std::function<void(const std::string&, std::shared_ptr<nn::Linear>)> adopt) {
    std::vector<int64_t> widths = hidden;
    widths.push_back(classes);
    for (size_t i = 0; i < widths.size(); ++i) {
      layers_.push_back(std::make_shared<nn::Linear>(in, widths[i]));
      adopt("fc" + std::to_string(i + 1), layers_.back());
      in = widths[i];
    }
  }
  Tensor forward(Tensor h) const {
    for (size_t i = 0; i < layers_.size(); ++i) {
      h = layers_[i]->forward(h);
      if (i + 1 < layers_.size()) h = relu(h);
    }
    return h;
  }

 private:
  std::vector<std::shared_ptr<nn::Linear>> layers_;
};

class MlpClassifier : public nn::Module {
 public:
  MlpClassifier(const ClassifierSpec& spec)
      : Module("MlpClassifier"),
        fc_(*this, 784, spec.hidden, spec.classes,
            [this](const std::string& n, std::shared_ptr<nn::Linear> m) { adopt(n, m); }) {}
  Tensor forward(Tensor x) override { return fc_.forward(x); }

 private:
  FullyConnected fc_;
};

class CnnClassifier : public nn::Module {
 public:
  CnnClassifier(const ClassifierSpec& spec)
      : Module("CnnClassifier"),
        conv1_(register_module("conv1", conv(1, 16))),
        conv2_(register_module("conv2", conv(16, 32))),
        fc_(*this, 32 * 7 * 7, spec.hidden, spec.classes,
            [this](const std::string& n, std::shared_ptr<nn::Linear> m) { adopt(n, m); }) {}
  Tensor forward(Tensor x) override {
    Pool2dOptions pool;
    pool.kernel = {2, 2};
    Tensor h = max_pool2d(relu(conv1_->forward(x)), pool);
    h = max_pool2d(relu(conv2_->forward(h)), pool);
    return fc_.forward(reshape(h, {h.dim(0), 32 * 7 * 7}));
  }

 private:
  static std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out) {
    return std::make_shared<nn::Conv2d>(in, out, std::array<int64_t, 2>{3, 3},
                                        nn::Conv2dConfig{.padding = {1, 1}});
  }
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  FullyConnected fc_;
};

}  // namespace

std::shared_ptr<nn::Module> classifier_module(const ClassifierSpec& spec) {
  if (spec.classes < 1) throw Error("build_classifier: classes must be positive");
  std::shared_ptr<nn::Module> m;
  if (spec.kind == ModelKind::mlp) {
    m = std::make_shared<MlpClassifier>(spec);
  } else if (spec.kind == ModelKind::cnn) {
    m = std::make_shared<CnnClassifier>(spec);
  } else {
    m = vision::resnet({.depth = vision::resnet_depth(model_name(spec.kind)),
                        .num_classes = spec.classes,
                        .in_channels = 1,
                        .small_input_stem = true});
  }
  m->seed(spec.seed);
  return m;
}

Classifier build_classifier(const ClassifierSpec& spec) {
  if (spec.batch <= 0) throw Error("build_classifier: batch must be positive");
  Classifier c;
  c.graph = std::make_unique<Graph>();
  c.module = classifier_module(spec);
  Graph& g = *c.graph;
  c.sample_shape = spec.kind == ModelKind::mlp ? Shape{784} : Shape{1, 28, 28};
  Shape input_shape = {spec.batch};
  input_shape.insert(input_shape.end(), c.sample_shape.begin(), c.sample_shape.end());
  c.input = g.input("x", input_shape);
  c.module->train(spec.training);
  c.logits = c.module->forward(c.input);
  g.output("logits", c.logits);
  if (spec.with_loss) {
    c.labels = g.input("y", {spec.batch}, DType::i32);
    c.loss = cross_entropy(c.logits, c.labels);
    g.output("loss", c.loss);
  }
  return c;
}

}  // namespace mn
