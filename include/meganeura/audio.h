#pragma once
// Audio for speech models: WAV files, and Whisper's log-mel spectrogram computed on the CPU
// (a few hundred million multiply-adds for 30 seconds: a fraction of a second, no GPU launch).
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include <meganeura/array.h>

namespace mn {

struct Audio {
  std::vector<float> samples;  // mono, in [-1, 1] for integer files
  int64_t sample_rate = 0;
  int64_t channels = 1;  // in the file; several are averaged into `samples`
};

// RIFF/WAVE with PCM samples of 16, 24 or 32 bits or IEEE floats of 32 bits (also in
// WAVE_FORMAT_EXTENSIBLE), any number of channels, averaged to mono as Whisper's loader downmixes.
// Another encoding, a truncated chunk or a file that is not RIFF/WAVE is an mn::FormatError
// naming the file and what is wrong.
Audio read_wav(const std::filesystem::path& path);

struct LogMelOptions {
  int64_t n_mels = 80;          // 80 (Whisper tiny to large-v2) or 128 (large-v3)
  int64_t sample_rate = 16000;  // the audio's rate must be this (nothing is resampled)
  int64_t n_fft = 400;
  int64_t hop = 160;
  // Zeros appended up to this many samples (Whisper's encoder reads 30 s: 3000 frames); 0: the
  // audio's own length. Longer audio is an error, not cut: split it into windows first.
  int64_t pad_to_samples = 480000;
};

// Whisper's input features, [n_mels, samples / hop] f32, as Hugging Face transformers'
// WhisperFeatureExtractor computes them: frames centred on every hop-th sample (the audio
// reflected at both ends), a periodic Hann window, the power spectrum, Slaney-style mel filters
// from 0 to 8 kHz, log10 of at least 1e-10, floored at 8 below the largest value, then
// (x + 4) / 4. The last frame is dropped, as there. Computed in float64.
Array log_mel_spectrogram(std::span<const float> samples, int64_t sample_rate,
                          const LogMelOptions& options = {});

}  // namespace mn
