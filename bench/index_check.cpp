// What the device-side index checks cost (SessionOptions::check_indices, on by default): the
// same steps with the checks on and off, in one process, alternating step by step so that both
// see the same machine state.
//   train:  a causal-LM training step (SmolLM2-135M's shape: embedding lookup, its scatter_add
//           gradient, cross_entropy and its backward read token ids), AdamW.
//   decode: a one-token decode step of the same model over a KV cache (the embedding lookup
//           and one cache_write per layer for keys and for values read positions).
// One JSON line per workload: "step_ms_median" (wall clock around submit + wait, set inputs
// and the loss or token readback included) and "gpu_ms_median" (the sum of the kernel
// timestamps) for "checked" and "unchecked", and "overhead_pct" of each. The checks add one
// binding to the kernels that read indices and, after every step, a read of 16 bytes per such
// node (from the mapped arena, or copied by the step on a GPU without resizable BAR).
//
// Usage: bench_index_check [--steps N] [--device D] [--small]
// --small: a 2-layer model of hidden size 64 over 512 tokens, sequence 32, for CPU devices.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meganeura/causal_lm.h>
#include <meganeura/hf.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "bench_util.h"

namespace {

struct Options {
  int steps = 50;
  std::string device;
  bool small = false;
};

mn::LmConfig model(bool small) {
  nlohmann::json j = {
      {"architectures", {"LlamaForCausalLM"}}, {"vocab_size", small ? 512 : 49152},
      {"hidden_size", small ? 64 : 576},       {"intermediate_size", small ? 128 : 1536},
      {"num_hidden_layers", small ? 2 : 30},   {"num_attention_heads", small ? 4 : 9},
      {"num_key_value_heads", small ? 2 : 3},  {"tie_word_embeddings", true}};
  return mn::parse_lm_config(j.dump());
}

std::vector<int32_t> tokens(size_t n, int64_t vocab, std::mt19937_64& rng) {
  std::vector<int32_t> t(n);
  for (auto& v : t) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

// Sessions with the checks on and off over one graph, stepped alternately.
struct Pair {
  std::unique_ptr<mn::Session> session[2];  // 0: checked, 1: unchecked
  std::vector<double> wall[2], gpu[2];

  Pair(const mn::Graph& g, const Options& o) {
    for (int i = 0; i < 2; ++i) {
      mn::SessionOptions so;
      so.device = o.device;
      so.profile = true;
      so.check_indices = i == 0;
      session[i] = mn::build_session(g, so);
    }
  }

  template <class SetInputs>
  void run(const Options& o, SetInputs set_inputs, const char* read) {
    for (int step = -3; step < o.steps; ++step) {  // 3 warm-up steps each
      for (int i = 0; i < 2; ++i) {
        mn::Session& s = *session[i];
        const auto start = std::chrono::steady_clock::now();
        set_inputs(s, step);
        s.step();
        s.get(read);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        if (step < 0) continue;
        wall[i].push_back(ms);
        double kernels = 0;
        for (const auto& k : s.profile()) kernels += k.ms;
        gpu[i].push_back(kernels);
      }
    }
  }

  nlohmann::json report(const std::string& workload) const {
    using mn::bench::median;
    auto pct = [](double on, double off) { return off > 0 ? 100.0 * (on - off) / off : 0.0; };
    return {{"workload", workload},
            {"device", session[0]->device_name()},
            {"checked", {{"step_ms_median", median(wall[0])}, {"gpu_ms_median", median(gpu[0])}}},
            {"unchecked", {{"step_ms_median", median(wall[1])}, {"gpu_ms_median", median(gpu[1])}}},
            {"step_overhead_pct", pct(median(wall[0]), median(wall[1]))},
            {"gpu_overhead_pct", pct(median(gpu[0]), median(gpu[1]))},
            {"dispatches", session[0]->memory().dispatches}};
  }
};

nlohmann::json train(const Options& o) {
  const mn::LmConfig c = model(o.small);
  mn::CausalLmOptions lo;
  lo.batch = o.small ? 2 : 4;
  lo.sequence = o.small ? 32 : 256;
  lo.with_loss = true;
  mn::CausalLm lm = mn::build_causal_lm(c, lo);
  const mn::Optimizer opt = mn::Optimizer::adamw();
  mn::add_training_step(lm.loss, opt);
  Pair p(*lm.graph, o);
  std::mt19937_64 rng(1);
  const size_t n = static_cast<size_t>(lo.batch * lo.sequence);
  p.run(
      o,
      [&](mn::Session& s, int step) {
        const std::vector<int32_t> ids = tokens(n, c.vocab_size, rng);
        s.set("input_ids", ids);
        s.set("labels", ids);
        for (const auto& [name, v] : mn::step_scalars(opt, 1e-4, std::max(step, 0) + 1))
          s.set_scalar(name, v);
      },
      "loss");
  return p.report("train");
}

nlohmann::json decode(const Options& o) {
  const mn::LmConfig c = model(o.small);
  mn::LmStepOptions so;
  so.batch = 1;
  so.max_context = o.small ? 64 : 1024;
  mn::CausalLm lm = mn::build_lm_step(c, so);
  Pair p(*lm.graph, o);
  std::mt19937_64 rng(2);
  p.run(
      o,
      [&](mn::Session& s, int step) {
        const int32_t pos = static_cast<int32_t>((step + 3) % so.max_context);
        s.set("input_ids", tokens(1, c.vocab_size, rng));
        s.set("positions", std::vector<int32_t>{pos});
        s.set("last", std::vector<int32_t>{0});
        s.set_scalar("temperature", 0);
        s.set_scalar("top_k", 0);
        s.set_scalar("top_p", 1);
        s.set_scalar("seed", 1);
        s.set_scalar("step", step + 3);
      },
      "next");
  return p.report("decode");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      o.steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--device") && i + 1 < argc) {
      o.device = argv[++i];
    } else if (!std::strcmp(argv[i], "--small")) {
      o.small = true;
    } else {
      std::fprintf(stderr, "usage: bench_index_check [--steps N] [--device D] [--small]\n");
      return 2;
    }
  }
  if (o.small && o.steps == 50) o.steps = 10;
  for (const auto& result : {train(o), decode(o)}) std::printf("%s\n", result.dump().c_str());
  return 0;
}
