#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <numeric>
#include <set>
#include <thread>

#include <meganeura/data.h>
#include <meganeura/error.h>

namespace mn {
namespace {

using namespace std::chrono_literals;

// n samples of shape [2, 3]; sample i holds 6i, 6i+1, ... and label i % 7.
std::shared_ptr<const Dataset> make_data(int64_t n) {
  auto d = std::make_shared<Dataset>();
  d->sample_shape = {2, 3};
  for (int64_t i = 0; i < n * 6; ++i) d->inputs.push_back(static_cast<float>(i));
  for (int64_t i = 0; i < n; ++i) d->labels.push_back(static_cast<int32_t>(i % 7));
  d->class_names = {"a", "b", "c", "d", "e", "f", "g"};
  return d;
}

std::vector<int64_t> epoch_indices(DataLoader& loader) {
  std::vector<int64_t> all;
  for (int64_t s = 0; s < loader.batches_per_epoch(); ++s) {
    Batch b = loader.next();
    all.insert(all.end(), b.indices.begin(), b.indices.end());
  }
  return all;
}

int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST(DataLoader, EverySampleExactlyOncePerEpochWithMatchingRows) {
  auto data = make_data(103);
  for (int64_t prefetch : {0, 3}) {
    DataLoader loader(data, {.batch_size = 10, .seed = 42, .prefetch = prefetch});
    ASSERT_EQ(loader.batches_per_epoch(), 11);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<int64_t> seen;
      for (int64_t step = 0; step < 11; ++step) {
        Batch b = loader.next();
        EXPECT_EQ(b.epoch, epoch);
        EXPECT_EQ(b.step, step);
        const int64_t n = step == 10 ? 3 : 10;  // the partial batch is kept
        ASSERT_EQ(b.size(), n);
        EXPECT_EQ(b.inputs_shape, (Shape{n, 2, 3}));
        ASSERT_EQ(b.inputs.size(), static_cast<size_t>(n * 6));
        for (int64_t i = 0; i < n; ++i) {
          const int64_t row = b.indices[i];
          EXPECT_EQ(b.labels[i], row % 7);
          for (int k = 0; k < 6; ++k)
            EXPECT_EQ(b.inputs[i * 6 + k], static_cast<float>(row * 6 + k));
        }
        seen.insert(seen.end(), b.indices.begin(), b.indices.end());
      }
      std::vector<int64_t> sorted = seen;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int64_t> expect(103);
      std::iota(expect.begin(), expect.end(), 0);
      EXPECT_EQ(sorted, expect) << "epoch " << epoch;
      EXPECT_EQ(seen, loader.epoch_order(epoch));
      EXPECT_NE(seen, expect) << "shuffled";
    }
    EXPECT_EQ(loader.position(), (DataLoader::Position{3, 0}));
  }
}

TEST(DataLoader, OrderIsAFunctionOfSeedAndEpoch) {
  auto data = make_data(50);
  DataLoader a(data, {.batch_size = 8, .seed = 7});
  DataLoader b(data, {.batch_size = 8, .seed = 7, .prefetch = 0});
  DataLoader c(data, {.batch_size = 8, .seed = 8});
  std::set<std::vector<int64_t>> orders;
  for (int epoch = 0; epoch < 4; ++epoch) {
    auto ia = epoch_indices(a);
    EXPECT_EQ(ia, epoch_indices(b)) << epoch;
    EXPECT_NE(ia, epoch_indices(c)) << epoch;
    orders.insert(ia);
  }
  EXPECT_EQ(orders.size(), 4u) << "every epoch has its own order";
  // Recomputing an epoch does not depend on what ran before.
  DataLoader fresh(data, {.batch_size = 8, .seed = 7});
  EXPECT_EQ(fresh.epoch_order(3), a.epoch_order(3));

  DataLoader plain(data, {.batch_size = 8, .shuffle = false});
  std::vector<int64_t> identity(50);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(epoch_indices(plain), identity);
  EXPECT_EQ(epoch_indices(plain), identity);
}

TEST(DataLoader, DropLastKeepsOnlyFullBatches) {
  auto data = make_data(103);
  DataLoader loader(data, {.batch_size = 10, .seed = 1, .drop_last = true});
  EXPECT_EQ(loader.batches_per_epoch(), 10);
  std::set<int64_t> dropped_union;
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto seen = epoch_indices(loader);
    EXPECT_EQ(seen.size(), 100u);
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 100u);
    auto order = loader.epoch_order(epoch);
    EXPECT_TRUE(std::equal(seen.begin(), seen.end(), order.begin()));
    dropped_union.insert(order.begin() + 100, order.end());
  }
  EXPECT_GT(dropped_union.size(), 3u) << "a different remainder is dropped each epoch";
  DataLoader exact(make_data(30), {.batch_size = 10, .drop_last = true});
  EXPECT_EQ(exact.batches_per_epoch(), 3);
}

TEST(DataLoader, SeekResumesExactly) {
  auto data = make_data(37);
  DataLoaderOptions opt{.batch_size = 5, .seed = 99};
  DataLoader ref(data, opt);  // 8 batches per epoch, the last of 2
  std::vector<Batch> stream;
  for (int i = 0; i < 30; ++i) stream.push_back(ref.next());

  for (int64_t prefetch : {0, 2}) {
    opt.prefetch = prefetch;
    DataLoader resumed(data, opt);
    resumed.seek(1, 3);  // batch 11 of the stream
    EXPECT_EQ(resumed.position(), (DataLoader::Position{1, 3}));
    for (int i = 11; i < 30; ++i) {
      Batch b = resumed.next();
      EXPECT_EQ(b.epoch, stream[i].epoch);
      EXPECT_EQ(b.step, stream[i].step);
      EXPECT_EQ(b.indices, stream[i].indices) << i;
      EXPECT_EQ(b.inputs, stream[i].inputs) << i;
      EXPECT_EQ(b.labels, stream[i].labels) << i;
    }
    // Seeking back mid-run discards what was prefetched.
    resumed.seek(0, 0);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(resumed.next().indices, stream[i].indices) << i;
    resumed.seek(2, 8);  // the end of epoch 2 is the start of epoch 3
    EXPECT_EQ(resumed.position(), (DataLoader::Position{3, 0}));
    EXPECT_EQ(resumed.next().indices, stream[24].indices);
  }
  EXPECT_THROW(ref.seek(0, 9), Error);
  EXPECT_THROW(ref.seek(-1, 0), Error);
  EXPECT_THROW(ref.seek(0, -1), Error);
}

TEST(DataLoader, TransformRunsOnEveryBatchAndErrorsReachTheCaller) {
  auto data = make_data(20);
  for (int64_t prefetch : {0, 3}) {
    SCOPED_TRACE(prefetch);
    DataLoader loader(data,
                      {.batch_size = 4, .seed = 3, .prefetch = prefetch, .transform = [](Batch& b) {
                         if (b.epoch == 1 && b.step == 2) throw FormatError("bad batch 1/2");
                         for (float& v : b.inputs) v = -v;
                       }});
    for (int i = 0; i < 7; ++i) {
      Batch b = loader.next();
      EXPECT_EQ(b.inputs[0], -static_cast<float>(b.indices[0] * 6));
    }
    for (int repeat = 0; repeat < 2; ++repeat) {  // the failure is sticky
      try {
        loader.next();
        ADD_FAILURE() << "no exception";
      } catch (const FormatError& e) {
        EXPECT_STREQ(e.what(), "bad batch 1/2");
      }
    }
    EXPECT_EQ(loader.position(), (DataLoader::Position{1, 2}));
    loader.seek(1, 3);  // skip the bad batch
    Batch b = loader.next();
    EXPECT_EQ(b.epoch, 1);
    EXPECT_EQ(b.step, 3);
  }
}

TEST(DataLoader, PrefetchIsBoundedAndStopsWhenDestroyedMidEpoch) {
  auto data = make_data(1000);
  const int before = thread_count();
  auto built = std::make_shared<std::atomic<int>>(0);
  auto loader = std::make_unique<DataLoader>(
      data,
      DataLoaderOptions{.batch_size = 10, .seed = 5, .prefetch = 4, .transform = [built](Batch&) {
                          ++*built;
                          std::this_thread::sleep_for(1ms);
                        }});
  EXPECT_EQ(thread_count(), before + 1);
  loader->next();
  loader->next();
  // 2 consumed and 4 queued; then at most one more is built while waiting for room.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (built->load() < 2 + 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(50ms);
  EXPECT_GE(built->load(), 2 + 4);
  EXPECT_LE(built->load(), 2 + 4 + 1);

  auto destroyed = std::async(std::launch::async, [&] { loader.reset(); });
  ASSERT_EQ(destroyed.wait_for(10s), std::future_status::ready) << "destructor hangs";
  const int after_destroy = built->load();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(built->load(), after_destroy) << "nothing runs after destruction";
  EXPECT_EQ(thread_count(), before);

  // A loader destroyed while its producer is blocked inside a slow transform also stops.
  auto slow = std::make_unique<DataLoader>(
      data, DataLoaderOptions{.batch_size = 10, .prefetch = 1, .transform = [](Batch&) {
                                std::this_thread::sleep_for(20ms);
                              }});
  slow->next();
  auto gone = std::async(std::launch::async, [&] { slow.reset(); });
  ASSERT_EQ(gone.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(thread_count(), before);
}

TEST(DataLoader, RejectsBadOptions) {
  auto data = make_data(5);
  EXPECT_THROW(DataLoader(data, {.batch_size = 0}), Error);
  EXPECT_THROW(DataLoader(data, {.batch_size = 6, .drop_last = true}), Error);
  EXPECT_THROW(DataLoader(data, {.prefetch = -1}), Error);
  EXPECT_THROW(DataLoader(nullptr), Error);
  EXPECT_THROW(DataLoader(make_data(0)), Error);
  auto bad = std::make_shared<Dataset>(*data);
  bad->labels[0] = 9;  // only 7 classes
  EXPECT_THROW(DataLoader{bad}, Error);
  DataLoader one(data, {.batch_size = 6});  // a single partial batch per epoch
  EXPECT_EQ(one.batches_per_epoch(), 1);
  EXPECT_EQ(one.next().size(), 5);
  EXPECT_EQ(one.position(), (DataLoader::Position{1, 0}));
}

TEST(DataLoader, BatchArrays) {
  DataLoader loader(make_data(9), {.batch_size = 4, .shuffle = false});
  Batch b = loader.next();
  Array x = b.inputs_array();
  EXPECT_EQ(x.shape, (Shape{4, 2, 3}));
  EXPECT_EQ(x.dtype, DType::f32);
  EXPECT_EQ(x.data[7], 7.0);
  Array y = b.labels_array();
  EXPECT_EQ(y.shape, (Shape{4}));
  EXPECT_EQ(y.dtype, DType::i32);
  EXPECT_EQ(y.data, (std::vector<double>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace mn
