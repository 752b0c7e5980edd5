#pragma once
// Every op of the graph language as a free function. All are N-D with numpy broadcasting where
// they combine operands; negative axes count from the end. Included by <meganeura/graph.h>.
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include <meganeura/dtype.h>

namespace mn {

class Tensor;

// ---- elementwise (src/ir/ops/elementwise.cpp) ----
Tensor add(Tensor a, Tensor b);
Tensor sub(Tensor a, Tensor b);
Tensor mul(Tensor a, Tensor b);
Tensor div(Tensor a, Tensor b);
Tensor pow(Tensor a, Tensor b);
Tensor maximum(Tensor a, Tensor b);
Tensor minimum(Tensor a, Tensor b);
Tensor neg(Tensor x);
Tensor abs(Tensor x);
Tensor exp(Tensor x);
Tensor log(Tensor x);
Tensor sqrt(Tensor x);
Tensor rsqrt(Tensor x);
Tensor sin(Tensor x);
Tensor cos(Tensor x);
Tensor tanh(Tensor x);
Tensor sigmoid(Tensor x);
Tensor relu(Tensor x);
Tensor leaky_relu(Tensor x, double negative_slope = 0.01);
enum class GeluApprox : uint8_t { none, tanh };
Tensor gelu(Tensor x, GeluApprox approximate = GeluApprox::none);
Tensor silu(Tensor x);
Tensor softplus(Tensor x, double beta = 1.0, double threshold = 20.0);
Tensor where(Tensor cond, Tensor a, Tensor b);  // cond != 0 selects a
Tensor eq(Tensor a, Tensor b);
Tensor ne(Tensor a, Tensor b);
Tensor lt(Tensor a, Tensor b);
Tensor le(Tensor a, Tensor b);
Tensor gt(Tensor a, Tensor b);
Tensor ge(Tensor a, Tensor b);
Tensor cast(Tensor x, DType dtype);
Tensor clamp(Tensor x, double lo, double hi);
Tensor stop_gradient(Tensor x);

Tensor operator+(Tensor a, Tensor b);
Tensor operator-(Tensor a, Tensor b);
Tensor operator*(Tensor a, Tensor b);
Tensor operator/(Tensor a, Tensor b);
Tensor operator-(Tensor x);
// A double operand becomes a scalar constant of the tensor's dtype.
Tensor operator+(Tensor a, double b);
Tensor operator+(double a, Tensor b);
Tensor operator-(Tensor a, double b);
Tensor operator-(double a, Tensor b);
Tensor operator*(Tensor a, double b);
Tensor operator*(double a, Tensor b);
Tensor operator/(Tensor a, double b);
Tensor operator/(double a, Tensor b);

// ---- reductions (src/ir/ops/reduce.cpp); empty axes = all axes ----
Tensor sum(Tensor x, std::vector<int64_t> axes = {}, bool keepdims = false);
Tensor mean(Tensor x, std::vector<int64_t> axes = {}, bool keepdims = false);
Tensor max(Tensor x, std::vector<int64_t> axes = {}, bool keepdims = false);
Tensor min(Tensor x, std::vector<int64_t> axes = {}, bool keepdims = false);
Tensor argmax(Tensor x, int64_t axis, bool keepdims = false);  // i32
Tensor variance(Tensor x, std::vector<int64_t> axes = {}, bool keepdims = false,
                int64_t correction = 0);
// Sums a broadcast result back to `shape` (the adjoint of broadcasting).
Tensor sum_to(Tensor x, const Shape& shape);

// ---- matmul (src/ir/ops/matmul.cpp): numpy matmul semantics, batch dims broadcast ----
Tensor matmul(Tensor a, Tensor b, bool transpose_a = false, bool transpose_b = false);

// ---- shape (src/ir/ops/shape.cpp) ----
Tensor reshape(Tensor x, Shape shape);  // one -1 is inferred
Tensor permute(Tensor x, std::vector<int64_t> perm);
Tensor transpose(Tensor x, int64_t axis0 = -2, int64_t axis1 = -1);
Tensor broadcast_to(Tensor x, Shape shape);
Tensor squeeze(Tensor x, std::vector<int64_t> axes = {});  // empty: every size-1 axis
Tensor unsqueeze(Tensor x, int64_t axis);
Tensor slice(Tensor x, int64_t axis, int64_t start, int64_t stop, int64_t step = 1);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
std::vector<Tensor> split(Tensor x, const std::vector<int64_t>& sizes, int64_t axis);
// pads[i] = {before, after} for axis i (fewer entries pad the leading axes only).
Tensor pad(Tensor x, const std::vector<std::pair<int64_t, int64_t>>& pads, double value = 0.0);
// out[..., i, ...] = x[..., indices[i], ...] along `axis` (indices i32, any shape): embedding
// lookup.
Tensor take(Tensor x, Tensor indices, int64_t axis = 0);
inline Tensor gather(Tensor x, Tensor indices, int64_t axis = 0) { return take(x, indices, axis); }
// out = x, then out[..., indices[i], ...] += updates[..., i, ...] along `axis` (adjoint of take).
Tensor scatter_add(Tensor x, Tensor indices, Tensor updates, int64_t axis = 0);
Tensor one_hot(Tensor indices, int64_t depth, DType dtype = DType::f32);
// KV-cache update (src/ir/ops/cache.cpp): cache [..., T, D], update [..., L, D] with the same
// leading axes, positions i32 [lead[:k]..., L] (a prefix of the leading axes: [L] shared, [B, L]
// per batch, [B, H, L] per head). Returns cache with row positions[.., i] replaced by
// update[..., i, :] (a repeated position keeps the last). A position outside [0, T) is an error
// in the reference; the GPU skips it. assign(state, cache_write(state, ...)) updates the state's
// buffer in place. Not differentiable.
Tensor cache_write(Tensor cache, Tensor update, Tensor positions);

// ---- normalization, activations with a reduction, regularization (src/ir/ops/nn.cpp) ----
Tensor softmax(Tensor x, int64_t axis = -1);
Tensor log_softmax(Tensor x, int64_t axis = -1);
// Normalizes over the trailing `normalized_dims` axes; gamma/beta have that trailing shape (or are
// invalid Tensors for none).
Tensor layer_norm(Tensor x, Tensor gamma, Tensor beta, int64_t normalized_dims = 1,
                  double eps = 1e-5);
Tensor rms_norm(Tensor x, Tensor gamma, double eps = 1e-6, int64_t normalized_dims = 1);
// x: [N, C, ...]; gamma/beta: [C].
Tensor group_norm(Tensor x, int64_t groups, Tensor gamma, Tensor beta, double eps = 1e-5);
struct BatchNormResult {
  Tensor y;
  Tensor running_mean;  // updated running statistics (training); the inputs unchanged in eval
  Tensor running_var;
};
// x: [N, C, ...]. Training normalizes with batch statistics (biased variance) and updates the
// running ones with momentum (unbiased variance, as PyTorch); eval uses the running ones.
BatchNormResult batch_norm(Tensor x, Tensor gamma, Tensor beta, Tensor running_mean,
                           Tensor running_var, bool training, double momentum = 0.1,
                           double eps = 1e-5);
// Inverted dropout with a counter-based generator: the mask depends only on (seed, element index).
Tensor dropout(Tensor x, double p, uint64_t seed, bool training = true);

// ---- convolution, pooling, resampling (src/ir/ops/conv.cpp, pool.cpp) ----
struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};
// x: [N, C, H, W]; w: [O, C/groups, kh, kw]; bias: [O] or invalid.
Tensor conv2d(Tensor x, Tensor w, Tensor bias = {}, Conv2dOptions opt = {});
struct Conv1dOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
};
// x: [..., C, L]; w: [O, C/groups, k] (PyTorch's Conv1d layout); bias: [O] or invalid. Output
// [..., O, L_out]. Runs as conv2d over [..., C, 1, L] and [O, C/groups, 1, k] views (a reshape
// aliases its input: no copy, no memory), so it shares conv2d's kernels, fusions and gradients.
Tensor conv1d(Tensor x, Tensor w, Tensor bias = {}, Conv1dOptions opt = {});
struct ConvTranspose2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> output_padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};
// x: [N, C, H, W]; w: [C, O/groups, kh, kw] (PyTorch's layout); bias: [O] or invalid.
Tensor conv_transpose2d(Tensor x, Tensor w, Tensor bias = {}, ConvTranspose2dOptions opt = {});
struct Pool2dOptions {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{0, 0};  // 0: equal to kernel
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};  // max pool only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg pool only
};
Tensor max_pool2d(Tensor x, Pool2dOptions opt = {});
Tensor avg_pool2d(Tensor x, Pool2dOptions opt = {});
Tensor adaptive_avg_pool2d(Tensor x, int64_t out_h, int64_t out_w);
inline Tensor global_avg_pool2d(Tensor x) { return adaptive_avg_pool2d(x, 1, 1); }
Tensor upsample_nearest2d(Tensor x, int64_t out_h, int64_t out_w);
Tensor upsample_bilinear2d(Tensor x, int64_t out_h, int64_t out_w, bool align_corners = false);

// ---- attention (src/ir/ops/attention.cpp) ----
// q: [..., Hq, Lq, D]; k, v: [..., Hkv, Lk, D] with Hq a multiple of Hkv (grouped-query heads).
// mask: additive, broadcastable to [..., Hq, Lq, Lk], or invalid. scale <= 0 means 1/sqrt(D).
Tensor scaled_dot_product_attention(Tensor q, Tensor k, Tensor v, Tensor mask = {},
                                    bool causal = false, double scale = 0.0);
// Rotary embedding, Hugging Face half-split convention: x: [..., L, D] with positions
// position_offset + [0, L).
Tensor rope(Tensor x, double theta = 10000.0, int64_t position_offset = 0);
// Rotary embedding at runtime positions (i32, broadcastable to x's shape without its last
// axis: x [B, H, L, D] with positions [B, 1, L] or [L]), half-split convention as rope.
Tensor rope_positions(Tensor x, Tensor positions, double theta = 10000.0);
// Llama 3's frequency rescaling (config.json rope_scaling with rope_type "llama3").
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;  // original_max_position_embeddings
};
Tensor rope_positions(Tensor x, Tensor positions, double theta, const Llama3RopeScaling& scaling);
// Attention over a KV cache: q [..., Hq, Lq, D], k [..., Hkv, T, D], v [..., Hkv, T, Dv] with T
// the cache's slots; query i sees keys j <= positions[..., i] (i32, broadcastable to
// [..., Hq, Lq], e.g. [B, 1, Lq]); a negative position sees no key and gives 0. Prefill passes
// positions 0..L-1 (or per sequence), decoding Lq = 1 at the number of tokens so far.
Tensor cached_attention(Tensor q, Tensor k, Tensor v, Tensor positions, double scale = 0.0);

// ---- sampling (src/ir/ops/sampling.cpp) ----
// The next token id of each row of logits [B, V] (i32 [B]), as Hugging Face's sampling with its
// warpers in order: temperature, top_k, top_p. temperature (float), top_k (i32) and top_p
// (float) are [] or [B]: temperature <= 0 is greedy (the first largest logit), top_k <= 0 or
// >= V and top_p >= 1 keep everything; ties with the last kept value stay. seed and step are
// u32 or i32 scalars: the draw is a function of (seed, step, row) only, so one recorded step
// serves every token by advancing `step`.
Tensor sample_tokens(Tensor logits, Tensor temperature, Tensor top_k, Tensor top_p, Tensor seed,
                     Tensor step);

// ---- losses (src/ir/ops/loss.cpp) ----
enum class Reduction : uint8_t { none, mean, sum };
struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};
// logits: [N, C, ...]; target: i32 [N, ...] class indices or float [N, C, ...] probabilities.
Tensor cross_entropy(Tensor logits, Tensor target, CrossEntropyOptions opt = {});
Tensor nll_loss(Tensor log_probs, Tensor target, Reduction reduction = Reduction::mean,
                int64_t ignore_index = -100);
Tensor mse_loss(Tensor x, Tensor y, Reduction reduction = Reduction::mean);
Tensor l1_loss(Tensor x, Tensor y, Reduction reduction = Reduction::mean);
Tensor smooth_l1_loss(Tensor x, Tensor y, Reduction reduction = Reduction::mean, double beta = 1.0);
Tensor binary_cross_entropy(Tensor p, Tensor y, Reduction reduction = Reduction::mean);
Tensor binary_cross_entropy_with_logits(Tensor x, Tensor y, Reduction reduction = Reduction::mean);

}  // namespace mn
