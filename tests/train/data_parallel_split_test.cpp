// The data-parallel Trainer's own pieces, in one process: the step split at the gradients
// (split_training_step) trains as add_training_step does, checkpoints of a split run resume
// exactly (mid-accumulation too), and a global batch is cut into the ranks' shares. The ranks
// themselves run under mpirun in tests/distributed.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include <meganeura/distributed.h>
#include <meganeura/nn.h>
#include <meganeura/trainer.h>

#include "support/scratch_dir.h"
#include "train/classes_data.h"
#include "distributed/device_average.h"
#include "train/data_parallel.h"
#include "vulkan/buffer.h"

namespace mn {
namespace {

using test::classes_data;
constexpr int64_t kIn = test::kClassesIn, kClasses = test::kClassesOut, kBatch = 8;

// A job of one process: every collective leaves its data as it is.
class SoloCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string engine() const override { return "solo"; }
  void all_reduce_sum(std::span<float>) override { ++calls; }
  void all_reduce_sum(std::span<double>) override { ++calls; }
  void broadcast(std::span<std::byte>, int) override { ++calls; }
  [[noreturn]] void abort(int code) override { std::exit(code); }
  int calls = 0;
};

struct Model {
  std::shared_ptr<nn::Sequential> net = std::make_shared<nn::Sequential>();
  Graph g;
  Tensor loss;
  Model() {
    net->push_back(std::make_shared<nn::Linear>(kIn, 8));
    net->push_back(std::make_shared<nn::GELU>());
    net->push_back(std::make_shared<nn::Linear>(8, kClasses));
    net->seed(5);
    const Tensor logits = net->forward(g.input("x", {kBatch, kIn}));
    g.output("logits", logits);
    loss = cross_entropy(logits, g.input("y", {kBatch}, DType::i32));
  }
};

TrainerOptions run_options(const Optimizer& opt) {
  TrainerOptions o;
  o.progress = TrainerOptions::Progress::none;
  o.optimizer = opt;
  o.epochs = 2;
  o.seed = 9;
  o.metrics = {Metric::accuracy("logits", "y")};
  return o;
}

std::map<std::string, std::vector<float>> weights(Session& s) {
  std::map<std::string, std::vector<float>> out;
  for (const std::string& n : s.parameter_names()) out[n] = s.get_f32(n);
  return out;
}

void expect_near(const std::map<std::string, std::vector<float>>& a,
                 const std::map<std::string, std::vector<float>>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, va] : a) {
    const std::vector<float>& vb = b.at(name);
    ASSERT_EQ(va.size(), vb.size()) << name;
    for (size_t i = 0; i < va.size(); ++i) {
      ASSERT_NEAR(va[i], vb[i], tol * (1 + std::fabs(va[i]))) << name << "[" << i << "]";
    }
  }
}

struct Case {
  const char* name;
  Optimizer opt;
};

class SplitStep : public ::testing::TestWithParam<Case> {};

// The same trajectory as the one-program step: parameters, losses and metrics.
TEST_P(SplitStep, TrainsAsTheOneProgramStep) {
  const auto data = classes_data(44, 1);  // 5.5 batches: a short last batch, padded
  TrainHistory h_one, h_split;
  std::map<std::string, std::vector<float>> w_one, w_split;
  {
    Model m;
    TrainerOptions o = run_options(GetParam().opt);
    o.pad_values = {{"y", -100}};
    Trainer t(m.loss, o);
    h_one = t.fit(data);
    w_one = weights(t.session());
  }
  auto solo = std::make_shared<SoloCommunicator>();
  {
    Model m;
    TrainerOptions o = run_options(GetParam().opt);
    o.pad_values = {{"y", -100}};
    o.communicator = solo;
    Trainer t(m.loss, o);
    EXPECT_EQ(t.session().program_names(), (std::vector<std::string>{"train", "update", "eval"}));
    h_split = t.fit(data);
    w_split = weights(t.session());
  }
  expect_near(w_one, w_split, 1e-6);
  ASSERT_EQ(h_one.epochs.size(), h_split.epochs.size());
  for (size_t e = 0; e < h_one.epochs.size(); ++e) {
    EXPECT_NEAR(h_one.epochs[e].metrics.at("loss"), h_split.epochs[e].metrics.at("loss"), 1e-6);
    EXPECT_EQ(h_one.epochs[e].metrics.at("accuracy"), h_split.epochs[e].metrics.at("accuracy"));
  }
  // Per step: the loss and metric sums; per update: the gradient sums. Once: the weights.
  EXPECT_GT(solo->calls, 12);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, SplitStep,
    ::testing::Values(Case{"sgd_momentum", Optimizer::sgd({.lr = 0.1, .momentum = 0.9})},
                      Case{"adamw_clipped", Optimizer::adamw({.lr = 0.02, .clip_grad_norm = 0.5})},
                      Case{"adam_accumulate3", Optimizer::adam({.lr = 0.02, .accumulate = 3})},
                      Case{"sgd_accumulate2_clipped",
                           Optimizer::sgd({.lr = 0.1, .clip_grad_norm = 0.3, .accumulate = 2})}),
    [](const auto& info) { return std::string(info.param.name); });

// A job of one process whose engine averages device memory in place (as the NCCL engine does):
// the Trainer makes its session's memory exportable and hands the engine the gradient sums'
// arena spans instead of copying them through the host.
class SoloDeviceCommunicator final : public Communicator, public dist::DeviceAverage {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string engine() const override { return "solo-device"; }
  void all_reduce_sum(std::span<float> v) override { host_values += v.size(); }
  void all_reduce_sum(std::span<double> v) override { host_values += v.size(); }
  void broadcast(std::span<std::byte>, int) override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
  void average_in_place(std::span<const dist::DeviceTensor> tensors) override {
    ++device_calls;
    for (const dist::DeviceTensor& t : tensors) {
      for (const ArenaSpan& s : t.spans) {
        EXPECT_TRUE(s.chunk->exportable());
        EXPECT_LE(s.offset + s.bytes, s.chunk->size());
        device_bytes += s.bytes;
      }
    }
  }
  int device_calls = 0;
  size_t device_bytes = 0, host_values = 0;
};

TEST(SplitStep, AnEngineOnDeviceMemoryGetsTheGradientsInPlace) {
  const auto data = classes_data(32, 4);  // 4 steps
  const Optimizer opt = Optimizer::sgd({.lr = 0.1, .momentum = 0.9});
  std::map<std::string, std::vector<float>> plain;
  {
    Model m;
    Trainer t(m.loss, run_options(opt));
    t.fit(data);
    plain = weights(t.session());
  }
  auto engine = std::make_shared<SoloDeviceCommunicator>();
  Model m;
  TrainerOptions o = run_options(opt);
  o.communicator = engine;
  Trainer t(m.loss, o);
  t.fit(data);
  expect_near(plain, weights(t.session()), 1e-6);
  EXPECT_EQ(engine->device_calls, 8);  // 2 epochs of 4 updates
  // Every update: the gradients of both layers' weights and biases, f32.
  const size_t params = (kIn * 8 + 8 + 8 * kClasses + kClasses) * sizeof(float);
  EXPECT_EQ(engine->device_bytes, 8 * params);
  // The host collectives carry only the losses and metric sums, never the gradients.
  EXPECT_LT(engine->host_values, 8 * 16u);
}

// Rank 1 of a job whose rank 0 holds other parameters (its broadcast checksum is not ours): the
// check names the rank and the update; with rank 0's checksum it passes.
class RankOneCommunicator final : public Communicator {
 public:
  explicit RankOneCommunicator(bool same) : same_(same) {}
  int rank() const override { return 1; }
  int size() const override { return 2; }
  std::string engine() const override { return "fake"; }
  void all_reduce_sum(std::span<float>) override {}
  void all_reduce_sum(std::span<double>) override {}  // rank 0 agrees with itself: adds 0
  void broadcast(std::span<std::byte> bytes, int) override {
    if (!same_) bytes[0] ^= std::byte{1};
  }
  [[noreturn]] void abort(int code) override { std::exit(code); }

 private:
  bool same_;
};

TEST(SplitStep, RanksWithOtherParametersAreNamed) {
  Model m;
  add_training_step(m.loss, Optimizer::adam({.lr = 0.01}));
  auto s = build_session(m.g);
  RankOneCommunicator same(true), other(false);
  train::check_same_parameters(*s, same, 3);
  try {
    train::check_same_parameters(*s, other, 3);
    ADD_FAILURE() << "no error";
  } catch (const DistributedError& e) {
    // 4 parameters and their Adam moments (8); the step counter is not a parameter's.
    EXPECT_NE(std::string(e.what()).find("rank 1 of 2: after update 3 the parameters and "
                                         "optimizer states of rank(s) 1 differ from rank 0's "
                                         "(checksums of 12 tensors)"),
              std::string::npos)
        << e.what();
  }
}

// A split run stopped mid-accumulation and resumed (by the one-program trainer too: the
// checkpoint is the same) ends where an unbroken run ends.
TEST(SplitStepCheckpoint, ResumesMidAccumulationExactly) {
  test::ScratchDir dir("dp-resume");
  const auto data = classes_data(56, 2);  // 7 batches an epoch, updates every 2
  const Optimizer opt = Optimizer::adam({.lr = 0.02, .accumulate = 2});
  std::map<std::string, std::vector<float>> unbroken;
  {
    Model m;
    Trainer t(m.loss, run_options(opt));
    t.fit(data);
    unbroken = weights(t.session());
  }
  auto solo = std::make_shared<SoloCommunicator>();
  {
    Model m;
    TrainerOptions o = run_options(opt);
    o.communicator = solo;
    o.checkpoint = dir / "ckpt.safetensors";
    o.max_steps = 7;  // one epoch: the 4th update is half accumulated
    Trainer t(m.loss, o);
    t.fit(data);
  }
  for (bool split : {true, false}) {
    Model m;
    TrainerOptions o = run_options(opt);
    if (split) o.communicator = solo;
    o.resume = dir / "ckpt.safetensors";
    Trainer t(m.loss, o);
    t.fit(data);
    SCOPED_TRACE(split ? "resumed split" : "resumed in one program");
    expect_near(unbroken, weights(t.session()), 1e-6);
  }
}

// One micro-batch an update: the gradient sums are scratch, not part of the checkpoint, which
// the one-program trainer resumes as its own.
TEST(SplitStepCheckpoint, LeavesOutTheGradientsOfOneMicroBatch) {
  test::ScratchDir dir("dp-ckpt");
  const auto data = classes_data(32, 3);
  auto solo = std::make_shared<SoloCommunicator>();
  Model m;
  TrainerOptions o = run_options(Optimizer::sgd({.lr = 0.1}));
  o.communicator = solo;
  o.checkpoint = dir / "ckpt.safetensors";
  o.max_steps = 4;
  Trainer t(m.loss, o);
  t.fit(data);
  const SafetensorsReader r(dir / "ckpt.safetensors");
  for (const SafetensorsEntry& e : r.entries()) {
    EXPECT_EQ(e.name.find("grad_accum"), std::string::npos) << e.name;
  }
  Model again;
  TrainerOptions resumed = run_options(Optimizer::sgd({.lr = 0.1}));
  resumed.resume = dir / "ckpt.safetensors";
  Trainer one(again.loss, resumed);
  EXPECT_NO_THROW(one.fit(data));
}

TEST(ShardBatch, CutsTheRanksRowsAndShortBatches) {
  const auto data = classes_data(10, 4);
  TensorLoader loader(data, {.batch_size = 6, .shuffle = false, .prefetch = 0});
  const TensorBatch full = loader.next();
  const TensorBatch r1 = train::shard_batch(full, 1, 3);
  EXPECT_EQ(r1.rows, 3);
  EXPECT_EQ(r1.indices, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(r1.columns.at("x").shape, (Shape{3, kIn}));
  const std::vector<double> all = full.columns.at("x").to_array().data;
  EXPECT_EQ(r1.columns.at("x").to_array().data,
            std::vector<double>(all.begin() + 3 * kIn, all.end()));
  const TensorBatch last = loader.next();  // rows 6..9
  EXPECT_EQ(train::shard_batch(last, 0, 3).rows, 3);
  EXPECT_EQ(train::shard_batch(last, 1, 3).rows, 1);
  EXPECT_EQ(train::shard_batch(last, 1, 3).indices, (std::vector<int64_t>{9}));
}

// A short last batch that leaves a rank without a sample is refused before training.
TEST(DataParallelTrainer, RefusesARankWithoutSamples) {
  // Two ranks' worth of the communicator: only sizes are read before the error.
  class Pair final : public Communicator {
   public:
    int rank() const override { return 0; }
    int size() const override { return 2; }
    std::string engine() const override { return "pair"; }
    void all_reduce_sum(std::span<float>) override {}
    void all_reduce_sum(std::span<double>) override {}
    void broadcast(std::span<std::byte>, int) override {}
    [[noreturn]] void abort(int code) override { std::exit(code); }
  };
  Model m;
  TrainerOptions o = run_options(Optimizer::sgd({.lr = 0.1}));
  o.communicator = std::make_shared<Pair>();
  o.pad_values = {{"y", -100}};
  Trainer t(m.loss, o);
  try {
    t.fit(classes_data(16 + 5, 5));  // steps of 16; the last holds 5, rank 1 would get none
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("leaves rank 1 of 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("drop_last"), std::string::npos) << e.what();
  }
}

TEST(Distributed, EngineNamesAndTimeouts) {
  EXPECT_EQ(distributed_engine_from_name("mpi"), DistributedEngine::mpi);
  EXPECT_EQ(distributed_engine_from_name("auto"), DistributedEngine::automatic);
  EXPECT_THROW(distributed_engine_from_name("gloo"), Error);
  EXPECT_EQ(connect_distributed({.engine = DistributedEngine::none}), nullptr);
  EXPECT_THROW(connect_distributed({.engine = DistributedEngine::nccl}), Error);
  EXPECT_THROW(connect_distributed({.engine = DistributedEngine::none, .timeout_seconds = -1}),
               Error);
}

}  // namespace
}  // namespace mn
