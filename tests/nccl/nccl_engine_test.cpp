// The NCCL engine on an NVIDIA GPU (ctest label gpu): a job of one rank through NCCL, CUDA
// reading and writing a session's Vulkan memory through the import the engine's in-place
// all-reduce uses, and a Trainer on the engine training as one without it. Skipped where the
// CUDA driver or NCCL cannot be loaded (lavapipe, other vendors) unless MN_REQUIRE_NCCL=1.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>

#include <meganeura/distributed.h>
#include <meganeura/graph.h>
#include <meganeura/nn.h>
#include <meganeura/session.h>
#include <meganeura/trainer.h>

#include "distributed/cuda_imports.h"
#include "distributed/cuda_library.h"
#include "distributed/nccl_library.h"
#include "runtime/session_access.h"
#include "support/scoped_env.h"
#include "train/classes_data.h"
#include "vulkan/buffer.h"
#include "vulkan/device.h"

namespace mn {
namespace {

// Empty when the engine's libraries load, else why not.
std::string missing_libraries() {
  try {
    dist::cuda_library();
    dist::nccl_library();
    return {};
  } catch (const Error& e) {
    return e.what();
  }
}

#define REQUIRE_NCCL()                                                            \
  do {                                                                            \
    const std::string why = missing_libraries();                                  \
    if (!why.empty()) {                                                           \
      const char* req = std::getenv("MN_REQUIRE_NCCL");                          \
      if (req && std::string(req) == "1") FAIL() << why;                          \
      GTEST_SKIP() << why;                                                        \
    }                                                                             \
  } while (0)

// No launcher's variables: a job of one.
struct Alone {
  testing::ScopedEnv world{"WORLD_SIZE", nullptr}, ompi{"OMPI_COMM_WORLD_SIZE", nullptr},
      pmi{"PMI_SIZE", nullptr}, pmix{"PMIX_RANK", nullptr};
};

TEST(NcclEngine, AJobOfOneReducesAndBroadcasts) {
  REQUIRE_NCCL();
  Alone alone;
  auto world = connect_distributed({.engine = DistributedEngine::nccl});
  ASSERT_TRUE(world);
  EXPECT_EQ(world->engine(), "nccl");
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
  std::vector<float> f = {1.5f, -2.0f, 3.25f};
  world->all_reduce_sum(f);
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  std::vector<double> d(100000);
  for (size_t i = 0; i < d.size(); ++i) d[i] = 0.001 * static_cast<double>(i);
  const std::vector<double> d0 = d;
  world->all_reduce_sum(d);
  EXPECT_EQ(d, d0);
  std::vector<std::byte> bytes(1000, std::byte{7});
  world->broadcast(bytes, 0);
  EXPECT_EQ(bytes, std::vector<std::byte>(1000, std::byte{7}));
  EXPECT_THROW(world->broadcast(bytes, 1), DistributedError);
}

// CUDA reads what the session wrote and the session reads what CUDA wrote, at a state's place
// in the arena; the import goes when the session does.
TEST(NcclEngine, CudaSharesTheSessionsMemory) {
  REQUIRE_NCCL();
  Graph g;
  const Tensor x = g.input("x", {64});
  const Tensor s = g.state("s", {64});
  g.output("y", x + s);
  auto session = build_session(g, {.exportable_memory = true});
  std::vector<float> values(64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 3;
  session->set("s", values);

  const dist::CudaLibrary& cuda = dist::cuda_library();
  const auto& uuid = SessionAccess::device(*session).capabilities().device_uuid;
  int count = 0;
  ASSERT_EQ(cuda.DeviceGetCount(&count), 0);
  dist::CuDevice device = -1;
  for (int i = 0; i < count; ++i) {
    dist::CuDevice d = 0;
    std::array<uint8_t, 16> u{};
    ASSERT_EQ(cuda.DeviceGet(&d, i), 0);
    ASSERT_EQ(cuda.DeviceGetUuid(&u, d), 0);
    if (u == uuid) device = d;
  }
  ASSERT_GE(device, 0) << "no CUDA device has the session's device UUID " << dist::uuid_text(uuid);
  dist::CuContext context = nullptr;
  ASSERT_EQ(cuda.DevicePrimaryCtxRetain(&context, device), 0);
  ASSERT_EQ(cuda.CtxSetCurrent(context), 0);
  std::array<uint8_t, 16> cuda_uuid{};
  cuda.DeviceGetUuid(&cuda_uuid, device);
  {
    dist::CudaImports imports(cuda, context, cuda_uuid);
    const std::vector<ArenaSpan> spans = SessionAccess::arena_spans(*session, "s");
    ASSERT_EQ(spans.size(), 1u);
    ASSERT_EQ(spans[0].bytes, 64 * sizeof(float));
    const dist::CuDevicePtr p = imports.pointer(*spans[0].chunk) + spans[0].offset;
    EXPECT_EQ(imports.pointer(*spans[0].chunk) + spans[0].offset, p);  // imported once
    EXPECT_EQ(imports.count(), 1u);
    std::vector<float> seen(64);
    ASSERT_EQ(cuda.MemcpyDtoH(seen.data(), p, 64 * sizeof(float)), 0);
    EXPECT_EQ(seen, values);
    std::vector<float> written(64);
    for (size_t i = 0; i < written.size(); ++i) written[i] = 100.0f + static_cast<float>(i);
    ASSERT_EQ(cuda.MemcpyHtoD(p, written.data(), 64 * sizeof(float)), 0);
    ASSERT_EQ(cuda.CtxSynchronize(), 0);  // the copy's DMA done before Vulkan reads
    EXPECT_EQ(session->get_f32("s"), written);
    session->set("x", std::vector<float>(64, 1.0f));
    session->step();
    const std::vector<float> y = session->get_f32("y");
    for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], written[i] + 1.0f) << i;
    session.reset();  // frees the chunk: the import is released with it
    EXPECT_EQ(imports.count(), 0u);
  }
  cuda.DevicePrimaryCtxRelease(device);
}

TEST(NcclEngine, ATrainerOnTheEngineTrainsAsOneWithout) {
  REQUIRE_NCCL();
  Alone alone;
  auto train = [](std::shared_ptr<Communicator> comm) {
    auto net = std::make_shared<nn::Sequential>();
    net->push_back(std::make_shared<nn::Linear>(test::kClassesIn, 16));
    net->push_back(std::make_shared<nn::GELU>());
    net->push_back(std::make_shared<nn::Linear>(16, test::kClassesOut));
    net->seed(3);
    Graph g;
    const Tensor logits = net->forward(g.input("x", {8, test::kClassesIn}));
    g.output("logits", logits);
    const Tensor loss = cross_entropy(logits, g.input("y", {8}, DType::i32));
    TrainerOptions o;
    o.progress = TrainerOptions::Progress::none;
    o.optimizer = Optimizer::adamw({.lr = 0.01});
    o.epochs = 2;
    o.seed = 4;
    o.communicator = std::move(comm);
    Trainer t(loss, o);
    const TrainHistory h = t.fit(test::classes_data(64, 5));
    std::map<std::string, std::vector<float>> w;
    for (const std::string& n : t.session().parameter_names()) w[n] = t.session().get_f32(n);
    return std::pair{h.epochs.back().metrics.at("loss"), w};
  };
  const auto [loss_plain, plain] = train(nullptr);
  const auto [loss_nccl, nccl] = train(connect_distributed({.engine = DistributedEngine::nccl}));
  EXPECT_NEAR(loss_plain, loss_nccl, 1e-6);
  for (const auto& [name, w] : plain) {
    const std::vector<float>& v = nccl.at(name);
    ASSERT_EQ(w.size(), v.size());
    for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(w[i], v[i], 1e-6) << name << "[" << i << "]";
  }
}

}  // namespace
}  // namespace mn
