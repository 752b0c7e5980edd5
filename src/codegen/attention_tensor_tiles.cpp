#include "codegen/attention_tensor_tiles.h"

#include <algorithm>
#include <string>

#include "codegen/lower_matmul_coop_wg.h"

namespace mn::codegen {

namespace {
constexpr uint64_t kMaxHead = 128;

// The default first, the tile the kernels were measured with; kLargeGridTile below serves large
// grids; the others are offered to MN_TENSOR_ATTENTION_TILE and MN_TENSOR_ATTENTION_GRAD_TILE
// (measured slower, or not yet measured). w32 tiles keep a workgroup to one subgroup.
constexpr std::array<AttentionTensorTile, 10> kTiles{{
    {"r64c64", 64, 64, 0},
    {"r64c64w64", 64, 64, 64},
    {"r32c64w32", 32, 64, 32},
    {"r32c32w32", 32, 32, 32},
    {"r16c64w32", 16, 64, 32},
    {"r128c64w256", 128, 64, 256},
    {"r64c64w256", 64, 64, 256},
    {"r64c32w128", 64, 32, 128},
    {"r128c32w256", 128, 32, 256},
    {"r128c128w256", 128, 128, 256},
}};

// Taken where its grid gives every multiprocessor two workgroups: at L 8192 (batch 8, 9 heads
// over 3, d 64, bf16) forward and backward took 28.9 ms against 45.8 on the default tile, while
// on small grids (a 1 × 256 step, a 512-token prompt) the larger tiles were slower (perf.md,
// "Attention's tiles by grid").
constexpr const char* kLargeGridTile = "r128c32w256";

bool head_size_suits(uint64_t d, uint64_t dv) {
  return d % 16 == 0 && dv % 16 == 0 && d <= kMaxHead && dv <= kMaxHead && d > 0 && dv > 0;
}

AttentionTensorTile named_tile(const std::string& name, uint64_t d, uint64_t dv) {
  AttentionTensorTile t = kTiles.front();
  for (const AttentionTensorTile& o : kTiles) {
    if (name == o.name) t = o;
  }
  if (t.invocations == 0) t.invocations = tensor_attention_invocations(d, dv);
  return t;
}

}  // namespace

std::span<const AttentionTensorTile> attention_tensor_tiles() { return kTiles; }

namespace {

// The large-grid tile where the grid of `heads` × rows / its rows fills the device twice and
// `fits` it, else the default.
template <typename Fits>
AttentionTensorTile tile_for_grid(const DeviceTraits& device, uint64_t d, uint64_t dv,
                                  uint64_t heads, uint64_t rows, Fits fits) {
  const AttentionTensorTile large = named_tile(kLargeGridTile, d, dv);
  const uint64_t groups = heads * ((rows + large.rows - 1) / large.rows);
  if (groups >= 2 * static_cast<uint64_t>(device.groups_to_fill()) && fits(large)) return large;
  return named_tile("", d, dv);
}

}  // namespace

AttentionTensorTile forward_attention_tile(const DeviceTraits& device, uint64_t d, uint64_t dv,
                                           uint64_t heads, uint64_t rows) {
  if (!device.tensor_attention_tile.empty()) {
    return named_tile(device.tensor_attention_tile, d, dv);
  }
  return tile_for_grid(device, d, dv, heads, rows, [&](const AttentionTensorTile& t) {
    return forward_attention_fits(t, d, dv, device.coop_wg_granularity, device) &&
           forward_attention_fits(t, d, dv, device.coop_wg_bf16_granularity, device);
  });
}

AttentionTensorTile training_attention_tile(const DeviceTraits& device, uint64_t d, uint64_t dv,
                                            uint64_t heads, uint64_t rows) {
  if (!device.tensor_attention_grad_tile.empty()) {
    return named_tile(device.tensor_attention_grad_tile, d, dv);
  }
  return tile_for_grid(device, d, dv, heads, rows, [&](const AttentionTensorTile& t) {
    return training_attention_fits(t, d, dv, device.coop_wg_bf16_granularity, device);
  });
}

BlockSplit split_tile_blocks(const DeviceTraits& device, std::span<const uint64_t> blocks,
                             uint64_t heads, uint32_t fills) {
  uint64_t total = 0, longest = 0;
  for (const uint64_t b : blocks) {
    total += b * heads;
    longest = std::max(longest, b);
  }
  const BlockSplit whole{std::max<uint64_t>(longest, 1), 1};
  if (fills == 0 || longest < 2 * kMinSegmentBlocks) return whole;
  const uint64_t want =
      static_cast<uint64_t>(fills) * static_cast<uint64_t>(device.groups_to_fill());
  const uint64_t segment = std::max(kMinSegmentBlocks, (total + want - 1) / want);
  if (segment >= longest) return whole;
  return {segment, (longest + segment - 1) / segment};
}

uint32_t tensor_attention_invocations(uint64_t d, uint64_t dv) {
  return std::max(d, dv) > 64 ? 256u : 128u;
}

bool training_attention_fits(const AttentionTensorTile& t, uint64_t d, uint64_t dv,
                             const std::array<std::array<uint32_t, 3>, 4>& granularity,
                             const DeviceTraits& device) {
  if (!head_size_suits(d, dv)) return false;
  const int r = static_cast<int>(t.rows), c = static_cast<int>(t.cols);
  for (const int w : {static_cast<int>(d), static_cast<int>(dv)}) {
    if (!workgroup_tile_fits(r, c, w, t.invocations, granularity, device) ||
        !workgroup_tile_fits(r, w, c, t.invocations, granularity, device)) {
      return false;
    }
  }
  return true;
}

bool forward_attention_fits(const AttentionTensorTile& t, uint64_t d, uint64_t dv,
                            const std::array<std::array<uint32_t, 3>, 4>& granularity,
                            const DeviceTraits& device) {
  // An invocation per row stages the rows' reach at positions (attention_shape.h's tile_reach).
  if (!head_size_suits(d, dv) || t.invocations < t.rows) return false;
  const int r = static_cast<int>(t.rows), c = static_cast<int>(t.cols);
  return workgroup_tile_fits(r, c, static_cast<int>(d), t.invocations, granularity, device) &&
         workgroup_tile_fits(r, c, c, t.invocations, granularity, device) &&
         workgroup_tile_fits(r, static_cast<int>(dv), c, t.invocations, granularity, device);
}

}  // namespace mn::codegen
