// Signal ops (opset 17): the window functions and the mel filter bank, constants of the sizes
// their known inputs give; DFT and STFT as one product of the signal with a constant Fourier
// basis (real and imaginary parts of every output frequency from real or complex samples).
#include <onnx/onnx_pb.h>

#include <cmath>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

constexpr double kPi = 3.14159265358979323846;

ElemType output_type(NodeContext& c) {
  const ElemType t = elem_type_of(static_cast<int>(c.attr_int("output_datatype", 1)),
                                  c.where() + " 'output_datatype'");
  if (!is_float_type(t) && !is_integer(t)) c.unsupported(std::string("output_datatype ") + elem_type_name(t));
  return t;
}

// A known scalar input that must be a whole number in [lo, 2^24].
int64_t whole(NodeContext& c, size_t i, const std::string& what, int64_t lo) {
  const double v = c.known_scalar(i, what);
  if (!(v >= static_cast<double>(lo)) || v != std::floor(v) || v > 16777216.0) {
    c.fail(what + " must be a whole number of at least " + std::to_string(lo) + ", got " +
           std::to_string(v));
  }
  return static_cast<int64_t>(v);
}

// a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N) for n < size, N = size (periodic) or size - 1.
void convert_window(NodeContext& c, double a0, double a1, double a2) {
  const int64_t size = whole(c, 0, "size", 1);
  c.host_limit(size, "the window");
  const bool periodic = c.attr_int("periodic", 1) != 0;
  const ElemType type = output_type(c);
  const double span = periodic ? static_cast<double>(size) : static_cast<double>(size - 1);
  Array w({size}, graph_dtype_of(type, c.where()));
  for (int64_t n = 0; n < size; ++n) {
    const double t = span > 0 ? 2.0 * kPi * static_cast<double>(n) / span : 0.0;
    w.data[static_cast<size_t>(n)] = a0 - a1 * std::cos(t) + a2 * std::cos(2.0 * t);
  }
  c.out_known(0, std::move(w), type);
}

// The triangular mel filters over the dft_length / 2 + 1 frequency bins, as ONNX defines them
// (bin edges on the mel scale, floored to whole bins).
void convert_mel_weight_matrix(NodeContext& c) {
  const int64_t mels = whole(c, 0, "num_mel_bins", 1);
  const int64_t dft = whole(c, 1, "dft_length", 1);
  const int64_t rate = whole(c, 2, "sample_rate", 1);
  const double lo = c.known_scalar(3, "lower_edge_hertz");
  const double hi = c.known_scalar(4, "upper_edge_hertz");
  if (!(lo >= 0.0) || !(hi > lo)) c.fail("the edges must satisfy 0 <= lower < upper");
  const int64_t bins = dft / 2 + 1;
  c.host_limit(bins * mels, "the mel weight matrix");
  auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  const double step = (mel(hi) - mel(lo)) / static_cast<double>(mels + 2);
  std::vector<int64_t> edge(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * step + mel(lo)) / 2595.0) - 1.0);
    edge[static_cast<size_t>(i)] =
        static_cast<int64_t>(std::floor(static_cast<double>(dft + 1) * hz / static_cast<double>(rate)));
  }
  const ElemType type = output_type(c);
  Array w({bins, mels}, graph_dtype_of(type, c.where()));
  auto set = [&](int64_t bin, int64_t m, double v) {
    if (bin < 0 || bin >= bins) c.fail("a filter edge falls outside the frequency bins");
    w.data[static_cast<size_t>(bin * mels + m)] = v;
  };
  for (int64_t m = 0; m < mels; ++m) {
    const int64_t left = edge[static_cast<size_t>(m)], center = edge[static_cast<size_t>(m + 1)],
                  right = edge[static_cast<size_t>(m + 2)];
    if (center == left) {
      set(center, m, 1.0);
    } else {
      for (int64_t j = left; j <= center; ++j) {
        set(j, m, static_cast<double>(j - left) / static_cast<double>(center - left));
      }
    }
    for (int64_t j = center; j < right; ++j) {
      set(j, m, static_cast<double>(right - j) / static_cast<double>(right - center));
    }
  }
  c.out_known(0, std::move(w), type);
}

// x [..., n, parts] (parts 1: real, 2: complex) transformed along its second-to-last axis to
// [..., K, 2]: the first min(n, length) samples, zero-padded to `length`, K = length or
// length / 2 + 1 (onesided), 1/length scaled when inverse.
Tensor fourier(NodeContext& c, Tensor x, int64_t length, bool inverse, bool onesided) {
  const int64_t n = x.dim(x.rank() - 2), parts = x.dim(x.rank() - 1);
  const int64_t k_count = onesided ? length / 2 + 1 : length;
  c.host_limit(n * parts * k_count * 2, "the Fourier basis");
  Array basis({n * parts, k_count * 2}, DType::f32);
  const double sign = inverse ? 1.0 : -1.0, scale = inverse ? 1.0 / static_cast<double>(length) : 1.0;
  for (int64_t j = 0; j < std::min(n, length); ++j) {
    for (int64_t k = 0; k < k_count; ++k) {
      // (j k) mod length keeps the angle small, so cos and sin stay exact for long signals.
      const double turn = static_cast<double>((j * k) % length) / static_cast<double>(length);
      const double cs = std::cos(sign * 2.0 * kPi * turn) * scale;
      const double sn = std::sin(sign * 2.0 * kPi * turn) * scale;
      auto at = [&](int64_t part, int64_t out) {
        return static_cast<size_t>((j * parts + part) * k_count * 2 + k * 2 + out);
      };
      basis.data[at(0, 0)] = cs;
      basis.data[at(0, 1)] = sn;
      if (parts == 2) {
        basis.data[at(1, 0)] = -sn;
        basis.data[at(1, 1)] = cs;
      }
    }
  }
  Shape lead = x.shape();
  lead.resize(lead.size() - 2);
  Shape flat_shape{numel(lead), n * parts};
  Tensor y = matmul(reshape(x, flat_shape), c.graph().constant(std::move(basis)));
  Shape out = lead;
  out.insert(out.end(), {k_count, 2});
  return reshape(y, out);
}

void convert_dft(NodeContext& c) {
  if (c.opset() >= 20) c.unsupported("DFT of opset 20 (axis as an input)");
  Tensor x = c.in(0);
  if (!is_float_type(c.type(0))) c.unsupported(std::string("inputs of ") + elem_type_name(c.type(0)));
  const int rank = static_cast<int>(x.rank());
  if (rank < 3 || (x.dim(rank - 1) != 1 && x.dim(rank - 1) != 2)) {
    c.fail("input must be [batch, ..., 1 or 2] (real or complex samples)");
  }
  int64_t axis = c.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 1 || axis > rank - 2) c.fail("axis must name a signal axis (1 to rank - 2)");
  const bool inverse = c.attr_int("inverse", 0) != 0;
  const bool onesided = c.attr_int("onesided", 0) != 0;
  if (onesided && x.dim(rank - 1) == 2) c.fail("onesided needs real input");
  if (onesided && inverse) c.unsupported("onesided with inverse");
  const int64_t length = c.has(1) ? whole(c, 1, "dft_length", 1) : x.dim(static_cast<int>(axis));
  // The signal axis next to the parts axis, transformed, and moved back.
  std::vector<int64_t> perm;
  for (int64_t a = 0; a < rank - 1; ++a) {
    if (a != axis) perm.push_back(a);
  }
  perm.push_back(axis);
  perm.push_back(rank - 1);
  Tensor y = fourier(c, permute(x, perm), length, inverse, onesided);
  std::vector<int64_t> back(static_cast<size_t>(rank));
  for (int64_t a = 0; a < rank; ++a) back[static_cast<size_t>(perm[static_cast<size_t>(a)])] = a;
  c.out(0, permute(y, back), c.type(0));
}

// STFT: frames of frame_length samples every frame_step, each times the window, transformed.
void convert_stft(NodeContext& c) {
  Tensor signal = c.in(0);
  if (!is_float_type(c.type(0))) c.unsupported(std::string("inputs of ") + elem_type_name(c.type(0)));
  if (signal.rank() != 3 || (signal.dim(2) != 1 && signal.dim(2) != 2)) {
    c.fail("signal must be [batch, length, 1 or 2]");
  }
  const int64_t step = whole(c, 1, "frame_step", 1);
  const bool window = c.has(2);
  int64_t length = 0;
  if (c.has(3)) length = whole(c, 3, "frame_length", 1);
  if (window) {
    if (c.rank(2) != 1) c.fail("window must be one-dimensional");
    if (c.has(3) && c.shape(2)[0] != length) c.fail("window and frame_length disagree");
    length = c.shape(2)[0];
  }
  if (length == 0) c.fail("frame_length or window must be given");
  const int64_t samples = signal.dim(1);
  if (length > samples) c.fail("frame_length exceeds the signal");
  const bool onesided = c.attr_int("onesided", 1) != 0;
  if (onesided && signal.dim(2) == 2) c.fail("onesided needs a real signal");
  const int64_t frames = (samples - length) / step + 1;
  c.host_limit(frames * length, "the frame indices");
  Array index({frames, length}, DType::i32);
  for (int64_t f = 0; f < frames; ++f) {
    for (int64_t j = 0; j < length; ++j) {
      index.data[static_cast<size_t>(f * length + j)] = static_cast<double>(f * step + j);
    }
  }
  Tensor framed = take(signal, c.graph().constant(std::move(index)), 1);  // [B, F, L, parts]
  if (window) framed = framed * reshape(c.in(2), {1, 1, length, 1});
  c.out(0, fourier(c, framed, length, false, onesided), c.type(0));
}

}  // namespace

void add_signal_converters(ConverterTable& t) {
  t.add("HannWindow", [](NodeContext& c) { convert_window(c, 0.5, 0.5, 0.0); });
  t.add("HammingWindow", [](NodeContext& c) { convert_window(c, 25.0 / 46.0, 21.0 / 46.0, 0.0); });
  t.add("BlackmanWindow", [](NodeContext& c) { convert_window(c, 0.42, 0.5, 0.08); });
  t.add("MelWeightMatrix", convert_mel_weight_matrix);
  t.add("DFT", convert_dft);
  t.add("STFT", convert_stft);
}

}  // namespace mn::onnx
