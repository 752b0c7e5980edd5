// The Trainer on graphs of the test's own: the same trajectory as a hand-driven session, exact
// resume mid-epoch, evaluation metrics equal to the reference's, events and progress, and every
// refusal naming what is wrong.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include <meganeura/nn.h>
#include <meganeura/reference.h>
#include <meganeura/trainer.h>

#include "support/scratch_dir.h"
#include "train/classes_data.h"

namespace mn {
namespace {

using test::classes_data;
constexpr int64_t kIn = test::kClassesIn, kClasses = test::kClassesOut;

// A two-layer classifier over x [batch, kIn] and y [batch], outputs "logits"; returns its loss.
struct Model {
  std::shared_ptr<nn::Sequential> net = std::make_shared<nn::Sequential>();
  Graph g;
  Tensor loss;

  explicit Model(int64_t batch, bool with_dropout = false) {
    net->push_back(std::make_shared<nn::Linear>(kIn, 8));
    net->push_back(std::make_shared<nn::ReLU>());
    if (with_dropout) net->push_back(std::make_shared<nn::Dropout>(0.5));
    net->push_back(std::make_shared<nn::Linear>(8, kClasses));
    net->seed(11);
    const Tensor logits = net->forward(g.input("x", {batch, kIn}));
    g.output("logits", logits);
    loss = cross_entropy(logits, g.input("y", {batch}, DType::i32));
  }
};

TrainerOptions quiet(TrainerOptions o = {}) {
  o.progress = TrainerOptions::Progress::none;
  return o;
}

TrainerOptions adamw_run() {
  TrainerOptions o = quiet();
  o.optimizer = Optimizer::adamw({.lr = 0.05, .weight_decay = 0.1});
  o.epochs = 2;
  o.seed = 3;
  return o;
}

std::map<std::string, Array> parameters(Session& s) {
  std::map<std::string, Array> out;
  for (const std::string& n : s.parameter_names()) out[n] = s.get(n);
  return out;
}

template <class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << parts.front() << "'";
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' not in: "
                                                                  << e.what();
  }
}

// The Trainer's steps are those of a session driven by hand with the loader and the stepper:
// same batches in the same order, same learning rates, same updates, so the same parameters
// bit for bit, and the losses it reports are the steps' losses.
TEST(Trainer, FollowsAHandDrivenSessionExactly) {
  auto data = classes_data(20, 1);
  Model a(5);
  TrainerOptions o = adamw_run();
  o.optimizer.schedule.kind = LrSchedule::Kind::cosine;
  std::vector<double> reported;
  o.callbacks = {[&](TrainEvent& e) {
    if (e.kind == TrainEvent::Kind::step) reported.push_back(e.loss);
  }};
  Trainer trainer(a.loss, o);
  const TrainHistory h = trainer.fit(data);
  EXPECT_EQ(h.steps, 8);
  EXPECT_FALSE(h.stopped);
  ASSERT_EQ(h.epochs.size(), 2u);

  Model b(5);
  add_training_step(b.loss, o.optimizer);
  auto s = build_session(b.g);
  TensorLoader loader(data, {.batch_size = 5, .seed = 3});
  OptimizerStepper stepper(o.optimizer, 8);
  std::vector<double> losses;
  for (int i = 0; i < 8; ++i) {
    const TensorBatch batch = loader.next();
    for (const auto& [name, c] : batch.columns) s->set_raw(name, c.dtype, c.bytes);
    stepper.step(*s);
    losses.push_back(s->get("loss").data[0]);
  }
  EXPECT_EQ(reported, losses);
  const auto pa = parameters(trainer.session()), pb = parameters(*s);
  ASSERT_EQ(pa.size(), 4u);
  for (const auto& [name, value] : pa) EXPECT_EQ(value.data, pb.at(name).data) << name;
  // The epoch's loss is the mean of its steps' losses.
  const double first = (losses[0] + losses[1] + losses[2] + losses[3]) / 4;
  EXPECT_NEAR(h.epochs[0].metrics.at("loss"), first, 1e-12);
  EXPECT_LT(h.epochs[1].metrics.at("loss"), h.epochs[0].metrics.at("loss"));
}

// Stopped mid-epoch and resumed by a new Trainer from its checkpoint, a run ends where an
// unbroken one does: the same parameters and the same means for the broken epoch.
TEST(Trainer, ResumesMidEpochExactly) {
  test::ScratchDir dir("trainer");
  auto data = classes_data(20, 2);
  Model a(5);
  Trainer whole(a.loss, adamw_run());
  const TrainHistory ha = whole.fit(data);

  TrainerOptions first = adamw_run();
  first.checkpoint = dir / "run.safetensors";
  first.max_steps = 6;
  Model b(5);
  const TrainHistory hb = Trainer(b.loss, first).fit(data);
  EXPECT_TRUE(hb.stopped);
  EXPECT_EQ(hb.steps, 6);
  ASSERT_EQ(hb.epochs.size(), 1u);

  TrainerOptions second = adamw_run();
  second.resume = first.checkpoint;
  Model c(5);
  Trainer resumed(c.loss, second);
  const TrainHistory hc = resumed.fit(data);
  EXPECT_EQ(hc.steps, 8);
  ASSERT_EQ(hc.epochs.size(), 1u);
  EXPECT_EQ(hc.epochs[0].metrics, ha.epochs[1].metrics);
  const auto pa = parameters(whole.session()), pc = parameters(resumed.session());
  for (const auto& [name, value] : pa) EXPECT_EQ(value.data, pc.at(name).data) << name;
  expect_error([&] { resumed.fit(data); }, {"already trained its 8 steps"});

  // The run's identity is checked field by field.
  TrainerOptions other = second;
  other.run_identity = {{"model", "b"}};
  Model d(5);
  expect_error([&] { Trainer(d.loss, other).fit(data); }, {"lacks 'model'"});
  TrainerOptions sgd = second;
  sgd.optimizer = Optimizer::sgd({.lr = 0.1});
  Model e(5);
  expect_error([&] { Trainer(e.loss, sgd).fit(data); }, {"'optimizer' is 'adamw'", "'sgd'"});
}

// Evaluation sees every sample once, a short last batch padded with ignored labels: its loss
// and accuracy are the reference's over the whole data with the session's parameters.
TEST(Trainer, EvaluationMetricsAreTheReferencesOverEverySample) {
  auto train = classes_data(20, 3), test = classes_data(13, 4);
  Model m(5);
  Model eval(5);
  eval.g.output("loss", eval.loss);
  TrainerOptions o = adamw_run();
  o.epochs = 12;
  o.pad_values = {{"y", -100}};
  o.eval_metrics = {Metric::accuracy("logits", "y")};
  o.metrics = {Metric::accuracy("logits", "y")};
  Trainer trainer(m.loss, o, &eval.g);
  const TrainHistory h = trainer.fit(train, test);
  ASSERT_EQ(h.epochs.size(), 12u);
  EXPECT_EQ(h.epochs[11].eval_metrics, h.eval_metrics);

  Model whole(13);
  reference::Feeds feeds;
  for (const auto& [name, value] : parameters(trainer.session())) feeds[name] = value;
  feeds["x"] = test->column("x").to_array();
  feeds["y"] = test->column("y").to_array();
  const Array logits =
      reference::evaluate_nodes(whole.g, feeds, std::vector{*whole.g.find_output("logits")})[0];
  const double loss = reference::evaluate_nodes(whole.g, feeds, std::vector{whole.loss.id()})[0].data[0];
  int correct = 0;
  for (int64_t i = 0; i < 13; ++i) {
    const double* row = logits.data.data() + i * kClasses;
    correct += std::max_element(row, row + kClasses) - row == feeds["y"].data[static_cast<size_t>(i)];
  }
  EXPECT_NEAR(h.eval_metrics.at("loss"), loss, 1e-5 * std::abs(loss));
  EXPECT_EQ(h.eval_metrics.at("accuracy"), correct / 13.0);
  EXPECT_GT(correct, 6);  // it learned something; a broken evaluation counting nothing is 0
  EXPECT_EQ(trainer.evaluate(*test), h.eval_metrics);

  // Without pad values, the padded batch's mean loss would count padding rows.
  TrainerOptions no_pad = adamw_run();
  Model m2(5), e2(5);
  e2.g.output("loss", e2.loss);
  Trainer unpadded(m2.loss, no_pad, &e2.g);
  expect_error([&] { unpadded.evaluate(*test); }, {"padded to 5", "pad_values"});
}

TEST(Trainer, CallbacksSeeEveryEventAndCanStopTheRun) {
  test::ScratchDir dir("trainer");
  auto train = classes_data(8, 5), test = classes_data(4, 6);
  std::vector<std::string> kinds;
  TrainerOptions o = adamw_run();
  o.callbacks = {[&](TrainEvent& e) {
    kinds.push_back(std::string(train_event_name(e.kind)) + std::to_string(e.global_step));
  }};
  Model m(4);
  Trainer(m.loss, o).fit(train, test);
  EXPECT_EQ(kinds, (std::vector<std::string>{"step1", "step2", "evaluation2", "epoch_end2", "step3",
                                             "step4", "evaluation4", "epoch_end4"}));

  kinds.clear();
  o.eval_every = 3;
  o.checkpoint = dir / "c.safetensors";
  o.callbacks.push_back([](TrainEvent& e) { e.stop = e.global_step == 3; });
  Model m2(4);
  const TrainHistory h = Trainer(m2.loss, o).fit(train, test);
  EXPECT_EQ(kinds, (std::vector<std::string>{"step1", "step2", "epoch_end2", "step3",
                                             "evaluation3"}));
  EXPECT_TRUE(h.stopped);
  EXPECT_EQ(h.steps, 3);
  EXPECT_EQ(SafetensorsReader(o.checkpoint).metadata().at("global_step"), "3");
}

TEST(Trainer, ProgressIsJsonLinesOrABar) {
  auto train = classes_data(8, 7);
  std::ostringstream json;
  TrainerOptions o = adamw_run();
  o.progress = TrainerOptions::Progress::json;
  o.progress_stream = &json;
  o.log_every = 1;
  Model m(4);
  Trainer(m.loss, o).fit(train);
  std::istringstream lines(json.str());
  std::string line;
  std::vector<std::string> events;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    events.push_back(j.at("event").get<std::string>() + std::to_string(j.at("global_step").get<int>()));
    EXPECT_TRUE(j.at("metrics").contains("loss"));
    EXPECT_EQ(j.at("epochs"), 2);
  }
  EXPECT_EQ(events, (std::vector<std::string>{"step1", "step2", "epoch_end2", "step3", "step4",
                                              "epoch_end4"}));
  std::ostringstream bar;
  o.progress = TrainerOptions::Progress::bar;
  o.progress_stream = &bar;
  Model m2(4);
  Trainer(m2.loss, o).fit(train);
  EXPECT_NE(bar.str().find("\repoch 2/2 [========================] 2/2 loss"), std::string::npos)
      << bar.str();
}

TEST(Trainer, RefusalsNameWhatIsWrong) {
  auto data = classes_data(10, 8);
  auto run = [&](const std::function<void(TrainerOptions&)>& change) {
    return [=] {
      TrainerOptions o = adamw_run();
      change(o);
      Model m(5);
      Trainer(m.loss, o).fit(data);
    };
  };
  expect_error(run([](TrainerOptions& o) { o.epochs = 0; }), {"epochs is 0"});
  expect_error(run([](TrainerOptions& o) { o.max_steps = 0; }), {"max_steps is 0"});
  expect_error(run([](TrainerOptions& o) { o.log_every = 0; }), {"log_every"});
  expect_error(run([](TrainerOptions& o) { o.optimizer.lr = 0; }), {"lr is 0"});
  expect_error(run([](TrainerOptions& o) { o.metrics = {Metric::mean("nope")}; }),
               {"output 'nope'", "'logits'"});
  expect_error(run([](TrainerOptions& o) { o.optimizer.accumulate = 5; }), {"accumulate is 5"});

  Model m(3);
  Trainer t(m.loss, adamw_run());
  expect_error([&] { t.fit(data); }, {"last batch holds 1 of the 3 samples of a step", "drop_last"});
  auto renamed = std::make_shared<TensorDataset>();
  renamed->add("inputs", data->column("x"));
  renamed->add("y", data->column("y"));
  expect_error([&] { t.fit(renamed); }, {"input 'x' has no column", "'inputs', 'y'"});
  auto wide = std::make_shared<TensorDataset>();
  wide->add("x", Array({10, 7}, DType::f32));
  wide->add("y", data->column("y"));
  EXPECT_THROW(t.fit(wide), ShapeError);
  auto float_labels = std::make_shared<TensorDataset>();
  float_labels->add("x", data->column("x"));
  float_labels->add("y", data->column("y").to_array(), DType::f32);
  expect_error([&] { t.fit(float_labels); }, {"column 'y' holds f32", "is i32"});

  Model dropout(5, /*with_dropout=*/true);
  expect_error([&] { Trainer(dropout.loss, adamw_run()); }, {"dropout", "eval mode"});
  Model named(5);
  named.g.output("loss", named.g.input("other", {}));
  expect_error([&] { Trainer(named.loss, adamw_run()); }, {"output 'loss'"});
}

}  // namespace
}  // namespace mn
