#include "train/data_parallel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "distributed/device_average.h"
#include "vulkan/buffer.h"

namespace mn::train {

TensorBatch shard_batch(const TensorBatch& global, int rank, int64_t rows) {
  const int64_t begin = std::min<int64_t>(global.rows, rank * rows);
  const int64_t end = std::min<int64_t>(global.rows, begin + rows);
  TensorBatch b;
  b.epoch = global.epoch;
  b.step = global.step;
  b.rows = end - begin;
  b.indices.assign(global.indices.begin() + begin, global.indices.begin() + end);
  for (const auto& [name, c] : global.columns) {
    Column part;
    part.dtype = c.dtype;
    part.shape = c.shape;
    part.shape[0] = b.rows;
    const size_t w = c.row_bytes();
    part.bytes.assign(c.bytes.begin() + static_cast<ptrdiff_t>(begin * w),
                      c.bytes.begin() + static_cast<ptrdiff_t>(end * w));
    b.columns.emplace(name, std::move(part));
  }
  return b;
}

bool reduces_in_place(const Communicator& comm) {
  return dynamic_cast<const dist::DeviceAverage*>(&comm) != nullptr;
}

namespace {

// The tensors' arena spans where all of them lie in exportable memory; else nothing.
std::vector<dist::DeviceTensor> device_tensors(Session& s, const std::vector<std::string>& names) {
  std::vector<dist::DeviceTensor> tensors;
  for (const std::string& n : names) {
    dist::DeviceTensor t{SessionAccess::arena_spans(s, n), s.type_of(n).dtype};
    for (const ArenaSpan& span : t.spans) {
      if (!span.chunk->exportable()) return {};
    }
    tensors.push_back(std::move(t));
  }
  return tensors;
}

}  // namespace

void average_over_ranks(Session& s, const std::vector<std::string>& names, Communicator& comm) {
  if (auto* device = dynamic_cast<dist::DeviceAverage*>(&comm); device && !names.empty()) {
    const std::vector<dist::DeviceTensor> tensors = device_tensors(s, names);
    if (!tensors.empty()) {
      device->average_in_place(tensors);
      return;
    }
  }
  std::vector<size_t> offsets;
  std::vector<float> all;
  for (const std::string& n : names) {
    offsets.push_back(all.size());
    if (s.type_of(n).dtype == DType::f32) {
      const std::vector<std::byte> raw = s.get_raw(n);
      const size_t at = all.size();
      all.resize(at + raw.size() / sizeof(float));
      std::memcpy(all.data() + at, raw.data(), raw.size());
    } else {
      const std::vector<float> v = s.get(n).to_f32();
      all.insert(all.end(), v.begin(), v.end());
    }
  }
  offsets.push_back(all.size());
  comm.all_reduce_sum(all);
  const float scale = 1.0f / static_cast<float>(comm.size());
  if (comm.size() > 1) {
    for (float& v : all) v *= scale;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const auto* first = reinterpret_cast<const std::byte*>(all.data() + offsets[i]);
    s.set_raw(names[i], DType::f32, {first, (offsets[i + 1] - offsets[i]) * sizeof(float)});
  }
}

std::set<std::string> transient_sums(const SplitTrainingStep& split, const Optimizer& opt) {
  if (opt.accumulate > 1) return {};
  return {split.gradient_sums.begin(), split.gradient_sums.end()};
}

namespace {

// Whether state `name` belongs to a parameter ("<param>/m", "<param>/grad_accum").
bool parameter_state(const std::string& name, const std::set<std::string>& params) {
  const size_t slash = name.find('/');
  return slash != std::string::npos && params.count(name.substr(0, slash));
}

// States of the model itself (BatchNorm's running statistics), which each rank updates from its
// own samples: floating-point states that belong to no parameter.
std::vector<std::string> model_statistics(const Session& s) {
  const std::vector<std::string> p = s.parameter_names();
  const std::set<std::string> params(p.begin(), p.end());
  std::vector<std::string> names;
  for (const std::string& n : s.state_names()) {
    if (!parameter_state(n, params) && is_float(s.type_of(n).dtype)) names.push_back(n);
  }
  return names;
}

}  // namespace

void update_over_ranks(Session& s, const SplitTrainingStep& split, const Optimizer& opt,
                       double lr, int64_t update, Communicator& comm, bool check_ranks) {
  average_over_ranks(s, split.gradient_sums, comm);
  for (const auto& [name, value] : step_scalars(opt, lr, update)) {
    s.set("update", name, Array::scalar(value));
  }
  s.step("update");
  // Running means of equal shards average to the whole batch's running mean; running
  // variances to the mean of the shards' (without the spread between their means).
  if (const std::vector<std::string> stats = model_statistics(s); !stats.empty()) {
    average_over_ranks(s, stats, comm);
  }
  if (check_ranks) check_same_parameters(s, comm, update);
}

void check_same_parameters(Session& s, Communicator& comm, int64_t update) {
  std::vector<std::string> names = s.parameter_names();
  const std::set<std::string> params(names.begin(), names.end());
  for (const std::string& n : s.state_names()) {
    if (parameter_state(n, params)) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a
  for (const std::string& n : names) {
    for (std::byte b : s.get_raw(n)) hash = (hash ^ static_cast<uint8_t>(b)) * 0x100000001b3ull;
  }
  uint64_t rank0 = hash;
  comm.broadcast(std::as_writable_bytes(std::span(&rank0, 1)), 0);
  std::vector<double> differs(static_cast<size_t>(comm.size()), 0.0);
  differs[static_cast<size_t>(comm.rank())] = hash == rank0 ? 0.0 : 1.0;
  comm.all_reduce_sum(differs);
  std::string ranks;
  for (size_t r = 0; r < differs.size(); ++r) {
    if (differs[r] != 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!ranks.empty()) {
    throw DistributedError("rank " + std::to_string(comm.rank()) + " of " +
                           std::to_string(comm.size()) + ": after update " +
                           std::to_string(update) + " the parameters and optimizer states of " +
                           "rank(s) " + ranks + " differ from rank 0's (checksums of " +
                           std::to_string(names.size()) + " tensors)");
  }
}

void broadcast_persistents(Session& s, Communicator& comm) {
  if (comm.size() == 1) return;
  std::vector<std::string> names = s.parameter_names();
  for (const std::string& n : s.state_names()) names.push_back(n);
  for (const std::string& n : names) {
    std::vector<std::byte> bytes = s.get_raw(n);
    comm.broadcast(bytes, 0);
    if (comm.rank() != 0) s.set_raw(n, s.type_of(n).dtype, bytes);
  }
}

}  // namespace mn::train
