// A generation request resolved against generation_config.json.
#include <meganeura/generation_options.h>

#include <algorithm>
#include <cmath>

namespace mn {

SamplingOptions resolve_sampling(const GenerationRequest& r, const GenerationConfig& g,
                                 const GenerationOptionNames& names) {
  SamplingOptions s;
  // Unset, the model's own choice: sampling with its parameters when generation_config.json
  // says do_sample, else greedy.
  s.temperature = r.temperature.value_or(g.do_sample ? g.temperature : 0.0);
  s.top_k = r.top_k.value_or(g.do_sample ? g.top_k : 0);
  s.top_p = r.top_p.value_or(g.do_sample ? g.top_p : 1.0);
  s.seed = r.seed;
  if (!std::isfinite(s.temperature) || s.temperature < 0) {
    throw Error(std::string(names.temperature) + " must be a finite number >= 0 (got " +
                std::to_string(s.temperature) + ")");
  }
  if (s.top_k < 0) {
    throw Error(std::string(names.top_k) + " must be >= 0 (got " + std::to_string(s.top_k) + ")");
  }
  if (!(s.top_p > 0 && s.top_p <= 1)) {
    throw Error(std::string(names.top_p) + " must be in (0, 1] (got " + std::to_string(s.top_p) +
                ")");
  }
  return s;
}

StopOptions resolve_stop(const GenerationRequest& r, const GenerationConfig& g,
                         const Tokenizer& tokenizer, int64_t room,
                         const GenerationOptionNames& names) {
  StopOptions s;
  if (r.max_new_tokens < 0) {
    throw Error(std::string(names.max_new_tokens) + " must be positive (got " +
                std::to_string(r.max_new_tokens) + ")");
  }
  s.max_new_tokens = r.max_new_tokens > 0
                         ? r.max_new_tokens
                         : g.max_new_tokens.value_or(std::clamp<int64_t>(room, 1, 256));
  s.stop_ids = tokenizer.stop_ids();
  for (int64_t id : g.eos_token_id) s.stop_ids.push_back(static_cast<int32_t>(id));
  std::sort(s.stop_ids.begin(), s.stop_ids.end());
  s.stop_ids.erase(std::unique(s.stop_ids.begin(), s.stop_ids.end()), s.stop_ids.end());
  for (const std::string& t : r.stop) {
    if (t.empty()) throw Error(std::string(names.stop) + ": the stop text is empty");
    s.stop_strings.push_back(t);
  }
  return s;
}

}  // namespace mn
