#include <cmath>

#include <meganeura/models.h>

namespace mn {

const char* model_name(ModelKind k) { return k == ModelKind::mlp ? "mlp" : "cnn"; }

ModelKind model_from_name(const std::string& name) {
  if (name == "mlp") return ModelKind::mlp;
  if (name == "cnn") return ModelKind::cnn;
  throw Error("unknown model '" + name + "' (expected mlp or cnn)");
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

Tensor conv_layer(Tensor x, int64_t out_channels, const std::string& name, uint64_t seed) {
  Graph& g = x.graph();
  const int64_t in = x.dim(1);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in * 9));
  Tensor w =
      g.parameter(name + ".weight", {out_channels, in, 3, 3}, Init::uniform(-bound, bound, seed));
  Tensor b = g.parameter(name + ".bias", {out_channels}, Init::uniform(-bound, bound, seed + 1));
  Conv2dOptions opt;
  opt.padding = {1, 1};
  return conv2d(x, w, b, opt);
}

}  // namespace

Classifier build_classifier(const ClassifierSpec& spec) {
  if (spec.batch <= 0) throw Error("build_classifier: batch must be positive");
  Classifier c;
  c.graph = std::make_unique<Graph>();
  Graph& g = *c.graph;
  if (spec.kind == ModelKind::mlp) {
    c.sample_shape = {784};
    c.input = g.input("x", {spec.batch, 784});
    Tensor h = c.input;
    for (size_t i = 0; i < spec.hidden.size(); ++i) {
      h = relu(linear(h, spec.hidden[i], "fc" + std::to_string(i + 1), spec.seed + 10 * i));
    }
    c.logits = linear(h, spec.classes, "fc" + std::to_string(spec.hidden.size() + 1),
                      spec.seed + 10 * spec.hidden.size());
  } else {
    c.sample_shape = {1, 28, 28};
    c.input = g.input("x", {spec.batch, 1, 28, 28});
    Pool2dOptions pool;
    pool.kernel = {2, 2};
    Tensor h = max_pool2d(relu(conv_layer(c.input, 16, "conv1", spec.seed)), pool);
    h = max_pool2d(relu(conv_layer(h, 32, "conv2", spec.seed + 10)), pool);
    h = reshape(h, {spec.batch, 32 * 7 * 7});
    for (size_t i = 0; i < spec.hidden.size(); ++i) {
      h = relu(linear(h, spec.hidden[i], "fc" + std::to_string(i + 1), spec.seed + 20 + 10 * i));
    }
    c.logits = linear(h, spec.classes, "fc" + std::to_string(spec.hidden.size() + 1),
                      spec.seed + 20 + 10 * spec.hidden.size());
  }
  g.output("logits", c.logits);
  if (spec.with_loss) {
    c.labels = g.input("y", {spec.batch}, DType::i32);
    c.loss = cross_entropy(c.logits, c.labels);
    g.output("loss", c.loss);
  }
  return c;
}

}  // namespace mn
