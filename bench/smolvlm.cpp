// SmolVLM2-500M answering about one image (the directory bench/smolvlm.py --make writes, so
// both run the same weights): the image's frames encoded (vision tower and connector), the
// prompt with its image tokens prefilled, then greedy decoding, batch 1. Prints one JSON line.
// PyTorch counterpart: bench/smolvlm.py.
//
// Usage: bench_smolvlm MODEL_DIR [--frames 17] [--frames-per-call 17] [--text-tokens 16]
//                      [--new-tokens 32] [--dtype f32|f16|bf16] [--precision f32|bf16|f16]
//                      [--device D] [--profile]
// --profile adds the GPU time of the last vision and prefill steps' kernels, summed by name.
// The prompt is bench/smolvlm.py's: 3 tokens, per frame <fake_token_around_image> and 64
// <image> tokens, then --text-tokens tokens.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"

#include <meganeura/vlm.h>

namespace {

using mn::bench::ms_since;

std::vector<int32_t> prompt_tokens(const mn::SmolVlmConfig& c, int64_t frames, int64_t text) {
  std::vector<int32_t> t{1, 2, 3};
  const auto image = static_cast<int32_t>(c.image_token_id);
  for (int64_t f = 0; f < frames; ++f) {
    t.push_back(image - 1);
    for (int64_t i = 0; i < c.image_seq_len(); ++i) t.push_back(image);
  }
  for (int64_t i = 0; i < text; ++i) t.push_back(static_cast<int32_t>(100 + i));
  return t;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_smolvlm MODEL_DIR [options]\n");
    return 2;
  }
  std::string dir = argv[1], dtype = "f32", precision = "f32", device;
  bool profile = false;
  int64_t frames = 17, per_call = 17, text = 16, new_tokens = 32;
  for (int i = 2; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? argv[++i] : ""; };
    if (!std::strcmp(argv[i], "--frames"))
      frames = std::atoll(next());
    else if (!std::strcmp(argv[i], "--frames-per-call"))
      per_call = std::atoll(next());
    else if (!std::strcmp(argv[i], "--text-tokens"))
      text = std::atoll(next());
    else if (!std::strcmp(argv[i], "--new-tokens"))
      new_tokens = std::atoll(next());
    else if (!std::strcmp(argv[i], "--dtype"))
      dtype = next();
    else if (!std::strcmp(argv[i], "--precision"))
      precision = next();
    else if (!std::strcmp(argv[i], "--device"))
      device = next();
    else if (!std::strcmp(argv[i], "--profile"))
      profile = true;
    else
      throw mn::Error(std::string("bench_smolvlm: unknown option ") + argv[i]);
  }
  const mn::SmolVlmModel model = mn::load_smolvlm(dir);
  const std::vector<int32_t> prompt = prompt_tokens(model.config, frames, text);
  const auto prompt_len = static_cast<int64_t>(prompt.size());
  mn::VlmRunnerOptions o;
  o.lm.dtype = mn::dtype_from_name(dtype);
  o.lm.device = device;
  o.lm.precision = mn::dtype_from_name(precision);
  o.lm.time_steps = true;
  o.lm.profile = profile;
  o.lm.max_context = prompt_len + new_tokens;
  o.lm.prefill_block = prompt_len;
  o.frames_per_call = per_call;
  o.max_image_tokens = frames * model.config.image_seq_len();
  const auto t0 = std::chrono::steady_clock::now();
  auto runner = mn::VlmRunner::create(model, o);
  const double build_ms = ms_since(t0);

  const int64_t side = model.config.vision.image_size;
  mn::SmolVlmImage image;
  image.pixel_values = mn::bench::random_array({frames, 3, side, side}, 7);
  std::vector<double> vision_ms, prefill_ms, decode_ms, ttft_ms;
  for (int r = 0; r < 7; ++r) {
    const auto v0 = std::chrono::steady_clock::now();
    runner->set_image(0, image);
    const double vision = ms_since(v0);
    mn::StopOptions stop;
    stop.max_new_tokens = new_tokens;
    mn::GenerateStats st;
    mn::generate(*runner, {prompt}, {}, stop, {}, {}, &st);
    if (r < 2) continue;
    vision_ms.push_back(vision);
    prefill_ms.push_back(st.prefill_ms);
    ttft_ms.push_back(vision + st.prefill_ms);
    decode_ms.push_back(st.decode_ms / static_cast<double>(std::max<int64_t>(1, st.decode_steps)));
  }
  nlohmann::json j = {{"name", "smolvlm_" + std::filesystem::path(dir).filename().string()},
                      {"impl", "meganeura"},
                      {"precision", dtype},
                      {"products", precision},
                      {"frames", frames},
                      {"frames_per_call", per_call},
                      {"prompt_tokens", prompt_len},
                      {"new_tokens", new_tokens},
                      {"vision_ms", mn::bench::median(vision_ms)},
                      {"vision_step_gpu_ms", runner->step_gpu_ms("vision")},
                      {"prefill_ms", mn::bench::median(prefill_ms)},
                      {"prefill_step_gpu_ms", runner->step_gpu_ms("prefill")},
                      {"ttft_ms", mn::bench::median(ttft_ms)},
                      {"ms_per_token", mn::bench::median(decode_ms)},
                      {"build_ms", build_ms},
                      {"arena_mib", static_cast<double>(runner->memory().arena_bytes) / (1 << 20)},
                      {"device", runner->device_name()}};
  for (const mn::ProgramMemory& p : runner->memory().programs) j["dispatches_" + p.name] = p.dispatches;
  if (profile) {
    for (const char* program : {"vision", "prefill"}) {
      double total = 0;
      for (const mn::KernelTotal& k : mn::kernel_totals(runner->profile(program))) {
        total += k.ms;
        if (j[std::string(program) + "_kernels"].size() < 12)
          j[std::string(program) + "_kernels"].push_back({k.name, k.ms, k.count});
      }
      j[std::string(program) + "_gpu_ms"] = total;
    }
  }
  std::cout << j.dump() << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_smolvlm: %s\n", e.what());
  return 1;
}
