// `mn whisper-encode AUDIO.wav (--model DIR | --size S) [--output OUT.npy] [--device D] [--json]`:
// Whisper's encoder over a WAV file's 30-second log-mel window: the weights of a Hugging Face
// Whisper directory (config.json and model.safetensors; the encoder's tensors, keyed
// "model.encoder.*" or bare) or random ones of an openai/whisper size. Writes the hidden
// states [1, positions, d_model] as .npy and reports the times.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include <meganeura/audio.h>
#include <meganeura/data.h>
#include <meganeura/session.h>
#include <meganeura/speech.h>
#include <meganeura/tensor_data.h>

#include "commands.h"
#include "wall_time.h"
#include "module_weights.h"
#include "io/json_fields.h"

namespace mn::cli {

namespace {

struct WhisperArgs {
  std::string audio, model, size, output, device;
  bool json = false;
};

speech::WhisperEncoderConfig config_of(const std::filesystem::path& dir) {
  const auto path = dir / "config.json";
  const io::JsonFields f(io::read_text_file(path), path.string());
  return {.num_mel_bins = f.required_int("num_mel_bins"), .d_model = f.required_int("d_model"),
          .layers = f.required_int("encoder_layers"),
          .heads = f.required_int("encoder_attention_heads"),
          .ffn_dim = f.required_int("encoder_ffn_dim"),
          .max_source_positions = f.required_int("max_source_positions")};
}

void run_whisper_encode(const WhisperArgs& a) {
  if (a.model.empty() == a.size.empty()) {
    throw Error("mn whisper-encode: give --model DIR or --size tiny|base|small|medium, one of them");
  }
  const std::filesystem::path dir(a.model);
  const speech::WhisperEncoderConfig config =
      a.model.empty() ? speech::whisper_encoder_config(a.size) : config_of(dir);
  const auto t0 = Clock::now();
  const Audio audio = read_wav(a.audio);
  LogMelOptions mel;
  mel.n_mels = config.num_mel_bins;
  mel.pad_to_samples = 2 * config.max_source_positions * mel.hop;
  if (static_cast<int64_t>(audio.samples.size()) > mel.pad_to_samples) {
    throw Error(a.audio + ": " + std::to_string(audio.samples.size()) +
                " samples are longer than the encoder's window of " +
                std::to_string(mel.pad_to_samples) + " (" +
                std::to_string(config.max_source_positions) +
                " positions); split the audio into windows");
  }
  Array features;
  try {
    features = log_mel_spectrogram(audio.samples, audio.sample_rate, mel);
  } catch (const Error& e) {
    throw Error(a.audio + ": " + e.what());
  }
  features.shape.insert(features.shape.begin(), 1);
  const double mel_ms = ms_since(t0);

  auto encoder = speech::whisper_encoder(config);
  encoder->eval();
  Graph g;
  g.output("hidden", encoder->forward(g.input("features", features.shape)));
  SessionOptions so;
  so.device = a.device;
  if (!a.model.empty()) {
    for (const nn::StateEntry& e : encoder->state_entries()) so.preset.insert(e.graph_name);
  }
  const auto t1 = Clock::now();
  auto session = build_session(g, so);
  if (!a.model.empty()) {
    nn::load_state_dict(*encoder, *session,
                        module_weights(*encoder, dir / "model.safetensors", "model.encoder."));
  }
  const double build_ms = ms_since(t1);
  session->set("features", features);
  const auto t2 = Clock::now();
  session->step();
  const Array hidden = session->get("hidden");
  const double encode_ms = ms_since(t2);
  if (!a.output.empty()) write_npy(a.output, from_array(hidden));
  const nlohmann::json out = {{"audio", a.audio},
                              {"seconds", static_cast<double>(audio.samples.size()) /
                                              static_cast<double>(audio.sample_rate)},
                              {"features", features.shape},
                              {"hidden", hidden.shape},
                              {"mel_ms", mel_ms},
                              {"build_ms", build_ms},
                              {"encode_ms", encode_ms},
                              {"device", session->device_name()}};
  if (a.json) {
    std::cout << out.dump() << std::endl;
  } else {
    std::printf("%s: %.2f s of audio -> features [1, %lld, %lld] -> hidden states [1, %lld, %lld]\n",
                a.audio.c_str(), out["seconds"].get<double>(),
                static_cast<long long>(features.shape[1]), static_cast<long long>(features.shape[2]),
                static_cast<long long>(hidden.shape[1]), static_cast<long long>(hidden.shape[2]));
    std::printf("log-mel %.1f ms, build %.1f ms, encoder %.1f ms on %s\n", mel_ms, build_ms,
                encode_ms, session->device_name().c_str());
  }
}

}  // namespace

void add_whisper_encode_command(CLI::App& app) {
  auto a = std::make_shared<WhisperArgs>();
  auto* cmd = app.add_subcommand(
      "whisper-encode", "run Whisper's encoder on a WAV file (16 kHz) padded to its 30 s window");
  cmd->add_option("audio", a->audio, "a WAV file at 16 kHz (PCM or float, any channels)")
      ->required();
  cmd->add_option("--model", a->model,
                  "a Hugging Face Whisper directory (config.json, model.safetensors)");
  cmd->add_option("--size", a->size, "random weights of openai/whisper-SIZE: tiny, base, small, medium");
  cmd->add_option("--output", a->output, "write the hidden states as .npy");
  cmd->add_option("--device", a->device,
                  "device index or name substring (default: $MN_DEVICE or the best)");
  cmd->add_flag("--json", a->json, "one JSON object on standard output");
  cmd->callback([a] { run_whisper_encode(*a); });
}

}  // namespace mn::cli
