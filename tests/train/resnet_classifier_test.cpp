// train_classifier with a ResNet (torchvision's layout, the small input stem): a short run's
// checkpoint holds the batch-norm statistics the training steps updated, and its test loss is
// the float64 reference's over the evaluation graph built in eval mode (running statistics, not
// the test batch's), which a graph built in training mode would not give.
#include <gtest/gtest.h>

#include <random>

#include <meganeura/data.h>
#include <meganeura/models.h>
#include <meganeura/nn.h>
#include <meganeura/reference.h>
#include <meganeura/train.h>

#include "support/random_fill.h"
#include "support/scratch_dir.h"

namespace mn {
namespace {

std::shared_ptr<Dataset> images(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return testing::random_classification(rng, n, {1, 28, 28});
}

TEST(ResNetClassifier, EvaluatesWithTheRunningStatisticsTrainingUpdated) {
  test::ScratchDir dir("resnet-classifier");
  auto train = images(4, 1), test = images(1, 2);
  TrainOptions o;
  o.model.kind = model_from_name("resnet18");
  o.model.batch = 4;
  o.eval_batch = 1;
  o.optimizer = Optimizer::sgd({.lr = 0.01, .momentum = 0.9});
  o.save = dir / "resnet.safetensors";
  const TrainResult r = train_classifier(train, test, o);
  EXPECT_EQ(r.steps, 1);

  const std::map<std::string, Array> saved = load_safetensors(o.save);
  // The training step moved the statistics off their initial 0 and 1.
  EXPECT_EQ(saved.at("bn1.num_batches_tracked").data[0], 1);
  EXPECT_NE(saved.at("layer4.1.bn2.running_var").data[0], 1.0);

  ClassifierSpec spec = o.model;
  spec.batch = 1;
  spec.training = false;
  const Classifier eval = build_classifier(spec);
  reference::Feeds feeds;
  for (const auto& [name, value] : saved) {
    if (name.find('/') == std::string::npos) feeds[name] = value;  // not optimizer state
  }
  feeds["x"] = Array({1, 1, 28, 28}, DType::f32,
                     std::vector<double>(test->inputs.begin(), test->inputs.end()));
  feeds["y"] = Array({1}, DType::i32, std::vector<double>(test->labels.begin(), test->labels.end()));
  const double want = reference::evaluate(*eval.graph, feeds).at("loss").data[0];
  EXPECT_NEAR(r.test_loss, want, 1e-4 * std::abs(want));

  // The training-mode graph (batch statistics) gives another loss: the check above can fail.
  spec.training = true;
  const Classifier batch_stats = build_classifier(spec);
  reference::Feeds train_feeds = feeds;
  const double other = reference::evaluate(*batch_stats.graph, train_feeds).at("loss").data[0];
  EXPECT_GT(std::abs(other - want), 1e-3 * std::abs(want));
}

TEST(ResNetClassifier, KeysAreTorchvisionsWithTheSmallStem) {
  const ClassifierSpec spec{.kind = ModelKind::resnet50, .batch = 2};
  const auto m = classifier_module(spec);
  std::map<std::string, Shape> shapes;
  for (const nn::StateEntry& e : m->state_entries()) shapes[e.key] = e.slot.type.shape;
  EXPECT_EQ(shapes.at("conv1.weight"), (Shape{64, 1, 3, 3}));
  EXPECT_EQ(shapes.at("layer1.0.downsample.0.weight"), (Shape{256, 64, 1, 1}));
  EXPECT_EQ(shapes.at("layer4.2.conv3.weight"), (Shape{2048, 512, 1, 1}));
  EXPECT_EQ(shapes.at("fc.weight"), (Shape{10, 2048}));
  EXPECT_EQ(shapes.count("layer1.1.downsample.0.weight"), 0u);
  EXPECT_EQ(m->state_entries().front().key, "conv1.weight");
  EXPECT_EQ(m->state_entries().back().key, "fc.bias");
  EXPECT_THROW(model_from_name("resnet20"), Error);
  EXPECT_STREQ(model_name(ModelKind::resnet34), "resnet34");
  nn::Linear lin(2, 2);
  EXPECT_THROW(lin.reset_init("gain", Init::ones()), Error);
}

}  // namespace
}  // namespace mn
