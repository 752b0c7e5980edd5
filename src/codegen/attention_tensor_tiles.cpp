#include "codegen/attention_tensor_tiles.h"

#include <algorithm>

#include "codegen/lower_matmul_coop_wg.h"

namespace mn::codegen {

namespace {
constexpr uint64_t kMaxHead = 128;
}  // namespace

uint32_t tensor_attention_invocations(uint64_t d, uint64_t dv) {
  return std::max(d, dv) > 64 ? 256u : 128u;
}

bool tensor_attention_fits(uint64_t d, uint64_t dv,
                           const std::array<std::array<uint32_t, 3>, 4>& granularity,
                           const DeviceTraits& device) {
  if (d % 16 != 0 || dv % 16 != 0 || d > kMaxHead || dv > kMaxHead) return false;
  const int r = static_cast<int>(kTensorAttentionRows);
  const uint32_t n = tensor_attention_invocations(d, dv);
  // The heads' widths, and the block's: the forward's row sums are P times ones (R × R).
  for (const int w : {static_cast<int>(d), static_cast<int>(dv), r}) {
    if (!workgroup_tile_fits(r, r, w, n, granularity, device) ||
        !workgroup_tile_fits(r, w, r, n, granularity, device)) {
      return false;
    }
  }
  return true;
}

}  // namespace mn::codegen
