// Audio: WAV reading (PCM of 16, 24 and 32 bits, 32-bit float, WAVE_FORMAT_EXTENSIBLE, channels
// averaged) with its errors, and Whisper's log-mel features against Hugging Face transformers'
// WhisperFeatureExtractor on a spoken sentence (tests/fixtures/audio/make_audio_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <meganeura/audio.h>
#include <meganeura/error.h>
#include <meganeura/tensor_data.h>

#include "support/scratch_dir.h"

namespace mn {
namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/audio" / name;
}

Array npy(const std::string& name) { return to_array(read_npy(fixture(name)), name); }

double max_abs_difference(const Array& a, const Array& b, int64_t b_frames, int64_t first = 0) {
  // a: [mels, frames_a]; b: [mels, b_frames], compared with a's frames [first, first + b_frames).
  const int64_t mels = a.shape[0], frames_a = a.shape[1];
  double worst = 0;
  for (int64_t m = 0; m < mels; ++m) {
    for (int64_t t = 0; t < b_frames; ++t) {
      worst = std::max(worst, std::abs(a.data[static_cast<size_t>(m * frames_a + first + t)] -
                                       b.data[static_cast<size_t>(m * b_frames + t)]));
    }
  }
  return worst;
}

TEST(Audio, ReadsTheSpokenSentence) {
  const Audio a = read_wav(fixture("speech_16k.wav"));
  EXPECT_EQ(a.sample_rate, 16000);
  EXPECT_EQ(a.channels, 1);
  ASSERT_EQ(a.samples.size(), 32869u);
  float peak = 0;
  for (float v : a.samples) peak = std::max(peak, std::abs(v));
  EXPECT_GT(peak, 0.1f);
  EXPECT_LE(peak, 1.0f);
}

// Features of the sentence's own length (transformers' padding="longest") at 80 and 128 mel
// bins, and of the 30-second window Whisper's encoder reads.
TEST(Audio, LogMelMatchesWhisperFeatureExtractor) {
  const Audio a = read_wav(fixture("speech_16k.wav"));
  for (const int64_t mels : {80, 128}) {
    SCOPED_TRACE(mels);
    const Array want = npy("mel" + std::to_string(mels) + ".npy");
    const Array got = log_mel_spectrogram(a.samples, a.sample_rate,
                                          {.n_mels = mels, .pad_to_samples = 0});
    ASSERT_EQ(got.shape, want.shape);
    EXPECT_LT(max_abs_difference(got, want, want.shape[1]), 1e-4);
  }
  const Array full = log_mel_spectrogram(a.samples, a.sample_rate);
  ASSERT_EQ(full.shape, (Shape{80, 3000}));
  EXPECT_LT(max_abs_difference(full, npy("mel80_30s_head.npy"), 300), 1e-4);
  EXPECT_LT(max_abs_difference(full, npy("mel80_30s_tail.npy"), 1, 2999), 1e-4);
}

// A WAV file of `frames` frames written byte by byte: `bits` per sample, `tag` 1 (PCM), 3
// (float) or 0xFFFE (extensible, the sub-format `sub`).
std::vector<uint8_t> wav_bytes(uint16_t tag, uint16_t channels, uint16_t bits, uint32_t rate,
                               const std::vector<uint8_t>& data, uint16_t sub = 1) {
  std::vector<uint8_t> b;
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  auto tag4 = [&](const char* s) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(s[i]));
  };
  const uint32_t fmt_size = tag == 0xFFFE ? 40 : 16;
  tag4("RIFF");
  put(4 + 8 + fmt_size + 8 + data.size(), 4);
  tag4("WAVE");
  tag4("fmt ");
  put(fmt_size, 4);
  put(tag, 2);
  put(channels, 2);
  put(rate, 4);
  put(rate * channels * bits / 8, 4);
  put(channels * bits / 8, 2);
  put(bits, 2);
  if (tag == 0xFFFE) {
    put(22, 2);
    put(bits, 2);
    put(0, 4);
    put(sub, 2);
    for (int i = 0; i < 14; ++i) b.push_back(0);
  }
  tag4("data");
  put(data.size(), 4);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::filesystem::path write(const test::ScratchDir& dir, const std::string& name,
                            const std::vector<uint8_t>& bytes) {
  const auto path = dir.path() / name;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  return path;
}

TEST(Audio, ReadsEveryEncodingAndAveragesChannels) {
  test::ScratchDir dir("audio");
  // 24-bit stereo: frames (0.5, -0.5) and (-1, 0.25) average to 0 and -0.375.
  std::vector<uint8_t> d24;
  for (int32_t v : {0x400000, -0x400000, -0x800000, 0x200000}) {
    for (int i = 0; i < 3; ++i) d24.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  Audio a = read_wav(write(dir, "s24.wav", wav_bytes(1, 2, 24, 22050, d24)));
  EXPECT_EQ(a.channels, 2);
  EXPECT_EQ(a.sample_rate, 22050);
  EXPECT_EQ(a.samples, (std::vector<float>{0.0f, -0.375f}));
  // 32-bit float in WAVE_FORMAT_EXTENSIBLE, and 32-bit PCM.
  std::vector<uint8_t> df(8);
  const float fl[2] = {0.75f, -0.125f};
  std::memcpy(df.data(), fl, 8);
  a = read_wav(write(dir, "f32.wav", wav_bytes(0xFFFE, 1, 32, 16000, df, 3)));
  EXPECT_EQ(a.samples, (std::vector<float>{0.75f, -0.125f}));
  std::vector<uint8_t> d32 = {0, 0, 0, 0x40, 0, 0, 0, 0xC0};
  a = read_wav(write(dir, "s32.wav", wav_bytes(1, 1, 32, 16000, d32)));
  EXPECT_EQ(a.samples, (std::vector<float>{0.5f, -0.5f}));
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& says) {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << says[0];
  } catch (const Error& e) {
    for (const std::string& s : says) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

TEST(Audio, BadFilesAndInputsSayWhatIsWrong) {
  test::ScratchDir dir("audio-bad");
  const std::vector<uint8_t> two = {1, 0, 2, 0};
  expect_error([&] { read_wav(dir.path() / "missing.wav"); }, {"missing.wav", "cannot open"});
  expect_error([&] { read_wav(write(dir, "text.wav", {'h', 'e', 'l', 'l', 'o'})); },
               {"text.wav", "not a RIFF/WAVE file"});
  std::vector<uint8_t> cut = wav_bytes(1, 1, 16, 16000, two);
  cut.resize(cut.size() - 2);
  expect_error([&] { read_wav(write(dir, "cut.wav", cut)); }, {"cut.wav", "'data' chunk", "truncated"});
  expect_error([&] { read_wav(write(dir, "u8.wav", wav_bytes(1, 1, 8, 16000, two))); },
               {"u8.wav", "8 bits are not supported"});
  expect_error([&] { read_wav(write(dir, "alaw.wav", wav_bytes(6, 1, 16, 16000, two))); },
               {"alaw.wav", "format 6"});
  const std::vector<uint8_t> three = {1, 0, 2, 0, 3, 0};
  expect_error([&] { read_wav(write(dir, "odd.wav", wav_bytes(1, 2, 16, 16000, three))); },
               {"odd.wav", "6 bytes are not whole frames of 4 bytes"});
  const std::vector<float> second(16000, 0.1f);
  expect_error([&] { log_mel_spectrogram(second, 44100); }, {"44100 Hz", "16000 Hz"});
  expect_error([&] { log_mel_spectrogram(second, 16000, {.pad_to_samples = 8000}); },
               {"16000 samples exceed the 8000"});
  expect_error([&] { log_mel_spectrogram(std::vector<float>(100, 0.f), 16000, {.pad_to_samples = 0}); },
               {"100 samples"});
}

}  // namespace
}  // namespace mn
