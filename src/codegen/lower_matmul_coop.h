#pragma once
// Cooperative-matrix (tensor core) matmul: f16 operands staged from f32 or f16 storage through
// shared memory, f32 accumulation in 16×16×16 subgroup matrices (GL_NV_cooperative_matrix),
// results stored through the matmul epilogue. See docs/tensor-cores.md.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "codegen/kernel.h"
#include "codegen/lower_matmul.h"
#include "codegen/matmul_epilogue.h"

namespace mn::codegen {

// A workgroup tile of bm×bn outputs computed by (bm/wm)·(bn/wn) subgroups of wm×wn each, in
// steps of bk along K.
struct CoopTile {
  const char* name = "";
  int bm = 0, bn = 0, bk = 0, wm = 0, wn = 0;
  int subgroups() const { return (bm / wm) * (bn / wn); }
};

// The tile configurations, smallest first; their index is the bit in
// DeviceTraits::coop_tiles.
std::span<const CoopTile> coop_tiles();

// How one kernel stages its operands.
struct CoopOptions {
  int stages = 1;       // shared-memory buffers (2: one barrier per K step)
  bool swizzle = true;  // neighbouring workgroups share B column tiles (L2 reuse)
  // f32 operands are first converted to f16 in scratch buffers, scaled by a power of two
  // chosen from their largest magnitude (two launches each: max, then pack); the matmul then
  // moves half the bytes, converts nothing, and keeps the precision of operands far from 1
  // (f16 alone would flush the small activations and gradients of deep networks to zero).
  bool prepack = true;
  // Without prepacking, f32 operands are converted while staged, scaled by the same power of
  // two (one magnitude launch each, the exponent reduced by every workgroup); false stages
  // them unscaled (only to show that the bounds catch it).
  bool scale_staged = true;
};

// Shared memory one workgroup of `t` needs with these options.
uint32_t coop_shared_bytes(const CoopTile& t, const MatmulGeometry& g, const CoopOptions& o);

// Why the cooperative kernel is not used for this node (empty: it is). Considers the device
// (DeviceTraits::coop, subgroup size, tiles that passed the self-test), operand dtypes (f32,
// f16) and the threshold below which the scalar kernel is as fast.
std::string coop_rejection(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch);

// The tile for this shape: the largest whose grid still fills the device's multiprocessors
// (smaller tiles for small M·N), among those the device accepted and whose shared memory fits.
// For measurements, MN_COOP_TILE=<name> takes that tile wherever it fits (none otherwise),
// MN_COOP_STAGES=1 keeps one shared stage and MN_COOP_PREPACK=0 stages f32 operands scaled
// instead of packing them.
std::optional<int> choose_coop_tile(const MatmulGeometry& g, int64_t batch, const DeviceTraits& d);

// Options that fit the device for tile `t` (two stages where the shared memory allows).
CoopOptions coop_options_for(const CoopTile& t, const MatmulGeometry& g, const DeviceTraits& d);

// The kernel. Bindings: A, B, C, then the epilogue's extra operands.
Lowering lower_matmul_coop(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                           const CoopTile& t, const CoopOptions& o, const MatmulEpilogue* e);

// Zero padding of an operand's packed copy: each of its rows×cols matrices (in storage
// order) becomes a rows_padded×cols_padded one.
struct PackPadding {
  int64_t rows = 0, cols = 0, rows_padded = 0, cols_padded = 0;
};

// An operand to pack, as GLSL: `declarations` (the buffers it reads, bindings 0 ..
// bindings-1, and helper functions), statements `value` setting `float v` to packed element
// `uint i` (< count; zero in any padding), and statements `source_value` setting `float v` to
// source value `uint j` (< source_count): the values whose largest magnitude sets the scale
// (every value of the packed copy must be among them, or zero).
struct PackSource {
  std::string declarations;
  uint32_t bindings = 0;
  std::string value;
  uint64_t count = 0;
  std::string source_value;
  uint64_t source_count = 0;
};

// The largest magnitude of a PackSource's source values, in `count` partial maxima (floats) in
// scratch buffer `parts`: the launch absmax_coop_source appends.
struct CoopMagnitude {
  ArgRef parts;
  uint64_t count = 0;
};
CoopMagnitude absmax_coop_source(const PackSource& src, std::span<const KernelBinding> reads,
                                 const std::string& name, Lowering& l, int& scratch);
// GLSL `int coop_scale_exponent(float mx)`: the power of two e that brings an operand whose
// largest magnitude is mx near 2^15 in f16 (0 when mx is zero, infinite or NaN).
std::string coop_scale_exponent_function();

// GLSL statements of a kernel staging scaled operands (invocation index `lid`, `threads` of
// them, a power of two): the partial maxima PA[0, parts_a) and PB[0, parts_b) (0: that operand
// is not scaled) reduced across the workgroup in the shared float array `scratch` (2·threads
// floats, free before and after), declaring the exponents `int ea, eb` (coop_scale_exponent).
std::string coop_staged_exponents(uint32_t threads, uint64_t parts_a, uint64_t parts_b,
                                  const std::string& scratch);

// GLSL statements placing tile `tid` (of row_tiles × col_tiles tiles of bm × bn) at `uint row0,
// col0`: groups of up to `group_rows` row tiles walk the column tiles together, so the
// workgroups running at one time share B's tiles in L2 (and A's across each group).
std::string coop_tile_origin(int64_t group_rows, int64_t row_tiles, int64_t col_tiles, int bm,
                             int bn);

// GLSL of one K step of a subgroup kernel staging its operands in shared `S`: the fragment loads
// of a wm×wn subgroup block at (wm0, wn0) from A's slab at `abuf` and B's at `bbuf` and their
// products into acc<i>_<j>. Slab rows are `stride_a` / `stride_b` elements of S apart, an
// element holding `halves` halves; `ta`: A's slab is K×M (loaded column-major), `tb`: B's is N×K.
std::string coop_subgroup_products(const CoopTile& t, bool ta, bool tb, int64_t stride_a,
                                   int64_t stride_b, int halves);

// Appends the largest-magnitude and pack launches of `src` (binding `reads` as its bindings
// 0 ..) and returns the new scratch buffer holding the scaled f16 copy and its exponent (see
// pack_coop_operand).
ArgRef pack_coop_source(const PackSource& src, std::span<const KernelBinding> reads,
                        const std::string& name, const DeviceTraits& d, Lowering& l,
                        int& scratch);

// Appends the two launches that convert f32 input `i` to f16 scaled by a power of two (its
// largest magnitude mapped near 2^15) in a new scratch buffer, returned; scratch buffers are
// numbered from `scratch` on. The exponent e (the product is divided by 2^e) follows the
// packed halves as two 16-bit words, at half index coop_packed_exponent_index(halves), where
// `halves` is the element count of the packed copy (padding included).
ArgRef pack_coop_operand(const LowerContext& ctx, int i, Lowering& l, int& scratch,
                         const PackPadding* pad = nullptr);
uint64_t coop_packed_exponent_index(int64_t halves);
// The magnitude launch of f32 input `i` alone (its partial maxima in a new scratch buffer),
// for a kernel that stages the input scaled instead of packing it.
CoopMagnitude absmax_coop_operand(const LowerContext& ctx, int i, Lowering& l, int& scratch);

// Thresholds below which the scalar kernel is used, from H200 measurements (docs/perf.md):
// multiply-adds M·N·K per batch, and outputs M·N per batch (a 64×64×4096 product has one
// workgroup of work and runs faster on the scalar kernel).
inline constexpr int64_t kCoopMinMacs = int64_t{1} << 24;
inline constexpr int64_t kCoopMinOutputs = int64_t{1} << 16;
// Below this K, the cooperative kernel needs at least this many outputs, or multiply-adds, to
// win.
inline constexpr int64_t kCoopShortK = 1024;
inline constexpr int64_t kCoopShortKMinOutputs = int64_t{1} << 20;
inline constexpr int64_t kCoopShortKMinMacs = int64_t{1} << 29;

}  // namespace mn::codegen
