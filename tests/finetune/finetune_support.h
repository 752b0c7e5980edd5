#pragma once
// Shared pieces of the fine-tuning tests: fixture model paths, scratch files, and the logits a
// set of parameters gives on fixed input ids.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <meganeura/causal_lm.h>
#include <meganeura/finetune.h>
#include <meganeura/session.h>

#include "support/scratch_dir.h"

namespace mn::testing {

using ScratchDir = test::ScratchDir;

// The message of the mn::Error that `fn` throws, or "(no error)".
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline std::filesystem::path lm_fixture(const std::string& name) {
  return std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/lm/models" / name;
}

// A text of several documents with repeated sentences: enough windows of 16 tokens for a few
// batches.
inline std::string training_text() {
  std::string t;
  for (int i = 0; i < 6; ++i) {
    t += "The quick brown fox jumps over the lazy dog. A stitch in time saves nine.\n";
    t += "def add(a, b):\n    return a + b\n\n";
  }
  return t;
}

inline FinetuneOptions small_options(const std::filesystem::path& model,
                                     const std::filesystem::path& text) {
  FinetuneOptions o;
  o.model_dir = model;
  o.text = text;
  o.sequence = 16;
  o.batch = 2;
  o.optimizer.lr = 3e-3;
  o.steps = 2;
  return o;
}

// Input ids [1, 16] fixed for logits comparisons.
inline std::vector<int32_t> probe_ids() {
  std::vector<int32_t> ids;
  for (int i = 0; i < 16; ++i) ids.push_back((i * 37 + 11) % 600);
  return ids;
}

// The logits of the model with these parameters (every one the graph has) on probe_ids().
inline Array logits_with(const LmConfig& config, const std::map<std::string, Array>& params,
                         const LoraOptions& lora = {}) {
  CausalLmOptions o;
  o.sequence = 16;
  o.lora = lora;
  CausalLm lm = build_causal_lm(config, o);
  auto s = build_session(*lm.graph);
  for (const std::string& n : s->parameter_names()) s->set(n, params.at(n));
  s->set("input_ids", probe_ids());
  s->step();
  return s->get("logits");
}

inline std::map<std::string, Array> parameters_of(const Session& s) {
  std::map<std::string, Array> out;
  for (const std::string& n : s.parameter_names()) out[n] = s.get(n);
  return out;
}

}  // namespace mn::testing
