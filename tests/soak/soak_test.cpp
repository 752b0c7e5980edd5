// Soak: ten thousand training steps keep host memory flat, and a thousand sessions built,
// stepped and destroyed leave no Vulkan object and no memory behind (validation on, as in every
// test). Vulkan objects are the library's own counts of live buffers, allocations, pipelines
// and recordings (vulkan/live_objects.h), which must come back exactly. Host memory is read
// twice, after a warm-up (the allocator, the shader and pipeline caches, the device's recycled
// command pools, the validation layer's first-use tables) and at the end:
//  - the heap in use (mallinfo2: bytes the allocator handed out and did not get back), where a
//    leak of ours shows: within kHeapSlack, so a leak of 32 bytes per step, or of 500 bytes
//    per session with the allowance below, fails (measured: +544 bytes over 9,000 steps,
//    +540-570 KB over 1,000 sessions of 10 pipelines, about what the layer keeps);
//  - the resident set (/proc/self/statm), which also sees memory mapped directly: within
//    kRssSlack, since lavapipe maps the machine code of every pipeline it compiles and unmaps
//    it some time after the pipeline is destroyed, and its worker threads' memory varies with
//    the scheduling, which moves the resident set by megabytes from one reading to the next.
//
// One allowance, not ours: Debian 12's validation layer (1.3.239) keeps about 55-66 bytes for
// every pipeline created, destroyed or not (measured on lavapipe; nothing without the layer),
// so the sessions' tolerances add kLayerBytesPerPipeline per pipeline they created.
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "support/random_fill.h"
#include "support/scoped_env.h"
#include "vulkan/live_objects.h"

namespace mn {
namespace {

constexpr int64_t kHeapSlack = 256 * 1024;
// Measured: +1.9 MB over the thousand sessions alone, up to +5.6 MB beside a parallel test run
// (lavapipe's threads and the code it maps vary with the scheduling; the heap stays flat).
constexpr int64_t kRssSlack = 8 * 1024 * 1024;
constexpr int64_t kLayerBytesPerPipeline = 80;

struct HostMemory {
  int64_t heap = 0, resident = 0;

  static HostMemory now() {
    HostMemory m;
    const struct mallinfo2 info = mallinfo2();
    m.heap = static_cast<int64_t>(info.uordblks + info.hblkhd);
    std::ifstream statm("/proc/self/statm");
    int64_t pages = 0, resident = 0;
    statm >> pages >> resident;
    m.resident = resident * sysconf(_SC_PAGESIZE);
    return m;
  }
};

// Both growths since `before` within their slack, plus `allowance` bytes the validation layer
// keeps; `over` says over what.
void expect_flat(const HostMemory& before, const std::string& over, int64_t allowance = 0) {
  const HostMemory after = HostMemory::now();
  EXPECT_LE(after.heap - before.heap, kHeapSlack + allowance)
      << "the heap in use grew by " << after.heap - before.heap << " bytes over " << over;
  EXPECT_LE(after.resident - before.resident, kRssSlack + allowance)
      << "the resident set grew by " << after.resident - before.resident << " bytes over " << over;
}

// A small classifier over an embedding: take (index slots), matmul, cross_entropy and AdamW.
struct Classifier {
  static constexpr int64_t kBatch = 8, kTokens = 4, kVocab = 16, kWidth = 8, kClasses = 4;
  Graph g;
  Optimizer opt = Optimizer::adamw();
  Classifier() {
    Tensor table = g.parameter("table", {kVocab, kWidth}, Init::normal(0, 0.5, 1));
    Tensor w = g.parameter("w", {kTokens * kWidth, kClasses}, Init::xavier_uniform(2));
    Tensor rows = take(table, g.input("ids", {kBatch, kTokens}, DType::i32));
    Tensor logits = matmul(reshape(rows, {kBatch, kTokens * kWidth}), w);
    add_training_step(cross_entropy(logits, g.input("y", {kBatch}, DType::i32)), opt);
  }
  // The label is the first token's class, so the loss can fall.
  void set_batch(Session& s, std::mt19937_64& rng, int64_t step) const {
    std::vector<int32_t> ids(kBatch * kTokens), y(kBatch);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % kVocab);
    for (int64_t b = 0; b < kBatch; ++b) y[b] = ids[b * kTokens] % kClasses;
    s.set("ids", ids);
    s.set("y", y);
    for (const auto& [name, value] : step_scalars(opt, 0.01, step)) s.set_scalar(name, value);
  }
};

TEST(Soak, TenThousandTrainingStepsKeepHostMemoryFlat) {
  constexpr int64_t kWarmup = 1000, kSteps = 10000;
  Classifier c;
  auto s = build_session(c.g);
  auto rng = testing::rng_for("soak/steps");
  double first_loss = 0, loss = 0;
  HostMemory after_warmup;
  vk::LiveObjects objects_after_warmup;
  for (int64_t step = 1; step <= kSteps; ++step) {
    c.set_batch(*s, rng, step);
    s->step();
    loss = s->get("loss").data[0];  // read back every step, as the trainer does
    ASSERT_TRUE(std::isfinite(loss)) << "step " << step;
    if (step == 1) first_loss = loss;
    if (step == kWarmup) {
      after_warmup = HostMemory::now();
      objects_after_warmup = vk::live_objects();
    }
  }
  expect_flat(after_warmup, std::to_string(kSteps - kWarmup) + " steps");
  EXPECT_EQ(vk::live_objects(), objects_after_warmup) << vk::live_objects().str();
  EXPECT_LT(loss, first_loss);  // it trained all along
}

TEST(Soak, AThousandSessionsLeaveNothingBehind) {
  constexpr int kWarmup = 20, kSessions = 1000;
  Classifier c;
  auto rng = testing::rng_for("soak/sessions");
  // Every other session copies through staging buffers, as on a GPU without resizable BAR.
  auto one_session = [&](int i) {
    testing::ScopedEnv map("MN_MAP_ARENA", i % 2 ? "0" : "1");
    auto s = build_session(c.g);
    c.set_batch(*s, rng, 1);
    s->step();
    EXPECT_GT(vk::live_objects().buffers, 0);
    return s->get("loss").data[0];
  };
  for (int i = 0; i < kWarmup; ++i) one_session(i);
  const vk::LiveObjects objects = vk::live_objects();
  const int64_t pipelines = vk::pipelines_created();
  const HostMemory before = HostMemory::now();
  for (int i = 0; i < kSessions; ++i) ASSERT_TRUE(std::isfinite(one_session(i))) << i;
  EXPECT_EQ(vk::live_objects(), objects)
      << "before: " << objects.str() << "\nafter: " << vk::live_objects().str();
  const int64_t created = vk::pipelines_created() - pipelines;
  expect_flat(
      before,
      std::to_string(kSessions) + " sessions (" + std::to_string(created) + " pipelines created)",
      kLayerBytesPerPipeline * created);
}

}  // namespace
}  // namespace mn
