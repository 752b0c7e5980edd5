// `mn whisper-encode` as a user runs it: a Hugging Face Whisper directory (the small random
// encoder of tests/fixtures/whisper, its keys prefixed "model.encoder." as WhisperModel saves
// them) over a clip of the spoken sentence: the hidden states it writes are the library's for
// the same features and weights; bad calls name what is wrong.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include <meganeura/audio.h>
#include <meganeura/data.h>
#include <meganeura/nn.h>
#include <meganeura/session.h>
#include <meganeura/speech.h>
#include <meganeura/tensor_data.h>

#include "support/random_fill.h"
#include "support/run_command.h"
#include "support/scratch_dir.h"

namespace mn {
namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures" / name;
}

// A 16-bit mono WAV of `samples`.
void write_wav(const std::filesystem::path& path, const std::vector<float>& samples, uint32_t rate) {
  std::vector<uint8_t> b;
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  auto tag = [&](const char* s) { b.insert(b.end(), s, s + 4); };
  tag("RIFF");
  put(36 + 2 * samples.size(), 4);
  tag("WAVE");
  tag("fmt ");
  put(16, 4);
  put(1, 2);
  put(1, 2);
  put(rate, 4);
  put(rate * 2, 4);
  put(2, 2);
  put(16, 2);
  tag("data");
  put(2 * samples.size(), 4);
  for (float s : samples) put(static_cast<uint16_t>(static_cast<int16_t>(std::lround(s * 32767.0f))), 2);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()),
                                              static_cast<std::streamsize>(b.size()));
}

const speech::WhisperEncoderConfig kSmall{.num_mel_bins = 80, .d_model = 32, .layers = 2,
                                          .heads = 4, .ffn_dim = 64, .max_source_positions = 50};

struct ModelDir {
  test::ScratchDir dir{"whisper-cli"};
  ModelDir() {
    std::ofstream(dir.path() / "config.json")
        << R"({"model_type": "whisper", "num_mel_bins": 80, "d_model": 32, "encoder_layers": 2,
              "encoder_attention_heads": 4, "encoder_ffn_dim": 64, "max_source_positions": 50})";
    const SafetensorsReader r(fixture("whisper/encoder.safetensors"));
    std::map<std::string, Array> prefixed;
    for (const SafetensorsEntry& e : r.entries()) prefixed["model.encoder." + e.name] = r.array(e.name);
    save_safetensors(dir.path() / "model.safetensors", prefixed);
  }
};

TEST(WhisperCli, EncodesAClipAsTheLibraryDoes) {
  ModelDir m;
  Audio speech = read_wav(fixture("audio/speech_16k.wav"));
  speech.samples.resize(14400);  // 0.9 s: within the encoder's 1-second window
  const auto wav = m.dir.path() / "clip.wav";
  write_wav(wav, speech.samples, 16000);
  const auto out = m.dir.path() / "hidden.npy";
  const test::CommandResult r = test::run_mn({"whisper-encode", wav.string(), "--model",
                                              m.dir.path().string(), "--output", out.string(),
                                              "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["features"], nlohmann::json::parse("[1, 80, 100]"));
  EXPECT_EQ(j["hidden"], nlohmann::json::parse("[1, 50, 32]"));
  EXPECT_NEAR(j["seconds"].get<double>(), 0.9, 1e-9);
  // The library on the file's samples (as the WAV stores them) and the fixture's weights.
  const Audio clip = read_wav(wav);
  Array features = log_mel_spectrogram(clip.samples, 16000, {.pad_to_samples = 16000});
  features.shape.insert(features.shape.begin(), 1);
  auto enc = speech::whisper_encoder(kSmall);
  enc->eval();
  Graph g;
  g.output("y", enc->forward(g.input("x", features.shape)));
  auto s = build_session(g);
  nn::load_state_dict(*enc, *s, fixture("whisper/encoder.safetensors"));
  s->set("x", features);
  s->step();
  const Array written = to_array(read_npy(out), "hidden.npy");
  EXPECT_LT(testing::scaled_error(written, s->get("y")), 1e-6);
}

TEST(WhisperCli, BadCallsSayWhatIsWrong) {
  ModelDir m;
  const std::string dir = m.dir.path().string();
  const std::string speech = fixture("audio/speech_16k.wav").string();
  auto fails_with = [](const test::CommandResult& r, const std::string& says) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  };
  fails_with(test::run_mn({"whisper-encode", speech}), "--model DIR or --size");
  fails_with(test::run_mn({"whisper-encode", speech, "--size", "huge"}), "unknown size 'huge'");
  fails_with(test::run_mn({"whisper-encode", speech, "--model", dir}),
             "longer than the encoder's window of 16000");
  const auto wav44 = m.dir.path() / "fast.wav";
  write_wav(wav44, std::vector<float>(4410, 0.1f), 44100);
  fails_with(test::run_mn({"whisper-encode", wav44.string(), "--model", dir}), "44100 Hz");
  std::filesystem::remove(m.dir.path() / "config.json");
  fails_with(test::run_mn({"whisper-encode", speech, "--model", dir}), "config.json: cannot open");
}

}  // namespace
}  // namespace mn
