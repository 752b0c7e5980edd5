// Whisper's log-mel spectrogram on the CPU, in float64: the steps of transformers'
// WhisperFeatureExtractor (audio_utils.spectrogram and mel_filter_bank with Slaney's mel scale
// and normalization).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include <meganeura/audio.h>
#include <meganeura/error.h>

namespace mn {

namespace {

// Slaney's mel scale: linear below 1 kHz, logarithmic above.
double hz_to_mel(double hz) {
  constexpr double kMinLogHz = 1000.0, kMinLogMel = 15.0;
  const double logstep = 27.0 / std::log(6.4);
  return hz < kMinLogHz ? 3.0 * hz / 200.0 : kMinLogMel + std::log(hz / kMinLogHz) * logstep;
}
double mel_to_hz(double mel) {
  constexpr double kMinLogHz = 1000.0, kMinLogMel = 15.0;
  const double logstep = std::log(6.4) / 27.0;
  return mel < kMinLogMel ? 200.0 * mel / 3.0 : kMinLogHz * std::exp(logstep * (mel - kMinLogMel));
}

// [bins][n_mels]: triangles between mel-spaced corner frequencies from 0 to sample_rate / 2,
// each scaled by 2 / its width in Hz (Slaney's area normalization).
std::vector<double> mel_filters(int64_t bins, int64_t n_mels, double sample_rate) {
  const double lo = hz_to_mel(0.0), hi = hz_to_mel(sample_rate / 2.0);
  std::vector<double> corners(static_cast<size_t>(n_mels + 2));
  for (int64_t i = 0; i < n_mels + 2; ++i) {
    corners[static_cast<size_t>(i)] =
        mel_to_hz(lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(n_mels + 1));
  }
  std::vector<double> f(static_cast<size_t>(bins * n_mels), 0.0);
  for (int64_t k = 0; k < bins; ++k) {
    const double hz = sample_rate / 2.0 * static_cast<double>(k) / static_cast<double>(bins - 1);
    for (int64_t m = 0; m < n_mels; ++m) {
      const double left = corners[static_cast<size_t>(m)], mid = corners[static_cast<size_t>(m + 1)],
                   right = corners[static_cast<size_t>(m + 2)];
      const double down = (hz - left) / (mid - left), up = (right - hz) / (right - mid);
      const double w = std::max(0.0, std::min(down, up));
      f[static_cast<size_t>(k * n_mels + m)] = w * 2.0 / (right - left);
    }
  }
  return f;
}

void check_options(std::span<const float> samples, int64_t rate, const LogMelOptions& o) {
  if (o.n_mels < 1 || o.n_fft < 2 || o.hop < 1 || o.sample_rate < 1 || o.pad_to_samples < 0) {
    throw Error("log_mel_spectrogram: n_mels, n_fft, hop and sample_rate must be positive, "
                "pad_to_samples not negative");
  }
  if (rate != o.sample_rate) {
    throw Error("log_mel_spectrogram: the audio is at " + std::to_string(rate) +
                " Hz, the features need " + std::to_string(o.sample_rate) +
                " Hz (resample it first, e.g. sox IN -r " + std::to_string(o.sample_rate) + " OUT)");
  }
  if (o.pad_to_samples > 0 && static_cast<int64_t>(samples.size()) > o.pad_to_samples) {
    throw Error("log_mel_spectrogram: " + std::to_string(samples.size()) + " samples exceed the " +
                std::to_string(o.pad_to_samples) +
                " of one window (split the audio into windows, or pad_to_samples = 0)");
  }
}

}  // namespace

Array log_mel_spectrogram(std::span<const float> samples, int64_t sample_rate,
                          const LogMelOptions& o) {
  check_options(samples, sample_rate, o);
  const int64_t length = o.pad_to_samples > 0 ? o.pad_to_samples
                                              : static_cast<int64_t>(samples.size());
  const int64_t half = o.n_fft / 2;
  if (length <= half) {
    throw Error("log_mel_spectrogram: " + std::to_string(length) + " samples; reflecting a frame " +
                "of " + std::to_string(o.n_fft) + " at the ends needs more than " +
                std::to_string(half));
  }
  // The audio zero-padded to `length`, then reflected by n_fft / 2 at both ends (the frames are
  // centred on every hop-th sample).
  std::vector<double> x(static_cast<size_t>(length + 2 * half), 0.0);
  auto audio = [&](int64_t i) {
    return i < static_cast<int64_t>(samples.size()) ? static_cast<double>(samples[static_cast<size_t>(i)])
                                                    : 0.0;
  };
  for (int64_t i = 0; i < length; ++i) x[static_cast<size_t>(half + i)] = audio(i);
  for (int64_t i = 1; i <= half; ++i) {
    x[static_cast<size_t>(half - i)] = audio(i);
    x[static_cast<size_t>(half + length - 1 + i)] = audio(length - 1 - i);
  }
  const int64_t bins = o.n_fft / 2 + 1;
  // Frames centred on samples 0, hop, 2·hop, ... of the reflected audio; the last is dropped.
  const int64_t frames = (length + 2 * half - o.n_fft) / o.hop;
  // The periodic Hann window and the DFT's tables.
  const double two_pi = 2.0 * std::numbers::pi;
  std::vector<double> window(static_cast<size_t>(o.n_fft));
  for (int64_t n = 0; n < o.n_fft; ++n) {
    window[static_cast<size_t>(n)] =
        0.5 - 0.5 * std::cos(two_pi * static_cast<double>(n) / static_cast<double>(o.n_fft));
  }
  std::vector<double> cosines(static_cast<size_t>(bins * o.n_fft)),
      sines(static_cast<size_t>(bins * o.n_fft));
  for (int64_t k = 0; k < bins; ++k) {
    for (int64_t n = 0; n < o.n_fft; ++n) {
      const double angle =
          two_pi * static_cast<double>((k * n) % o.n_fft) / static_cast<double>(o.n_fft);
      cosines[static_cast<size_t>(k * o.n_fft + n)] = std::cos(angle);
      sines[static_cast<size_t>(k * o.n_fft + n)] = std::sin(angle);
    }
  }
  const std::vector<double> filters = mel_filters(bins, o.n_mels, static_cast<double>(o.sample_rate));
  Array out({o.n_mels, frames}, DType::f32);
  std::vector<double> frame(static_cast<size_t>(o.n_fft)), power(static_cast<size_t>(bins));
  double top = -1e300;
  for (int64_t t = 0; t < frames; ++t) {
    for (int64_t n = 0; n < o.n_fft; ++n) {
      frame[static_cast<size_t>(n)] = x[static_cast<size_t>(t * o.hop + n)] * window[static_cast<size_t>(n)];
    }
    for (int64_t k = 0; k < bins; ++k) {
      const double* c = cosines.data() + k * o.n_fft;
      const double* s = sines.data() + k * o.n_fft;
      double re = 0, im = 0;
      for (int64_t n = 0; n < o.n_fft; ++n) {
        re += frame[static_cast<size_t>(n)] * c[n];
        im += frame[static_cast<size_t>(n)] * s[n];
      }
      power[static_cast<size_t>(k)] = re * re + im * im;
    }
    for (int64_t m = 0; m < o.n_mels; ++m) {
      double mel = 0;
      for (int64_t k = 0; k < bins; ++k) {
        mel += filters[static_cast<size_t>(k * o.n_mels + m)] * power[static_cast<size_t>(k)];
      }
      const double v = std::log10(std::max(mel, 1e-10));
      out.data[static_cast<size_t>(m * frames + t)] = v;
      top = std::max(top, v);
    }
  }
  for (double& v : out.data) {
    v = static_cast<double>(static_cast<float>((std::max(v, top - 8.0) + 4.0) / 4.0));
  }
  return out;
}

}  // namespace mn
